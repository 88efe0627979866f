//! `capstan e2e`: the scenario folders `capstan test` runs on the mock host,
//! run by the binary against the real API server (tests/control-plane/cp.sh):
//! the greeter's, a cluster-scoped controller that manages RBAC (tenant),
//! webhooks, and a scheduler's (zone-scheduler in Rust and JavaScript, with
//! Nodes that have no kubelet); and a scenario that does not hold fails
//! with a diff and exit code 1. In process: a run compiles its component once, whatever
//! its number of cases.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail, ensure};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, PrivateControlPlane, capstan_binary, toolchain_path};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `capstan e2e <component> <scenarios> ARGS`: exit code and stdout.
async fn e2e(component: &str, scenarios: &Path, args: &[&str]) -> Result<(i32, String)> {
    let plane = ControlPlane::shared().await?;
    let component = find_component(component).map_err(anyhow::Error::msg)?;
    let out = tokio::process::Command::new(capstan_binary().await?)
        .arg("e2e")
        .arg(&component)
        .arg(scenarios)
        .args(args)
        .env("KUBECONFIG", plane.kubeconfig_path())
        .output()
        .await
        .context("running capstan e2e")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code().unwrap_or(-1), stdout))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_examples_scenarios_hold_on_the_api_server_too() -> Result<()> {
    for (component, scenarios, cases) in [
        ("greeter", "examples/greeter/scenarios", 2),
        ("tenant", "examples/tenant/scenarios", 1),
        ("greeter-webhooks", "examples/greeter-webhooks/scenarios", 9),
    ] {
        // A step holds as soon as it does; 90 s leaves room for the
        // namespace controller's backoff when the tenant's Namespace goes.
        let (code, out) = e2e(component, &repo().join(scenarios), &["--timeout", "90"]).await?;
        ensure!(code == 0, "{component}: exit code {code}:\n{out}");
        ensure!(out.contains(&format!("{cases} passed, 0 failed")), "{component}:\n{out}");
    }
    Ok(())
}

