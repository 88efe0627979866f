//! The silences operator: a `Silence` custom resource kept in sync with a
//! silence in a Prometheus Alertmanager, through Alertmanager's v2 HTTP API.
//! It manages something outside the cluster, so it declares the one origin
//! it calls ([`ALERTMANAGER`]) as egress; the host refuses every other.
//!
//! - **Create, update**: a `Silence` without a silence in Alertmanager gets
//!   one (`POST /api/v2/silences`); one whose matchers, comment or end
//!   changed updates it (the same call with its id).
//! - **Drift**: a silence someone expired or deleted in Alertmanager
//!   directly is made again (a `Recreated` Warning says so); the resource
//!   is looked at again every minute.
//! - **Idempotent**: before it makes a silence, it looks for a live one
//!   of its own that is already what the spec asks for (made by an
//!   earlier pass whose status was never written: the host stopped, or
//!   the write failed) and takes that one; `createdBy` says whose it is
//!   (`capstan/NAMESPACE/NAME` unless the spec says otherwise). A delete
//!   whose status names no silence expires such a one too.
//! - **Delete**: behind the finalizer the silence is expired
//!   (`DELETE /api/v2/silence/{id}`); while Alertmanager cannot be reached
//!   the finalizer stays and the host retries.
//! - **Status**: `silenceId`, `state` (`active`, `pending`, `expired`) and
//!   `Ready` (`Synced`, `Unreachable` while Alertmanager does not answer,
//!   `Rejected` when it refuses the spec).
//!
//! The Alertmanager address is fixed when the component is built:
//! `SILENCES_ALERTMANAGER` (an origin, `http://HOST:PORT`), by default
//! `http://alertmanager.monitoring.svc:9093`.

#![allow(clippy::duplicated_attributes, reason = "kube's printcolumn(...) repeats its keys by design")]

use std::time::Duration;

use capstan_guest::conditions::{self, condition};
use capstan_guest::http::{HttpError, Request};
use capstan_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use capstan_guest::kube::CustomResource;
use capstan_guest::kube::core::CustomResourceExt;
use capstan_guest::prelude::*;
use capstan_guest::serde_json::{Value, json};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The Alertmanager this component talks to (an origin: scheme, host,
/// port), fixed at build time by `SILENCES_ALERTMANAGER`.
pub const ALERTMANAGER: &str = match option_env!("SILENCES_ALERTMANAGER") {
    Some(origin) => origin,
    None => "http://alertmanager.monitoring.svc:9093",
};

/// The finalizer that expires the silence before the resource goes.
pub const FINALIZER: &str = "silences.examples.capstan.dev/expire";

/// How often a synced silence is looked at again (drift).
pub const RECHECK: Duration = Duration::from_secs(60);

/// Desired state of a `Silence`.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "examples.capstan.dev",
    version = "v1alpha1",
    kind = "Silence",
    plural = "silences",
    category = "capstan",
    namespaced,
    status = "SilenceStatus",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Ends", type_ = "string", json_path = ".spec.endsAt"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason")
)]
#[serde(rename_all = "camelCase")]
pub struct SilenceSpec {
    /// Alerts whose labels match all of these are silenced. At least one.
    pub matchers: Vec<Matcher>,
    /// Why, as Alertmanager shows it.
    pub comment: String,
    /// Who, as Alertmanager shows it (default `capstan/NAMESPACE/NAME`,
    /// which is also how the controller finds a silence it made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// When the silence ends, RFC 3339 (`2026-12-24T18:00:00Z`).
    pub ends_at: String,
}

/// One label matcher, as Alertmanager's API has it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct Matcher {
    /// Label name.
    pub name: String,
    /// Label value (a regular expression when `isRegex`).
    pub value: String,
    /// Whether `value` is a regular expression.
    #[serde(default)]
    pub is_regex: bool,
    /// `true` (default): the label must match; `false`: must not.
    #[serde(default = "yes")]
    pub is_equal: bool,
}

fn yes() -> bool {
    true
}

