//! Checks what a guest names in an import call before anything is sent:
//! a name, namespace, group, version or kind is spliced into a request
//! path, so one with `?`, `#`, `/` or `%` in it would change the request
//! (`delete victim?dryRun=All` deleted `victim`). The rules are the API
//! server's own:
//!
//! | field | rule |
//! |---|---|
//! | name | a DNS-1123 subdomain (lower-case alphanumerics, `-` and `.`, at most 253); for RBAC kinds, whose names may hold `:`, a path segment: no `/` or `%`, not `.` or `..` |
//! | namespace | a DNS-1123 label (lower-case alphanumerics and `-`, at most 63) |
//! | group | empty (the core group) or a DNS-1123 subdomain |
//! | version | a DNS-1123 label (`v1`, `v1beta1`) |
//! | kind | ASCII letters and digits, starting with a letter, at most 63 |
//!
//! In every field, control characters, whitespace, `?` and `#` are refused.
//!
//! ```
//! use capstan_host::runtime::imports::validate;
//! use capstan_host::object::{Gvk, ObjectRef};
//!
//! let cm = Gvk::new("", "v1", "ConfigMap");
//! assert!(validate::object_ref(&ObjectRef::new(cm.clone(), Some("app"), "web"), "").is_ok());
//! let bad = validate::object_ref(&ObjectRef::new(cm, Some("app"), "victim?dryRun=All"), "").expect_err("a query");
//! assert_eq!(bad.field, "name");
//! ```

use crate::manifest::is_dns1123_label;
use crate::object::{Gvk, ObjectRef};

/// A DNS-1123 subdomain as the API server checks it: at most 253
/// characters, dot-separated parts of lower-case alphanumerics and `-`,
/// each starting and ending with an alphanumeric (no limit per part).
fn is_dns1123_subdomain(s: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    s.len() <= 253 && s.split('.').all(part)
}

/// Group whose kinds' names are path segments, not subdomains.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Longest value quoted in an error.
const QUOTED: usize = 64;

/// A field a guest passed that the API server would not accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} {value:?}: {rule}")]
pub struct Invalid {
    /// The field, e.g. `name`, `metadata.namespace`, `regarding.kind`.
    pub field: String,
    /// The value (cut at 64 characters).
    pub value: String,
    /// What the value must be.
    pub rule: &'static str,
}

fn invalid(prefix: &str, field: &str, value: &str, rule: &'static str) -> Invalid {
    let mut quoted: String = value.chars().take(QUOTED).collect();
    if quoted.len() < value.len() {
        quoted.push('…');
    }
    Invalid { field: format!("{prefix}{field}"), value: quoted, rule }
}

/// Characters no field may hold: they end or escape a path segment.
fn has_forbidden(s: &str) -> bool {
    s.chars().any(|c| c.is_control() || c.is_whitespace() || matches!(c, '?' | '#'))
}

/// Checks a kind's group, version and kind. `prefix` goes before each
/// field name in the error (e.g. `regarding.`).
///
/// # Errors
///
/// [`Invalid`] naming the first field that breaks its rule.
pub fn gvk(kind: &Gvk, prefix: &str) -> Result<(), Invalid> {
    if has_forbidden(&kind.group) || !(kind.group.is_empty() || is_dns1123_subdomain(&kind.group)) {
        return Err(invalid(prefix, "group", &kind.group, "must be empty or a DNS-1123 subdomain"));
    }
    if has_forbidden(&kind.version) || !is_dns1123_label(&kind.version) {
        return Err(invalid(prefix, "version", &kind.version, "must be a DNS-1123 label, e.g. v1"));
    }
    let k = &kind.kind;
    let well_formed = k.len() <= 63
        && k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && k.chars().all(|c| c.is_ascii_alphanumeric());
    if !well_formed {
        return Err(invalid(prefix, "kind", k, "must be ASCII letters and digits, starting with a letter"));
    }
    Ok(())
}

/// Checks a namespace.
///
/// # Errors
///
/// [`Invalid`] when it is not a DNS-1123 label.
pub fn namespace(namespace: &str, prefix: &str) -> Result<(), Invalid> {
    if has_forbidden(namespace) || !is_dns1123_label(namespace) {
        return Err(invalid(prefix, "namespace", namespace, "must be a DNS-1123 label"));
    }
    Ok(())
}

