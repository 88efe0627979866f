//! The roles a component serves beyond reconcile (contract 0.3.0):
//! admission webhooks, conversion of CRD versions, a scheduler. Parsed from
//! the WIT record and validated like the rest of the manifest; a rejection
//! names the field.

use std::time::Duration;

use serde_json::Value;

use super::{Error, MAX_ENTRIES, check_len, is_dns1123_subdomain, kind_of};
use crate::object::Gvk;
use crate::runtime::bindings::capstan::operator::types as wit;

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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::manifest::Manifest;

    fn gvk(group: &str, version: &str, kind: &str) -> wit::GroupVersionKind {
        wit::GroupVersionKind { group: group.into(), version: version.into(), kind: kind.into() }
    }

    fn controller(crds: Vec<Vec<u8>>) -> wit::ControllerManifest {
        wit::ControllerManifest {
            name: "greeter".into(),
            primary: gvk("examples.capstan.dev", "v1alpha1", "Greeting"),
            crds,
            owns: vec![],
            watches: vec![],
            finalizer: None,
            permissions: vec![],
            resync_seconds: None,
            max_concurrency: 1,
        }
    }

    fn webhook(name: &str) -> wit::AdmissionWebhook {
        wit::AdmissionWebhook {
            name: name.into(),
            webhook_type: wit::WebhookType::Validating,
            kinds: vec![gvk("examples.capstan.dev", "v1alpha1", "Greeting")],
            operations: vec![wit::Operation::Update, wit::Operation::Create, wit::Operation::Create],
            failure_policy: wit::FailurePolicy::Fail,
            timeout_seconds: 0,
            side_effects: wit::SideEffects::None,
            namespace_selector: None,
            object_selector: None,
        }
    }

    fn roles() -> wit::Roles {
        wit::Roles { reconcile: false, admission: vec![], conversion: vec![], scheduler: None }
    }

    fn parse(crds: Vec<Vec<u8>>, roles: wit::Roles) -> Result<Manifest, Error> {
        Manifest::try_from(wit::ComponentManifest {
            controller: controller(crds),
            roles,
            egress: vec![],
            clusters: vec![],
            fleet: None,
        })
    }

    fn crd(versions: &[&str]) -> Vec<u8> {
        let versions: Vec<_> =
            versions.iter().map(|v| json!({"name": v, "served": true, "storage": *v == "v1"})).collect();
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "greetings.examples.capstan.dev"},
            "spec": {"group": "examples.capstan.dev", "names": {"plural": "greetings", "kind": "Greeting"},
                     "scope": "Namespaced", "versions": versions},
        }))
        .expect("JSON")
    }

    fn field_of(e: Result<Manifest, Error>) -> String {
        match e {
            Err(Error::Role { field, .. }) => field,
            Err(Error::Range { field, .. }) => field.to_owned(),
            other => panic!("expected a role error, got {other:?}"),
        }
    }

    #[test]
    fn a_webhook_is_validated_and_defaulted() {
        let m = parse(
            vec![crd(&["v1alpha1"])],
            wit::Roles { admission: vec![webhook("validate.greetings.example.com")], ..roles() },
        )
        .expect("valid");
        let w = &m.roles.admission[0];
        assert_eq!(w.operations, vec![Operation::Create, Operation::Update], "sorted, without duplicates");
        assert_eq!(w.timeout, Duration::from_secs(10));
        assert_eq!(w.failure_policy(), "Fail");
        assert_eq!(w.deadline(Duration::from_secs(5)), Duration::from_secs(5), "never above the host's");
        assert_eq!(w.deadline(Duration::from_secs(30)), Duration::from_millis(9500), "below the API server's");
        assert_eq!(m.roles.names(), vec!["admission"]);
    }

    #[test]
    fn a_webhook_declared_wrongly_is_refused_naming_the_field() {
        let bad = |w: wit::AdmissionWebhook| field_of(parse(vec![], wit::Roles { admission: vec![w], ..roles() }));
        assert_eq!(bad(webhook("validate")), "roles.admission[0].name", "needs three labels");
        assert_eq!(bad(webhook("Validate.Greetings.example.com")), "roles.admission[0].name");
        assert_eq!(bad(wit::AdmissionWebhook { kinds: vec![], ..webhook("a.b.c") }), "roles.admission[0].kinds");
        assert_eq!(
            bad(wit::AdmissionWebhook { operations: vec![], ..webhook("a.b.c") }),
            "roles.admission[0].operations"
        );
        assert_eq!(
            bad(wit::AdmissionWebhook { timeout_seconds: 31, ..webhook("a.b.c") }),
            "roles.admission[].timeout-seconds"
        );
        let selector = Some(br#"{"matchLabels": "nope"}"#.to_vec());
        assert_eq!(
            bad(wit::AdmissionWebhook { object_selector: selector, ..webhook("a.b.c") }),
            "roles.admission[0].object-selector"
        );
        let twice = wit::Roles { admission: vec![webhook("a.b.c"), webhook("a.b.c")], ..roles() };
        assert_eq!(field_of(parse(vec![], twice)), "roles.admission[1].name");
    }

    #[test]
    fn conversion_needs_a_crd_of_the_component_with_two_versions() {
        let converts = wit::Roles {
            conversion: vec![wit::GroupKind { group: "examples.capstan.dev".into(), kind: "Greeting".into() }],
            ..roles()
        };
        assert_eq!(field_of(parse(vec![], converts.clone())), "roles.conversion[0]", "no such CRD");
        assert_eq!(field_of(parse(vec![crd(&["v1"])], converts.clone())), "roles.conversion[0]", "one version");
        let m = parse(vec![crd(&["v1alpha1", "v1"])], converts).expect("valid");
        assert_eq!(m.roles.conversion[0].kind, "Greeting");
    }

    #[test]
    fn a_scheduler_name_is_a_dns_subdomain_and_not_the_default() {
        let named =
            |name: &str| wit::Roles { scheduler: Some(wit::SchedulerManifest { name: name.into() }), ..roles() };
        assert_eq!(parse(vec![], named("zone-spread")).expect("valid").roles.scheduler.as_deref(), Some("zone-spread"));
        assert_eq!(field_of(parse(vec![], named("default-scheduler"))), "roles.scheduler.name");
        assert_eq!(field_of(parse(vec![], named("Zone Spread"))), "roles.scheduler.name");
        assert_eq!(field_of(parse(vec![], named(""))), "roles.scheduler.name");
    }

    #[test]
    fn a_component_that_serves_nothing_is_refused() {
        assert_eq!(field_of(parse(vec![], roles())), "roles");
        let reconcile = wit::Roles { reconcile: true, ..roles() };
        assert_eq!(parse(vec![], reconcile).expect("valid").roles, Roles::reconcile_only());
    }

    #[test]
    fn admission_needs_the_grants_of_what_it_sees_and_changes() {
        let secret = gvk("", "v1", "Secret");
        let on_secrets = |mutating: bool| wit::AdmissionWebhook {
            kinds: vec![secret.clone()],
            webhook_type: if mutating { wit::WebhookType::Mutating } else { wit::WebhookType::Validating },
            ..webhook("secrets.example.com")
        };
        let with = |controller: wit::ControllerManifest, mutating: bool| {
            Manifest::try_from(wit::ComponentManifest {
                controller,
                roles: wit::Roles { admission: vec![on_secrets(mutating)], ..roles() },
                egress: vec![],
                clusters: vec![],
                fleet: None,
            })
        };
        // No grant on Secrets: seeing them through admission is refused.
        let err = with(controller(vec![]), false).expect_err("reads Secrets without a grant");
        assert!(err.to_string().contains("grants no read of it"), "{err}");
        // Watching them grants the read a validating webhook needs, not
        // the write a mutating one needs.
        let watching = wit::ControllerManifest {
            watches: vec![wit::Watch { kind: secret.clone(), mapping: wit::WatchMapping::None, label_selector: None }],
            ..controller(vec![])
        };
        with(watching.clone(), false).expect("a validating webhook on a watched kind");
        let err = with(watching, true).expect_err("changes Secrets without a grant");
        assert!(err.to_string().contains("grants no write of it"), "{err}");
        // A permission with get and patch everywhere grants both.
        let patching = |scope: wit::Scope, resource_names: Vec<String>| wit::ControllerManifest {
            permissions: vec![wit::Permission {
                group: String::new(),
                kind: "Secret".into(),
                verbs: vec![wit::Verb::Get, wit::Verb::Patch],
                scope,
                status: false,
                resource_names,
            }],
            ..controller(vec![])
        };
        with(patching(wit::Scope::Cluster, vec![]), true).expect("a mutating webhook with get and patch");
        // One limited to some names or namespaces does not: the webhook
        // would see (and change) every Secret the host serves.
        for (narrow, what) in [
            (patching(wit::Scope::OwnNamespace, vec![]), "in the reconciled object's namespace"),
            (patching(wit::Scope::Namespaces(vec!["team-a".into()]), vec![]), "in the namespaces [\"team-a\"]"),
            (patching(wit::Scope::Cluster, vec!["one".into()]), "on the names [\"one\"]"),
        ] {
            for mutating in [false, true] {
                let err = with(narrow.clone(), mutating).expect_err("a narrow permission does not grant a webhook");
                assert!(err.to_string().contains(&format!("grants it only {what}")), "{err}");
            }
        }
        // The primary kind it reconciles, and a kind whose CRD it defines,
        // are the component's own.
        let reconciling =
            wit::Roles { reconcile: true, admission: vec![webhook("v.greetings.example.com")], ..roles() };
        parse(vec![], reconciling).expect("a webhook on the reconciled primary kind");
        let defining = wit::Roles { admission: vec![webhook("v.greetings.example.com")], ..roles() };
        parse(vec![crd(&["v1alpha1"])], defining.clone()).expect("a webhook on its own CRD's kind");
        // The primary kind of a component that does not reconcile is what
        // the SDK filled in (a webhook-only component's first webhook
        // kind): it grants nothing.
        let err = parse(vec![], defining).expect_err("a webhook-only component on a kind it was granted nothing on");
        assert!(err.to_string().contains("grants no read of it"), "{err}");
        for primary in [secret.clone(), gvk("", "v1", "Pod")] {
            let only_webhooks = wit::ComponentManifest {
                controller: wit::ControllerManifest { primary: primary.clone(), ..controller(vec![]) },
                roles: wit::Roles {
                    admission: vec![wit::AdmissionWebhook { kinds: vec![primary], ..on_secrets(true) }],
                    ..roles()
                },
                egress: vec![],
                clusters: vec![],
                fleet: None,
            };
            let err = Manifest::try_from(only_webhooks).expect_err("mutating its unreconciled primary kind");
            assert!(err.to_string().contains("grants no read of it"), "{err}");
        }
        // Leases: never.
        let lease = wit::AdmissionWebhook {
            kinds: vec![gvk("coordination.k8s.io", "v1", "Lease")],
            ..webhook("l.example.com")
        };
        let err = parse(vec![], wit::Roles { admission: vec![lease], ..roles() }).expect_err("Leases");
        assert!(err.to_string().contains("Leases cannot be reviewed"), "{err}");
    }
}
