//! The `events` import: Kubernetes Events recorded as the controller.

use std::time::Instant;

use crate::cluster::EventRecord;
use crate::manifest::Verb;
use crate::metrics::{KindLabel, metrics};
use crate::object::{Gvk, ObjectRef};
use crate::runtime::bindings::capstan::operator::events as wit;
use crate::runtime::bindings::capstan::operator::kube as wit_kube;
use crate::runtime::bindings::capstan::operator::types as wit_types;
use crate::runtime::grants::Denied;

use super::{CallResult, Caller, HostState, result_label, validate};

/// Why an event about another object is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// `regarding` names no valid object.
    #[error(transparent)]
    Invalid(#[from] validate::Invalid),
    /// The controller may not read that object, or the Event would land
    /// outside the namespaces the host watches.
    #[error("an event about that object: {0}")]
    Denied(#[from] Denied),
}

/// Turns a guest event (from `events.record` or an outcome) into a record
/// about `regarding` (or the reconciled object), reported by the calling
/// controller. `None` outside a reconcile without `regarding`; refused when
/// `regarding` is not a valid object reference, or names an object the
/// controller may not read (an Event may only be about what the grants let
/// it see).
pub(crate) fn event_record(caller: &Caller, event: wit_types::Event) -> Option<Result<EventRecord, Refused>> {
    let (regarding, regarding_uid) = match event.regarding {
        Some(r) => {
            let r = ObjectRef::from(r);
            if let Err(invalid) = validate::object_ref(&r, "regarding.") {
                return Some(Err(invalid.into()));
            }
            if let Err(denied) = caller.grants.check_event(&r, caller.own_namespace()) {
                return Some(Err(denied.into()));
            }
            (r, None)
        }
        None => caller.reconciling.clone()?,
    };
    Some(Ok(EventRecord {
        regarding,
        regarding_uid,
        warning: matches!(event.event_type, wit_types::EventType::Warning),
        reason: event.reason,
        action: event.action,
        note: event.note,
        reporting_controller: caller.controller.to_string(),
    }))
}

impl wit::Host for HostState {
    async fn record(&mut self, event: wit_types::Event) -> Result<(), wit_kube::Error> {
        let start = Instant::now();
        let Some(caller) = self.caller.clone() else {
            let msg = "events cannot be recorded while the manifest is read".to_owned();
            self.journal_call("events.record", String::new(), CallResult::Denied(msg.clone()), start.elapsed());
            return Err(wit_kube::Error::Denied(msg));
        };
        let kind = KindLabel::of(&Gvk::new("events.k8s.io", "v1", "Event"));
        self.events_recorded = self.events_recorded.saturating_add(1);
        if self.events_recorded > self.limits.events {
            metrics().call_limited(&caller.owner(), "events");
            let msg = format!(
                "limit of {} events per invocation reached; nothing was recorded (host setting --max-events)",
                self.limits.events
            );
            if self.events_recorded == self.limits.events.saturating_add(1) && self.may_log() {
                tracing::warn!(limit = self.limits.events, "event limit of the invocation reached");
            }
            self.journal_call("events.record", String::new(), CallResult::Denied(msg.clone()), start.elapsed());
            return Err(wit_kube::Error::Denied(msg));
        }
        let record = match event_record(&caller, event) {
            Some(Ok(record)) => record,
            Some(Err(Refused::Invalid(invalid))) => {
                metrics().host_call(&caller.owner(), Verb::Create, &kind, "bad_request");
                let msg = invalid.to_string();
                self.journal_call("events.record", String::new(), CallResult::Failed(msg.clone()), start.elapsed());
                return Err(wit_kube::Error::BadRequest(msg));
            }
            Some(Err(denied @ Refused::Denied(_))) => {
                let msg = denied.to_string();
                self.journal_call("events.record", String::new(), CallResult::Denied(msg.clone()), start.elapsed());
                return Err(wit_kube::Error::Denied(msg));
            }
            None => {
                let msg = "an event needs `regarding` outside a reconcile".to_owned();
                return Err(wit_kube::Error::BadRequest(msg));
            }
        };
        let target = format!("{} {}", record.reason, record.regarding);
        let span = record.span();
        let result = tracing::Instrument::instrument(caller.cluster.record_event(record), span.clone()).await;
        crate::telemetry::record_request(&span, &result);
        metrics().host_call(&caller.owner(), Verb::Create, &kind, result_label(&result));
        let outcome = match &result {
            Ok(()) => CallResult::Ok,
            Err(e) => CallResult::Failed(e.to_string()),
        };
        self.journal_call("events.record", target, outcome, start.elapsed());
        result.map_err(Into::into)
    }
}
