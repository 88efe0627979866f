//! Who may call the host's webhooks, and how many calls one component may
//! hold (issue #29, item 12), on the real kube-apiserver.
//!
//! - With `--webhook-client-ca` (here [`ClientAuth`]) the API server's
//!   calls still work (`capstan cluster up` makes it present a client
//!   certificate to admission webhooks), while a call without a client
//!   certificate is refused (401) and one with a certificate of another
//!   CA fails the handshake.
//! - A flood of calls to one component's slow webhook leaves another
//!   component's webhook answering: each has its own budget of calls in
//!   flight, so the flood cannot take every guest instance.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::serve::host::HostBuilder;
use capstan_host::serve::webhook::tls::{Certs, ClientAuth};
use capstan_host::serve::webhook::{self, Endpoint, Install, Registry};
use capstan_host::testing::find_component;
use capstan_tests::webhook::post;
use capstan_tests::{ControlPlane, TestNamespace, free_port, wait_for};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};

const GROUP: &str = "webhooks.examples.capstan.dev";
const VALIDATE: &str = "validate.greetings.webhooks.examples.capstan.dev";
/// The name on the client certificate `capstan cluster up` makes.
const CLIENT_NAME: &str = "kube-apiserver-webhook-client";

/// The CA of the client certificate the test cluster's API server
/// presents: `pki/webhook-client-ca.crt` beside its kubeconfig.
fn cluster_client_ca(plane: &ControlPlane) -> Result<PathBuf> {
    let dir = plane.kubeconfig_path().parent().context("the kubeconfig's directory")?;
    let ca = dir.join("pki").join("webhook-client-ca.crt");
    ensure!(
        ca.is_file() && dir.join("admission.yaml").is_file(),
        "{} has no webhook client certificate: the cluster was started by an older capstan; \
         restart it (capstan cluster down && capstan cluster up)",
        dir.display()
    );
    Ok(ca)
}

/// A client certificate for `name` signed by a new CA, and its key.
fn foreign_client_cert(name: &str) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>)> {
    use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(vec![name.to_owned()])?;
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok((cert.der().clone(), PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())?))
}

