//! The host's one `bindgen!` of the `capstan:operator` WIT package.
//!
//! Generated types stay in here; the rest of the host converts to and from
//! its own types (`object`, `cluster`, `manifest`) at the boundary, so a
//! future contract version can be added beside this one.

#![allow(missing_docs, reason = "generated code")]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "operator",
    // Imports are async because they talk to the API server. None are
    // trappable: an API failure is a WIT error the guest handles, never a
    // trap.
    imports: { default: async },
    exports: { default: async },
});

/// The contract version this host implements.
pub const CONTRACT_VERSION: &str = "0.1.0";

/// The fully qualified name of the controller interface guests export.
pub const CONTROLLER_EXPORT: &str = "capstan:operator/controller@0.1.0";
