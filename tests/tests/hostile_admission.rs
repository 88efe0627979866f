//! A hostile admission webhook must not reach past what it declared
//! (issue #29, item 1), on the real API server, as `hostile.rs` shows for
//! the other roles. The behaviours live in the fixture's admission
//! variants (`tests/fixtures/guests/src/meddler.rs`): `meddler`, webhooks
//! on a kind of its own CRD with no permission, which try calls they have
//! no grant for, trap, loop, run out of memory or answer too much as the
//! reviewed `Meddle` asks; `copycat`, a webhook on the meddler's kind
//! through a copy of its CRD; `conversion-copycat`, a conversion of the
//! meddler's kind through a copy of its CRD (#29.2); `secret-mutator`, a
//! mutating webhook on Secrets with no grant.
//!
//! The tests run one at a time ([`ONE_AT_A_TIME`]): the meddler's webhook
//! configurations (`capstan-meddler`) and its CRD are cluster-wide, and
//! each test removes them at its end. Each host names a cluster of its own
//! (`cluster_name`), so that the metrics it counts are its own.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::metrics::metrics;
use capstan_host::runtime::component::Error as ComponentError;
use capstan_host::serve::host::{Error as HostError, Host, HostBuilder, INSTALLED_BY};
use capstan_host::serve::webhook;
use capstan_host::testing::find_component;
use capstan_tests::webhook::{WebhookServer, post};
use capstan_tests::{ControlPlane, TestNamespace, random_suffix, wait_for};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(30);
/// The meddler's CRD, which the copycat copies.
const CRD: &str = "meddles.fixtures.capstan.dev";
const STRICT: &str = "strict.meddles.fixtures.capstan.dev";
/// The annotation the meddler's mutating webhook sets on a Meddle that
/// asks for nothing.
const MEDDLED: &str = "fixtures.capstan.dev/meddled";
/// The annotation the copycat and the secret-mutator set.
const COPIED: &str = "fixtures.capstan.dev/copied";
/// What the meddler denies with when asked to (`deny`).
const DENIAL: &str = "denied by the meddler";
/// What the meddler's `report` says when the grants denied every call it
/// tried (`meddler::ALL_DENIED`).
const ALL_DENIED: &str = "get-secret=denied list-secrets=denied list-secrets-all=denied create-secret=denied \
                          patch-victim=denied delete-victim=denied get-own=denied patch-own=denied event=denied";

/// Held by every test of this file (see the module docs).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn component(name: &str) -> PathBuf {
    find_component(name).unwrap_or_else(|e| panic!("{e}"))
}

/// A cluster name of one host's own, for its metrics.
fn own_cluster(what: &str) -> String {
    format!("{what}-{}", random_suffix(6))
}

fn meddles(ns: &TestNamespace) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("fixtures.capstan.dev", "v1", "Meddle");
    Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk_with_plural(&gvk, "meddles"))
}

/// A `Meddle` named `name` asking `spec` of the webhooks.
fn meddle(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "fixtures.capstan.dev/v1", "kind": "Meddle", "metadata": {"name": name}, "spec": spec,
    }))?)
}

fn annotation<'a>(object: &'a DynamicObject, key: &str) -> Option<&'a str> {
    object.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The message of the API server's refusal of `result`.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> Result<String> {
    match result {
        Err(kube::Error::Api(status)) => Ok(status.message),
        other => anyhow::bail!("expected a refusal, got {other:?}"),
    }
}

