//! Admission and conversion webhooks through the real API server: what a
//! webhook written as guest logic adds to a request, and what converting a
//! list costs per object.
//!
//! ```sh
//! cargo build --profile dist -p capstan-tests --bin bench-webhooks
//! tests/build-guests.sh
//! target/dist/bench-webhooks --creates 300 --rounds 3   # KUBECONFIG: a running control plane
//! ```
//!
//! One host (in this process) serves the `greeter-webhooks` example
//! (a validating webhook, a second validating webhook with failure policy
//! `Ignore`, and a defaulting one: three calls per create) over HTTPS on
//! loopback, the API server calling it by URL.
//!
//! - **Admission.** Each round creates `--creates` Greetings one after the
//!   other with the webhook configurations installed and the same number
//!   with them removed, in alternating order; the same objects each time
//!   (`replicas` given, so defaulting changes nothing). Reported: p50 and
//!   p99 of one create, the difference (what the webhooks add), and the
//!   host's own time per admission request (`capstan_webhook_request_duration_seconds`:
//!   TLS-decrypted body in, guest call, response out; mean).
//! - **Conversion.** `--objects` Greetings written as `v1alpha1` (stored as
//!   `v1`): the conversion requests the writes cause and the host's time per
//!   request; then the list in each version, `--rounds` × 3 times each,
//!   alternating (the API server converts when an object enters each
//!   version's watch cache, so lists call no webhook: the difference is
//!   what reading from one cache or the other costs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use capstan_host::metrics::metrics;
use capstan_host::serve::host::HostBuilder;
use capstan_host::serve::webhook::tls::Certs;
use capstan_host::serve::webhook::{self, Endpoint, Install, Registry};
use capstan_host::testing::find_component;
use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

const GROUP: &str = "webhooks.examples.capstan.dev";
const CONFIGURATION: &str = "capstan-greeter-webhooks";
const COMPONENT: &str = "greeter-webhooks";

#[derive(Parser, Debug)]
struct Args {
    /// Creates per round and setting.
    #[arg(long, default_value_t = 300)]
    creates: usize,
    /// Rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Objects in the converted list.
    #[arg(long, default_value_t = 500)]
    objects: usize,
}

fn greeting(name: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Greeting",
        "metadata": {"name": name}, "spec": {"message": "hi", "replicas": 1},
    }))?)
}

fn api(client: &Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, "Greeting");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "greetings"))
}

