//! What the host writes into a primary object's status, on the mock host:
//! the guest's status and the host's `Reconciled` condition, nothing it
//! read before the guest ran. The fixture is `status-writer`
//! (`tests/fixtures/guests/src/probe.rs`), a custom kind whose
//! `status.conditions` is an atomic list.
//!
//! Needs the guest components built by `tests/build-guests.sh` (the test
//! command does it); their folder is `$CAPSTAN_GUESTS`, else
//! `$CARGO_TARGET_DIR/guests`, else `target/guests`.

use capstan_host::cluster::{self, Cluster, Patch, Subresource};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::MockHost;
use serde_json::{Value, json};

fn probe_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new("fixtures.capstan.dev", "v1", "Probe"), Some("demo"), name)
}

fn probe(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "fixtures.capstan.dev/v1",
        "kind": "Probe",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": spec,
    })
}

async fn host() -> MockHost {
    let mut host = MockHost::new().expect("mock host");
    let guest = capstan_host::testing::find_component("status-writer").unwrap_or_else(|e| panic!("{e}"));
    host.load(guest).await.expect("status-writer loads");
    host
}

/// The condition of `type_` in the status of `object`.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

#[tokio::test]
async fn a_terminal_failure_without_status_writes_only_the_hosts_condition() {
    let mut host = host().await;
    host.seed(probe("p", json!({"behaviour": "write-then-fail"}))).expect("seeded");
    // Another writer's field, there before the guest runs.
    let before = Patch::Merge(json!({"status": {"other": "before"}}));
    host.cluster().patch(&probe_ref("p"), before, Subresource::Status).await.expect("status patched");
    let run = host.run_until_idle().await.expect("settles");
    assert!(run.failures().count() > 0, "the guest fails");

    let p = host.cluster().get_sync(&probe_ref("p")).expect("probe");
    let ready = condition(&p, "Ready").unwrap_or_else(|| panic!("the guest's Ready is kept: {p:#}"));
    assert_eq!(ready["status"], "False", "{p:#}");
    let ours = condition(&p, "Reconciled").unwrap_or_else(|| panic!("the host's condition: {p:#}"));
    assert_eq!((&ours["status"], &ours["reason"]), (&json!("False"), &json!("TerminalError")), "{p:#}");
    assert_eq!(p["status"]["other"], "during", "what was written while the guest ran stays: {p:#}");
}

#[tokio::test]
async fn a_refused_child_sets_reconciled_false_whatever_the_guests_status() {
    let mut host = host().await;
    let ready = json!({"type": "Ready", "status": "True", "reason": "Fine", "message": "ignores failed children",
        "lastTransitionTime": "2026-01-01T00:00:00Z"});
    // Data that is not a string: the API server refuses the child (400).
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "refused"}, "data": {"n": 5}});
    // A status the API server takes, and one it refuses (`count` is an integer).
    host.seed(probe("valid", json!({"child": child, "status": {"conditions": [ready]}}))).expect("seeded");
    host.seed(probe("invalid", json!({"child": child, "status": {"count": "many", "conditions": [ready]}})))
        .expect("seeded");
    host.run_until_idle().await.expect("settles");

    for name in ["valid", "invalid"] {
        let p = host.cluster().get_sync(&probe_ref(name)).expect("probe");
        let ours = condition(&p, "Reconciled").unwrap_or_else(|| panic!("{name}: no Reconciled condition: {p:#}"));
        assert_eq!((&ours["status"], &ours["reason"]), (&json!("False"), &json!("ChildRefused")), "{p:#}");
    }
    let valid = host.cluster().get_sync(&probe_ref("valid")).expect("probe");
    assert_eq!(condition(&valid, "Ready").map(|c| &c["status"]), Some(&json!("True")), "the guest's own: {valid:#}");
}

#[tokio::test]
async fn a_huge_terminal_message_is_cut_before_the_log_the_event_and_the_condition() {
    let mut host = host().await;
    host.seed(probe("loud", json!({"behaviour": "huge-terminal"}))).expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    let error = run.failures().next().expect("fails").report.result.as_ref().expect_err("an error").to_string();
    assert!(error.len() < 2 * cluster::MAX_MESSAGE && error.ends_with(" bytes cut)"), "{} bytes", error.len());
    let note = host.events().into_iter().find(|e| e.reason == "ReconcileFailed").and_then(|e| e.note).expect("event");
    assert!(note.len() <= cluster::MAX_MESSAGE, "{} bytes", note.len());
    let p = host.cluster().get_sync(&probe_ref("loud")).expect("probe");
    let message = condition(&p, "Reconciled").and_then(|c| c["message"].as_str()).expect("a condition").to_owned();
    assert!(message.len() <= cluster::MAX_MESSAGE, "{} bytes", message.len());
}
