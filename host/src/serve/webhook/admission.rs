//! `AdmissionReview` (`admission.k8s.io/v1`) in and out: the request the
//! guest gets, and the checks on its answer.
//!
//! # What the host checks
//!
//! - a denial's `code` is between 400 and 599 (default 403);
//! - the message is at most [`MAX_MESSAGE`] bytes and at most
//!   [`MAX_WARNINGS`] warnings of at most [`MAX_WARNING`] bytes each are
//!   passed on (longer ones are cut with [`cluster::bounded`], more are
//!   dropped);
//! - a mutating webhook's changed object is at most
//!   [`MAX_BODY`](super::MAX_BODY) bytes of JSON (what the API server
//!   accepts in a request), a JSON object with the same
//!   `apiVersion`, `kind`, `metadata.name` and `metadata.namespace` as the
//!   request's; the API server gets the JSON Patch from the request's
//!   object to it (none when nothing changed). A validating webhook's
//!   `patched` is ignored, as is a denial's.
//!
//! An answer that breaks these is a failed call ([`Error::Answer`]); its
//! log line, like the `Status` the API server gets, is cut to
//! [`cluster::MAX_MESSAGE`] bytes.
//!
//! # The host's own writes
//!
//! The host's bookkeeping must not depend on the component's webhooks: a
//! webhook that cannot decode a stored object (one written before its
//! type gained a required field) would otherwise refuse the host's
//! removal of its finalizer, and the object could never go. So an
//! `UPDATE` made as the host's own user (learned with a
//! `SelfSubjectReview` at the first update, see
//! [`Cluster::user`](crate::cluster::Cluster::user)) whose
//! object differs from its old object only in [`HOST_METADATA`] is
//! allowed without calling the guest. Anything else the host writes (a
//! child, a spec), and the same change made by anyone else, is reviewed as
//! usual. Status writes never reach a webhook: the installed rules name
//! the resource, not its `status` subresource.

use std::collections::BTreeSet;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, MAX_BODY, Served};
use crate::cluster;
use crate::manifest::{AdmissionWebhook, Operation};
use crate::runtime::bindings::capstan::operator::types as wit;

/// Longest denial message passed on, in bytes.
pub const MAX_MESSAGE: usize = 4 << 10;
/// Most warnings passed on.
pub const MAX_WARNINGS: usize = 32;
/// Longest warning passed on, in bytes.
pub const MAX_WARNING: usize = 256;

/// The part of an `AdmissionReview`'s request the host reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    kind: Kind,
    /// The kind of the user's request; `kind` when the API server left it
    /// out.
    #[serde(default)]
    request_kind: Option<Kind>,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: String,
    #[serde(default)]
    user_info: UserInfo,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    old_object: Option<Value>,
    #[serde(default)]
    dry_run: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct Kind {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

impl From<&Kind> for wit::GroupVersionKind {
    fn from(k: &Kind) -> Self {
        Self { group: k.group.clone(), version: k.version.clone(), kind: k.kind.clone() }
    }
}

#[derive(Debug, Default, Deserialize)]
struct UserInfo {
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
}

/// A parsed review: what the guest gets, and what the answer is checked
/// against.
#[derive(Debug)]
pub struct Parsed {
    /// The request's UID, echoed in the answer.
    pub uid: String,
    /// The request's object, the base of a mutation's patch.
    pub object: Option<Value>,
    /// The request's old object.
    pub old_object: Option<Value>,
    /// The guest's request.
    pub request: wit::AdmissionRequest,
}

fn to_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("a JSON value serializes")
}

