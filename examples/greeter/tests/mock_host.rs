//! The greeter on the mock host: the real component, the real runtime and
//! reconciler, an in-memory cluster. Build the component first
//! (`cargo build --release --target wasm32-wasip2 -p greeter`, or
//! `tests/build-guests.sh`).

use capstan_host::cluster::{Cluster, Patch, Propagation, Subresource};
use capstan_host::control::reconciler::EventKind;
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::{MockHost, find_component};
use serde_json::{Value, json};

fn greeting_kind() -> Gvk {
    Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting")
}

fn greeting(name: &str, message: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"message": message, "replicas": replicas},
    })
}

fn r(kind: Gvk, name: &str) -> ObjectRef {
    ObjectRef::new(kind, Some("demo"), name)
}

fn configmap(name: &str) -> ObjectRef {
    r(Gvk::new("", "v1", "ConfigMap"), name)
}

fn deployment(name: &str) -> ObjectRef {
    r(Gvk::new("apps", "v1", "Deployment"), name)
}

async fn host_with_greeter() -> MockHost {
    let mut host = MockHost::new().expect("mock host");
    host.load(find_component("greeter").unwrap_or_else(|e| panic!("{e}"))).await.expect("greeter loads");
    host
}

#[tokio::test]
async fn a_new_greeting_gets_owned_children_a_ready_status_and_an_event() {
    let mut host = host_with_greeter().await;
    let created = host.seed(greeting("hello", "hi there", 2)).expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.failures().count(), 0);
    assert_eq!(run.events()[0], ("hello".to_owned(), EventKind::Added));

    let cm = host.cluster().get_sync(&configmap("hello-greeting")).expect("configmap created");
    assert_eq!(cm["data"]["message"], "hi there");
    let owner = &cm["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], created["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);

    let deploy = host.cluster().get_sync(&deployment("hello-greeter")).expect("deployment created");
    assert_eq!(deploy["spec"]["replicas"], 2);

    let g = host.cluster().get_sync(&r(greeting_kind(), "hello")).expect("greeting");
    assert_eq!(g["status"]["observedGeneration"], 1);
    assert_eq!(g["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(g["status"]["conditions"][0]["status"], "True");
    assert_eq!(g["metadata"]["finalizers"], json!(["examples.capstan.dev/greeter-cleanup"]));
    assert!(host.events().iter().any(|e| e.reason == "Created" && !e.warning));

    // The span the greeter opens around its read of the Deployment, as the
    // host keeps it.
    let added = &run.steps[0].report.journal;
    let spans: Vec<_> =
        added.spans.iter().map(|s| (s.name.as_str(), s.parent.as_deref(), s.error.as_deref())).collect();
    assert_eq!(spans, [("observe-deployment", None, None)]);
    assert_eq!(added.spans[0].attributes, [("deployment".to_owned(), "hello-greeter".to_owned())]);
}

#[tokio::test]
async fn the_hosts_own_writes_trigger_no_second_pass_but_a_change_to_a_child_does() {
    let mut host = host_with_greeter().await;
    host.seed(greeting("hello", "hi", 1)).expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    // Its finalizer, children and status were written by the host: none of
    // those changes calls the guest again.
    assert_eq!(run.events(), [("hello".to_owned(), EventKind::Added)]);

    // Someone else changes a child: the Greeting is reconciled, the child
    // put back, and that write of the host's triggers nothing either.
    let patch = Patch::Merge(json!({"data": {"message": "tampered"}}));
    host.cluster().patch(&configmap("hello-greeting"), patch, Subresource::Main).await.expect("patched");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.events(), [("hello".to_owned(), EventKind::Resync)]);
    let cm = host.cluster().get_sync(&configmap("hello-greeting")).expect("configmap");
    assert_eq!(cm["data"]["message"], "hi");
    // Only the changed child is written again: the Deployment is still as
    // the host last applied it.
    let report = &run.steps[0].report;
    assert_eq!(report.applied, [configmap("hello-greeting")]);
    assert_eq!(report.unchanged, [deployment("hello-greeter")]);
}

#[tokio::test]
async fn a_resync_that_finds_everything_in_place_writes_nothing() {
    let mut host = host_with_greeter().await;
    host.seed(greeting("hello", "hi", 1)).expect("seeded");
    host.run_until_idle().await.expect("settles");
    let versions = |host: &MockHost| {
        [configmap("hello-greeting"), deployment("hello-greeter"), r(greeting_kind(), "hello")]
            .map(|o| host.cluster().get_sync(&o).expect("there")["metadata"]["resourceVersion"].clone())
    };
    let before = versions(&host);
    // The greeter asks for a resync every 300 s.
    let run = host.advance(std::time::Duration::from_secs(301)).await.expect("resyncs");
    assert_eq!(run.events(), [("hello".to_owned(), EventKind::Resync)]);
    let report = &run.steps[0].report;
    assert!(report.applied.is_empty(), "{:?}", report.applied);
    assert_eq!(report.unchanged, [configmap("hello-greeting"), deployment("hello-greeter")]);
    // Not a write reached the cluster: children and status as they were.
    assert_eq!(versions(&host), before);
}