/// Observed state of a `Silence`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SilenceStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The silence's id in Alertmanager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_id: Option<String>,
    /// Its state there: `active`, `pending` or `expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `Ready`, and the host's `Reconciled` after a failure.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The silences controller.
#[derive(Default)]
pub struct Silences;

/// A silence as Alertmanager returns it (the fields compared).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Gettable {
    #[serde(default)]
    id: String,
    #[serde(default)]
    created_by: String,
    status: GettableStatus,
    #[serde(default)]
    matchers: Vec<Matcher>,
    #[serde(default)]
    comment: String,
    #[serde(default)]
    ends_at: String,
}

#[derive(Debug, Deserialize)]
struct GettableStatus {
    state: String,
}

fn status(silence: &Silence, id: Option<&str>, state: Option<&str>, ready: Condition) -> SilenceStatus {
    let mut status = silence.status.clone().unwrap_or_default();
    conditions::set_condition(&mut status.conditions, ready);
    if id.is_some() {
        status.silence_id = id.map(str::to_owned);
        status.state = state.map(str::to_owned);
    }
    status.observed_generation = silence.metadata.generation;
    status
}

/// A transient failure that says `Ready=False, Unreachable` while
/// Alertmanager does not answer; a refused spec (4xx) is terminal,
/// `Rejected`.
fn failed(silence: &Silence, e: HttpError) -> Error {
    match e {
        HttpError::Status { status: code, body } if (400..500).contains(&code) => {
            let message = format!("Alertmanager refused the silence: {body}");
            let ready = condition("Ready", "False", "Rejected", &message);
            Error::terminal(message).with_status(&status(silence, None, None, ready))
        }
        other => {
            let ready = condition("Ready", "False", "Unreachable", &other.to_string());
            Error::transient(other).with_status(&status(silence, None, None, ready))
        }
    }
}

/// The silence Alertmanager holds under `id`; `None` if it knows none.
fn get(id: &str) -> std::result::Result<Option<Gettable>, HttpError> {
    let response = Request::get(&format!("{ALERTMANAGER}/api/v2/silence/{id}")).send()?;
    if response.status == 404 {
        return Ok(None);
    }
    let body = response.error_for_status()?;
    body.json().map(Some).map_err(|e| HttpError::Transport(format!("Alertmanager's answer: {e}")))
}

/// Who the silences of `silence` are made by: the spec's `createdBy`, or
/// `capstan/NAMESPACE/NAME`.
fn created_by(silence: &Silence) -> String {
    silence.spec.created_by.clone().unwrap_or_else(|| {
        let namespace = silence.metadata.namespace.as_deref().unwrap_or_default();
        format!("capstan/{namespace}/{}", silence.name_any())
    })
}

/// A live silence made for `silence` that already is what its spec asks
/// for, if Alertmanager holds one: made by an earlier pass that could not
/// record its id.
fn find_own(silence: &Silence) -> std::result::Result<Option<String>, HttpError> {
    let response = Request::get(&format!("{ALERTMANAGER}/api/v2/silences")).send()?;
    let all: Vec<Gettable> =
        response.error_for_status()?.json().map_err(|e| HttpError::Transport(format!("Alertmanager's answer: {e}")))?;
    let by = created_by(silence);
    Ok(all
        .into_iter()
        .find(|h| h.status.state != "expired" && h.created_by == by && up_to_date(&silence.spec, h))
        .map(|h| h.id))
}

/// The same instant, whatever the precision Alertmanager writes it with.
fn same_time(a: &str, b: &str) -> bool {
    let seconds = |t: &str| t.split(['.', 'Z', '+']).next().map(str::to_owned);
    seconds(a) == seconds(b)
}

/// Whether Alertmanager's silence is what the spec asks for.
fn up_to_date(spec: &SilenceSpec, held: &Gettable) -> bool {
    let mut want = spec.matchers.clone();
    let mut have = held.matchers.clone();
    want.sort();
    have.sort();
    want == have && spec.comment == held.comment && same_time(&spec.ends_at, &held.ends_at)
}

/// Now, RFC 3339 in UTC (whole seconds).
fn now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest / 60 % 60, rest % 60)
}