/// The series of `family` whose labels start with `prefix`
/// (`{cluster="…",controller="…",`), each as its labels and value.
fn series(scrape: &str, family: &str, prefix: &str) -> Vec<(String, f64)> {
    let start = format!("{family}{prefix}");
    scrape
        .lines()
        .filter(|l| l.starts_with(&start))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels[family.len()..].to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of the series of `family` whose labels start with `prefix`.
fn total(scrape: &str, family: &str, prefix: &str) -> f64 {
    series(scrape, family, prefix).iter().map(|(_, v)| v).sum()
}

/// `{cluster="<cluster>",controller="meddler",`: the labels of the
/// meddler's series on the host naming `cluster`.
fn meddler_labels(cluster: &str) -> String {
    format!(r#"{{cluster="{cluster}",controller="meddler","#)
}

/// How many times the meddler's guest was called to review, on the host
/// naming `cluster`.
fn reviews(cluster: &str) -> f64 {
    let series = format!(r#"{{cluster="{cluster}",controller="meddler",export="review"}}"#);
    total(&metrics().encode(), "capstan_guest_invocation_seconds_count", &series)
}

/// A host in `ns` naming `cluster`, installing the meddler's CRD (marked
/// `capstan.dev/installed-by: meddler`) and serving its webhooks through
/// `webhooks`, with `others` beside it.
async fn meddling_host(ns: &TestNamespace, cluster: &str, webhooks: &WebhookServer, others: &[&str]) -> Result<Host> {
    let mut builder = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .cluster_name(cluster)
        .install_crds(true)
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .component(component("meddler"));
    for other in others {
        builder = builder.component(component(other));
    }
    Ok(builder.start().await?)
}

/// Waits until the API server calls the meddler's validating and mutating
/// webhooks (its webhook informer takes the configurations in its time).
async fn wait_until_reviewed(api: &Api<DynamicObject>) -> Result<()> {
    let post = PostParams::default();
    wait_for(TIMEOUT, || async {
        let probe = meddle("probe-validating", json!({"strict": "deny"})).ok()?;
        match api.create(&post, &probe).await {
            Err(kube::Error::Api(s)) if s.message.contains(DENIAL) => Some(()),
            Ok(_) => {
                let _ = api.delete("probe-validating", &DeleteParams::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await
    .context("the validating webhooks are not called")?;
    wait_for(TIMEOUT, || async {
        let stored = api.create(&post, &meddle("probe-mutating", json!({})).ok()?).await.ok()?;
        let _ = api.delete("probe-mutating", &DeleteParams::default()).await;
        (annotation(&stored, MEDDLED) == Some("true")).then_some(())
    })
    .await
    .context("the mutating webhook is not called")
}

/// Removes what the meddler's and the copycat's hosts installed: their
/// webhook configurations and the meddler's CRD (waiting until it is
/// gone, so that the next test installs it afresh).
async fn remove_installed(client: &Client) -> Result<()> {
    for name in ["capstan-meddler", "capstan-copycat", "capstan-conversion-copycat"] {
        let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone()).delete(name, &DeleteParams::default()).await;
        let _ = Api::<MutatingWebhookConfiguration>::all(client.clone()).delete(name, &DeleteParams::default()).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = crds.delete(CRD, &DeleteParams::default()).await;
    wait_for(Duration::from_secs(60), || async {
        matches!(crds.get(CRD).await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await
    .context("the meddler's CRD did not go")
}

/// Whether `client` finds the webhook configurations of `component`.
async fn configurations_of(client: &Client, component: &str) -> Result<(bool, bool)> {
    let name = format!("capstan-{component}");
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone()).get_opt(&name).await?;
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone()).get_opt(&name).await?;
    Ok((validating.is_some(), mutating.is_some()))
}

// The meddler's `report`: from inside a review it reads a Secret, lists
// the Secrets of kube-system and of every namespace, creates a Secret,
// labels and deletes a ConfigMap, reads and patches the object under
// review, and records an Event about the Secret. It declares no
// permission: the grants deny each call, and nothing reaches the API
// server (the host's credentials are an admin's, so a call that had been
// sent would have gone through).
#[tokio::test(flavor = "multi_thread")]
async fn an_admission_webhook_reaches_nothing_past_its_grants_on_the_api_server() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("meddler-grants").await?;
    let post = PostParams::default();
    let secrets: Api<Secret> = ns.api();
    let bait: Secret =
        serde_json::from_value(json!({"metadata": {"name": "bait"}, "stringData": {"token": "s3cret"}}))?;
    secrets.create(&post, &bait).await?;
    let cms: Api<ConfigMap> = ns.api();
    let victim: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "victim"}, "data": {"owner": "me"}}))?;
    let victim = cms.create(&post, &victim).await?;
    let webhooks = WebhookServer::start(true).await?;
    let cluster = own_cluster("meddler-grants");
    let host = meddling_host(&ns, &cluster, &webhooks, &[]).await?;
    let api = meddles(&ns);
    wait_until_reviewed(&api).await?;

    let message = refusal(api.create(&post, &meddle("reporter", json!({"strict": "report"}))?).await)?;
    assert!(message.contains(&format!("admission webhook \"{STRICT}\" denied the request")), "{message}");
    assert!(message.ends_with(ALL_DENIED), "the calls the meddler made from review(): {message}");

    // On the API server, nothing the guest tried happened.
    let after = cms.get("victim").await.context("the victim is still there")?;
    assert_eq!(after.metadata.uid, victim.metadata.uid, "the victim was not deleted and made again");
    assert_eq!(after.metadata.resource_version, victim.metadata.resource_version, "the victim is unchanged");
    assert!(secrets.get_opt("stolen").await?.is_none(), "a Secret was created");
    assert!(secrets.get_opt("bait").await?.is_some(), "the bait is still there");
    let events = ns.api::<Event>().list(&ListParams::default()).await?.items;
    assert!(events.iter().all(|e| e.reason.as_deref() != Some("Meddled")), "an Event was recorded: {events:?}");
    assert!(api.get_opt("reporter").await?.is_none(), "the denied Meddle was stored");

    // Every kube call the meddler made stopped at the grants: counted as
    // denied, never sent (no other result, which only an answer gives).
    let scrape = metrics().encode();
    let calls = series(&scrape, "capstan_host_calls_total", &meddler_labels(&cluster));
    ensure!(!calls.is_empty(), "no host call of the meddler was counted");
    for (labels, _) in &calls {
        ensure!(labels.contains(r#"result="denied""#), "a call reached the API server: {labels}");
    }
    // get-secret, get-own, two lists, create, two patches, delete; the
    // Event's refusal is its own (`an event about that object`).
    let denied = total(&scrape, "capstan_grant_denials_total", &meddler_labels(&cluster));
    ensure!(denied >= 8.0, "{denied} calls denied by the grants: {calls:?}");

    host.shutdown().await;
    webhooks.server.shutdown().await;
    remove_installed(&ns.client()).await?;
    ns.cleanup().await
}

// A review that traps, loops or grows past the memory cap is a failed
// call: the webhook's failure policy decides (Fail: the write is refused
// naming the cause; Ignore: it goes through). Meanwhile the host serves
// its other webhooks and reconciles, and afterwards it serves on.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_that_traps_loops_or_runs_out_of_memory_costs_only_its_own_review() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("meddler-failures").await?;
    let webhooks = WebhookServer::start(true).await?;
    let cluster = own_cluster("meddler-failures");
    // The fixture controller beside it reconciles the namespace's ConfigMaps.
    let host = meddling_host(&ns, &cluster, &webhooks, &["fixture"]).await?;
    let api = meddles(&ns);
    wait_until_reviewed(&api).await?;
    let post = PostParams::default();
    let stored = |name: &'static str| {
        let api = api.clone();
        async move { anyhow::Ok(api.get_opt(name).await?.is_some()) }
    };

    // failurePolicy Fail: refused, naming the cause.
    let failed_call = "failed calling webhook";
    for (name, spec, cause) in [
        ("trap", json!({"strict": "trap"}), "guest trapped"),
        ("loop", json!({"strict": "loop"}), "guest exceeded its deadline of 5s"),
        ("grow", json!({"strict": "grow"}), "guest exceeded its memory limit of 67108864 bytes"),
        (
            "move",
            json!({"mutate": "move"}),
            "the changed object changes /metadata/namespace, which a mutation must keep",
        ),
        ("mutate-trap", json!({"mutate": "trap"}), "guest trapped"),
    ] {
        let message = refusal(api.create(&post, &meddle(name, spec)?).await)?;
        assert!(message.contains(failed_call) && message.contains(cause), "{name}: {message}");
        assert!(!stored(name).await?, "{name} was stored");
    }
    let message = refusal(api.create(&post, &meddle("trap-message", json!({"strict": "trap"}))?).await)?;
    assert!(message.contains("the meddler was asked to trap"), "the panic message: {message}");
    // A denial of 2 MiB is an answer, cut to 4 KiB.
    let message = refusal(api.create(&post, &meddle("loud", json!({"strict": "loud"}))?).await)?;
    ensure!(message.len() < webhook::admission::MAX_MESSAGE + 512, "{} bytes, not bounded", message.len());
    ensure!(message.contains("mmmm") && message.contains(" bytes cut)"), "{message:.300}");

    // failurePolicy Ignore: stored, the mutating webhook's change with it.
    for (name, behaviour) in [("lenient-trap", "trap"), ("lenient-loop", "loop"), ("lenient-grow", "grow")] {
        let created = api.create(&post, &meddle(name, json!({"lenient": behaviour}))?).await;
        let created = created.with_context(|| format!("{name} is stored"))?;
        assert_eq!(annotation(&created, MEDDLED), Some("true"), "{name}");
    }

    // While one review loops until its deadline, the other webhooks and
    // the reconciles go on.
    let looping = {
        let (api, slow) = (api.clone(), meddle("slow", json!({"strict": "loop"}))?);
        tokio::spawn(async move { api.create(&PostParams::default(), &slow).await })
    };
    let started = std::time::Instant::now();
    let meanwhile = api.create(&post, &meddle("meanwhile", json!({}))?).await.context("a Meddle beside the loop")?;
    assert_eq!(annotation(&meanwhile, MEDDLED), Some("true"));
    let cms: Api<ConfigMap> = ns.api();
    let parent: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "parent"}, "data": {"behaviour": "child"}}))?;
    cms.create(&post, &parent).await?;
    wait_for(TIMEOUT, || async { cms.get_opt("parent-child").await.ok().flatten() })
        .await
        .context("the fixture reconciled beside the loop")?;
    let beside = started.elapsed();
    ensure!(!looping.is_finished(), "the loop ended before the rest was served ({beside:?})");
    let message = refusal(looping.await?)?;
    assert!(message.contains("guest exceeded its deadline"), "{message}");

    // And after it all: the host serves on, ready.
    let after = api.create(&post, &meddle("after", json!({"strict": "ok"}))?).await.context("served after")?;
    assert_eq!(annotation(&after, MEDDLED), Some("true"));
    host.readiness().map_err(|reasons| anyhow::anyhow!("not ready: {reasons:?}"))?;
    let status = host.status();
    let meddler = status.iter().find(|s| s.name.as_deref() == Some("meddler")).context("the meddler's status")?;
    assert_eq!(meddler.state, "serving", "{status:?}");
    // Each failure counted by its kind.
    let scrape = metrics().encode();
    for (kind, at_least) in [("trap", 3.0), ("deadline", 3.0), ("memory", 2.0)] {
        let series = format!(r#"{{cluster="{cluster}",controller="meddler",kind="{kind}"}}"#);
        let counted = total(&scrape, "capstan_guest_traps_total", &series);
        ensure!(counted >= at_least, "{counted} {kind} failures counted, expected {at_least} or more");
    }

    host.shutdown().await;
    webhooks.server.shutdown().await;
    remove_installed(&ns.client()).await?;
    ns.cleanup().await
}

// The hole closed on branch `admit` (#29.1): a webhook-only component's
// primary kind is the one the SDK filled in (its first webhook's), and
// counted as granted a component with no permission could receive and
// change every Secret. It is refused at load, naming the missing read.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_only_component_mutating_secrets_without_a_grant_is_refused_at_load() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("secret-mutator").await?;
    let webhooks = WebhookServer::start(true).await?;
    let host = HostBuilder::new(ns.client())
        .namespace(Some(ns.name().to_owned()))
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .start()
        .await?;
    let mutator = component("secret-mutator");
    let err = host.load(&mutator).await.expect_err("a mutating webhook on Secrets with no grant is refused");
    let HostError::Component(ComponentError::Manifest { error, .. }) = &err else {
        panic!("not a manifest rejection: {err}");
    };
    let reason = error.to_string();
    assert!(reason.contains("Secret") && reason.contains("grants no read of it"), "{reason}");
    // The host says so in its status, serves nothing of it, and installed
    // nothing for it.
    let status = host.status();
    let slot = status.iter().find(|s| s.path == mutator).context("the file's status")?;
    assert_eq!(slot.state, "rejected", "{status:?}");
    let rejected = slot.rejected.as_ref().context("a rejection")?;
    assert!(rejected.reason.contains("grants no read of it"), "{rejected:?}");
    assert!(webhooks.registry.get("secret-mutator").is_err(), "its webhooks are served");
    assert_eq!(
        configurations_of(&ns.client(), "secret-mutator").await?,
        (false, false),
        "a configuration was installed"
    );
    // A Secret written now is not changed.
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "plain"}, "stringData": {"k": "v"}}))?;
    let written = ns.api::<Secret>().create(&PostParams::default(), &secret).await?;
    let annotations = written.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(COPIED), "{annotations:?}");
    host.shutdown().await;
    webhooks.server.shutdown().await;
    ns.cleanup().await
}

