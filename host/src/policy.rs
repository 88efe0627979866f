//! What a component may do in the cluster, as RBAC rules: one set of
//! rules derived from its manifest, which [`control::access`] reviews
//! against the API server before the component runs, and `capstan gen`
//! renders as ClusterRoles and Roles. It sits below both, beside the
//! [grants](crate::runtime::grants) the host checks every call against.
//!
//! - [`names`]: the Kubernetes name rules, checked with an error that says
//!   which rule a name broke, and normalisation of free-form names;
//! - `resources`: which resource (plural) serves a kind, and whether it is
//!   namespaced or has a status subresource ([`PluralOverride`] for kinds
//!   defined elsewhere);
//! - `rules`: the rules the host and each component need, from
//!   [`Grants::from_manifest`] plus what the host does on a component's
//!   behalf.
//!
//! [`control::access`]: crate::control::access
//! [`Grants::from_manifest`]: crate::runtime::grants::Grants::from_manifest

pub mod names;
mod resources;
mod rules;

pub use resources::PluralOverride;
pub(crate) use resources::Resources;
pub(crate) use rules::{Rules, component_rules, host_rules, member_rules};

use names::Rule;

/// Why the rules cannot be worked out.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name breaks a Kubernetes naming rule.
    #[error("{what} {value:?} is not a valid {rule}")]
    Name {
        /// What the name is for.
        what: String,
        /// The name as given.
        value: String,
        /// The rule it breaks.
        rule: Rule,
    },
    /// No component defines the kind's CRD, it is not a common built-in
    /// kind, and no `--plural` names its resource.
    #[error(
        "unknown kind {kind} in group {group:?}: no component defines its CRD and it is not a common built-in kind; \
         pass --plural {}=<plural>",
        kind_key(.kind, .group)
    )]
    UnknownKind {
        /// API group.
        group: String,
        /// Kind.
        kind: String,
    },
    /// A `--plural` value is not `KIND.GROUP=PLURAL`.
    #[error("invalid plural {0:?}: expected KIND.GROUP=PLURAL, or KIND=PLURAL for the core group")]
    PluralOverride(String),
}

fn kind_key(kind: &str, group: &str) -> String {
    if group.is_empty() { kind.to_owned() } else { format!("{kind}.{group}") }
}
