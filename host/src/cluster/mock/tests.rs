//! Behaviour of the mock cluster through the `Cluster` trait.

use std::sync::Arc;

use serde_json::json;

use super::*;

fn configmap_kind() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

fn deployment_kind() -> Gvk {
    Gvk::new("apps", "v1", "Deployment")
}

fn widget_kind(version: &str) -> Gvk {
    Gvk::new("example.com", version, "Widget")
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"a": "1"}})
}

fn configmap_ref(name: &str) -> ObjectRef {
    ObjectRef::new(configmap_kind(), Some("default"), name)
}

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": "nginx"}]}},
        },
        "status": {"readyReplicas": 1},
    })
}

fn deployment_ref(name: &str) -> ObjectRef {
    ObjectRef::new(deployment_kind(), Some("default"), name)
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                {"name": "v1beta1", "served": true, "storage": false, "subresources": {"status": {}}},
            ],
        },
    })
}

fn widget(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "namespace": "default"}, "spec": {"size": 1}})
}

fn widget_ref(name: &str) -> ObjectRef {
    ObjectRef::new(widget_kind("v1"), Some("default"), name)
}

fn cluster_with_widgets() -> MockCluster {
    let cluster = MockCluster::new();
    cluster.register_crd(&widget_crd()).expect("valid crd");
    cluster
}

fn rv(object: &Value) -> String {
    object::meta_str(object, "resourceVersion").expect("stored objects have a resourceVersion").to_owned()
}

fn generation(object: &Value) -> i64 {
    object::generation(object).expect("stored objects have a generation")
}

fn apply(object: Value, manager: &str, force: bool) -> Patch {
    Patch::Apply { object, field_manager: manager.to_owned(), force }
}

/// An object owned by `owner` (its uid must be set).
fn owned_by(mut object: Value, owner: &Value) -> Value {
    object["metadata"]["ownerReferences"] = json!([{
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
    }]);
    object
}

// --- create --------------------------------------------------------------

#[tokio::test]
async fn create_assigns_uid_resource_version_timestamp_and_generation() {
    let cluster = MockCluster::new();
    let created = cluster.create(configmap("a")).await.expect("created");
    assert_eq!(object::meta_str(&created, "uid").map(str::len), Some(36));
    assert_eq!(rv(&created), "1");
    assert_eq!(generation(&created), 1);
    assert_eq!(created["metadata"]["creationTimestamp"], "2024-01-01T00:00:00Z");
    assert_eq!(cluster.get(&configmap_ref("a")).await.expect("stored"), created);
}

#[tokio::test]
async fn created_objects_get_distinct_uids_and_increasing_resource_versions() {
    let cluster = MockCluster::new();
    let a = cluster.create(configmap("a")).await.expect("created");
    let b = cluster.create(configmap("b")).await.expect("created");
    assert_ne!(a["metadata"]["uid"], b["metadata"]["uid"]);
    assert_eq!((rv(&a), rv(&b)), ("1".to_owned(), "2".to_owned()));
}

#[tokio::test]
async fn create_ignores_server_fields_sent_by_the_client() {
    let cluster = MockCluster::new();
    let mut object = configmap("a");
    object["metadata"]["uid"] = json!("mine");
    object["metadata"]["generation"] = json!(7);
    object["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
    let created = cluster.create(object).await.expect("created");
    assert_ne!(created["metadata"]["uid"], "mine");
    assert_eq!(generation(&created), 1);
    assert!(!object::is_deleting(&created));
}

#[tokio::test]
async fn creation_timestamp_follows_the_mock_clock() {
    let cluster = MockCluster::new();
    cluster.set_now(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    cluster.advance(Duration::from_secs(60));
    let created = cluster.create(configmap("a")).await.expect("created");
    assert_eq!(created["metadata"]["creationTimestamp"], "2023-11-14T22:14:20Z");
    assert_eq!(cluster.now(), UNIX_EPOCH + Duration::from_secs(1_700_000_060));
}

#[tokio::test]
async fn generate_name_produces_a_fresh_name_with_the_prefix() {
    let cluster = MockCluster::new();
    let object =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cfg-", "namespace": "default"}});
    let a = cluster.create(object.clone()).await.expect("created");
    let b = cluster.create(object).await.expect("created");
    let (a, b) = (object::meta_str(&a, "name").expect("named"), object::meta_str(&b, "name").expect("named"));
    assert!(a.starts_with("cfg-") && b.starts_with("cfg-"));
    assert_ne!(a, b);
}

#[tokio::test]
async fn create_of_an_existing_object_fails_with_already_exists() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    let err = cluster.create(configmap("a")).await.expect_err("duplicate");
    assert!(matches!(err, Error::AlreadyExists(ref s) if s.code == 409), "{err:?}");
}

#[tokio::test]
async fn create_with_a_resource_version_is_rejected() {
    let cluster = MockCluster::new();
    let mut object = configmap("a");
    object["metadata"]["resourceVersion"] = json!("5");
    assert!(matches!(cluster.create(object).await, Err(Error::BadRequest(_))));
}

#[tokio::test]
async fn create_without_a_name_or_with_invalid_metadata_is_invalid() {
    let cluster = MockCluster::new();
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}});
    assert!(matches!(cluster.create(nameless).await, Err(Error::Invalid(_))));
    assert!(matches!(cluster.create(configmap("Upper")).await, Err(Error::Invalid(_))));
    let mut bad_label = configmap("a");
    bad_label["metadata"]["labels"] = json!({"app": "not valid"});
    assert!(matches!(cluster.create(bad_label).await, Err(Error::Invalid(_))));
    let role =
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:x"}});
    assert!(cluster.create(role).await.is_ok(), "rbac names may contain ':'");
}

#[tokio::test]
async fn namespaced_kinds_require_a_namespace_and_cluster_scoped_kinds_refuse_one() {
    let cluster = MockCluster::new();
    let no_namespace = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
    assert!(matches!(cluster.create(no_namespace).await, Err(Error::BadRequest(_))));
    let namespaced_node =
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "namespace": "default"}});
    assert!(matches!(cluster.create(namespaced_node).await, Err(Error::BadRequest(_))));
    let no_ns_ref = ObjectRef::new(configmap_kind(), None, "a");
    assert!(matches!(cluster.get(&no_ns_ref).await, Err(Error::BadRequest(_))));
    assert!(matches!(
        cluster.list(&Gvk::new("", "v1", "Node"), Some("default"), &ListParams::default()).await,
        Err(Error::BadRequest(_))
    ));
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}});
    assert!(cluster.create(node).await.is_ok());
}

