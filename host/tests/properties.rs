//! Property tests of what a component, a test author, a webhook caller or
//! a registry can feed the host (issues #15 and #29, fuzzing): manifests,
//! outcome children, import arguments, scenario YAML, the mock cluster's
//! patches, admission and conversion reviews and the guest's answers to
//! them, component references and OCI manifests never make it panic, and
//! what it accepts keeps its promises.
//!
//! Each property runs proptest's default 256 cases (a few seconds in all);
//! `PROPTEST_CASES=100000 cargo test -p capstan-host --test properties`
//! runs longer (see `docs/fuzzing.md`).

use std::collections::BTreeSet;
use std::time::Duration;

use base64::Engine as _;
use capstan_host::cluster::MAX_MESSAGE;
use capstan_host::cluster::mock::MockCluster;
use capstan_host::cluster::{Cluster, ListParams, Patch, Subresource};
use capstan_host::control::reconciler::{self, prepare_children};
use capstan_host::manifest::{self, AdmissionWebhook, FieldRef, GroupKind, Manifest, Mapping, Operation, Scope, Verb};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::runtime::bindings::capstan::operator::types as wit;
use capstan_host::runtime::component::MAX_COMPONENT_SIZE;
use capstan_host::runtime::grants::Grants;
use capstan_host::runtime::imports::validate;
use capstan_host::serve::oci::{self, Reference};
use capstan_host::serve::webhook::{self, admission, conversion};
use capstan_host::tooling::scenario;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};

// ---------------------------------------------------------------- inputs

/// Any JSON value, biased towards the keys and strings Kubernetes objects
/// hold so that the interesting paths are reached.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        words().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(&[
            "apiVersion", "kind", "metadata", "name", "namespace", "labels", "annotations", "data", "spec",
            "status", "ownerReferences", "finalizers", "containers", "image", "replicas", "template", "$patch",
            "op", "path", "value", "from",
        ][..]).prop_map(str::to_owned),
        1 => "[a-zA-Z/._-]{1,10}",
    ]
}

fn words() -> impl Strategy<Value = String> {
    select(
        &[
            "v1",
            "apps/v1",
            "ConfigMap",
            "Deployment",
            "Secret",
            "default",
            "app",
            "kube-system",
            "other",
            "web",
            "a?b",
            "../x",
            "",
            "x/y",
            "add",
            "remove",
            "replace",
            "/metadata/labels",
            "/data/k",
            "delete",
        ][..],
    )
    .prop_map(str::to_owned)
}

/// A name: mostly valid ones, then near misses and anything.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?",
        1 => "[a-z0-9.-]{0,12}",
        1 => select(&["victim?dryRun=All", "a/b", "..", ".", "a%2Fb", "a#b", "a b", "", "system:admin", "-a", "a-"][..])
            .prop_map(str::to_owned),
        1 => ".{0,20}",
    ]
}

fn gvk() -> impl Strategy<Value = wit::GroupVersionKind> {
    let group = prop_oneof![
        8 => select(&["", "apps", "examples.capstan.dev", "rbac.authorization.k8s.io"][..]).prop_map(str::to_owned),
        1 => name(),
    ];
    let version = prop_oneof![
        8 => select(&["v1", "v1alpha1", "v2beta1"][..]).prop_map(str::to_owned),
        1 => name(),
        1 => select(&["v1?watch=1", "v1/x", "v1#", "V1", "v 1", "-"][..]).prop_map(str::to_owned),
    ];
    let kind = prop_oneof![
        8 => select(&["ConfigMap", "Deployment", "Greeting", "Secret", "ClusterRole"][..]).prop_map(str::to_owned),
        1 => "[A-Za-z0-9?/]{0,8}",
    ];
    (group, version, kind).prop_map(|(group, version, kind)| wit::GroupVersionKind { group, version, kind })
}

fn selector() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(None),
        4 => select(&["app=web", "app in (a,b)", "!gone", "tier!=db,app", "x notin (y)"][..])
            .prop_map(|s| Some(s.to_owned())),
        1 => select(&["app==", "=x", "a in b", "a in (", "!"][..]).prop_map(|s| Some(s.to_owned())),
        1 => ".{0,16}".prop_map(Some),
    ]
}

fn scope() -> impl Strategy<Value = wit::Scope> {
    prop_oneof![
        2 => Just(wit::Scope::Cluster),
        2 => Just(wit::Scope::OwnNamespace),
        2 => prop::collection::vec(name(), 0..3).prop_map(wit::Scope::Namespaces),
        1 => (60usize..70).prop_map(|n| wit::Scope::Namespaces((0..n).map(|i| format!("ns{i}")).collect())),
    ]
}

fn verb() -> impl Strategy<Value = wit::Verb> {
    select(
        &[
            wit::Verb::Get,
            wit::Verb::List,
            wit::Verb::Watch,
            wit::Verb::Create,
            wit::Verb::Update,
            wit::Verb::Patch,
            wit::Verb::Delete,
            wit::Verb::Bind,
            wit::Verb::Escalate,
        ][..],
    )
}

fn field_ref() -> impl Strategy<Value = wit::FieldRef> {
    prop_oneof![
        Just(wit::FieldRef::Name),
        Just(wit::FieldRef::Namespace),
        name().prop_map(wit::FieldRef::Label),
        name().prop_map(wit::FieldRef::Annotation),
    ]
}

fn mapping() -> impl Strategy<Value = wit::WatchMapping> {
    prop_oneof![
        Just(wit::WatchMapping::None),
        Just(wit::WatchMapping::SameName),
        Just(wit::WatchMapping::Namespace),
        Just(wit::WatchMapping::All),
        name().prop_map(wit::WatchMapping::Label),
        (field_ref(), prop::option::of(field_ref()))
            .prop_map(|(name, namespace)| wit::WatchMapping::Reference(wit::Reference { name, namespace })),
    ]
}

fn crd() -> impl Strategy<Value = Vec<u8>> {
    let valid = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "greetings.examples.capstan.dev"},
        "spec": {"group": "examples.capstan.dev", "scope": "Namespaced",
            "names": {"kind": "Greeting", "plural": "greetings"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true}]},
    });
    prop_oneof![
        12 => Just(serde_json::to_vec(&valid).expect("JSON")),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => prop::collection::vec(any::<u8>(), 0..32),
    ]
}

