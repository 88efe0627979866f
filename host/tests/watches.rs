//! Watches on the mock host: a watched kind triggers the primaries its
//! mapping names, scoped by the watch's label selector.
//!
//! Needs the guest components built by `tests/build-guests.sh`, like
//! `bad_input.rs`.

use capstan_host::control::reconciler::EventKind;
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::MockHost;
use serde_json::{Value, json};

fn secret(name: &str, watched: &str, configmap: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"capstan.dev/watched": watched, "capstan.dev/configmap": configmap},
        },
    })
}

/// What the fixture's `secrets` behaviour last wrote for `watcher`.
fn seen(host: &MockHost) -> Option<Value> {
    let child = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), "watcher-secrets");
    Some(host.cluster().get_sync(&child)?["data"]["seen"].clone())
}

#[tokio::test]
async fn a_watched_object_triggers_its_primary_only_if_it_matches_the_watch_selector() {
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    let mut host = MockHost::new().expect("host");
    let manifest = host.load(fixture).await.expect("loads");
    assert_eq!(manifest.watches[0].label_selector.as_deref(), Some("capstan.dev/watched=yes"));
    host.seed(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "watcher", "namespace": "default"},
        "data": {"behaviour": "secrets"},
    }))
    .expect("seed");
    host.run_until_idle().await.expect("runs");
    assert_eq!(seen(&host), Some(json!("")));

    host.seed(secret("ignored", "no", "watcher")).expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    assert!(run.steps.is_empty(), "a Secret outside the selector triggers nothing: {:?}", run.events());
    assert_eq!(seen(&host), Some(json!("")));

    host.seed(secret("seen", "yes", "watcher")).expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    assert_eq!(run.events().first(), Some(&("watcher".to_owned(), EventKind::Resync)));
    // The guest lists every labelled Secret; only the matching one woke it.
    assert_eq!(seen(&host), Some(json!("ignored,seen")));
}

#[tokio::test]
async fn a_child_the_host_applied_wakes_not_its_parent_but_itself_when_it_is_a_primary_too() {
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    let mut host = MockHost::new().expect("host");
    host.load(fixture).await.expect("loads");
    host.seed(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "parent", "namespace": "default"},
        "data": {"behaviour": "child"},
    }))
    .expect("seed");
    let run = host.run_until_idle().await.expect("runs");
    // The fixture's primary kind is its owned kind: the child the host
    // applied for `parent` is an object of its own, `added` once; `parent`
    // is not reconciled again for the host's own write.
    let mut events = run.events();
    events.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        events,
        [("parent".to_owned(), EventKind::Added), ("parent-child".to_owned(), EventKind::Added)],
        "{events:?}"
    );

    // Someone else edits the child: both are reconciled, the parent putting
    // its data back.
    let child = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), "parent-child");
    let patch = capstan_host::cluster::Patch::Merge(json!({"data": {"from": "someone else"}}));
    capstan_host::cluster::Cluster::patch(host.cluster(), &child, patch, capstan_host::cluster::Subresource::Main)
        .await
        .expect("patched");
    let run = host.run_until_idle().await.expect("runs");
    let mut names: Vec<String> = run.events().into_iter().map(|(name, _)| name).collect();
    names.sort();
    // (The child, a primary too, may be reconciled once more for the
    // parent's apply: a write for `parent` is a trigger for every other
    // object.)
    names.dedup();
    assert_eq!(names, ["parent", "parent-child"]);
    assert_eq!(host.cluster().get_sync(&child).expect("child")["data"]["from"], "parent");
}