#[tokio::test]
async fn unknown_kinds_and_versions_are_not_found_like_on_the_api_server() {
    let cluster = MockCluster::new();
    let err = cluster.create(widget("w")).await.expect_err("no crd");
    assert!(err.is_not_found());
    assert_eq!(err.to_string(), "not found: the server could not find the requested resource");
    let unserved = ObjectRef::new(Gvk::new("apps", "v2", "Deployment"), Some("default"), "d");
    assert!(cluster.get(&unserved).await.expect_err("unserved version").is_not_found());
    assert!(cluster.list(&widget_kind("v1"), None, &ListParams::default()).await.expect_err("no crd").is_not_found());
}

#[tokio::test]
async fn status_in_a_create_is_dropped_for_kinds_with_a_status_subresource() {
    let cluster = MockCluster::new();
    let created = cluster.create(deployment("d")).await.expect("created");
    assert!(created.get("status").is_none());
    let seeded = cluster.seed(deployment("e")).expect("seeded");
    assert_eq!(seeded["status"]["readyReplicas"], 1, "seed keeps status");
    // A kind without a status subresource (and without a schema, so that
    // `status` is not pruned as an undeclared field) keeps it.
    cluster.register_kind(KindInfo::namespaced(Gvk::new("example.com", "v1", "Thing"), "things"));
    let thing = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "t", "namespace": "default"},
                       "status": {"kept": true}});
    assert_eq!(cluster.create(thing).await.expect("created")["status"]["kept"], true);
}

// --- kinds ---------------------------------------------------------------

#[tokio::test]
async fn every_served_version_reads_the_same_object() {
    let cluster = cluster_with_widgets();
    cluster.create(widget("w")).await.expect("created");
    let beta = ObjectRef::new(widget_kind("v1beta1"), Some("default"), "w");
    let read = cluster.get(&beta).await.expect("served version");
    assert_eq!(read["apiVersion"], "example.com/v1beta1");
    assert_eq!(read["spec"]["size"], 1);
    assert_eq!(cluster.objects(&widget_kind("v1")).len(), 1);
}

#[tokio::test]
async fn register_crd_serves_its_versions_with_their_scope_and_status() {
    let cluster = cluster_with_widgets();
    let info = cluster.kind_info(&widget_kind("v1beta1")).expect("served");
    assert_eq!(info, KindInfo::namespaced(widget_kind("v1beta1"), "widgets").with_status());
    let mut bad = widget_crd();
    bad["spec"]["scope"] = json!("Galaxy");
    assert!(matches!(cluster.register_crd(&bad), Err(Error::Invalid(_))));
}

#[tokio::test]
async fn creating_a_crd_object_serves_its_kind() {
    let cluster = MockCluster::new();
    cluster.create(widget_crd()).await.expect("crd created");
    assert!(cluster.create(widget("w")).await.is_ok());
    let mut wrong = widget_crd();
    wrong["metadata"]["name"] = json!("gadgets.example.com");
    assert!(matches!(cluster.create(wrong).await, Err(Error::Invalid(_))));
}

#[tokio::test]
async fn register_kind_serves_a_kind() {
    let cluster = MockCluster::new();
    cluster.register_kind(KindInfo::cluster_scoped(Gvk::new("example.com", "v1", "Gadget"), "gadgets"));
    let gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}});
    assert!(cluster.create(gadget).await.is_ok());
}

// --- update --------------------------------------------------------------

#[tokio::test]
async fn replace_bumps_generation_only_when_the_spec_changes() {
    let cluster = MockCluster::new();
    let mut object = cluster.create(deployment("d")).await.expect("created");
    object["metadata"]["labels"] = json!({"a": "b"});
    let labelled = cluster.replace(object, Subresource::Main).await.expect("replaced");
    assert_eq!(generation(&labelled), 1);
    assert_eq!(rv(&labelled), "2");
    let mut object = labelled;
    object["spec"]["replicas"] = json!(3);
    let scaled = cluster.replace(object, Subresource::Main).await.expect("replaced");
    assert_eq!(generation(&scaled), 2);
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"}, "status": {"readyReplicas": 3}});
    let with_status = cluster.replace(status, Subresource::Status).await.expect("status replaced");
    assert_eq!(generation(&with_status), 2, "status writes do not bump generation");
}

#[tokio::test]
async fn status_changes_bump_generation_for_kinds_without_a_status_subresource() {
    let cluster = MockCluster::new();
    cluster.register_kind(KindInfo::namespaced(Gvk::new("example.com", "v1", "Plain"), "plains"));
    let plain =
        json!({"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": "p", "namespace": "default"}});
    let mut object = cluster.create(plain).await.expect("created");
    object["status"] = json!({"phase": "Ready"});
    let updated = cluster.replace(object, Subresource::Main).await.expect("replaced");
    assert_eq!(updated["status"]["phase"], "Ready");
    assert_eq!(generation(&updated), 2);
}

#[tokio::test]
async fn writes_that_change_nothing_keep_the_resource_version_and_journal_nothing() {
    let cluster = MockCluster::new();
    let created = cluster.create(configmap("a")).await.expect("created");
    let seq = cluster.last_seq();
    let same = cluster.replace(created.clone(), Subresource::Main).await.expect("replaced");
    assert_eq!(rv(&same), rv(&created));
    let patched =
        cluster.patch(&configmap_ref("a"), Patch::Merge(json!({"data": {"a": "1"}})), Subresource::Main).await;
    assert_eq!(rv(&patched.expect("patched")), rv(&created));
    assert_eq!(cluster.last_seq(), seq);
}