/// A manifest record as a guest may return it: every field valid, a near
/// miss, or junk.
fn any_manifest() -> impl Strategy<Value = wit::ControllerManifest> {
    let owned = (gvk(), selector(), prop::option::of(scope())).prop_map(|(kind, label_selector, scope)| wit::Owned {
        kind,
        label_selector,
        scope,
    });
    let watch = (gvk(), mapping(), selector()).prop_map(|(kind, mapping, label_selector)| wit::Watch {
        kind,
        mapping,
        label_selector,
    });
    let permission = (
        prop_oneof![
            4 => select(&["", "*", "apps", "rbac.authorization.k8s.io"][..]).prop_map(str::to_owned),
            1 => name(),
        ],
        prop_oneof![4 => select(&["Secret", "*", "ClusterRole", ""][..]).prop_map(str::to_owned), 1 => name()],
        prop::collection::vec(verb(), 1..4),
        scope(),
        any::<bool>(),
        prop::collection::vec(name(), 0..2),
    )
        .prop_map(|(group, kind, verbs, scope, status, resource_names)| wit::Permission {
            group,
            kind,
            verbs,
            scope,
            status,
            resource_names,
        });
    let numbers = (
        prop::option::of(prop_oneof![3 => 0u32..=700_000, 1 => any::<u32>()]),
        prop_oneof![3 => 0u32..=80, 1 => any::<u32>()],
    );
    let primary = wit::GroupVersionKind {
        group: "examples.capstan.dev".into(),
        version: "v1alpha1".into(),
        kind: "Greeting".into(),
    };
    (
        prop_oneof![9 => "[a-z]([a-z0-9-]{0,10}[a-z0-9])?", 1 => name()],
        prop_oneof![9 => Just(primary), 1 => gvk()],
        prop::collection::vec(crd(), 0..2),
        prop::collection::vec(owned, 0..3),
        prop::collection::vec(watch, 0..3),
        prop::option::of(prop_oneof![4 => Just("examples.capstan.dev/cleanup".to_owned()), 1 => name()]),
        prop::collection::vec(permission, 0..3),
        numbers,
    )
        .prop_map(
            |(name, primary, crds, owns, watches, finalizer, permissions, (resync_seconds, max_concurrency))| {
                wit::ControllerManifest {
                    name,
                    primary,
                    crds,
                    owns,
                    watches,
                    finalizer,
                    permissions,
                    resync_seconds,
                    max_concurrency,
                }
            },
        )
}

/// A manifest the host accepts: a `Parent` owning ConfigMaps.
fn valid_manifest() -> wit::ControllerManifest {
    to_wit(&parent(vec![owned("", "v1", "ConfigMap", None)]))
}

// --------------------------------------------------------------- manifest

fn to_wit_gvk(g: &Gvk) -> wit::GroupVersionKind {
    wit::GroupVersionKind { group: g.group.clone(), version: g.version.clone(), kind: g.kind.clone() }
}

fn to_wit_scope(s: &Scope) -> wit::Scope {
    match s {
        Scope::Cluster => wit::Scope::Cluster,
        Scope::OwnNamespace => wit::Scope::OwnNamespace,
        Scope::Namespaces(n) => wit::Scope::Namespaces(n.clone()),
    }
}

fn to_wit_field(f: &FieldRef) -> wit::FieldRef {
    match f {
        FieldRef::Name => wit::FieldRef::Name,
        FieldRef::Namespace => wit::FieldRef::Namespace,
        FieldRef::Label(k) => wit::FieldRef::Label(k.clone()),
        FieldRef::Annotation(k) => wit::FieldRef::Annotation(k.clone()),
    }
}

fn to_wit_verb(v: Verb) -> wit::Verb {
    match v {
        Verb::Get => wit::Verb::Get,
        Verb::List => wit::Verb::List,
        Verb::Watch => wit::Verb::Watch,
        Verb::Create => wit::Verb::Create,
        Verb::Update => wit::Verb::Update,
        Verb::Patch => wit::Verb::Patch,
        Verb::Delete => wit::Verb::Delete,
        Verb::Bind => wit::Verb::Bind,
        Verb::Escalate => wit::Verb::Escalate,
    }
}

/// The record a guest returns for `m` (the inverse of the decoding, up to
/// its defaults: `max-concurrency` 0 is 1, resync 0 is none).
fn to_wit(m: &Manifest) -> wit::ControllerManifest {
    wit::ControllerManifest {
        name: m.name.clone(),
        primary: to_wit_gvk(&m.primary),
        crds: m.crds.iter().map(|c| serde_json::to_vec(c).expect("JSON")).collect(),
        owns: m
            .owns
            .iter()
            .map(|o| wit::Owned {
                kind: to_wit_gvk(&o.kind),
                label_selector: o.label_selector.clone(),
                scope: o.scope.as_ref().map(to_wit_scope),
            })
            .collect(),
        watches: m
            .watches
            .iter()
            .map(|w| wit::Watch {
                kind: to_wit_gvk(&w.kind),
                mapping: match &w.mapping {
                    Mapping::None => wit::WatchMapping::None,
                    Mapping::Label(l) => wit::WatchMapping::Label(l.clone()),
                    Mapping::SameName => wit::WatchMapping::SameName,
                    Mapping::Namespace => wit::WatchMapping::Namespace,
                    Mapping::All => wit::WatchMapping::All,
                    Mapping::Reference(r) => wit::WatchMapping::Reference(wit::Reference {
                        name: to_wit_field(&r.name),
                        namespace: r.namespace.as_ref().map(to_wit_field),
                    }),
                },
                label_selector: w.label_selector.clone(),
            })
            .collect(),
        finalizer: m.finalizer.clone(),
        permissions: m
            .permissions
            .iter()
            .map(|p| wit::Permission {
                group: p.group.clone(),
                kind: p.kind.clone(),
                verbs: p.verbs.iter().copied().map(to_wit_verb).collect(),
                scope: to_wit_scope(&p.scope),
                status: p.status,
                resource_names: p.resource_names.clone(),
            })
            .collect(),
        resync_seconds: m.resync.map(|d| u32::try_from(d.as_secs()).expect("at most a week")),
        max_concurrency: m.max_concurrency,
    }
}