// #29.2: only the component whose CRD it is sets its conversion. The
// conversion-copycat lists a copy of the meddler's CRD and declares its
// conversion: refused, with or without --adopt-crd, and the CRD keeps
// the conversion its owner gave it (none).
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_of_another_components_crd_does_not_let_a_component_set_its_conversion() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("conversion-copycat").await?;
    let client = ns.client();
    let meddler_webhooks = WebhookServer::start(true).await?;
    let meddler = meddling_host(&ns, &own_cluster("conversion-owner"), &meddler_webhooks, &[]).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let strategy = || async {
        let crd = crds.get(CRD).await?;
        anyhow::Ok(crd.spec.conversion.map(|c| c.strategy))
    };
    assert_ne!(strategy().await?.as_deref(), Some("Webhook"), "the meddler converts nothing");

    let copycat = component("conversion-copycat");
    let webhooks = WebhookServer::start(true).await?;
    for adopt in [false, true] {
        let mut builder = HostBuilder::new(client.clone())
            .namespace(Some(ns.name().to_owned()))
            .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)));
        if adopt {
            builder = builder.adopt_crds([CRD]);
        }
        let host = builder.start().await?;
        let err = host.load(&copycat).await.expect_err("the conversion-copycat is refused");
        host.shutdown().await;
        assert!(
            matches!(&err, HostError::Webhook { error: webhook::Error::ConversionOwned { crd, owner, component }, .. }
                if crd == CRD && owner == "meddler" && component == "conversion-copycat"),
            "adopting {adopt}: {err}"
        );
        assert!(webhooks.registry.get("conversion-copycat").is_err(), "its conversion is served");
        assert_ne!(strategy().await?.as_deref(), Some("Webhook"), "adopting {adopt}: the copycat set the conversion");
    }

    // The meddler's objects are stored as before, unconverted.
    let api = meddles(&ns);
    wait_until_reviewed(&api).await?;
    meddler.shutdown().await;
    meddler_webhooks.server.shutdown().await;
    webhooks.server.shutdown().await;
    remove_installed(&client).await?;
    ns.cleanup().await
}

