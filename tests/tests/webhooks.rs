//! Admission and conversion webhooks served by the host, called by the real
//! kube-apiserver on loopback (tests/control-plane/cp.sh).
//!
//! The host runs in process with the `greeter-webhooks` example: it serves
//! HTTPS with a certificate of its own CA, installs the webhook
//! configurations and the CRD's conversion stanza with that CA, and the API
//! server calls it for every write of a `Greeting` of that example's group.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::serve::host::{Change, HostBuilder};
use capstan_host::serve::webhook::tls::Certs;
use capstan_host::serve::webhook::{self, Endpoint, Install, Registry};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, free_port, wait_for};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const GROUP: &str = "webhooks.examples.capstan.dev";
const CONFIGURATION: &str = "capstan-greeter-webhooks";

fn greetings(ns: &TestNamespace, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, version, "Greeting"), "greetings");
    Api::namespaced_with(ns.client(), ns.name(), &resource)
}

fn greeting(name: &str, spec: Value, annotations: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "Greeting",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }))?)
}

/// A wasm custom section named `name` holding `payload`: appended to a
/// component, it makes another version (another digest) of the same code.
fn custom_section(name: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = vec![u8::try_from(name.len()).expect("a short name")];
    body.extend(name.as_bytes());
    body.extend(payload);
    let mut section = vec![0, u8::try_from(body.len()).expect("a short section")];
    section.extend(body);
    section
}

/// The message of the API server's refusal of `result`.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> Result<String> {
    match result {
        Err(kube::Error::Api(status)) => Ok(status.message),
        other => anyhow::bail!("expected a refusal, got {other:?}"),
    }
}

/// Writes into `dir` a serving certificate for 127.0.0.1 (`tls.crt`,
/// `tls.key`) signed by a new CA, the way cert-manager renews a Secret
/// (each file replaced whole); returns the CA's PEM.
fn write_signed_pair(dir: &std::path::Path) -> Result<String> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(&key, &issuer)?;
    for (name, pem) in [("tls.key", key.serialize_pem()), ("tls.crt", cert.pem())] {
        std::fs::write(dir.join(format!("{name}.new")), pem)?;
        std::fs::rename(dir.join(format!("{name}.new")), dir.join(name))?;
    }
    Ok(ca_pem)
}

/// Points every webhook of the validating configuration at `url`, trusting
/// `ca` only.
async fn point_validating_at(api: &Api<ValidatingWebhookConfiguration>, url: &str, ca: &str) -> Result<()> {
    use base64::Engine as _;
    let current = api.get(CONFIGURATION).await?;
    let count = current.webhooks.as_ref().map_or(0, Vec::len);
    let ops: Vec<Value> = (0..count)
        .map(|i| {
            json!({"op": "replace", "path": format!("/webhooks/{i}/clientConfig"), "value": {
                "url": format!("{url}/admission/greeter-webhooks/{}", current.webhooks.as_ref().map(|w| w[i].name.clone()).unwrap_or_default()),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
            }})
        })
        .collect();
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))?;
    api.patch(CONFIGURATION, &PatchParams::default(), &Patch::Json::<()>(patch)).await?;
    Ok(())
}

/// A webhook server on a free loopback port with a CA of its own, and its
/// registry, which installs configurations pointing at it.
async fn webhook_server() -> Result<(u16, Arc<Registry>, capstan_host::serve::server::Server)> {
    let port = free_port()?;
    let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
    let install = Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), certs.ca_bundle());
    let registry = Arc::new(Registry::new().installing(Some(install)));
    let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry)).await?;
    Ok((port, registry, server))
}