#[tokio::test]
async fn a_stale_resource_version_conflicts() {
    let cluster = MockCluster::new();
    let created = cluster.create(configmap("a")).await.expect("created");
    let mut first = created.clone();
    first["data"]["a"] = json!("2");
    cluster.replace(first, Subresource::Main).await.expect("replaced");
    let mut stale = created;
    stale["data"]["a"] = json!("3");
    let err = cluster.replace(stale, Subresource::Main).await.expect_err("stale");
    assert!(matches!(err, Error::Conflict(ref s) if s.code == 409), "{err:?}");
    let stale_patch = Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"a": "4"}}));
    assert!(matches!(
        cluster.patch(&configmap_ref("a"), stale_patch, Subresource::Main).await,
        Err(Error::Conflict(_))
    ));
}

#[tokio::test]
async fn replace_without_a_resource_version_is_unconditional_and_keeps_server_fields() {
    let cluster = MockCluster::new();
    let created = cluster.create(configmap("a")).await.expect("created");
    let replaced = cluster.replace(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"b": "2"}}), Subresource::Main).await.expect("replaced");
    assert_eq!(replaced["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(replaced["metadata"]["creationTimestamp"], created["metadata"]["creationTimestamp"]);
    assert_eq!(replaced["data"], json!({"b": "2"}));
}

#[tokio::test]
async fn replace_of_a_missing_object_is_not_found() {
    let cluster = MockCluster::new();
    assert!(cluster.replace(configmap("a"), Subresource::Main).await.expect_err("missing").is_not_found());
}

#[tokio::test]
async fn main_resource_writes_keep_the_stored_status() {
    let cluster = MockCluster::new();
    let mut object = cluster.seed(deployment("d")).expect("seeded");
    object["status"]["readyReplicas"] = json!(5);
    object["spec"]["replicas"] = json!(5);
    let replaced = cluster.replace(object, Subresource::Main).await.expect("replaced");
    assert_eq!(replaced["status"]["readyReplicas"], 1);
    assert_eq!(replaced["spec"]["replicas"], 5);
    let patch = Patch::Merge(json!({"status": {"readyReplicas": 9}}));
    let patched = cluster.patch(&deployment_ref("d"), patch, Subresource::Main).await.expect("patched");
    assert_eq!(patched["status"]["readyReplicas"], 1);
}

#[tokio::test]
async fn status_writes_only_change_the_status() {
    let cluster = MockCluster::new();
    let mut object = cluster.create(deployment("d")).await.expect("created");
    object["spec"]["replicas"] = json!(7);
    object["metadata"]["labels"] = json!({"a": "b"});
    object["status"] = json!({"readyReplicas": 2});
    let updated = cluster.replace(object, Subresource::Status).await.expect("status replaced");
    assert_eq!(updated["status"]["readyReplicas"], 2);
    assert_eq!(updated["spec"]["replicas"], 1);
    assert!(updated["metadata"].get("labels").is_none());
    let patch = Patch::Merge(json!({"status": {"observedGeneration": 1}, "spec": {"replicas": 8}}));
    let patched = cluster.patch(&deployment_ref("d"), patch, Subresource::Status).await.expect("patched");
    assert_eq!(patched["status"], json!({"readyReplicas": 2, "observedGeneration": 1}));
    assert_eq!(patched["spec"]["replicas"], 1);
}

#[tokio::test]
async fn status_writes_to_kinds_without_a_status_subresource_are_not_found() {
    let cluster = MockCluster::new();
    let created = cluster.create(configmap("a")).await.expect("created");
    assert!(cluster.replace(created, Subresource::Status).await.expect_err("no status").is_not_found());
    let patch = Patch::Merge(json!({"status": {}}));
    assert!(
        cluster.patch(&configmap_ref("a"), patch, Subresource::Status).await.expect_err("no status").is_not_found()
    );
}

// --- patch ---------------------------------------------------------------

#[tokio::test]
async fn merge_patch_merges_and_removes_fields() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    let patch = Patch::Merge(json!({"data": {"a": null, "b": "2"}, "metadata": {"labels": {"x": "y"}}}));
    let patched = cluster.patch(&configmap_ref("a"), patch, Subresource::Main).await.expect("patched");
    assert_eq!(patched["data"], json!({"b": "2"}));
    assert_eq!(patched["metadata"]["labels"]["x"], "y");
    assert_eq!(rv(&patched), "2");
}

#[tokio::test]
async fn json_patch_applies_operations_and_fails_on_a_failed_test() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    let ops = json!([
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "2"},
        {"op": "add", "path": "/data/b", "value": "3"},
    ]);
    let patched = cluster.patch(&configmap_ref("a"), Patch::Json(ops), Subresource::Main).await.expect("patched");
    assert_eq!(patched["data"], json!({"a": "2", "b": "3"}));
    let failing = json!([{"op": "test", "path": "/data/a", "value": "1"}]);
    assert!(matches!(
        cluster.patch(&configmap_ref("a"), Patch::Json(failing), Subresource::Main).await,
        Err(Error::Invalid(_))
    ));
    let malformed = json!({"op": "add"});
    assert!(matches!(
        cluster.patch(&configmap_ref("a"), Patch::Json(malformed), Subresource::Main).await,
        Err(Error::BadRequest(_))
    ));
}

#[tokio::test]
async fn patches_cannot_rename_an_object() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    let rename = Patch::Merge(json!({"metadata": {"name": "b"}}));
    assert!(matches!(cluster.patch(&configmap_ref("a"), rename, Subresource::Main).await, Err(Error::BadRequest(_))));
}

#[tokio::test]
async fn patch_of_a_missing_object_is_not_found() {
    let cluster = MockCluster::new();
    let patch = Patch::Merge(json!({"data": {}}));
    assert!(cluster.patch(&configmap_ref("a"), patch, Subresource::Main).await.expect_err("missing").is_not_found());
}

#[tokio::test]
async fn strategic_patch_merges_containers_by_name() {
    let cluster = MockCluster::new();
    let mut object = deployment("d");
    object["spec"]["template"] =
        json!({"spec": {"containers": [{"name": "app", "image": "app:1"}, {"name": "proxy", "image": "proxy:1"}]}});
    cluster.create(object).await.expect("created");
    let patch =
        Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}}));
    let patched = cluster.patch(&deployment_ref("d"), patch, Subresource::Main).await.expect("patched");
    assert_eq!(
        patched["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "app:2"}, {"name": "proxy", "image": "proxy:1"}])
    );
    assert_eq!(generation(&patched), 2);
}