proptest! {
    #[test]
    fn any_manifest_decodes_or_is_refused_and_what_is_accepted_is_bounded_and_round_trips(
        m in any_manifest(),
    ) {
        let Ok(decoded) = Manifest::try_from(m) else { return Ok(()) };
        prop_assert!((1..=manifest::MAX_CONCURRENCY).contains(&decoded.max_concurrency));
        prop_assert!(decoded.resync.is_none_or(|r| r <= Duration::from_secs(manifest::MAX_RESYNC_SECONDS.into())));
        prop_assert!(decoded.crds.len() <= manifest::MAX_CRDS);
        prop_assert!(decoded.owns.len() <= manifest::MAX_ENTRIES);
        prop_assert!(manifest::is_dns1123_label(&decoded.name));
        // Every kind it names can be put in a request path.
        for kind in decoded.kinds() {
            prop_assert!(validate::gvk(kind, "").is_ok(), "{kind} was accepted: {:?}", validate::gvk(kind, ""));
        }
        let again = Manifest::try_from(to_wit(&decoded));
        prop_assert_eq!(again.as_ref(), Ok(&decoded));
    }

    #[test]
    fn a_number_out_of_range_is_refused_naming_its_field(
        concurrency in (manifest::MAX_CONCURRENCY + 1)..=u32::MAX,
        resync in (manifest::MAX_RESYNC_SECONDS + 1)..=u32::MAX,
        owned in (manifest::MAX_ENTRIES + 1)..200,
    ) {
        let m = wit::ControllerManifest { max_concurrency: concurrency, ..valid_manifest() };
        let err = Manifest::try_from(m).expect_err("out of range");
        prop_assert!(
            matches!(err, manifest::Error::Range { field: "max-concurrency", value, .. } if value == u64::from(concurrency)),
            "{err:?}"
        );
        prop_assert!(err.to_string().starts_with("max-concurrency: "), "{err}");
        let m = wit::ControllerManifest { resync_seconds: Some(resync), ..valid_manifest() };
        let err = Manifest::try_from(m).expect_err("out of range");
        prop_assert!(err.to_string().starts_with("resync-seconds: "), "{err}");
        let owns = valid_manifest().owns[0].clone();
        let m = wit::ControllerManifest { owns: vec![owns; owned], ..valid_manifest() };
        let err = Manifest::try_from(m).expect_err("too many");
        prop_assert!(matches!(err, manifest::Error::Range { field: "owns", .. }), "{err:?}");
    }
}

// --------------------------------------------------------------- children

/// A child as a guest may return it: plausible objects with a junk field
/// here and there, or any JSON, or any bytes.
fn child() -> impl Strategy<Value = Vec<u8>> {
    let kinds = [
        ("v1", "ConfigMap"),
        ("apps/v1", "Deployment"),
        ("v1", "Secret"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("v1", "Deployment"),
    ];
    let api_and_kind = prop_oneof![
        8 => select(kinds.to_vec()).prop_map(|(a, k)| (Value::from(a), Value::from(k))),
        1 => (json_value(), json_value()),
    ];
    let namespace = prop_oneof![
        3 => Just(None),
        3 => Just(Some(Value::from("app"))),
        3 => select(&["other", "kube-system", "a", "b", "c", ""][..]).prop_map(|n| Some(Value::from(n))),
        1 => name().prop_map(|n| Some(Value::from(n))),
        1 => json_value().prop_map(Some),
    ];
    let meta = (name(), namespace, prop::option::of(json_value()), prop::option::of(json_value())).prop_map(
        |(name, namespace, labels, owners)| {
            let mut meta = json!({"name": name});
            if let Some(ns) = namespace {
                meta["namespace"] = ns;
            }
            if let Some(labels) = labels {
                meta["labels"] = labels;
            }
            if let Some(owners) = owners {
                meta["ownerReferences"] = owners;
            }
            meta
        },
    );
    let plausible = (api_and_kind, meta, prop::option::of(json_value())).prop_map(|((api, kind), meta, extra)| {
        let mut child = json!({"apiVersion": api, "kind": kind, "metadata": meta});
        if let Some(extra) = extra {
            child["data"] = extra;
        }
        child
    });
    prop_oneof![
        12 => plausible.prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => prop::collection::vec(any::<u8>(), 0..24),
    ]
}

fn owned(group: &str, version: &str, kind: &str, scope: Option<Scope>) -> manifest::Owned {
    manifest::Owned { kind: Gvk::new(group, version, kind), label_selector: None, scope }
}

/// The manifest of controller `parent` of the namespaced kind `Parent`,
/// owning `owns`.
fn parent(owns: Vec<manifest::Owned>) -> Manifest {
    Manifest {
        name: "parent".into(),
        primary: Gvk::new("examples.capstan.dev", "v1alpha1", "Parent"),
        crds: vec![],
        owns,
        watches: vec![],
        finalizer: None,
        permissions: vec![],
        resync: None,
        max_concurrency: 1,
        roles: manifest::Roles::reconcile_only(),
        egress: Default::default(),
        clusters: vec![],
        fleet: None,
    }
}

fn owner_ref() -> Value {
    json!({"apiVersion": "examples.capstan.dev/v1alpha1", "kind": "Parent", "name": "p", "uid": "u-1", "controller": true})
}

proptest! {
    #[test]
    fn the_children_of_a_namespaced_object_are_accepted_only_in_its_namespace(
        children in prop::collection::vec(child(), 0..4),
        watched in prop::sample::subsequence(vec!["app".to_owned(), "other".to_owned()], 0..=2),
    ) {
        let m = parent(vec![
            owned("", "v1", "ConfigMap", None),
            owned("apps", "v1", "Deployment", None),
            owned("rbac.authorization.k8s.io", "v1", "RoleBinding", None),
        ]);
        let grants = Grants::from_manifest(&m).within(&watched);
        let r = ObjectRef::new(m.primary.clone(), Some("app"), "p");
        let Ok(prepared) = prepare_children(&m, &grants, &r, &owner_ref(), &children) else { return Ok(()) };
        prop_assert!(watched.is_empty() || watched.iter().any(|w| w == "app") || prepared.is_empty());
        let mut seen = BTreeSet::new();
        for (child_ref, child) in &prepared {
            prop_assert_eq!(child_ref.namespace.as_deref(), Some("app"));
            prop_assert_eq!(&child["metadata"]["namespace"], &json!("app"));
            prop_assert!(m.owned(&child_ref.gvk).is_some(), "{child_ref}");
            prop_assert!(validate::object_ref(child_ref, "").is_ok(), "{child_ref}");
            prop_assert_eq!(&child["metadata"]["ownerReferences"], &json!([owner_ref()]));
            prop_assert!(child_ref.gvk.kind != "RoleBinding", "bind was never declared: {child_ref}");
            prop_assert!(seen.insert(child_ref.clone()), "listed twice: {child_ref}");
        }
    }

    #[test]
    fn the_children_of_a_cluster_scoped_object_stay_in_their_declared_scope_and_the_watched_namespaces(
        children in prop::collection::vec(child(), 0..4),
        watched in prop::sample::subsequence(vec!["a".to_owned(), "c".to_owned()], 0..=2),
    ) {
        // The primary is treated as cluster-scoped: `r` has no namespace.
        let m = parent(vec![
            owned("", "v1", "ConfigMap", Some(Scope::Namespaces(vec!["a".into(), "b".into()]))),
            owned("rbac.authorization.k8s.io", "v1", "ClusterRole", Some(Scope::Cluster)),
        ]);
        let grants = Grants::from_manifest(&m).within(&watched);
        let r = ObjectRef::new(m.primary.clone(), None, "p");
        let Ok(prepared) = prepare_children(&m, &grants, &r, &owner_ref(), &children) else { return Ok(()) };
        for (child_ref, _) in &prepared {
            match (child_ref.gvk.kind.as_str(), child_ref.namespace.as_deref()) {
                ("ConfigMap", Some(ns)) => {
                    prop_assert!(ns == "a" || ns == "b", "{child_ref}");
                    prop_assert!(watched.is_empty() || watched.iter().any(|w| w == ns), "{child_ref}");
                }
                ("ClusterRole", _) => {}
                _ => prop_assert!(false, "accepted {child_ref}"),
            }
        }
    }

    #[test]
    fn more_children_than_the_limit_are_refused(extra in 1usize..50) {
        let m = parent(vec![owned("", "v1", "ConfigMap", None)]);
        let children = vec![b"{}".to_vec(); reconciler::MAX_CHILDREN + extra];
        let r = ObjectRef::new(m.primary.clone(), None, "p");
        let refused = prepare_children(&m, &Grants::from_manifest(&m), &r, &owner_ref(), &children);
        prop_assert!(matches!(refused, Err(reconciler::Error::InvalidOutcome(_))));
    }
}

// ------------------------------------------------------- import arguments

proptest! {
    #[test]
    fn an_accepted_name_or_namespace_cannot_change_a_request_path(
        group in prop_oneof![Just(String::new()), Just("rbac.authorization.k8s.io".to_owned()), name()],
        version in name(),
        kind in "[A-Za-z0-9?/ ]{0,10}",
        namespace in name(),
        object in name(),
    ) {
        let gvk = Gvk::new(group, version, kind);
        let path_safe = |s: &str| !s.chars().any(|c| c.is_control() || c.is_whitespace() || "?#/%".contains(c));
        if validate::gvk(&gvk, "").is_ok() {
            prop_assert!(path_safe(&gvk.group) && path_safe(&gvk.version) && path_safe(&gvk.kind), "{gvk}");
            prop_assert!(!gvk.version.is_empty() && !gvk.kind.is_empty(), "{gvk}");
        }
        if validate::namespace(&namespace, "").is_ok() {
            prop_assert!(manifest::is_dns1123_label(&namespace), "{namespace:?}");
        }
        if validate::name(&gvk, &object, "").is_ok() {
            prop_assert!(path_safe(&object) && object != "." && object != ".." && !object.is_empty(), "{object:?}");
            if gvk.group != "rbac.authorization.k8s.io" {
                prop_assert!(object.len() <= 253, "{object:?}");
                prop_assert!(object.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
            }
        }
        let r = ObjectRef::new(gvk.clone(), Some(&namespace), object.clone());
        if let Err(e) = validate::object_ref(&r, "regarding.") {
            prop_assert!(e.field.starts_with("regarding."), "{e}");
            prop_assert!(e.value.chars().count() <= 65, "{e}");
        }
    }
}

// ------------------------------------------------------ mock cluster merges

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

fn configmap_ref() -> ObjectRef {
    ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), "cm")
}