// A component may review a kind it has no grant on only as its own CRD's
// kind, and only if the CRD in the cluster is marked as its own: a copy
// of another component's CRD in its manifest reaches nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_copy_of_another_components_crd_does_not_let_a_webhook_review_its_kind() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("copycat").await?;
    let client = ns.client();
    // The meddler installs its CRD, marked as its own.
    let meddler_webhooks = WebhookServer::start(true).await?;
    let meddler = meddling_host(&ns, &own_cluster("copycat-owner"), &meddler_webhooks, &[]).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get(CRD).await?;
    let installed_by = crd.metadata.annotations.unwrap_or_default().get(INSTALLED_BY).cloned();
    assert_eq!(installed_by.as_deref(), Some("meddler"));

    // The copycat, with webhooks installed: refused, naming the owner.
    let webhooks = WebhookServer::start(true).await?;
    let host = HostBuilder::new(client.clone())
        .namespace(Some(ns.name().to_owned()))
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .start()
        .await?;
    let copycat = component("copycat");
    let err = host.load(&copycat).await.expect_err("the copycat is refused");
    assert!(
        matches!(&err, HostError::Webhook { error: webhook::Error::AdmissionOwned { crd, owner, component }, .. }
            if crd == CRD && owner == "meddler" && component == "copycat"),
        "{err}"
    );
    assert!(err.to_string().contains("it belongs to component meddler"), "{err}");
    assert!(webhooks.registry.get("copycat").is_err(), "its webhooks are served");
    assert_eq!(configurations_of(&client, "copycat").await?, (false, false), "a configuration was installed");
    host.shutdown().await;

    // With --install-crds it is refused sooner: the CRD is the meddler's.
    let installing = HostBuilder::new(client.clone())
        .namespace(Some(ns.name().to_owned()))
        .install_crds(true)
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .start()
        .await?;
    let err = installing.load(&copycat).await.expect_err("the copycat is refused");
    assert!(
        matches!(&err, HostError::CrdOwned { name, owner, controller } if name == CRD && owner == "meddler" && controller == "copycat"),
        "{err}"
    );
    installing.shutdown().await;

    // --adopt-crd takes over only a CRD no component installed: one the
    // meddler installed stays the meddler's.
    let adopting = HostBuilder::new(client.clone())
        .namespace(Some(ns.name().to_owned()))
        .adopt_crds([CRD])
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .start()
        .await?;
    let adopted = adopting.load(&copycat).await;
    let installed = configurations_of(&client, "copycat").await?;
    adopting.shutdown().await;
    assert!(
        matches!(&adopted, Err(HostError::Webhook { error: webhook::Error::AdmissionOwned { .. }, .. })),
        "--adopt-crd let the copycat review the meddler's kind: {adopted:?}, configurations {installed:?}"
    );
    assert_eq!(installed, (false, false), "a configuration was installed");

    // The meddler's objects pass the meddler's webhooks only.
    let api = meddles(&ns);
    wait_until_reviewed(&api).await?;
    let stored = api.create(&PostParams::default(), &meddle("mine", json!({}))?).await?;
    assert_eq!(annotation(&stored, MEDDLED), Some("true"));
    assert_eq!(annotation(&stored, COPIED), None, "the copycat changed the meddler's object");

    // A CRD no component installed (as kubectl or Helm leave it) is the
    // operator's to hand over: refused, naming the way out; with
    // --adopt-crd the copycat reviews (and changes) its kind.
    let unmark = json!({"metadata": {"annotations": {INSTALLED_BY: null}}});
    crds.patch(CRD, &PatchParams::default(), &Patch::Merge(&unmark)).await?;
    let unowned = HostBuilder::new(client.clone())
        .namespace(Some(ns.name().to_owned()))
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .start()
        .await?;
    let err = unowned.load(&copycat).await.expect_err("the copycat is refused");
    assert!(
        matches!(&err, HostError::Webhook { error: webhook::Error::AdmissionUnowned { crd, component, installed: true }, .. }
            if crd == CRD && component == "copycat"),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("run with --adopt-crd {CRD}")), "names the way out: {err}");
    unowned.shutdown().await;
    let adopting = HostBuilder::new(client.clone())
        .namespace(Some(ns.name().to_owned()))
        .adopt_crds([CRD])
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .start()
        .await?;
    adopting.load(&copycat).await.context("the copycat, on a CRD the operator hands over")?;
    assert_eq!(configurations_of(&client, "copycat").await?, (false, true));
    wait_for(TIMEOUT, || async {
        let name = format!("copied-{}", random_suffix(4));
        let stored = api.create(&PostParams::default(), &meddle(&name, json!({})).ok()?).await.ok()?;
        (annotation(&stored, COPIED) == Some("copycat")).then_some(())
    })
    .await
    .context("the copycat's webhook is not called")?;
    adopting.shutdown().await;

    meddler.shutdown().await;
    meddler_webhooks.server.shutdown().await;
    webhooks.server.shutdown().await;
    remove_installed(&client).await?;
    ns.cleanup().await
}

