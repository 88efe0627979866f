//! The fleet greeter: a fleet controller. A `FleetGreeting` in the home
//! cluster (`default`, the host's own) places a ConfigMap holding its
//! message in every member cluster of the fleet, reads each copy back, and
//! reports per member whether it holds the message, with a `Ready`
//! condition over all of them.
//!
//! It shows what a fleet controller gets from `capstan-guest`:
//! [`Manifest::fleet`], [`Context::members`] (the members engaged now),
//! [`Outcome::child_in`] (a child in a member, marked by the host instead
//! of an ownerReference, pruned, and deleted behind the finalizer),
//! [`Context::api_in`] (reads in a member) and
//! [`Context::failed_children`] naming the member of a refused child.

#![allow(clippy::duplicated_attributes, reason = "kube's printcolumn(...) repeats its keys by design")]

use std::collections::BTreeMap;
use std::time::Duration;

use capstan_guest::conditions::{condition, set_condition};
use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
use capstan_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use capstan_guest::kube::CustomResource;
use capstan_guest::kube::core::CustomResourceExt;
use capstan_guest::prelude::*;
use capstan_guest::{FailedChild, Fleet};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer behind which the host deletes the children in the
/// members before a `FleetGreeting` goes.
pub const FINALIZER: &str = "examples.capstan.dev/fleet-greeting";

/// The cluster whose `FleetGreeting`s are reconciled: the host's own.
pub const HOME: &str = "default";

/// How soon a `FleetGreeting` not ready in every member is looked at again.
pub const RECHECK: Duration = Duration::from_secs(5);

/// Desired state of a `FleetGreeting`: a message spread to the member
/// clusters of the fleet.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.capstan.dev",
    version = "v1",
    kind = "FleetGreeting",
    plural = "fleetgreetings",
    shortname = "fg",
    category = "capstan",
    namespaced,
    status = "FleetGreetingStatus",
    printcolumn(name = "Message", type_ = "string", json_path = ".spec.message"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyMembers"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct FleetGreetingSpec {
    /// What to say in every member cluster.
    pub message: String,
    /// The member clusters to spread to, by name; absent: every member
    /// engaged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
}

/// Observed state of a `FleetGreeting`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FleetGreetingStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One entry per target member, in the order of the members.
    #[serde(default)]
    pub members: Vec<MemberStatus>,
    /// How many target members hold the message.
    #[serde(default)]
    pub ready_members: i32,
    /// `Ready` when every target member holds the message.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// What one member cluster holds.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The member cluster.
    pub cluster: String,
    /// Whether it holds the ConfigMap with the message.
    pub ready: bool,
    /// Why not: `pending`, `refused: REASON: MESSAGE`, or
    /// `unreachable: ERROR` (the member could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The fleet greeter controller.
#[derive(Default)]
pub struct FleetGreeter;

/// The name of the ConfigMap a `FleetGreeting` places in each member.
pub fn configmap_name(greeting: &str) -> String {
    format!("{greeting}-greeting")
}

/// The members to spread to: those engaged now ([`Context::members`], in
/// their order), only those `spec.members` names when it is given.
pub fn targets(ctx: &Context, spec: &FleetGreetingSpec) -> Vec<String> {
    ctx.members().iter().filter(|m| spec.members.as_ref().is_none_or(|wanted| wanted.contains(m))).cloned().collect()
}

/// One member's entry of the status: refused when the host could not
/// apply the ConfigMap there; ready when the member holds it with the
/// message; pending otherwise.
pub fn member_status(
    failed: &[FailedChild],
    member: &str,
    name: &str,
    message: &str,
    copy: Option<&ConfigMap>,
) -> MemberStatus {
    if let Some(f) =
        failed.iter().find(|f| f.cluster.as_deref() == Some(member) && f.kind == "ConfigMap" && f.name == name)
    {
        return MemberStatus {
            cluster: member.to_owned(),
            ready: false,
            message: Some(format!("refused: {}: {}", f.reason, f.message)),
        };
    }
    let holds = copy.and_then(|c| c.data.as_ref()).and_then(|d| d.get("message")).is_some_and(|m| m == message);
    MemberStatus { cluster: member.to_owned(), ready: holds, message: (!holds).then(|| "pending".to_owned()) }
}

impl Controller for FleetGreeter {
    type Resource = FleetGreeting;

    fn manifest(&self) -> Manifest {
        Manifest::new("fleet-greeter")
            .primary::<FleetGreeting>()
            .crd(&FleetGreeting::crd())
            .owns::<ConfigMap>()
            .finalizer(FINALIZER)
            .fleet(Fleet::home(HOME))
    }

