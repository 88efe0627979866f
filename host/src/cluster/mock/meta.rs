//! Object metadata the mock cluster fills in and checks: timestamps, uids,
//! generated names, and the validation rules the API server applies to
//! names, labels, annotations, finalizers and owner references.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

/// Formats a time as RFC 3339 in UTC with second precision, the way the API
/// server writes `metav1.Time` (`2024-01-01T00:00:00Z`). Times before the
/// Unix epoch are clamped to it.
pub(super) fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Converts days since 1970-01-01 to a proleptic Gregorian date
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A bijective 64-bit mixer (the splitmix64 finaliser): distinct inputs give
/// distinct, random-looking outputs.
fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uuid-looking uid for the `n`th object; unique per `n` (the counter is
/// the last group) and deterministic, so test runs are reproducible.
pub(super) fn uid(n: u64) -> String {
    let a = mix(n);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((a >> 48) & 0x3fff),
        n & 0xffff_ffff_ffff
    )
}

/// The API server's alphabet for `generateName` suffixes (no vowels, no
/// look-alike digits).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Longest `generateName` prefix kept, so that prefix and suffix fit a
/// 63-character label.
const MAX_GENERATE_NAME_PREFIX: usize = 58;

/// The name for `generateName: prefix`: the prefix (truncated like the API
/// server does) and five characters derived from `n`.
pub(super) fn generated_name(prefix: &str, n: u64) -> String {
    let mut name: String = prefix.chars().take(MAX_GENERATE_NAME_PREFIX).collect();
    let mut x = mix(n);
    let base = SUFFIX_ALPHABET.len() as u64;
    for _ in 0..5 {
        let i = usize::try_from(x % base).expect("a remainder below 27 fits in usize");
        name.push(char::from(SUFFIX_ALPHABET[i]));
        x /= base;
    }
    name
}

/// True for an RFC 1123 DNS label: at most 63 lower-case alphanumerics or
/// `-`, starting and ending with an alphanumeric.
pub(super) fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// True for an RFC 1123 DNS subdomain: at most 253 characters of
/// dot-separated DNS labels.
pub(super) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// True for the name part of a qualified name (label keys, finalizers): at
/// most 63 alphanumerics, `-`, `_` or `.`, starting and ending with an
/// alphanumeric.
fn is_qualified_name_part(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// True for a qualified name such as a label key: `name` or
/// `dns.subdomain/name`.
pub(super) fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_qualified_name_part(name),
        None => is_qualified_name_part(s),
    }
}

/// True for a label value: empty, or a qualified name part.
pub(crate) fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_qualified_name_part(s)
}