/// A host in `ns` running `component`, installing its CRDs, serving its
/// webhooks through `webhooks` if given.
async fn start_host(
    ns: &TestNamespace,
    component: &std::path::Path,
    webhooks: Option<Arc<Registry>>,
) -> Result<capstan_host::serve::host::Host> {
    Ok(HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .webhooks(webhooks)
        .component(component)
        .start()
        .await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_server_calls_guest_webhooks_that_validate_default_and_convert() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("webhooks").await?;
    let (port, registry, server) = webhook_server().await?;
    let built = find_component("greeter-webhooks").map_err(anyhow::Error::msg)?;
    // A copy of its own, which the swap below rewrites.
    let dir = std::env::temp_dir().join(format!("capstan-webhooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let component = dir.join("greeter-webhooks.wasm");
    std::fs::copy(&built, &component)?;
    let host = start_host(&ns, &component, Some(Arc::clone(&registry))).await?;
    let status = host.status();
    ensure!(status[0].state == "serving", "a webhook-only component runs no controller: {status:?}");
    let v1alpha1 = greetings(&ns, "v1alpha1");
    let post = PostParams::default();

    // The configurations exist; the API server may take a moment to use
    // them (its webhook informer), so the first denial is waited for.
    let message = wait_for(Duration::from_secs(30), || async {
        let empty = greeting("empty", json!({"message": ""}), json!({})).ok()?;
        match v1alpha1.create(&post, &empty).await {
            Err(kube::Error::Api(s)) if s.message.contains("must not be empty") => Some(s.message),
            Ok(_) => {
                let _ = v1alpha1.delete("empty", &DeleteParams::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await?;
    assert!(message.contains("spec.message must not be empty"), "{message}");

    let message =
        refusal(v1alpha1.create(&post, &greeting("many", json!({"message": "hi", "replicas": 11}), json!({}))?).await)?;
    assert!(message.contains("spec.replicas must be between 0 and 10, not 11"), "{message}");

    // Defaulting: stored with replicas 1.
    v1alpha1.create(&post, &greeting("hello", json!({"message": "hi"}), json!({}))?).await?;
    let stored = v1alpha1.get("hello").await?;
    assert_eq!(stored.data["spec"]["replicas"], json!(1), "{:?}", stored.data);

    // Conversion: the same object read as v1.
    let as_v1 = greetings(&ns, "v1").get("hello").await?;
    assert_eq!(as_v1.data["spec"]["greeting"], json!({"text": "hi", "replicas": 1}), "{:?}", as_v1.data);

    // Written as v1, read back as v1alpha1.
    let v1 = greetings(&ns, "v1");
    let written: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Greeting",
        "metadata": {"name": "written-as-v1"},
        "spec": {"greeting": {"text": "hey", "replicas": 3}},
    }))?;
    v1.create(&post, &written).await?;
    let read = v1alpha1.get("written-as-v1").await?;
    assert_eq!(read.data["spec"], json!({"message": "hey", "replicas": 3}), "{:?}", read.data);

    // Immutable field.
    let change = json!({"spec": {"message": "bye"}});
    let message = refusal(v1alpha1.patch("hello", &PatchParams::default(), &Patch::Merge(&change)).await)?;
    assert!(message.contains("spec.message cannot change"), "{message}");

    // A guest that traps: the call fails, failurePolicy Fail refuses.
    let trap = greeting("trap", json!({"message": "hi"}), json!({"examples.capstan.dev/trap": "true"}))?;
    let message = refusal(v1alpha1.create(&post, &trap).await)?;
    assert!(message.contains("failed calling webhook") && message.contains("guest trapped"), "{message}");

    // A guest that loops: stopped at its deadline, below the webhook's
    // timeout; failurePolicy Fail refuses.
    let looping = greeting("loop", json!({"message": "hi"}), json!({"examples.capstan.dev/loop": "true"}))?;
    let message = refusal(v1alpha1.create(&post, &looping).await)?;
    assert!(message.contains("guest exceeded its deadline"), "{message}");

    // A guest that traps under failurePolicy Ignore: the Greeting is stored.
    let lenient = json!({"examples.capstan.dev/trap-lenient": "true"});
    v1alpha1.create(&post, &greeting("lenient", json!({"message": "hi"}), lenient)?).await?;

    // ... and the host still serves.
    v1alpha1
        .create(&post, &greeting("after-trap", json!({"message": "still here", "replicas": 0}), json!({}))?)
        .await?;

    // Hot swaps under a steady stream of requests: none fails.
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (api, stop, created) = (v1alpha1.clone(), Arc::clone(&stop), Arc::clone(&created));
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let g = greeting(&format!("stream-{w}-{i}"), json!({"message": "hi"}), json!({}))?;
                    let stored = api.create(&PostParams::default(), &g).await?;
                    ensure!(stored.data["spec"]["replicas"] == json!(1), "not defaulted: {:?}", stored.data);
                    created.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for n in 1..=3u8 {
        let mut bytes = std::fs::read(&built)?;
        bytes.extend(custom_section("capstan-test-version", &[n]));
        std::fs::write(&component, bytes)?;
        let change = host.load(&component).await?;
        assert!(matches!(change, Change::Swapped { .. }), "{change:?}");
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await??;
    }
    assert!(created.load(Ordering::Relaxed) > 0, "requests ran during the swaps");
    assert_eq!(host.status()[0].swaps, 3);

    let installed = Api::<ValidatingWebhookConfiguration>::all(ns.client()).get(CONFIGURATION).await?;
    let url = installed.webhooks.as_ref().and_then(|w| w[0].client_config.url.clone()).context("a url")?;
    assert_eq!(url, format!("https://127.0.0.1:{port}/admission/greeter-webhooks/validate.greetings.{GROUP}"));

    // The stream's Greetings served their purpose.
    v1alpha1.delete_collection(&DeleteParams::default(), &Default::default()).await?;
    wait_for(Duration::from_secs(30), || async {
        v1alpha1.list(&Default::default()).await.ok().filter(|l| l.items.is_empty()).map(|_| ())
    })
    .await?;
    for (name, spec) in [("one", json!({"message": "one"})), ("two", json!({"message": "two", "replicas": 2}))] {
        v1alpha1.create(&post, &greeting(name, spec, json!({}))?).await?;
    }
    v1.create(&post, &written).await?;

    // A storage-version change: v1 becomes the storage version; every
    // object, stored as v1alpha1 or v1, stays readable as both; each is
    // rewritten (stored as v1 through the conversion webhook) and v1alpha1
    // leaves `storedVersions`, and all stay readable.
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client());
    let crd_name = format!("greetings.{GROUP}");
    let crd = crds.get(&crd_name).await?;
    let ops: Vec<Value> = crd
        .spec
        .versions
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"op": "replace", "path": format!("/spec/versions/{i}/storage"), "value": v.name == "v1"}))
        .collect();
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))?;
    crds.patch(&crd_name, &PatchParams::default(), &Patch::Json::<()>(patch)).await?;
    let stored = wait_for(Duration::from_secs(30), || async {
        let crd = crds.get(&crd_name).await.ok()?;
        let versions = crd.status?.stored_versions?;
        (versions.contains(&"v1".to_owned())).then_some(versions)
    })
    .await?;
    assert_eq!(stored, ["v1alpha1", "v1"]);
    let readable = |names: Vec<String>| {
        let (v1alpha1, v1) = (v1alpha1.clone(), v1.clone());
        async move {
            for name in names {
                let old = v1alpha1.get(&name).await.with_context(|| format!("{name} as v1alpha1"))?;
                let new = v1.get(&name).await.with_context(|| format!("{name} as v1"))?;
                ensure!(
                    old.data["spec"]["message"] == new.data["spec"]["greeting"]["text"]
                        && old.data["spec"]["replicas"] == new.data["spec"]["greeting"]["replicas"],
                    "{name}: {:?} against {:?}",
                    old.data,
                    new.data
                );
            }
            anyhow::Ok(())
        }
    };
    let names: Vec<String> =
        v1alpha1.list(&Default::default()).await?.items.into_iter().filter_map(|g| g.metadata.name).collect();
    ensure!(names.len() == 3, "objects to migrate: {names:?}");
    readable(names.clone()).await?;
    v1alpha1.create(&post, &greeting("after-storage-change", json!({"message": "new"}), json!({}))?).await?;
    // The migration a storage-version migrator does: rewrite every object
    // unchanged, then drop the old version from storedVersions.
    for name in &names {
        let object = v1.get(name).await?;
        v1.replace(name, &post, &object).await.with_context(|| format!("rewriting {name}"))?;
    }
    let status = json!({"status": {"storedVersions": ["v1"]}});
    crds.patch_status(&crd_name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    let mut all = names;
    all.push("after-storage-change".to_owned());
    readable(all).await?;

    // A certificate rotated on disk: a second server with files
    // (--webhook-cert-dir) serves the validating webhooks. Rotated to a
    // certificate of a new CA, with the configuration then trusting only
    // that CA, calls succeed only if the new files serve, with no restart.
    let client = ns.client();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let cert_dir = dir.join("certs");
    std::fs::create_dir_all(&cert_dir)?;
    let first_ca = write_signed_pair(&cert_dir)?;
    let file_certs = Arc::new(Certs::from_dir(&cert_dir)?);
    let _watch = file_certs.watch()?;
    let file_port = free_port()?;
    let file_server = webhook::serve(([127, 0, 0, 1], file_port).into(), file_certs, Arc::clone(&registry)).await?;
    let file_url = format!("https://127.0.0.1:{file_port}");
    let denied_through = |ca: String| {
        let (validating, api, file_url) = (validating.clone(), v1alpha1.clone(), file_url.clone());
        async move {
            point_validating_at(&validating, &file_url, &ca).await?;
            // The API server's webhook informer takes the change in its time.
            wait_for(Duration::from_secs(30), || async {
                let g = greeting("rotated", json!({"message": "hi", "replicas": 12}), json!({})).ok()?;
                match api.create(&PostParams::default(), &g).await {
                    Err(kube::Error::Api(s)) if s.message.contains("must be between 0 and 10") => Some(()),
                    _ => None,
                }
            })
            .await
            .context("the file-served webhook did not deny")
        }
    };
    denied_through(first_ca).await?;
    let second_ca = write_signed_pair(&cert_dir)?;
    denied_through(second_ca).await.context("after rotating the certificate on disk")?;
    file_server.shutdown().await;

    // The configurations point at this process: remove them before it goes.
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    validating.delete(CONFIGURATION, &DeleteParams::default()).await?;
    mutating.delete(CONFIGURATION, &DeleteParams::default()).await?;
    crds.delete(&crd_name, &DeleteParams::default()).await?;
    host.shutdown().await;
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    ns.cleanup().await
}

