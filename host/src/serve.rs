//! The running host: what it runs, where it gets it, and what it serves.
//!
//! - [`host`]: the host that runs components as controllers;
//! - [`fleet`]: many clusters from one host, one [`host::Host`] each;
//! - [`reload`]: following a components directory;
//! - [`follow`] and [`oci`]: components pushed to, pulled from and followed
//!   in OCI registries;
//! - [`server`]: the host's HTTP endpoints (`/metrics`, `/healthz`,
//!   `/readyz`, `/status`);
//! - [`webhook`]: admission and conversion webhooks served over HTTPS.

pub mod fleet;
pub mod follow;
pub mod host;
pub mod oci;
pub mod reload;
pub mod server;
pub mod webhook;
