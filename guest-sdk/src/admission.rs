//! Admission webhooks: validate and mutate requests for objects, typed.
//!
//! Declare each webhook in the [`Manifest`](crate::Manifest) with
//! [`Manifest::webhook`](crate::Manifest::webhook), implement [`Admission`]
//! and export the type with `capstan_guest::export!(controller: T,
//! admission: T)` (or `admission: T` alone). The host serves the webhooks
//! over HTTPS, calls [`Admission::validate`] or [`Admission::mutate`] for
//! each request, and turns a mutated object into the JSON Patch the API
//! server expects.

use kube::Resource;

use crate::manifest::gvk_of;
use crate::wit::capstan::operator::types as wit;

/// An operation an admission webhook is called for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `CONNECT`.
    Connect,
}

impl From<wit::Operation> for Operation {
    fn from(o: wit::Operation) -> Self {
        match o {
            wit::Operation::Create => Self::Create,
            wit::Operation::Update => Self::Update,
            wit::Operation::Delete => Self::Delete,
            wit::Operation::Connect => Self::Connect,
        }
    }
}

impl From<Operation> for wit::Operation {
    fn from(o: Operation) -> Self {
        match o {
            Operation::Create => Self::Create,
            Operation::Update => Self::Update,
            Operation::Delete => Self::Delete,
            Operation::Connect => Self::Connect,
        }
    }
}

/// An admission webhook declaration, added to a manifest with
/// [`Manifest::webhook`](crate::Manifest::webhook).
///
/// ```
/// use capstan_guest::admission::{Operation, Webhook};
/// use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
///
/// let webhook = Webhook::validating("validate.configmaps.example.com")
///     .kind::<ConfigMap>()
///     .operations(&[Operation::Create, Operation::Update])
///     .ignore_failures()
///     .timeout_seconds(5);
/// ```
#[derive(Clone, Debug)]
pub struct Webhook(pub(crate) wit::AdmissionWebhook);

impl Webhook {
    fn new(name: &str, webhook_type: wit::WebhookType) -> Self {
        Self(wit::AdmissionWebhook {
            name: name.to_owned(),
            webhook_type,
            kinds: Vec::new(),
            operations: vec![wit::Operation::Create, wit::Operation::Update],
            failure_policy: wit::FailurePolicy::Fail,
            timeout_seconds: 0,
            side_effects: wit::SideEffects::None,
            namespace_selector: None,
            object_selector: None,
        })
    }

    /// A validating webhook named `name`, a fully qualified DNS name of at
    /// least three labels (e.g. `validate.greetings.example.com`), called
    /// for creates and updates unless [`operations`](Self::operations) says
    /// otherwise. Requests that fail (a trap, the deadline) are rejected
    /// unless [`ignore_failures`](Self::ignore_failures) is set.
    pub fn validating(name: &str) -> Self {
        Self::new(name, wit::WebhookType::Validating)
    }

    /// A mutating (defaulting) webhook named `name`; see
    /// [`validating`](Self::validating).
    pub fn mutating(name: &str) -> Self {
        Self::new(name, wit::WebhookType::Mutating)
    }

    /// A kind (in its version) the webhook is called for.
    #[must_use]
    pub fn kind<K: Resource<DynamicType = ()>>(mut self) -> Self {
        self.0.kinds.push(gvk_of::<K>());
        self
    }

    /// The operations it is called for (default: create and update).
    #[must_use]
    pub fn operations(mut self, operations: &[Operation]) -> Self {
        self.0.operations = operations.iter().map(|o| (*o).into()).collect();
        self
    }

    /// Let requests through when the webhook fails (`failurePolicy:
    /// Ignore`); the default rejects them (`Fail`).
    #[must_use]
    pub fn ignore_failures(mut self) -> Self {
        self.0.failure_policy = wit::FailurePolicy::Ignore;
        self
    }

