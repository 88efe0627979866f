//! `ConversionReview` (`apiextensions.k8s.io/v1`) in and out.
//!
//! # What the host checks
//!
//! - every object to convert is of a group and kind the component declares
//!   in `roles.conversion`, in the group of the desired `apiVersion`;
//! - the guest returns as many objects as it got, in the same order, each
//!   with the desired `apiVersion`, the same `kind`, and the same
//!   `metadata.uid`, `metadata.name` and `metadata.namespace`.
//!
//! Any failure (a guest error, a trap, an answer that breaks these) is a
//! `Failure` result with the message, cut to [`cluster::MAX_MESSAGE`]
//! bytes (the log line too): the API server shows it to the client, and
//! logs it each time it retries. A review the host cannot read is an HTTP
//! 400.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, Served};
use crate::cluster;
use crate::manifest::Manifest;
use crate::object::Gvk;
use crate::runtime::bindings::capstan::operator::types as wit;

/// The part of a `ConversionReview`'s request the host reads.
#[derive(Debug, Deserialize)]
struct Request {
    uid: String,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: String,
    #[serde(default)]
    objects: Vec<Value>,
}

/// A parsed `ConversionReview`: what the guest gets, and what its answer
/// is checked against.
#[derive(Debug)]
pub struct Parsed {
    /// The request's UID, echoed in the answer.
    pub uid: String,
    /// The `apiVersion` to convert to, e.g. `example.com/v1`.
    pub desired_api_version: String,
    /// The objects to convert, in order.
    pub objects: Vec<Value>,
}

/// Parses a `ConversionReview`.
///
/// # Errors
///
/// [`Error::BadReview`] when `body` is not a v1 `ConversionReview` with a
/// request.
pub fn parse(body: &[u8]) -> Result<Parsed, Error> {
    let r: Request = super::request_of(body, "apiextensions.k8s.io/v1", "ConversionReview")?;
    Ok(Parsed { uid: r.uid, desired_api_version: r.desired_api_version, objects: r.objects })
}

impl Parsed {
    /// The guest's request for the component of `manifest`.
    ///
    /// # Errors
    ///
    /// The message of the `Failure` to answer when an object is not of a
    /// group and kind `manifest` declares in `roles.conversion`, in the
    /// group of the desired `apiVersion`.
    pub fn request(&self, manifest: &Manifest) -> Result<wit::ConversionRequest, String> {
        let desired_group = Gvk::from_api_version(&self.desired_api_version, "").group;
        for object in &self.objects {
            let declared = Gvk::of(object)
                .filter(|g| g.group == desired_group)
                .is_some_and(|g| manifest.roles.conversion.iter().any(|c| c.group == g.group && c.kind == g.kind));
            if !declared {
                return Err(format!(
                    "component {} does not convert this object to {}",
                    manifest.name, self.desired_api_version
                ));
            }
        }
        Ok(wit::ConversionRequest {
            desired_api_version: self.desired_api_version.clone(),
            objects: self.objects.iter().map(|o| serde_json::to_vec(o).expect("a JSON value serializes")).collect(),
        })
    }

    /// The `ConversionReview` answer: `Success` with the `converted`
    /// objects (checked with [`check`]), or `Failure` with the message, cut
    /// to [`cluster::MAX_MESSAGE`] bytes.
    pub fn answer(&self, converted: Result<Vec<Value>, &str>) -> Value {
        let response = match converted {
            Ok(objects) => json!({"uid": self.uid, "convertedObjects": objects, "result": {"status": "Success"}}),
            Err(message) => json!({
                "uid": self.uid,
                "convertedObjects": [],
                "result": {"status": "Failure", "message": cluster::bounded(message, cluster::MAX_MESSAGE)},
            }),
        };
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})
    }
}

/// The fields a conversion must keep, besides `kind`.
const KEPT: [&str; 4] = ["/kind", "/metadata/uid", "/metadata/name", "/metadata/namespace"];

