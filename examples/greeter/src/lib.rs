//! The greeter: a `Greeting` custom resource whose controller owns a
//! ConfigMap holding the message and a Deployment with `spec.replicas`
//! replicas that prints it.
//!
//! It shows the whole controller surface of `capstan-guest`: a CRD defined
//! with kube's `#[derive(CustomResource)]` (schema, printer columns, short
//! name, status and scale subresources), owned children, a status with
//! `observedGeneration` and a `Ready` condition, a finalizer with cleanup on
//! delete, Events, reads through the typed client, and a terminal error for
//! a spec no retry can fix.

#![allow(clippy::duplicated_attributes, reason = "kube's printcolumn(...) repeats its keys by design")]

use std::collections::BTreeMap;

use capstan_guest::k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use capstan_guest::k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, Container, EnvVar, EnvVarSource, PodSpec, PodTemplateSpec,
};
use capstan_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta, Time};
use capstan_guest::k8s_openapi::jiff::Timestamp;
use capstan_guest::kube::CustomResource;
use capstan_guest::kube::core::CustomResourceExt;
use capstan_guest::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer the greeter asks the host to manage.
pub const FINALIZER: &str = "examples.capstan.dev/greeter-cleanup";

/// Desired state of a `Greeting`.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.capstan.dev",
    version = "v1alpha1",
    kind = "Greeting",
    plural = "greetings",
    shortname = "greet",
    category = "capstan",
    namespaced,
    status = "GreetingStatus",
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas"),
    printcolumn(name = "Message", type_ = "string", json_path = ".spec.message"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct GreetingSpec {
    /// What to say. Must not be empty.
    pub message: String,
    /// How many replicas of the greeter Deployment to run.
    #[serde(default = "one")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: i32,
}

fn one() -> i32 {
    1
}

/// Observed state of a `Greeting`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GreetingStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The message currently served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Replicas the Deployment reports.
    #[serde(default)]
    pub replicas: i32,
    /// `Ready` when the children match the spec.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The greeter controller.
#[derive(Default)]
pub struct Greeter;

/// Name of the ConfigMap a Greeting owns.
pub fn configmap_name(greeting: &str) -> String {
    format!("{greeting}-greeting")
}

/// Name of the Deployment a Greeting owns.
pub fn deployment_name(greeting: &str) -> String {
    format!("{greeting}-greeter")
}

impl Controller for Greeter {
    type Resource = Greeting;

    fn manifest(&self) -> Manifest {
        Manifest::new("greeter")
            .primary::<Greeting>()
            .crd(&Greeting::crd())
            .owns::<ConfigMap>()
            .owns::<Deployment>()
            .finalizer(FINALIZER)
            .resync(std::time::Duration::from_secs(300))
            .max_concurrency(if cfg!(feature = "v3") { 2 } else { 4 })
    }

    fn delete(&self, ctx: &Context, greeting: Greeting) -> Result<Outcome> {
        // The children carry ownerReferences and are garbage collected;
        // only say goodbye.
        ctx.log().info("greeting deleted", &[("name", &greeting.name_any())]);
        Ok(Outcome::new().event(Event::normal("Deleted", "Cleanup").note("greeting removed, children follow")))
    }

    fn reconcile(&self, ctx: &Context, greeting: Greeting) -> Result<Outcome> {
        let name = greeting.name_any();
        if greeting.spec.message.trim().is_empty() {
            return Err(Error::terminal("spec.message must not be empty"));
        }
        if cfg!(feature = "broken") {
            return Err(Error::transient("this build is broken on purpose (feature `broken`)"));
        }

        // The Deployment as the cluster has it, for the replicas it reports:
        // a span of its own in the reconcile's trace, the read inside it.
        let observe = ctx.span("observe-deployment", &[("deployment", &deployment_name(&name))]);
        let ready_replicas = ctx
            .api::<Deployment>(ctx.namespace())
            .get_opt(&deployment_name(&name))?
            .and_then(|d| d.status)
            .and_then(|s| s.replicas)
            .unwrap_or(0);
        observe.end();
        let (configmap, deployment, status) = desired(&greeting, ready_replicas);

        let mut outcome = Outcome::new().child(&configmap).child(&deployment).status(&status);
        match ctx.event() {
            EventKind::Added => {
                outcome = outcome.event(Event::normal("Created", "Reconcile").note(format!("greeting {name} set up")));
            }
            EventKind::Modified => {
                outcome = outcome.event(Event::normal("Updated", "Reconcile").note(format!("greeting {name} updated")));
            }
            EventKind::Deleted | EventKind::Resync => {}
        }
        ctx.log().info("reconciled", &[("name", &name), ("replicas", &greeting.spec.replicas.to_string())]);
        Ok(outcome)
    }
}

/// What a Greeting wants: its ConfigMap, its Deployment, and its status
/// given the replicas its Deployment reports. Pure, so that a native
/// controller (the benchmark's baseline) computes exactly the same objects.
pub fn desired(greeting: &Greeting, deployed_replicas: i32) -> (ConfigMap, Deployment, GreetingStatus) {
    let name = greeting.name_any();
    let labels = BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "greeter".to_owned()),
        ("examples.capstan.dev/greeting".to_owned(), name.clone()),
    ]);
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(configmap_name(&name)),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        data: Some(configmap_data(&greeting.spec.message)),
        ..ConfigMap::default()
    };
    let deployment = greeter_deployment(&name, greeting.spec.replicas, labels);
    let previous = greeting.status.clone().unwrap_or_default();
    let status = GreetingStatus {
        observed_generation: greeting.metadata.generation,
        message: Some(greeting.spec.message.clone()),
        replicas: deployed_replicas,
        conditions: vec![ready_condition(&previous, greeting.metadata.generation)],
    };
    (configmap, deployment, status)
}

