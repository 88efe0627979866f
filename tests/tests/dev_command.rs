//! `capstan dev`, run as a user would, against the real API server: a Rust
//! and a JavaScript project made by `capstan new` outside any checkout are
//! built and served; an edit of the source is on the cluster without a
//! restart of the host; (JavaScript) an edit that changes nothing the
//! component is made of swaps nothing in; an edit that breaks the build is
//! shown and the last good version serves on; Ctrl-C stops it cleanly.
//! (JavaScript) `--member` serves a second API server from the same host:
//! the edited version reconciles there too.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_tests::{ControlPlane, PrivateControlPlane, TestNamespace, capstan_binary, toolchain_path, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DynamicObject, PostParams};
use kube::discovery::ApiResource;
use tokio::io::AsyncBufReadExt as _;

/// The message the project's ConfigMap holds for `name`, if it exists.
async fn message(ns: &TestNamespace, name: &str) -> Option<String> {
    message_in(&ns.client(), ns.name(), name).await
}

/// [`message`] in namespace `ns` of the cluster of `client`.
async fn message_in(client: &kube::Client, ns: &str, name: &str) -> Option<String> {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), ns);
    let cm = api.get_opt(&format!("{name}-message")).await.ok()??;
    cm.data?.get("message").cloned()
}

async fn create(ns: &TestNamespace, kind: (&str, &str), name: &str, message: &str) -> Result<()> {
    create_in(&ns.client(), ns.name(), kind, name, message).await
}

/// [`create`] in namespace `ns` of the cluster of `client`.
async fn create_in(
    client: &kube::Client,
    ns: &str,
    (kind, plural): (&str, &str),
    name: &str,
    message: &str,
) -> Result<()> {
    let resource = ApiResource {
        group: "example.com".into(),
        version: "v1alpha1".into(),
        api_version: "example.com/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(client.clone(), ns, &resource);
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"message": message},
    }))?;
    api.create(&PostParams::default(), &object).await.with_context(|| format!("creating {kind} {name}"))?;
    Ok(())
}

/// Creates `first` (message "hello") and waits for its ConfigMap, then
/// edits `file` (`from` → `to`, a change that upper-cases the message) and
/// waits until the swapped-in version has reconciled it; returns the edited
/// source.
async fn reconciled_then_edited(
    ns: &TestNamespace,
    kind: (&str, &str),
    file: &Path,
    (from, to): (&str, &str),
    timeout: Duration,
) -> Result<String> {
    create(ns, kind, "first", "hello").await?;
    wait_for(Duration::from_secs(60), || async { (message(ns, "first").await? == "hello").then_some(()) })
        .await
        .context("the first version reconciles")?;
    let source = std::fs::read_to_string(file)?;
    let edited = source.replace(from, to);
    ensure!(edited != source, "the template's ConfigMap line moved");
    std::fs::write(file, &edited)?;
    wait_for(timeout, || async { (message(ns, "first").await? == "HELLO").then_some(()) })
        .await
        .context("the edited version is swapped in")?;
    Ok(edited)
}

/// Breaks `file` with `broken` appended to `edited`: the failed build is
/// reported, and a new object is still reconciled by the last good version.
async fn broken_build_keeps_serving(
    ns: &TestNamespace,
    dev: &Dev,
    kind: (&str, &str),
    file: &Path,
    edited: &str,
    broken: &str,
) -> Result<()> {
    std::fs::write(file, format!("{edited}\n{broken}\n"))?;
    dev.said_after("dev: the build failed; the running version keeps serving", 0, Duration::from_secs(300))
        .await
        .context("the broken build is reported")?;
    create(ns, kind, "second", "still here").await?;
    wait_for(Duration::from_secs(60), || async { (message(ns, "second").await? == "STILL HERE").then_some(()) })
        .await
        .context("the last good version serves on")
}

