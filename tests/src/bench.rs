//! Measuring helpers for the benchmarks: the API server's request counters
//! and a process's resource use.
//!
//! # Caveats
//!
//! `apiserver_request_total` counts a request when it ends: an open watch
//! is counted only once it closes, so watches that stay open through a
//! measurement are not in its delta.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use kube::Client;

/// Verbs (as `apiserver_request_total` spells them) that change state.
pub const MUTATING_VERBS: &[&str] = &["POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"];

/// Requests the API server has served, from `apiserver_request_total`,
/// by `VERB resource[/subresource]`.
///
/// ```
/// use capstan_tests::bench::RequestCounts;
///
/// let text = r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="APPLY",version="v1"} 7
/// apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 2
/// apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 9"#;
/// let counts = RequestCounts::parse(text, &["configmaps"]);
/// assert_eq!(counts.writes(), 7.0);
/// assert_eq!(counts.reads(), 2.0);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestCounts {
    /// Requests by `VERB resource[/subresource]`.
    pub by_call: BTreeMap<String, f64>,
}

impl RequestCounts {
    /// The counters of `resources` (plural names, any group) in a
    /// Prometheus text exposition.
    pub fn parse(metrics: &str, resources: &[&str]) -> Self {
        let mut by_call = BTreeMap::new();
        for line in metrics.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else { continue };
            let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
            let Ok(value) = value.trim().parse::<f64>() else { continue };
            let label = |name: &str| {
                let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
                labels[start..].split('"').next()
            };
            let (Some(resource), Some(verb)) = (label("resource"), label("verb")) else { continue };
            if !resources.contains(&resource) {
                continue;
            }
            let call = match label("subresource").filter(|s| !s.is_empty()) {
                Some(sub) => format!("{verb} {resource}/{sub}"),
                None => format!("{verb} {resource}"),
            };
            *by_call.entry(call).or_insert(0.0) += value;
        }
        Self { by_call }
    }

    /// Scrapes the API server's `/metrics` (the client needs `get` on that
    /// non-resource URL) and keeps the counters of `resources`.
    ///
    /// # Errors
    ///
    /// When `/metrics` cannot be read.
    pub async fn scrape(client: &Client, resources: &[&str]) -> Result<Self> {
        let request = http::Request::get("/metrics").body(Vec::new()).expect("a valid request");
        let text = client.request_text(request).await.context("reading the API server's /metrics")?;
        Ok(Self::parse(&text, resources))
    }

    /// What was served since `before`.
    pub fn since(&self, before: &Self) -> Self {
        let by_call = self
            .by_call
            .iter()
            .map(|(call, n)| (call.clone(), n - before.by_call.get(call).copied().unwrap_or(0.0)))
            .filter(|(_, n)| *n != 0.0)
            .collect();
        Self { by_call }
    }

    /// Requests with a [mutating verb](MUTATING_VERBS).
    pub fn writes(&self) -> f64 {
        self.by_call.iter().filter(|(call, _)| is_mutating(call)).fold(0.0, |sum, (_, n)| sum + n)
    }

    /// Requests with any other verb (`GET`, `LIST`, `WATCH`).
    pub fn reads(&self) -> f64 {
        self.by_call.iter().filter(|(call, _)| !is_mutating(call)).fold(0.0, |sum, (_, n)| sum + n)
    }
}

fn is_mutating(call: &str) -> bool {
    call.split(' ').next().is_some_and(|verb| MUTATING_VERBS.contains(&verb))
}

/// Resets the peak resident memory (`VmHWM`) of process `pid` to what it
/// uses now (`5` into `/proc/<pid>/clear_refs`), so that a later
/// [`peak_rss_mib`](crate::peak_rss_mib) gives the peak since.
///
/// # Errors
///
/// When the process is gone or is not ours to change.
pub fn reset_peak_rss(pid: u32) -> Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").with_context(|| format!("resetting VmHWM of {pid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="APPLY",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="APPLY",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="examples.capstan.dev",resource="greetings",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 8
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 1e+01
"#;

    #[test]
    fn counts_are_summed_over_codes_and_split_by_subresource() {
        let counts = RequestCounts::parse(METRICS, &["configmaps", "greetings"]);
        assert_eq!(counts.by_call["APPLY configmaps"], 7.0);
        assert_eq!(counts.by_call["APPLY greetings/status"], 5.0);
        assert_eq!(counts.writes(), 12.0);
        assert_eq!(counts.reads(), 10.0);
    }

    #[test]
    fn other_resources_and_non_resource_urls_are_left_out() {
        let counts = RequestCounts::parse(METRICS, &["greetings"]);
        assert_eq!(counts.by_call.len(), 1);
    }

    #[test]
    fn since_keeps_only_what_changed() {
        let before = RequestCounts::parse(METRICS, &["configmaps", "greetings"]);
        let mut after = before.clone();
        *after.by_call.get_mut("APPLY configmaps").expect("parsed") += 2.0;
        let delta = after.since(&before);
        assert_eq!(delta.by_call.len(), 1);
        assert_eq!(delta.writes(), 2.0);
    }
}
