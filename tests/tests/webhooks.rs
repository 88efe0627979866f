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
use capstan_host::host::{Change, HostBuilder};
use capstan_host::testing::find_component;
use capstan_host::webhook::tls::Certs;
use capstan_host::webhook::{self, Endpoint, Install, Registry};
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

#[tokio::test(flavor = "multi_thread")]
async fn the_api_server_calls_guest_webhooks_that_validate_default_and_convert() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("webhooks").await?;
    let port = free_port()?;
    let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
    let install =
        Install { endpoint: Endpoint::Url(format!("https://127.0.0.1:{port}")), ca_bundle: certs.ca_bundle() };
    let registry = Arc::new(Registry::new().installing(Some(install)));
    let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry)).await?;
    let built = find_component("greeter-webhooks").map_err(anyhow::Error::msg)?;
    // A copy of its own, which the swap below rewrites.
    let dir = std::env::temp_dir().join(format!("capstan-webhooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let component = dir.join("greeter-webhooks.wasm");
    std::fs::copy(&built, &component)?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .webhooks(Some(Arc::clone(&registry)))
        .component(&component)
        .start()
        .await?;
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

    // The configurations point at this process: remove them before it goes.
    let client = ns.client();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let installed = validating.get(CONFIGURATION).await?;
    let url = installed.webhooks.as_ref().and_then(|w| w[0].client_config.url.clone()).context("a url")?;
    assert_eq!(url, format!("https://127.0.0.1:{port}/admission/greeter-webhooks/validate.greetings.{GROUP}"));
    validating.delete(CONFIGURATION, &DeleteParams::default()).await?;
    mutating.delete(CONFIGURATION, &DeleteParams::default()).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.delete(&format!("greetings.{GROUP}"), &DeleteParams::default()).await?;
    host.shutdown().await;
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    ns.cleanup().await
}
