//! Kubernetes name rules, checked with an error that says which rule a name
//! broke, and normalisation of free-form names into valid ones.
//!
//! The predicates themselves live in [`crate::manifest`]
//! ([`is_dns1123_label`], [`is_dns1123_subdomain`], [`is_dns1035_label`]);
//! this module names the rules and turns user input (`MyApp`, `my_app`)
//! into the shapes Kubernetes wants (`my-app`, `MyApp`, `myapps`).
//!
//! ```
//! use capstan_host::policy::names::{self, Rule};
//!
//! assert_eq!(names::to_label("MyApp"), "my-app");
//! assert_eq!(names::to_upper_camel("my-app"), "MyApp");
//! assert_eq!(names::plural("policy"), "policies");
//! assert!(names::check("namespace", "Ops", Rule::Dns1123Label).is_err());
//! ```

use std::fmt;

use super::Error;
use crate::manifest::{is_dns1035_label, is_dns1123_label, is_dns1123_subdomain};

/// A Kubernetes naming rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Namespaces, container names, most labels: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63.
    Dns1123Label,
    /// Most object names: DNS-1123 labels joined by dots, at most 253.
    Dns1123Subdomain,
    /// CRD plural, singular and short names, categories, the lower-cased
    /// kind: a DNS-1123 label that starts with a letter.
    Dns1035Label,
    /// A kind: UpperCamelCase ASCII letters and digits whose lower-cased
    /// form is a DNS-1035 label.
    Kind,
}

impl Rule {
    /// True if `value` follows the rule.
    pub fn allows(self, value: &str) -> bool {
        match self {
            Rule::Dns1123Label => is_dns1123_label(value),
            Rule::Dns1123Subdomain => is_dns1123_subdomain(value),
            Rule::Dns1035Label => is_dns1035_label(value),
            Rule::Kind => {
                value.starts_with(|c: char| c.is_ascii_uppercase())
                    && value.chars().all(|c| c.is_ascii_alphanumeric())
                    && is_dns1035_label(&value.to_ascii_lowercase())
            }
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Dns1123Label => {
                "DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, \
                 at most 63 characters)"
            }
            Rule::Dns1123Subdomain => "DNS-1123 subdomain (DNS-1123 labels separated by '.', at most 253 characters)",
            Rule::Dns1035Label => {
                "DNS-1035 label (lower-case letters, digits and '-', starting with a letter and ending with a letter \
                 or digit, at most 63 characters)"
            }
            Rule::Kind => "kind (UpperCamelCase letters and digits, starting with a letter, at most 63 characters)",
        })
    }
}

/// Checks `value` against `rule`; `what` names the value in the error
/// (`namespace`, `CRD greetings.example.com spec.names.plural`).
///
/// # Errors
///
/// [`Error::Name`] when the value breaks the rule.
pub fn check(what: impl Into<String>, value: &str, rule: Rule) -> Result<(), Error> {
    if rule.allows(value) { Ok(()) } else { Err(Error::Name { what: what.into(), value: value.to_owned(), rule }) }
}

/// Normalises a free-form name into DNS-1123 label shape: word boundaries
/// of camel case, `_`, spaces and other punctuation become `-`, letters are
/// lower-cased, repeated and outer `-` are dropped. The result still needs
/// [`check`]: it may be empty, too long or start with a digit.
///
/// ```
/// use capstan_host::policy::names::to_label;
///
/// assert_eq!(to_label("HTTPServer"), "http-server");
/// assert_eq!(to_label("my_app v2"), "my-app-v2");
/// ```
pub fn to_label(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_alphanumeric() {
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1).copied();
            let boundary = c.is_ascii_uppercase()
                && prev.is_some_and(|p| {
                    p.is_ascii_lowercase()
                        || p.is_ascii_digit()
                        || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()))
                });
            if boundary && !out.ends_with('-') {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

/// `my-app` → `MyApp`: each `-`/`_`-separated word capitalised.
pub fn to_upper_camel(label: &str) -> String {
    label
        .split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// `my-app` → `my_app`: the Rust crate (library) name of a package.
pub fn to_snake(label: &str) -> String {
    label.replace('-', "_")
}

/// The English plural of a lower-case singular, the way kube-derive and
/// kubebuilder form it: `-s`, `-x`, `-z`, `-ch`, `-sh` take `es`; a
/// consonant before `-y` turns it into `ies`; everything else takes `s`.
pub fn plural(singular: &str) -> String {
    let vowel_before_y = singular.strip_suffix('y').is_some_and(|stem| stem.ends_with(['a', 'e', 'i', 'o', 'u']));
    if ["s", "x", "z", "ch", "sh"].iter().any(|s| singular.ends_with(s)) {
        format!("{singular}es")
    } else if let Some(stem) = singular.strip_suffix('y')
        && !vowel_before_y
        && !stem.is_empty()
    {
        format!("{stem}ies")
    } else {
        format!("{singular}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_form_names_normalise_to_labels() {
        assert_eq!(to_label("MyApp"), "my-app");
        assert_eq!(to_label("my_app"), "my-app");
        assert_eq!(to_label("  My  App!! "), "my-app");
        assert_eq!(to_label("HTTPServer2"), "http-server2");
        assert_eq!(to_label("backup"), "backup");
        assert_eq!(to_label("--"), "");
    }

    #[test]
    fn labels_convert_to_camel_and_snake_case() {
        assert_eq!(to_upper_camel("my-app"), "MyApp");
        assert_eq!(to_upper_camel("backup"), "Backup");
        assert_eq!(to_snake("my-app"), "my_app");
    }

    #[test]
    fn plurals_follow_english_rules_like_kube_derive() {
        assert_eq!(plural("greeting"), "greetings");
        assert_eq!(plural("policy"), "policies");
        assert_eq!(plural("gateway"), "gateways");
        assert_eq!(plural("ingress"), "ingresses");
        assert_eq!(plural("box"), "boxes");
        assert_eq!(plural("patch"), "patches");
    }

    #[test]
    fn names_are_checked_against_the_kubernetes_rules() {
        assert!(check("namespace", "capstan-system", Rule::Dns1123Label).is_ok());
        assert!(check("name", "9lives", Rule::Dns1123Label).is_ok());
        assert!(check("plural", "9lives", Rule::Dns1035Label).is_err());
        assert!(check("name", "a.b", Rule::Dns1123Subdomain).is_ok());
        assert!(check("name", "a..b", Rule::Dns1123Subdomain).is_err());
        assert!(check("kind", "Greeting", Rule::Kind).is_ok());
        assert!(check("kind", "greeting", Rule::Kind).is_err());
        assert!(check("kind", "Greet_ing", Rule::Kind).is_err());
        assert!(check("kind", &format!("G{}", "x".repeat(63)), Rule::Kind).is_err());
    }

    #[test]
    fn a_broken_name_is_reported_with_the_rule_it_breaks() {
        let err = check("namespace", "Ops", Rule::Dns1123Label).expect_err("upper case");
        assert!(matches!(&err, Error::Name { rule: Rule::Dns1123Label, .. }));
        assert!(
            err.to_string().starts_with("namespace \"Ops\" is not a valid DNS-1123 label (lower-case letters"),
            "{err}"
        );
    }
}
