//! `capstan:operator@0.3.0`: one component, several roles, no HTTP, one
//! cluster. Its types have the shape of the current ones but for five
//! records (`component-manifest` has no `egress`, `clusters` or `fleet`,
//! `admission-request` no `request-kind`, `reconcile-request` no `cluster`
//! or `members`, `schedule-request` no `cluster`, `outcome` no
//! `member-children`), so they are generated apart and converted at the
//! boundary by the `From` impls below: requests down (the new fields
//! dropped), everything a guest returns up (a manifest with `egress` empty
//! that runs in every cluster, an outcome with no member children).

wasmtime::component::bindgen!({
    path: "../wit/v0.3.0",
    world: "operator",
    imports: { default: async },
    exports: { default: async },
});

use super::capstan::operator::types as current;
use capstan::operator::types as old;

/// A value of one version turned into its twin of the other: the same
/// shape, field by field. Lets the macros below convert `list<…>` and
/// `option<…>` fields, which `From` cannot.
trait Twin<T> {
    fn twin(self) -> T;
}

macro_rules! identity {
    ($($t:ty),*) => {
        $(impl Twin<$t> for $t {
            fn twin(self) -> $t {
                self
            }
        })*
    };
}

identity!(String, bool, u8, u16, u32, u64, i64);

impl<A: Twin<B>, B> Twin<Vec<B>> for Vec<A> {
    fn twin(self) -> Vec<B> {
        self.into_iter().map(Twin::twin).collect()
    }
}

impl<A: Twin<B>, B> Twin<Option<B>> for Option<A> {
    fn twin(self) -> Option<B> {
        self.map(Twin::twin)
    }
}

/// `From` both ways, and [`Twin`] both ways, for records of the same
/// fields in both versions.
macro_rules! records {
    ($($name:ident { $($field:ident),* $(,)? })*) => {
        $(
            impl Twin<current::$name> for old::$name {
                fn twin(self) -> current::$name {
                    current::$name { $($field: self.$field.twin()),* }
                }
            }
            impl Twin<old::$name> for current::$name {
                fn twin(self) -> old::$name {
                    old::$name { $($field: self.$field.twin()),* }
                }
            }
            impl From<old::$name> for current::$name {
                fn from(x: old::$name) -> Self {
                    x.twin()
                }
            }
            impl From<current::$name> for old::$name {
                fn from(x: current::$name) -> Self {
                    x.twin()
                }
            }
        )*
    };
}

/// As [`records`], for enums and variants of the same cases; a case with
/// a payload names a binding for it: `Label(l)`.
macro_rules! variants {
    ($($name:ident { $($case:ident $(($payload:ident))?),* $(,)? })*) => {
        $(
            impl Twin<current::$name> for old::$name {
                fn twin(self) -> current::$name {
                    match self {
                        $(old::$name::$case $(($payload))? => current::$name::$case $(($payload.twin()))?),*
                    }
                }
            }
            impl Twin<old::$name> for current::$name {
                fn twin(self) -> old::$name {
                    match self {
                        $(current::$name::$case $(($payload))? => old::$name::$case $(($payload.twin()))?),*
                    }
                }
            }
            impl From<old::$name> for current::$name {
                fn from(x: old::$name) -> Self {
                    x.twin()
                }
            }
            impl From<current::$name> for old::$name {
                fn from(x: current::$name) -> Self {
                    x.twin()
                }
            }
        )*
    };
}

records! {
    GroupVersionKind { group, version, kind }
    ObjectRef { kind, namespace, name }
    Permission { group, kind, verbs, scope, status, resource_names }
    Reference { name, namespace }
    Watch { kind, mapping, label_selector }
    Owned { kind, label_selector, scope }
    ControllerManifest {
        name, primary, crds, owns, watches, finalizer, permissions, resync_seconds, max_concurrency,
    }
    Roles { reconcile, admission, conversion, scheduler }
    GroupKind { group, kind }
    AdmissionWebhook {
        name, webhook_type, kinds, operations, failure_policy, timeout_seconds, side_effects,
        namespace_selector, object_selector,
    }
    UserInfo { username, uid, groups }
    AdmissionResponse { allowed, message, code, warnings, patched }
    ConversionRequest { desired_api_version, objects }
    ResourceAmount { name, milli }
    NodeInfo { name, node, allocatable, requested, pods }
    Unschedulable { reasons }
    SchedulerManifest { name }
    Event { event_type, reason, action, note, regarding }
    Failure { kind, message, status, events }
}