/// An AdmissionReview of creating a Meddle in `namespace` that asks the
/// strict webhook to deny.
fn review(namespace: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "6d1d2c8e-0000-4000-8000-000000000029",
            "kind": {"group": "fixtures.capstan.dev", "version": "v1", "kind": "Meddle"},
            "resource": {"group": "fixtures.capstan.dev", "version": "v1", "resource": "meddles"},
            "name": "posted",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:admin", "groups": ["system:masters"]},
            "object": {
                "apiVersion": "fixtures.capstan.dev/v1", "kind": "Meddle",
                "metadata": {"name": "posted", "namespace": namespace},
                "spec": {"strict": "deny"},
            },
        },
    })
}

/// A host naming `cluster` that serves the meddler's webhooks through
/// `webhooks` (nothing installed: the calls are posted) in `namespaces`
/// (none: all).
async fn posted_to(client: Client, cluster: &str, webhooks: &WebhookServer, namespaces: &[&str]) -> Result<Host> {
    let host = HostBuilder::new(client)
        .namespaces(namespaces.iter().copied())
        .cluster_name(cluster)
        .webhooks(Some(std::sync::Arc::clone(&webhooks.registry)))
        .component(component("meddler"))
        .start()
        .await?;
    wait_for(TIMEOUT, || async { webhooks.registry.get_in(cluster, "meddler").is_ok().then_some(()) })
        .await
        .context("the meddler's webhooks are served")?;
    Ok(host)
}