#[tokio::test]
async fn strategic_patch_of_a_custom_resource_is_unsupported_media_type() {
    let cluster = cluster_with_widgets();
    cluster.create(widget("w")).await.expect("created");
    let err = cluster.patch(&widget_ref("w"), Patch::Strategic(json!({"spec": {"size": 2}})), Subresource::Main).await;
    assert!(matches!(err, Err(Error::Other(ref s)) if s.code == 415), "{err:?}");
}

// --- server-side apply ---------------------------------------------------

#[tokio::test]
async fn apply_creates_a_missing_object_owned_by_the_manager() {
    let cluster = MockCluster::new();
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}});
    let created =
        cluster.patch(&configmap_ref("a"), apply(config, "ctl", false), Subresource::Main).await.expect("applied");
    assert_eq!(created["data"]["k"], "v");
    assert_eq!(generation(&created), 1);
    assert_eq!(cluster.managers_of(&configmap_ref("a")), ["ctl"]);
    assert_eq!(cluster.managed_fields(&configmap_ref("a"), "ctl"), [".data.k"]);
}

#[tokio::test]
async fn apply_merges_into_fields_written_by_others() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    let config = json!({"metadata": {"labels": {"owner": "ctl"}}, "data": {"k": "v"}});
    let applied =
        cluster.patch(&configmap_ref("a"), apply(config, "ctl", false), Subresource::Main).await.expect("applied");
    assert_eq!(applied["data"], json!({"a": "1", "k": "v"}));
    assert_eq!(applied["metadata"]["labels"]["owner"], "ctl");
}

#[tokio::test]
async fn apply_removes_fields_the_manager_no_longer_applies() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    let first = json!({"metadata": {"labels": {"x": "1"}}, "data": {"k": "v", "j": "w"}});
    cluster.patch(&configmap_ref("a"), apply(first, "ctl", false), Subresource::Main).await.expect("applied");
    let second = json!({"data": {"k": "v"}});
    let applied =
        cluster.patch(&configmap_ref("a"), apply(second, "ctl", false), Subresource::Main).await.expect("applied");
    assert_eq!(applied["data"], json!({"a": "1", "k": "v"}), "`a` was never applied, `j` is pruned");
    assert!(applied["metadata"].get("labels").is_none(), "emptied maps go too");
}

#[tokio::test]
async fn apply_keeps_fields_another_manager_also_applies() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    let shared = json!({"data": {"k": "v"}});
    cluster.patch(&configmap_ref("a"), apply(shared.clone(), "one", false), Subresource::Main).await.expect("applied");
    cluster
        .patch(&configmap_ref("a"), apply(shared, "two", false), Subresource::Main)
        .await
        .expect("same value: shared");
    assert_eq!(cluster.managers_of(&configmap_ref("a")), ["one", "two"]);
    let applied =
        cluster.patch(&configmap_ref("a"), apply(json!({}), "one", false), Subresource::Main).await.expect("applied");
    assert_eq!(applied["data"]["k"], "v");
    assert_eq!(cluster.managers_of(&configmap_ref("a")), ["two"]);
}

#[tokio::test]
async fn apply_conflicts_on_a_field_another_manager_owns_unless_forced() {
    let cluster = MockCluster::new();
    cluster.create(deployment("d")).await.expect("created");
    let one = json!({"spec": {"replicas": 2}});
    cluster.patch(&deployment_ref("d"), apply(one, "one", false), Subresource::Main).await.expect("applied");
    let two = json!({"spec": {"replicas": 3}});
    let err = cluster.patch(&deployment_ref("d"), apply(two.clone(), "two", false), Subresource::Main).await;
    assert!(matches!(err, Err(Error::Conflict(_))), "{err:?}");
    let forced = cluster.patch(&deployment_ref("d"), apply(two, "two", true), Subresource::Main).await.expect("forced");
    assert_eq!(forced["spec"]["replicas"], 3);
    assert_eq!(cluster.managers_of(&deployment_ref("d")), ["two"]);
}

#[tokio::test]
async fn apply_to_the_status_subresource_owns_status_apart() {
    let cluster = MockCluster::new();
    cluster.create(deployment("d")).await.expect("created");
    let spec = json!({"spec": {"replicas": 2}});
    cluster.patch(&deployment_ref("d"), apply(spec.clone(), "ctl", false), Subresource::Main).await.expect("applied");
    let status = json!({"status": {"readyReplicas": 2}, "spec": {"replicas": 9}});
    let applied =
        cluster.patch(&deployment_ref("d"), apply(status, "ctl", false), Subresource::Status).await.expect("applied");
    assert_eq!(applied["status"]["readyReplicas"], 2);
    assert_eq!(applied["spec"]["replicas"], 2);
    let again =
        cluster.patch(&deployment_ref("d"), apply(spec, "ctl", false), Subresource::Main).await.expect("applied");
    assert_eq!(again["status"]["readyReplicas"], 2, "a main apply does not prune status fields");
}

#[tokio::test]
async fn apply_adds_and_removes_its_own_finalizers_as_set_items() {
    let cluster = MockCluster::new();
    let mut object = configmap("a");
    object["metadata"]["finalizers"] = json!(["other.io/keep"]);
    cluster.create(object).await.expect("created");
    let with = json!({"metadata": {"finalizers": ["ctl.io/cleanup"]}});
    let applied =
        cluster.patch(&configmap_ref("a"), apply(with, "ctl", false), Subresource::Main).await.expect("applied");
    assert_eq!(applied["metadata"]["finalizers"], json!(["other.io/keep", "ctl.io/cleanup"]));
    let without = json!({"metadata": {}});
    let applied =
        cluster.patch(&configmap_ref("a"), apply(without, "ctl", false), Subresource::Main).await.expect("applied");
    assert_eq!(applied["metadata"]["finalizers"], json!(["other.io/keep"]));
}