/// Checks an object name. Most kinds take DNS subdomains; RBAC kinds take
/// any path segment name (`system:controller:x` is a valid ClusterRole).
pub(super) fn validate_name(name: &str, path_segment_only: bool) -> Result<(), String> {
    if path_segment_only {
        if name == "." || name == ".." || name.contains(['/', '%']) {
            return Err(format!("metadata.name: invalid value {name:?}: may not be '.' or '..' or contain '/' or '%'"));
        }
        return Ok(());
    }
    if !is_dns_subdomain(name) {
        return Err(format!(
            "metadata.name: invalid value {name:?}: a lowercase RFC 1123 subdomain must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// Checks a namespace name (a DNS label).
pub(super) fn validate_namespace(namespace: &str) -> Result<(), String> {
    if !is_dns_label(namespace) {
        return Err(format!("metadata.namespace: invalid value {namespace:?}: must be a lowercase RFC 1123 label"));
    }
    Ok(())
}

/// Checks labels, annotations, finalizers and owner references the way the
/// API server's object-meta validation does.
pub(super) fn validate_metadata(meta: &Map<String, Value>) -> Result<(), String> {
    if let Some(labels) = meta.get("labels").filter(|v| !v.is_null()) {
        let labels = labels.as_object().ok_or("metadata.labels: must be a map of strings")?;
        for (key, value) in labels {
            if !is_qualified_name(key) {
                return Err(format!("metadata.labels: invalid key {key:?}: must be a qualified name"));
            }
            let value = value.as_str().ok_or_else(|| format!("metadata.labels.{key}: must be a string"))?;
            if !is_label_value(value) {
                return Err(format!("metadata.labels: invalid value {value:?}: must be a valid label value"));
            }
        }
    }
    if let Some(annotations) = meta.get("annotations").filter(|v| !v.is_null()) {
        let annotations = annotations.as_object().ok_or("metadata.annotations: must be a map of strings")?;
        for (key, value) in annotations {
            if !is_qualified_name(&key.to_ascii_lowercase()) {
                return Err(format!("metadata.annotations: invalid key {key:?}: must be a qualified name"));
            }
            if !value.is_string() {
                return Err(format!("metadata.annotations.{key}: must be a string"));
            }
        }
    }
    if let Some(finalizers) = meta.get("finalizers").filter(|v| !v.is_null()) {
        let finalizers = finalizers.as_array().ok_or("metadata.finalizers: must be a list of strings")?;
        for finalizer in finalizers {
            match finalizer.as_str() {
                Some(f) if is_qualified_name(f) => {}
                _ => return Err(format!("metadata.finalizers: invalid value {finalizer}: must be a qualified name")),
            }
        }
    }
    if let Some(owners) = meta.get("ownerReferences").filter(|v| !v.is_null()) {
        let owners = owners.as_array().ok_or("metadata.ownerReferences: must be a list")?;
        for owner in owners {
            for field in ["apiVersion", "kind", "name", "uid"] {
                if owner.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                    return Err(format!("metadata.ownerReferences.{field}: required value"));
                }
            }
        }
        let controllers = owners.iter().filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true)).count();
        if controllers > 1 {
            return Err("metadata.ownerReferences: only one reference can have controller set to true".to_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    #[test]
    fn timestamps_are_formatted_as_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(1_704_067_200)), "2024-01-01T00:00:00Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(951_827_696)), "2000-02-29T12:34:56Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_millis(4_102_444_799_999)), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn uids_are_unique_and_uuid_shaped() {
        let uids: BTreeSet<String> = (0..1000).map(uid).collect();
        assert_eq!(uids.len(), 1000);
        let one = uid(7);
        let groups: Vec<usize> = one.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
    }

    #[test]
    fn generated_names_keep_the_prefix_and_add_five_characters() {
        let name = generated_name("web-", 1);
        assert!(name.starts_with("web-"));
        assert_eq!(name.len(), 9);
        assert!(is_dns_subdomain(&name));
        assert_ne!(generated_name("web-", 1), generated_name("web-", 2));
        assert_eq!(generated_name(&"a".repeat(80), 3).len(), 63);
    }

    #[test]
    fn names_follow_dns_rules_except_for_rbac() {
        assert!(validate_name("web-1.example", false).is_ok());
        assert!(validate_name("Web", false).is_err());
        assert!(validate_name("-web", false).is_err());
        assert!(validate_name("system:controller:x", false).is_err());
        assert!(validate_name("system:controller:x", true).is_ok());
        assert!(validate_name("a/b", true).is_err());
        assert!(validate_namespace("prod").is_ok());
        assert!(validate_namespace("prod.eu").is_err());
    }

    #[test]
    fn metadata_validation_rejects_bad_labels_finalizers_and_owners() {
        let ok =
            json!({"labels": {"app.kubernetes.io/name": "web", "tier": ""}, "finalizers": ["example.com/cleanup"]});
        assert!(validate_metadata(ok.as_object().expect("object")).is_ok());
        for bad in [
            json!({"labels": {"bad key": "x"}}),
            json!({"labels": {"a": "no spaces"}}),
            json!({"labels": {"a": 1}}),
            json!({"annotations": {"a": 1}}),
            json!({"finalizers": ["not a name"]}),
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]}),
        ] {
            assert!(validate_metadata(bad.as_object().expect("object")).is_err(), "{bad}");
        }
    }
}