/// Posts [`review`] for `namespace` to the strict webhook of `webhooks`
/// served for `cluster`: whether it was allowed, and the denial's message.
async fn posted(webhooks: &WebhookServer, cluster: &str, namespace: &str) -> Result<(bool, Option<String>)> {
    posted_review(webhooks, cluster, &review(namespace)).await
}

/// Posts `review` to the strict webhook of `webhooks` served for `cluster`
/// (under its route prefix): whether it was allowed, and the denial's
/// message.
async fn posted_review(webhooks: &WebhookServer, cluster: &str, review: &Value) -> Result<(bool, Option<String>)> {
    let path = format!("{}/admission/meddler/{STRICT}", webhook::route_prefix(cluster));
    let (code, body) = post(webhooks.port, &webhooks.ca, None, &path, review).await?;
    ensure!(code == 200, "{review}: HTTP {code}: {body}");
    let response = &body["response"];
    ensure!(response["uid"] == "6d1d2c8e-0000-4000-8000-000000000029", "{body}");
    let allowed = response["allowed"].as_bool().context("allowed")?;
    Ok((allowed, response["status"]["message"].as_str().map(str::to_owned)))
}

// A review POSTed to the port by another client (no client CA asked for)
// for an object in a namespace the host does not serve is answered
// allowed, and the guest never sees it: kube-system, kube-public and
// kube-node-lease unless served by name (-n), any namespace outside the
// -n list. One in a served namespace reaches the guest.
#[tokio::test(flavor = "multi_thread")]
async fn a_review_posted_for_a_namespace_the_host_does_not_serve_is_allowed_without_calling_the_guest() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().await;
    let client = ControlPlane::shared().await?.client()?;
    let ns = TestNamespace::new("meddler-posted").await?;
    let elsewhere = TestNamespace::new("meddler-elsewhere").await?;
    let system = ["kube-system", "kube-public", "kube-node-lease"];

    // Serving one namespace (-n).
    let webhooks = WebhookServer::start(false).await?;
    let cluster = own_cluster("posted-one");
    let host = posted_to(client.clone(), &cluster, &webhooks, &[ns.name()]).await?;
    for namespace in system.into_iter().chain([elsewhere.name(), "default"]) {
        assert_eq!(posted(&webhooks, &cluster, namespace).await?, (true, None), "{namespace}");
    }
    assert_eq!(reviews(&cluster), 0.0, "the guest was called for a namespace the host does not serve");
    let answered = format!(r#"{{cluster="{cluster}",controller="meddler",webhook="{STRICT}",code="200"}}"#);
    assert_eq!(total(&metrics().encode(), "capstan_webhook_requests_total", &answered), 5.0, "the host answered each");
    // Forged reviews that hide where the object is, or name a kind the
    // webhook does not review, are not the guest's to see either.
    let mut hidden = review("kube-system");
    hidden["request"].as_object_mut().expect("a request").remove("namespace");
    let mut disagreeing = review(ns.name());
    disagreeing["request"]["object"]["metadata"]["namespace"] = json!("kube-system");
    let mut old_elsewhere = review(ns.name());
    old_elsewhere["request"]["operation"] = json!("UPDATE");
    old_elsewhere["request"]["oldObject"] = review("kube-system")["request"]["object"].clone();
    let mut secret = review(ns.name());
    secret["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Secret"});
    secret["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "secrets"});
    secret["request"]["object"]["apiVersion"] = json!("v1");
    secret["request"]["object"]["kind"] = json!("Secret");
    for (what, forged) in
        [("no namespace", hidden), ("disagreeing", disagreeing), ("old object", old_elsewhere), ("Secret", secret)]
    {
        assert_eq!(posted_review(&webhooks, &cluster, &forged).await?, (true, None), "{what}");
    }
    assert_eq!(reviews(&cluster), 0.0, "the guest was called for a forged review");
    assert_eq!(posted(&webhooks, &cluster, ns.name()).await?, (false, Some(DENIAL.to_owned())), "the served namespace");
    assert_eq!(reviews(&cluster), 1.0);
    host.shutdown().await;
    webhooks.server.shutdown().await;

    // Serving every namespace: all but the system ones.
    let webhooks = WebhookServer::start(false).await?;
    let cluster = own_cluster("posted-all");
    let host = posted_to(client.clone(), &cluster, &webhooks, &[]).await?;
    for namespace in system {
        assert_eq!(posted(&webhooks, &cluster, namespace).await?, (true, None), "{namespace}");
    }
    assert_eq!(reviews(&cluster), 0.0, "the guest was called for a system namespace");
    assert_eq!(posted(&webhooks, &cluster, elsewhere.name()).await?, (false, Some(DENIAL.to_owned())));
    assert_eq!(reviews(&cluster), 1.0);
    host.shutdown().await;
    webhooks.server.shutdown().await;

    // Serving kube-system by name: reviewed there.
    let webhooks = WebhookServer::start(false).await?;
    let cluster = own_cluster("posted-system");
    let host = posted_to(client.clone(), &cluster, &webhooks, &[ns.name(), "kube-system"]).await?;
    assert_eq!(posted(&webhooks, &cluster, "kube-public").await?, (true, None));
    assert_eq!(reviews(&cluster), 0.0);
    assert_eq!(posted(&webhooks, &cluster, "kube-system").await?, (false, Some(DENIAL.to_owned())), "served by name");
    assert_eq!(reviews(&cluster), 1.0);
    host.shutdown().await;
    webhooks.server.shutdown().await;

    elsewhere.cleanup().await?;
    ns.cleanup().await
}