#[tokio::test]
async fn apply_needs_a_field_manager_and_a_matching_identity() {
    let cluster = MockCluster::new();
    let config = json!({"data": {"k": "v"}});
    let no_manager = cluster.patch(&configmap_ref("a"), apply(config, "", false), Subresource::Main).await;
    assert!(matches!(no_manager, Err(Error::Invalid(_))));
    let other_name = json!({"metadata": {"name": "b"}});
    let mismatch = cluster.patch(&configmap_ref("a"), apply(other_name, "ctl", false), Subresource::Main).await;
    assert!(matches!(mismatch, Err(Error::BadRequest(_))));
}

// --- delete, finalizers, garbage collection ------------------------------

#[tokio::test]
async fn delete_removes_an_object_without_finalizers() {
    let cluster = MockCluster::new();
    cluster.create(configmap("a")).await.expect("created");
    cluster.delete(&configmap_ref("a"), Propagation::Default).await.expect("deleted");
    assert!(cluster.get(&configmap_ref("a")).await.expect_err("gone").is_not_found());
    assert!(cluster.delete(&configmap_ref("a"), Propagation::Default).await.expect_err("gone").is_not_found());
}

#[tokio::test]
async fn delete_with_finalizers_only_marks_the_object() {
    let cluster = MockCluster::new();
    let mut object = configmap("a");
    object["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
    cluster.create(object).await.expect("created");
    cluster.advance(Duration::from_secs(10));
    cluster.delete(&configmap_ref("a"), Propagation::Default).await.expect("deleted");
    let marked = cluster.get(&configmap_ref("a")).await.expect("still there");
    assert_eq!(marked["metadata"]["deletionTimestamp"], "2024-01-01T00:00:10Z");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(generation(&marked), 2);
    let seq = cluster.last_seq();
    cluster.delete(&configmap_ref("a"), Propagation::Default).await.expect("deleting again is fine");
    assert_eq!(cluster.last_seq(), seq, "a second delete changes nothing");
}

#[tokio::test]
async fn removing_the_last_finalizer_of_a_deleting_object_removes_it() {
    let cluster = MockCluster::new();
    let mut object = configmap("a");
    object["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"]);
    cluster.create(object).await.expect("created");
    cluster.delete(&configmap_ref("a"), Propagation::Default).await.expect("deleted");
    let one_left = Patch::Json(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]));
    cluster.patch(&configmap_ref("a"), one_left, Subresource::Main).await.expect("patched");
    assert!(cluster.get_sync(&configmap_ref("a")).is_some(), "one finalizer left");
    let mut last = cluster.get(&configmap_ref("a")).await.expect("still there");
    last["metadata"]["finalizers"] = json!([]);
    let removed = cluster.replace(last, Subresource::Main).await.expect("replaced");
    assert!(object::finalizers(&removed).is_empty());
    assert!(cluster.get_sync(&configmap_ref("a")).is_none());
    let changes = cluster.changes_since(0);
    assert_eq!(changes.last().map(|c| c.kind), Some(ChangeKind::Deleted));
}

#[tokio::test]
async fn adding_a_finalizer_to_a_deleting_object_is_invalid() {
    let cluster = MockCluster::new();
    let mut object = configmap("a");
    object["metadata"]["finalizers"] = json!(["example.com/a"]);
    cluster.create(object).await.expect("created");
    cluster.delete(&configmap_ref("a"), Propagation::Default).await.expect("deleted");
    let add = Patch::Merge(json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}));
    assert!(matches!(cluster.patch(&configmap_ref("a"), add, Subresource::Main).await, Err(Error::Invalid(_))));
    let config = json!({"metadata": {"finalizers": ["example.com/c"]}});
    assert!(matches!(
        cluster.patch(&configmap_ref("a"), apply(config, "ctl", false), Subresource::Main).await,
        Err(Error::Invalid(_))
    ));
}

#[tokio::test]
async fn deleting_an_owner_deletes_its_dependents_recursively() {
    let cluster = cluster_with_widgets();
    let owner = cluster.create(widget("w")).await.expect("created");
    let child = cluster.create(owned_by(deployment("d"), &owner)).await.expect("created");
    let grandchild = cluster.create(owned_by(configmap("c"), &child)).await.expect("created");
    let _ = grandchild;
    cluster.delete(&widget_ref("w"), Propagation::Background).await.expect("deleted");
    assert!(cluster.get_sync(&deployment_ref("d")).is_none());
    assert!(cluster.get_sync(&configmap_ref("c")).is_none());
}

#[tokio::test]
async fn dependents_with_finalizers_are_only_marked_for_deletion() {
    let cluster = MockCluster::new();
    let owner = cluster.create(configmap("owner")).await.expect("created");
    let mut dependent = owned_by(configmap("dep"), &owner);
    dependent["metadata"]["finalizers"] = json!(["example.com/x"]);
    cluster.create(dependent).await.expect("created");
    cluster.delete(&configmap_ref("owner"), Propagation::Foreground).await.expect("deleted");
    let marked = cluster.get_sync(&configmap_ref("dep")).expect("kept by its finalizer");
    assert!(object::is_deleting(&marked));
}

#[tokio::test]
async fn orphan_propagation_removes_owner_references_instead() {
    let cluster = MockCluster::new();
    let owner = cluster.create(configmap("owner")).await.expect("created");
    cluster.create(owned_by(configmap("dep"), &owner)).await.expect("created");
    cluster.delete(&configmap_ref("owner"), Propagation::Orphan).await.expect("deleted");
    let orphan = cluster.get_sync(&configmap_ref("dep")).expect("orphaned, not deleted");
    assert!(orphan["metadata"].get("ownerReferences").is_none());
}

#[tokio::test]
async fn a_dependent_with_another_live_owner_only_loses_the_reference() {
    let cluster = MockCluster::new();
    let first = cluster.create(configmap("first")).await.expect("created");
    let second = cluster.create(configmap("second")).await.expect("created");
    let mut dependent = owned_by(configmap("dep"), &first);
    let second_ref = owned_by(configmap("x"), &second)["metadata"]["ownerReferences"][0].clone();
    dependent["metadata"]["ownerReferences"].as_array_mut().expect("list").push(second_ref);
    cluster.create(dependent).await.expect("created");
    cluster.delete(&configmap_ref("first"), Propagation::Background).await.expect("deleted");
    let kept = cluster.get_sync(&configmap_ref("dep")).expect("still owned by second");
    assert_eq!(object::owner_uids(&kept).collect::<Vec<_>>(), [object::meta_str(&second, "uid").expect("uid")]);
}

