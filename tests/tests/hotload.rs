//! Hot loading on the real API server: a host following a components
//! directory swaps in new versions (or tries them on a canary share first),
//! rejects broken files while the running version keeps serving, and stops
//! a controller whose file is removed, without disturbing the other
//! controllers it runs. Its hosts compile with the baseline compiler
//! first, as `capstan run` does: a new version serves on Winch's code
//! until cranelift's replaces it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::serve::host::{ComponentStatus, Host, HostBuilder};
use capstan_host::testing::find_component;
use capstan_tests::bench::RequestCounts;
use capstan_tests::{ControlPlane, TestNamespace, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);

fn component(name: &str) -> PathBuf {
    find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

fn greetings(ns: &TestNamespace) -> Api<DynamicObject> {
    capstan_tests::greetings(&ns.client(), ns.name())
}

fn greeting(name: &str) -> Result<DynamicObject> {
    Ok(capstan_tests::greeting(name, &format!("hello {name}"), 1))
}

/// The `greeter-version` the greeter wrote into `name`'s ConfigMap: `None`
/// for v1, `Some("2")` for v2.
async fn version_of(ns: &TestNamespace, name: &str) -> Option<Option<String>> {
    let cm: ConfigMap = ns.api().get(&format!("{name}-greeting")).await.ok()?;
    Some(cm.data.unwrap_or_default().get("greeter-version").cloned())
}

async fn reconciled_by_fixture(ns: &TestNamespace, name: &str) -> bool {
    let api: Api<Event> = ns.api();
    let list = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    list.iter().any(|e| {
        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name) && e.reason.as_deref() == Some("Reconciled")
    })
}

fn status_of(host: &Host, file: &Path) -> Option<ComponentStatus> {
    host.status().into_iter().find(|s| s.path == file)
}

