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
    /// The operation.
    pub operation: Operation,
    /// The object's name (empty on a create with `generateName`).
    pub name: String,
    /// The object's namespace.
    pub namespace: Option<String>,
    /// The subresource, if any.
    pub sub_resource: Option<String>,
    /// The object as it would be stored; `None` on delete.
    pub object: Option<K>,
    /// The object as it is stored; `None` on create.
    pub old_object: Option<K>,
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
}

fn typed<K: serde::de::DeserializeOwned>(bytes: Option<&[u8]>) -> Result<Option<K>, String> {
    bytes
        .map(|b| serde_json::from_slice(b).map_err(|e| format!("object does not match the webhook's type: {e}")))
        .transpose()
}

/// Answers one request through `A` (used by [`export!`](crate::export)).
pub(crate) fn review<A: Admission>(request: wit::AdmissionRequest) -> wit::AdmissionResponse {
    let decode = || -> Result<Request<A::Resource>, String> {
        Ok(Request {
            webhook: request.webhook.clone(),
            operation: request.operation.into(),
            name: request.name.clone(),
            namespace: request.namespace.clone(),
            sub_resource: request.sub_resource.clone(),
            object: typed(request.object.as_deref())?,
            old_object: typed(request.old_object.as_deref())?,
            user_info: UserInfo {
                username: request.user_info.username.clone(),
                uid: request.user_info.uid.clone(),
                groups: request.user_info.groups.clone(),
            },
            dry_run: request.dry_run,
        })
    };
    let typed_request = match decode() {
        Ok(r) => r,
        Err(message) => return Verdict::deny(message).code(400).into_wit(None),
    };
    let admission = A::default();
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