#[tokio::test]
async fn a_pending_deletion_cascades_when_the_owner_is_finally_removed() {
    let cluster = MockCluster::new();
    let mut owner = configmap("owner");
    owner["metadata"]["finalizers"] = json!(["example.com/x"]);
    let owner = cluster.create(owner).await.expect("created");
    cluster.create(owned_by(configmap("dep"), &owner)).await.expect("created");
    cluster.create(owned_by(configmap("orphan"), &owner)).await.expect("created");
    cluster.delete(&configmap_ref("owner"), Propagation::Orphan).await.expect("marked");
    assert!(cluster.get_sync(&configmap_ref("dep")).is_some(), "nothing happens while the owner stays");
    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    cluster.patch(&configmap_ref("owner"), release, Subresource::Main).await.expect("released");
    assert!(cluster.get_sync(&configmap_ref("owner")).is_none());
    let dep = cluster.get_sync(&configmap_ref("dep")).expect("orphaned as requested at delete time");
    assert!(dep["metadata"].get("ownerReferences").is_none());
}

// --- list ----------------------------------------------------------------

async fn labelled_configmaps() -> MockCluster {
    let cluster = MockCluster::new();
    for (namespace, name, labels) in [
        ("prod", "web", json!({"app": "web", "tier": "front"})),
        ("dev", "web", json!({"app": "web", "tier": "front"})),
        ("prod", "db", json!({"app": "db", "tier": "back"})),
        ("prod", "plain", json!({})),
    ] {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "labels": labels}});
        cluster.create(object).await.expect("created");
    }
    cluster
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                object::meta_str(o, "namespace").unwrap_or_default(),
                object::meta_str(o, "name").unwrap_or_default()
            )
        })
        .collect()
}

async fn list_with(cluster: &MockCluster, labels: Option<&str>, fields: Option<&str>) -> Result<Vec<String>> {
    let params = ListParams { label_selector: labels.map(str::to_owned), field_selector: fields.map(str::to_owned) };
    cluster.list(&configmap_kind(), None, &params).await.map(|objects| names(&objects))
}

#[tokio::test]
async fn list_returns_objects_sorted_by_namespace_and_name() {
    let cluster = labelled_configmaps().await;
    assert_eq!(
        list_with(&cluster, None, None).await.expect("listed"),
        ["dev/web", "prod/db", "prod/plain", "prod/web"]
    );
    let prod = cluster.list(&configmap_kind(), Some("prod"), &ListParams::default()).await.expect("listed");
    assert_eq!(names(&prod), ["prod/db", "prod/plain", "prod/web"]);
}

#[tokio::test]
async fn label_selectors_filter_lists() {
    let cluster = labelled_configmaps().await;
    let cases: &[(&str, &[&str])] = &[
        ("app=web", &["dev/web", "prod/web"]),
        ("app==db", &["prod/db"]),
        ("app!=web", &["prod/db", "prod/plain"]),
        ("tier", &["dev/web", "prod/db", "prod/web"]),
        ("!tier", &["prod/plain"]),
        ("app in (db, web),tier=front", &["dev/web", "prod/web"]),
        ("app notin (web)", &["prod/db", "prod/plain"]),
    ];
    for (selector, expected) in cases {
        assert_eq!(list_with(&cluster, Some(selector), None).await.expect("listed"), *expected, "{selector}");
    }
}

#[tokio::test]
async fn field_selectors_filter_lists() {
    let cluster = labelled_configmaps().await;
    assert_eq!(list_with(&cluster, None, Some("metadata.name=web")).await.expect("listed"), ["dev/web", "prod/web"]);
    assert_eq!(
        list_with(&cluster, Some("app=web"), Some("metadata.namespace!=dev")).await.expect("listed"),
        ["prod/web"]
    );
    assert_eq!(list_with(&cluster, None, Some("metadata.labels.tier==back")).await.expect("listed"), ["prod/db"]);
}

#[tokio::test]
async fn invalid_selectors_are_bad_requests() {
    let cluster = labelled_configmaps().await;
    for labels in ["app in (", "=x", "app=web,", "bad key"] {
        assert!(matches!(list_with(&cluster, Some(labels), None).await, Err(Error::BadRequest(_))), "{labels}");
    }
    assert!(matches!(list_with(&cluster, None, Some("metadata.name")).await, Err(Error::BadRequest(_))));
}

// --- events, journal, sharing --------------------------------------------

#[tokio::test]
async fn recorded_events_are_kept_in_order() {
    let cluster = MockCluster::new();
    let event = EventRecord {
        regarding: configmap_ref("a"),
        regarding_uid: None,
        warning: false,
        reason: "Synced".to_owned(),
        action: "Reconcile".to_owned(),
        note: Some("all good".to_owned()),
        reporting_controller: "example.com/ctl".to_owned(),
    };
    cluster.record_event(event.clone()).await.expect("recorded");
    cluster.record_event(EventRecord { warning: true, ..event.clone() }).await.expect("recorded");
    let events = cluster.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], event);
    assert!(events[1].warning);
}

#[tokio::test]
async fn the_journal_records_every_effective_write() {
    let cluster = MockCluster::new();
    assert_eq!(cluster.last_seq(), 0);
    let created = cluster.create(configmap("a")).await.expect("created");
    let patch = Patch::Merge(json!({"data": {"a": "2"}}));
    cluster.patch(&configmap_ref("a"), patch, Subresource::Main).await.expect("patched");
    cluster.delete(&configmap_ref("a"), Propagation::Default).await.expect("deleted");
    let changes = cluster.changes_since(0);
    let kinds: Vec<ChangeKind> = changes.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ChangeKind::Applied, ChangeKind::Applied, ChangeKind::Deleted]);
    assert_eq!(changes.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(changes[0].object, created);
    assert_eq!(changes[2].object["data"]["a"], "2", "a removal carries the last state");
    assert_eq!(changes[1].object_ref, configmap_ref("a"));
    assert_eq!(cluster.last_seq(), 3);
    assert_eq!(cluster.changes_since(2).len(), 1);
    assert!(cluster.changes_since(3).is_empty());
}

