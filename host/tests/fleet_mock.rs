//! Fleet controllers on the mock host (docs/multicluster.md): the
//! `spreader` fixture (home `default`, one member, `west`) places marked
//! children in its member only, is told the members engaged, reads there
//! and nowhere else, is re-triggered by a change of a child there, and a
//! child whose owner is gone is swept, while one another home marked is
//! left alone; a watched object in the member triggers what its mapping
//! names in the home.
//!
//! Needs `spreader.wasm` from `tests/build-guests.sh`.

use capstan_host::cluster::{Cluster, ListParams, Propagation};
use capstan_host::object::mark::{self, Owner};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::MockHost;
use serde_json::{Value, json};

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "team"}, "data": data})
}

fn cm(name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("team"), name)
}

async fn host() -> MockHost {
    let spreader = capstan_host::testing::find_component("spreader").unwrap_or_else(|e| panic!("{e}"));
    let mut host = MockHost::new().expect("host");
    host.load(&spreader).await.expect("loads");
    host.add_cluster("west").await.expect("a member");
    host.add_cluster("east").await.expect("a cluster the fleet does not name");
    host
}

#[tokio::test]
async fn a_fleet_controller_runs_in_its_home_and_places_marked_children_in_its_members_only() {
    let mut host = host().await;
    for cluster in ["west", "east"] {
        host.cluster_named(cluster)
            .expect("engaged")
            .seed(configmap("decoy", json!({"behaviour": "spread"})))
            .expect("seed");
    }
    let owner = host.seed(configmap("a", json!({"behaviour": "spread"}))).expect("seed");
    let run = host.run_until_idle().await.expect("settles");
    assert!(run.failures().next().is_none(), "{:?}", run.failures().map(|s| &s.report.result).collect::<Vec<_>>());
    assert!(run.steps.iter().all(|s| s.cluster == "default"), "reconciled outside its home");
    assert!(!run.steps.iter().any(|s| s.report.object.name == "decoy"), "a member's own objects are not its primaries");

    let home = host.cluster();
    let listed = home.get_sync(&cm("a-members")).expect("the members child");
    assert_eq!(listed["data"]["members"], "west", "told the members engaged, not every cluster");
    assert!(home.get_sync(&cm("a-spread")).is_none(), "member children stay out of the home");

    let west = host.cluster_named("west").expect("west");
    let spread = west.get_sync(&cm("a-spread")).expect("placed in west");
    assert!(spread["metadata"].get("ownerReferences").is_none(), "no ownerReference crosses clusters");
    let marks = Owner::of_value(&spread).expect("marked");
    assert_eq!((marks.controller.as_str(), marks.home.as_str()), ("spreader", "default"));
    assert_eq!(marks.uid, owner["metadata"]["uid"].as_str().expect("uid"));
    assert_eq!(marks.home_id, home.identity());
    let forged = west.get_sync(&cm("a-forged-marks")).expect("placed in west");
    assert_eq!(Owner::of_value(&forged), Some(marks), "the guest's own marks are overwritten");
    assert!(host.cluster_named("east").expect("east").get_sync(&cm("a-spread")).is_none(), "east is no member");

    // A change of a child in the member brings its owner back.
    west.delete(&cm("a-spread"), Propagation::Default).await.expect("deleted");
    let run = host.run_until_idle().await.expect("settles");
    assert!(run.steps.iter().any(|s| s.report.object.name == "a"), "the owner was not reconciled");
    assert!(host.cluster_named("west").expect("west").get_sync(&cm("a-spread")).is_some(), "not placed again");

    // The owner goes (no finalizer): its children in the member follow.
    host.cluster().delete(&cm("a"), Propagation::Default).await.expect("deleted");
    host.run_until_idle().await.expect("settles");
    let west = host.cluster_named("west").expect("west");
    assert!(west.get_sync(&cm("a-spread")).is_none() && west.get_sync(&cm("a-forged-marks")).is_none());
    assert!(west.get_sync(&cm("decoy")).is_some(), "what the host did not place stays");
}