    /// How long the API server waits, 1 to 30 seconds (default 10). The
    /// host's deadline for the call lies half a second below it.
    #[must_use]
    pub fn timeout_seconds(mut self, seconds: u32) -> Self {
        self.0.timeout_seconds = seconds;
        self
    }

    /// The webhook has side effects, except on dry runs (`NoneOnDryRun`).
    #[must_use]
    pub fn side_effects_on_dry_run(mut self) -> Self {
        self.0.side_effects = wit::SideEffects::NoneOnDryRun;
        self
    }

    /// Only objects in namespaces matching this selector.
    #[must_use]
    pub fn namespace_selector(
        mut self,
        selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) -> Self {
        self.0.namespace_selector = Some(serde_json::to_vec(selector).expect("a selector serializes"));
        self
    }

    /// Only objects matching this selector.
    #[must_use]
    pub fn object_selector(mut self, selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> Self {
        self.0.object_selector = Some(serde_json::to_vec(selector).expect("a selector serializes"));
        self
    }
}

/// An object of a request that does not decode as the webhook's type: the
/// JSON the API server sent, and why it does not decode.
///
/// ```
/// use capstan_guest::admission::Undecodable;
///
/// let stored = Undecodable {
///     raw: serde_json::json!({"spec": {"message": "hi"}}),
///     error: "missing field `size`".to_owned(),
/// };
/// assert_eq!(stored.raw["spec"]["message"], "hi");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Undecodable {
    /// The object as the API server sent it.
    pub raw: serde_json::Value,
    /// Why it does not decode as the webhook's type (serde's message).
    pub error: String,
}

/// Who makes a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub username: String,
    /// User UID.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
}

/// One admission request, with its objects typed.
#[derive(Clone, Debug)]
pub struct Request<K> {
    /// The declared webhook this request is for.
    pub webhook: String,
    /// The kind in the version the user's request was made in: differs
    /// from `K`'s version when the API server converted the object for
    /// this webhook (`matchPolicy: Equivalent`). A host before contract
    /// 0.4.0 does not tell; this is then the webhook's kind.
    pub request_kind: kube::core::GroupVersionKind,
    /// The operation.
    pub operation: Operation,
    /// The object's name (empty on a create with `generateName`).
    pub name: String,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// The subresource, if any.
    pub sub_resource: Option<String>,
    /// The object as it would be stored; `None` on delete, and in
    /// [`Admission::undecodable`] (which gets it raw).
    pub object: Option<K>,
    /// The object as it is stored; `None` on create, and when it does not
    /// decode as `K` (an object stored before the type changed): then
    /// [`undecodable_old_object`](Self::undecodable_old_object) holds it.
    pub old_object: Option<K>,
    /// The object as it is stored, raw, when it does not decode as `K`
    /// (e.g. stored before the type gained a required field). Such a
    /// request is not refused for it: a delete, or an update to an object
    /// that decodes, goes to the handler like any other.
    pub undecodable_old_object: Option<Undecodable>,
    /// Who makes the request.
    pub user_info: UserInfo,
    /// Nothing will be stored.
    pub dry_run: bool,
}

/// The answer to an admission request: allowed or denied, with warnings.
///
/// ```
/// use capstan_guest::admission::Verdict;
///
/// let v = Verdict::deny("spec.replicas must be between 0 and 10").code(422);
/// assert!(!v.is_allowed());
/// let v = Verdict::allow().warn("spec.message is long");
/// assert!(v.is_allowed());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    allowed: bool,
    message: Option<String>,
    code: Option<u16>,
    warnings: Vec<String>,
}

impl Verdict {
    /// Let the request go on.
    pub fn allow() -> Self {
        Self { allowed: true, message: None, code: None, warnings: Vec::new() }
    }

    /// Reject the request; `message` is shown to the user.
    pub fn deny(message: impl Into<String>) -> Self {
        Self { allowed: false, message: Some(message.into()), code: None, warnings: Vec::new() }
    }

