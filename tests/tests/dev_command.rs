//! `capstan dev`, run as a user would, against the real API server: a Rust
//! project made by `capstan new` outside any checkout is built and served;
//! an edit of its source is on the cluster without a restart of the host;
//! an edit that breaks the build is shown and the last good version serves
//! on; Ctrl-C stops it cleanly.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_tests::{ControlPlane, TestNamespace, capstan_binary, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DynamicObject, PostParams};
use kube::discovery::ApiResource;
use tokio::io::AsyncBufReadExt as _;

/// The message the project's ConfigMap holds for `name`, if it exists.
async fn message(ns: &TestNamespace, name: &str) -> Option<String> {
    let cm = ns.api::<ConfigMap>().get_opt(&format!("{name}-message")).await.ok()??;
    cm.data?.get("message").cloned()
}

async fn create(ns: &TestNamespace, name: &str, message: &str) -> Result<()> {
    let resource = ApiResource {
        group: "example.com".into(),
        version: "v1alpha1".into(),
        api_version: "example.com/v1alpha1".into(),
        kind: "DevLoop".into(),
        plural: "devloops".into(),
    };
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(ns.client(), ns.name(), &resource);
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1alpha1",
        "kind": "DevLoop",
        "metadata": {"name": name},
        "spec": {"message": message},
    }))?;
    api.create(&PostParams::default(), &object).await.with_context(|| format!("creating DevLoop {name}"))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn capstan_dev_builds_serves_swaps_on_edit_and_keeps_the_last_good_version() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("dev").await?;
    let capstan = capstan_binary().await?;
    let home = std::env::temp_dir().join(format!("capstan-dev-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home)?;
    let out = std::process::Command::new(&capstan).args(["new", "dev-loop"]).current_dir(&home).output()?;
    ensure!(out.status.success(), "capstan new: {}", String::from_utf8_lossy(&out.stderr));
    let project = home.join("dev-loop");

    // The workspace's target folder, where the dependencies are built for
    // wasm32-wasip2 already.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().context("CARGO_TARGET_TMPDIR is <target>/tmp")?;
    let mut child = tokio::process::Command::new(&capstan)
        .args(["dev", "--kubeconfig"])
        .arg(plane.kubeconfig_path())
        .args(["-n", ns.name()])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", target)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let output = Arc::new(Mutex::new(String::new()));
    let mut lines = tokio::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
    let reader = tokio::spawn({
        let output = Arc::clone(&output);
        async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("capstan dev: {line}");
                let mut out = output.lock().expect("not poisoned");
                out.push_str(&line);
                out.push('\n');
            }
        }
    });
    let said = |text: &'static str| {
        let output = Arc::clone(&output);
        move || {
            let found = output.lock().expect("not poisoned").contains(text);
            async move { found.then_some(()) }
        }
    };

    wait_for(Duration::from_secs(600), said("dev: serving dev_loop")).await.context("the first build and start")?;
    create(&ns, "first", "hello").await?;
    wait_for(Duration::from_secs(60), || async { (message(&ns, "first").await? == "hello").then_some(()) })
        .await
        .context("the first version reconciles")?;

    // An edit: the new version reconciles every object once.
    let lib = project.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib)?;
    let edited = source.replace("object.spec.message.clone()", "object.spec.message.to_uppercase()");
    ensure!(edited != source, "the template's ConfigMap line moved");
    std::fs::write(&lib, &edited)?;
    wait_for(Duration::from_secs(300), || async { (message(&ns, "first").await? == "HELLO").then_some(()) })
        .await
        .context("the edited version is swapped in")?;

    // An edit that does not build: shown, and the last good version serves.
    std::fs::write(&lib, format!("{edited}\nthis is not Rust\n"))?;
    wait_for(Duration::from_secs(300), said("dev: the build failed; the running version keeps serving"))
        .await
        .context("the broken build is reported")?;
    ensure!(output.lock().expect("not poisoned").contains("error"), "the compiler's message is shown");
    create(&ns, "second", "still here").await?;
    wait_for(Duration::from_secs(60), || async { (message(&ns, "second").await? == "STILL HERE").then_some(()) })
        .await
        .context("the last good version serves on")?;

    // Ctrl-C.
    let pid = child.id().context("running")?;
    std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status()?;
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.context("stops on SIGINT")??;
    let _ = reader.await;
    ensure!(status.success(), "exit status {status}");
    ensure!(output.lock().expect("not poisoned").contains("dev: stopping"), "says it stops");
    std::fs::remove_dir_all(&home)?;
    ns.cleanup().await
}