/// Checks the guest's converted objects against the originals.
///
/// # Errors
///
/// [`Error::Answer`] naming the first broken rule.
pub fn check(desired: &str, objects: &[Value], converted: &[wit::Json]) -> Result<Vec<Value>, Error> {
    if converted.len() != objects.len() {
        return Err(Error::Answer(format!("{} objects converted, {} asked for", converted.len(), objects.len())));
    }
    let mut out = Vec::with_capacity(converted.len());
    for (i, (original, bytes)) in objects.iter().zip(converted).enumerate() {
        let object: Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::Answer(format!("converted object {i} is not JSON: {e}")))?;
        let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        if api_version != desired {
            return Err(Error::Answer(format!("converted object {i} has apiVersion {api_version:?}, not {desired:?}")));
        }
        if let Some(field) = KEPT.iter().find(|p| original.pointer(p) != object.pointer(p)) {
            return Err(Error::Answer(format!("converted object {i} changes {field}")));
        }
        out.push(object);
    }
    Ok(out)
}

/// Serves one conversion review for `served`.
///
/// # Errors
///
/// [`Error::BadReview`] when `body` is not a v1 `ConversionReview` with a
/// request; every other failure is in the returned review.
pub async fn handle(served: &Served, body: &[u8]) -> Result<Value, Error> {
    // A trace of its own per review.
    let span = tracing::info_span!(
        "conversion_review",
        controller = %served.component.manifest.name,
        trace_id = tracing::field::Empty,
        "otel.status_code" = tracing::field::Empty,
        "otel.status_message" = tracing::field::Empty,
    );
    crate::telemetry::start_trace(&span);
    tracing::Instrument::instrument(review(served, body, &span), span.clone()).await
}

async fn review(served: &Served, body: &[u8], span: &tracing::Span) -> Result<Value, Error> {
    let parsed = parse(body)?;
    let manifest = &served.component.manifest;
    let request = match parsed.request(manifest) {
        Ok(request) => request,
        Err(message) => return Ok(parsed.answer(Err(&message))),
    };
    let deadline = served.runtime.limits().deadline;
    let call = served.runtime.convert(&served.component.pre, served.caller.clone(), request, deadline);
    let invocation = served.component.traced("convert", call).await;
    let converted = match invocation.result {
        Ok(Ok(converted)) => check(&parsed.desired_api_version, &parsed.objects, &converted),
        Ok(Err(message)) => Err(Error::Answer(message)),
        Err(e) => Err(Error::Guest(e)),
    };
    Ok(match converted {
        Ok(objects) => parsed.answer(Ok(objects)),
        Err(e) => {
            let error = cluster::bounded(&e.to_string(), cluster::MAX_MESSAGE);
            crate::telemetry::record_error(span, &error);
            tracing::warn!(component = %manifest.name, uid = %parsed.uid, error = %error, "conversion failed");
            match e {
                // The guest's own message, as it gave it.
                Error::Answer(m) if !m.starts_with("converted") => parsed.answer(Err(&m)),
                _ => parsed.answer(Err(&error)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greeting(api_version: &str) -> Value {
        json!({"apiVersion": api_version, "kind": "Greeting", "metadata": {"name": "a", "namespace": "d", "uid": "u1"}})
    }

    fn bytes(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).expect("JSON")
    }

    #[test]
    fn converted_objects_in_the_desired_version_pass() {
        let out = check("example.com/v1", &[greeting("example.com/v1alpha1")], &[bytes(&greeting("example.com/v1"))])
            .expect("valid");
        assert_eq!(out, [greeting("example.com/v1")]);
    }

    #[test]
    fn conversion_that_loses_an_object_or_the_version_is_refused() {
        let objects = [greeting("example.com/v1alpha1"), greeting("example.com/v1alpha1")];
        let err = check("example.com/v1", &objects, &[bytes(&greeting("example.com/v1"))]).expect_err("refused");
        assert_eq!(err.to_string(), "invalid answer from the guest: 1 objects converted, 2 asked for");
        let err = check("example.com/v1", &objects[..1], &[bytes(&objects[0])]).expect_err("refused");
        assert!(matches!(&err, Error::Answer(m) if m.contains("apiVersion")), "{err}");
    }

    #[test]
    fn conversion_that_renames_an_object_is_refused() {
        let mut renamed = greeting("example.com/v1");
        renamed["metadata"]["uid"] = json!("u2");
        let err =
            check("example.com/v1", &[greeting("example.com/v1alpha1")], &[bytes(&renamed)]).expect_err("refused");
        assert!(matches!(&err, Error::Answer(m) if m.contains("/metadata/uid")), "{err}");
    }
}