fn deployment_ref() -> ObjectRef {
    ObjectRef::new(Gvk::new("apps", "v1", "Deployment"), Some("default"), "web")
}

/// A Deployment as an applied configuration, partly junk.
fn deployment() -> impl Strategy<Value = Value> {
    let container = (select(&["web", "side", "init"][..]), prop::option::of(words()), prop::option::of(json_value()))
        .prop_map(|(name, image, env)| {
            let mut c = json!({"name": name, "image": image.unwrap_or_else(|| "nginx".into())});
            if let Some(env) = env {
                c["env"] = env;
            }
            c
        });
    (
        prop::collection::vec(container, 0..3),
        prop::option::of(0i64..5),
        prop::option::of(prop::collection::btree_map("[a-z]{1,4}", "[a-z]{0,4}", 0..3)),
        prop::option::of(json_value()),
    )
        .prop_map(|(containers, replicas, labels, extra)| {
            let mut d = json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}},
            });
            if let Some(r) = replicas {
                d["spec"]["replicas"] = json!(r);
            }
            if let Some(labels) = labels {
                d["metadata"]["labels"] = json!(labels);
            }
            if let Some(extra) = extra {
                d["spec"]["strategy"] = extra;
            }
            d
        })
}

/// `object` without what the server changes on every write.
fn content(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    object
}

proptest! {
    #[test]
    fn any_patch_of_any_kind_leaves_the_mock_cluster_standing(
        patches in prop::collection::vec((0u8..4, json_value()), 1..5),
        selector in prop::option::of(".{0,12}"),
    ) {
        runtime().block_on(async {
            let cluster = MockCluster::new();
            let seeded = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "default", "labels": {"app": "web"}}, "data": {"k": "v"}});
            cluster.seed(seeded).expect("a ConfigMap");
            for (kind, body) in patches {
                let patch = match kind {
                    0 => Patch::Merge(body),
                    1 => Patch::Json(body),
                    2 => Patch::Strategic(body),
                    _ => Patch::Apply { object: body, field_manager: "fuzz".into(), force: kind % 2 == 0 },
                };
                let _ = cluster.patch(&configmap_ref(), patch, Subresource::Main).await;
            }
            let params = ListParams { label_selector: selector, field_selector: None };
            let _ = cluster.list(&Gvk::new("", "v1", "ConfigMap"), Some("default"), &params).await;
        });
    }

    #[test]
    fn applying_the_same_configuration_twice_changes_nothing_the_second_time(
        first in deployment(),
        second in deployment(),
    ) {
        runtime().block_on(async {
            let cluster = MockCluster::new();
            let apply = |object: &Value, manager: &str| Patch::Apply {
                object: object.clone(),
                field_manager: manager.into(),
                force: true,
            };
            // Another manager's configuration first, then the one under test.
            let _ = cluster.patch(&deployment_ref(), apply(&first, "other"), Subresource::Main).await;
            let Ok(once) = cluster.patch(&deployment_ref(), apply(&second, "fuzz"), Subresource::Main).await else {
                return Ok(());
            };
            let twice = cluster.patch(&deployment_ref(), apply(&second, "fuzz"), Subresource::Main).await;
            prop_assert!(twice.is_ok(), "{twice:?}");
            let twice = twice.expect("checked");
            prop_assert_eq!(content(once.clone()), content(twice.clone()));
            prop_assert_eq!(&once["metadata"]["resourceVersion"], &twice["metadata"]["resourceVersion"]);
            Ok(())
        })?;
    }
}

// ---------------------------------------------------------- scenario YAML

