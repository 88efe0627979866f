//! The Wasm runtime: everything between the host and a component.
//!
//! - [`engine`]: the one wasmtime configuration and the epoch ticker;
//! - [`component`]: loading, validating and caching components;
//! - [`bindings`]: the WIT contract versions the host serves;
//! - [`invocation`]: a fresh sandboxed instance per call, with [`limits`];
//! - [`imports`]: the host functions guests call, checked by [`grants`];
//! - [`nodes`]: the Nodes a scheduler decides over, handed to each instance
//!   as changes.

pub mod bindings;
pub mod component;
pub mod engine;
pub mod grants;
pub mod imports;
pub mod invocation;
pub mod limits;
pub mod nodes;
