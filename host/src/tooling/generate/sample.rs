//! A sample custom resource from a CRD's `openAPIV3Schema`, for
//! `capstan gen resource`: a starting point a user edits and applies.
//!
//! What goes in, field by field:
//!
//! - a field's `example` if it has one, else its `default`, else the first
//!   of its `enum`, else a value of its type that respects `minimum`,
//!   `minLength`, `minItems` and a few string `format`s;
//! - an object holds its `required` fields, and the optional ones that have
//!   an `example` or a `default` (every field with [`Options::all`]);
//! - `spec` is always there; `status` never is (the controller writes it).
//!
//! ```
//! use capstan_host::tooling::generate::sample::{Options, resource};
//! use serde_json::json;
//!
//! let crd = json!({
//!     "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
//!     "metadata": {"name": "greetings.examples.capstan.dev"},
//!     "spec": {"group": "examples.capstan.dev", "scope": "Namespaced",
//!         "names": {"kind": "Greeting", "plural": "greetings"},
//!         "versions": [{"name": "v1alpha1", "served": true, "storage": true,
//!             "schema": {"openAPIV3Schema": {"type": "object", "properties": {
//!                 "spec": {"type": "object", "required": ["message"], "properties": {
//!                     "message": {"type": "string", "example": "hello"}}}}}}}]}
//! });
//! let sample = resource(&crd, &Options::default()).unwrap();
//! assert_eq!(sample["spec"]["message"], "hello");
//! assert_eq!(sample["metadata"]["namespace"], "default");
//! ```

use serde_json::{Map, Value, json};

/// Why no sample can be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The document is not a CustomResourceDefinition.
    #[error("not a CustomResourceDefinition (kind {0:?})")]
    NotACrd(String),
    /// The CRD lacks a field the sample needs.
    #[error("crd {crd}: no {field}")]
    Missing {
        /// The CRD's name.
        crd: String,
        /// The missing field.
        field: &'static str,
    },
    /// The asked version is not one of the CRD's.
    #[error("crd {crd} has no version {version} (it has: {known})")]
    NoSuchVersion {
        /// The CRD's name.
        crd: String,
        /// The version asked for.
        version: String,
        /// The versions it has, comma-separated.
        known: String,
    },
}

/// How to make a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Options {
    /// The version to sample. Default: the storage version.
    pub version: Option<String>,
    /// `metadata.name`. Default: `example`.
    pub name: String,
    /// `metadata.namespace` of a namespaced kind. Default: `default`.
    pub namespace: String,
    /// Include every optional field, not only required ones and those with
    /// an example or default. Default: false.
    pub all: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self { version: None, name: "example".to_owned(), namespace: "default".to_owned(), all: false }
    }
}

/// Deepest nesting a sample follows (schemas of CRDs are not recursive, but
/// a hand-written one may be deep).
const MAX_DEPTH: usize = 32;

/// A sample object of the kind `crd` defines; see the [module docs](self).
///
/// # Errors
///
/// When `crd` is not a CRD, lacks names, group, versions or a schema, or has
/// no version `options.version`.
pub fn resource(crd: &Value, options: &Options) -> Result<Value, Error> {
    let kind = crd["kind"].as_str().unwrap_or_default();
    if kind != "CustomResourceDefinition" {
        return Err(Error::NotACrd(kind.to_owned()));
    }
    let crd_name = crd["metadata"]["name"].as_str().unwrap_or("?").to_owned();
    let missing = |field| Error::Missing { crd: crd_name.clone(), field };
    let spec = &crd["spec"];
    let group = spec["group"].as_str().ok_or_else(|| missing("spec.group"))?;
    let kind = spec["names"]["kind"].as_str().ok_or_else(|| missing("spec.names.kind"))?;
    let versions = spec["versions"].as_array().filter(|v| !v.is_empty()).ok_or_else(|| missing("spec.versions"))?;
    let version = match &options.version {
        Some(wanted) => versions.iter().find(|v| v["name"] == wanted.as_str()).ok_or_else(|| Error::NoSuchVersion {
            crd: crd_name.clone(),
            version: wanted.clone(),
            known: versions.iter().filter_map(|v| v["name"].as_str()).collect::<Vec<_>>().join(", "),
        })?,
        None => versions.iter().find(|v| v["storage"] == true).unwrap_or(&versions[0]),
    };
    let version_name = version["name"].as_str().ok_or_else(|| missing("spec.versions[].name"))?;
    let schema = version["schema"]["openAPIV3Schema"]
        .as_object()
        .map(|_| &version["schema"]["openAPIV3Schema"])
        .ok_or_else(|| missing("schema.openAPIV3Schema"))?;

    let mut metadata = Map::new();
    metadata.insert("name".to_owned(), json!(options.name));
    if spec["scope"].as_str() != Some("Cluster") {
        metadata.insert("namespace".to_owned(), json!(options.namespace));
    }
    let mut object = Map::new();
    object.insert("apiVersion".to_owned(), json!(format!("{group}/{version_name}")));
    object.insert("kind".to_owned(), json!(kind));
    object.insert("metadata".to_owned(), Value::Object(metadata));
    if let Some(properties) = schema["properties"].as_object() {
        for (field, sub) in properties {
            let wanted = field == "spec" || is_required(schema, field) || options.all || has_hint(sub);
            if ["apiVersion", "kind", "metadata", "status"].contains(&field.as_str()) || !wanted {
                continue;
            }
            object.insert(field.clone(), value(sub, options.all, 1));
        }
    }
    Ok(Value::Object(object))
}