/// A running `capstan dev`: its stdout collected as it comes.
struct Dev {
    child: tokio::process::Child,
    output: Arc<Mutex<String>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Dev {
    /// Starts `capstan dev` in `project` on the shared control plane,
    /// watching `ns`, with `env` set and more `args`; its lines are echoed
    /// as `label`.
    async fn start(
        project: &Path,
        ns: &TestNamespace,
        env: &[(&str, &std::ffi::OsStr)],
        args: &[std::ffi::OsString],
        label: &'static str,
    ) -> Result<Self> {
        let plane = ControlPlane::shared().await?;
        let mut command = tokio::process::Command::new(capstan_binary().await?);
        command
            .args(["dev", "--kubeconfig"])
            .arg(plane.kubeconfig_path())
            .args(["-n", ns.name()])
            .args(args)
            .current_dir(project)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn()?;
        let output = Arc::new(Mutex::new(String::new()));
        let mut lines = tokio::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
        let reader = tokio::spawn({
            let output = Arc::clone(&output);
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    eprintln!("{label}: {line}");
                    let mut out = output.lock().expect("not poisoned");
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        });
        Ok(Self { child, output, reader })
    }

    /// How often `text` was printed so far.
    fn count(&self, text: &str) -> usize {
        self.output.lock().expect("not poisoned").matches(text).count()
    }

    /// Waits until `text` has been printed more than `before` times.
    async fn said_after(&self, text: &str, before: usize, timeout: Duration) -> Result<()> {
        wait_for(timeout, || {
            let n = self.count(text);
            async move { (n > before).then_some(()) }
        })
        .await
    }

    /// Ctrl-C, and a clean exit.
    async fn stop(mut self) -> Result<()> {
        let pid = self.child.id().context("running")?;
        std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status()?;
        let status =
            tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await.context("stops on SIGINT")??;
        let _ = self.reader.await;
        ensure!(status.success(), "exit status {status}");
        ensure!(self.output.lock().expect("not poisoned").contains("dev: stopping"), "says it stops");
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn capstan_dev_builds_serves_swaps_on_edit_and_keeps_the_last_good_version() -> Result<()> {
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
    let dev = Dev::start(&project, &ns, &[("CARGO_TARGET_DIR", target.as_os_str())], &[], "capstan dev").await?;
    dev.said_after("dev: serving dev_loop", 0, Duration::from_secs(600)).await.context("the first build and start")?;
    // An edit: the new version reconciles every object once.
    let lib = project.join("src/lib.rs");
    let edit = ("object.spec.message.clone()", "object.spec.message.to_uppercase()");
    let edited = reconciled_then_edited(&ns, ("DevLoop", "devloops"), &lib, edit, Duration::from_secs(300)).await?;

    // An edit that does not build: shown, and the last good version serves.
    broken_build_keeps_serving(&ns, &dev, ("DevLoop", "devloops"), &lib, &edited, "this is not Rust").await?;
    ensure!(dev.count("error") > 0, "the compiler's message is shown");

    dev.stop().await?;
    std::fs::remove_dir_all(&home)?;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn capstan_dev_serves_a_javascript_project_and_swaps_only_what_changed() -> Result<()> {
    let ns = TestNamespace::new("dev-js").await?;
    let capstan = capstan_binary().await?;
    let home = std::env::temp_dir().join(format!("capstan-dev-js-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home)?;
    let out = std::process::Command::new(&capstan)
        .args(["new", "dev-loop-js", "--lang", "js"])
        .current_dir(&home)
        .output()?;
    ensure!(out.status.success(), "capstan new: {}", String::from_utf8_lossy(&out.stderr));
    let project = home.join("dev-loop-js");

    // A second API server, served as member `b` by the same host.
    let member = PrivateControlPlane::start(false).await?;
    let member_client = member.plane().client()?;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(member_client.clone());
    let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns.name()}}))?;
    namespaces.create(&PostParams::default(), &namespace).await?;
    let mut also = std::ffi::OsString::from("b=");
    also.push(member.plane().kubeconfig_path());

    let path = toolchain_path()?;
    let env = [("PATH", std::ffi::OsStr::new(&path))];
    let dev = Dev::start(&project, &ns, &env, &["--member".into(), also], "capstan dev (js)").await?;
    dev.said_after("dev: serving ", 0, Duration::from_secs(300)).await.context("the first build and start")?;
    ensure!(dev.count("dev: serving member b") == 1, "the member is served");
    // An edit of the reconcile: the new version reconciles every object once.
    let app = project.join("app.js");
    let edit = ("data: { message },", "data: { message: message.toUpperCase() },");
    let edited =
        reconciled_then_edited(&ns, ("DevLoopJs", "devloopjses"), &app, edit, Duration::from_secs(120)).await?;
    // The member runs the edited version too, from the same host.
    create_in(&member_client, ns.name(), ("DevLoopJs", "devloopjses"), "in-member", "hello").await?;
    wait_for(Duration::from_secs(60), || async {
        (message_in(&member_client, ns.name(), "in-member").await? == "HELLO").then_some(())
    })
    .await
    .context("the member is served the edited version")?;

    // A comment the bundler drops: built again, the same component, nothing swapped.
    let swaps = dev.count("swapping the new version in");
    std::fs::write(&app, format!("{edited}\n// a note for the next reader\n"))?;
    dev.said_after("the component did not change", 0, Duration::from_secs(120))
        .await
        .context("a change the component is not made of swaps nothing in")?;
    ensure!(dev.count("swapping the new version in") == swaps, "nothing was swapped in");

    // An edit that does not build: shown, and the last good version serves.
    let kind = ("DevLoopJs", "devloopjses");
    broken_build_keeps_serving(&ns, &dev, kind, &app, &edited, "this is not JavaScript {").await?;

    dev.stop().await?;
    std::fs::remove_dir_all(&home)?;
    ns.cleanup().await
}
