//! Components through a real OCI registry (the CNCF distribution registry
//! on loopback, see `capstan_tests::registry`): `capstan push` and `capstan
//! pull` round trips, refused artifacts, and a host that runs references,
//! follows their tags and keeps serving when the registry goes away, on the
//! real API server.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::serve::host::{ComponentStatus, Host, HostBuilder};
use capstan_host::serve::oci::{self, Options, Reference, Registry, Summary};
use capstan_host::testing::find_component;
use capstan_tests::registry::{Hostile, HostileRegistry, TestRegistry};
use capstan_tests::{ControlPlane, TestNamespace, capstan_binary, random_suffix, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How often the hosts of these tests look up their tags.
const POLL: Duration = Duration::from_millis(300);

fn component(name: &str) -> PathBuf {
    find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("capstan-oci-{what}-{}", random_suffix(8)));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the `capstan` binary with `args` (and `CAPSTAN_CACHE` at `cache`
/// if given): exit code, stdout, stderr.
async fn capstan(args: &[&str], cache: Option<&Path>) -> Result<(i32, String, String)> {
    static BINARY: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    let binary = BINARY.get_or_try_init(capstan_binary).await?;
    let mut command = tokio::process::Command::new(binary);
    command.args(args).stdin(std::process::Stdio::null());
    if let Some(cache) = cache {
        command.env("CAPSTAN_CACHE", cache);
    }
    let output = command.output().await?;
    Ok((
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn push_and_pull_give_back_the_rust_and_python_greeters_byte_identical_with_their_summary() -> Result<()> {
    let registry = TestRegistry::start().await?;
    let cache = TempDir::new("pull-cache")?;
    for (stem, repository) in [("greeter", "capstan/greeter"), ("greeter-python", "capstan/greeter-python")] {
        let file = component(stem);
        let bytes = std::fs::read(&file)?;
        let digest = oci::sha256(&bytes);
        let reference = registry.reference(&format!("{repository}:v1"));
        let path = file.to_string_lossy().into_owned();
        let (code, out, err) = capstan(&["push", &path, &reference], None).await?;
        ensure!(code == 0, "push {stem}: {err}");
        assert!(out.contains(&format!("layer    {digest}")), "{out}");

        // The CNCF Wasm layout, with the summary `capstan inspect` gives.
        let manifest = registry.manifest(repository, "v1").await?;
        assert_eq!(manifest["config"]["mediaType"], oci::CONFIG_MEDIA_TYPE, "{manifest}");
        let layers = manifest["layers"].as_array().context("layers")?;
        assert_eq!(layers.len(), 1, "{manifest}");
        assert_eq!(
            (layers[0]["mediaType"].as_str(), layers[0]["digest"].as_str()),
            (Some("application/wasm"), Some(digest.as_str()))
        );
        assert_eq!(layers[0]["annotations"][oci::ANNOTATION_TITLE], format!("{stem}.wasm"));
        let (code, inspect, err) = capstan(&["inspect", &path, "-o", "json"], None).await?;
        ensure!(code == 0, "inspect {stem}: {err}");
        let inspect: Value = serde_json::from_str(&inspect)?;
        let annotations = &manifest["annotations"];
        assert_eq!(annotations[oci::ANNOTATION_CONTROLLER], inspect["name"], "{manifest}");
        assert_eq!(annotations[oci::ANNOTATION_CONTRACT], inspect["contract"], "{manifest}");
        assert_eq!(annotations[oci::ANNOTATION_GRANTS], inspect["grantsDigest"], "{manifest}");

        // Pulled back: the same bytes, the layer verified and cached by its
        // digest; a second pull reads the cache; a pull by digest too.
        let out_file = cache.0.join(format!("{stem}.pulled.wasm"));
        let out_path = out_file.to_string_lossy().into_owned();
        let (code, out, err) = capstan(&["pull", &reference, "-o", &out_path], Some(&cache.0)).await?;
        ensure!(code == 0, "pull {stem}: {err}");
        assert!(out.contains("layer downloaded") && out.contains("(verified)"), "{out}");
        assert!(std::fs::read(&out_file)? == bytes, "{stem}: pulled bytes differ from the pushed ones");
        let blob = cache.0.join("oci/blobs/sha256").join(digest.trim_start_matches("sha256:"));
        assert!(std::fs::read(&blob)? == bytes, "{stem}: the cache holds the layer under its digest");
        let (code, out, err) = capstan(&["pull", &reference, "-o", &out_path], Some(&cache.0)).await?;
        ensure!(code == 0, "second pull {stem}: {err}");
        assert!(out.contains("layer from the cache"), "{out}");
        let manifest_digest = out.lines().find_map(|l| l.trim().strip_prefix("manifest ")).context("manifest line")?;
        let pinned = format!("{}@{manifest_digest}", registry.reference(repository));
        let (code, _, err) = capstan(&["pull", &pinned, "-o", &out_path], Some(&cache.0)).await?;
        ensure!(code == 0, "pull by digest {stem}: {err}");
        assert!(std::fs::read(&out_file)? == bytes);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_layer_and_an_artifact_that_is_no_component_are_refused_with_a_clear_error() -> Result<()> {
    let registry = TestRegistry::start().await?;
    let cache = TempDir::new("tamper-cache")?;
    let file = component("greeter");
    let reference = registry.reference("capstan/tampered:v1");
    let (code, _, err) = capstan(&["push", &file.to_string_lossy(), &reference], None).await?;
    ensure!(code == 0, "push: {err}");
    // One byte of the stored layer changes behind the registry's back.
    let blob = registry.blob_file(&oci::sha256(&std::fs::read(&file)?));
    let mut stored = std::fs::read(&blob)?;
    stored[1000] ^= 0xff;
    std::fs::write(&blob, &stored)?;
    let out = cache.0.join("tampered.wasm");
    let (code, _, err) = capstan(&["pull", &reference, "-o", &out.to_string_lossy()], Some(&cache.0)).await?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("layer content does not match its digest") && err.contains("refused"), "{err}");
    assert!(!out.exists(), "nothing written");
    assert!(!cache.0.join("oci/blobs/sha256").read_dir().is_ok_and(|mut d| d.next().is_some()), "nothing cached");

    // An ordinary container image is not a component.
    let config = registry.put_blob("capstan/image", b"{}").await?;
    let layer = registry.put_blob("capstan/image", b"not a tarball").await?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": 13}],
    });
    registry.put_manifest("capstan/image", "v1", &manifest).await?;
    let (code, _, err) =
        capstan(&["pull", &registry.reference("capstan/image:v1"), "-o", &out.to_string_lossy()], Some(&cache.0))
            .await?;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not a Wasm component artifact: config media type application/vnd.oci.image.config.v1+json"),
        "{err}"
    );
    // An unknown tag names itself.
    let (code, _, err) =
        capstan(&["pull", &registry.reference("capstan/image:nope"), "-o", &out.to_string_lossy()], None).await?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("capstan/image:nope"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn push_and_pull_use_the_credentials_of_the_docker_config_and_are_refused_without() -> Result<()> {
    use base64::Engine as _;
    // bcrypt of "capstan-secret" (an htpasswd entry for the registry).
    let hash = "$2b$12$9NbbVAVRL7Tk78RKTabPX.dVA9cENsCKS4ZdRjSol7VKO.5jt031i";
    let registry = TestRegistry::start_with_user("tester", hash).await?;
    let dir = TempDir::new("docker-config")?;
    let (with, without) = (dir.0.join("with"), dir.0.join("without"));
    std::fs::create_dir_all(&with)?;
    std::fs::create_dir_all(&without)?;
    let auth = base64::engine::general_purpose::STANDARD.encode("tester:capstan-secret");
    let config = json!({"auths": {format!("http://{}/v2/", registry.address()): {"auth": auth}}});
    std::fs::write(with.join("config.json"), serde_json::to_vec(&config)?)?;
    let file = component("greeter");
    let reference = registry.reference("capstan/private:v1");
    let out = dir.0.join("pulled.wasm");
    let run = |docker_config: PathBuf, args: Vec<String>| async move {
        let binary = capstan_binary().await?;
        let output = tokio::process::Command::new(binary)
            .args(&args)
            .env("DOCKER_CONFIG", &docker_config)
            .env("CAPSTAN_CACHE", docker_config.join("cache"))
            .output()
            .await?;
        anyhow::Ok((output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned()))
    };
    let push = vec!["push".to_owned(), file.to_string_lossy().into_owned(), reference.clone()];
    let pull = vec!["pull".to_owned(), reference.clone(), "-o".to_owned(), out.to_string_lossy().into_owned()];
    let (code, err) = run(without.clone(), push.clone()).await?;
    assert_eq!(code, Some(2), "anonymous push refused: {err}");
    assert!(err.contains("401") || err.to_lowercase().contains("authori"), "{err}");
    let (code, err) = run(with.clone(), push).await?;
    assert_eq!(code, Some(0), "push with the docker config's credentials: {err}");
    let (code, err) = run(without, pull.clone()).await?;
    assert_eq!(code, Some(2), "anonymous pull refused: {err}");
    assert!(err.contains("Not authorized") || err.contains("401"), "{err}");
    let (code, err) = run(with, pull).await?;
    assert_eq!(code, Some(0), "pull with the docker config's credentials: {err}");
    assert!(std::fs::read(&out)? == std::fs::read(&file)?);
    Ok(())
}

fn greetings(ns: &TestNamespace) -> Api<DynamicObject> {
    capstan_tests::greetings(&ns.client(), ns.name())
}

/// The `greeter-version` the greeter wrote into `name`'s ConfigMap: `None`
/// for v1, `Some("2")` for v2.
async fn version_of(ns: &TestNamespace, name: &str) -> Option<Option<String>> {
    let cm: ConfigMap = ns.api().get(&format!("{name}-greeting")).await.ok()?;
    Some(cm.data.unwrap_or_default().get("greeter-version").cloned())
}

/// Creates Greeting `name` and waits until the greeter version `want`
/// wrote its ConfigMap.
async fn served_by(ns: &TestNamespace, name: &str, want: Option<&str>) -> Result<()> {
    greetings(ns).create(&PostParams::default(), &capstan_tests::greeting(name, "hello", 1)).await?;
    wait_for(TIMEOUT, || async { version_of(ns, name).await.filter(|v| v.as_deref() == want) })
        .await
        .with_context(|| format!("{name} served by version {want:?}"))?;
    Ok(())
}

fn status_of(host: &Host, key: &str) -> Option<ComponentStatus> {
    host.status().into_iter().find(|s| s.path == Path::new(key))
}

/// Pushes the component `stem` to `reference` without checking it (as a
/// careless pipeline would), with the greeter's summary.
async fn push(registry: &Registry, reference: &str, bytes: Vec<u8>) -> Result<oci::Pushed> {
    let reference: Reference = reference.parse()?;
    let summary = Summary { controller: "greeter".into(), contract: "0.3.0".into(), grants_digest: String::new() };
    Ok(registry.push(&reference, bytes, &summary, "greeter.wasm").await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_runs_a_reference_follows_its_tag_and_keeps_serving_without_its_registry() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("oci-follow").await?;
    let mut server = TestRegistry::start().await?;
    let blobs = TempDir::new("host-cache")?;
    let registry = Arc::new(Registry::new(Options::default().cache_dir(Some(blobs.0.clone()))));
    let live = server.reference("capstan/greeter:live");
    let v1 = push(&registry, &live, std::fs::read(component("greeter"))?).await?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .registry(Some(Arc::clone(&registry)))
        .poll_interval(POLL)
        .reference(live.parse()?)
        .start()
        .await?;
    // The start does not wait for the pull: the greeter runs once it came.
    wait_for(TIMEOUT, || async { host.controller("greeter") }).await.context("the greeter runs")?;
    served_by(&ns, "first", None).await?;
    let status = status_of(&host, &live).context("status of the reference")?;
    assert_eq!(status.reference.as_deref(), Some(live.as_str()), "{status:?}");
    assert_eq!(status.manifest_digest.as_deref(), Some(v1.manifest_digest.as_str()), "{status:?}");
    assert_eq!(status.digest.as_deref(), Some(v1.layer_digest.as_str()), "{status:?}");

    // The tag moves to v2: pulled, verified and swapped in, no restart.
    let controller = host.controller("greeter").context("greeter runs")?;
    let v2_bytes = std::fs::read(component("greeter-v2"))?;
    let v2 = push(&registry, &live, v2_bytes.clone()).await?;
    wait_for(TIMEOUT, || async { version_of(&ns, "first").await.filter(|v| v.as_deref() == Some("2")) })
        .await
        .context("the Greeting converges to v2")?;
    let status = status_of(&host, &live).context("status")?;
    assert_eq!((status.swaps, status.state), (1, "running"), "{status:?}");
    assert_eq!(status.manifest_digest.as_deref(), Some(v2.manifest_digest.as_str()), "{status:?}");
    let same = host.controller("greeter").is_some_and(|c| Arc::ptr_eq(&c, &controller));
    assert!(same, "swapped into the running controller");

    // The tag moves to a broken component: rejected, v2 serves on.
    let broken = push(&registry, &live, v2_bytes[..v2_bytes.len() / 2].to_vec()).await?;
    let rejected = wait_for(TIMEOUT, || async { status_of(&host, &live).and_then(|s| s.rejected) }).await?;
    assert_eq!(rejected.kind, "compile", "{rejected:?}");
    assert_eq!(rejected.digest.as_deref(), Some(broken.layer_digest.as_str()), "{rejected:?}");
    served_by(&ns, "after-broken", Some("2")).await?;

    // The tag moves to an artifact whose layer was tampered with: refused
    // before it is loaded, v2 serves on.
    let staging = server.reference("capstan/greeter:staging");
    let v3 = push(&registry, &staging, std::fs::read(component("greeter-v3"))?).await?;
    let blob = server.blob_file(&v3.layer_digest);
    let mut stored = std::fs::read(&blob)?;
    stored[100] ^= 0xff;
    std::fs::write(&blob, &stored)?;
    server.retag("capstan/greeter", "staging", "live").await?;
    let rejected =
        wait_for(TIMEOUT, || async { status_of(&host, &live).and_then(|s| s.rejected).filter(|r| r.kind == "digest") })
            .await
            .context("the tampered artifact is refused")?;
    assert!(rejected.reason.contains("does not match its digest"), "{rejected:?}");
    served_by(&ns, "after-tamper", Some("2")).await?;

    // The registry goes away: everything keeps running and ready.
    server.stop().await;
    tokio::time::sleep(POLL * 5).await;
    served_by(&ns, "without-registry", Some("2")).await?;
    let status = status_of(&host, &live).context("status")?;
    assert_eq!((status.state, status.swaps), ("running", 1), "{status:?}");
    assert!(host.readiness().is_ok(), "{:?}", host.readiness());

    // It comes back and the tag moves to v1 again: swapped back.
    server.resume().await?;
    push(&registry, &live, std::fs::read(component("greeter"))?).await?;
    wait_for(TIMEOUT, || async { version_of(&ns, "without-registry").await.filter(Option::is_none) })
        .await
        .context("back to v1 once the registry answers")?;
    let status = status_of(&host, &live).context("status")?;
    assert!(status.rejected.is_none() && status.swaps == 2, "{status:?}");
    host.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_components_folder_runs_references_beside_files() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("oci-folder").await?;
    let server = TestRegistry::start().await?;
    let registry = Arc::new(Registry::new(Options::default()));
    push(&registry, &server.reference("capstan/greeter:v1"), std::fs::read(component("greeter"))?).await?;
    push(&registry, &server.reference("capstan/greeter:v2"), std::fs::read(component("greeter-v2"))?).await?;
    let dir = TempDir::new("folder")?;
    std::fs::copy(component("fixture"), dir.0.join("fixture.wasm"))?;
    let reference_file = dir.0.join("greeter.oci");
    std::fs::write(&reference_file, format!("# the greeter\n{}\n", server.reference("capstan/greeter:v1")))?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .registry(Some(registry))
        .poll_interval(POLL)
        .components_dir(Some(dir.0.clone()))
        .start()
        .await?;
    ensure!(host.controller("fixture").is_some(), "{:?}", host.status());
    // The reference is pulled beside the folder's look.
    wait_for(TIMEOUT, || async { host.controller("greeter") }).await.context("the greeter runs")?;
    served_by(&ns, "a", None).await?;

    // The file names another tag: that version is pulled and swapped in.
    let tmp = dir.0.join("greeter.oci.tmp");
    std::fs::write(&tmp, server.reference("capstan/greeter:v2"))?;
    std::fs::rename(&tmp, &reference_file)?;
    wait_for(TIMEOUT, || async { version_of(&ns, "a").await.filter(|v| v.as_deref() == Some("2")) }).await?;
    let key = reference_file.to_string_lossy().into_owned();
    let status = status_of(&host, &key).context("status of the .oci file")?;
    assert_eq!(status.reference, Some(server.reference("capstan/greeter:v2")), "{status:?}");

    // A reference that does not parse is rejected; v2 serves on.
    std::fs::write(&tmp, "ghcr.io/no-scheme:v1")?;
    std::fs::rename(&tmp, &reference_file)?;
    let rejected = wait_for(TIMEOUT, || async { status_of(&host, &key).and_then(|s| s.rejected) }).await?;
    assert_eq!(rejected.kind, "reference", "{rejected:?}");
    served_by(&ns, "b", Some("2")).await?;

    // Removed: the greeter stops, the fixture goes on.
    std::fs::remove_file(&reference_file)?;
    wait_for(TIMEOUT, || async { host.controller("greeter").is_none().then_some(()) }).await?;
    assert!(host.controller("fixture").is_some());
    // Back, so that the Greetings' finalizer can go with the namespace.
    std::fs::write(&tmp, server.reference("capstan/greeter:v1"))?;
    std::fs::rename(&tmp, &reference_file)?;
    wait_for(TIMEOUT, || async { host.controller("greeter") }).await?;
    host.shutdown().await;
    ns.cleanup().await
}

/// A registry client for the hostile registries, with a short deadline.
fn impatient() -> Registry {
    Registry::new(Options::default().timeout(Duration::from_secs(2)))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_layer_longer_than_declared_and_a_huge_manifest_are_refused_once_the_bound_is_reached() -> Result<()> {
    let lying = HostileRegistry::start(Hostile::LyingLayer { declared: 1000, sent: 256 << 20 }).await?;
    let error = impatient().pull(&lying.reference("capstan/lying:v1").parse()?).await.expect_err("refused");
    assert!(matches!(error, oci::Error::TooLarge { what: "layer", limit: 1000, .. }), "{error}");
    assert!(error.to_string().contains("layer larger than 1000 bytes: refused"), "{error}");

    let huge = HostileRegistry::start(Hostile::HugeManifest { size: 256 << 20 }).await?;
    let reference: Reference = huge.reference("capstan/huge:v1").parse()?;
    for error in [impatient().pull(&reference).await.err(), impatient().resolve(&reference).await.err()] {
        let error = error.context("refused")?;
        assert!(matches!(error, oci::Error::TooLarge { what: "manifest", .. }), "{error}");
        assert!(error.to_string().contains(&format!("manifest larger than {} bytes", oci::MAX_MANIFEST_SIZE)));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_error_of_20_mb_is_cut_to_a_few_hundred_bytes() -> Result<()> {
    let hostile = HostileRegistry::start(Hostile::ErrorBody { status: 500, size: 20 << 20 }).await?;
    let reference: Reference = hostile.reference("capstan/noisy:v1").parse()?;
    for error in [impatient().pull(&reference).await.err(), impatient().resolve(&reference).await.err()] {
        let error = error.context("refused")?;
        assert!(error.is_unavailable(), "{error}");
        let text = error.to_string();
        assert!(text.len() < oci::MAX_ERROR_TEXT + 200, "{} bytes", text.len());
        assert!(text.contains("500") && text.contains("éxxx") && text.ends_with('…'), "{text}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trickling_registry_fails_the_pull_at_its_deadline() -> Result<()> {
    let slow = HostileRegistry::start(Hostile::Trickle { every: Duration::from_millis(500) }).await?;
    let reference: Reference = slow.reference("capstan/slow:v1").parse()?;
    let registry = impatient();
    for pulled in [
        tokio::time::timeout(TIMEOUT, registry.pull(&reference)).await.map(|r| r.map(|_| ())),
        tokio::time::timeout(TIMEOUT, registry.resolve(&reference)).await.map(|r| r.map(|_| ())),
    ] {
        let error = pulled.context("the deadline ends it")?.expect_err("too slow");
        assert!(matches!(error, oci::Error::Timeout { .. }) && error.is_unavailable(), "{error}");
        assert_eq!(error.to_string(), format!("{reference}: registry too slow: no complete answer within 2 s"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_starts_and_serves_while_its_references_hang_and_looks_at_its_folder_meanwhile() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("oci-slow").await?;
    let slow = HostileRegistry::start(Hostile::Trickle { every: Duration::from_millis(500) }).await?;
    let dir = TempDir::new("slow-folder")?;
    std::fs::write(dir.0.join("hanging.oci"), slow.reference("capstan/other:v1"))?;
    let hanging = slow.reference("capstan/greeter:v1");
    let start = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .registry(Some(Arc::new(impatient())))
        .poll_interval(POLL)
        .component(component("greeter"))
        .reference(hanging.parse()?)
        .components_dir(Some(dir.0.clone()))
        .start();
    let host =
        tokio::time::timeout(TIMEOUT / 2, start).await.context("the host starts while its references hang")??;
    served_by(&ns, "beside-a-hanging-reference", None).await?;
    let rejected = wait_for(TIMEOUT, || async { status_of(&host, &hanging).and_then(|s| s.rejected) })
        .await
        .context("the hanging reference is reported at its deadline")?;
    assert_eq!(rejected.kind, "timeout", "{rejected:?}");
    // The folder is looked at again while its reference hangs.
    std::fs::copy(component("fixture"), dir.0.join("fixture.wasm"))?;
    wait_for(TIMEOUT, || async { host.controller("fixture") }).await.context("a file added to the folder runs")?;
    host.shutdown().await;
    ns.cleanup().await
}

/// A client for an API server that is not there: for hosts that never
/// get as far as asking it anything (every component they are given is
/// rejected, or never arrives).
fn nowhere() -> Result<kube::Client> {
    let config = kube::Config::new("http://127.0.0.1:1".parse()?);
    Ok(kube::Client::try_from(config)?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lookup_and_the_pull_after_it_share_one_deadline() -> Result<()> {
    // Every answer comes after 2 s: a lookup (one answer) fits in 5 s, and
    // so does a pull (the manifest and the layer, two answers); the three
    // together do not.
    let layer = b"\0asm not quite a component".to_vec();
    let slow = HostileRegistry::start(Hostile::Slow { delay: Duration::from_secs(2), layer }).await?;
    let registry = Registry::new(Options::default().timeout(Duration::from_secs(5)));
    let reference: Reference = slow.reference("capstan/slow:v1").parse()?;
    let digest = registry.resolve(&reference).await.context("a lookup alone fits")?;
    let pinned = reference.at_digest(&digest);
    registry.pull(&pinned).await.context("a pull alone fits")?;

    let started = std::time::Instant::now();
    let deadline = registry.deadline();
    assert_eq!(registry.resolve_by(&reference, deadline).await?, digest);
    let error = registry.pull_by(&pinned, deadline).await.expect_err("past the deadline both share");
    assert!(matches!(error, oci::Error::Timeout { .. }), "{error}");
    assert_eq!(error.to_string(), format!("{pinned}: registry too slow: no complete answer within 5 s"));
    let took = started.elapsed();
    assert!(took < Duration::from_millis(5500), "the lookup and the pull took {took:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_followed_reference_is_looked_up_and_pulled_within_one_deadline_not_one_each() -> Result<()> {
    // As above: the lookup and the pull each fit in the 5 s deadline, not
    // both. With a deadline each, the layer (not a component) would be
    // pulled and rejected by the loader; with one for both, the look runs
    // out of time first. The host never gets to ask its API server
    // anything.
    let layer = b"\0asm not quite a component".to_vec();
    let slow = HostileRegistry::start(Hostile::Slow { delay: Duration::from_secs(2), layer }).await?;
    let reference = slow.reference("capstan/slow:v1");
    let host = HostBuilder::new(nowhere()?)
        .registry(Some(Arc::new(Registry::new(Options::default().timeout(Duration::from_secs(5))))))
        .poll_interval(Duration::from_secs(3600))
        .reference(reference.parse()?)
        .start()
        .await?;
    let rejected = wait_for(TIMEOUT, || async { status_of(&host, &reference).and_then(|s| s.rejected) })
        .await
        .context("the first look ends")?;
    assert_eq!(rejected.kind, "timeout", "{rejected:?}");
    assert!(rejected.reason.contains("no complete answer within 5 s"), "{rejected:?}");
    host.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reference_that_hangs_for_all_of_a_long_deadline_holds_up_neither_the_start_nor_the_folder_nor_a_fast_one()
-> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("oci-hang").await?;
    // One byte every 5 s: not one answer within the 120 s deadline.
    let hanging = HostileRegistry::start(Hostile::Trickle { every: Duration::from_secs(5) }).await?;
    let fast =
        HostileRegistry::start(Hostile::Slow { delay: Duration::ZERO, layer: std::fs::read(component("greeter"))? })
            .await?;
    let dir = TempDir::new("hang-folder")?;
    std::fs::copy(component("fixture"), dir.0.join("fixture.wasm"))?;
    let hanging_file = dir.0.join("hanging.oci");
    std::fs::write(&hanging_file, hanging.reference("capstan/other:v1"))?;
    let slow = hanging.reference("capstan/slow:v1");
    let patient = Registry::new(Options::default().timeout(Duration::from_secs(120)));
    let soon = Duration::from_secs(30);
    let started = std::time::Instant::now();
    let start = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .registry(Some(Arc::new(patient)))
        .poll_interval(POLL)
        .reference(slow.parse()?)
        .reference(fast.reference("capstan/greeter:v1").parse()?)
        .components_dir(Some(dir.0.clone()))
        .start();
    let host = tokio::time::timeout(soon, start).await.context("the host starts without waiting for pulls")??;
    ensure!(host.controller("fixture").is_some(), "the folder's file runs once the host started: {:?}", host.status());
    let pending = status_of(&host, &slow).context("the hanging reference is in the status")?;
    assert_eq!((pending.state, pending.rejected.is_none()), ("pending", true), "{pending:?}");

    // The fast reference arrives and serves beside the hanging ones.
    wait_for(soon, || async { host.controller("greeter") }).await.context("the fast reference runs")?;
    served_by(&ns, "beside-a-long-hang", None).await?;
    let took = started.elapsed();
    assert!(took < soon, "the file and the fast reference served after {took:?}");

    // The hanging ones are still pending, well within their deadline, and
    // the host says it is not ready because of them.
    for key in [slow.clone(), hanging_file.to_string_lossy().into_owned()] {
        let status = status_of(&host, &key).context("in the status")?;
        assert_eq!((status.state, status.rejected.is_none()), ("pending", true), "{status:?}");
    }
    let reasons = host.readiness().expect_err("not ready while references are pending");
    assert!(reasons.contains(&format!("{slow}: pending, not pulled yet")), "{reasons:?}");
    assert_eq!(reasons.iter().filter(|r| r.contains("pending, not pulled yet")).count(), 2, "{reasons:?}");
    host.shutdown().await;
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_layer_streams_into_the_cache_and_leaves_nothing_behind_when_refused_or_cut_off() -> Result<()> {
    let cache = TempDir::new("stream-cache")?;
    let blobs = cache.0.join("oci/blobs/sha256");
    let options = Options::default().timeout(Duration::from_secs(3)).cache_dir(Some(cache.0.clone()));
    let registry = Arc::new(Registry::new(options));

    // 100 KiB of a 1 MiB layer, then nothing: what came is on disk (not
    // held in memory) while the pull waits for the rest.
    let stalling = HostileRegistry::start(Hostile::StallingLayer { declared: 1 << 20, sent: 100 << 10 }).await?;
    let reference: Reference = stalling.reference("capstan/stalling:v1").parse()?;
    let pull = tokio::spawn({
        let registry = Arc::clone(&registry);
        async move { registry.pull(&reference).await }
    });
    let (name, _) = wait_for(TIMEOUT, || async { files_in(&blobs).into_iter().find(|(_, size)| *size == 100 << 10) })
        .await
        .context("the bytes that came are in a file of the cache")?;
    assert!(name.contains(".part-"), "{name}: a temporary file, never taken for the blob");
    let error = pull.await?.expect_err("cut off at the deadline");
    assert!(matches!(error, oci::Error::Timeout { .. }), "{error}");
    assert_eq!(files_in(&blobs), [], "the partial file went with the pull");

    // Longer than declared, and shorter (its digest does not match):
    // refused, nothing left.
    for (hostile, reason) in [
        (Hostile::LyingLayer { declared: 1000, sent: 1 << 20 }, "too_large"),
        (Hostile::LyingLayer { declared: 1000, sent: 999 }, "digest"),
    ] {
        let lying = HostileRegistry::start(hostile).await?;
        let error = registry.pull(&lying.reference("capstan/lying:v1").parse()?).await.expect_err("refused");
        assert_eq!(error.reason(), reason, "{error}");
        assert_eq!(files_in(&blobs), [], "{reason}: nothing in the cache");
    }

    // A layer that matches is renamed into place, and read from there.
    let layer = b"\0asm a layer".to_vec();
    let honest = HostileRegistry::start(Hostile::Slow { delay: Duration::ZERO, layer: layer.clone() }).await?;
    let reference: Reference = honest.reference("capstan/honest:v1").parse()?;
    let pulled = registry.pull(&reference).await?;
    assert!(!pulled.cached && pulled.bytes == layer, "{pulled:?}");
    let hex = oci::sha256(&layer).trim_start_matches("sha256:").to_owned();
    assert_eq!(files_in(&blobs), [(hex, layer.len() as u64)]);
    let again = registry.pull(&reference).await?;
    assert!(again.cached && again.bytes == layer, "{again:?}");
    Ok(())
}

/// The files in `dir` with their sizes, by name (none if it is not there).
fn files_in(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), e.metadata().ok()?.len()))
        })
        .collect();
    files.sort();
    files
}

/// The log lines of a test, as written.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

// One thread: the host's tasks log to this test's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn a_registry_failing_with_20_mb_errors_is_logged_once_and_shown_cut_in_the_status() -> Result<()> {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt().with_writer(captured.clone()).with_ansi(false).finish();
    let _logs = tracing::subscriber::set_default(subscriber);
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("oci-noisy").await?;
    let noisy = HostileRegistry::start(Hostile::ErrorBody { status: 500, size: 20 << 20 }).await?;
    let reference = noisy.reference("capstan/greeter:v1");
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .registry(Some(Arc::new(impatient())))
        .poll_interval(POLL)
        .reference(reference.parse()?)
        .start()
        .await?;
    // Ten polls and more, each failing the same way.
    tokio::time::sleep(POLL * 12).await;
    let rejected = status_of(&host, &reference).and_then(|s| s.rejected).context("reported in the status")?;
    assert_eq!(rejected.kind, "unavailable", "{rejected:?}");
    assert!(rejected.reason.contains("500") && rejected.reason.len() < oci::MAX_ERROR_TEXT + 200, "{rejected:?}");
    host.shutdown().await;
    let logs = String::from_utf8_lossy(&captured.0.lock().expect("not poisoned")).into_owned();
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains(&reference) && l.contains("WARN")).collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("500") && lines[0].len() < 2 * oci::MAX_ERROR_TEXT + 400, "{}", lines[0]);
    ns.cleanup().await
}