fn is_required(schema: &Value, field: &str) -> bool {
    schema["required"].as_array().is_some_and(|r| r.iter().any(|f| f == field))
}

/// Whether the schema says what a value should be (so an optional field
/// is worth showing).
fn has_hint(schema: &Value) -> bool {
    schema.get("example").is_some() || schema.get("default").is_some()
}

/// A sample value for `schema`.
fn value(schema: &Value, all: bool, depth: usize) -> Value {
    if let Some(example) = schema.get("example") {
        return example.clone();
    }
    if let Some(default) = schema.get("default") {
        return default.clone();
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if depth >= MAX_DEPTH {
        return Value::Null;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return json!(number(schema, 0.0) as i64);
    }
    let ty = schema["type"].as_str().unwrap_or(if schema.get("properties").is_some() { "object" } else { "" });
    match ty {
        "object" => {
            let mut object = Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (field, sub) in properties {
                    if is_required(schema, field) || all || has_hint(sub) {
                        object.insert(field.clone(), value(sub, all, depth + 1));
                    }
                }
            }
            Value::Object(object)
        }
        "array" => {
            let min = schema["minItems"].as_u64().unwrap_or(0);
            let count = if all { min.max(1) } else { min };
            Value::Array((0..count).map(|_| value(&schema["items"], all, depth + 1)).collect())
        }
        "string" => json!(string(schema)),
        "integer" => json!(number(schema, 1.0) as i64),
        "number" => json!(number(schema, 0.0)),
        "boolean" => json!(false),
        // No type (e.g. x-kubernetes-preserve-unknown-fields): anything goes.
        _ => json!({}),
    }
}

/// A number within `minimum`/`maximum` (integers step by 1 past an
/// exclusive bound).
fn number(schema: &Value, fallback: f64) -> f64 {
    let mut n = match schema["minimum"].as_f64() {
        Some(min) if schema["exclusiveMinimum"] == true => min + 1.0,
        Some(min) => min,
        None => fallback,
    };
    if let Some(max) = schema["maximum"].as_f64() {
        let max = if schema["exclusiveMaximum"] == true { max - 1.0 } else { max };
        n = n.min(max);
    }
    if let Some(multiple) = schema["multipleOf"].as_f64().filter(|m| *m > 0.0) {
        n = (n / multiple).ceil() * multiple;
    }
    n
}