/// Creates the silence (no `id`) or updates the one with `id`; returns
/// the id Alertmanager gives it.
fn post(silence: &Silence, id: Option<&str>) -> std::result::Result<String, HttpError> {
    let spec = &silence.spec;
    let mut body = json!({
        "matchers": spec.matchers,
        "startsAt": now(),
        "endsAt": spec.ends_at,
        "createdBy": created_by(silence),
        "comment": spec.comment,
    });
    if let Some(id) = id {
        body["id"] = json!(id);
    }
    let request = Request::post(&format!("{ALERTMANAGER}/api/v2/silences"))
        .json(&body)
        .map_err(|e| HttpError::Invalid(e.to_string()))?;
    let created: Value = request
        .send()?
        .error_for_status()?
        .json()
        .map_err(|e| HttpError::Transport(format!("Alertmanager's answer: {e}")))?;
    created["silenceID"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| HttpError::Transport("Alertmanager's answer has no silenceID".to_owned()))
}

/// Makes the silence of `silence`, or takes the live one of its own that
/// an earlier pass made (see [`find_own`]); returns its id.
fn create(silence: &Silence) -> Result<String> {
    match find_own(silence).map_err(|e| failed(silence, e))? {
        Some(id) => Ok(id),
        None => post(silence, None).map_err(|e| failed(silence, e)),
    }
}

impl Controller for Silences {
    type Resource = Silence;

    fn manifest(&self) -> Manifest {
        Manifest::new("silences").primary::<Silence>().crd(&Silence::crd()).finalizer(FINALIZER).egress(ALERTMANAGER)
    }

    fn reconcile(&self, _ctx: &Context, silence: Silence) -> Result<Outcome> {
        if silence.spec.matchers.is_empty() || silence.spec.matchers.iter().any(|m| m.name.is_empty()) {
            let message = "spec.matchers needs at least one matcher, each with a name";
            let ready = condition("Ready", "False", "InvalidSpec", message);
            return Err(Error::terminal(message).with_status(&status(&silence, None, None, ready)));
        }
        let known = silence.status.as_ref().and_then(|s| s.silence_id.clone());
        let held = match &known {
            Some(id) => get(id).map_err(|e| failed(&silence, e))?,
            None => None,
        };
        let mut outcome = Outcome::new().requeue_after(RECHECK);
        let id = match (&known, &held) {
            (Some(id), Some(h)) if h.status.state != "expired" && up_to_date(&silence.spec, h) => id.clone(),
            (Some(id), Some(h)) if h.status.state != "expired" => {
                post(&silence, Some(id)).map_err(|e| failed(&silence, e))?
            }
            (Some(id), _) => {
                outcome = outcome.event(
                    Event::warning("Recreated", "Sync")
                        .note(format!("silence {id} was expired or removed in Alertmanager; made it again")),
                );
                create(&silence)?
            }
            (None, _) => create(&silence)?,
        };
        let state = match get(&id).map_err(|e| failed(&silence, e))? {
            Some(h) => h.status.state,
            None => "unknown".to_owned(),
        };
        let ready = condition("Ready", "True", "Synced", &format!("silence {id} is {state}"));
        Ok(outcome.status(&status(&silence, Some(&id), Some(&state), ready)))
    }

    fn delete(&self, _ctx: &Context, silence: Silence) -> Result<Outcome> {
        let known = silence.status.as_ref().and_then(|s| s.silence_id.clone());
        let Some(id) = known.map_or_else(|| find_own(&silence).map_err(|e| failed(&silence, e)), |id| Ok(Some(id)))?
        else {
            return Ok(Outcome::new());
        };
        match get(&id).map_err(|e| failed(&silence, e))? {
            Some(h) if h.status.state != "expired" => {
                Request::delete(&format!("{ALERTMANAGER}/api/v2/silence/{id}"))
                    .send()
                    .and_then(capstan_guest::http::Response::error_for_status)
                    .map_err(|e| failed(&silence, e))?;
                Ok(Outcome::new().event(Event::normal("Expired", "Cleanup").note(format!("silence {id} expired"))))
            }
            _ => Ok(Outcome::new()),
        }
    }
}