/// A `Vault` of the `strict-webhooks` fixture with `spec`.
fn vault(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "fixtures.capstan.dev/v1", "kind": "Vault",
        "metadata": {"name": name}, "spec": spec,
    }))?)
}

/// Objects stored before the webhooks' type required `spec.size` (written
/// by a host of the component that served no webhooks yet): with the
/// webhooks installed, the stored ones do not decode as their type. They
/// can still be updated to a valid form and deleted, the host removing
/// its finalizer through them; an update that leaves one undecodable is
/// refused, naming why.
#[tokio::test(flavor = "multi_thread")]
async fn objects_the_webhooks_cannot_decode_can_still_be_fixed_and_deleted() -> Result<()> {
    const FINALIZER: &str = "fixtures.capstan.dev/vault";
    const CONFIGURATION: &str = "capstan-strict-webhooks";
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("undecodable").await?;
    let component = find_component("strict-webhooks").map_err(anyhow::Error::msg)?;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("fixtures.capstan.dev", "v1", "Vault"), "vaults");
    let vaults: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &resource);
    let post = PostParams::default();
    let finalized = |name: &'static str| {
        let vaults = vaults.clone();
        async move {
            wait_for(Duration::from_secs(30), || async {
                let v = vaults.get(name).await.ok()?;
                v.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == FINALIZER)).then_some(())
            })
            .await
            .with_context(|| format!("the host's finalizer on {name}"))
        }
    };

    // Before: the component's controller runs, no webhooks are served.
    let before = start_host(&ns, &component, None).await?;
    for name in ["fix-me", "delete-me", "still-broken"] {
        let stored = wait_for(Duration::from_secs(30), || async {
            vaults.create(&post, &vault(name, json!({"message": "no size"})).ok()?).await.ok()
        })
        .await?;
        ensure!(stored.data["spec"].get("size").is_none(), "{:?}", stored.data);
    }
    for name in ["fix-me", "delete-me", "still-broken"] {
        finalized(name).await?;
    }
    before.shutdown().await;

    // After: the same component, now serving its webhooks.
    let (_, registry, server) = webhook_server().await?;
    let host = start_host(&ns, &component, Some(Arc::clone(&registry))).await?;
    let message = wait_for(Duration::from_secs(30), || async {
        match vaults.create(&post, &vault("big", json!({"size": 11})).ok()?).await {
            Err(kube::Error::Api(s)) if s.message.contains("spec.size must be at most 10") => Some(s.message),
            Ok(_) => {
                let _ = vaults.delete("big", &DeleteParams::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await
    .context("the webhooks did not start refusing")?;
    assert!(message.contains("spec.size must be at most 10, not 11"), "{message}");

    // An update to a valid form passes both webhooks, the mutating one
    // changing the typed new object.
    let fixed = vaults.patch("fix-me", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 3}}))).await?;
    assert_eq!(fixed.data["spec"]["size"], json!(3));
    assert_eq!(
        fixed.metadata.annotations.as_ref().and_then(|a| a.get("fixtures.capstan.dev/checked")).map(String::as_str),
        Some("true")
    );
    // ... still checked: the typed new object is validated.
    let message =
        refusal(vaults.patch("fix-me", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 12}}))).await)?;
    assert!(message.contains("spec.size must be at most 10, not 12"), "{message}");

    // An update that leaves the object undecodable is refused, naming why.
    let relabel = json!({"metadata": {"labels": {"touched": "yes"}}});
    let message = refusal(vaults.patch("still-broken", &PatchParams::default(), &Patch::Merge(&relabel)).await)?;
    assert!(message.contains("object does not match the webhook's type: missing field `size`"), "{message}");

    // A delete is allowed, and the host's removal of its finalizer passes
    // the webhooks: the object goes.
    vaults.delete("delete-me", &DeleteParams::default()).await?;
    wait_for(Duration::from_secs(30), || async {
        matches!(vaults.get("delete-me").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await
    .context("delete-me is still there: its finalizer was not removed")?;

    for name in ["fix-me", "still-broken"] {
        vaults.delete(name, &DeleteParams::default()).await?;
    }
    wait_for(Duration::from_secs(30), || async {
        vaults.list(&Default::default()).await.ok().filter(|l| l.items.is_empty()).map(|_| ())
    })
    .await
    .context("the vaults did not go")?;
    let client = ns.client();
    Api::<ValidatingWebhookConfiguration>::all(client.clone()).delete(CONFIGURATION, &DeleteParams::default()).await?;
    Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(CONFIGURATION, &DeleteParams::default()).await?;
    Api::<CustomResourceDefinition>::all(client)
        .delete("vaults.fixtures.capstan.dev", &DeleteParams::default())
        .await?;
    host.shutdown().await;
    server.shutdown().await;
    ns.cleanup().await
}
