//! Kubernetes quantities (`500m`, `2`, `1.5`, `128Mi`, `1G`, `1e3`) in
//! milli-units, and what a Pod requests, counted the way kube-scheduler
//! counts it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Resource amounts by name (`cpu`, `memory`, `pods`, …), in milli-units.
pub type Resources = BTreeMap<String, i64>;

/// Most digits a quantity may have (more do not fit in milli-units anyway).
const MAX_DIGITS: usize = 30;

/// Parses a quantity into milli-units, exactly (no floating point), rounding
/// up like Kubernetes' `MilliValue`. `None` when `s` is not a quantity or
/// its value does not fit in an `i64`.
///
/// ```
/// use capstan_host::control::scheduler::quantity::parse_milli;
///
/// assert_eq!(parse_milli("500m"), Some(500));
/// assert_eq!(parse_milli("1.5Gi"), Some(1_610_612_736_000));
/// assert_eq!(parse_milli("lots"), None);
/// ```
pub fn parse_milli(s: &str) -> Option<i64> {
    let s = s.trim();
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') || int.len() + frac.len() > MAX_DIGITS {
        return None;
    }
    let mantissa: u128 = format!("{int}{frac}").parse().ok()?;
    // The value is mantissa × 10^-len(frac) × base^exp; in milli-units, × 1000.
    let (binary, exp): (bool, i32) = match suffix {
        "" => (false, 0),
        "m" => (false, -3),
        "k" => (false, 3),
        "M" => (false, 6),
        "G" => (false, 9),
        "T" => (false, 12),
        "P" => (false, 15),
        "E" => (false, 18),
        "Ki" => (true, 10),
        "Mi" => (true, 20),
        "Gi" => (true, 30),
        "Ti" => (true, 40),
        "Pi" => (true, 50),
        "Ei" => (true, 60),
        e if e.starts_with(['e', 'E']) => (false, e[1..].parse().ok()?),
        _ => return None,
    };
    let frac_digits = i32::try_from(frac.len()).ok()?;
    let pow10 = |n: i32| 10u128.checked_pow(u32::try_from(n).ok()?);
    let (numerator, denominator) = if binary {
        (mantissa.checked_mul(1000)?.checked_mul(1u128 << exp)?, pow10(frac_digits)?)
    } else {
        let e10 = exp.checked_add(3)?.checked_sub(frac_digits)?;
        if mantissa == 0 {
            (0, 1)
        } else if e10 >= 0 {
            (mantissa.checked_mul(pow10(e10)?)?, 1)
        } else {
            (mantissa, pow10(-e10).unwrap_or(u128::MAX))
        }
    };
    let milli = i64::try_from(numerator.div_ceil(denominator)).ok()?;
    Some(if negative { -milli } else { milli })
}

/// A map of quantities in milli-units; one that does not parse counts as 0.
pub fn resources<'a>(quantities: impl IntoIterator<Item = (&'a String, &'a Quantity)>) -> Resources {
    quantities.into_iter().map(|(name, q)| (name.clone(), parse_milli(&q.0).unwrap_or(0))).collect()
}

/// What `pod` requests: the sum over its containers, or the largest of its
/// init containers where that is more, plus its overhead; and `pods`:
/// 1000 (one Pod). The same as the guest SDK's `pod_requests`.
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut total = Resources::new();
    if let Some(spec) = &pod.spec {
        let requests =
            |c: &Container| resources(c.resources.as_ref().and_then(|r| r.requests.as_ref()).into_iter().flatten());
        for c in &spec.containers {
            for (name, amount) in requests(c) {
                *total.entry(name).or_default() += amount;
            }
        }
        for c in spec.init_containers.iter().flatten() {
            for (name, amount) in requests(c) {
                let slot = total.entry(name).or_default();
                *slot = (*slot).max(amount);
            }
        }
        for (name, amount) in resources(spec.overhead.iter().flatten()) {
            *total.entry(name).or_default() += amount;
        }
    }
    total.insert("pods".into(), 1000);
    total
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn quantities_parse_exactly_to_milli_units_rounding_up() {
        assert_eq!(parse_milli("500m"), Some(500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("+1"), Some(1000));
        assert_eq!(parse_milli("-1"), Some(-1000));
        assert_eq!(parse_milli("1Ki"), Some(1_024_000));
        assert_eq!(parse_milli("128Mi"), Some(128 * 1024 * 1024 * 1000));
        assert_eq!(parse_milli("0.5Gi"), Some(512 * 1024 * 1024 * 1000));
        assert_eq!(parse_milli("1G"), Some(1_000_000_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("1E-3"), Some(1));
        assert_eq!(parse_milli("0.1m"), Some(1), "rounded up");
        assert_eq!(parse_milli(".5"), Some(500));
        assert_eq!(parse_milli("0"), Some(0));
    }

    #[test]
    fn what_is_not_a_quantity_or_does_not_fit_is_none() {
        for bad in
            ["", "lots", "1Qi", "1..2", ".", "m", "1e", "9E", "100Ei", "1e400", "12345678901234567890123456789012"]
        {
            assert_eq!(parse_milli(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_pod_requests_its_containers_sum_or_its_largest_init_container_plus_overhead() {
        let pod: Pod = serde_json::from_value(json!({
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m"}}},
                ],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1", "memory": "1Mi"}}}],
                "overhead": {"cpu": "10m"},
            }
        }))
        .expect("a pod");
        let r = pod_requests(&pod);
        assert_eq!(r["cpu"], 1010);
        assert_eq!(r["memory"], 64 * 1024 * 1024 * 1000);
        assert_eq!(r["pods"], 1000);
    }
}
