//! The Capstan host: runs Kubernetes controllers written as WebAssembly
//! components.
//!
//! The host owns every conversation with the cluster; controller logic is
//! a component exporting the `capstan:operator/controller` interface (see
//! `wit/`). The pieces, in dependency order:
//!
//! - [`engine`]: the one wasmtime configuration and the epoch ticker;
//! - [`component`]: loading, validating and caching components;
//! - [`manifest`]: what a controller declares;
//! - [`mapping`]: which primary objects a change triggers;
//! - [`runtime`]: a fresh sandboxed instance per call, with limits;
//! - [`imports`]: the host functions guests call, checked by [`grants`];
//! - [`cluster`]: where objects live (the real API server or the mock);
//! - [`reconciler`]: one reconcile, from object to applied outcome;
//! - [`informer`], [`queue`], [`controller`]: shared watches, the work
//!   queue, and the loop that runs a reconciler on a cluster;
//! - [`leader`]: leader election, one Lease per controller;
//! - [`scheduler`]: custom schedulers, guest logic that picks a Node for
//!   each pending Pod that names it;
//! - [`host`], [`reload`], [`follow`], [`access`]: the host that runs
//!   components as controllers, follows a components directory and OCI
//!   references, and reviews permissions;
//! - [`metrics`] and [`server`]: Prometheus metrics and the host's HTTP
//!   endpoints (`/metrics`, `/healthz`, `/readyz`, `/status`);
//! - [`webhook`]: admission and conversion webhooks served over HTTPS;
//! - [`oci`]: components pushed to and pulled from OCI registries;
//! - [`testing`]: the mock host for authors' unit tests.

pub mod access;
pub mod bindings;
pub mod cli;
pub mod cluster;
pub mod component;
pub mod controller;
pub mod e2e;
pub mod engine;
pub mod follow;
pub mod generate;
pub mod grants;
pub mod host;
pub mod imports;
pub mod informer;
pub mod leader;
pub mod limits;
pub mod manifest;
pub mod mapping;
pub mod metrics;
pub mod object;
pub mod oci;
pub mod queue;
pub mod reconciler;
pub mod reload;
pub mod runtime;
pub mod scaffold;
pub mod scenario;
pub mod scheduler;
pub mod sdk;
pub mod server;
mod sync;
pub mod testing;
pub mod webhook;

pub use bindings::{CONTRACT_VERSION, CONTROLLER_EXPORT};