/// YAML as a test author may write it, or mangle it.
fn yaml() -> impl Strategy<Value = String> {
    let from_json = || json_value().prop_map(|v| serde_yaml_ng::to_string(&v).expect("YAML"));
    let documents = prop::collection::vec(from_json(), 0..4).prop_map(|d| d.join("---\n"));
    let mangled = (from_json(), 0usize..40, ".{0,6}").prop_map(|(text, at, junk)| {
        let at = (0..=at.min(text.len())).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        format!("{}{junk}{}", &text[..at], &text[at..])
    });
    prop_oneof![
        documents,
        mangled,
        "[-:{}\\[\\]&*!|>'\"%@` \n\ta-z0-9#?,.]{0,60}",
        select(&["a: &x [*x]\nb: *x\n", "- !!binary AAA\n", "? [a]\n: b\n", "a: 1\na: 2\n", "--- |\n  x\n...\n"][..])
            .prop_map(str::to_owned),
    ]
}

proptest! {
    #[test]
    fn any_scenario_yaml_parses_or_is_refused_naming_the_file(text in yaml()) {
        let name = format!("capstan-props-{}-{:x}.yaml", std::process::id(), rand_name(&text));
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, &text).expect("written");
        let read = scenario::read_yaml_documents(&path);
        let _ = std::fs::remove_file(&path);
        match read {
            Ok(documents) => {
                prop_assert!(documents.iter().all(|d| !d.is_null()));
                let mut out = Vec::new();
                for d in &documents {
                    scenario::subset_diff(d, d, String::new(), &mut out);
                }
                prop_assert!(out.is_empty(), "a document is not a subset of itself: {out:?}");
            }
            Err(e) => prop_assert!(e.to_string().starts_with(&path.display().to_string()), "{e}"),
        }
    }

    #[test]
    fn subset_matching_any_two_documents_never_panics(expected in json_value(), actual in json_value()) {
        let mut out = Vec::new();
        scenario::subset_diff(&expected, &actual, String::new(), &mut out);
        let mut same = Vec::new();
        scenario::subset_diff(&actual, &actual, String::new(), &mut same);
        prop_assert!(same.is_empty(), "{same:?}");
    }
}

/// A file name for `text` (a hash, so parallel cases do not collide).
fn rand_name(text: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(text.as_bytes());
    h.finish()
}

// ------------------------------------------------------- admission reviews

/// The webhook the admission properties review for.
fn admission_webhook(mutating: bool) -> AdmissionWebhook {
    AdmissionWebhook {
        name: "check.greetings.example.com".into(),
        mutating,
        kinds: vec![Gvk::new("example.com", "v1", "Greeting")],
        operations: vec![Operation::Create, Operation::Update],
        ignore_failures: false,
        timeout: Duration::from_secs(10),
        side_effects_on_dry_run: false,
        namespace_selector: None,
        object_selector: None,
    }
}

/// A Greeting with junk here and there, as the reviewed object.
fn reviewed_object() -> impl Strategy<Value = Value> {
    (name(), prop::option::of(name()), prop::option::of(json_value())).prop_map(|(name, namespace, spec)| {
        let mut o = json!({"apiVersion": "example.com/v1", "kind": "Greeting", "metadata": {"name": name}});
        if let Some(ns) = namespace {
            o["metadata"]["namespace"] = json!(ns);
        }
        if let Some(spec) = spec {
            o["spec"] = spec;
        }
        o
    })
}

/// Any text: short, multi-byte, or long enough to be cut.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => ".{0,40}",
        1 => ("[aé😀\n]{1,3}", 1usize..6000).prop_map(|(unit, n)| unit.repeat(n)),
    ]
}

/// A value nested `depth` arrays deep: deeper than the JSON reader goes.
fn nested(depth: usize) -> Vec<u8> {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
}

/// An `AdmissionReview` as anyone who reaches the webhook port may send
/// it: a valid review of `object`, a near miss, any JSON, any bytes, a
/// huge or deeply nested one.
fn admission_review(object: Value) -> impl Strategy<Value = Vec<u8>> {
    let request = (
        prop_oneof![4 => name(), 1 => text()],
        prop_oneof![8 => select(&["CREATE", "UPDATE", "DELETE", "CONNECT"][..]).prop_map(str::to_owned), 1 => text()],
        prop::option::of(json_value()),
        prop::option::of(prop::collection::vec(text(), 0..4)),
        any::<bool>(),
        0u8..12,
    )
        .prop_map(move |(uid, operation, old_object, groups, dry_run, miss)| {
            let mut request = json!({
                "uid": uid, "kind": {"group": "example.com", "version": "v1", "kind": "Greeting"},
                "resource": {"group": "example.com", "version": "v1", "resource": "greetings"},
                "name": object["metadata"]["name"], "namespace": object["metadata"]["namespace"],
                "operation": operation, "object": object, "oldObject": old_object, "dryRun": dry_run,
            });
            if let Some(groups) = groups {
                request["userInfo"] = json!({"username": "someone", "groups": groups});
            }
            let mut review =
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
            match miss {
                0 => review["apiVersion"] = json!("admission.k8s.io/v1beta1"),
                1 => review["request"]["uid"] = json!(7),
                2 => review["request"] = Value::Null,
                3 => review["request"]["kind"] = json!("Greeting"),
                _ => {}
            }
            serde_json::to_vec(&review).expect("JSON")
        });
    prop_oneof![
        12 => request,
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => (100usize..100_000).prop_map(nested),
    ]
}

/// What a guest may answer about `object`: allowed or not, any code, any
/// message and warnings, and as its changed object the same one, one
/// changed in a field it may change or in one it must keep, any JSON or
/// any bytes.
fn admission_answer(object: Value) -> impl Strategy<Value = wit::AdmissionResponse> {
    let patched =
        (0u8..8, json_value(), prop::collection::vec(any::<u8>(), 0..16)).prop_map(move |(change, value, bytes)| {
            let mut changed = object.clone();
            match change {
                0 => return None,
                1 => {}
                2 => changed["spec"] = value,
                3 => changed["metadata"]["labels"] = json!({"set": "by-guest"}),
                4 => changed["metadata"]["name"] = json!("renamed"),
                5 => changed["kind"] = json!("Secret"),
                6 => return Some(bytes),
                _ => changed = value,
            }
            Some(serde_json::to_vec(&changed).expect("JSON"))
        });
    (
        prop_oneof![3 => Just(true), 1 => Just(false)],
        prop::option::of(text()),
        prop::option::of(prop_oneof![3 => 400u16..600, 1 => any::<u16>()]),
        prop_oneof![4 => prop::collection::vec(text(), 0..3), 1 => prop::collection::vec(text(), 30..40)],
        patched,
    )
        .prop_map(|(allowed, message, code, warnings, patched)| wit::AdmissionResponse {
            allowed,
            message,
            code,
            warnings,
            patched,
        })
}

/// A review, the guest's answer, and whether the webhook mutates.
fn admission_case() -> impl Strategy<Value = (Vec<u8>, wit::AdmissionResponse, bool)> {
    reviewed_object()
        .prop_flat_map(|object| (admission_review(object.clone()), admission_answer(object), any::<bool>()))
}