/// An AdmissionReview of creating a Greeting in `ns` with `annotations`.
fn review(ns: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b9d4a1e-0000-4000-8000-000000000001",
            "kind": {"group": GROUP, "version": "v1alpha1", "kind": "Greeting"},
            "resource": {"group": GROUP, "version": "v1alpha1", "resource": "greetings"},
            "name": "made-up",
            "namespace": ns,
            "operation": "CREATE",
            "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
            "object": {
                "apiVersion": format!("{GROUP}/v1alpha1"),
                "kind": "Greeting",
                "metadata": {"name": "made-up", "namespace": ns, "annotations": annotations},
                "spec": {"message": "hi"},
            },
        },
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_client_ca_only_the_api_server_calls_the_admission_webhooks() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let client_ca = cluster_client_ca(plane)?;
    let ns = TestNamespace::new("webhook-callers").await?;
    let port = free_port()?;
    let clients = ClientAuth::from_file(&client_ca)?.names([CLIENT_NAME.to_owned()]);
    let certs = Certs::self_managed(&["127.0.0.1".to_owned()])?.verifying(Some(clients));
    let server_ca = certs.ca_bundle();
    let install = Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), server_ca.clone());
    let registry = Arc::new(Registry::new().installing(Some(install)));
    let server = webhook::serve(([127, 0, 0, 1], port).into(), Arc::new(certs), Arc::clone(&registry)).await?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .webhooks(Some(Arc::clone(&registry)))
        .component(find_component("greeter-webhooks").map_err(anyhow::Error::msg)?)
        .start()
        .await?;

    // The API server's calls work: its denial comes from the guest.
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1alpha1", "Greeting"), "greetings");
    let greetings: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &resource);
    let empty: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Greeting",
        "metadata": {"name": "empty"}, "spec": {"message": ""},
    }))?;
    let message = wait_for(Duration::from_secs(30), || async {
        match greetings.create(&PostParams::default(), &empty).await {
            Err(kube::Error::Api(s)) if s.message.contains("must not be empty") => Some(s.message),
            Ok(_) => {
                let _ = greetings.delete("empty", &DeleteParams::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await
    .context("the API server's call reached the guest")?;
    assert!(message.contains("spec.message must not be empty"), "{message}");
    let fine: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Greeting",
        "metadata": {"name": "fine"}, "spec": {"message": "hello"},
    }))?;
    greetings.create(&PostParams::default(), &fine).await.context("an allowed Greeting is stored")?;

    // Anyone else: no certificate, 401 naming the flag; a certificate of
    // another CA, no handshake.
    let path = format!("/admission/greeter-webhooks/{VALIDATE}");
    let made_up = review(ns.name(), json!({}));
    let (code, body) = post(port, &server_ca, None, &path, &made_up).await?;
    assert_eq!(code, 401, "a call without a client certificate: {body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("--webhook-client-ca")), "{body}");
    let foreign = post(port, &server_ca, Some(foreign_client_cert(CLIENT_NAME)?), &path, &made_up).await;
    assert!(foreign.is_err(), "a certificate of another CA is refused: {foreign:?}");
    // Conversion calls come without a certificate from the API server too:
    // they are not refused for it (an unknown component here: 404).
    let (code, _) = post(port, &server_ca, None, "/convert/nobody", &json!({})).await?;
    assert_eq!(code, 404);

    host.shutdown().await;
    server.shutdown().await;
    let client = ns.client();
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete("capstan-greeter-webhooks", &DeleteParams::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete("capstan-greeter-webhooks", &DeleteParams::default())
        .await;
    let _ = Api::<CustomResourceDefinition>::all(client)
        .delete(&format!("greetings.{GROUP}"), &DeleteParams::default())
        .await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_one_components_slow_webhook_leaves_another_components_webhook_answering() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("webhook-flood").await?;
    let port = free_port()?;
    let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
    let server_ca = certs.ca_bundle();
    // Nothing installed: the calls below are made directly.
    let registry = Arc::new(Registry::new());
    let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry)).await?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .webhooks(Some(Arc::clone(&registry)))
        .component(find_component("greeter-webhooks").map_err(anyhow::Error::msg)?)
        .component(find_component("loud").map_err(anyhow::Error::msg)?)
        .start()
        .await?;
    wait_for(Duration::from_secs(60), || async {
        (registry.get("greeter-webhooks").is_ok() && registry.get("loud").is_ok()).then_some(())
    })
    .await
    .context("both components serve webhooks")?;

    // 100 calls at once to a webhook that loops until its deadline (4.5 s).
    let path = format!("/admission/greeter-webhooks/{VALIDATE}");
    let slow = review(ns.name(), json!({"examples.capstan.dev/loop": "true"}));
    let (done, mut first_done) = tokio::sync::mpsc::channel(100);
    let flood: Vec<_> = (0..100)
        .map(|_| {
            let (ca, path, slow, done) = (server_ca.clone(), path.clone(), slow.clone(), done.clone());
            tokio::spawn(async move {
                let answer = post(port, &ca, None, &path, &slow).await;
                let _ = done.send(()).await;
                answer
            })
        })
        .collect();
    // The first answer (a refusal) comes once the flood has taken all it
    // can; the looping calls go on until 4.5 s.
    first_done.recv().await.context("a flood call ended")?;

    // Meanwhile the other component's conversion runs its guest: the
    // Failure is the guest's own message, not a missing instance.
    let conversion = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "0b9d4a1e-0000-4000-8000-000000000002",
            "desiredAPIVersion": "fixtures.capstan.dev/v2",
            "objects": [{"apiVersion": "fixtures.capstan.dev/v1", "kind": "Loud",
                "metadata": {"name": "a", "namespace": ns.name(), "uid": "1"}}],
        },
    });
    // Four at once (one instance of it may be kept idle: the others need
    // new ones), again and again while the flood's calls loop.
    for _ in 0..4 {
        let calls = (0..4).map(|_| post(port, &server_ca, None, "/convert/loud", &conversion));
        for answer in futures::future::join_all(calls).await {
            let (code, body) = answer?;
            assert_eq!(code, 200, "{body}");
            let message = body["response"]["result"]["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with("cccc"),
                "the guest answered during the flood: {}",
                &message[..message.len().min(300)]
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let mut codes = std::collections::BTreeMap::new();
    for call in flood {
        let (code, _) = call.await??;
        *codes.entry(code).or_insert(0) += 1;
    }
    // The budget ran 8 (deadline: 500) and refused the rest (429).
    assert_eq!(codes.get(&500), Some(&webhook::DEFAULT_BUDGET), "{codes:?}");
    assert_eq!(codes.get(&429), Some(&(100 - webhook::DEFAULT_BUDGET)), "{codes:?}");
    let scrape = capstan_host::metrics::metrics().encode();
    ensure!(
        scrape.contains(r#"capstan_webhook_requests_total{cluster="default",controller="greeter-webhooks",webhook="validate.greetings.webhooks.examples.capstan.dev",code="429"} 92"#),
        "the refused calls are counted"
    );

    host.shutdown().await;
    server.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
