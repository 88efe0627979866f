//! The roles a component serves beyond reconcile (contract 0.3.0):
//! admission webhooks, conversion of CRD versions, a scheduler. Parsed from
//! the WIT record and validated like the rest of the manifest; a rejection
//! names the field.

use std::time::Duration;

use serde_json::Value;

use super::{Error, MAX_ENTRIES, check_len, is_dns1123_subdomain, kind_of};
use crate::bindings::capstan::operator::types as wit;
use crate::object::Gvk;

/// Most admission webhooks one component serves.
pub const MAX_WEBHOOKS: usize = 16;
/// Longest webhook timeout the API server accepts, in seconds.
pub const MAX_WEBHOOK_TIMEOUT_SECONDS: u32 = 30;
/// The API server's default webhook timeout, in seconds.
pub const DEFAULT_WEBHOOK_TIMEOUT_SECONDS: u32 = 10;
/// Most bytes of one selector's JSON.
pub const MAX_SELECTOR_BYTES: usize = 16 << 10;

/// What a component serves.
#[derive(Clone, Debug, PartialEq)]
pub struct Roles {
    /// The host runs a reconcile loop for the primary kind.
    pub reconcile: bool,
    /// Admission webhooks.
    pub admission: Vec<AdmissionWebhook>,
    /// CRDs (group and kind) whose versions the component converts.
    pub conversion: Vec<GroupKind>,
    /// The scheduler name, if the component schedules Pods.
    pub scheduler: Option<String>,
}

impl Roles {
    /// A controller only: what every component built before 0.3.0 serves.
    pub fn reconcile_only() -> Self {
        Self { reconcile: true, admission: Vec::new(), conversion: Vec::new(), scheduler: None }
    }

    /// The roles' names, for logs and `inspect`, e.g. `reconcile, admission`.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.reconcile {
            names.push("reconcile");
        }
        if !self.admission.is_empty() {
            names.push("admission");
        }
        if !self.conversion.is_empty() {
            names.push("conversion");
        }
        if self.scheduler.is_some() {
            names.push("scheduler");
        }
        names
    }
}

/// An API group and kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKind {
    /// Group; empty for the core group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

/// An admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

impl Operation {
    /// The API server's spelling, e.g. `CREATE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// The operation the API server names, if any.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "CREATE" => Operation::Create,
            "UPDATE" => Operation::Update,
            "DELETE" => Operation::Delete,
            "CONNECT" => Operation::Connect,
            _ => return None,
        })
    }
}

impl From<wit::Operation> for Operation {
    fn from(o: wit::Operation) -> Self {
        match o {
            wit::Operation::Create => Operation::Create,
            wit::Operation::Update => Operation::Update,
            wit::Operation::Delete => Operation::Delete,
            wit::Operation::Connect => Operation::Connect,
        }
    }
}

impl From<Operation> for wit::Operation {
    fn from(o: Operation) -> Self {
        match o {
            Operation::Create => wit::Operation::Create,
            Operation::Update => wit::Operation::Update,
            Operation::Delete => wit::Operation::Delete,
            Operation::Connect => wit::Operation::Connect,
        }
    }
}

/// A validated admission webhook declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionWebhook {
    /// Fully qualified name, unique in the cluster.
    pub name: String,
    /// Mutating (may change objects) or validating.
    pub mutating: bool,
    /// Kinds it is called for.
    pub kinds: Vec<Gvk>,
    /// Operations it is called for, sorted, without duplicates.
    pub operations: Vec<Operation>,
    /// `true`: the API server lets the request through when the webhook
    /// fails (`Ignore`); `false`: it rejects it (`Fail`).
    pub ignore_failures: bool,
    /// How long the API server waits.
    pub timeout: Duration,
    /// `NoneOnDryRun` rather than `None`.
    pub side_effects_on_dry_run: bool,
    /// `namespaceSelector`, a `metav1.LabelSelector`.
    pub namespace_selector: Option<Value>,
    /// `objectSelector`, a `metav1.LabelSelector`.
    pub object_selector: Option<Value>,
}

impl AdmissionWebhook {
    /// The guest's deadline for one call: below the API server's timeout,
    /// leaving room for the round trip, and never above `limit` (the
    /// host's deadline for any invocation).
    pub fn deadline(&self, limit: Duration) -> Duration {
        let below = self.timeout.saturating_sub(Duration::from_millis(500)).max(Duration::from_millis(250));
        below.min(limit)
    }

    /// The `failurePolicy` value.
    pub fn failure_policy(&self) -> &'static str {
        if self.ignore_failures { "Ignore" } else { "Fail" }
    }

    /// The `sideEffects` value.
    pub fn side_effects(&self) -> &'static str {
        if self.side_effects_on_dry_run { "NoneOnDryRun" } else { "None" }
    }
}

/// True if `s` is a fully qualified DNS name of at least three labels, as
/// the API server requires of webhook names.
pub fn is_webhook_name(s: &str) -> bool {
    is_dns1123_subdomain(s) && s.split('.').count() >= 3
}

