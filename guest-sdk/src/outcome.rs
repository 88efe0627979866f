//! What a reconcile returns: the [`Outcome`] builder, and [`Event`]s.

use std::time::Duration;

use kube::Resource;
use serde::Serialize;

use crate::wit::capstan::operator::types as wit;

/// A Kubernetes Event to record.
///
/// ```
/// use capstan_guest::Event;
/// let e = Event::normal("Created", "Reconcile").note("configmap web created");
/// ```
#[derive(Clone, Debug)]
pub struct Event(pub(crate) wit::Event);

impl Event {
    fn new(event_type: wit::EventType, reason: &str, action: &str) -> Self {
        Self(wit::Event {
            event_type,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: None,
            regarding: None,
        })
    }

    /// A Normal event: something expected happened. `reason` is short
    /// UpperCamelCase (`Created`), `action` what was done (`Reconcile`).
    pub fn normal(reason: &str, action: &str) -> Self {
        Self::new(wit::EventType::Normal, reason, action)
    }

    /// A Warning event: something went wrong or needs attention.
    pub fn warning(reason: &str, action: &str) -> Self {
        Self::new(wit::EventType::Warning, reason, action)
    }

    /// Human-readable detail.
    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.0.note = Some(note.into());
        self
    }

    /// The object the event is about, when it is not the one being
    /// reconciled.
    #[must_use]
    pub fn regarding<K: Resource<DynamicType = ()>>(mut self, namespace: Option<&str>, name: &str) -> Self {
        self.0.regarding = Some(wit::ObjectRef {
            kind: crate::manifest::gvk_of::<K>(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        });
        self
    }
}

/// What a successful reconcile asks the host to do.
///
/// ```
/// use capstan_guest::{Event, Outcome};
/// use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
/// use std::time::Duration;
///
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("web".into());
/// let outcome = Outcome::new()
///     .child(&cm)
///     .status(&serde_json::json!({"ready": true}))
///     .event(Event::normal("Reconciled", "Reconcile"))
///     .requeue_after(Duration::from_secs(60));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Outcome(wit::Outcome);

#[allow(clippy::derivable_impls, reason = "the generated type cannot carry a derive")]
impl Default for wit::Outcome {
    fn default() -> Self {
        Self {
            children: Vec::new(),
            status: None,
            events: Vec::new(),
            requeue_after_ms: None,
            children_policy: wit::ChildrenPolicy::Prune,
            member_children: Vec::new(),
        }
    }
}

impl Outcome {
    /// Nothing to do.
    pub fn new() -> Self {
        Self::default()
    }

    /// A desired child object. The host applies it by server-side apply,
    /// sets a controller ownerReference to the reconciled object, defaults
    /// its namespace to the owner's, and deletes children of owned kinds
    /// that a later outcome no longer lists. The child's kind must be
    /// declared with [`Manifest::owns`](crate::Manifest::owns).
    #[must_use]
    pub fn child<K: Resource + Serialize>(mut self, child: &K) -> Self {
        self.0.children.push(serde_json::to_vec(child).expect("a Kubernetes object always serializes to JSON"));
        self
    }

    /// A desired child given as JSON (with `apiVersion` and `kind`).
    #[must_use]
    pub fn child_json(mut self, child: &serde_json::Value) -> Self {
        self.0.children.push(serde_json::to_vec(child).expect("a JSON value always serializes"));
        self
    }

    /// A desired child in the member cluster named `cluster`, for a fleet
    /// controller ([`Manifest::fleet`](crate::Manifest::fleet); contract
    /// 0.4.0): one of [`Context::members`](crate::Context::members). The
    /// host applies it there by server-side apply, marks it with labels
    /// and annotations naming its owner (an ownerReference cannot cross
    /// clusters), defaults its namespace to the owner's, prunes it when a
    /// later outcome no longer lists it, and deletes it when the owner
    /// goes. Its kind must be declared with
    /// [`Manifest::owns`](crate::Manifest::owns).
    ///
    /// ```no_run
    /// # use capstan_guest::prelude::*;
    /// # use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
    /// # fn f(ctx: &Context, cm: &ConfigMap) -> Outcome {
    /// ctx.members().iter().fold(Outcome::new(), |outcome, member| outcome.child_in(member, cm))
    /// # }
    /// ```
    #[must_use]
    pub fn child_in<K: Resource + Serialize>(mut self, cluster: &str, child: &K) -> Self {
        let object = serde_json::to_vec(child).expect("a Kubernetes object always serializes to JSON");
        self.0.member_children.push(wit::MemberChild { cluster: cluster.to_owned(), object });
        self
    }

    /// A desired child in the member cluster named `cluster`, given as
    /// JSON (see [`child_in`](Self::child_in)).
    #[must_use]
    pub fn child_json_in(mut self, cluster: &str, child: &serde_json::Value) -> Self {
        let object = serde_json::to_vec(child).expect("a JSON value always serializes");
        self.0.member_children.push(wit::MemberChild { cluster: cluster.to_owned(), object });
        self
    }

    /// The desired `status` of the reconciled object (the status field
    /// only), written through the status subresource.
    /// `observedGeneration` is filled in when absent.
    #[must_use]
    pub fn status<S: Serialize>(mut self, status: &S) -> Self {
        self.0.status = Some(serde_json::to_vec(status).expect("a status always serializes to JSON"));
        self
    }

    /// An event to record about the reconciled object (or the one
    /// [`Event::regarding`] names).
    #[must_use]
    pub fn event(mut self, event: Event) -> Self {
        self.0.events.push(event.0);
        self
    }

    /// Keep existing children as they are: apply the children listed (if
    /// any) and delete none. Without it, children of owned kinds that the
    /// outcome does not list are deleted (pruned), which is right for an
    /// outcome that lists every child there should be, and wrong for one
    /// that, say, has not read everything it needs yet. Kept children stay
    /// owned: they are deleted with the object later.
    ///
    /// From [`Controller::delete`] it keeps them for good: the host removes
    /// its ownerReference from every child before it removes its finalizer,
    /// so the garbage collector leaves them when the object is gone (other
    /// owners' references stay).
    ///
    /// ```
    /// use capstan_guest::Outcome;
    /// let outcome = Outcome::new().keep_children();
    /// ```
    #[must_use]
    pub fn keep_children(mut self) -> Self {
        self.0.children_policy = wit::ChildrenPolicy::Keep;
        self
    }

    /// The default policy again: children follow the object (what the
    /// default [`Controller::delete`] makes of a reconcile's outcome).
    pub(crate) fn children_follow(mut self) -> Self {
        self.0.children_policy = wit::ChildrenPolicy::Prune;
        self
    }

    /// Reconcile this object again after `delay`, even if nothing changes.
    #[must_use]
    pub fn requeue_after(mut self, delay: Duration) -> Self {
        self.0.requeue_after_ms = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self
    }

    #[doc(hidden)]
    pub fn into_wit(self) -> wit::Outcome {
        self.0
    }
}
