//! The control loop: from a change in the cluster to a reconciled object.
//!
//! - [`informer`]: one shared watch and cache per kind;
//! - [`mapping`]: which primary objects a change triggers;
//! - [`queue`]: the work queue (deduplication, backoff, per-key order);
//! - [`reconciler`]: one reconcile, from object to applied outcome;
//! - [`controller`]: the loop that runs a reconciler on a cluster;
//! - [`leader`]: leader election, one Lease per controller;
//! - [`access`]: a component's permissions reviewed against the host's;
//! - [`clusters`]: the clusters a host process serves, by name, which
//!   fleet controllers reach their members through;
//! - [`scheduler`]: custom schedulers, guest logic that picks a Node for
//!   each pending Pod that names it.

pub mod access;
pub mod clusters;
pub mod controller;
pub mod informer;
pub mod leader;
pub mod mapping;
pub mod queue;
pub mod reconciler;
pub mod scheduler;