variants! {
    EventKind { Added, Modified, Deleted, Resync }
    Verb { Get, List, Watch, Create, Update, Patch, Delete, Bind, Escalate }
    Scope { Cluster, OwnNamespace, Namespaces(n) }
    FieldRef { Name, Namespace, Label(l), Annotation(a) }
    WatchMapping { None, Label(l), SameName, Namespace, Reference(r), All }
    WebhookType { Validating, Mutating }
    Operation { Create, Update, Delete, Connect }
    FailurePolicy { Fail, Ignore }
    SideEffects { None, NoneOnDryRun }
    EventType { Normal, Warning }
    ChildrenPolicy { Prune, Keep }
    FailureKind { Transient, Terminal }
}

/// A 0.3.0 component calls no origin (its `egress` is empty) and is a
/// uniform controller of every cluster.
impl From<old::ComponentManifest> for current::ComponentManifest {
    fn from(m: old::ComponentManifest) -> Self {
        Self {
            controller: m.controller.into(),
            roles: m.roles.into(),
            egress: Vec::new(),
            clusters: Vec::new(),
            fleet: None,
        }
    }
}

/// A 0.3.0 component does not see the cluster's name or members.
impl From<current::ReconcileRequest> for old::ReconcileRequest {
    fn from(r: current::ReconcileRequest) -> Self {
        Self { event: r.event.into(), object: r.object, failed_children: r.failed_children.twin() }
    }
}

/// A 0.3.0 component hears of refused children in its own cluster only:
/// it places none elsewhere.
impl Twin<old::ChildFailure> for current::ChildFailure {
    fn twin(self) -> old::ChildFailure {
        old::ChildFailure { child: self.child.into(), code: self.code, reason: self.reason, message: self.message }
    }
}

/// A 0.3.0 outcome places no children in other clusters.
impl From<old::Outcome> for current::Outcome {
    fn from(o: old::Outcome) -> Self {
        Self {
            children: o.children,
            status: o.status,
            events: o.events.twin(),
            requeue_after_ms: o.requeue_after_ms,
            children_policy: o.children_policy.into(),
            member_children: Vec::new(),
        }
    }
}

/// A 0.3.0 webhook sees the kind it asked for only, not `request-kind`.
impl From<current::AdmissionRequest> for old::AdmissionRequest {
    fn from(r: current::AdmissionRequest) -> Self {
        Self {
            webhook: r.webhook,
            webhook_type: r.webhook_type.into(),
            uid: r.uid,
            kind: r.kind.into(),
            sub_resource: r.sub_resource,
            name: r.name,
            namespace: r.namespace,
            operation: r.operation.into(),
            object: r.object,
            old_object: r.old_object,
            user_info: r.user_info.into(),
            dry_run: r.dry_run,
        }
    }
}