/// Parses an `AdmissionReview` for `webhook`.
///
/// # Errors
///
/// [`Error::BadReview`] when `body` is not a v1 `AdmissionReview` with a
/// request.
pub fn parse(webhook: &AdmissionWebhook, body: &[u8]) -> Result<Parsed, Error> {
    let r: Request = super::request_of(body, "admission.k8s.io/v1", "AdmissionReview")?;
    let operation = Operation::parse(&r.operation)
        .ok_or_else(|| Error::BadReview(format!("unknown operation {:?}", r.operation)))?;
    let object = r.object.filter(|o| !o.is_null());
    let old_object = r.old_object.filter(|o| !o.is_null());
    let request = wit::AdmissionRequest {
        webhook: webhook.name.clone(),
        webhook_type: if webhook.mutating { wit::WebhookType::Mutating } else { wit::WebhookType::Validating },
        uid: r.uid.clone(),
        request_kind: r.request_kind.as_ref().unwrap_or(&r.kind).into(),
        kind: (&r.kind).into(),
        sub_resource: r.sub_resource.filter(|s| !s.is_empty()),
        name: r.name,
        namespace: r.namespace.filter(|n| !n.is_empty()),
        operation: operation.into(),
        object: object.as_ref().map(to_bytes),
        old_object: old_object.as_ref().map(to_bytes),
        user_info: wit::UserInfo { username: r.user_info.username, uid: r.user_info.uid, groups: r.user_info.groups },
        dry_run: r.dry_run.unwrap_or(false),
    };
    Ok(Parsed { uid: r.uid, object, old_object, request })
}

/// The metadata the host maintains on the objects it reconciles, and the
/// fields the API server changes with any write: a change of these alone,
/// made as the host's user, is the host's bookkeeping.
pub const HOST_METADATA: [&str; 4] = ["finalizers", "ownerReferences", "managedFields", "resourceVersion"];

/// `object` without [`HOST_METADATA`].
fn without_host_metadata(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in HOST_METADATA {
            meta.remove(field);
        }
    }
    object
}

/// Whether `parsed` is the host's own bookkeeping (see the module docs):
/// an update by `host_user` that changes nothing but [`HOST_METADATA`].
pub fn is_host_bookkeeping(parsed: &Parsed, host_user: &str) -> bool {
    let request = &parsed.request;
    if !matches!(request.operation, wit::Operation::Update)
        || request.user_info.username != host_user
        || request.sub_resource.is_some()
    {
        return false;
    }
    match (&parsed.object, &parsed.old_object) {
        (Some(new), Some(old)) => without_host_metadata(new) == without_host_metadata(old),
        _ => false,
    }
}

/// The fields a mutation may not change.
const KEPT: [&str; 4] = ["/apiVersion", "/kind", "/metadata/name", "/metadata/namespace"];

/// The JSON Patch from `object` to the guest's `patched` bytes, if any
/// change.
fn patch(object: Option<&Value>, patched: &[u8]) -> Result<Option<json_patch::Patch>, Error> {
    let Some(object) = object else {
        return Err(Error::Answer("a changed object for a request without one".into()));
    };
    if patched.len() > MAX_BODY {
        return Err(Error::Answer(format!(
            "the changed object is {} bytes, more than the {MAX_BODY} the API server accepts",
            patched.len()
        )));
    }
    let patched: Value =
        serde_json::from_slice(patched).map_err(|e| Error::Answer(format!("the changed object is not JSON: {e}")))?;
    if !patched.is_object() {
        return Err(Error::Answer("the changed object is not a JSON object".into()));
    }
    if let Some(field) = KEPT.iter().find(|p| object.pointer(p) != patched.pointer(p)) {
        return Err(Error::Answer(format!("the changed object changes {field}, which a mutation must keep")));
    }
    let patch = json_patch::diff(object, &patched);
    Ok((!patch.0.is_empty()).then_some(patch))
}

