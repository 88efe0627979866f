//! The host's bindings of the `capstan:operator` WIT package: the current
//! contract version (`wit/`) and each earlier one it still runs, frozen in
//! `wit/v<version>/`.
//!
//! Generated types stay in here and in the conversions at the boundary
//! (`imports::v0_1`, `imports::v0_2`, `imports::v0_3`, `runtime`, and
//! [`v0_3`]'s `From` impls): the rest of the host works on the current
//! version's types or its own (`object`, `cluster`, `manifest`), so an
//! older component differs from a current one only in how it is called.

#![allow(missing_docs, reason = "generated code")]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "operator",
    // Imports are async because they talk to the API server. None are
    // trappable: an API failure is a WIT error the guest handles, never a
    // trap.
    imports: { default: async },
    exports: { default: async },
    // `wasi:http/outgoing-handler` (new in 0.4.0) and what it uses are
    // wasmtime's own bindings: they are linked once, by
    // `imports::add_to_linker`, not by this world's `add_to_linker`.
    with: {
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
    },
});

pub mod v0_3;

/// `capstan:operator@0.1.0`, the first contract version: a controller that
/// returns an outcome or a bare error, owns bare kinds, and cannot see what
/// happened to its children.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "operator",
        imports: { default: async },
        exports: { default: async },
    });
}

/// `capstan:operator@0.2.0`: a controller only. Its `types` interface is
/// a subset of 0.3.0's, unchanged, so both share [`v0_3`]'s Rust types;
/// only the interfaces differ by name.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "operator",
        imports: { default: async },
        exports: { default: async },
        with: { "capstan:operator/types": crate::runtime::bindings::v0_3::capstan::operator::types },
    });
}

/// The contract version this host implements natively.
pub const CONTRACT_VERSION: &str = "0.4.0";

/// Every contract version this host runs, oldest first.
pub const CONTRACT_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0", CONTRACT_VERSION];

/// The fully qualified name of the controller interface guests export, at
/// the current contract version.
pub const CONTROLLER_EXPORT: &str = "capstan:operator/controller@0.4.0";

use capstan::operator::types as current;
use v0_1::capstan::operator::types as old;

impl From<old::GroupVersionKind> for current::GroupVersionKind {
    fn from(k: old::GroupVersionKind) -> Self {
        Self { group: k.group, version: k.version, kind: k.kind }
    }
}

impl From<current::GroupVersionKind> for old::GroupVersionKind {
    fn from(k: current::GroupVersionKind) -> Self {
        Self { group: k.group, version: k.version, kind: k.kind }
    }
}

impl From<old::ObjectRef> for current::ObjectRef {
    fn from(r: old::ObjectRef) -> Self {
        Self { kind: r.kind.into(), namespace: r.namespace, name: r.name }
    }
}

impl From<old::Event> for current::Event {
    fn from(e: old::Event) -> Self {
        Self {
            event_type: match e.event_type {
                old::EventType::Normal => current::EventType::Normal,
                old::EventType::Warning => current::EventType::Warning,
            },
            reason: e.reason,
            action: e.action,
            note: e.note,
            regarding: e.regarding.map(Into::into),
        }
    }
}

/// A 0.1.0 outcome always prunes unlisted children.
impl From<old::Outcome> for current::Outcome {
    fn from(o: old::Outcome) -> Self {
        Self {
            children: o.children,
            status: o.status,
            events: o.events.into_iter().map(Into::into).collect(),
            requeue_after_ms: o.requeue_after_ms,
            children_policy: current::ChildrenPolicy::Prune,
            member_children: Vec::new(),
        }
    }
}

/// What a component built before 0.3.0 serves: a reconcile loop.
impl current::Roles {
    /// Only the controller role.
    pub fn reconcile_only() -> Self {
        Self { reconcile: true, admission: Vec::new(), conversion: Vec::new(), scheduler: None }
    }
}

/// A 0.1.0 error carries no status and no events.
impl From<old::ReconcileError> for current::Failure {
    fn from(e: old::ReconcileError) -> Self {
        let (kind, message) = match e {
            old::ReconcileError::Transient(m) => (current::FailureKind::Transient, m),
            old::ReconcileError::Terminal(m) => (current::FailureKind::Terminal, m),
        };
        Self { kind, message, status: None, events: Vec::new() }
    }
}