/// A 0.3.0 scheduler does not see the cluster's name, and keeps no Nodes
/// between decisions: `r` must hold every Node (`nodes::Decision::whole`),
/// and has nothing `removed`.
impl From<current::ScheduleRequest> for old::ScheduleRequest {
    fn from(r: current::ScheduleRequest) -> Self {
        debug_assert!(r.removed.is_empty(), "a 0.3.0 scheduler gets every Node");
        Self { pod: r.pod, nodes: r.nodes.twin() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvk(kind: &str) -> current::GroupVersionKind {
        current::GroupVersionKind { group: "example.com".into(), version: "v1".into(), kind: kind.into() }
    }

    #[test]
    fn a_reconcile_request_loses_only_the_cluster_on_the_way_down() {
        let child = current::ChildFailure {
            child: current::ObjectRef { kind: gvk("Greeting"), namespace: Some("app".into()), name: "a".into() },
            code: 422,
            reason: "Invalid".into(),
            message: "no".into(),
            cluster: None,
        };
        let request = current::ReconcileRequest {
            event: current::EventKind::Deleted,
            object: b"{}".to_vec(),
            failed_children: vec![child],
            cluster: "east".into(),
            members: vec!["west".into()],
        };
        let old: old::ReconcileRequest = request.into();
        assert_eq!(old.event, old::EventKind::Deleted);
        assert_eq!(old.object, b"{}");
        let [c] = old.failed_children.as_slice() else { panic!("one child failure") };
        assert_eq!((c.child.kind.kind.as_str(), c.child.namespace.as_deref(), c.code), ("Greeting", Some("app"), 422));
    }

    #[test]
    fn a_manifest_comes_up_with_no_egress_and_its_roles_intact() {
        let manifest = old::ComponentManifest {
            controller: old::ControllerManifest {
                name: "greeter".into(),
                primary: gvk("Greeting").into(),
                crds: vec![],
                owns: vec![],
                watches: vec![old::Watch {
                    kind: gvk("Secret").into(),
                    mapping: old::WatchMapping::Reference(old::Reference {
                        name: old::FieldRef::Label("ref".into()),
                        namespace: None,
                    }),
                    label_selector: None,
                }],
                finalizer: None,
                permissions: vec![old::Permission {
                    group: String::new(),
                    kind: "ConfigMap".into(),
                    verbs: vec![old::Verb::List, old::Verb::Escalate],
                    scope: old::Scope::Namespaces(vec!["app".into()]),
                    status: false,
                    resource_names: vec![],
                }],
                resync_seconds: Some(60),
                max_concurrency: 2,
            },
            roles: old::Roles {
                reconcile: true,
                admission: vec![],
                conversion: vec![old::GroupKind { group: "example.com".into(), kind: "Greeting".into() }],
                scheduler: Some(old::SchedulerManifest { name: "zones".into() }),
            },
        };
        let m: current::ComponentManifest = manifest.into();
        assert!(m.egress.is_empty() && m.clusters.is_empty() && m.fleet.is_none());
        assert_eq!(m.controller.name, "greeter");
        assert!(matches!(
            &m.controller.watches[0].mapping,
            current::WatchMapping::Reference(r) if matches!(&r.name, current::FieldRef::Label(l) if l == "ref")
        ));
        let p = &m.controller.permissions[0];
        assert_eq!(p.verbs, vec![current::Verb::List, current::Verb::Escalate]);
        assert!(matches!(&p.scope, current::Scope::Namespaces(n) if n == &["app"]));
        assert!(m.roles.reconcile);
        assert_eq!(m.roles.conversion[0].kind, "Greeting");
        assert_eq!(m.roles.scheduler.map(|s| s.name).as_deref(), Some("zones"));
    }

    #[test]
    fn an_admission_request_loses_only_the_request_kind_on_the_way_down() {
        let request = current::AdmissionRequest {
            webhook: "validate.example.com".into(),
            webhook_type: current::WebhookType::Mutating,
            uid: "u".into(),
            kind: gvk("Greeting"),
            request_kind: current::GroupVersionKind { version: "v1beta1".into(), ..gvk("Greeting") },
            sub_resource: Some("status".into()),
            name: "a".into(),
            namespace: Some("app".into()),
            operation: current::Operation::Update,
            object: Some(b"{}".to_vec()),
            old_object: None,
            user_info: current::UserInfo { username: "me".into(), uid: "1".into(), groups: vec!["g".into()] },
            dry_run: true,
        };
        let old: old::AdmissionRequest = request.into();
        assert_eq!((old.kind.version.as_str(), old.webhook_type), ("v1", old::WebhookType::Mutating));
        assert_eq!(
            (old.operation, old.dry_run, old.user_info.groups),
            (old::Operation::Update, true, vec!["g".into()])
        );
        assert_eq!(old.sub_resource.as_deref(), Some("status"));
    }
}
