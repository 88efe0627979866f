//! `capstan e2e` runs that touch nothing cluster-wide, so they run beside
//! any other suite (`e2e_command` holds those that install webhook
//! configurations, Tenants or Nodes): a scenario that does not hold fails
//! with a diff and exit code 1; cases the cluster cannot run (stubbed
//! outbound HTTP, a cluster not given) are refused naming why; projects
//! made by `capstan new` outside a checkout build and pass their scenarios
//! in each language. In process: a run compiles its component once,
//! whatever its number of cases.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail, ensure};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, capstan_binary, e2e, repo, toolchain_path};
use kube::api::ListParams;

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
    // The lifecycle case waits for the garbage collector, which watches a
    // kind installed moments ago only from its next resync (30 s).
    let options = capstan_host::tooling::e2e::Options {
        cache_dir: Some(cache.clone()),
        timeout: std::time::Duration::from_secs(90),
        ..Default::default()
    };
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