/// `value` with every float cut to 12 significant digits.
fn rounded(value: &Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => json!(format!("{:.11e}", n.as_f64().expect("a float"))),
        Value::Array(items) => Value::Array(items.iter().map(rounded).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), rounded(v))).collect()),
        other => other.clone(),
    }
}

/// `request.uid` of a review body, when it reads as one.
fn uid_of(body: &[u8]) -> Option<String> {
    let review: Value = serde_json::from_slice(body).ok()?;
    review["request"]["uid"].as_str().map(str::to_owned)
}

proptest! {
    #[test]
    fn any_admission_review_is_parsed_or_refused_and_an_accepted_answer_keeps_its_promises(
        (body, guest, mutating) in admission_case(),
    ) {
        let webhook = admission_webhook(mutating);
        let parsed = match admission::parse(&webhook, &body) {
            Ok(parsed) => parsed,
            Err(e) => {
                prop_assert!(matches!(e, webhook::Error::BadReview(_)), "{e:?}");
                return Ok(());
            }
        };
        // What the guest gets is what the API server sent.
        prop_assert_eq!(Some(parsed.uid.clone()), uid_of(&body));
        prop_assert_eq!(&parsed.request.uid, &parsed.uid);
        let sent: Value = serde_json::from_slice(&body).expect("it parsed");
        let object = Some(&sent["request"]["object"]).filter(|o| !o.is_null()).map(|o| serde_json::to_vec(o).expect("JSON"));
        prop_assert_eq!(&parsed.request.object, &object);
        let review = match admission::answer(&webhook, &parsed, guest.clone()) {
            Ok(review) => review,
            Err(e) => {
                prop_assert!(matches!(e, webhook::Error::Answer(_)), "{e:?}");
                return Ok(());
            }
        };
        let response = &review["response"];
        prop_assert_eq!(&review["kind"], &json!("AdmissionReview"));
        prop_assert_eq!(&response["uid"], &json!(parsed.uid));
        prop_assert_eq!(&response["allowed"], &json!(guest.allowed));
        if !guest.allowed {
            let code = response["status"]["code"].as_u64().expect("a code");
            prop_assert!((400..=599).contains(&code), "{code}");
            let message = response["status"]["message"].as_str().expect("a message");
            prop_assert!(message.len() <= admission::MAX_MESSAGE, "{} bytes", message.len());
        }
        let warnings = response["warnings"].as_array().cloned().unwrap_or_default();
        prop_assert!(warnings.len() <= admission::MAX_WARNINGS);
        for w in &warnings {
            prop_assert!(w.as_str().is_some_and(|w| w.len() <= admission::MAX_WARNING), "{w}");
        }
        let Some(patch) = response["patch"].as_str() else { return Ok(()) };
        prop_assert!(mutating && guest.allowed, "a patch from a validating webhook or a denial");
        prop_assert_eq!(&response["patchType"], &json!("JSONPatch"));
        // Applied to the request's object, the patch gives the guest's
        // object, which names the same object.
        let patch = base64::engine::general_purpose::STANDARD.decode(patch).expect("base64");
        let patch: json_patch::Patch = serde_json::from_slice(&patch).expect("a JSON Patch");
        let mut object = parsed.object.clone().expect("a patch needs an object");
        json_patch::patch(&mut object, &patch).expect("the patch applies");
        let changed: Value = serde_json::from_slice(guest.patched.as_deref().expect("changed")).expect("JSON");
        // Up to floats, which serde_json reads within an ulp, not exactly
        // (see docs/fuzzing.md).
        prop_assert_eq!(rounded(&object), rounded(&changed));
        for kept in ["/apiVersion", "/kind", "/metadata/name", "/metadata/namespace"] {
            prop_assert_eq!(object.pointer(kept), parsed.object.as_ref().and_then(|o| o.pointer(kept)), "{}", kept);
        }
    }
}

// ------------------------------------------------------ conversion reviews

/// The component the conversion properties serve: it converts `Greeting`
/// of `example.com`.
fn converter() -> Manifest {
    let mut m = parent(vec![]);
    m.roles = manifest::Roles {
        reconcile: false,
        conversion: vec![GroupKind { group: "example.com".into(), kind: "Greeting".into() }],
        ..manifest::Roles::reconcile_only()
    };
    m
}

/// An object to convert: a Greeting of some version, or another kind or
/// group, with junk here and there.
fn stored_object() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            6 => select(&["example.com/v1alpha1", "example.com/v1", "example.com/v2"][..]).prop_map(str::to_owned),
            1 => select(&["other.example/v1", "v1", "", "example.com"][..]).prop_map(str::to_owned),
        ],
        prop_oneof![6 => Just("Greeting".to_owned()), 1 => Just("Secret".to_owned()), 1 => ".{0,6}"],
        name(),
        prop::option::of(json_value()),
    )
        .prop_map(|(api_version, kind, name, spec)| {
            let mut o = json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")}});
            if let Some(spec) = spec {
                o["spec"] = spec;
            }
            o
        })
}

/// A `ConversionReview` of `objects` to `desired`, or a near miss, any
/// JSON, any bytes, a huge or deeply nested one.
fn conversion_review() -> impl Strategy<Value = Vec<u8>> {
    let review = (
        prop_oneof![4 => name(), 1 => text()],
        prop_oneof![
            6 => select(&["example.com/v1", "example.com/v2"][..]).prop_map(str::to_owned),
            1 => select(&["other.example/v1", "v1", "", "example.com/"][..]).prop_map(str::to_owned),
            1 => text(),
        ],
        prop::collection::vec(stored_object(), 0..4),
        0u8..12,
    )
        .prop_map(|(uid, desired, objects, miss)| {
            let mut review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects}});
            match miss {
                0 => review["kind"] = json!("AdmissionReview"),
                1 => review["request"]["desiredAPIVersion"] = Value::Null,
                2 => review["request"]["objects"] = json!({"a": 1}),
                _ => {}
            }
            serde_json::to_vec(&review).expect("JSON")
        });
    prop_oneof![
        12 => review,
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => (100usize..100_000).prop_map(nested),
    ]
}

/// What a guest may return for `objects` converted to `desired`: each one
/// converted faithfully, or with a field it must keep changed, an object
/// dropped or added, junk bytes.
fn converted(objects: &[Value], desired: &str, changes: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = objects
        .iter()
        .zip(changes.iter().chain(std::iter::repeat(&0)))
        .map(|(o, change)| {
            let mut c = o.clone();
            c["apiVersion"] = json!(desired);
            c["spec"] = json!({"converted": true});
            match change {
                1 => c["metadata"]["uid"] = json!("forged"),
                2 => c["kind"] = json!("Secret"),
                3 => c["apiVersion"] = o["apiVersion"].clone(),
                4 => return b"not json".to_vec(),
                _ => {}
            }
            serde_json::to_vec(&c).expect("JSON")
        })
        .collect();
    match changes.first() {
        Some(5) => {
            out.pop();
        }
        Some(6) => out.push(b"{}".to_vec()),
        _ => {}
    }
    out
}

