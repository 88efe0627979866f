//! Many clusters from one host, on real API servers: the shared control
//! plane is the cluster `default`, a private one is the member `b`, and a
//! third cluster never answers. One host process (one [`Fleet`]) runs the
//! greeter in both live clusters; the one that is down, restarted or
//! disengaged holds up only itself.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_host::serve::fleet::Fleet;
use capstan_host::serve::host::HostBuilder;
use capstan_host::testing::find_component;
use capstan_tests::{
    ControlPlane, PrivateControlPlane, TestNamespace, capstan_binary, free_port, greeting, greeting_ready, greetings,
    http_get, wait_for,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A kubeconfig for an API server that never answers (nothing listens on
/// its port).
fn unreachable_kubeconfig(dir: &Path) -> Result<std::path::PathBuf> {
    let port = free_port()?;
    let path = dir.join(format!("unreachable-{port}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\n\
         users:\n- name: nobody\n  user:\n    token: nothing\ncontexts:\n- name: gone\n  context:\n    cluster: gone\n    user: nobody\n\
         current-context: gone\n"
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Creates namespace `name` in the cluster of `client`.
async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    api.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}}))?).await?;
    Ok(())
}

/// Creates Greeting `name` (once the host has installed the CRD in that
/// cluster) and waits until the greeter reports it ready.
async fn converges(client: &kube::Client, ns: &str, name: &str, within: Duration) -> Result<()> {
    let api = greetings(client, ns);
    wait_for(within, || async { api.create(&PostParams::default(), &greeting(name, "hi", 1)).await.ok() })
        .await
        .with_context(|| format!("Greeting {ns}/{name} could not be created (is its CRD installed?)"))?;
    wait_for(within, || async { api.get(name).await.ok().filter(|g| greeting_ready(g, 1)) })
        .await
        .with_context(|| format!("Greeting {ns}/{name} did not converge"))
        .map(drop)
}