/// The `AdmissionReview` answer to `parsed` for `webhook`, from the
/// guest's `answer`.
///
/// # Errors
///
/// [`Error::Answer`] when the answer breaks the checks in the module docs.
pub fn answer(webhook: &AdmissionWebhook, parsed: &Parsed, answer: wit::AdmissionResponse) -> Result<Value, Error> {
    let mut response = json!({"uid": parsed.uid, "allowed": answer.allowed});
    if !answer.allowed {
        let code = answer.code.unwrap_or(403);
        if !(400..=599).contains(&code) {
            return Err(Error::Answer(format!("denial code {code} is not between 400 and 599")));
        }
        let message = cluster::bounded(answer.message.as_deref().unwrap_or("denied"), MAX_MESSAGE);
        response["status"] = json!({"code": code, "message": message});
    }
    if !answer.warnings.is_empty() {
        let warnings: Vec<String> =
            answer.warnings.iter().take(MAX_WARNINGS).map(|w| cluster::bounded(w, MAX_WARNING)).collect();
        response["warnings"] = json!(warnings);
    }
    if webhook.mutating
        && answer.allowed
        && let Some(patched) = answer.patched
        && let Some(patch) = patch(parsed.object.as_ref(), &patched)?
    {
        let bytes = serde_json::to_vec(&patch).expect("a patch serializes");
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    Ok(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
}

/// Whether a webhook reviews objects in `namespace`, on a host that serves
/// `served` (`None`: all): the served ones by name, else every namespace
/// but [`SYSTEM_NAMESPACES`](super::install::SYSTEM_NAMESPACES), as the
/// installed [`namespace_selector`](super::install::namespace_selector)
/// says.
pub fn reviews_namespace(served: Option<&[String]>, namespace: &str) -> bool {
    match served {
        Some(served) => served.iter().any(|s| s == namespace),
        None => !super::install::SYSTEM_NAMESPACES.contains(&namespace),
    }
}

/// Why a webhook of a component does not see `parsed`, if it does not:
/// a kind the webhook does not declare, or a namespace the host does not
/// serve ([`reviews_namespace`]). The namespaces are the request's and
/// those of its object and old object: a review that leaves the request's
/// out, or names another in an object, is judged by every one it names
/// and seen only when they all agree. The API server sends none of these
/// through an installed configuration; another client may post them.
pub fn unseen(webhook: &AdmissionWebhook, served: Option<&[String]>, parsed: &Parsed) -> Option<String> {
    let kind = &parsed.request.kind;
    if !webhook.kinds.iter().any(|k| k.group == kind.group && k.kind == kind.kind) {
        let group = if kind.group.is_empty() { "core" } else { kind.group.as_str() };
        return Some(format!("kind {group}/{} is not one the webhook reviews", cluster::bounded(&kind.kind, 63)));
    }
    let of = |o: &Option<Value>| o.as_ref().and_then(|o| o.pointer("/metadata/namespace")?.as_str().map(str::to_owned));
    let named: BTreeSet<String> = [parsed.request.namespace.clone(), of(&parsed.object), of(&parsed.old_object)]
        .into_iter()
        .flatten()
        .filter(|n| !n.is_empty())
        .collect();
    if named.len() > 1 {
        return Some("the request and its objects name different namespaces".to_owned());
    }
    named
        .iter()
        .find(|n| !reviews_namespace(served, n))
        .map(|n| format!("namespace {} is not served", cluster::bounded(n, 253)))
}

/// Serves one review for the webhook named `webhook` of `served`; the
/// host's own bookkeeping (see the module docs) is allowed without calling
/// the guest.
///
/// # Errors
///
/// Any [`Error`]: an unknown webhook, a bad review, a failed invocation, a
/// refused answer.
pub async fn handle(served: &Served, webhook: &str, body: &[u8]) -> Result<Value, Error> {
    // A trace of its own per review.
    let span = tracing::info_span!(
        "admission_review",
        controller = %served.component.manifest.name,
        webhook,
        trace_id = tracing::field::Empty,
        "otel.status_code" = tracing::field::Empty,
        "otel.status_message" = tracing::field::Empty,
    );
    crate::telemetry::start_trace(&span);
    let result = tracing::Instrument::instrument(review(served, webhook, body), span.clone()).await;
    if let Err(e) = &result {
        crate::telemetry::record_error(&span, &e.to_string());
    }
    result
}

async fn review(served: &Served, webhook: &str, body: &[u8]) -> Result<Value, Error> {
    let manifest = &served.component.manifest;
    let declared = manifest
        .roles
        .admission
        .iter()
        .find(|w| w.name == webhook)
        .ok_or_else(|| Error::NoWebhook { component: manifest.name.clone(), webhook: webhook.to_owned() })?;
    let parsed = parse(declared, body)?;
    // The installed configuration sends nothing from outside the
    // namespaces the host serves, nor of kinds the webhook does not
    // declare; a review that comes anyway (sent to the port by another
    // client, or by a configuration someone edited) is not the
    // component's to see: allowed, the guest not asked.
    if let Some(why) = unseen(declared, served.caller.grants.served_namespaces(), &parsed) {
        tracing::debug!(component = %manifest.name, webhook, uid = %cluster::bounded(&parsed.uid, 64), why, "a review the webhook does not see, allowed unseen");
        return answer(
            declared,
            &parsed,
            wit::AdmissionResponse { allowed: true, message: None, code: None, warnings: Vec::new(), patched: None },
        );
    }
    // Only an update can be bookkeeping: the host's user is asked for no
    // other request.
    if matches!(parsed.request.operation, wit::Operation::Update)
        && let Some(user) = served.caller.cluster.user().await
        && is_host_bookkeeping(&parsed, &user)
    {
        tracing::debug!(component = %manifest.name, webhook, uid = %parsed.uid, "the host's own metadata write, allowed");
        return answer(
            declared,
            &parsed,
            wit::AdmissionResponse { allowed: true, message: None, code: None, warnings: Vec::new(), patched: None },
        );
    }
    let deadline = declared.deadline(served.runtime.limits().deadline);
    let call = served.runtime.review(&served.component.pre, served.caller.clone(), parsed.request.clone(), deadline);
    let invocation = served.component.traced("review", call).await;
    let result = invocation.result.map_err(Error::from).and_then(|a| answer(declared, &parsed, a));
    match &result {
        Ok(review) => tracing::debug!(
            component = %manifest.name,
            webhook,
            uid = %parsed.uid,
            allowed = review["response"]["allowed"].as_bool(),
            elapsed_ms = invocation.duration.as_secs_f64() * 1000.0,
            "admission reviewed"
        ),
        Err(e) => {
            let error = cluster::bounded(&e.to_string(), cluster::MAX_MESSAGE);
            tracing::warn!(component = %manifest.name, webhook, uid = %parsed.uid, error = %error, "admission failed")
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::object::Gvk;

    fn webhook(mutating: bool) -> AdmissionWebhook {
        AdmissionWebhook {
            name: "default.greetings.example.com".into(),
            mutating,
            kinds: vec![Gvk::new("example.com", "v1", "Greeting")],
            operations: vec![Operation::Create],
            ignore_failures: false,
            timeout: Duration::from_secs(10),
            side_effects_on_dry_run: false,
            namespace_selector: None,
            object_selector: None,
        }
    }

    fn greeting(replicas: Option<i64>) -> Value {
        let mut g = json!({
            "apiVersion": "example.com/v1", "kind": "Greeting",
            "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"message": "hi"},
        });
        if let Some(r) = replicas {
            g["spec"]["replicas"] = json!(r);
        }
        g
    }

    fn review(object: &Value) -> Vec<u8> {
        to_bytes(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5", "kind": {"group": "example.com", "version": "v1", "kind": "Greeting"},
                "resource": {"group": "example.com", "version": "v1", "resource": "greetings"},
                "name": "hello", "namespace": "default", "operation": "CREATE",
                "userInfo": {"username": "admin", "groups": ["system:masters"]},
                "object": object, "oldObject": null, "dryRun": false,
            }
        }))
    }

    fn allowed(patched: Option<&Value>) -> wit::AdmissionResponse {
        wit::AdmissionResponse {
            allowed: true,
            message: None,
            code: None,
            warnings: Vec::new(),
            patched: patched.map(to_bytes),
        }
    }

    #[test]
    fn the_request_kind_is_the_reviews_or_else_its_kind() {
        let parsed = parse(&webhook(false), &review(&greeting(None))).expect("a review");
        let k = parsed.request.request_kind;
        assert_eq!((k.group.as_str(), k.version.as_str(), k.kind.as_str()), ("example.com", "v1", "Greeting"));
        let mut converted: Value = serde_json::from_slice(&review(&greeting(None))).expect("JSON");
        converted["request"]["requestKind"] =
            json!({"group": "example.com", "version": "v1alpha1", "kind": "Greeting"});
        let parsed = parse(&webhook(false), &to_bytes(&converted)).expect("a review");
        assert_eq!(parsed.request.kind.version, "v1", "the kind the webhook asked for");
        assert_eq!(parsed.request.request_kind.version, "v1alpha1", "the kind the user wrote");
    }

    #[test]
    fn review_becomes_the_guests_request() {
        let parsed = parse(&webhook(false), &review(&greeting(None))).expect("a review");
        assert_eq!(parsed.uid, "705ab4f5");
        let r = parsed.request;
        assert_eq!(r.webhook, "default.greetings.example.com");
        assert!(matches!(r.operation, wit::Operation::Create));
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert!(r.old_object.is_none());
        assert_eq!(r.user_info.groups, ["system:masters"]);
        let object: Value = serde_json::from_slice(&r.object.expect("an object")).expect("JSON");
        assert_eq!(object, greeting(None));
    }

    fn update(user: &str, sub_resource: Option<&str>, old: &Value, new: &Value) -> Vec<u8> {
        to_bytes(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f6", "kind": {"group": "example.com", "version": "v1", "kind": "Greeting"},
                "name": "hello", "namespace": "default", "operation": "UPDATE", "subResource": sub_resource,
                "userInfo": {"username": user}, "object": new, "oldObject": old,
            }
        }))
    }

    #[test]
    fn only_the_hosts_own_change_of_its_metadata_is_bookkeeping() {
        let mut old = greeting(None);
        old["metadata"]["finalizers"] = json!(["example.com/cleanup", "other.example.com/keep"]);
        old["metadata"]["resourceVersion"] = json!("7");
        let mut released = old.clone();
        released["metadata"]["finalizers"] = json!(["other.example.com/keep"]);
        released["metadata"]["resourceVersion"] = json!("8");
        released["metadata"]["managedFields"] = json!([{"manager": "capstan"}]);
        let mut orphaned = old.clone();
        orphaned["metadata"]["ownerReferences"] = json!([]);
        let mut relabelled = released.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        let mut respecced = released.clone();
        respecced["spec"]["message"] = json!("bye");
        let parsed = |user, sub, new: &Value| parse(&webhook(false), &update(user, sub, &old, new)).expect("a review");
        assert!(is_host_bookkeeping(&parsed("host", None, &released), "host"));
        assert!(is_host_bookkeeping(&parsed("host", None, &orphaned), "host"));
        assert!(!is_host_bookkeeping(&parsed("someone", None, &released), "host"), "another user's edit is reviewed");
        assert!(!is_host_bookkeeping(&parsed("host", None, &relabelled), "host"), "labels are not the host's");
        assert!(!is_host_bookkeeping(&parsed("host", None, &respecced), "host"), "a spec is not the host's");
        assert!(!is_host_bookkeeping(&parsed("host", Some("scale"), &released), "host"));
        let delete = to_bytes(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"version": "v1", "kind": "Greeting"}, "operation": "DELETE",
                "userInfo": {"username": "host"}, "oldObject": old},
        }));
        assert!(!is_host_bookkeeping(&parse(&webhook(false), &delete).expect("a review"), "host"));
    }

    #[test]
    fn reviews_come_only_from_the_namespaces_the_host_serves() {
        for system in ["kube-system", "kube-public", "kube-node-lease"] {
            assert!(!reviews_namespace(None, system), "{system}");
        }
        assert!(reviews_namespace(None, "team-a"));
        let served = ["team-a".to_owned(), "kube-system".to_owned()];
        assert!(reviews_namespace(Some(&served), "team-a"));
        assert!(reviews_namespace(Some(&served), "kube-system"), "served by name");
        assert!(!reviews_namespace(Some(&served), "team-b"));
    }

    #[test]
    fn a_review_is_seen_only_when_its_kind_is_declared_and_every_namespace_it_names_is_served() {
        let served = ["default".to_owned()];
        let seen = |body: &Value| {
            unseen(&webhook(false), Some(&served), &parse(&webhook(false), &to_bytes(body)).expect("a review"))
        };
        let plain: Value = serde_json::from_slice(&review(&greeting(None))).expect("JSON");
        assert_eq!(seen(&plain), None);
        let mut hidden = plain.clone();
        hidden["request"].as_object_mut().expect("a request").remove("namespace");
        assert_eq!(seen(&hidden), None, "the object's namespace is served");
        hidden["request"]["object"]["metadata"]["namespace"] = json!("kube-system");
        assert_eq!(seen(&hidden).as_deref(), Some("namespace kube-system is not served"));
        let mut disagreeing = plain.clone();
        disagreeing["request"]["oldObject"] = json!({"metadata": {"name": "hello", "namespace": "other"}});
        assert!(seen(&disagreeing).is_some_and(|w| w.contains("different namespaces")));
        let mut secret = plain;
        secret["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Secret"});
        assert_eq!(seen(&secret).as_deref(), Some("kind core/Secret is not one the webhook reviews"));
    }

    #[test]
    fn review_of_another_kind_is_refused() {
        let body = to_bytes(&json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}));
        assert!(matches!(parse(&webhook(false), &body), Err(Error::BadReview(_))));
        assert!(matches!(parse(&webhook(false), b"not json"), Err(Error::BadReview(_))));
    }

    #[test]
    fn mutation_is_sent_as_a_base64_json_patch() {
        let parsed = parse(&webhook(true), &review(&greeting(None))).expect("a review");
        let out = answer(&webhook(true), &parsed, allowed(Some(&greeting(Some(1))))).expect("an answer");
        assert_eq!(out["response"]["uid"], "705ab4f5");
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().expect("a patch"))
            .expect("base64");
        let patch: Value = serde_json::from_slice(&bytes).expect("JSON");
        assert_eq!(patch, json!([{"op": "add", "path": "/spec/replicas", "value": 1}]));
    }

    #[test]
    fn unchanged_object_and_validating_webhook_send_no_patch() {
        let parsed = parse(&webhook(true), &review(&greeting(Some(2)))).expect("a review");
        let out = answer(&webhook(true), &parsed, allowed(Some(&greeting(Some(2))))).expect("an answer");
        assert!(out["response"].get("patch").is_none());
        let out = answer(&webhook(false), &parsed, allowed(Some(&greeting(Some(3))))).expect("an answer");
        assert!(out["response"].get("patch").is_none());
    }

    #[test]
    fn mutation_that_renames_the_object_is_refused() {
        let parsed = parse(&webhook(true), &review(&greeting(None))).expect("a review");
        let mut renamed = greeting(None);
        renamed["metadata"]["name"] = json!("other");
        let err = answer(&webhook(true), &parsed, allowed(Some(&renamed))).expect_err("refused");
        assert!(matches!(&err, Error::Answer(m) if m.contains("/metadata/name")), "{err}");
        let err = answer(&webhook(true), &parsed, allowed(Some(&json!([1])))).expect_err("refused");
        assert!(matches!(err, Error::Answer(_)));
    }

    #[test]
    fn a_changed_object_larger_than_the_api_server_accepts_is_refused() {
        let parsed = parse(&webhook(true), &review(&greeting(None))).expect("a review");
        let mut huge = greeting(None);
        huge["spec"]["message"] = json!("x".repeat(4 << 20));
        let err = answer(&webhook(true), &parsed, allowed(Some(&huge))).expect_err("refused");
        assert!(matches!(&err, Error::Answer(m) if m.contains("more than the 3145728")), "{err}");
        let mut big = greeting(None);
        big["spec"]["message"] = json!("x".repeat(1 << 20));
        let out = answer(&webhook(true), &parsed, allowed(Some(&big))).expect("a patch under the limit");
        assert_eq!(out["response"]["patchType"], "JSONPatch");
    }

    #[test]
    fn denial_carries_code_and_message_and_bounded_warnings() {
        let parsed = parse(&webhook(false), &review(&greeting(Some(11)))).expect("a review");
        let denial = wit::AdmissionResponse {
            allowed: false,
            message: Some("spec.replicas must be between 0 and 10".into()),
            code: None,
            warnings: (0..40).map(|_| "w".repeat(300)).collect(),
            patched: None,
        };
        let out = answer(&webhook(false), &parsed, denial.clone()).expect("an answer");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 403);
        assert_eq!(out["response"]["status"]["message"], "spec.replicas must be between 0 and 10");
        let warnings = out["response"]["warnings"].as_array().expect("warnings");
        assert_eq!(warnings.len(), MAX_WARNINGS);
        assert!(warnings.iter().all(|w| w.as_str().is_some_and(|w| w.len() <= MAX_WARNING && w.ends_with("cut)"))));
        let bad_code = wit::AdmissionResponse { code: Some(200), ..denial };
        assert!(matches!(answer(&webhook(false), &parsed, bad_code), Err(Error::Answer(_))));
    }
}