#[cfg(target_arch = "wasm32")]
capstan_guest::export!(Silences);

#[cfg(test)]
mod tests {
    use capstan_guest::EventKind;
    use capstan_guest::http::Response;
    use capstan_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use capstan_guest::testing::FakeHost;

    use super::*;

    fn silence(id: Option<&str>) -> Silence {
        let mut s = Silence::new(
            "maintenance",
            SilenceSpec {
                matchers: vec![Matcher {
                    name: "alertname".into(),
                    value: "Down".into(),
                    is_regex: false,
                    is_equal: true,
                }],
                comment: "planned".into(),
                created_by: None,
                ends_at: "2030-01-01T00:00:00Z".into(),
            },
        );
        s.metadata = ObjectMeta { namespace: Some("ops".into()), ..s.metadata };
        s.status = id.map(|id| SilenceStatus { silence_id: Some(id.into()), ..SilenceStatus::default() });
        s
    }

    fn ok(body: Value) -> std::result::Result<Response, HttpError> {
        Ok(Response { status: 200, headers: vec![], body: body.to_string().into_bytes() })
    }

    fn held(state: &str, comment: &str) -> Value {
        json!({
            "id": "s1", "status": {"state": state}, "comment": comment, "createdBy": "capstan/ops/maintenance",
            "matchers": [{"name": "alertname", "value": "Down", "isRegex": false, "isEqual": true}],
            "startsAt": "2026-12-03T10:00:00.000Z", "endsAt": "2030-01-01T00:00:00.000Z",
        })
    }

    fn host() -> FakeHost {
        FakeHost::new().egress(&[ALERTMANAGER])
    }

    fn url(path: &str) -> String {
        format!("{ALERTMANAGER}{path}")
    }

    #[test]
    fn a_new_silence_is_created_and_its_state_reported() {
        let mut host = host();
        host.stub_http("GET", &url("/api/v2/silences"), ok(json!([])));
        host.stub_http("POST", &url("/api/v2/silences"), ok(json!({"silenceID": "s1"})));
        host.stub_http("GET", &url("/api/v2/silence/s1"), ok(held("active", "planned")));
        let done = host.reconcile::<Silences>(EventKind::Added, &silence(None)).expect("synced");
        let status = done.status.expect("a status");
        assert_eq!((status["silenceId"].as_str(), status["state"].as_str()), (Some("s1"), Some("active")));
        assert_eq!(status["conditions"][0]["reason"], "Synced");
        let post = host.http_requests().iter().find(|r| r.method == "POST").expect("a create");
        let posted: Value = serde_json::from_slice(&post.body).expect("json");
        assert!(posted.get("id").is_none(), "a create carries no id: {posted}");
        assert_eq!(posted["matchers"][0]["name"], "alertname");
        assert_eq!(posted["createdBy"], "capstan/ops/maintenance");
        assert_eq!(done.requeue_after, Some(RECHECK));
    }

    #[test]
    fn a_silence_an_earlier_pass_made_is_taken_not_made_twice() {
        let mut host = host();
        // Another resource's silence with the same matchers, and ours.
        let mut theirs = held("active", "planned");
        theirs["id"] = json!("s0");
        theirs["createdBy"] = json!("capstan/ops/other");
        host.stub_http("GET", &url("/api/v2/silences"), ok(json!([theirs, held("active", "planned")])));
        host.stub_http("GET", &url("/api/v2/silence/s1"), ok(held("active", "planned")));
        let done = host.reconcile::<Silences>(EventKind::Added, &silence(None)).expect("synced");
        assert_eq!(done.status.expect("a status")["silenceId"], "s1");
        assert!(host.http_requests().iter().all(|r| r.method == "GET"), "{:?}", host.http_requests());

        // Deleted before its status named it: that silence is expired.
        let mut host = self::host();
        host.stub_http("GET", &url("/api/v2/silences"), ok(json!([held("active", "planned")])));
        host.stub_http("GET", &url("/api/v2/silence/s1"), ok(held("active", "planned")));
        host.stub_http("DELETE", &url("/api/v2/silence/s1"), ok(json!({})));
        host.reconcile::<Silences>(EventKind::Deleted, &silence(None)).expect("expired");
        assert!(host.http_requests().iter().any(|r| r.method == "DELETE"));
    }