    /// The HTTP status code of a denial (400 to 599; default 403).
    #[must_use]
    pub fn code(mut self, code: u16) -> Self {
        self.code = Some(code);
        self
    }

    /// A warning shown to the user either way.
    #[must_use]
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// True if the request may go on.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The denial's message.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    pub(crate) fn into_wit(self, patched: Option<Vec<u8>>) -> wit::AdmissionResponse {
        wit::AdmissionResponse {
            allowed: self.allowed,
            message: self.message,
            code: self.code,
            warnings: self.warnings,
            patched: if self.allowed { patched } else { None },
        }
    }
}

/// Admission logic for one kind of objects. Both methods allow by default,
/// so implement the ones the manifest declares webhooks for.
pub trait Admission: Default + 'static {
    /// The kind the webhooks check: a k8s-openapi type or a kube
    /// `#[derive(CustomResource)]` type.
    type Resource: Resource<DynamicType = ()> + serde::de::DeserializeOwned + serde::Serialize + Clone;

    /// Called for a validating webhook.
    fn validate(&self, request: &Request<Self::Resource>) -> Verdict {
        let _ = request;
        Verdict::allow()
    }

    /// Called for a mutating webhook with the object to store (on create
    /// and update); change it in place. The host sends the API server the
    /// JSON Patch from the object it got to the one left here.
    fn mutate(&self, request: &Request<Self::Resource>, object: &mut Self::Resource) -> Verdict {
        let _ = (request, object);
        Verdict::allow()
    }

    /// Called for a mutating webhook on a request without an object (a
    /// delete): nothing to change, only allow or deny.
    fn mutate_without_object(&self, request: &Request<Self::Resource>) -> Verdict {
        let _ = request;
        Verdict::allow()
    }

    /// Called, by validating and mutating webhooks alike, instead of the
    /// methods above when the object to store does not decode as
    /// [`Resource`](Self::Resource) (`request.object` is `None`; `object`
    /// holds it raw). The default denies with 400 and serde's message,
    /// prefixed `object does not match the webhook's type: `. Nothing
    /// can be changed here: a mutating webhook's answer carries no patch.
    ///
    /// An old object that does not decode never lands here: see
    /// [`Request::undecodable_old_object`].
    fn undecodable(&self, request: &Request<Self::Resource>, object: &Undecodable) -> Verdict {
        let _ = request;
        Verdict::deny(format!("object does not match the webhook's type: {}", object.error)).code(400)
    }
}

/// `bytes` decoded as `K`, or raw with the reason when they do not decode.
fn typed<K: serde::de::DeserializeOwned>(bytes: Option<&[u8]>) -> (Option<K>, Option<Undecodable>) {
    let Some(bytes) = bytes else { return (None, None) };
    match serde_json::from_slice(bytes) {
        Ok(k) => (Some(k), None),
        Err(e) => {
            // The host sends the API server's JSON; anything else is kept
            // as a string so that the handler still sees what came.
            let raw = serde_json::from_slice(bytes)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(bytes).into_owned()));
            (None, Some(Undecodable { raw, error: e.to_string() }))
        }
    }
}

