//! `capstan e2e`: the scenario folders `capstan test` runs on the mock host,
//! run by the binary against the real API server (tests/control-plane/cp.sh):
//! the greeter's, a cluster-scoped controller that manages RBAC (tenant),
//! and webhooks; and a scenario that does not hold fails with a diff and
//! exit code 1.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, capstan_binary};

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
        ("greeter-webhooks", "examples/greeter-webhooks/scenarios", 7),
    ] {
        let (code, out) = e2e(component, &repo().join(scenarios), &[]).await?;
        ensure!(code == 0, "{component}: exit code {code}:\n{out}");
        ensure!(out.contains(&format!("{cases} passed, 0 failed")), "{component}:\n{out}");
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
    Ok(())
}