    #[test]
    fn an_up_to_date_silence_is_left_alone() {
        let mut host = host();
        host.stub_http("GET", &url("/api/v2/silence/s1"), ok(held("active", "planned")));
        host.reconcile::<Silences>(EventKind::Resync, &silence(Some("s1"))).expect("synced");
        assert!(host.http_requests().iter().all(|r| r.method == "GET"), "{:?}", host.http_requests());
    }

    #[test]
    fn a_changed_spec_updates_the_same_silence() {
        let mut host = host();
        host.stub_http("GET", &url("/api/v2/silence/s1"), ok(held("active", "an old comment")));
        host.stub_http("POST", &url("/api/v2/silences"), ok(json!({"silenceID": "s1"})));
        host.reconcile::<Silences>(EventKind::Modified, &silence(Some("s1"))).expect("synced");
        let post = host.http_requests().iter().find(|r| r.method == "POST").expect("an update");
        let body: Value = serde_json::from_slice(&post.body).expect("json");
        assert_eq!((body["id"].as_str(), body["comment"].as_str()), (Some("s1"), Some("planned")));
    }

    #[test]
    fn a_silence_expired_in_alertmanager_is_made_again_and_said() {
        let mut host = host();
        host.stub_http("GET", &url("/api/v2/silence/s1"), ok(held("expired", "planned")));
        host.stub_http("GET", &url("/api/v2/silences"), ok(json!([held("expired", "planned")])));
        host.stub_http("POST", &url("/api/v2/silences"), ok(json!({"silenceID": "s2"})));
        host.stub_http("GET", &url("/api/v2/silence/s2"), ok(held("active", "planned")));
        let done = host.reconcile::<Silences>(EventKind::Resync, &silence(Some("s1"))).expect("synced");
        assert_eq!(done.status.expect("status")["silenceId"], "s2");
        assert_eq!(done.events[0]["reason"], "Recreated");
    }

    #[test]
    fn alertmanager_down_is_transient_with_an_unreachable_status() {
        let mut host = host();
        host.stub_http("GET", &url("/api/v2/silences"), Err(HttpError::Transport("connection refused".into())));
        let err = host.reconcile::<Silences>(EventKind::Added, &silence(None)).expect_err("fails");
        assert!(!err.is_terminal(), "{err:?}");
        assert_eq!(err.status().expect("a status")["conditions"][0]["reason"], "Unreachable");
    }

    #[test]
    fn a_spec_alertmanager_refuses_is_terminal() {
        let mut host = host();
        let refused = Response { status: 400, headers: vec![], body: b"bad matcher".to_vec() };
        host.stub_http("GET", &url("/api/v2/silences"), ok(json!([])));
        host.stub_http("POST", &url("/api/v2/silences"), Ok(refused));
        let err = host.reconcile::<Silences>(EventKind::Added, &silence(None)).expect_err("fails");
        assert!(err.is_terminal(), "{err:?}");
        assert_eq!(err.status().expect("a status")["conditions"][0]["reason"], "Rejected");
    }

    #[test]
    fn deleting_expires_the_silence_behind_the_finalizer() {
        let mut host = host();
        host.stub_http("GET", &url("/api/v2/silence/s1"), ok(held("active", "planned")));
        host.stub_http("DELETE", &url("/api/v2/silence/s1"), ok(json!({})));
        let done = host.reconcile::<Silences>(EventKind::Deleted, &silence(Some("s1"))).expect("expired");
        assert!(host.http_requests().iter().any(|r| r.method == "DELETE"));
        assert_eq!(done.events[0]["reason"], "Expired");
    }

    #[test]
    fn now_is_rfc3339_in_utc() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T", "{t}");
        assert!(same_time("2030-01-01T00:00:00Z", "2030-01-01T00:00:00.000Z"));
        assert!(!same_time("2030-01-01T00:00:00Z", "2030-01-01T00:00:01Z"));
    }
}