/// A string for the schema's `format`, padded to `minLength` and cut to
/// `maxLength`.
fn string(schema: &Value) -> String {
    let base = match schema["format"].as_str() {
        Some("date-time") => "2024-01-01T00:00:00Z",
        Some("date") => "2024-01-01",
        Some("email") => "user@example.com",
        Some("uri" | "url") => "https://example.com",
        Some("hostname") => "example.com",
        Some("ipv4") => "192.0.2.1",
        Some("ipv6") => "2001:db8::1",
        Some("uuid") => "00000000-0000-0000-0000-000000000000",
        Some("duration") => "1m",
        Some("byte") => "",
        _ => "string",
    };
    let mut s = base.to_owned();
    let min = schema["minLength"].as_u64().unwrap_or(0) as usize;
    while s.chars().count() < min {
        s.push('x');
    }
    if let Some(max) = schema["maxLength"].as_u64() {
        s = s.chars().take(max as usize).collect();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(scope: &str, versions: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": scope, "names": {"kind": "Widget", "plural": "widgets"},
                     "versions": versions}
        })
    }

    fn version(name: &str, storage: bool, spec: Value) -> Value {
        json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {"spec": spec, "status": {"type": "object", "required": ["phase"],
                "properties": {"phase": {"type": "string"}}}}
        }}})
    }

    fn widget_spec() -> Value {
        json!({"type": "object", "required": ["size", "color", "owner", "ports"], "properties": {
            "size": {"type": "integer", "minimum": 3, "maximum": 10},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "owner": {"type": "object", "required": ["email"], "properties": {
                "email": {"type": "string", "format": "email"},
                "team": {"type": "string"}}},
            "ports": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["port"],
                "properties": {"port": {"type": "integer", "example": 8080}}}},
            "replicas": {"type": "integer", "default": 2},
            "label": {"type": "string", "example": "blue-widget"},
            "paused": {"type": "boolean"},
            "ratio": {"type": "number", "minimum": 0.5}
        }})
    }

    #[test]
    fn required_fields_defaults_enums_and_examples_make_the_sample() {
        let sample = resource(&crd("Namespaced", json!([version("v1", true, widget_spec())])), &Options::default())
            .expect("a sample");
        assert_eq!(
            sample,
            json!({
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "example", "namespace": "default"},
                "spec": {
                    "size": 3,
                    "color": "red",
                    "owner": {"email": "user@example.com"},
                    "ports": [{"port": 8080}],
                    "replicas": 2,
                    "label": "blue-widget"
                }
            })
        );
    }

    #[test]
    fn all_adds_every_optional_field() {
        let options = Options { all: true, ..Options::default() };
        let sample = resource(&crd("Namespaced", json!([version("v1", true, widget_spec())])), &options).expect("ok");
        assert_eq!(sample["spec"]["paused"], json!(false));
        assert_eq!(sample["spec"]["ratio"], json!(0.5));
        assert_eq!(sample["spec"]["owner"]["team"], json!("string"));
        assert!(sample.get("status").is_none(), "status is the controller's");
    }

    #[test]
    fn a_cluster_scoped_kind_has_no_namespace_and_the_storage_version_is_the_default() {
        let versions = json!([
            version("v1alpha1", false, json!({"type": "object"})),
            version("v1", true, json!({"type": "object"}))
        ]);
        let options = Options { name: "big".to_owned(), ..Options::default() };
        let sample = resource(&crd("Cluster", versions.clone()), &options).expect("ok");
        assert_eq!(sample["apiVersion"], "example.com/v1");
        assert_eq!(sample["metadata"], json!({"name": "big"}));
        let older = Options { version: Some("v1alpha1".to_owned()), ..Options::default() };
        assert_eq!(resource(&crd("Cluster", versions), &older).expect("ok")["apiVersion"], "example.com/v1alpha1");
    }

    #[test]
    fn string_and_number_bounds_are_respected() {
        assert_eq!(string(&json!({"type": "string", "minLength": 8})), "stringxx");
        assert_eq!(string(&json!({"type": "string", "maxLength": 3})), "str");
        assert_eq!(number(&json!({"minimum": 1, "exclusiveMinimum": true}), 0.0), 2.0);
        assert_eq!(number(&json!({"maximum": -5}), 1.0), -5.0);
        assert_eq!(number(&json!({"minimum": 3, "multipleOf": 5}), 0.0), 5.0);
        assert_eq!(value(&json!({"x-kubernetes-int-or-string": true, "minimum": 4}), false, 1), json!(4));
        assert_eq!(value(&json!({"x-kubernetes-preserve-unknown-fields": true}), false, 1), json!({}));
    }

    #[test]
    fn error_messages_read_right() {
        let not = json!({"kind": "ConfigMap"});
        assert_eq!(
            resource(&not, &Options::default()).expect_err("no crd").to_string(),
            "not a CustomResourceDefinition (kind \"ConfigMap\")"
        );
        let options = Options { version: Some("v9".to_owned()), ..Options::default() };
        let err = resource(&crd("Namespaced", json!([version("v1", true, json!({}))])), &options).expect_err("v9");
        assert_eq!(err.to_string(), "crd widgets.example.com has no version v9 (it has: v1)");
        let bare = crd("Namespaced", json!([{"name": "v1", "served": true, "storage": true}]));
        assert_eq!(
            resource(&bare, &Options::default()).expect_err("no schema").to_string(),
            "crd widgets.example.com: no schema.openAPIV3Schema"
        );
    }
}
