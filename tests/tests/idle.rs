//! An idle host costs nothing, on the real API server: `capstan run
//! --components DIR` as a process of its own, one component loaded,
//! nothing changing, uses next to no CPU. Its directory watch looks again
//! on changes only, not on the opens and reads its own looks make.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::testing::find_component;
use capstan_tests::{TestNamespace, capstan_binary, cpu_seconds, free_port, http_get, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How long the host is watched while idle.
const IDLE: Duration = Duration::from_secs(10);
/// The most CPU an idle host may use: 1 % of one core.
const IDLE_CPU: f64 = 0.01;

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_host_following_a_components_directory_uses_under_one_percent_of_a_core() -> Result<()> {
    let ns = TestNamespace::new("idle").await?;
    let plane = capstan_tests::ControlPlane::shared().await?;
    let dir = std::env::temp_dir().join(format!("capstan-idle-{}", capstan_tests::random_suffix(8)));
    std::fs::create_dir_all(&dir)?;
    let fixture: PathBuf = find_component("fixture").map_err(anyhow::Error::msg)?;
    std::fs::copy(&fixture, dir.join("fixture.wasm"))?;

    let port = free_port()?;
    let log = std::fs::File::create(dir.with_extension("log"))?;
    // Cranelift at load (no background compile later), and a compile cache
    // of its own, so what is measured is the host at rest.
    let mut child = tokio::process::Command::new(capstan_binary().await?)
        .args(["run", "--components"])
        .arg(&dir)
        .args(["-n", ns.name(), "--listen", &format!("127.0.0.1:{port}"), "--baseline-compile", "false"])
        .arg("--kubeconfig")
        .arg(plane.kubeconfig_path())
        .env("CAPSTAN_CACHE", dir.with_extension("cache"))
        .env("CAPSTAN_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("the host runs")?;
    wait_for(TIMEOUT, || async { http_get(port, "/readyz").await.ok().filter(|(code, _)| *code == 200) })
        .await
        .context("the host is ready with the fixture loaded")?;
    // The fixture reconciles what the namespace holds (its root CA
    // ConfigMap) once; then nothing changes.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let before = cpu_seconds(pid)?;
    tokio::time::sleep(IDLE).await;
    let used = cpu_seconds(pid)? - before;
    ensure!(child.try_wait()?.is_none(), "the host exited");
    let share = used / IDLE.as_secs_f64();
    eprintln!("idle host: {used:.2} s CPU in {IDLE:?} ({:.2} % of a core)", share * 100.0);
    assert!(share < IDLE_CPU, "an idle host used {:.1} % of a core ({used:.2} s in {IDLE:?})", share * 100.0);

    child.kill().await?;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(dir.with_extension("cache"));
    let _ = std::fs::remove_file(dir.with_extension("log"));
    ns.cleanup().await
}