    fn reconcile(&self, ctx: &Context, greeting: FleetGreeting) -> Result<Outcome> {
        let namespace = ctx.namespace();
        let name = configmap_name(ctx.name());
        let message = &greeting.spec.message;
        let members = targets(ctx, &greeting.spec);

        let copy = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: namespace.map(str::to_owned),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([
                ("message".to_owned(), message.clone()),
                ("from".to_owned(), format!("{}/{}/{}", ctx.cluster(), namespace.unwrap_or_default(), ctx.name())),
            ])),
            ..ConfigMap::default()
        };
        let mut outcome = members.iter().fold(Outcome::new(), |o, member| o.child_in(member, &copy));

        let mut entries = Vec::with_capacity(members.len());
        for member in &members {
            // A member that does not answer is reported, not a failure of
            // the whole pass: the others' copies and the status go on.
            entries.push(match ctx.api_in::<ConfigMap>(member, namespace).get_opt(&name) {
                Ok(there) => member_status(ctx.failed_children(), member, &name, message, there.as_ref()),
                Err(e) => {
                    MemberStatus { cluster: member.clone(), ready: false, message: Some(format!("unreachable: {e}")) }
                }
            });
        }
        let ready = entries.iter().filter(|e| e.ready).count();
        let all_ready = !members.is_empty() && ready == members.len();

        let generation = greeting.metadata.generation;
        let mut conditions = greeting.status.map(|s| s.conditions).unwrap_or_default();
        let (status, reason) = if all_ready { ("True", "AllMembersReady") } else { ("False", "MembersNotReady") };
        let summary = format!("{ready}/{} members ready", members.len());
        set_condition(
            &mut conditions,
            Condition { observed_generation: generation, ..condition("Ready", status, reason, &summary) },
        );
        outcome = outcome.status(&FleetGreetingStatus {
            observed_generation: generation,
            members: entries,
            ready_members: i32::try_from(ready).unwrap_or(i32::MAX),
            conditions,
        });
        if !all_ready {
            outcome = outcome.requeue_after(RECHECK);
        }
        if matches!(ctx.event(), EventKind::Added | EventKind::Modified) {
            let note = format!("spread to {} member clusters", members.len());
            outcome = outcome.event(Event::normal("Spread", "Reconcile").note(note));
        }
        ctx.log().info(
            "reconciled",
            &[("name", ctx.name()), ("members", &members.len().to_string()), ("ready", &ready.to_string())],
        );
        Ok(outcome)
    }

    /// Nothing to do: the host deletes the children in the members behind
    /// the finalizer.
    fn delete(&self, _ctx: &Context, _greeting: FleetGreeting) -> Result<Outcome> {
        Ok(Outcome::new())
    }
}

#[cfg(target_arch = "wasm32")]
capstan_guest::export!(FleetGreeter);

#[cfg(test)]
mod tests {
    use capstan_guest::testing::FakeHost;

    use super::*;

    fn greeting(members: Option<&[&str]>) -> FleetGreeting {
        let mut g = FleetGreeting::new(
            "hello",
            FleetGreetingSpec {
                message: "hi".into(),
                members: members.map(|m| m.iter().map(|s| (*s).to_owned()).collect()),
            },
        );
        g.metadata.namespace = Some("demo".into());
        g.metadata.generation = Some(3);
        g
    }

    fn copy(message: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("hello-greeting".into()),
                namespace: Some("demo".into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("message".to_owned(), message.to_owned())])),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_greeting_spreads_to_every_member_and_reports_each() {
        let mut host = FakeHost::new().member("west", &[copy("hi")]).member("east", &[copy("old")]);
        let done = host.reconcile::<FleetGreeter>(EventKind::Added, &greeting(None)).expect("reconciled");
        assert!(done.child_in("west", "ConfigMap", "hello-greeting").is_some());
        let east = done.child_in("east", "ConfigMap", "hello-greeting").expect("a child in east");
        assert_eq!(east["data"]["from"], "default/demo/hello");
        let status = done.status.expect("a status");
        assert_eq!(status["readyMembers"], 1);
        assert_eq!(status["members"][0], serde_json::json!({"cluster": "east", "ready": false, "message": "pending"}));
        assert_eq!(status["members"][1], serde_json::json!({"cluster": "west", "ready": true}));
        assert_eq!(status["conditions"][0]["status"], "False");
        assert_eq!(done.requeue_after, Some(RECHECK));
        assert_eq!(done.events[0]["reason"], "Spread");
    }

    #[test]
    fn spec_members_narrow_the_targets_and_all_ready_is_ready() {
        let mut host = FakeHost::new().member("west", &[copy("hi")]).member("east", &[copy("old")]);
        let done = host.reconcile::<FleetGreeter>(EventKind::Resync, &greeting(Some(&["west"]))).expect("reconciled");
        assert!(done.child_in("east", "ConfigMap", "hello-greeting").is_none());
        let status = done.status.expect("a status");
        assert_eq!(status["conditions"][0]["reason"], "AllMembersReady");
        assert_eq!(status["conditions"][0]["observedGeneration"], 3);
        assert!(done.requeue_after.is_none() && done.events.is_empty());
    }

    #[test]
    fn a_refused_member_child_is_reported_with_its_reason() {
        let failed = FailedChild {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("demo".into()),
            name: "hello-greeting".into(),
            code: 404,
            reason: "NotFound".into(),
            message: "namespaces \"demo\" not found".into(),
            cluster: Some("west".into()),
        };
        let status = member_status(&[failed], "west", "hello-greeting", "hi", None);
        assert_eq!(status.message.as_deref(), Some("refused: NotFound: namespaces \"demo\" not found"));
        assert!(!status.ready);
    }
}
