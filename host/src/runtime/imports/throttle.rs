//! The log budget of each controller (see
//! [`LogBudget`](crate::runtime::limits::LogBudget)): a token bucket per controller
//! name, shared by every invocation of that controller in the process.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use crate::metrics::{Owner, metrics};
use crate::runtime::limits::LogBudget;
use crate::sync::lock;

/// What to do with one line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Log it; first report `dropped` lines dropped since the last report
    /// (0: nothing to report).
    Log {
        /// Lines dropped since the last report.
        dropped: u64,
    },
    /// Drop it.
    Drop,
}

/// One controller's bucket.
#[derive(Debug)]
pub(crate) struct Bucket {
    tokens: f64,
    refilled: Instant,
    unreported: u64,
    reported: Option<Instant>,
}

impl Bucket {
    /// A full bucket.
    pub(crate) fn new(budget: LogBudget, now: Instant) -> Self {
        Self { tokens: f64::from(budget.burst), refilled: now, unreported: 0, reported: None }
    }

    /// Takes a token for one line at `now`.
    pub(crate) fn take(&mut self, budget: LogBudget, now: Instant) -> Decision {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(budget.per_second)).min(f64::from(budget.burst));
        self.refilled = now;
        if self.tokens < 1.0 {
            self.unreported += 1;
            return Decision::Drop;
        }
        self.tokens -= 1.0;
        let due = self.reported.is_none_or(|at| now.saturating_duration_since(at) >= LogBudget::REPORT_EVERY);
        if self.unreported > 0 && due {
            let dropped = std::mem::take(&mut self.unreported);
            self.reported = Some(now);
            return Decision::Log { dropped };
        }
        Decision::Log { dropped: 0 }
    }
}

static BUCKETS: LazyLock<Mutex<HashMap<String, Bucket>>> = LazyLock::new(Mutex::default);

/// Whether `controller` may log one more line now. A dropped line is
/// counted in `capstan_guest_log_lines_dropped_total{reason="budget"}`;
/// once lines flow again, one warning says how many were dropped.
pub(crate) fn admit(owner: &Owner, budget: LogBudget) -> bool {
    let controller = owner.name();
    let now = Instant::now();
    let decision = {
        let mut buckets = lock(&BUCKETS);
        let bucket = buckets.entry(controller.to_owned()).or_insert_with(|| Bucket::new(budget, now));
        bucket.take(budget, now)
    };
    match decision {
        Decision::Drop => {
            metrics().log_lines_dropped(owner, "budget", 1);
            false
        }
        Decision::Log { dropped } => {
            if dropped > 0 {
                tracing::warn!(
                    controller,
                    dropped,
                    per_second = budget.per_second,
                    burst = budget.burst,
                    "log lines dropped over the controller's log budget"
                );
            }
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_flood_gets_the_burst_then_the_rate_and_the_drops_are_reported_once_lines_flow() {
        let budget = LogBudget::new(10, 5);
        let start = Instant::now();
        let mut bucket = Bucket::new(budget, start);
        let decisions: Vec<Decision> = (0..1000).map(|_| bucket.take(budget, start)).collect();
        assert_eq!(decisions.iter().filter(|d| **d != Decision::Drop).count(), 5, "the burst, all at once");
        // A second later: the bucket is full again (it holds at most the
        // burst); the first line reports the drops.
        let later = start + Duration::from_secs(1);
        assert_eq!(bucket.take(budget, later), Decision::Log { dropped: 995 });
        let rest: Vec<Decision> = (0..100).map(|_| bucket.take(budget, later)).collect();
        assert_eq!(rest.iter().filter(|d| **d != Decision::Drop).count(), 4);
        // The next report waits for REPORT_EVERY.
        let soon = later + Duration::from_secs(1);
        assert_eq!(bucket.take(budget, soon), Decision::Log { dropped: 0 });
        let due = later + LogBudget::REPORT_EVERY;
        assert_eq!(bucket.take(budget, due), Decision::Log { dropped: 96 });
    }
}