fn selector(field: &'static str, index: usize, bytes: Option<Vec<u8>>) -> Result<Option<Value>, Error> {
    let Some(bytes) = bytes else { return Ok(None) };
    let bad = |reason: String| Error::Role { field: format!("roles.admission[{index}].{field}"), reason };
    if bytes.len() > MAX_SELECTOR_BYTES {
        return Err(bad(format!("{} bytes, more than {MAX_SELECTOR_BYTES}", bytes.len())));
    }
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>(value.clone())
        .map_err(|e| bad(format!("not a label selector: {e}")))?;
    Ok(Some(value))
}

fn webhook(index: usize, w: wit::AdmissionWebhook) -> Result<AdmissionWebhook, Error> {
    let bad = |field: &str, reason: String| Error::Role { field: format!("roles.admission[{index}].{field}"), reason };
    if !is_webhook_name(&w.name) {
        return Err(bad("name", format!("{:?} must be a fully qualified name like validate.example.com", w.name)));
    }
    if w.kinds.is_empty() {
        return Err(bad("kinds", "lists no kind".into()));
    }
    check_len("roles.admission[].kinds", w.kinds.len(), MAX_ENTRIES, "1..=64")?;
    let kinds = w.kinds.into_iter().map(|k| kind_of("roles.admission[].kinds", k)).collect::<Result<_, _>>()?;
    if w.operations.is_empty() {
        return Err(bad("operations", "lists no operation".into()));
    }
    let mut operations: Vec<Operation> = w.operations.into_iter().map(Operation::from).collect();
    operations.sort();
    operations.dedup();
    let timeout = match w.timeout_seconds {
        0 => DEFAULT_WEBHOOK_TIMEOUT_SECONDS,
        t if t > MAX_WEBHOOK_TIMEOUT_SECONDS => {
            return Err(Error::Range { field: "roles.admission[].timeout-seconds", value: t.into(), range: "0..=30" });
        }
        t => t,
    };
    Ok(AdmissionWebhook {
        name: w.name,
        mutating: matches!(w.webhook_type, wit::WebhookType::Mutating),
        kinds,
        operations,
        ignore_failures: matches!(w.failure_policy, wit::FailurePolicy::Ignore),
        timeout: Duration::from_secs(timeout.into()),
        side_effects_on_dry_run: matches!(w.side_effects, wit::SideEffects::NoneOnDryRun),
        namespace_selector: selector("namespace-selector", index, w.namespace_selector)?,
        object_selector: selector("object-selector", index, w.object_selector)?,
    })
}

/// Validates the roles record against the rest of the manifest: converted
/// kinds must be CRDs the manifest defines, with more than one version.
pub(super) fn roles_of(r: wit::Roles, crds: &[Value]) -> Result<Roles, Error> {
    check_len("roles.admission", r.admission.len(), MAX_WEBHOOKS, "0..=16")?;
    check_len("roles.conversion", r.conversion.len(), super::MAX_CRDS, "0..=32")?;
    let admission: Vec<AdmissionWebhook> =
        r.admission.into_iter().enumerate().map(|(i, w)| webhook(i, w)).collect::<Result<_, _>>()?;
    for (i, w) in admission.iter().enumerate() {
        if admission[..i].iter().any(|o| o.name == w.name) {
            return Err(Error::Role {
                field: format!("roles.admission[{i}].name"),
                reason: format!("{:?} is declared twice", w.name),
            });
        }
    }
    let mut conversion = Vec::new();
    for (i, gk) in r.conversion.into_iter().enumerate() {
        let bad = |reason: String| Error::Role { field: format!("roles.conversion[{i}]"), reason };
        let crd = crds.iter().find(|c| {
            c.pointer("/spec/group").and_then(Value::as_str) == Some(gk.group.as_str())
                && c.pointer("/spec/names/kind").and_then(Value::as_str) == Some(gk.kind.as_str())
        });
        let Some(crd) = crd else {
            return Err(bad(format!("{}/{} is not a CRD this component defines", gk.group, gk.kind)));
        };
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array).map_or(0, Vec::len);
        if versions < 2 {
            return Err(bad(format!("{}/{} has one version; conversion needs two or more", gk.group, gk.kind)));
        }
        conversion.push(GroupKind { group: gk.group, kind: gk.kind });
    }
    let scheduler = match r.scheduler {
        None => None,
        Some(s) if !is_dns1123_subdomain(&s.name) || s.name.is_empty() => {
            return Err(Error::Role {
                field: "roles.scheduler.name".into(),
                reason: format!("{:?} is not a DNS-1123 subdomain", s.name),
            });
        }
        Some(s) if s.name == "default-scheduler" => {
            return Err(Error::Role {
                field: "roles.scheduler.name".into(),
                reason: "default-scheduler belongs to kube-scheduler".into(),
            });
        }
        Some(s) => Some(s.name),
    };
    let roles = Roles { reconcile: r.reconcile, admission, conversion, scheduler };
    if roles.names().is_empty() {
        return Err(Error::Role { field: "roles".into(), reason: "serves no role".into() });
    }
    Ok(roles)
}