#[tokio::test]
async fn a_shared_cluster_serves_concurrent_tasks() {
    let cluster = Arc::new(MockCluster::new());
    let backend: Arc<dyn Cluster> = cluster.clone();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let backend = backend.clone();
            tokio::spawn(async move { backend.create(configmap(&format!("cm-{i}"))).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("task ran").expect("created");
    }
    assert_eq!(cluster.objects(&configmap_kind()).len(), 8);
    assert_eq!(cluster.last_seq(), 8);
}

#[tokio::test]
async fn error_messages_read_like_the_api_server() {
    let cluster = MockCluster::new();
    let missing = cluster.get(&deployment_ref("d")).await.expect_err("missing");
    assert_eq!(missing.to_string(), "not found: deployments.apps \"d\" not found");
    cluster.create(configmap("a")).await.expect("created");
    let exists = cluster.create(configmap("a")).await.expect_err("duplicate");
    assert_eq!(exists.to_string(), "already exists: configmaps \"a\" already exists");
    let mut stale = configmap("a");
    stale["metadata"]["resourceVersion"] = json!("0");
    let conflict = cluster.replace(stale, Subresource::Main).await.expect_err("stale");
    assert!(conflict.to_string().starts_with("conflict: operation cannot be fulfilled on configmaps \"a\""));
    cluster.create(deployment("d")).await.expect("created");
    cluster
        .patch(&deployment_ref("d"), apply(json!({"spec": {"replicas": 2}}), "one", false), Subresource::Main)
        .await
        .expect("applied");
    let apply_conflict = cluster
        .patch(&deployment_ref("d"), apply(json!({"spec": {"replicas": 3}}), "two", false), Subresource::Main)
        .await
        .expect_err("conflict");
    assert_eq!(
        apply_conflict.to_string(),
        "conflict: apply failed with 1 conflict: conflict with \"one\": .spec.replicas"
    );
}

// ---------------------------------------------------------------- fidelity

/// A CRD whose spec has defaults and bounds and whose `status.conditions`
/// is a list-map keyed by `type`, as in `tests/tests/mock_fidelity.rs`.
fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "color": {"type": "string", "default": "red"},
                    }},
                    "status": {"type": "object", "properties": {"conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {"type": "object", "required": ["type", "status"], "properties": {
                            "type": {"type": "string"}, "status": {"type": "string"}, "reason": {"type": "string"},
                        }},
                    }}},
                }}},
            }],
        },
    })
}

fn gadget_ref(name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new("example.com", "v1", "Gadget"), Some("default"), name)
}

fn gadget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

async fn cluster_with_gadgets() -> MockCluster {
    let cluster = MockCluster::new();
    cluster.create(gadget_crd()).await.expect("valid crd");
    cluster
}

fn status_apply(name: &str, conditions: Value, manager: &str) -> Patch {
    apply(
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name, "namespace": "default"},
               "status": {"conditions": conditions}}),
        manager,
        false,
    )
}

#[tokio::test]
async fn every_captured_kind_is_served_with_its_scope() {
    let cluster = MockCluster::new();
    for (gvk, namespaced) in [
        (Gvk::new("", "v1", "ResourceQuota"), true),
        (Gvk::new("", "v1", "LimitRange"), true),
        (Gvk::new("", "v1", "Endpoints"), true),
        (Gvk::new("autoscaling", "v2", "HorizontalPodAutoscaler"), true),
        (Gvk::new("storage.k8s.io", "v1", "StorageClass"), false),
        (Gvk::new("scheduling.k8s.io", "v1", "PriorityClass"), false),
    ] {
        let info = cluster.kind_info(&gvk).unwrap_or_else(|| panic!("{gvk} is served"));
        assert_eq!(info.namespaced, namespaced, "{gvk}");
    }
    assert!(
        cluster
            .kind_info(&Gvk::new("autoscaling", "v2", "HorizontalPodAutoscaler"))
            .is_some_and(|i| i.status_subresource)
    );
    let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000});
    cluster.create(class).await.expect("priority classes are served");
}

#[tokio::test]
async fn verbs_a_resource_does_not_support_are_method_not_allowed() {
    let cluster = MockCluster::new();
    let review = ObjectRef::new(Gvk::new("authentication.k8s.io", "v1", "TokenReview"), None, "r");
    let err = cluster.get(&review).await.expect_err("token reviews cannot be read");
    assert!(matches!(err, Error::Other(ref s) if s.code == 405), "{err:?}");
}

