//! The Capstan host: runs Kubernetes controllers written as WebAssembly
//! components.
//!
//! The host owns every conversation with the cluster; controller logic is
//! a component exporting the `capstan:operator/controller` interface (see
//! `wit/`). The modules are grouped by layer, each using those above it:
//!
//! - [`manifest`], [`object`], [`metrics`] and [`telemetry`]: what a
//!   controller declares, the JSON helpers every layer shares, the
//!   Prometheus metrics every layer counts into, and the export of the
//!   host's spans to an OpenTelemetry collector;
//! - [`cluster`]: where objects live (the real API server or the mock);
//! - [`runtime`]: the Wasm side — one wasmtime engine, loading and caching
//!   components, a fresh sandboxed instance per call with limits, and the
//!   host functions guests call, checked against their grants;
//! - [`policy`]: what a component may do as RBAC rules, derived from its
//!   manifest: the one set [`control::access`] reviews and
//!   [`tooling::generate`] renders, with the Kubernetes name rules;
//! - [`control`]: the control loop — shared watches, the work queue, one
//!   reconcile from object to applied outcome, the loop that runs it,
//!   leader election, permission reviews and custom schedulers;
//! - [`serve`]: the running host — components loaded from a directory or
//!   an OCI reference, its HTTP endpoints, and the admission and conversion
//!   webhooks;
//! - [`tooling`]: the author's commands — the CLI, generated manifests,
//!   scaffolding, the embedded SDKs, scenario tests and the mock host
//!   ([`testing`]).

pub mod cluster;
pub mod control;
pub mod manifest;
pub mod metrics;
pub mod object;
pub mod policy;
pub mod runtime;
pub mod serve;
mod sync;
pub mod telemetry;
pub mod tooling;

pub use runtime::bindings::{CONTRACT_VERSION, CONTROLLER_EXPORT};
/// The mock host for authors' unit tests (`capstan_host::testing::MockHost`).
pub use tooling::testing;
