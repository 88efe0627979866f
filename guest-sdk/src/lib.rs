//! Write Kubernetes controllers for the Capstan host as WebAssembly
//! components.
//!
//! A controller is a type implementing [`Controller`]: it declares what it
//! needs in a [`Manifest`] and turns one object of its primary kind into an
//! [`Outcome`]: the children it wants, the status to write, events to record,
//! and when to look again. The host owns everything else: connections,
//! watches, caches, queues, retries, finalizers, server-side apply of the
//! children, owner references and pruning.
//!
//! ```no_run
//! use capstan_guest::prelude::*;
//! use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
//!
//! #[derive(Default)]
//! struct Mirror;
//!
//! impl Controller for Mirror {
//!     // Any kube `Resource`: a k8s-openapi type or a `#[derive(CustomResource)]`.
//!     type Resource = ConfigMap;
//!
//!     fn manifest(&self) -> Manifest {
//!         Manifest::new("mirror").primary::<ConfigMap>().owns::<ConfigMap>()
//!     }
//!
//!     fn reconcile(&self, ctx: &Context, source: ConfigMap) -> Result<Outcome> {
//!         ctx.log().info("mirroring", &[("name", source.name_any().as_str())]);
//!         let mut copy = ConfigMap::default();
//!         copy.metadata.name = Some(format!("{}-copy", source.name_any()));
//!         copy.data = source.data.clone();
//!         Ok(Outcome::new().child(&copy))
//!     }
//! }
//!
//! capstan_guest::export!(Mirror);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --release`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component the host loads.
//!
//! # The reconcile contract
//!
//! The host calls [`Controller::add`], [`Controller::modify`],
//! [`Controller::delete`] or, for a resync, [`Controller::reconcile`]
//! (the first three forward to `reconcile` unless overridden). Which one is
//! derived from state, not from watch events: an object the controller has
//! not handled since the host started is `add`, one whose generation or
//! resourceVersion changed is `modify`, one with a deletion timestamp is
//! `delete`. Reconciles must be idempotent; the host may call them again at
//! any time.
//!
//! Returning `Err(Error::transient(..))` retries with exponential backoff;
//! `Err(Error::terminal(..))` records a Warning event and waits for the next
//! change. Either may carry a status ([`Error::with_status`], e.g.
//! `Ready=False` with the reason, built with [`conditions`]) and events;
//! the children stay as they are. Errors from the Kubernetes API convert
//! into transient errors with `?`. A child the API server refuses is
//! reported by the host (Event and `Reconciled=False`) and shows in
//! [`Context::failed_children`] at the next call.

pub mod admission;
mod api;
pub mod conditions;
mod context;
pub mod conversion;
mod error;
mod export;
pub mod http;
mod imports;
#[doc(hidden)]
pub use export::__private;
mod log;
mod manifest;
mod outcome;
pub mod scheduler;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[doc(hidden)]
pub mod wit {
    //! Generated bindings of the `capstan:operator` WIT package, and of
    //! the `wasi:http` interfaces its world imports (`wit::wasi::http`,
    //! for calls to the origins a manifest declares with
    //! [`Manifest::egress`](crate::Manifest::egress)). Not a stable
    //! interface: use the typed wrappers of this crate.
    #![allow(missing_docs, reason = "generated code")]
    wit_bindgen::generate!({
        path: "../wit",
        world: "operator",
        pub_export_macro: true,
        export_macro_name: "export_operator",
        default_bindings_module: "capstan_guest::wit",
        // wasi:http (0.4.0) and what it uses: generated here, under `wit::wasi`.
        generate_all,
    });
}

pub use api::{Api, ListParams, PatchType, Propagation};
pub use context::{Context, DEFAULT_CLUSTER, EventKind, FailedChild};
pub use error::{ApiError, ApiStatus, Error, Result};
pub use log::{Level, Log, Span};
pub use manifest::{Field, Fleet, Manifest, Mapping, Owns, Permission, Scope, Verb, Watch};
pub use outcome::{Event, Outcome};

pub use k8s_openapi;
pub use kube;
pub use serde;
pub use serde_json;