#[tokio::test]
async fn an_invalid_built_in_object_is_a_422_naming_the_field() {
    let cluster = MockCluster::new();
    let mut bad = deployment("web");
    bad["spec"].as_object_mut().expect("spec").remove("selector");
    let err = cluster.create(bad).await.expect_err("a deployment needs a selector");
    assert!(
        matches!(&err, Error::Invalid(s) if s.message == r#"Deployment.apps "web" is invalid: spec.selector: Required value"#),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_built_in_field_of_the_wrong_type_is_a_400_like_a_decoding_error() {
    let cluster = MockCluster::new();
    let mut bad = deployment("web");
    bad["spec"]["replicas"] = json!("two");
    let err = cluster.create(bad).await.expect_err("replicas is an integer");
    let Error::BadRequest(message) = err else { panic!("expected a 400, got {err:?}") };
    assert!(
        message.starts_with(r#"Deployment in version "v1" cannot be handled as a Deployment: spec.replicas"#),
        "{message}"
    );
}

#[tokio::test]
async fn undeclared_built_in_fields_are_dropped_on_create_and_refused_by_apply() {
    let cluster = MockCluster::new();
    let mut cm = configmap("a");
    cm["bogus"] = json!(1);
    let stored = cluster.create(cm).await.expect("unknown fields are dropped, not refused");
    assert!(stored.get("bogus").is_none());
    let mut config = configmap("b");
    config["bogus"] = json!(1);
    let err = cluster
        .patch(&configmap_ref("b"), apply(config, "ctl", false), Subresource::Main)
        .await
        .expect_err("apply is strict");
    assert!(
        matches!(&err, Error::Other(s) if s.code == 500 && s.message.ends_with(".bogus: field not declared in schema")),
        "{err:?}"
    );
}

#[tokio::test]
async fn custom_resources_are_pruned_defaulted_and_validated_against_their_crd() {
    let cluster = cluster_with_gadgets().await;
    let created = cluster.create(gadget("g", json!({"size": 2, "junk": true}))).await.expect("valid gadget");
    assert_eq!(created["spec"], json!({"size": 2, "color": "red"}));
    let err = cluster.create(gadget("h", json!({"size": 0}))).await.expect_err("size has a minimum");
    assert!(
        matches!(&err, Error::Invalid(s) if s.message == "Gadget.example.com \"h\" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"),
        "{err:?}"
    );
    let err = cluster.create(gadget("i", json!({}))).await.expect_err("size is required");
    assert!(matches!(&err, Error::Invalid(s) if s.message.ends_with("spec.size: Required value")), "{err:?}");
}

#[tokio::test]
async fn a_crd_created_as_an_object_brings_its_schema() {
    let cluster = cluster_with_gadgets().await;
    let applied = cluster
        .patch(&gadget_ref("g"), apply(gadget("g", json!({"size": 1})), "ctl", false), Subresource::Main)
        .await
        .expect("apply creates");
    assert_eq!(applied["spec"]["color"], "red", "defaults apply to server-side apply too");
}

#[tokio::test]
async fn conditions_are_merged_by_type_and_each_manager_keeps_its_own() {
    let cluster = cluster_with_gadgets().await;
    cluster.create(gadget("g", json!({"size": 1}))).await.expect("created");
    let r = gadget_ref("g");
    cluster
        .patch(&r, status_apply("g", json!([{"type": "Ready", "status": "True"}]), "a"), Subresource::Status)
        .await
        .expect("a applies");
    cluster
        .patch(&r, status_apply("g", json!([{"type": "Synced", "status": "False"}]), "b"), Subresource::Status)
        .await
        .expect("b applies");
    let both = cluster.get(&r).await.expect("exists");
    assert_eq!(
        both["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}])
    );
    assert_eq!(
        cluster.managed_fields(&r, "a"),
        [
            ".status.conditions[type=\"Ready\"]",
            ".status.conditions[type=\"Ready\"].status",
            ".status.conditions[type=\"Ready\"].type",
        ]
    );

    // a changes its condition and b's stays.
    cluster
        .patch(
            &r,
            status_apply("g", json!([{"type": "Ready", "status": "False", "reason": "Down"}]), "a"),
            Subresource::Status,
        )
        .await
        .expect("a applies");
    let changed = cluster.get(&r).await.expect("exists");
    assert_eq!(
        changed["status"]["conditions"],
        json!([{"type": "Ready", "status": "False", "reason": "Down"}, {"type": "Synced", "status": "False"}])
    );

    // a stops applying its condition: it goes, b's stays.
    cluster.patch(&r, status_apply("g", json!([]), "a"), Subresource::Status).await.expect("a applies");
    let left = cluster.get(&r).await.expect("exists");
    assert_eq!(left["status"]["conditions"], json!([{"type": "Synced", "status": "False"}]));

    // b may not change a condition a owns without force.
    cluster
        .patch(&r, status_apply("g", json!([{"type": "Ready", "status": "True"}]), "a"), Subresource::Status)
        .await
        .expect("a applies");
    let err = cluster
        .patch(&r, status_apply("g", json!([{"type": "Ready", "status": "False"}]), "b"), Subresource::Status)
        .await
        .expect_err("conflict");
    assert!(
        matches!(&err, Error::Conflict(s) if s.message.contains(r#".status.conditions[type="Ready"].status"#)),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_entry_also_applied_by_another_manager_stays_when_one_drops_it() {
    let cluster = cluster_with_gadgets().await;
    cluster.create(gadget("g", json!({"size": 1}))).await.expect("created");
    let r = gadget_ref("g");
    let ready = json!([{"type": "Ready", "status": "True"}]);
    cluster.patch(&r, status_apply("g", ready.clone(), "a"), Subresource::Status).await.expect("a applies");
    cluster.patch(&r, status_apply("g", ready.clone(), "b"), Subresource::Status).await.expect("b applies the same");
    cluster.patch(&r, status_apply("g", json!([]), "a"), Subresource::Status).await.expect("a drops it");
    assert_eq!(cluster.get(&r).await.expect("exists")["status"]["conditions"], ready);
}

#[tokio::test]
async fn lists_without_a_list_type_are_replaced_whole_by_apply() {
    let cluster = MockCluster::new();
    let r = ObjectRef::new(Gvk::new("rbac.authorization.k8s.io", "v1", "ClusterRole"), None, "reader");
    let role = |verbs: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": verbs}]})
    };
    cluster.patch(&r, apply(role(json!(["get", "list"])), "ctl", false), Subresource::Main).await.expect("applied");
    let stored =
        cluster.patch(&r, apply(role(json!(["get"])), "ctl", false), Subresource::Main).await.expect("applied");
    assert_eq!(stored["rules"][0]["verbs"], json!(["get"]));
    assert_eq!(cluster.managed_fields(&r, "ctl"), [".rules"]);
}

#[tokio::test]
async fn an_apply_that_changes_nothing_keeps_the_resource_version() {
    let cluster = cluster_with_gadgets().await;
    let r = gadget_ref("g");
    let first = cluster
        .patch(&r, apply(gadget("g", json!({"size": 1})), "ctl", false), Subresource::Main)
        .await
        .expect("applied");
    let seq = cluster.last_seq();
    let second = cluster
        .patch(&r, apply(gadget("g", json!({"size": 1})), "ctl", false), Subresource::Main)
        .await
        .expect("applied");
    assert_eq!(rv(&first), rv(&second));
    assert_eq!(cluster.last_seq(), seq, "no change is journalled");
}
