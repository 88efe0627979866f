//! Leader election (`capstan_host::control::leader`) against the real API server:
//! one Lease per controller, spreading across replicas, takeover after a
//! crash or a resignation, and losing the Lease at once. Every test works
//! in its own namespace with short timings; the time bounds asserted are
//! correctness bounds (what the algorithm promises, with slack for a busy
//! machine), not speed claims.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::control::leader::{Elections, Leadership, LeaseSettings, lease_name};
use capstan_tests::{ControlPlane, PrivateControlPlane, TestNamespace, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Slack for a busy machine (two cores shared with other builds).
const SLACK: Duration = Duration::from_secs(2);

/// Lease 3 s, renew deadline 2 s, retry period 0.5 s.
fn fast(namespace: &str, identity: &str) -> LeaseSettings {
    LeaseSettings::new(namespace, identity).timing(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
}

/// Lease 10 s, renew deadline 6 s, retry period 0.5 s: expiry and the
/// renew deadline are far from one retry period, so a test can tell them
/// apart.
fn long_lease(namespace: &str, identity: &str) -> LeaseSettings {
    LeaseSettings::new(namespace, identity).timing(
        Duration::from_secs(10),
        Duration::from_secs(6),
        Duration::from_millis(500),
    )
}

fn elections(client: Client, settings: LeaseSettings) -> Result<Elections> {
    Ok(Elections::new(client, settings)?)
}

async fn holder(api: &Api<Lease>, name: &str) -> Option<String> {
    api.get_opt(name).await.ok()??.spec?.holder_identity
}

async fn wait_leading(leadership: &Leadership) -> Result<()> {
    let mut leading = leadership.watch();
    tokio::time::timeout(TIMEOUT, leading.wait_for(|l| *l))
        .await
        .with_context(|| format!("{} did not become leader within {TIMEOUT:?}", leadership.lease()))?
        .context("campaign ended")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_one_of_two_replicas_leads_and_the_lease_names_it() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("leader-one").await?;
    let name = lease_name("greeter");
    let a = elections(ns.client(), fast(ns.name(), "a"))?;
    let b = elections(ns.client(), fast(ns.name(), "b"))?;
    let (la, lb) = (a.join(&name)?, b.join(&name)?);

    let leader = wait_for(TIMEOUT, || async {
        match (la.is_leading(), lb.is_leading()) {
            (true, false) => Some("a"),
            (false, true) => Some("b"),
            _ => None,
        }
    })
    .await?;
    let api: Api<Lease> = ns.api();
    assert_eq!(holder(&api, &name).await.as_deref(), Some(leader));

    // Over several renewals (one lease duration), never both, never none.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(la.is_leading() != lb.is_leading(), "a: {}, b: {}", la.is_leading(), lb.is_leading());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(holder(&api, &name).await.as_deref(), Some(leader));
    assert_eq!(a.leading() + b.leading(), 1);

    // One replica campaigns once per Lease.
    assert!(a.join(&name).is_err());
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_joining_four_leases_together_lead_two_each() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("leader-spread").await?;
    // A retry period well above an API round trip on a busy machine: the
    // spreading delay is counted in retry periods.
    let timing = |id| {
        LeaseSettings::new(ns.name(), id).timing(Duration::from_secs(4), Duration::from_secs(3), Duration::from_secs(1))
    };
    let a = elections(ns.client(), timing("a"))?;
    let b = elections(ns.client(), timing("b"))?;
    let names: Vec<String> = (1..=4).map(|i| lease_name(&format!("controller-{i}"))).collect();
    let mut joined = Vec::new();
    for name in &names {
        joined.push((a.join(name)?, b.join(name)?));
    }

    wait_for(TIMEOUT, || async { joined.iter().all(|(la, lb)| la.is_leading() != lb.is_leading()).then_some(()) })
        .await
        .context("every lease led by exactly one replica")?;
    // Both replicas had their second turn one retry period after the
    // first; give a third turn the time to happen (it must not take more).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(joined.iter().all(|(la, lb)| la.is_leading() != lb.is_leading()));
    assert_eq!((a.leading(), b.leading()), (2, 2));

    let api: Api<Lease> = ns.api();
    for (la, lb) in &joined {
        let expected = if la.is_leading() { "a" } else { "b" };
        assert_eq!(holder(&api, la.lease()).await.as_deref(), Some(expected), "{}", lb.lease());
    }
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_takes_over_once_the_crashed_leaders_lease_expires() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("leader-crash").await?;
    let name = lease_name("greeter");
    let settings = fast(ns.name(), "a");
    let a = elections(ns.client(), settings.clone())?;
    let la = a.join(&name)?;
    wait_leading(&la).await?;
    let b = elections(ns.client(), fast(ns.name(), "b"))?;
    let lb = b.join(&name)?;
    // The standby has read the Lease at least once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!lb.is_leading());

    // A crash: the campaign stops without releasing the Lease.
    let a_watch = la.watch();
    drop(la);
    drop(a);
    let crashed = Instant::now();
    // a's last renewal (one that was on its way when it crashed included).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api: Api<Lease> = ns.api();
    let last_renewal = api.get(&name).await?.spec.and_then(|s| s.renew_time).context("no renew time")?;
    wait_leading(&lb).await?;
    let took = crashed.elapsed();
    let bound = settings.lease_duration + 2 * settings.retry_period + SLACK;
    eprintln!("took over after {took:?} (bound {bound:?})");
    assert!(took < bound, "took over after {took:?}, bound {bound:?}");
    assert!(!*a_watch.borrow(), "the crashed replica still reports leading");

    // Never before the Lease expired (both times are this machine's clock).
    let spec = api.get(&name).await?.spec.context("lease without spec")?;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    let acquired = spec.acquire_time.context("no acquire time")?;
    let waited = acquired.0.duration_since(last_renewal.0);
    assert!(
        waited.as_secs_f64() >= settings.lease_duration.as_secs_f64(),
        "b took the lease {waited:?} after a's last renewal"
    );
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resigned_lease_is_taken_over_within_a_retry_period() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("leader-resign").await?;
    let name = lease_name("greeter");
    let settings = long_lease(ns.name(), "a");
    let a = elections(ns.client(), settings.clone())?;
    let la = a.join(&name)?;
    wait_leading(&la).await?;
    let b = elections(ns.client(), long_lease(ns.name(), "b"))?;
    let lb = b.join(&name)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!lb.is_leading());

    let a_watch = la.watch();
    let resigned = Instant::now();
    la.resign().await?;
    assert!(!*a_watch.borrow(), "still leading after resigning");
    assert_eq!(a.leading(), 0);
    wait_leading(&lb).await?;
    let took = resigned.elapsed();
    // Well below the 10 s lease duration: the standby did not wait for
    // the Lease to expire.
    let bound = settings.retry_period + SLACK;
    eprintln!("took over after {took:?} (bound {bound:?})");
    assert!(took < bound, "took over after {took:?}, bound {bound:?}");

    let api: Api<Lease> = ns.api();
    let lease = api.get(&name).await?.spec.context("lease without spec")?;
    assert_eq!(lease.holder_identity.as_deref(), Some("b"));
    assert_eq!(lease.lease_transitions, Some(1), "created by a (0), one change of holder to b");
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_lease_is_taken_stops_leading_within_a_retry_period() -> Result<()> {
    ControlPlane::shared().await?;
    let ns = TestNamespace::new("leader-taken").await?;
    let name = lease_name("greeter");
    let settings = long_lease(ns.name(), "a");
    let a = elections(ns.client(), settings.clone())?;
    let la = a.join(&name)?;
    wait_leading(&la).await?;

    let api: Api<Lease> = ns.api();
    let mut lease = api.get(&name).await?;
    let spec = lease.spec.as_mut().context("lease without spec")?;
    spec.holder_identity = Some("intruder".to_owned());
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    api.replace(&name, &PostParams::default(), &lease).await?;
    let taken = Instant::now();

    let mut leading = la.watch();
    tokio::time::timeout(TIMEOUT, leading.wait_for(|l| !*l)).await?.context("campaign ended")?;
    let took = taken.elapsed();
    // Well below the 6 s renew deadline: seen at the next renewal.
    let bound = settings.retry_period + SLACK;
    eprintln!("stopped leading after {took:?} (bound {bound:?})");
    assert!(took < bound, "stopped leading after {took:?}, bound {bound:?}");
    assert_eq!(a.leading(), 0);
    // The former leader waits for the intruder's Lease to expire.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(holder(&api, &name).await.as_deref(), Some("intruder"));
    assert!(!la.is_leading());
    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_that_cannot_renew_stops_leading_at_the_renew_deadline_and_leads_again_after() -> Result<()> {
    // Kills kube-apiserver: a control plane of this test's own.
    let private = PrivateControlPlane::start(false).await?;
    let client = private.plane().client()?;
    let namespace = format!("leader-deadline-{}", capstan_tests::random_suffix(6));
    let ns = Namespace {
        metadata: ObjectMeta { name: Some(namespace.clone()), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    let settings = fast(&namespace, "a");
    let a = elections(client.clone(), settings.clone())?;
    let la = a.join(&lease_name("greeter"))?;
    wait_leading(&la).await?;

    let down_for = Duration::from_secs(6);
    let started = Instant::now();
    // When the API server is seen gone: the restart command kills it only
    // after it has started and checked the cluster (seconds, on a busy
    // machine), and the last renewal was before that.
    let gone = tokio::spawn(async move { capstan_tests::until_down(&client, TIMEOUT).await });
    let mut restart = std::pin::pin!(private.restart_apiserver(down_for));
    let mut leading = la.watch();
    let lost_while_down = tokio::select! {
        result = &mut restart => { result?; false }
        lost = leading.wait_for(|l| !*l) => { lost.context("campaign ended")?; true }
    };
    let lost = std::time::Instant::now();
    ensure!(lost_while_down, "still leading after the API server was back ({:?})", started.elapsed());
    let gone = gone.await??;
    let took = lost.saturating_duration_since(gone);
    let bound = settings.renew_deadline + SLACK;
    eprintln!("stopped leading {took:?} after the API server was seen gone (bound {bound:?})");
    assert!(took < bound, "stopped leading {took:?} after the API server was seen gone, bound {bound:?}");
    restart.await?;

    // The Lease still names this replica: it takes it back.
    wait_leading(&la).await?;
    Ok(())
}