/// A controller: declares what it needs, and reconciles objects of its
/// primary kind.
///
/// Implement at least [`manifest`](Controller::manifest) and
/// [`reconcile`](Controller::reconcile); export the type with
/// [`export!`](crate::export). A fresh value is made with `Default` for
/// every call, so keep no state in it: what must survive a call belongs in
/// the cluster (status, annotations, children).
pub trait Controller: Default + 'static {
    /// The primary kind: a k8s-openapi type or a kube
    /// `#[derive(CustomResource)]` type.
    type Resource: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned + serde::Serialize;

    /// What this controller declares: primary kind, CRDs, owned and watched
    /// kinds, finalizer, permissions, resync period, concurrency. Called
    /// once when the component is loaded; must not call the API.
    fn manifest(&self) -> Manifest;

    /// Called for an object this controller has not handled before.
    /// Defaults to [`reconcile`](Controller::reconcile).
    fn add(&self, ctx: &Context, object: Self::Resource) -> Result<Outcome> {
        self.reconcile(ctx, object)
    }

    /// Called for an object that changed since it was last handled.
    /// Defaults to [`reconcile`](Controller::reconcile).
    fn modify(&self, ctx: &Context, object: Self::Resource) -> Result<Outcome> {
        self.reconcile(ctx, object)
    }

    /// Called for an object that is being deleted. With a finalizer
    /// declared, the host keeps the object until this succeeds; without one,
    /// delivery is best-effort. Children need no cleanup: they are owned and
    /// garbage collected once the object is gone. An outcome that says
    /// [`keep_children`](Outcome::keep_children) keeps them instead: the
    /// host removes its ownerReference from each before it removes the
    /// finalizer. The host applies no children and writes no status for
    /// this call; it records the events.
    ///
    /// Defaults to [`reconcile`](Controller::reconcile), with the children
    /// following the object whatever that outcome says about keeping them
    /// (a reconcile keeps children while it waits for something, which is
    /// no reason to keep them for good). Override it to keep them:
    ///
    /// ```
    /// # use capstan_guest::prelude::*;
    /// # use capstan_guest::k8s_openapi::api::core::v1::ConfigMap;
    /// # #[derive(Default)] struct Archive;
    /// # impl Controller for Archive {
    /// # type Resource = ConfigMap;
    /// # fn manifest(&self) -> Manifest { Manifest::new("archive").primary::<ConfigMap>() }
    /// # fn reconcile(&self, _: &Context, _: ConfigMap) -> Result<Outcome> { Ok(Outcome::new()) }
    /// fn delete(&self, _ctx: &Context, _object: ConfigMap) -> Result<Outcome> {
    ///     // What it made outlives it, ownerless.
    ///     Ok(Outcome::new().keep_children())
    /// }
    /// # }
    /// ```
    fn delete(&self, ctx: &Context, object: Self::Resource) -> Result<Outcome> {
        self.reconcile(ctx, object).map(Outcome::children_follow)
    }

    /// Brings the world in line with `object`. Called directly on resync,
    /// and by the default `add`, `modify` and `delete`.
    fn reconcile(&self, ctx: &Context, object: Self::Resource) -> Result<Outcome>;
}

/// A component that serves webhooks or a scheduler but no controller:
/// declares the component's [`Manifest`]. A [`Controller`] declares it in
/// [`Controller::manifest`] instead.
pub trait Component: Default + 'static {
    /// What this component declares: name, the webhooks, conversions or
    /// scheduler it serves, CRDs, permissions. Called once when the
    /// component is loaded; must not call the API.
    fn manifest(&self) -> Manifest;
}

pub use admission::Admission;
pub use conversion::Conversion;
pub use scheduler::Scheduler;

/// Everything a controller usually needs, in one import.
pub mod prelude {
    pub use crate::{
        Admission, Api, Component, Context, Controller, Conversion, Error, Event, EventKind, FailedChild, Field,
        ListParams, Manifest, Mapping, Outcome, Owns, PatchType, Permission, Result, Scheduler, Scope, Verb, Watch,
    };
    pub use kube::{Resource, ResourceExt};
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::prelude::*;
    use crate::wit::capstan::operator::types::ChildrenPolicy;

    /// Keeps the children while it waits, as a reconcile may.
    #[derive(Default)]
    struct Waiting;

    impl Controller for Waiting {
        type Resource = ConfigMap;

        fn manifest(&self) -> Manifest {
            Manifest::new("waiting").primary::<ConfigMap>()
        }

        fn reconcile(&self, _: &Context, _: ConfigMap) -> Result<Outcome> {
            Ok(Outcome::new().keep_children())
        }
    }

    #[test]
    fn the_default_delete_lets_the_children_follow_whatever_the_reconcile_keeps() {
        let ctx = |event| Context::new(event, Some("demo".into()), "a".into());
        let policy = |outcome: Result<Outcome>| outcome.expect("succeeds").into_wit().children_policy;
        assert_eq!(policy(Waiting.reconcile(&ctx(EventKind::Resync), ConfigMap::default())), ChildrenPolicy::Keep);
        assert_eq!(policy(Waiting.delete(&ctx(EventKind::Deleted), ConfigMap::default())), ChildrenPolicy::Prune);
    }
}