#[tokio::test]
async fn a_guest_cannot_place_or_read_outside_its_declared_members() {
    let mut host = host().await;
    host.seed(configmap("far", json!({"behaviour": "place-undeclared", "target": "east"}))).expect("seed");
    host.seed(configmap("self", json!({"behaviour": "place-undeclared", "target": "default"}))).expect("seed");
    host.seed(configmap("peek", json!({"behaviour": "read-in", "target": "east"}))).expect("seed");
    host.seed(configmap("look", json!({"behaviour": "read-in", "target": "west"}))).expect("seed");
    let run = host.run_until_idle().await.expect("settles");
    for name in ["far", "self"] {
        let step = run.steps.iter().find(|s| s.report.object.name == name).expect("reconciled");
        let error = step.report.result.as_ref().expect_err("refused").to_string();
        assert!(error.contains("not a member of the fleet"), "{name}: {error}");
    }
    assert!(host.cluster_named("east").expect("east").get_sync(&cm("far-placed")).is_none());
    assert!(host.cluster().get_sync(&cm("self-placed")).is_none());

    let peek = host.cluster().get_sync(&cm("peek-read-in")).expect("reported");
    let read = peek["data"]["read"].as_str().expect("read");
    assert!(read.starts_with("error: denied") && read.contains("not a member"), "{read}");
    let look = host.cluster().get_sync(&cm("look-read-in")).expect("reported");
    assert_eq!(look["data"]["read"], "listed 0", "a declared member is read");
    let write = look["data"]["write"].as_str().expect("write");
    assert!(write.starts_with("error: denied") && write.contains("Outcome::child_in"), "{write}");
    assert!(host.cluster_named("west").expect("west").get_sync(&cm("look-w")).is_none(), "nothing written there");
}

#[tokio::test]
async fn a_child_whose_owner_is_gone_is_swept_and_another_homes_is_left_alone() {
    let mut host = host().await;
    let owner = host.seed(configmap("kept", json!({"behaviour": "spread"}))).expect("seed");
    host.run_until_idle().await.expect("settles");
    let home_id = host.cluster().identity().to_owned();
    let marked = |name: &str, uid: &str, home_id: &str| {
        let mut child = configmap(name, json!({}));
        Owner {
            controller: "spreader".into(),
            home_id: home_id.into(),
            home: "default".into(),
            object: cm("gone"),
            uid: uid.into(),
        }
        .mark(&mut child);
        child
    };
    let west = host.cluster_named("west").expect("west");
    // Left by an owner deleted while the host was away, by an owner of the
    // same name before it was made again, and by another home's.
    west.seed(marked("orphan", "uid-of-a-gone-owner", &home_id)).expect("seed");
    let mut stale = marked("stale", "old-uid", &home_id);
    stale["metadata"]["annotations"][mark::OWNER_NAME] = json!("kept");
    west.seed(stale).expect("seed");
    west.seed(marked("foreign", "uid-of-a-gone-owner", "another-home")).expect("seed");
    host.run_until_idle().await.expect("settles");

    let west = host.cluster_named("west").expect("west");
    assert!(west.get_sync(&cm("orphan")).is_none(), "an orphan is swept");
    assert!(west.get_sync(&cm("stale")).is_none(), "a child of an owner's predecessor is swept");
    assert!(west.get_sync(&cm("foreign")).is_some(), "another home's child is not this host's to sweep");
    let uid = owner["metadata"]["uid"].as_str().expect("uid");
    let children =
        west.list(&Gvk::new("", "v1", "ConfigMap"), Some("team"), &ListParams::default()).await.expect("list");
    let owned: Vec<&str> = children
        .iter()
        .filter(|c| Owner::of_value(c).is_some_and(|o| o.uid == uid))
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    assert_eq!(owned, ["kept-forged-marks", "kept-spread"], "the live owner's children stay");
}

fn secret(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "team", "labels": labels}})
}

#[tokio::test]
async fn a_watched_object_in_a_member_triggers_what_its_mapping_names_in_the_home() {
    let mut host = host().await;
    host.seed(configmap("w", json!({"behaviour": "secrets-in"}))).expect("seed");
    host.run_until_idle().await.expect("settles");
    let seen =
        |host: &MockHost| host.cluster().get_sync(&cm("w-secrets-in")).expect("the child")["data"]["seen"].clone();
    assert_eq!(seen(&host), "");

    // Watched there (the label selector matches): `w` sees it at once.
    let labels = json!({"capstan.dev/watched": "yes", "capstan.dev/configmap": "w"});
    host.cluster_named("west").expect("west").seed(secret("s1", labels.clone())).expect("seed");
    let run = host.run_until_idle().await.expect("settles");
    assert!(run.steps.iter().any(|s| s.report.object.name == "w" && s.cluster == "default"), "{:?}", run.steps);
    assert_eq!(seen(&host), "west/s1");

    // Not selected by the watch, or in a cluster the fleet does not name:
    // nothing is triggered.
    let unwatched = json!({"capstan.dev/configmap": "w"});
    host.cluster_named("west").expect("west").seed(secret("s2", unwatched)).expect("seed");
    host.cluster_named("east").expect("east").seed(secret("s3", labels)).expect("seed");
    let run = host.run_until_idle().await.expect("settles");
    assert!(run.steps.is_empty(), "{:?}", run.steps);
}