proptest! {
    #[test]
    fn any_conversion_review_is_parsed_or_refused_and_an_accepted_conversion_keeps_its_promises(
        body in conversion_review(),
        changes in prop::collection::vec(prop_oneof![8 => Just(0u8), 1 => 1u8..7], 0..4),
        message in text(),
    ) {
        let parsed = match conversion::parse(&body) {
            Ok(parsed) => parsed,
            Err(e) => {
                prop_assert!(matches!(e, webhook::Error::BadReview(_)), "{e:?}");
                return Ok(());
            }
        };
        prop_assert_eq!(Some(parsed.uid.clone()), uid_of(&body));
        let m = converter();
        // A failure: the uid, no objects, the message cut to its bound.
        let failed = parsed.answer(Err(&message));
        prop_assert_eq!(&failed["response"]["uid"], &json!(parsed.uid));
        prop_assert_eq!(&failed["response"]["convertedObjects"], &json!([]));
        let cut = failed["response"]["result"]["message"].as_str().expect("a message");
        prop_assert!(cut.len() <= MAX_MESSAGE, "{} bytes", cut.len());
        prop_assert!(message.len() > MAX_MESSAGE || cut == message);
        let request = match parsed.request(&m) {
            Ok(request) => request,
            Err(refusal) => {
                prop_assert!(refusal.starts_with("component parent does not convert"), "{refusal}");
                return Ok(());
            }
        };
        // Only declared kinds, in the desired group, reach the guest, as sent.
        let desired = Gvk::from_api_version(&parsed.desired_api_version, "");
        prop_assert_eq!(request.objects.len(), parsed.objects.len());
        for (bytes, object) in request.objects.iter().zip(&parsed.objects) {
            prop_assert_eq!(bytes, &serde_json::to_vec(object).expect("JSON"));
            let gvk = Gvk::of(object).expect("declared objects have a kind");
            prop_assert!(gvk.group == "example.com" && gvk.kind == "Greeting" && desired.group == gvk.group, "{gvk}");
        }
        let answer = converted(&parsed.objects, &parsed.desired_api_version, &changes);
        let Ok(objects) = conversion::check(&parsed.desired_api_version, &parsed.objects, &answer) else {
            return Ok(());
        };
        prop_assert_eq!(objects.len(), parsed.objects.len());
        for (original, object) in parsed.objects.iter().zip(&objects) {
            prop_assert_eq!(&object["apiVersion"], &json!(parsed.desired_api_version));
            for kept in ["/kind", "/metadata/uid", "/metadata/name", "/metadata/namespace"] {
                prop_assert_eq!(object.pointer(kept), original.pointer(kept), "{}", kept);
            }
        }
        let review = parsed.answer(Ok(objects.clone()));
        prop_assert_eq!(&review["response"]["uid"], &json!(parsed.uid));
        prop_assert_eq!(&review["response"]["result"]["status"], &json!("Success"));
        prop_assert_eq!(&review["response"]["convertedObjects"], &json!(objects));
    }
}

// ------------------------------------------------------------ OCI decoders

fn hex64() -> impl Strategy<Value = String> {
    "[0-9a-f]{64}"
}

/// A digest: a valid one, or a near miss.
fn digest() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => hex64().prop_map(|h| format!("sha256:{h}")),
        1 => hex64().prop_map(|h| format!("sha512:{h}")),
        1 => "[0-9a-fA-F]{0,66}".prop_map(|h| format!("sha256:{h}")),
        1 => ".{0,12}",
    ]
}

/// A component reference as a user or a components folder may write it.
fn reference_text() -> impl Strategy<Value = String> {
    let registry = prop_oneof![
        4 => select(&["127.0.0.1:5000", "localhost:5000", "ghcr.io", "registry.example:443", "[::1]:5000"][..])
            .prop_map(str::to_owned),
        1 => select(&["", "Bad", "a b", "host:port", "ghcr.io:99999"][..]).prop_map(str::to_owned),
        1 => "[a-zA-Z0-9.:_-]{0,12}",
    ];
    let repository = prop_oneof![
        4 => "[a-z0-9]{1,8}(/[a-z0-9]{1,8}){0,2}",
        1 => "[a-zA-Z0-9/._ -]{0,16}",
    ];
    let at = prop_oneof![
        2 => Just(String::new()),
        3 => "[a-zA-Z0-9_][a-zA-Z0-9._-]{0,20}".prop_map(|t| format!(":{t}")),
        3 => digest().prop_map(|d| format!("@{d}")),
        1 => ".{0,8}",
    ];
    let scheme = prop_oneof![8 => Just("oci://"), 1 => Just(""), 1 => Just("OCI://"), 1 => Just(" oci://")];
    prop_oneof![
        8 => (scheme, registry, repository, at).prop_map(|(s, r, p, a)| format!("{s}{r}/{p}{a}")),
        1 => ".{0,40}",
    ]
}

proptest! {
    #[test]
    fn a_reference_that_parses_prints_back_to_itself(text in reference_text()) {
        let Ok(reference) = text.parse::<Reference>() else { return Ok(()) };
        let printed = reference.to_string();
        prop_assert!(printed.starts_with(oci::SCHEME), "{printed}");
        prop_assert!(!reference.registry().is_empty() && !reference.repository().is_empty(), "{printed}");
        if let Some(digest) = reference.digest() {
            prop_assert!(digest.strip_prefix("sha256:").is_some_and(|h| h.len() == 64), "{digest}");
        }
        let again: Reference = printed.parse().map_err(|e| TestCaseError::fail(format!("{printed}: {e}")))?;
        prop_assert_eq!(&again, &reference);
        prop_assert_eq!(again.to_string(), printed);
    }
}