/// Copies `from` to `to` the way a careless deploy does: in place, not by
/// rename (the host must wait until the file holds still).
fn write_in_place(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

struct Dir(PathBuf);

impl Dir {
    fn new(ns: &TestNamespace) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("capstan-hotload-{}", ns.name()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A host following `dir` with the greeter (v1) and the fixture; with
/// `check_permissions`, it asks the API server (SelfSubjectAccessReviews)
/// for what each manifest declares before it runs a component.
async fn start_host(ns: &TestNamespace, dir: &Dir, greeter_file: &Path, check_permissions: bool) -> Result<Host> {
    std::fs::copy(component("greeter"), greeter_file)?;
    std::fs::copy(component("fixture"), dir.0.join("fixture.wasm"))?;
    Ok(HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .check_permissions(check_permissions)
        .baseline(true)
        .components_dir(Some(dir.0.clone()))
        .start()
        .await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_replaces_the_running_one_and_broken_files_are_rejected() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("hotload").await?;
    let dir = Dir::new(&ns)?;
    let greeter_file = dir.0.join("greeter.wasm");
    // Only this test checks permissions: the SelfSubjectAccessReviews
    // counted are its host's.
    let client = ns.client();
    let reviews = || RequestCounts::scrape(&client, &["selfsubjectaccessreviews"]);
    let before_start = reviews().await?;
    let host = start_host(&ns, &dir, &greeter_file, true).await?;
    ensure!(host.controllers().len() == 2, "both components run: {:?}", host.status());
    let at_start = reviews().await?;
    let asked = |counts: &RequestCounts| counts.by_call.get("POST selfsubjectaccessreviews").copied().unwrap_or(0.0);
    assert!(asked(&at_start.since(&before_start)) >= 2.0, "each component's access checked: {at_start:?}");

    // v1 at work.
    let names: Vec<String> = (0..5).map(|i| format!("g{i}")).collect();
    for name in &names {
        greetings(&ns).create(&PostParams::default(), &greeting(name)?).await?;
    }
    for name in &names {
        let v = wait_for(TIMEOUT, || version_of(&ns, name)).await.context("v1 reconciles")?;
        assert_eq!(v, None, "{name} written by v1");
    }
    let v1_digest = status_of(&host, &greeter_file).and_then(|s| s.digest).context("v1 digest")?;

    // v2 lands: every object ends up with v2's output, as a `resync`.
    write_in_place(&component("greeter-v2"), &greeter_file)?;
    for name in &names {
        wait_for(TIMEOUT, || async { version_of(&ns, name).await.filter(|v| v.as_deref() == Some("2")) })
            .await
            .with_context(|| format!("{name} converged to v2"))?;
    }
    let status = status_of(&host, &greeter_file).context("greeter status")?;
    assert_ne!(status.digest.as_deref(), Some(v1_digest.as_str()), "{status:?}");
    assert_eq!(status.swaps, 1, "{status:?}");
    assert_eq!(status.state, "running", "{status:?}");
    assert!(status.rejected.is_none(), "{status:?}");
    assert_eq!(status.failed, 0, "no reconcile failed because of the swap: {status:?}");
    // v2 declares what v1 declares: its access is not asked again.
    assert_eq!(asked(&reviews().await?.since(&at_start)), 0.0, "no review for the same manifest");
    // No compile cache: v2 served on Winch's code first, then cranelift's
    // code replaced it under the running controller.
    assert_eq!(status.compile, Some("baseline"), "{status:?}");
    wait_for(Duration::from_secs(120), || async {
        status_of(&host, &greeter_file).filter(|s| s.tier == Some("optimized"))
    })
    .await
    .context("cranelift's code of v2 serves")?;
    greetings(&ns).create(&PostParams::default(), &greeting("optimized")?).await?;
    let v = wait_for(TIMEOUT, || version_of(&ns, "optimized")).await.context("v2 serves on cranelift's code")?;
    assert_eq!(v.as_deref(), Some("2"));
    let status = status_of(&host, &greeter_file).context("greeter status")?;
    assert_eq!((status.swaps, status.failed), (1, 0), "the code swap is not a version swap: {status:?}");

    // The other controller was not interrupted.
    let cms: Api<ConfigMap> = ns.api();
    let fine: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "fine"}, "data": {"behaviour": "ok"}}))?;
    cms.create(&PostParams::default(), &fine).await?;
    wait_for(TIMEOUT, || async { reconciled_by_fixture(&ns, "fine").await.then_some(()) }).await?;

    // Broken files: each is rejected, v2 keeps serving.
    let v2 = std::fs::read(component("greeter-v2"))?;
    let broken: [(&str, Vec<u8>); 3] = [
        ("compile", v2[..v2.len() / 2].to_vec()),
        ("core_module", b"\0asm\x01\0\0\0".to_vec()),
        ("world", std::fs::read(component("other-world"))?),
    ];
    for (i, (kind, bytes)) in broken.iter().enumerate() {
        std::fs::write(&greeter_file, bytes)?;
        let rejected = wait_for(TIMEOUT, || async {
            // A file refused by its header is refused before it is read
            // whole, so without a digest; the others carry one.
            status_of(&host, &greeter_file).and_then(|s| s.rejected).filter(|r| r.kind == *kind)
        })
        .await;
        let rejected = rejected.with_context(|| format!("broken file {i} rejected"))?;
        assert_eq!(rejected.digest.is_none(), *kind == "core_module", "{rejected:?}");
        let status = status_of(&host, &greeter_file).context("greeter status")?;
        assert_eq!(status.state, "running", "{status:?}");
        assert_eq!(status.swaps, 1, "{status:?}");
        let name = format!("after-broken-{i}");
        greetings(&ns).create(&PostParams::default(), &greeting(&name)?).await?;
        let v = wait_for(TIMEOUT, || version_of(&ns, &name)).await.context("v2 still serves")?;
        assert_eq!(v.as_deref(), Some("2"));
        // Back to v2: the rejection is cleared, nothing is swapped.
        std::fs::write(&greeter_file, &v2)?;
        wait_for(TIMEOUT, || async { status_of(&host, &greeter_file).filter(|s| s.rejected.is_none()) }).await?;
        assert_eq!(status_of(&host, &greeter_file).map(|s| s.swaps), Some(1));
    }

    // Removed: the greeter stops, the fixture goes on.
    let kinds = host.watched_kinds();
    std::fs::remove_file(&greeter_file)?;
    wait_for(TIMEOUT, || async { host.controller("greeter").is_none().then_some(()) }).await?;
    assert!(status_of(&host, &greeter_file).is_none());
    // Greetings and Deployments were the greeter's alone: no longer watched.
    // ConfigMaps (the fixture's) and Secrets still are.
    wait_for(TIMEOUT, || async { (host.watched_kinds() == kinds - 2).then_some(()) })
        .await
        .with_context(|| format!("the greeter's own watches stop: {} of {kinds} left", host.watched_kinds()))?;
    greetings(&ns).create(&PostParams::default(), &greeting("unserved")?).await?;
    let after: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "after"}, "data": {"behaviour": "ok"}}))?;
    cms.create(&PostParams::default(), &after).await?;
    wait_for(TIMEOUT, || async { reconciled_by_fixture(&ns, "after").await.then_some(()) }).await?;
    assert_eq!(version_of(&ns, "unserved").await, None, "no greeter runs any more");
    assert_eq!(host.controller("fixture").map(|c| c.counts().failed), Some(0));

    // The Greetings keep the greeter's finalizer: put the greeter back so
    // that the namespace can go, gzipped this time (as a ConfigMap holds
    // it), and it serves the Greeting that waited.
    let gzipped = dir.0.join("greeter.wasm.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &v2)?;
    std::fs::write(&gzipped, gz.finish()?)?;
    // The controller is registered before its file's status says running:
    // wait for the status, not only the controller.
    wait_for(TIMEOUT, || async { host.controller("greeter") }).await?;
    wait_for(TIMEOUT, || async { status_of(&host, &gzipped).filter(|s| s.state == "running") })
        .await
        .context("the gzipped greeter is reported running")?;
    wait_for(TIMEOUT, || async { version_of(&ns, "unserved").await.filter(|v| v.as_deref() == Some("2")) }).await?;
    host.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_change_restarts_only_that_controller_and_a_new_name_replaces_the_controller() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("hotload-shape").await?;
    let dir = Dir::new(&ns)?;
    let file = dir.0.join("controller.wasm");
    let host = start_host(&ns, &dir, &file, false).await?;
    greetings(&ns).create(&PostParams::default(), &greeting("a")?).await?;
    wait_for(TIMEOUT, || version_of(&ns, "a")).await?;
    let before = host.controller("greeter").context("greeter runs")?;
    let fixture = host.controller("fixture").context("fixture runs")?;
    let kinds = host.watched_kinds();

    // v3 runs fewer workers: the greeter's controller is started anew on
    // the same watches; the fixture's is untouched.
    write_in_place(&component("greeter-v3"), &file)?;
    wait_for(TIMEOUT, || async { version_of(&ns, "a").await.filter(|v| v.as_deref() == Some("3")) }).await?;
    let after = host.controller("greeter").context("greeter runs")?;
    assert!(!std::sync::Arc::ptr_eq(&before, &after), "a new controller runs the new shape");
    assert!(std::sync::Arc::ptr_eq(&fixture, &host.controller("fixture").context("fixture runs")?));
    assert_eq!(host.watched_kinds(), kinds, "the shared watches stayed");
    assert_eq!(after.counts().failed, 0, "{:?}", after.counts());

    // The same file, another controller: the greeter stops, a second
    // fixture would clash by name and is rejected; the noop runs.
    write_in_place(&component("fixture"), &file)?;
    let rejected = wait_for(TIMEOUT, || async { status_of(&host, &file).and_then(|s| s.rejected) }).await?;
    assert_eq!(rejected.kind, "duplicate", "{rejected:?}");
    assert!(host.controller("greeter").is_some(), "v3 keeps serving");
    write_in_place(&component("noop"), &file)?;
    wait_for(TIMEOUT, || async { host.controller("noop") }).await.context("the noop runs")?;
    assert!(host.controller("greeter").is_none());

    std::fs::copy(component("greeter"), &file)?;
    wait_for(TIMEOUT, || async { host.controller("greeter") }).await?;
    host.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_canary_is_promoted_when_its_share_reconciles_and_rejected_at_its_first_failure() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("hotload-canary").await?;
    let dir = Dir::new(&ns)?;
    let file = dir.0.join("greeter.wasm");
    std::fs::copy(component("greeter"), &file)?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .canary(Some(50))
        .components_dir(Some(dir.0.clone()))
        .start()
        .await?;
    let names: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
    for name in &names {
        greetings(&ns).create(&PostParams::default(), &greeting(name)?).await?;
    }
    for name in &names {
        wait_for(TIMEOUT, || version_of(&ns, name)).await?;
    }

    // A broken version: its share fails, it is rejected, v1 serves on and
    // goes over the share again.
    write_in_place(&component("greeter-broken"), &file)?;
    let rejected = wait_for(TIMEOUT, || async { status_of(&host, &file).and_then(|s| s.rejected) }).await?;
    assert_eq!(rejected.kind, "canary", "{rejected:?}");
    assert!(rejected.reason.contains("broken on purpose"), "{rejected:?}");
    let status = status_of(&host, &file).context("status")?;
    assert!(status.canary.is_none() && status.swaps == 0, "{status:?}");
    greetings(&ns).create(&PostParams::default(), &greeting("after-broken")?).await?;
    assert_eq!(wait_for(TIMEOUT, || version_of(&ns, "after-broken")).await?, None, "v1 serves");

    // A good version: its share converges first, then it is promoted and
    // every object converges.
    write_in_place(&component("greeter-v2"), &file)?;
    for name in &names {
        wait_for(TIMEOUT, || async { version_of(&ns, name).await.filter(|v| v.as_deref() == Some("2")) })
            .await
            .with_context(|| format!("{name} converged to v2 after the canary"))?;
    }
    let status = wait_for(TIMEOUT, || async { status_of(&host, &file).filter(|s| s.swaps == 1) }).await?;
    assert!(status.canary.is_none() && status.rejected.is_none(), "{status:?}");
    host.shutdown().await;
    ns.cleanup().await
}
