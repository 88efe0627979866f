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
        Self { by_call: changed_since(&self.by_call, &before.by_call) }
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

/// The counters of `now` that changed since `before`, by how much.
fn changed_since(now: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    now.iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n != 0.0)
        .collect()
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

/// A Capstan host's reconciles so far, from its `/metrics`: how many, how
/// long they took in all, and how many ended each way.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reconciles {
    /// Reconciles (`capstan_reconcile_time_seconds_count`).
    pub count: f64,
    /// Their time in all, in seconds (`capstan_reconcile_time_seconds_sum`).
    pub seconds: f64,
    /// By `result` (`capstan_reconcile_total`): `success`, `conflict`, …
    pub by_result: BTreeMap<String, f64>,
}

impl Reconciles {
    /// The reconcile figures of every controller in a host's `/metrics`
    /// text.
    pub fn parse(metrics: &str) -> Self {
        let mut r = Self::default();
        for line in metrics.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.trim().parse::<f64>() else { continue };
            if series.starts_with("capstan_reconcile_time_seconds_count{") {
                r.count += value;
            } else if series.starts_with("capstan_reconcile_time_seconds_sum{") {
                r.seconds += value;
            } else if let Some(labels) = series.strip_prefix("capstan_reconcile_total{") {
                let Some(start) = labels.find("result=\"") else { continue };
                let result = labels[start + 8..].split('"').next().unwrap_or_default();
                *r.by_result.entry(result.to_owned()).or_insert(0.0) += value;
            }
        }
        r
    }

    /// What happened since `before`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            count: self.count - before.count,
            seconds: self.seconds - before.seconds,
            by_result: changed_since(&self.by_result, &before.by_result),
        }
    }
}

/// The machine's CPU time so far, from the first line of `/proc/stat`:
/// core-seconds busy (user, nice, system, irq, softirq, steal) and in all
/// (busy, idle and iowait), at 100 ticks a second. Between two readings,
/// the busy delta over the total delta is how busy the machine was, and
/// the total delta over the wall time is its cores.
///
/// # Errors
///
/// When `/proc/stat` cannot be read or has no `cpu` line.
pub fn machine_cpu_seconds() -> Result<MachineCpu> {
    MachineCpu::parse(&std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?)
}

/// The machine's CPU time, in core-seconds (see [`machine_cpu_seconds`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MachineCpu {
    /// Spent running anything.
    pub busy: f64,
    /// Spent in all, idle included.
    pub total: f64,
}

impl MachineCpu {
    /// Reads the aggregate `cpu` line of a `/proc/stat`.
    ///
    /// # Errors
    ///
    /// When there is no such line or a field is not a number.
    pub fn parse(stat: &str) -> Result<Self> {
        let line = stat.lines().find(|l| l.starts_with("cpu ")).context("no cpu line in /proc/stat")?;
        let ticks: Vec<f64> = line.split_whitespace().skip(1).take(8).map(str::parse).collect::<Result<_, _>>()?;
        anyhow::ensure!(ticks.len() == 8, "a short cpu line in /proc/stat");
        // user nice system idle iowait irq softirq steal
        let idle = ticks[3] + ticks[4];
        let total: f64 = ticks.iter().sum();
        Ok(Self { busy: (total - idle) / 100.0, total: total / 100.0 })
    }

    /// The share of the machine's CPU that was busy since `before`, 0 to 1.
    pub fn busy_since(&self, before: &Self) -> f64 {
        let total = self.total - before.total;
        if total > 0.0 { (self.busy - before.busy) / total } else { 0.0 }
    }
}

/// The median of `values` (the mean of the middle two for an even count;
/// NaN for none).
///
/// ```
/// assert_eq!(capstan_tests::bench::median(vec![3.0, 1.0, 2.0]), 2.0);
/// assert_eq!(capstan_tests::bench::median(vec![4.0, 1.0]), 2.5);
/// ```
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
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
    fn a_hosts_reconciles_are_counted_by_result_and_timed() {
        let before = Reconciles::parse(
            "capstan_reconcile_total{controller=\"greeter\",result=\"success\"} 3\n\
             capstan_reconcile_time_seconds_sum{controller=\"greeter\"} 0.5\n\
             capstan_reconcile_time_seconds_count{controller=\"greeter\"} 3\n",
        );
        let after = Reconciles::parse(
            "# TYPE capstan_reconcile_total counter\n\
             capstan_reconcile_total{controller=\"greeter\",result=\"success\"} 10\n\
             capstan_reconcile_total{controller=\"greeter\",result=\"conflict\"} 2\n\
             capstan_reconcile_time_seconds_bucket{controller=\"greeter\",le=\"0.1\"} 12\n\
             capstan_reconcile_time_seconds_sum{controller=\"greeter\"} 1.5\n\
             capstan_reconcile_time_seconds_count{controller=\"greeter\"} 12\n",
        );
        let delta = after.since(&before);
        assert_eq!(delta.count, 9.0);
        assert!((delta.seconds - 1.0).abs() < 1e-9);
        assert_eq!(delta.by_result, BTreeMap::from([("success".to_owned(), 7.0), ("conflict".to_owned(), 2.0)]));
    }

    #[test]
    fn the_machine_is_busy_for_all_but_idle_and_iowait() {
        let before = MachineCpu::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n").expect("parsed");
        assert_eq!(before, MachineCpu { busy: 1.5, total: 10.0 });
        let after = MachineCpu::parse("cpu  250 0 100 850 50 0 0 0 0 0\n").expect("parsed");
        assert!((after.busy_since(&before) - 0.8).abs() < 1e-9, "{}", after.busy_since(&before));
        assert!(MachineCpu::parse("intr 1 2 3\n").is_err());
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
