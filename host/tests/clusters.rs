//! Several named clusters on the mock host: a component runs once per
//! cluster, each reconcile is told its cluster and writes there only; a
//! cluster added after the component was loaded is served too; a name
//! that is not a DNS-1123 label, or is taken, is refused.
//!
//! Needs `fixture.wasm` from `tests/build-guests.sh`.

use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::{Error, MockHost};
use serde_json::json;

fn probe(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"behaviour": "where"},
    })
}

fn child(name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), format!("{name}-where"))
}

#[tokio::test]
async fn each_cluster_runs_the_component_with_its_own_objects_and_name() {
    let fixture = capstan_host::testing::find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    let mut host = MockHost::new().expect("host");
    host.add_cluster("west").await.expect("engaged before the load");
    host.load(&fixture).await.expect("loads");
    host.add_cluster("east").await.expect("engaged after the load");
    assert_eq!(host.cluster_names(), ["default", "west", "east"]);

    host.seed(probe("home")).expect("seed");
    for name in ["west", "east"] {
        host.cluster_named(name).expect("engaged").seed(probe(name)).expect("seed");
    }
    let run = host.run_until_idle().await.expect("runs");
    assert!(run.failures().next().is_none(), "{:?}", run.failures().collect::<Vec<_>>());
    // The children are ConfigMaps too, reconciled in their own cluster.
    let mut served: Vec<(&str, &str)> = run
        .steps
        .iter()
        .map(|s| (s.cluster.as_str(), s.report.object.name.as_str()))
        .filter(|(_, name)| !name.ends_with("-where"))
        .collect();
    served.sort_unstable();
    assert_eq!(served, [("default", "home"), ("east", "east"), ("west", "west")]);

    for (cluster, name) in [("default", "home"), ("west", "west"), ("east", "east")] {
        let in_cluster = host.cluster_named(cluster).expect("engaged");
        let made = in_cluster.get_sync(&child(name)).unwrap_or_else(|| panic!("{name}-where in {cluster}"));
        assert_eq!(made["data"]["cluster"], cluster, "the request named the cluster");
        for other in ["home", "west", "east"].into_iter().filter(|o| *o != name) {
            assert!(in_cluster.get_sync(&child(other)).is_none(), "{other}-where leaked into {cluster}");
        }
    }
}

#[tokio::test]
async fn a_cluster_name_must_be_a_dns_label_and_new() {
    let mut host = MockHost::new().expect("host");
    for bad in ["default", "West", "a.b", "", "-x"] {
        assert!(matches!(host.add_cluster(bad).await, Err(Error::ClusterName(_))), "{bad:?}");
    }
    host.add_cluster("west").await.expect("engaged");
    assert!(matches!(host.add_cluster("west").await, Err(Error::ClusterName(_))));
}
