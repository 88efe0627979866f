//! Operating the host, on the real API server: `capstan run` as a process
//! of its own serves `/healthz`, `/readyz`, `/metrics` and `/status`,
//! hot-loads a new version without restarting, and reports rejections; and
//! two hosts with leader election share the work of a controller: one
//! reconciles, the other takes over when it dies.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use capstan_host::control::leader::LeaseSettings;
use capstan_host::serve::host::{Host, HostBuilder};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, PrivateControlPlane, TestNamespace, capstan_binary, free_port, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);

fn component(name: &str) -> PathBuf {
    find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

fn greetings(client: &Client, ns: &str) -> Api<DynamicObject> {
    capstan_tests::greetings(client, ns)
}

fn greeting(name: &str) -> Result<DynamicObject> {
    Ok(capstan_tests::greeting(name, &format!("hello {name}"), 1))
}

fn ready(g: &DynamicObject) -> bool {
    g.data["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == json!("Ready") && c["status"] == json!("True")))
}

/// `GET path` on 127.0.0.1:`port`: status code and body.
async fn get(port: u16, path: &str) -> Result<(u16, String)> {
    capstan_tests::http_get(port, path).await
}

/// The sum of the samples in a scrape whose series (name and labels, as
/// exposed) starts with `series`; 0 if there are none.
fn sample(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// `capstan status` against the host on `port`, with extra arguments.
async fn capstan_status(binary: &Path, port: u16, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(binary)
        .args(["status", "--url", &format!("http://127.0.0.1:{port}")])
        .args(args)
        .output()
        .await?;
    ensure!(out.status.success(), "capstan status failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?)
}

async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_process_serves_probes_metrics_and_status_and_hot_loads_without_restarting() -> Result<()> {
    // A control plane of its own: the Greeting CRD must not exist yet.
    let private = PrivateControlPlane::start(false).await?;
    let client = private.plane().client()?;
    create_namespace(&client, "ops").await?;
    let dir = tempdir("ops")?;
    let greeter_file = dir.join("greeter.wasm");
    std::fs::copy(component("greeter"), &greeter_file)?;
    std::fs::copy(component("fixture"), dir.join("fixture.wasm"))?;

    let binary = capstan_binary().await?;
    let port = free_port()?;
    let log = std::fs::File::create(dir.with_extension("log"))?;
    let mut child = tokio::process::Command::new(&binary)
        .args(["run", "--components"])
        .arg(&dir)
        .args(["-n", "ops", "--listen", &format!("127.0.0.1:{port}"), "--leader-elect"])
        .args(["--leader-election-namespace", "ops", "--instance", "ops-host", "--kubeconfig"])
        .arg(private.plane().kubeconfig_path())
        .env("CAPSTAN_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("the host runs")?;

    // Alive at once; not ready while the greeter waits for its kind.
    wait_for(TIMEOUT, || async { get(port, "/healthz").await.ok().filter(|(c, _)| *c == 200) }).await?;
    // First "host: starting" (connecting, loading), then the greeter waits.
    let (code, body) = wait_for(TIMEOUT, || async {
        get(port, "/readyz").await.ok().filter(|(_, body)| !body.contains("host: starting"))
    })
    .await?;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("greeter: waiting for kinds"), "{body}");
    let status: Value = serde_json::from_str(&get(port, "/status").await?.1)?;
    assert_eq!(status["ready"], json!(false), "{status}");

    // The CRD arrives: ready.
    let crd = serde_json::from_str::<Value>(&capstan_inspect_crd(&binary, &greeter_file).await?)?;
    capstan_tests::install_crd(&client, crd).await?;
    wait_for(Duration::from_secs(60), || async { get(port, "/readyz").await.ok().filter(|(c, _)| *c == 200) })
        .await
        .context("ready once the kind is served")?;

    // Metrics follow the work: reconciles, and a trapping guest.
    let before = get(port, "/metrics").await?.1;
    let api = greetings(&client, "ops");
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &greeting(name)?).await?;
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "ops");
    let trap: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "trap"}, "data": {"behaviour": "trap"}}))?;
    cms.create(&PostParams::default(), &trap).await?;
    for name in ["a", "b", "c"] {
        wait_for(TIMEOUT, || async { api.get(name).await.ok().filter(ready) }).await?;
    }
    let traps = r#"capstan_guest_traps_total{cluster="default",controller="fixture",kind="trap"}"#;
    // The greeter asks to be requeued after each success (its resync).
    let greeter_ok = [
        r#"capstan_reconcile_total{cluster="default",controller="greeter",result="success"}"#,
        r#"capstan_reconcile_total{cluster="default",controller="greeter",result="requeue_after"}"#,
    ];
    let ok = |m: &str| greeter_ok.iter().map(|s| sample(m, s)).sum::<f64>();
    // Counted once each reconcile returns, just after it wrote the status.
    let after = wait_for(TIMEOUT, || async {
        let m = get(port, "/metrics").await.ok()?.1;
        (sample(&m, traps) > sample(&before, traps) && ok(&m) >= ok(&before) + 3.0).then_some(m)
    })
    .await
    .context("the greeter's reconciles and the fixture's trap are counted")?;
    assert_eq!(sample(&after, r#"capstan_controllers{cluster="default",state="running"}"#), 2.0, "{after}");
    assert!(after.contains("# TYPE capstan_reconcile_time_seconds histogram"), "{after}");

    // A new version lands (written to a temporary name and renamed): same
    // process, every Greeting converges to v2's output.
    let staged = dir.join(".greeter.wasm.tmp");
    std::fs::copy(component("greeter-v2"), &staged)?;
    std::fs::rename(&staged, &greeter_file)?;
    for name in ["a", "b", "c"] {
        wait_for(TIMEOUT, || async {
            let cm = cms.get(&format!("{name}-greeting")).await.ok()?;
            (cm.data?.get("greeter-version")? == "2").then_some(())
        })
        .await
        .with_context(|| format!("{name} converged to v2"))?;
    }
    ensure!(child.try_wait()?.is_none() && child.id() == Some(pid), "the host process was not restarted");
    let status: Value = serde_json::from_str(&capstan_status(&binary, port, &["-o", "json"]).await?)?;
    let greeter = status["components"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == json!("greeter")))
        .context("greeter in the status")?;
    assert_eq!(greeter["swaps"], json!(1), "{greeter}");
    assert_eq!(greeter["leading"], json!(true), "the only replica leads: {greeter}");
    assert_eq!(greeter["failed"], json!(0), "{greeter}");

    // A broken build: rejected, reported in the status, log and metrics;
    // v2 serves on.
    let rejected = r#"capstan_component_loads_total{result="rejected",reason="core_module"}"#;
    let rejected_before = sample(&get(port, "/metrics").await?.1, rejected);
    std::fs::write(&greeter_file, b"\0asm\x01\0\0\0")?;
    let table = wait_for(TIMEOUT, || async {
        capstan_status(&binary, port, &[]).await.ok().filter(|t| t.contains("core_module: "))
    })
    .await
    .context("the rejection shows in `capstan status`")?;
    assert!(table.lines().any(|l| l.starts_with("greeter.wasm") && l.contains("running")), "{table}");
    assert_eq!(sample(&get(port, "/metrics").await?.1, rejected), rejected_before + 1.0);
    api.create(&PostParams::default(), &greeting("d")?).await?;
    wait_for(TIMEOUT, || async {
        let cm = cms.get("d-greeting").await.ok()?;
        (cm.data?.get("greeter-version")? == "2").then_some(())
    })
    .await
    .context("v2 still serves")?;

    // SIGTERM: a clean exit.
    let killed = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
    ensure!(killed.success(), "kill -TERM failed");
    let exit = tokio::time::timeout(TIMEOUT, child.wait()).await.context("the host exits on SIGTERM")??;
    assert!(exit.success(), "{exit:?}");
    // Its Leases were released on the way out: a standby would not wait.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "ops");
    for controller in ["greeter", "fixture"] {
        let lease = leases.get(&format!("capstan-{controller}")).await?;
        let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        assert!(holder.is_empty(), "{controller}'s Lease still held by {holder}");
    }
    let logged = std::fs::read_to_string(dir.with_extension("log"))?;
    assert!(logged.contains("component rejected"), "{logged}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
    Ok(())
}

/// The greeter's CRD, as `capstan gen crd` prints it (YAML), as JSON text.
async fn capstan_inspect_crd(binary: &Path, component: &Path) -> Result<String> {
    let out = tokio::process::Command::new(binary).args(["gen", "crd"]).arg(component).output().await?;
    ensure!(out.status.success(), "capstan gen crd failed: {}", String::from_utf8_lossy(&out.stderr));
    let yaml: Value = serde_yaml_ng::from_slice(&out.stdout)?;
    Ok(yaml.to_string())
}

fn tempdir(name: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("capstan-{name}-{}", capstan_tests::random_suffix(6)));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A host running the greeter with leader election as `identity`.
async fn elected_host(ns: &TestNamespace, identity: &str) -> Result<Host> {
    let lease = LeaseSettings::new(ns.name(), identity).timing(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    );
    Ok(HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .instance(Some(identity.to_owned()))
        .leader_election(Some(lease))
        .component(component("greeter"))
        .start()
        .await?)
}

fn leading(host: &Host) -> Option<bool> {
    host.status().first().and_then(|s| s.leading)
}

/// The replicas (`reportingInstance`) that recorded Events about `name`.
async fn reporters(ns: &TestNamespace, name: &str) -> Vec<String> {
    let api: Api<Event> = ns.api();
    let list = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let mut out: Vec<String> = list
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reporting_instance)
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn with_two_hosts_one_reconciles_and_the_other_takes_over_when_it_dies() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("leader").await?;
    let a = elected_host(&ns, "replica-a").await?;
    wait_for(TIMEOUT, || async { (leading(&a) == Some(true)).then_some(()) }).await.context("a leads")?;
    let b = elected_host(&ns, "replica-b").await?;
    wait_for(TIMEOUT, || async { (b.status().first()?.state == "standby").then_some(()) })
        .await
        .context("b stands by")?;
    assert_eq!(leading(&b), Some(false));

    let api = greetings(&ns.client(), ns.name());
    for name in ["one", "two"] {
        api.create(&PostParams::default(), &greeting(name)?).await?;
    }
    for name in ["one", "two"] {
        wait_for(TIMEOUT, || async { api.get(name).await.ok().filter(ready) }).await?;
    }
    let b_greeter = b.controller("greeter").context("b runs the greeter")?;
    assert_eq!(b_greeter.counts().succeeded + b_greeter.counts().failed, 0, "the standby reconciled nothing");
    // Counted once each reconcile returns, just after it wrote the status.
    let a_greeter = a.controller("greeter").context("a runs the greeter")?;
    wait_for(TIMEOUT, || async { (a_greeter.counts().succeeded >= 2).then_some(()) })
        .await
        .context("a reconciled both")?;
    drop(a_greeter);
    // No object is written by both: while a leads, only a records Events.
    for name in ["one", "two"] {
        wait_for(TIMEOUT, || async { (!reporters(&ns, name).await.is_empty()).then_some(()) }).await?;
        assert_eq!(reporters(&ns, name).await, ["replica-a"], "{name}");
    }

    // a dies without releasing its Lease (dropped, not shut down).
    let died = tokio::time::Instant::now();
    drop(a);
    for name in ["three", "four"] {
        api.create(&PostParams::default(), &greeting(name)?).await?;
    }
    wait_for(TIMEOUT, || async { (leading(&b) == Some(true)).then_some(()) }).await.context("b takes over")?;
    let takeover = died.elapsed();
    // Lease 3 s + one retry period 0.5 s, with slack for a loaded machine.
    assert!(takeover < Duration::from_secs(3) + Duration::from_millis(500) + Duration::from_secs(3), "{takeover:?}");
    for name in ["three", "four"] {
        wait_for(TIMEOUT, || async { api.get(name).await.ok().filter(ready) }).await?;
    }
    // Objects created after a died are b's alone. (b, the new leader, also
    // reconciles one and two again, as `added`: it has not handled them.)
    for name in ["three", "four"] {
        // An Event is recorded after the status that makes it Ready.
        wait_for(TIMEOUT, || async { (!reporters(&ns, name).await.is_empty()).then_some(()) }).await?;
        let by = reporters(&ns, name).await;
        if by != ["replica-b"] {
            bail!("Events about {name} were recorded by {by:?}, expected only replica-b");
        }
    }
    b.shutdown().await;
    ns.cleanup().await
}