/// The greeting's ConfigMap data (with the `v2` or `v3` feature, the
/// version too: a visible change for the hot-loading tests).
fn configmap_data(message: &str) -> BTreeMap<String, String> {
    let mut data = BTreeMap::from([("message".to_owned(), message.to_owned())]);
    let version = if cfg!(feature = "v3") { Some("3") } else { cfg!(feature = "v2").then_some("2") };
    if let Some(version) = version {
        data.insert("greeter-version".to_owned(), version.to_owned());
    }
    data
}

/// A `Ready=True` condition, keeping the transition time when it was
/// already true.
fn ready_condition(previous: &GreetingStatus, generation: Option<i64>) -> Condition {
    let old = previous.conditions.iter().find(|c| c.type_ == "Ready" && c.status == "True");
    Condition {
        type_: "Ready".to_owned(),
        status: "True".to_owned(),
        reason: "Reconciled".to_owned(),
        message: "configmap and deployment are applied".to_owned(),
        observed_generation: generation,
        last_transition_time: old.map(|c| c.last_transition_time.clone()).unwrap_or_else(|| Time(Timestamp::now())),
    }
}

fn greeter_deployment(name: &str, replicas: i32, labels: BTreeMap<String, String>) -> Deployment {
    let selector = BTreeMap::from([("examples.capstan.dev/greeting".to_owned(), name.to_owned())]);
    Deployment {
        metadata: ObjectMeta {
            name: Some(deployment_name(name)),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector { match_labels: Some(selector), ..LabelSelector::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "greeter".to_owned(),
                        image: Some("busybox:1.37".to_owned()),
                        command: Some(vec![
                            "sh".to_owned(),
                            "-c".to_owned(),
                            "while true; do echo \"$MESSAGE\"; sleep 60; done".to_owned(),
                        ]),
                        env: Some(vec![EnvVar {
                            name: "MESSAGE".to_owned(),
                            value_from: Some(EnvVarSource {
                                config_map_key_ref: Some(ConfigMapKeySelector {
                                    name: configmap_name(name),
                                    key: "message".to_owned(),
                                    ..ConfigMapKeySelector::default()
                                }),
                                ..EnvVarSource::default()
                            }),
                            ..EnvVar::default()
                        }]),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

#[cfg(target_arch = "wasm32")]
capstan_guest::export!(Greeter);