/// How many loads `capstan_component_compile_seconds` counted from
/// `source` in this process (the other tests here run the binary).
fn compiles(source: &str) -> f64 {
    let series = format!("capstan_component_compile_seconds_count{{source=\"{source}\"}} ");
    let scrape = capstan_host::metrics::metrics().encode();
    scrape.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_e2e_run_compiles_its_component_once_with_winch_and_loads_it_from_the_cache_after() -> Result<()> {
    let client = ControlPlane::shared().await?.client()?;
    let cache = std::env::temp_dir().join(format!("capstan-e2e-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let options = capstan_host::tooling::e2e::Options { cache_dir: Some(cache.clone()), ..Default::default() };
    let greeter = find_component("greeter").map_err(anyhow::Error::msg)?;
    let before = ["baseline", "compiled", "cache"].map(compiles);
    let results =
        capstan_host::tooling::e2e::run_all(client, &greeter, &repo().join("examples/greeter/scenarios"), &options)
            .await?;
    let after = ["baseline", "compiled", "cache"].map(compiles);
    let _ = std::fs::remove_dir_all(&cache);
    ensure!(results.len() == 2 && results.iter().all(|r| r.mismatches.is_empty()), "{results:?}");
    let counted: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    ensure!(
        counted == [1.0, 0.0, 1.0],
        "two cases: one Winch compile, no cranelift compile, one cache load; counted {counted:?} (baseline, compiled, cache)"
    );
    Ok(())
}

/// A case that stubs outbound HTTP fails on a cluster without running (its
/// requests would reach the real services) and says where to run it.
#[tokio::test(flavor = "multi_thread")]
async fn a_case_that_stubs_outbound_http_is_refused_on_a_cluster_naming_capstan_test() -> Result<()> {
    let client = ControlPlane::shared().await?.client()?;
    let silences = find_component("silences").map_err(anyhow::Error::msg)?;
    let options = capstan_host::tooling::e2e::Options::default();
    let results =
        capstan_host::tooling::e2e::run_all(client, &silences, &repo().join("examples/silences/scenarios"), &options)
            .await?;
    ensure!(results.len() == 2, "{results:?}");
    for case in &results {
        ensure!(
            case.mismatches.len() == 1
                && case.mismatches[0].contains("only the mock host can (run this case with `capstan test`)"),
            "{}: {:?}",
            case.name,
            case.mismatches
        );
    }
    ensure!(results[0].mismatches[0].starts_with("http.yaml: "), "{:?}", results[0].mismatches);
    Ok(())
}

/// A case with objects in a cluster the run was not given fails without
/// running, naming the file, the cluster and what to pass.
#[tokio::test(flavor = "multi_thread")]
async fn a_case_in_a_cluster_not_given_is_refused_naming_what_to_pass() -> Result<()> {
    let client = ControlPlane::shared().await?.client()?;
    let fixture = find_component("fixture").map_err(anyhow::Error::msg)?;
    let options = capstan_host::tooling::e2e::Options::default();
    let cases = repo().join("tests/fixtures/scenarios/two-clusters");
    let results = capstan_host::tooling::e2e::run_all(client, &fixture, &cases, &options).await?;
    ensure!(results.len() == 1, "{results:?}");
    ensure!(
        results[0].mismatches
            == [
                r#"given.yaml: puts an object in cluster "west", which this run was not given (pass --cluster west=KUBECONFIG, or run this case with `capstan test`)"#
            ],
        "{:?}",
        results[0].mismatches
    );
    Ok(())
}

/// The fleet example's scenario, on three API servers: `capstan e2e
/// --cluster west=… --cluster east=…` runs the fleet controller in the
/// shared cluster and places its marked children in the two members, as
/// the mock host does for `capstan test`.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_scenario_holds_on_three_api_servers() -> Result<()> {
    let (west, east) = tokio::try_join!(PrivateControlPlane::start(false), PrivateControlPlane::start(false))?;
    let mut args = vec!["--timeout".to_owned(), "60".to_owned()];
    for (name, plane) in [("west", &west), ("east", &east)] {
        args.push("--cluster".to_owned());
        args.push(format!("{name}={}", plane.plane().kubeconfig_path().display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out) = e2e("fleet", &repo().join("examples/fleet/scenarios"), &args).await?;
    ensure!(code == 0, "exit code {code}:\n{out}");
    ensure!(out.contains("1 passed, 0 failed"), "{out}");
    // The case's namespaces go with it, in the members too.
    for (name, plane) in [("west", &west), ("east", &east)] {
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(plane.plane().client()?);
        let left: Vec<String> = namespaces
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter_map(|n| n.metadata.name)
            .filter(|n| n == "demo" || n.starts_with("e2e-"))
            .collect();
        ensure!(left.is_empty(), "{name} keeps {left:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scenario_that_does_not_hold_fails_with_a_diff_and_exit_code_1() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-e2e-wrong-{}", std::process::id()));
    let case = dir.join("wrong-replicas");
    std::fs::create_dir_all(&case)?;
    std::fs::copy(repo().join("examples/greeter/scenarios/lifecycle/given.yaml"), case.join("given.yaml"))?;
    std::fs::write(
        case.join("expect.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: hello-greeter, namespace: demo}\nspec: {replicas: 5}\n",
    )?;
    let (code, out) = e2e("greeter", &dir, &["--timeout", "5"]).await?;
    std::fs::remove_dir_all(&dir)?;
    ensure!(code == 1, "exit code {code}:\n{out}");
    ensure!(out.contains("scenario wrong-replicas ... FAILED"), "{out}");
    ensure!(out.contains("still not so after 5s"), "{out}");
    ensure!(
        out.contains(
            "expect.yaml: apps/v1/Deployment <case namespace>/hello-greeter: at .spec.replicas: expected 5, got 2"
        ),
        "{out}"
    );
    ensure!(out.contains("0 passed, 1 failed"), "{out}");
    // The Greeting the case created carries the greeter's finalizer: e2e
    // deletes it while the controller still runs, so nothing is left to
    // hold the case's namespace in Terminating.
    let client = ControlPlane::shared().await?.client()?;
    let greetings: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        client,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "examples.capstan.dev",
            "v1alpha1",
            "Greeting",
        )),
    );
    let left = greetings.list(&ListParams::default()).await?;
    let left: Vec<String> = left
        .items
        .iter()
        .filter_map(|g| g.metadata.namespace.clone())
        .filter(|ns| ns.starts_with("e2e-wrong-replicas-"))
        .collect();
    ensure!(left.is_empty(), "Greetings left behind in {left:?}");
    Ok(())
}

/// The first directory named `name` below `dir`.
fn find_dir(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if entry.file_type().ok()?.is_dir() {
            let path = entry.path();
            if entry.file_name() == name {
                return Some(path);
            }
            if let Some(found) = find_dir(&path, name) {
                return Some(found);
            }
        }
    }
    None
}

/// What a Python or JavaScript project made by `capstan new` promises its
/// author: building the same source again gives the same component (byte
/// for byte), the build leaves no `__pycache__` in the project or its SDK,
/// and the scaffolded unit tests pass under pytest / node's test runner
/// with the SDK's fake host.
fn guest_project_checks(lang: &str, project: &Path, component: &Path, path: &str) -> Result<()> {
    let first = std::fs::read(component)?;
    let again = std::process::Command::new("sh").arg("build.sh").current_dir(project).env("PATH", path).output()?;
    ensure!(again.status.success(), "{lang}: second build: {}", String::from_utf8_lossy(&again.stderr));
    ensure!(std::fs::read(component)? == first, "{lang}: the same source built twice gave two different components");
    if let Some(cache) = find_dir(project, "__pycache__") {
        bail!("{lang}: the build wrote {}", cache.display());
    }
    let tests = if lang == "python" {
        let tool = path.split(':').map(|d| Path::new(d).join("componentize-py")).find(|p| p.is_file());
        let tool = tool.context("componentize-py is not in the toolchains")?;
        std::process::Command::new("python3")
            .args(["-m", "pytest", "-q"])
            .current_dir(project)
            .env("COMPONENTIZE_PY", tool)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()?
    } else {
        // What `npm install` makes of the `file:` dependency, without the network.
        std::fs::create_dir_all(project.join("node_modules"))?;
        std::os::unix::fs::symlink("../capstan-sdk/guest-sdk/js", project.join("node_modules/capstan-guest"))?;
        std::process::Command::new("node")
            .args(["--import", "capstan-guest/testing/register", "--test", "test/app.test.js"])
            .current_dir(project)
            .output()?
    };
    let report = format!("{}{}", String::from_utf8_lossy(&tests.stdout), String::from_utf8_lossy(&tests.stderr));
    ensure!(tests.status.success(), "{lang}: the scaffolded unit tests fail:\n{report}");
    let passed = if lang == "python" { report.contains("2 passed") } else { report.contains("# pass 2") };
    ensure!(passed, "{lang}: expected two passing unit tests:\n{report}");
    Ok(())
}

/// From zero, as a user with only the binary, in each language: `capstan
/// new` in a folder outside any checkout (the SDK comes from the binary,
/// into `capstan-sdk/`), the project's own build, and `capstan e2e` of its
/// scenarios on the control plane.
#[tokio::test(flavor = "multi_thread")]
async fn projects_made_outside_a_checkout_build_and_pass_their_scenarios_on_the_api_server() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let capstan = capstan_binary().await?;
    let home = std::env::temp_dir().join(format!("capstan-from-zero-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home)?;
    ensure!(capstan_host::tooling::scaffold::find_checkout(&home).is_none(), "{} is inside a checkout", home.display());
    // The workspace's target folder: the Rust dependencies are built there
    // for wasm32-wasip2 already.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().context("CARGO_TARGET_TMPDIR is <target>/tmp")?;
    let path = toolchain_path()?;

    for (lang, name, component) in [
        ("rust", "zero-rust", target.join("wasm32-wasip2/release/zero_rust.wasm")),
        ("python", "zero-python", home.join("zero-python/zero-python.wasm")),
        ("js", "zero-js", home.join("zero-js/zero-js.wasm")),
    ] {
        let out =
            std::process::Command::new(&capstan).args(["new", name, "--lang", lang]).current_dir(&home).output()?;
        ensure!(out.status.success(), "capstan new --lang {lang}: {}", String::from_utf8_lossy(&out.stderr));
        let project = home.join(name);
        ensure!(
            capstan_host::tooling::scaffold::is_sdk(&project.join("capstan-sdk/guest-sdk")),
            "{lang}: no capstan-sdk/"
        );
        if lang == "rust" {
            let cargo_toml = std::fs::read_to_string(project.join("Cargo.toml"))?;
            ensure!(cargo_toml.contains("capstan-guest = { path = \"capstan-sdk/guest-sdk\" }"), "{cargo_toml}");
        }
        let build = if lang == "rust" {
            std::process::Command::new(env!("CARGO"))
                .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
                .current_dir(&project)
                .env("CARGO_TARGET_DIR", target)
                .output()?
        } else {
            std::process::Command::new("sh").arg("build.sh").current_dir(&project).env("PATH", &path).output()?
        };
        ensure!(
            build.status.success() && component.is_file(),
            "{lang}: the project made outside a checkout does not build:\n{}{}",
            String::from_utf8_lossy(&build.stdout),
            String::from_utf8_lossy(&build.stderr)
        );

        if lang == "rust" {
            // Its unit tests, natively, through capstan_guest::testing.
            let test = std::process::Command::new(env!("CARGO"))
                .args(["test", "--quiet"])
                .current_dir(&project)
                .env("CARGO_TARGET_DIR", target)
                .output()?;
            ensure!(
                test.status.success() && String::from_utf8_lossy(&test.stdout).contains("2 passed"),
                "rust: cargo test of the project made outside a checkout:\n{}{}",
                String::from_utf8_lossy(&test.stdout),
                String::from_utf8_lossy(&test.stderr)
            );
        } else {
            guest_project_checks(lang, &project, &component, &path)?;
        }

        let out = tokio::process::Command::new(&capstan)
            .arg("e2e")
            .arg(&component)
            .arg("scenarios")
            .current_dir(&project)
            .env("KUBECONFIG", plane.kubeconfig_path())
            .output()
            .await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{lang}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        ensure!(out.status.success(), "{lang}: capstan e2e: {stdout}");
        ensure!(stdout.contains("scenario basic ... ok") && stdout.contains("2 passed, 0 failed"), "{lang}: {stdout}");
    }
    std::fs::remove_dir_all(&home)?;
    Ok(())
}

/// The zone-scheduler's scenarios.
const ZONE_SCENARIOS: [&str; 3] = ["cordoned-and-not-ready", "spread-fit-and-retry", "taints-and-tolerations"];

/// Whether `name` is one of the zone-scheduler scenarios' Nodes as `capstan
/// e2e` names them on the cluster (`n-a-<random>`).
fn a_zone_scenario_node(name: &str) -> bool {
    ["n-a-", "n-b-", "n-c-", "n-gpu-", "n-drain-", "n-spot-", "n-off-", "n-down-"]
        .iter()
        .any(|p| name.strip_prefix(p).is_some_and(|s| s.len() == 6))
}

/// A scheduler sees every Node of the cluster, those of another case
/// too: the scheduler cases run one after the other, in one test.
#[tokio::test(flavor = "multi_thread")]
async fn scheduler_scenarios_hold_on_the_api_server() -> Result<()> {
    the_zone_scenarios_hold_and_leave_no_node_or_bound_pod_behind().await?;
    a_scenario_node_stays_ready_past_the_node_monitor_grace_period().await
}

/// A scheduler's scenarios on the API server: the case's Nodes get names
/// of their own, and the Event notes naming them and the Pods' namespace
/// are expected with the names on the cluster; afterwards the Pods bound
/// to those Nodes (which no kubelet will ever confirm stopped) are gone at
/// once, and so are the Nodes and their Leases.
async fn the_zone_scenarios_hold_and_leave_no_node_or_bound_pod_behind() -> Result<()> {
    let scenarios = repo().join("examples/zone-scheduler/scenarios");
    for component in ["zone-scheduler", "zone-scheduler-js"] {
        let (code, out) = e2e(component, &scenarios, &[]).await?;
        ensure!(code == 0, "{component}: exit code {code}:\n{out}");
        for case in ZONE_SCENARIOS {
            ensure!(out.contains(&format!("scenario {case} ... ok")), "{component}: {case}:\n{out}");
        }
        ensure!(out.contains("3 passed, 0 failed"), "{component}:\n{out}");
    }
    let client = ControlPlane::shared().await?.client()?;
    let nodes = kube::Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
    let nodes: Vec<String> = nodes.items.into_iter().filter_map(|n| n.metadata.name).collect();
    ensure!(!nodes.iter().any(|n| a_zone_scenario_node(n)), "the case's Nodes are left: {nodes:?}");
    let leases = kube::Api::<Lease>::namespaced(client.clone(), "kube-node-lease").list(&ListParams::default()).await?;
    let leases: Vec<String> = leases.items.into_iter().filter_map(|n| n.metadata.name).collect();
    ensure!(!leases.iter().any(|n| a_zone_scenario_node(n)), "the case's Node Leases are left: {leases:?}");
    let pods = kube::Api::<Pod>::all(client).list(&ListParams::default()).await?;
    let left: Vec<String> = pods
        .items
        .iter()
        .filter(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or_default();
            ZONE_SCENARIOS.iter().any(|case| ns.starts_with(&format!("e2e-{case}-")))
        })
        .filter_map(|p| Some(format!("{}/{}", p.metadata.namespace.as_deref()?, p.metadata.name.as_deref()?)))
        .collect();
    ensure!(left.is_empty(), "the case's Pods are left (bound ones wait for a kubelet): {left:?}");
    Ok(())
}

/// A case's Node has no kubelet: `capstan e2e` renews its Lease, so
/// kube-controller-manager's node lifecycle controller does not mark it
/// `Unknown` (and taint it unreachable) after its node monitor grace period
/// (50 s): a step after a minute still schedules there. The step between
/// waits for something that never comes, so this case fails with exactly
/// that.
async fn a_scenario_node_stays_ready_past_the_node_monitor_grace_period() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-e2e-steady-{}", std::process::id()));
    let case = dir.join("steady-node");
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: demo}}\nspec:\n  schedulerName: zone-spread\n  \
             containers: [{{name: app, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m}}}}}}]\n"
        )
    };
    let bound = |name: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: demo}}\nspec: {{nodeName: steady}}\n")
    };
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: steady, labels: {topology.kubernetes.io/zone: a}}\n\
                status:\n  allocatable: {cpu: \"2\", memory: 1Gi, pods: \"10\"}\n  \
                capacity: {cpu: \"2\", memory: 1Gi, pods: \"10\"}\n  conditions: [{type: Ready, status: \"True\"}]\n";
    for (file, text) in [
        ("given.yaml", format!("{node}---\n{}", pod("first"))),
        ("expect.yaml", bound("first")),
        (
            "steps/01-a-minute/expect.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: never, namespace: demo}\n".to_owned(),
        ),
        ("steps/02-later/apply.yaml", pod("second")),
        (
            "steps/02-later/expect.yaml",
            format!(
                "{}---\napiVersion: v1\nkind: Node\nmetadata: {{name: steady}}\nspec: {{taints: null}}\n\
                 status: {{conditions: [{{type: Ready, status: \"True\"}}]}}\n",
                bound("second")
            ),
        ),
    ] {
        let path = case.join(file);
        std::fs::create_dir_all(path.parent().context("a folder")?)?;
        std::fs::write(path, text)?;
    }
    let (code, out) = e2e("zone-scheduler", &dir, &["--timeout", "60"]).await?;
    std::fs::remove_dir_all(&dir)?;
    ensure!(code == 1, "exit code {code}:\n{out}");
    ensure!(out.contains("steps/01-a-minute/expect.yaml: v1/ConfigMap <case namespace>/never: not found"), "{out}");
    ensure!(!out.contains("steps/02-later/"), "the Node did not stay Ready for a minute:\n{out}");
    Ok(())
}
