//! The mock cluster against the real API server: the same operations, through
//! the same `Cluster` trait, on `MockCluster` and on `KubeCluster` (the
//! host's real backend), must have the same outcomes.
//!
//! Run with a control plane of your own:
//!
//! ```sh
//! export KUBECONFIG=$(CAPSTAN_CP_DIR=/tmp/cp-mock tests/control-plane/cp.sh up | tail -1) CAPSTAN_E2E_KUBECONFIG=1
//! cargo test -p capstan-tests --test mock_fidelity
//! ```

use anyhow::{Context, Result, ensure};
use capstan_host::cluster::kube::KubeCluster;
use capstan_host::cluster::mock::MockCluster;
use capstan_host::cluster::{Cluster, Error, Patch, Subresource};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_tests::{ControlPlane, TestNamespace, install_crd};
use serde_json::{Value, json};

const GROUP: &str = "fidelity.capstan.dev";

/// A CRD with defaults and bounds in `spec` and `status.conditions` as a
/// list-map keyed by `type` (as `metav1.Condition` lists are declared).
fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "options": {"type": "object", "default": {}, "properties": {
                            "retries": {"type": "integer", "default": 3},
                        }},
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

fn gadget_ref(ns: &str, name: &str) -> ObjectRef {
    ObjectRef::new(Gvk::new(GROUP, "v1", "Gadget"), Some(ns), name)
}