/// Answers one request through `A` (used by [`export!`](crate::export)).
///
/// An old object that does not decode goes to the handler raw
/// ([`Request::undecodable_old_object`]); an object to store that does not
/// decode goes to [`Admission::undecodable`].
pub(crate) fn review<A: Admission>(request: wit::AdmissionRequest) -> wit::AdmissionResponse {
    let (object, undecodable_object) = typed(request.object.as_deref());
    let (old_object, undecodable_old_object) = typed(request.old_object.as_deref());
    let request_kind = kube::core::GroupVersionKind {
        group: request.request_kind.group,
        version: request.request_kind.version,
        kind: request.request_kind.kind,
    };
    let typed_request = Request {
        webhook: request.webhook,
        request_kind,
        operation: request.operation.into(),
        name: request.name,
        namespace: request.namespace,
        sub_resource: request.sub_resource,
        object,
        old_object,
        undecodable_old_object,
        user_info: UserInfo {
            username: request.user_info.username,
            uid: request.user_info.uid,
            groups: request.user_info.groups,
        },
        dry_run: request.dry_run,
    };
    let admission = A::default();
    if let Some(undecodable) = &undecodable_object {
        return admission.undecodable(&typed_request, undecodable).into_wit(None);
    }
    match request.webhook_type {
        wit::WebhookType::Validating => admission.validate(&typed_request).into_wit(None),
        wit::WebhookType::Mutating => {
            let Some(mut object) = typed_request.object.clone() else {
                return admission.mutate_without_object(&typed_request).into_wit(None);
            };
            let verdict = admission.mutate(&typed_request, &mut object);
            let patched = serde_json::to_vec(&object).expect("a resource serializes to JSON");
            verdict.into_wit(Some(patched))
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde::{Deserialize, Serialize};
    use serde_json::{Value, json};

    use super::*;

    /// A kind whose `spec.size` became required after objects were stored
    /// without it.
    #[derive(Clone, Debug, Deserialize, Serialize)]
    struct Sized {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        spec: SizedSpec,
    }

    #[derive(Clone, Debug, Deserialize, Serialize)]
    struct SizedSpec {
        size: u32,
    }

    impl Resource for Sized {
        type DynamicType = ();
        type Scope = kube::core::NamespaceResourceScope;

        fn kind(_: &()) -> std::borrow::Cow<'_, str> {
            "Sized".into()
        }
        fn group(_: &()) -> std::borrow::Cow<'_, str> {
            "example.com".into()
        }
        fn version(_: &()) -> std::borrow::Cow<'_, str> {
            "v1".into()
        }
        fn plural(_: &()) -> std::borrow::Cow<'_, str> {
            "sizeds".into()
        }
        fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            &self.metadata
        }
        fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            &mut self.metadata
        }
    }

    /// Denies sizes above 10 and growing; defaults nothing; says what it
    /// saw of an undecodable old object in a warning.
    #[derive(Default)]
    struct Strict;

    impl Admission for Strict {
        type Resource = Sized;

        fn validate(&self, request: &Request<Sized>) -> Verdict {
            let Some(new) = &request.object else { return Verdict::allow() };
            if new.spec.size > 10 {
                return Verdict::deny("too big").code(422);
            }
            match (&request.old_object, &request.undecodable_old_object) {
                (Some(old), _) if old.spec.size < new.spec.size => Verdict::deny("cannot grow"),
                (None, Some(raw)) => Verdict::allow().warn(format!("old message {}", raw.raw["spec"]["message"])),
                _ => Verdict::allow(),
            }
        }
    }

    fn request(
        webhook_type: wit::WebhookType,
        operation: wit::Operation,
        object: Option<Value>,
        old: Option<Value>,
    ) -> wit::AdmissionRequest {
        wit::AdmissionRequest {
            webhook: "validate.sizeds.example.com".into(),
            webhook_type,
            uid: "u".into(),
            kind: wit::GroupVersionKind { group: "example.com".into(), version: "v1".into(), kind: "Sized".into() },
            request_kind: wit::GroupVersionKind {
                group: "example.com".into(),
                version: "v1beta1".into(),
                kind: "Sized".into(),
            },
            sub_resource: None,
            name: "s".into(),
            namespace: Some("default".into()),
            operation,
            object: object.map(|o| serde_json::to_vec(&o).expect("json")),
            old_object: old.map(|o| serde_json::to_vec(&o).expect("json")),
            user_info: wit::UserInfo { username: "someone".into(), uid: String::new(), groups: Vec::new() },
            dry_run: false,
        }
    }

    fn sized(size: Option<u32>) -> Value {
        let mut spec = json!({"message": "hi"});
        if let Some(size) = size {
            spec["size"] = json!(size);
        }
        json!({"apiVersion": "example.com/v1", "kind": "Sized", "metadata": {"name": "s"}, "spec": spec})
    }

    #[test]
    fn a_delete_of_an_old_object_that_does_not_decode_is_allowed() {
        for webhook_type in [wit::WebhookType::Validating, wit::WebhookType::Mutating] {
            let answer = review::<Strict>(request(webhook_type, wit::Operation::Delete, None, Some(sized(None))));
            assert!(answer.allowed, "{webhook_type:?}: {:?}", answer.message);
            assert_eq!(answer.patched, None);
        }
    }

    #[test]
    fn an_update_from_an_undecodable_old_object_reaches_the_handler_with_it_raw() {
        let valid =
            request(wit::WebhookType::Validating, wit::Operation::Update, Some(sized(Some(3))), Some(sized(None)));
        let answer = review::<Strict>(valid);
        assert!(answer.allowed, "{:?}", answer.message);
        assert_eq!(answer.warnings, ["old message \"hi\""]);
        // The typed new object is still checked.
        let big =
            request(wit::WebhookType::Validating, wit::Operation::Update, Some(sized(Some(11))), Some(sized(None)));
        let answer = review::<Strict>(big);
        assert!(!answer.allowed);
        assert_eq!((answer.message.as_deref(), answer.code), (Some("too big"), Some(422)));
    }

    #[test]
    fn a_mutation_from_an_undecodable_old_object_patches_the_new_one() {
        let update =
            request(wit::WebhookType::Mutating, wit::Operation::Update, Some(sized(Some(3))), Some(sized(None)));
        let answer = review::<Strict>(update);
        assert!(answer.allowed, "{:?}", answer.message);
        let patched: Value = serde_json::from_slice(&answer.patched.expect("a mutating answer")).expect("json");
        assert_eq!(patched["spec"]["size"], json!(3));
    }

    #[test]
    fn an_object_to_store_that_does_not_decode_is_refused_naming_the_error() {
        for operation in [wit::Operation::Create, wit::Operation::Update] {
            let old = (operation == wit::Operation::Update).then(|| sized(Some(1)));
            let answer = review::<Strict>(request(wit::WebhookType::Mutating, operation, Some(sized(None)), old));
            assert!(!answer.allowed);
            assert_eq!(answer.code, Some(400));
            assert_eq!(answer.patched, None);
            let message = answer.message.expect("a message");
            assert!(message.starts_with("object does not match the webhook's type: missing field `size`"), "{message}");
        }
    }

    /// Says in a warning which kind the user's request was made in.
    #[derive(Default)]
    struct Echo;

    impl Admission for Echo {
        type Resource = Sized;

        fn validate(&self, request: &Request<Sized>) -> Verdict {
            let k = &request.request_kind;
            Verdict::allow().warn(format!("{}/{} {}", k.group, k.version, k.kind))
        }
    }

    #[test]
    fn the_handler_sees_the_kind_of_the_users_request() {
        let answer =
            review::<Echo>(request(wit::WebhookType::Validating, wit::Operation::Create, Some(sized(Some(1))), None));
        assert_eq!(answer.warnings, ["example.com/v1beta1 Sized"]);
    }

    /// Lets an undecodable object through, for the one change it knows.
    #[derive(Default)]
    struct Lenient;

    impl Admission for Lenient {
        type Resource = ConfigMap;

        fn undecodable(&self, request: &Request<ConfigMap>, object: &Undecodable) -> Verdict {
            assert!(request.object.is_none());
            if object.raw["data"]["legacy"] == json!(true) {
                Verdict::allow()
            } else {
                Verdict::deny(object.error.clone())
            }
        }
    }

    #[test]
    fn an_author_may_answer_for_an_object_to_store_that_does_not_decode() {
        let legacy =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"legacy": true}});
        let answer =
            review::<Lenient>(request(wit::WebhookType::Validating, wit::Operation::Create, Some(legacy), None));
        assert!(answer.allowed, "{:?}", answer.message);
    }
}