/// The sum and count of the histogram `family` over the series whose
/// labels satisfy `select`.
fn histogram(family: &str, select: impl Fn(&str) -> bool) -> (f64, f64) {
    let scrape = metrics().encode();
    let total = |suffix: &str| -> f64 {
        scrape
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{family}{suffix}{{")))
            .filter_map(|rest| rest.split_once("} "))
            .filter(|(labels, _)| select(labels))
            .filter_map(|(_, v)| v.parse::<f64>().ok())
            .sum()
    };
    (total("_sum"), total("_count"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Whether the API server calls the validating webhook now: an invalid
/// Greeting is refused by it (dry run, nothing stored).
async fn webhooks_active(greetings: &Api<DynamicObject>) -> bool {
    let mut invalid = greeting("probe").expect("a greeting");
    invalid.data["spec"]["message"] = json!("");
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    matches!(greetings.create(&dry, &invalid).await, Err(kube::Error::Api(s)) if s.message.contains("must not be empty"))
}

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        if Instant::now() > deadline {
            bail!("timed out waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Creates `n` Greetings one after the other; the time of each.
async fn creates(greetings: &Api<DynamicObject>, n: usize, tag: &str) -> Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let g = greeting(&format!("{tag}-{i}"))?;
        let started = Instant::now();
        greetings.create(&PostParams::default(), &g).await?;
        times.push(started.elapsed());
    }
    Ok(times)
}

async fn delete_all(greetings: &Api<DynamicObject>) -> Result<()> {
    greetings.delete_collection(&DeleteParams::default(), &ListParams::default()).await?;
    until("the Greetings are gone", async || {
        greetings.list(&ListParams::default().limit(1)).await.is_ok_and(|l| l.items.is_empty())
    })
    .await
}

fn fresh<K: kube::Resource + Clone>(object: &K) -> K {
    let mut copy = object.clone();
    let meta = copy.meta_mut();
    meta.resource_version = None;
    meta.uid = None;
    meta.creation_timestamp = None;
    meta.managed_fields = None;
    meta.generation = None;
    copy
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let client = Client::try_default().await.context("no cluster: set KUBECONFIG")?;
    let ns = format!("bench-webhooks-{}", capstan_tests::random_suffix(6));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}}))?).await?;

    let port = capstan_tests::free_port()?;
    let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
    let install = Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), certs.ca_bundle());
    let registry = Arc::new(Registry::new().installing(Some(install)));
    let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry)).await?;
    let host = HostBuilder::new(client.clone())
        .install_crds(true)
        .webhooks(Some(Arc::clone(&registry)))
        .component(find_component(COMPONENT).map_err(anyhow::Error::msg)?)
        .start()
        .await?;
    let v1alpha1 = api(&client, &ns, "v1alpha1");
    until("the webhooks are called", async || webhooks_active(&v1alpha1).await).await?;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let (saved_validating, saved_mutating) = (validating.get(CONFIGURATION).await?, mutating.get(CONFIGURATION).await?);
    // Warm up (connections, the guest's compiled code), then start without:
    // each round puts them back or takes them away.
    creates(&v1alpha1, 20, "warm").await?;
    delete_all(&v1alpha1).await?;
    validating.delete(CONFIGURATION, &DeleteParams::default()).await?;
    mutating.delete(CONFIGURATION, &DeleteParams::default()).await?;

    let admission = |labels: &str| {
        labels.contains(&format!("controller=\"{COMPONENT}\"")) && !labels.contains("webhook=\"convert\"")
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    let (mut host_sum, mut host_count) = (0.0, 0.0);
    for round in 0..args.rounds {
        for on in if round % 2 == 0 { [true, false] } else { [false, true] } {
            if on {
                // Rounds alternate the order, so the setting may already hold.
                if validating.get_opt(CONFIGURATION).await?.is_none() {
                    validating.create(&PostParams::default(), &fresh(&saved_validating)).await?;
                    mutating.create(&PostParams::default(), &fresh(&saved_mutating)).await?;
                }
                until("the webhooks are called", async || webhooks_active(&v1alpha1).await).await?;
                let before = histogram("capstan_webhook_request_duration_seconds", admission);
                with.extend(creates(&v1alpha1, args.creates, &format!("on-{round}")).await?);
                let after = histogram("capstan_webhook_request_duration_seconds", admission);
                host_sum += after.0 - before.0;
                host_count += after.1 - before.1;
            } else {
                if validating.get_opt(CONFIGURATION).await?.is_some() {
                    validating.delete(CONFIGURATION, &DeleteParams::default()).await?;
                    mutating.delete(CONFIGURATION, &DeleteParams::default()).await?;
                }
                until("the webhooks are not called", async || !webhooks_active(&v1alpha1).await).await?;
                without.extend(creates(&v1alpha1, args.creates, &format!("off-{round}")).await?);
            }
            delete_all(&v1alpha1).await?;
        }
    }
    with.sort();
    without.sort();
    let calls_per_create = host_count / with.len() as f64;
    println!("admission: {} creates each, {} rounds, alternating", args.creates, args.rounds);
    println!("{:<28} {:>9} {:>9}", "create of a Greeting", "p50 ms", "p99 ms");
    println!(
        "{:<28} {:>9.2} {:>9.2}",
        "without webhooks",
        ms(percentile(&without, 50.0)),
        ms(percentile(&without, 99.0))
    );
    println!("{:<28} {:>9.2} {:>9.2}", "with webhooks", ms(percentile(&with, 50.0)), ms(percentile(&with, 99.0)));
    println!(
        "{:<28} {:>9.2} {:>9.2}",
        "added",
        ms(percentile(&with, 50.0)) - ms(percentile(&without, 50.0)),
        ms(percentile(&with, 99.0)) - ms(percentile(&without, 99.0))
    );
    println!(
        "host time per admission request: {:.3} ms mean ({calls_per_create:.1} requests per create)",
        host_sum / host_count * 1000.0
    );

    // Conversion: objects written as v1alpha1 (stored as v1), listed in both versions.
    let webhooks_on = validating.get_opt(CONFIGURATION).await?.is_some();
    if webhooks_on {
        validating.delete(CONFIGURATION, &DeleteParams::default()).await?;
        mutating.delete(CONFIGURATION, &DeleteParams::default()).await?;
    }
    let converted = |labels: &str| {
        labels.contains(&format!("controller=\"{COMPONENT}\"")) && labels.contains("webhook=\"convert\"")
    };
    // The API server converts when an object is written (into the
    // storage version) and when it enters the watch cache of each other
    // served version; lists are then served from those caches.
    let before_writes = histogram("capstan_webhook_request_duration_seconds", converted);
    for i in 0..args.objects {
        v1alpha1.create(&PostParams::default(), &greeting(&format!("list-{i}"))?).await?;
    }
    // The watch caches catch up just after the writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_writes = histogram("capstan_webhook_request_duration_seconds", converted);
    let v1 = api(&client, &ns, "v1");
    let (mut plain, mut through) = (Vec::new(), Vec::new());
    let before = histogram("capstan_webhook_request_duration_seconds", converted);
    for i in 0..args.rounds * 3 {
        for as_v1 in if i % 2 == 0 { [true, false] } else { [false, true] } {
            let started = Instant::now();
            let list = if as_v1 {
                v1.list(&ListParams::default()).await?
            } else {
                v1alpha1.list(&ListParams::default()).await?
            };
            let took = started.elapsed();
            if list.items.len() != args.objects {
                bail!("listed {} Greetings, not {}", list.items.len(), args.objects);
            }
            if as_v1 {
                let first: &Value = &list.items[0].data["spec"]["greeting"];
                if first["text"] != "hi" {
                    bail!("not converted: {first}");
                }
                through.push(took);
            } else {
                plain.push(took);
            }
        }
    }
    let after = histogram("capstan_webhook_request_duration_seconds", converted);
    plain.sort();
    through.sort();
    let (p, t) = (percentile(&plain, 50.0), percentile(&through, 50.0));
    let reviews = after.1 - before.1;
    let objects_converted = (through.len() * args.objects) as f64;
    println!(
        "\nconversion: a list of {} Greetings written as v1alpha1 (stored as v1), {} lists each",
        args.objects,
        through.len()
    );
    println!("{:<28} {:>9.2}", "list as v1alpha1, p50 ms", ms(p));
    println!("{:<28} {:>9.2}", "list as v1, p50 ms", ms(t));
    println!("{:<28} {:>9.1}", "added per object, µs", (ms(t) - ms(p)) * 1000.0 / args.objects as f64);
    println!(
        "host time per converted object: {:.1} µs ({} conversion requests, {:.0} objects each)",
        (after.0 - before.0) / objects_converted * 1e6,
        reviews,
        objects_converted / reviews.max(1.0)
    );
    let write_reviews = after_writes.1 - before_writes.1;
    println!(
        "writes: {} creates as v1alpha1 made {write_reviews} conversion requests ({:.1} per object), \
         host time {:.1} µs per request",
        args.objects,
        write_reviews / args.objects as f64,
        (after_writes.0 - before_writes.0) / write_reviews.max(1.0) * 1e6
    );

    delete_all(&v1alpha1).await?;
    host.shutdown().await;
    server.shutdown().await;
    let _ = validating.delete(CONFIGURATION, &DeleteParams::default()).await;
    let _ = mutating.delete(CONFIGURATION, &DeleteParams::default()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(&format!("greetings.{GROUP}"), &DeleteParams::default()).await?;
    namespaces.delete(&ns, &DeleteParams::default()).await?;
    Ok(())
}