fn gadget(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn apply(object: Value, manager: &str) -> Patch {
    Patch::Apply { object, field_manager: manager.to_owned(), force: false }
}

/// What a backend did with the operations; compared between the two.
#[derive(Debug, PartialEq)]
struct Outcomes {
    /// `status.conditions` after managers `a` and `b` each applied one.
    conditions_of_two_managers: Value,
    /// ... after `a` changed its own condition.
    conditions_after_a_changed: Value,
    /// ... after `a` stopped applying its condition.
    conditions_after_a_dropped: Value,
    /// `spec` of a gadget created with only `size` and an undeclared field.
    defaulted_spec: Value,
    /// The HTTP status and whether the message names the missing selector,
    /// for a Deployment without one.
    invalid_deployment: (u16, bool),
    /// The HTTP status for a Deployment whose replicas is a string.
    mistyped_deployment: u16,
    /// The HTTP status for a server-side apply with an undeclared field.
    undeclared_apply: u16,
    /// The HTTP status for a gadget below its minimum size, and the message
    /// after its name.
    gadget_below_minimum: (u16, String),
    /// Whether a second identical apply kept the resourceVersion.
    noop_apply_kept_resource_version: bool,
}

fn code(error: &Error) -> u16 {
    match error {
        Error::NotFound(s) | Error::AlreadyExists(s) | Error::Conflict(s) | Error::Invalid(s) | Error::Forbidden(s) => {
            s.code
        }
        Error::Other(s) => s.code,
        Error::BadRequest(_) => 400,
        Error::Unavailable(_) => 503,
    }
}

/// The message after `is invalid: `.
fn detail(error: &Error) -> String {
    let message = match error {
        Error::Invalid(s) => s.message.as_str(),
        _ => "",
    };
    message.split_once("is invalid: ").map(|(_, d)| d.to_owned()).unwrap_or_else(|| message.to_owned())
}

async fn run(cluster: &dyn Cluster, ns: &str) -> Result<Outcomes> {
    // Conditions merged by type, each manager owning its own.
    let r = gadget_ref(ns, "conditions");
    cluster.create(gadget(ns, "conditions", json!({"size": 1}))).await.context("creating a gadget")?;
    let status = |conditions: Value| {
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gadget",
               "metadata": {"name": "conditions", "namespace": ns}, "status": {"conditions": conditions}})
    };
    let conditions = |object: Value| object.pointer("/status/conditions").cloned().unwrap_or(Value::Null);
    cluster
        .patch(&r, apply(status(json!([{"type": "Ready", "status": "True"}])), "a"), Subresource::Status)
        .await
        .context("a applies Ready")?;
    let two = cluster
        .patch(&r, apply(status(json!([{"type": "Synced", "status": "False"}])), "b"), Subresource::Status)
        .await
        .context("b applies Synced")?;
    let changed = cluster
        .patch(
            &r,
            apply(status(json!([{"type": "Ready", "status": "False", "reason": "Down"}])), "a"),
            Subresource::Status,
        )
        .await
        .context("a changes Ready")?;
    let dropped =
        cluster.patch(&r, apply(status(json!([])), "a"), Subresource::Status).await.context("a drops Ready")?;

    // CRD defaults and pruning.
    let defaulted = cluster
        .create(gadget(ns, "defaults", json!({"size": 2, "undeclared": true})))
        .await
        .context("creating a gadget with defaults")?;

    // A 422 for an invalid built-in object, a 400 for a mistyped one.
    let deployment = |name: &str, spec: Value| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns}, "spec": spec});
    let template =
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}});
    let invalid = cluster
        .create(deployment("no-selector", json!({"template": template.clone()})))
        .await
        .expect_err("a deployment needs a selector");
    let mistyped = cluster
        .create(deployment(
            "mistyped",
            json!({"replicas": "two", "selector": {"matchLabels": {"app": "web"}}, "template": template}),
        ))
        .await
        .expect_err("replicas is an integer");
    let mut undeclared = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}});
    undeclared["bogus"] = json!(1);
    let undeclared = cluster
        .patch(
            &ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some(ns), "cm"),
            apply(undeclared, "a"),
            Subresource::Main,
        )
        .await
        .expect_err("apply refuses undeclared fields");
    let below = cluster.create(gadget(ns, "small", json!({"size": 0}))).await.expect_err("size has a minimum");

    // A no-op apply.
    let noop = gadget_ref(ns, "noop");
    let config = gadget(ns, "noop", json!({"size": 3, "color": "blue"}));
    let first = cluster.patch(&noop, apply(config.clone(), "a"), Subresource::Main).await.context("first apply")?;
    let second = cluster.patch(&noop, apply(config, "a"), Subresource::Main).await.context("second apply")?;
    let rv = |o: &Value| o.pointer("/metadata/resourceVersion").cloned();

    Ok(Outcomes {
        conditions_of_two_managers: conditions(two),
        conditions_after_a_changed: conditions(changed),
        conditions_after_a_dropped: conditions(dropped),
        defaulted_spec: defaulted["spec"].clone(),
        invalid_deployment: (code(&invalid), detail(&invalid).contains("spec.selector: Required value")),
        mistyped_deployment: code(&mistyped),
        undeclared_apply: code(&undeclared),
        gadget_below_minimum: (code(&below), detail(&below)),
        noop_apply_kept_resource_version: rv(&first).is_some() && rv(&first) == rv(&second),
    })
}

#[tokio::test]
async fn the_mock_cluster_answers_like_the_api_server() -> Result<()> {
    let ns = TestNamespace::new("mock-fidelity").await?;
    let plane = ControlPlane::shared().await?;
    install_crd(&plane.client()?, gadget_crd()).await?;
    let real = KubeCluster::new(plane.client()?, None);
    let real = run(&real, ns.name()).await.context("against the API server")?;

    let mock = MockCluster::new();
    mock.create(gadget_crd()).await.context("creating the CRD in the mock")?;
    let mock = run(&mock, ns.name()).await.context("against the mock")?;

    ensure!(
        real.conditions_of_two_managers
            == json!([{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]),
        "the API server merged conditions unexpectedly: {real:#?}"
    );
    ensure!(real.invalid_deployment == (422, true), "the API server: {real:#?}");
    assert_eq!(mock, real, "left: the mock, right: the API server");
    ns.cleanup().await
}
