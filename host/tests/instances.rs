//! Instances kept between calls: a guest instance serves later calls of
//! its controller, and is dropped after a trap, after memory grown past
//! half the cap, and after `Limits::reuse` calls; no call sees another's
//! journal.
//!
//! The fixture's `count` behaviour counts, in a global of the instance,
//! the calls it served, and returns the count in a child ConfigMap: 1
//! means a fresh instance.
//!
//! Needs the guest components built by `tests/build-guests.sh` (the test
//! command does it).

mod fixture;

use capstan_host::control::reconciler;
use capstan_host::runtime::invocation as runtime;
use capstan_host::runtime::limits::Limits;
use capstan_host::testing::MockHost;
use fixture::{calls, reconcile};

/// The tests of this file run one at a time: they count instances in the
/// process-wide metrics, under the one controller name `fixture`.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Instances made for the fixture's calls so far
/// (`capstan_guest_instances_total`).
fn instances_made() -> f64 {
    let scrape = capstan_host::metrics::metrics().encode();
    let series = r#"capstan_guest_instances_total{cluster="default",controller="fixture"}"#;
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

async fn host(limits: Limits) -> MockHost {
    let mut host = MockHost::with_limits(limits, None).expect("host");
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    host.load(fixture).await.expect("loads");
    host
}

#[tokio::test]
async fn an_instance_serves_the_later_calls_of_its_controller() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut host = host(Limits::default()).await;
    let before = instances_made();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        let report = reconcile(&mut host, name, "count").await;
        assert!(report.result.is_ok(), "{:?}", report.result);
        assert_eq!(calls(&host, name), i as u32 + 1, "{name}: the same instance counted on");
    }
    assert_eq!(instances_made() - before, 0.0, "every call ran on the instance made for manifest()");
}

#[tokio::test]
async fn with_reuse_1_every_call_gets_a_fresh_instance() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut host = host(Limits::default().reuse(1)).await;
    let before = instances_made();
    for name in ["a", "b"] {
        reconcile(&mut host, name, "count").await;
        assert_eq!(calls(&host, name), 1, "{name}");
    }
    // `a`, its child `a-count`, `b`, `b-count`.
    assert_eq!(instances_made() - before, 4.0, "one instance a call");
}

#[tokio::test]
async fn an_instance_is_dropped_after_its_last_call() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // Four calls an instance. Each round makes two: the `count` one and the
    // reconcile of its child (a ConfigMap too); the first instance also
    // served `manifest()` at load. So the counts go 1, 2, then a fresh
    // instance.
    let mut host = host(Limits::default().reuse(4)).await;
    let seen: Vec<u32> = {
        let mut seen = Vec::new();
        for name in ["a", "b", "c", "d", "e"] {
            reconcile(&mut host, name, "count").await;
            seen.push(calls(&host, name));
        }
        seen
    };
    assert_eq!(seen, [1, 2, 1, 2, 1]);
}

#[tokio::test]
async fn a_trap_drops_the_instance_and_the_next_call_starts_fresh() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut host = host(Limits::default()).await;
    reconcile(&mut host, "a", "count").await;
    reconcile(&mut host, "b", "count").await;
    assert_eq!(calls(&host, "b"), 2);
    let trapped = reconcile(&mut host, "t", "trap").await;
    assert!(matches!(trapped.result, Err(reconciler::Error::Guest(runtime::Error::Trap(_)))), "{:?}", trapped.result);
    reconcile(&mut host, "c", "count").await;
    assert_eq!(calls(&host, "c"), 1, "a fresh instance after the trap");
}

#[tokio::test]
async fn a_deadline_drops_the_instance() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut host = host(Limits::default().deadline(std::time::Duration::from_millis(200))).await;
    reconcile(&mut host, "a", "count").await;
    let stopped = reconcile(&mut host, "l", "loop").await;
    assert!(
        matches!(stopped.result, Err(reconciler::Error::Guest(runtime::Error::Deadline(_)))),
        "{:?}",
        stopped.result
    );
    reconcile(&mut host, "b", "count").await;
    assert_eq!(calls(&host, "b"), 1, "a fresh instance after the deadline");
}

#[tokio::test]
async fn memory_grown_past_half_the_cap_is_not_kept() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // `hold` keeps 40 MiB: past half of 64 MiB, under half of 128 MiB.
    for (cap, after) in [(64 << 20, 1), (128 << 20, 2)] {
        let mut host = host(Limits::default().memory(cap)).await;
        reconcile(&mut host, "a", "count").await;
        let held = reconcile(&mut host, "h", "hold").await;
        assert!(held.result.is_ok(), "{:?}", held.result);
        reconcile(&mut host, "b", "count").await;
        assert_eq!(calls(&host, "b"), after, "cap of {} MiB", cap >> 20);
    }
}

#[tokio::test]
async fn a_call_sees_only_its_own_journal() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut host = host(Limits::default()).await;
    let flood = reconcile(&mut host, "f", "stdout-flood").await;
    assert!(flood.result.is_ok(), "{:?}", flood.result);
    assert!(flood.journal.stdout_dropped > 0, "the flood went over the cap");
    let next = reconcile(&mut host, "a", "count").await;
    assert!(next.result.is_ok(), "{:?}", next.result);
    assert_eq!(calls(&host, "a"), 1, "count was not called before");
    assert!(next.journal.stdout.is_empty() && next.journal.stdout_dropped == 0, "{:?}", next.journal.stdout.len());
    let lines: Vec<_> = next.journal.logs.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(lines, ["reconciling"], "only its own line");
}

#[tokio::test]
async fn a_restart_of_the_mock_host_starts_fresh_instances() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut host = host(Limits::default()).await;
    reconcile(&mut host, "a", "count").await;
    host.restart().await.expect("restarts");
    host.run_until_idle().await.expect("runs");
    reconcile(&mut host, "b", "count").await;
    // The restart reconciled `a` again (a count, on the fresh instance).
    assert_eq!(calls(&host, "b"), 2, "one count since the restart before b's");
}