/// An image manifest as a registry may send it: a Wasm component
/// artifact, a near miss (media types, layer count, size, digest), an
/// image index, any JSON, any bytes.
fn oci_manifest() -> impl Strategy<Value = Vec<u8>> {
    let media = |right: &'static str| {
        prop_oneof![
            6 => Just(right.to_owned()),
            1 => select(&["application/vnd.oci.image.layer.v1.tar+gzip", "application/json", ""][..])
                .prop_map(str::to_owned),
            1 => text(),
        ]
    };
    let size = prop_oneof![
        6 => 0i64..=(256 << 20),
        1 => ((256 << 20) + 1)..i64::MAX,
        1 => i64::MIN..0,
    ];
    let layer = (media(oci::LAYER_MEDIA_TYPE), digest(), size)
        .prop_map(|(media_type, digest, size)| json!({"mediaType": media_type, "digest": digest, "size": size}))
        .boxed();
    let layers = prop_oneof![6 => prop::collection::vec(layer.clone(), 1..=1), 1 => prop::collection::vec(layer, 0..4)];
    let annotations = prop::option::of(prop::collection::btree_map(
        prop_oneof![
            select(&[oci::ANNOTATION_CONTROLLER, oci::ANNOTATION_CONTRACT][..]).prop_map(str::to_owned),
            name()
        ],
        text(),
        0..3,
    ));
    let image = (media(oci::CONFIG_MEDIA_TYPE), digest(), layers, annotations).prop_map(
        |(config_type, config_digest, layers, annotations)| {
            let mut m = json!({
                "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": config_type, "digest": config_digest, "size": 2},
                "layers": layers,
            });
            if let Some(a) = annotations {
                m["annotations"] = json!(a);
            }
            m
        },
    );
    let index = digest().prop_map(|d| {
        json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": 7,
                "platform": {"architecture": "wasm", "os": "wasip2"}}]})
    });
    prop_oneof![
        12 => image.prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => index.prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => (100usize..100_000).prop_map(nested),
    ]
}

/// A reference by tag, by the manifest's own digest, or by another one.
fn reference_for(manifest: &[u8], pick: u8) -> Reference {
    let text = match pick {
        0 => format!("oci://127.0.0.1:5000/greeter@{}", oci::sha256(manifest)),
        1 => format!("oci://127.0.0.1:5000/greeter@{}", oci::sha256(b"another manifest")),
        _ => "oci://127.0.0.1:5000/greeter:v1".to_owned(),
    };
    text.parse().expect("a valid reference")
}

proptest! {
    #[test]
    fn an_accepted_oci_manifest_names_one_component_layer_within_the_cap(
        manifest in oci_manifest(),
        pick in 0u8..4,
    ) {
        let reference = reference_for(&manifest, pick);
        let layer = match oci::component_layer(&reference, &manifest) {
            Ok(layer) => layer,
            Err(e) => {
                prop_assert!(matches!(e.reason(), "not_component" | "digest"), "{e}");
                prop_assert!(e.to_string().len() <= 2 * oci::MAX_ERROR_TEXT + 300, "{} bytes", e.to_string().len());
                return Ok(());
            }
        };
        prop_assert!(pick != 1, "a manifest that is not the one the digest names was accepted");
        // Read independently of the decoder: one layer of the component
        // media type, its size and digest as accepted.
        let m: Value = serde_json::from_slice(&manifest).expect("accepted, so JSON");
        prop_assert_eq!(&m["config"]["mediaType"], &json!(oci::CONFIG_MEDIA_TYPE));
        let layers = m["layers"].as_array().expect("layers");
        prop_assert_eq!(layers.len(), 1);
        prop_assert_eq!(&layers[0]["mediaType"], &json!(oci::LAYER_MEDIA_TYPE));
        prop_assert_eq!(&layers[0]["digest"], &json!(layer.digest));
        prop_assert_eq!(layers[0]["size"].as_u64(), Some(layer.size));
        prop_assert!(layer.size <= MAX_COMPONENT_SIZE);
        let hex = layer.digest.strip_prefix("sha256:").expect("sha256");
        prop_assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn registry_error_text_is_cut_within_its_bound_on_one_line(text in text()) {
        let cut = oci::bounded_text(&text);
        prop_assert!(cut.len() <= oci::MAX_ERROR_TEXT + '…'.len_utf8(), "{} bytes", cut.len());
        prop_assert!(!cut.chars().any(char::is_control), "{cut:?}");
        let kept = cut.strip_suffix('…').filter(|_| text.len() > oci::MAX_ERROR_TEXT).unwrap_or(&cut);
        let expected: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        prop_assert!(expected.starts_with(kept), "{kept:?} is not where {text:?} starts");
        prop_assert!(text.len() > oci::MAX_ERROR_TEXT || cut == expected);
    }
}

/// How many of `count` values of `strategy` (from a fixed seed) `accepts`.
fn accepted<S: Strategy>(strategy: S, count: usize, accepts: impl Fn(S::Value) -> bool) -> usize {
    use proptest::strategy::ValueTree as _;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    (0..count).filter(|_| accepts(strategy.new_tree(&mut runner).expect("a value").current())).count()
}

#[test]
fn the_generators_reach_what_is_accepted_as_well_as_what_is_refused() {
    let manifests = accepted(any_manifest(), 500, |m| Manifest::try_from(m).is_ok());
    assert!((25..475).contains(&manifests), "{manifests} of 500 manifests accepted");
    let m = parent(vec![owned("", "v1", "ConfigMap", None), owned("apps", "v1", "Deployment", None)]);
    let r = ObjectRef::new(m.primary.clone(), Some("app"), "p");
    let grants = Grants::from_manifest(&m);
    let children = accepted(child(), 500, |c| prepare_children(&m, &grants, &r, &owner_ref(), &[c]).is_ok());
    assert!((25..475).contains(&children), "{children} of 500 children accepted");
    let answered = accepted(admission_case(), 500, |(body, guest, mutating)| {
        let webhook = admission_webhook(mutating);
        admission::parse(&webhook, &body).is_ok_and(|p| admission::answer(&webhook, &p, guest).is_ok())
    });
    assert!((25..475).contains(&answered), "{answered} of 500 admission reviews answered");
    let patched = accepted(admission_case(), 500, |(body, guest, _)| {
        let webhook = admission_webhook(true);
        admission::parse(&webhook, &body)
            .is_ok_and(|p| admission::answer(&webhook, &p, guest).is_ok_and(|r| r["response"].get("patch").is_some()))
    });
    assert!((25..475).contains(&patched), "{patched} of 500 admission reviews answered with a patch");
    let conversions = accepted((conversion_review(), prop::collection::vec(0u8..2, 0..4)), 500, |(body, changes)| {
        conversion::parse(&body).is_ok_and(|p| {
            p.request(&converter()).is_ok()
                && conversion::check(
                    &p.desired_api_version,
                    &p.objects,
                    &converted(&p.objects, &p.desired_api_version, &changes),
                )
                .is_ok_and(|o| !o.is_empty())
        })
    });
    assert!((25..475).contains(&conversions), "{conversions} of 500 conversions of at least one object accepted");
    let references = accepted(reference_text(), 500, |t| t.parse::<Reference>().is_ok());
    assert!((25..475).contains(&references), "{references} of 500 references parsed");
    let layers =
        accepted((oci_manifest(), 0u8..4), 500, |(m, pick)| oci::component_layer(&reference_for(&m, pick), &m).is_ok());
    assert!((25..475).contains(&layers), "{layers} of 500 OCI manifests accepted");
}