#[tokio::test]
async fn a_spec_change_is_modified_and_updates_the_children() {
    let mut host = host_with_greeter().await;
    host.seed(greeting("hello", "hi", 1)).expect("seeded");
    host.run_until_idle().await.expect("settles");

    let patch = Patch::Merge(json!({"spec": {"message": "hello again", "replicas": 3}}));
    host.cluster().patch(&r(greeting_kind(), "hello"), patch, Subresource::Main).await.expect("patched");
    let run = host.run_until_idle().await.expect("settles");
    assert_eq!(run.events()[0], ("hello".to_owned(), EventKind::Modified));

    let cm = host.cluster().get_sync(&configmap("hello-greeting")).expect("configmap");
    assert_eq!(cm["data"]["message"], "hello again");
    let deploy = host.cluster().get_sync(&deployment("hello-greeter")).expect("deployment");
    assert_eq!(deploy["spec"]["replicas"], 3);
    let g = host.cluster().get_sync(&r(greeting_kind(), "hello")).expect("greeting");
    assert_eq!(g["status"]["observedGeneration"], 2);
}

#[tokio::test]
async fn a_child_deleted_by_hand_is_recreated() {
    let mut host = host_with_greeter().await;
    host.seed(greeting("hello", "hi", 1)).expect("seeded");
    host.run_until_idle().await.expect("settles");
    host.cluster().delete(&configmap("hello-greeting"), Propagation::Default).await.expect("deleted");
    let run = host.run_until_idle().await.expect("settles");
    // The owner is triggered, unchanged; recreating the child triggers it
    // once more, and that pass changes nothing.
    let events = run.events();
    assert!(!events.is_empty() && events.iter().all(|e| *e == ("hello".to_owned(), EventKind::Resync)), "{events:?}");
    assert!(host.cluster().get_sync(&configmap("hello-greeting")).is_some(), "recreated");
}

#[tokio::test]
async fn deleting_a_greeting_delivers_deleted_then_removes_the_finalizer() {
    let mut host = host_with_greeter().await;
    host.seed(greeting("hello", "hi", 1)).expect("seeded");
    host.run_until_idle().await.expect("settles");
    host.cluster().delete(&r(greeting_kind(), "hello"), Propagation::Default).await.expect("delete accepted");
    let run = host.run_until_idle().await.expect("settles");
    assert!(run.events().contains(&("hello".to_owned(), EventKind::Deleted)));
    assert!(host.cluster().get_sync(&r(greeting_kind(), "hello")).is_none(), "finalizer removed, object gone");
    assert!(host.cluster().get_sync(&configmap("hello-greeting")).is_none(), "children garbage collected");
    assert!(host.events().iter().any(|e| e.reason == "Deleted"));
}

#[tokio::test]
async fn an_empty_message_is_a_terminal_error_with_a_warning() {
    let mut host = host_with_greeter().await;
    host.seed(greeting("mute", "  ", 1)).expect("seeded");
    let run = host.run_until_idle().await.expect("settles");
    let failure = run.failures().next().expect("fails");
    assert!(failure.report.result.as_ref().is_err_and(|e| !e.is_retryable()));
    assert_eq!(host.next_due(), None, "not retried");
    assert!(host.events().iter().any(|e| e.warning && e.reason == "ReconcileFailed"));
    let g = host.cluster().get_sync(&r(greeting_kind(), "mute")).expect("greeting");
    let condition = &g["status"]["conditions"][0];
    assert_eq!((&condition["type"], &condition["status"]), (&json!("Reconciled"), &json!("False")), "{g}");
    assert_eq!(condition["reason"], "TerminalError");
}

#[tokio::test]
async fn after_a_restart_every_greeting_is_a_resync_without_duplicate_children() {
    let mut host = host_with_greeter().await;
    for name in ["a", "b"] {
        host.seed(greeting(name, "hi", 1)).expect("seeded");
    }
    host.run_until_idle().await.expect("settles");
    host.restart().await.expect("restart");
    let run = host.run_until_idle().await.expect("settles");
    let mut events = run.events();
    events.sort_by(|x, y| x.0.cmp(&y.0));
    // Each carries the greeter's finalizer and observedGeneration: handled before.
    assert_eq!(events, vec![("a".to_owned(), EventKind::Resync), ("b".to_owned(), EventKind::Resync)]);
    assert_eq!(host.cluster().objects(&Gvk::new("", "v1", "ConfigMap")).len(), 2);
}