/// A fleet whose hosts run the greeter in namespace `ns`, on one runtime.
fn greeter_fleet(ns: &str) -> Result<Fleet> {
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;
    let runtime = HostBuilder::new_runtime(Default::default(), 0, false)?;
    let ns = ns.to_owned();
    Ok(Fleet::new(move |client| {
        HostBuilder::new(client)
            .runtime(Some(runtime.clone()))
            .namespace(Some(ns.clone()))
            .install_crds(true)
            .component(&greeter)
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn one_fleet_serves_two_clusters_and_a_member_down_holds_up_only_itself() -> Result<()> {
    let home = TestNamespace::new("fleet").await?;
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    // The member's namespace has the home one's name: one `-n` serves both.
    namespace(&member_client, home.name()).await?;
    let fleet = greeter_fleet(home.name())?;
    let dir = std::env::temp_dir();
    let unreachable = unreachable_kubeconfig(&dir)?;
    let home_client = home.client();
    let started = fleet.engage("default", async move { Ok(home_client) });
    let member_started = fleet.engage("b", {
        let client = member_client.clone();
        async move { Ok(client) }
    });
    let _never = fleet
        .engage("gone", async move { capstan_host::tooling::cli::connect_with_retry(Some(&unreachable), None).await });
    started.await?.context("the home cluster starts")?;
    member_started.await?.context("the member starts")?;

    // Both live clusters converge while a third never answers.
    converges(&home.client(), home.name(), "home-1", TIMEOUT).await?;
    converges(&member_client, home.name(), "member-1", TIMEOUT).await?;
    let reasons = fleet.readiness().expect_err("a cluster that never answers keeps the fleet unready");
    assert_eq!(reasons, vec!["cluster gone: host: starting (connecting to the API server)".to_owned()]);
    let doc = fleet.status_document();
    let states: Vec<(&str, &str)> = doc["clusters"]
        .as_array()
        .context("clusters")?
        .iter()
        .map(|c| (c["name"].as_str().unwrap_or_default(), c["state"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(states, [("b", "running"), ("default", "running"), ("gone", "connecting")]);
    let component_clusters: Vec<&Value> =
        doc["components"].as_array().context("components")?.iter().map(|c| &c["cluster"]).collect();
    assert_eq!(component_clusters, [&json!("b"), &json!("default")], "each cluster runs the greeter once");

    // The member's API server down for a while: the home cluster keeps
    // reconciling, and the member catches up when it returns.
    let restart = member.restart_apiserver(Duration::from_secs(15));
    let during = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        converges(&home.client(), home.name(), "home-during", Duration::from_secs(12)).await
    };
    let (restarted, during) = tokio::join!(restart, during);
    restarted?;
    during.context("the home cluster converges while the member is down")?;
    converges(&member_client, home.name(), "member-after", TIMEOUT).await?;

    // Disengaged, the member is no longer served; engaged again, it is.
    assert!(fleet.disengage("b").await);
    assert!(fleet.host("b").is_none());
    let api = greetings(&member_client, home.name());
    api.create(&PostParams::default(), &greeting("member-unserved", "hi", 1)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let unserved = api.get("member-unserved").await?;
    assert!(!greeting_ready(&unserved, 1), "a disengaged cluster is not reconciled: {:?}", unserved.data["status"]);
    let again = fleet.engage("b", {
        let client = member_client.clone();
        async move { Ok(client) }
    });
    again.await?.context("the member starts again")?;
    wait_for(TIMEOUT, || async { api.get("member-unserved").await.ok().filter(|g| greeting_ready(g, 1)) })
        .await
        .context("the member is served again once engaged again")?;

    fleet.shutdown().await;
    assert!(fleet.names().is_empty());
    home.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn capstan_run_serves_every_cluster_it_is_given() -> Result<()> {
    let home = TestNamespace::new("fleet-run").await?;
    let plane = ControlPlane::shared().await?;
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    namespace(&member_client, home.name()).await?;
    let dir = std::env::temp_dir().join(format!("capstan-fleet-{}", capstan_tests::random_suffix(8)));
    std::fs::create_dir_all(&dir)?;
    let unreachable = unreachable_kubeconfig(&dir)?;
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;
    let port = free_port()?;
    let mut child = tokio::process::Command::new(capstan_binary().await?)
        .arg("run")
        .arg(&greeter)
        .args(["--install-crds", "-n", home.name(), "--listen", &format!("127.0.0.1:{port}")])
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_path())
        .arg("--cluster")
        .arg(format!("b={}", member.plane().kubeconfig_path().display()))
        .arg("--cluster")
        .arg(format!("gone={}", unreachable.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("host.log"))?)
        .kill_on_drop(true)
        .spawn()?;
    converges(&home.client(), home.name(), "home-1", TIMEOUT).await?;
    converges(&member_client, home.name(), "member-1", TIMEOUT).await?;
    let (code, body) = http_get(port, "/readyz").await?;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("cluster gone: host: starting (connecting to the API server)"), "{body}");
    let (_, status) = http_get(port, "/status").await?;
    let doc: Value = serde_json::from_str(&status)?;
    let clusters: Vec<&str> =
        doc["clusters"].as_array().context("clusters")?.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(clusters, ["b", "default", "gone"]);
    // The same controller in two clusters: series of its own in each (they
    // once shared one queue gauge, the last cluster's).
    let (_, scrape) = http_get(port, "/metrics").await?;
    for cluster in ["default", "b"] {
        for series in [
            format!(r#"capstan_queue_depth{{cluster="{cluster}",controller="greeter"}}"#),
            format!(r#"capstan_reconcile_total{{cluster="{cluster}",controller="greeter","#),
            format!(r#"capstan_controllers{{cluster="{cluster}",state="running"}}"#),
        ] {
            assert!(scrape.lines().any(|l| l.starts_with(&series)), "{series} missing in\n{scrape}");
        }
    }
    assert!(
        !scrape.contains(r#"capstan_reconcile_total{cluster="gone""#),
        "the cluster that never came up reconciled nothing"
    );
    assert!(child.try_wait()?.is_none(), "the host keeps running");
    child.kill().await?;

    // A cluster named twice, or named `default`, is refused before anything starts.
    for args in [["--cluster", "default=x"], ["--cluster", "Bad=x"]] {
        let out = tokio::process::Command::new(capstan_binary().await?)
            .arg("run")
            .arg(&greeter)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await?;
        assert!(!out.status.success(), "{args:?} is refused");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--cluster"), "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    home.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn kubeconfig_secrets_engage_rotate_and_disengage_clusters() -> Result<()> {
    use capstan_host::serve::fleet::secrets::{self, Source};
    use k8s_openapi::api::core::v1::Secret;
    let home = TestNamespace::new("fleet-secrets").await?;
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    namespace(&member_client, home.name()).await?;
    let fleet = std::sync::Arc::new(greeter_fleet(home.name())?);
    let home_client = home.client();
    fleet.engage("default", async move { Ok(home_client) }).await?.context("the home cluster starts")?;
    let source = Source { namespace: home.name().to_owned(), selector: None };
    let follow = secrets::follow(std::sync::Arc::clone(&fleet), home.client(), source);

    let kubeconfig = std::fs::read_to_string(member.plane().kubeconfig_path())?;
    let secret = |name: &str, text: &str| -> Result<Secret> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"value": text}}))?)
    };
    let secrets_api: Api<Secret> = home.api();
    secrets_api.create(&PostParams::default(), &secret("b-kubeconfig", &kubeconfig)?).await?;
    // A kubeconfig that would run a command in the host is never engaged.
    let exec = kubeconfig.replace(
        "  user:\n",
        "  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/true\n",
    );
    secrets_api.create(&PostParams::default(), &secret("evil-kubeconfig", &exec)?).await?;
    let engaged = wait_for(TIMEOUT, || async { fleet.host("b") }).await.context("the Secret's cluster is engaged")?;
    converges(&member_client, home.name(), "via-secret", TIMEOUT).await?;
    assert_eq!(fleet.names(), ["b", "default"], "the exec kubeconfig is refused");

    // Rotated credentials: a changed kubeconfig engages the cluster again.
    let rotated = secret("b-kubeconfig", &format!("{kubeconfig}\n# rotated\n"))?;
    secrets_api.replace("b-kubeconfig", &PostParams::default(), &rotated).await?;
    wait_for(TIMEOUT, || async { fleet.host("b").filter(|h| !std::sync::Arc::ptr_eq(h, &engaged)) })
        .await
        .context("a changed kubeconfig engages the cluster again")?;
    converges(&member_client, home.name(), "after-rotation", TIMEOUT).await?;

    // The Secret gone, the cluster is disengaged; back, it is engaged again.
    secrets_api.delete("b-kubeconfig", &Default::default()).await?;
    wait_for(TIMEOUT, || async { (!fleet.names().contains(&"b".to_owned())).then_some(()) })
        .await
        .context("a deleted Secret disengages its cluster")?;
    secrets_api.create(&PostParams::default(), &secret("b-kubeconfig", &kubeconfig)?).await?;
    wait_for(TIMEOUT, || async { fleet.host("b") }).await.context("a re-created Secret engages its cluster")?;

    follow.abort();
    fleet.shutdown().await;
    home.cleanup().await
}