/// Checks the name of an object of `kind`.
///
/// # Errors
///
/// [`Invalid`] when the API server would not take it as that kind's name.
pub fn name(kind: &Gvk, name: &str, prefix: &str) -> Result<(), Invalid> {
    if has_forbidden(name) {
        return Err(invalid(prefix, "name", name, "must not hold whitespace, control characters, `?` or `#`"));
    }
    if kind.group == RBAC_GROUP {
        let segment = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '%']);
        if !segment {
            return Err(invalid(prefix, "name", name, "must be a path segment: no `/` or `%`, not `.` or `..`"));
        }
    } else if !is_dns1123_subdomain(name) {
        return Err(invalid(prefix, "name", name, "must be a DNS-1123 subdomain"));
    }
    Ok(())
}

/// Checks every part of an object reference.
///
/// # Errors
///
/// [`Invalid`] naming the first field that breaks its rule.
pub fn object_ref(r: &ObjectRef, prefix: &str) -> Result<(), Invalid> {
    gvk(&r.gvk, prefix)?;
    if let Some(ns) = &r.namespace {
        namespace(ns, prefix)?;
    }
    name(&r.gvk, &r.name, prefix)
}

/// Checks the identity of an object passed as JSON: `apiVersion`, `kind`,
/// `metadata.namespace`, `metadata.name`.
///
/// # Errors
///
/// [`Invalid`] naming the first field that breaks its rule.
pub fn object_identity(r: &ObjectRef) -> Result<(), Invalid> {
    gvk(&r.gvk, "").map_err(|e| match e.field.as_str() {
        "group" | "version" => Invalid { field: "apiVersion".to_owned(), ..e },
        _ => e,
    })?;
    if let Some(ns) = &r.namespace {
        namespace(ns, "metadata.")?;
    }
    name(&r.gvk, &r.name, "metadata.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(ns: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), ns, name)
    }

    #[test]
    fn names_that_would_change_the_request_path_are_refused() {
        for bad in ["victim?dryRun=All", "a/b", "..", "a#b", "a%2Fb", "A", "", "a b", "a\nb", &"a".repeat(254)] {
            let e = object_ref(&cm(Some("app"), bad), "").expect_err(bad);
            assert_eq!(e.field, "name", "{bad:?}: {e}");
        }
        let long_part = "a".repeat(100);
        for good in ["web", "web-1.example", "a", long_part.as_str()] {
            object_ref(&cm(Some("app"), good), "").expect(good);
        }
    }

    #[test]
    fn rbac_names_may_hold_colons_but_not_slashes() {
        let role = Gvk::new(RBAC_GROUP, "v1", "ClusterRole");
        name(&role, "system:controller:x", "").expect("a colon is fine");
        for bad in ["a/b", "..", "a%b", "a?b"] {
            assert!(name(&role, bad, "").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn namespaces_groups_versions_and_kinds_are_checked_and_named() {
        let e = object_ref(&cm(Some("kube-system/x"), "a"), "regarding.").expect_err("slash");
        assert_eq!(e.field, "regarding.namespace");
        let e = gvk(&Gvk::new("apps?x=1", "v1", "Deployment"), "").expect_err("query");
        assert_eq!(e.field, "group");
        let e = gvk(&Gvk::new("apps", "v1/../..", "Deployment"), "").expect_err("path");
        assert_eq!(e.field, "version");
        let e = gvk(&Gvk::new("", "v1", "Config Map"), "").expect_err("space");
        assert_eq!(e.field, "kind");
        gvk(&Gvk::new("", "v1", "ConfigMap"), "").expect("core");
        gvk(&Gvk::new("examples.capstan.dev", "v1alpha1", "Greeting"), "").expect("custom");
    }

    #[test]
    fn object_identity_names_the_json_fields() {
        let r = ObjectRef::new(Gvk::from_api_version("a/b/c", "ConfigMap"), None, "x");
        assert_eq!(object_identity(&r).expect_err("apiVersion").field, "apiVersion");
        let r = cm(Some("app"), "x?y");
        assert_eq!(object_identity(&r).expect_err("name").field, "metadata.name");
    }

    #[test]
    fn error_messages_read_right() {
        let e = name(&Gvk::new("", "v1", "ConfigMap"), "victim?dryRun=All", "").expect_err("query");
        assert_eq!(
            e.to_string(),
            r#"invalid name "victim?dryRun=All": must not hold whitespace, control characters, `?` or `#`"#
        );
        let long = "x".repeat(300);
        let e = namespace(&long, "").expect_err("long");
        assert!(e.value.chars().count() == 65 && e.value.ends_with('…'), "{e}");
    }
}
