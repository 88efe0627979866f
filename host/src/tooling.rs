//! The author's tools: the `capstan` commands and what they build on.
//!
//! - [`cli`]: the command line (`run`, `dev`, `test`, `e2e`, `new`, `gen`,
//!   `push`, `cluster`, …);
//! - [`generate`]: CRD, RBAC, Deployment and webhook manifests;
//! - [`scaffold`] and [`sdk`]: new projects, and the guest SDKs and WIT
//!   carried inside the binary;
//! - [`testing`]: the mock host for authors' unit tests;
//! - [`scenario`] and [`e2e`]: data-driven tests on the mock host and on a
//!   real cluster.

pub mod cli;
pub mod e2e;
pub mod generate;
pub mod scaffold;
pub mod scenario;
pub mod sdk;
pub mod testing;
