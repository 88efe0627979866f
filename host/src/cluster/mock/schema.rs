//! Schemas of the kinds a mock cluster serves, and what the API server does
//! with them: pruning unknown fields, applying CRD defaults, and structural
//! validation.
//!
//! A built-in kind's schema is its OpenAPI v3 definition as captured from
//! the project's control plane (see [`catalog`](super::catalog)); a custom
//! kind's is its CRD's `openAPIV3Schema`. Both are walked as JSON; `$ref`s
//! of built-in schemas point into the captured definitions table.
//!
//! The two kinds of schema are read slightly differently, as the API server
//! does:
//!
//! - In a built-in schema, an object with neither `properties` nor
//!   `additionalProperties` is free-form (such as `RawExtension`); in a CRD
//!   schema it is an empty object whose fields are all pruned, unless it
//!   has `x-kubernetes-preserve-unknown-fields: true`.
//! - The `metadata` of a custom resource is read with the built-in
//!   `ObjectMeta` schema, and its `apiVersion` and `kind` are always
//!   allowed.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};

use super::catalog;

/// The definition of object metadata in the captured schemas.
pub(super) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The schema of one served kind and version.
#[derive(Clone, Debug)]
pub(super) enum Schema {
    /// A built-in kind: the name of its definition in the captured table.
    BuiltIn(String),
    /// A custom resource: its CRD version's `openAPIV3Schema`.
    Custom(Arc<Value>),
}

impl Schema {
    /// The root of the schema, to walk.
    pub(super) fn root(&self) -> Node<'_> {
        let definitions = &catalog::get().schemas;
        match self {
            Self::BuiltIn(name) => {
                let schema = definitions.get(name).unwrap_or(&Value::Null);
                Node { schema, custom: false, root: true }.resolved()
            }
            Self::Custom(schema) => Node { schema, custom: true, root: true },
        }
    }

    /// The schema of kinds registered without one: any field is kept, every
    /// list is atomic, and only `metadata` is known.
    pub(super) fn permissive() -> Self {
        Self::Custom(Arc::new(serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})))
    }

    /// True for a CRD's schema.
    pub(super) fn is_custom(&self) -> bool {
        matches!(self, Self::Custom(_))
    }
}

/// How the items of a list are identified, from `x-kubernetes-list-type`
/// and `x-kubernetes-list-map-keys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ListType {
    /// The list is one value: replaced whole, owned whole.
    Atomic,
    /// A set of scalars: each value is its own item.
    Set,
    /// A list of maps identified by the values of these keys.
    Map(Vec<String>),
}

/// A place in a schema.
#[derive(Clone, Copy, Debug)]
pub(super) struct Node<'a> {
    schema: &'a Value,
    /// Read as a CRD schema (see the module docs).
    custom: bool,
    /// The root of an object's schema.
    root: bool,
}

impl<'a> Node<'a> {
    /// This node with its `$ref`s followed.
    fn resolved(self) -> Self {
        let definitions = &catalog::get().schemas;
        let mut schema = self.schema;
        for _ in 0..16 {
            match schema.get("$ref").and_then(Value::as_str).and_then(|name| definitions.get(name)) {
                Some(target) => schema = target,
                None => break,
            }
        }
        Self { schema, ..self }
    }

    fn child(self, schema: &'a Value) -> Self {
        Self { schema, custom: self.custom, root: false }.resolved()
    }

    fn get(self, key: &str) -> Option<&'a Value> {
        self.schema.get(key)
    }

    fn flag(self, key: &str) -> bool {
        self.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The declared `type`, if any.
    pub(super) fn type_name(self) -> Option<&'a str> {
        self.get("type").and_then(Value::as_str)
    }

    /// True if fields this schema does not declare are kept.
    pub(super) fn preserves_unknown(self) -> bool {
        if self.flag("x-kubernetes-preserve-unknown-fields") {
            return true;
        }
        // Built-in free-form objects (RawExtension, JSON) and schema-less
        // nodes keep everything.
        !self.custom
            && self.get("properties").is_none()
            && self.get("additionalProperties").is_none()
            && self.get("items").is_none()
    }

    /// The schema of a field of this object, if it declares one.
    pub(super) fn field(self, name: &str) -> Option<Self> {
        if self.root && self.custom {
            match name {
                "metadata" => {
                    let meta = catalog::get().schemas.get(OBJECT_META)?;
                    return Some(Self { schema: meta, custom: false, root: false });
                }
                "apiVersion" | "kind" => return Some(self.child(&STRING_SCHEMA)),
                _ => {}
            }
        }
        if self.flag("x-kubernetes-embedded-resource") && name == "metadata" {
            let meta = catalog::get().schemas.get(OBJECT_META)?;
            return Some(Self { schema: meta, custom: false, root: false });
        }
        if let Some(property) = self.get("properties").and_then(|p| p.get(name)) {
            return Some(self.child(property));
        }
        match self.get("additionalProperties") {
            Some(Value::Object(schema)) if !schema.is_empty() => {
                Some(self.child(self.schema_value("additionalProperties")))
            }
            Some(Value::Object(_) | Value::Bool(true)) => Some(self.child(&ANY_SCHEMA)),
            _ => None,
        }
    }

    fn schema_value(self, key: &str) -> &'a Value {
        self.get(key).unwrap_or(&Value::Null)
    }

    /// True if this field is named by `properties`, as opposed to being a
    /// key of a map (`additionalProperties`).
    fn is_property(self, name: &str) -> bool {
        self.get("properties").and_then(|p| p.get(name)).is_some()
            || (self.root && self.custom && matches!(name, "metadata" | "apiVersion" | "kind"))
    }

    /// The schema of this list's items.
    pub(super) fn items(self) -> Option<Self> {
        self.get("items").filter(|i| i.is_object()).map(|items| self.child(items))
    }

    /// How this list merges in server-side apply; lists without a list type
    /// are atomic, as on the API server.
    pub(super) fn list_type(self) -> ListType {
        match self.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => {
                let keys = self
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| keys.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default();
                ListType::Map(keys)
            }
            _ => ListType::Atomic,
        }
    }

    /// The schema's `default` for this field, if any.
    pub(super) fn default_value(self) -> Option<&'a Value> {
        self.get("default")
    }

    fn nullable(self) -> bool {
        self.flag("nullable")
    }
}

/// `{"type": "string"}`, for `apiVersion` and `kind`.
static STRING_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| serde_json::json!({"type": "string"}));

/// Anything goes: the items of `additionalProperties: true`.
static ANY_SCHEMA: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| serde_json::json!({"x-kubernetes-preserve-unknown-fields": true}));

/// One problem with a field, as the API server words it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct FieldError {
    /// The field, as the API server writes paths: `spec.containers[0].name`.
    pub(super) path: String,
    /// What is wrong.
    pub(super) problem: Problem,
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Problem {
    /// The value has the wrong JSON type.
    Type {
        /// The type the schema asks for.
        expected: String,
        /// The value given.
        value: Value,
    },
    /// A required field is missing.
    Required,
    /// A value outside an `enum`.
    Unsupported {
        /// The value given.
        value: Value,
        /// The allowed values.
        allowed: Vec<Value>,
    },
    /// A value that breaks a constraint; `reason` is the API server's
    /// explanation.
    Invalid {
        /// The value given.
        value: Value,
        /// Why it is invalid.
        reason: String,
    },
    /// A string or list longer than allowed.
    TooLong {
        /// The limit.
        max: u64,
        /// True for lists (items), false for strings (bytes).
        items: bool,
    },
    /// A list-map item whose keys another item has too.
    Duplicate(Value),
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = &self.path;
        match &self.problem {
            Problem::Type { expected, value } => {
                let got = json_type(value);
                write!(f, "{path}: Invalid value: \"{got}\": {path} in body must be of type {expected}: \"{got}\"")
            }
            Problem::Required => write!(f, "{path}: Required value"),
            Problem::Unsupported { value, allowed } => {
                let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
                write!(f, "{path}: Unsupported value: {value}: supported values: {}", allowed.join(", "))
            }
            Problem::Invalid { value, reason } => write!(f, "{path}: Invalid value: {value}: {reason}"),
            Problem::TooLong { max, items: false } => write!(f, "{path}: Too long: may not be more than {max} bytes"),
            Problem::TooLong { max, items: true } => write!(f, "{path}: Too many: must have at most {max} items"),
            Problem::Duplicate(keys) => write!(f, "{path}: Duplicate value: {keys}"),
        }
    }
}

/// The JSON type of a value as the API server names it.
pub(super) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Removes the fields a schema does not declare (unless it preserves
/// unknown fields) and nulls where the schema does not allow them, as the
/// API server does when it decodes a built-in object or prunes a custom
/// resource. Returns the removed paths, as the API server's warnings name
/// them.
pub(super) fn prune(value: &mut Value, node: Node<'_>) -> Vec<String> {
    let mut removed = Vec::new();
    prune_at(value, node, &mut String::new(), &mut removed);
    removed
}

fn prune_at(value: &mut Value, node: Node<'_>, path: &mut String, removed: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let preserve = node.preserves_unknown();
            let mut drop = Vec::new();
            for (name, child) in map.iter_mut() {
                let len = path.len();
                push_field(path, node, name);
                match node.field(name) {
                    Some(_) if child.is_null() && !node.field(name).is_some_and(Node::nullable) => {
                        drop.push(name.clone());
                    }
                    Some(schema) => prune_at(child, schema, path, removed),
                    None if preserve => {}
                    None => {
                        removed.push(path.clone());
                        drop.push(name.clone());
                    }
                }
                path.truncate(len);
            }
            for name in drop {
                map.remove(&name);
            }
        }
        Value::Array(items) => {
            if let Some(schema) = node.items() {
                for (i, item) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    prune_at(item, schema, path, removed);
                    path.truncate(len);
                }
            }
        }
        _ => {}
    }
}

/// The fields of a value that its schema does not declare (where it does
/// not preserve unknown fields), as paths.
pub(super) fn undeclared(value: &Value, node: Node<'_>) -> Vec<String> {
    let mut copy = value.clone();
    prune(&mut copy, node)
}

/// Appends a field to a path the way the API server writes it: `.name` for
/// a declared field, `[key]` for a key of a map.
fn push_field(path: &mut String, node: Node<'_>, name: &str) {
    if node.is_property(name) || node.get("additionalProperties").is_none() {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(name);
    } else {
        path.push('[');
        path.push_str(name);
        path.push(']');
    }
}

/// Sets the `default` of every absent field whose schema has one, then
/// recurses, as the API server defaults custom resources.
pub(super) fn apply_defaults(value: &mut Value, node: Node<'_>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = node.get("properties") {
                for (name, property) in properties {
                    let schema = node.child(property);
                    if !map.contains_key(name)
                        && let Some(default) = schema.default_value().or_else(|| property.get("default"))
                    {
                        map.insert(name.clone(), default.clone());
                    }
                }
            }
            for (name, child) in map.iter_mut() {
                if let Some(schema) = node.field(name).filter(|_| !(node.root && name == "metadata")) {
                    apply_defaults(child, schema);
                }
            }
        }
        Value::Array(items) => {
            if let Some(schema) = node.items() {
                for item in items {
                    apply_defaults(item, schema);
                }
            }
        }
        _ => {}
    }
}

/// Checks a value against a schema: types, `required`, `enum`, and (for
/// every schema) `minimum`, `maximum`, `minLength`, `maxLength`,
/// `minItems`, `maxItems` and `pattern`. Returns every problem found.
pub(super) fn validate(value: &Value, node: Node<'_>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_at(value, node, &mut String::new(), &mut errors);
    errors
}

fn validate_at(value: &Value, node: Node<'_>, path: &mut String, errors: &mut Vec<FieldError>) {
    let error = |problem: Problem| FieldError { path: path.clone(), problem };
    if value.is_null() {
        if node.custom && !node.nullable() && node.type_name().is_some() {
            errors.push(error(Problem::Type {
                expected: node.type_name().unwrap_or_default().to_owned(),
                value: value.clone(),
            }));
        }
        return;
    }
    if let Some(expected) = type_mismatch(value, node) {
        errors.push(error(Problem::Type { expected, value: value.clone() }));
        return;
    }
    if let Some(Value::Array(allowed)) = node.get("enum")
        && !allowed.contains(value)
    {
        errors.push(error(Problem::Unsupported { value: value.clone(), allowed: allowed.clone() }));
    }
    check_bounds(value, node, path, errors);
    match value {
        Value::Object(map) => {
            // Built-in status is not checked for required fields: the API
            // server's status validation only checks a few.
            let in_status = !node.custom && (path == "status" || path.starts_with("status."));
            if !in_status && let Some(Value::Array(required)) = node.get("required") {
                for name in required.iter().filter_map(Value::as_str) {
                    if map.get(name).is_none_or(Value::is_null) && requires(node, name) {
                        let len = path.len();
                        push_field(path, node, name);
                        errors.push(FieldError { path: path.clone(), problem: Problem::Required });
                        path.truncate(len);
                    }
                }
            }
            for (name, child) in map {
                if let Some(schema) = node.field(name) {
                    let len = path.len();
                    push_field(path, node, name);
                    validate_at(child, schema, path, errors);
                    path.truncate(len);
                }
            }
        }
        Value::Array(items) => {
            if let Some(schema) = node.items() {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    validate_at(item, schema, path, errors);
                    path.truncate(len);
                }
            }
            // Built-in lists tolerate duplicates (the API server only warns,
            // e.g. for a repeated env var); CRD list-maps do not.
            if node.custom
                && let ListType::Map(keys) = node.list_type()
            {
                check_unique_keys(items, &keys, path, errors);
            }
        }
        _ => {}
    }
}

/// Whether a `required` field must really be present. A built-in schema
/// marks every Go field without `omitempty` as required, but the API
/// server decodes a missing boolean or number as its zero value and
/// accepts it; only missing objects, lists and strings are refused.
fn requires(node: Node<'_>, name: &str) -> bool {
    if node.custom {
        return true;
    }
    let Some(field) = node.field(name) else { return true };
    !matches!(field.type_name(), Some("boolean" | "integer" | "number"))
}

/// The type the schema asks for, if `value` does not have it.
fn type_mismatch(value: &Value, node: Node<'_>) -> Option<String> {
    if node.flag("x-kubernetes-int-or-string") {
        return (!value.is_string() && !is_integer(value)).then(|| "string or integer".to_owned());
    }
    if let Some(Value::Array(alternatives)) = node.get("oneOf").or_else(|| node.get("anyOf")) {
        let types: Vec<&str> = alternatives.iter().filter_map(|a| a.get("type")).filter_map(Value::as_str).collect();
        if !types.is_empty() && !types.iter().any(|t| has_type(value, t)) {
            return Some(types.join(" or "));
        }
    }
    let expected = node.type_name()?;
    (!has_type(value, expected)).then(|| expected.to_owned())
}

fn has_type(value: &Value, expected: &str) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => is_integer(value),
        "number" => value.is_number(),
        _ => true,
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0 && f.is_finite())
}

/// `minimum`, `maximum` (and their exclusive forms), lengths, item counts
/// and `pattern`.
fn check_bounds(value: &Value, node: Node<'_>, path: &str, errors: &mut Vec<FieldError>) {
    let invalid = |reason: String| FieldError {
        path: path.to_owned(),
        problem: Problem::Invalid { value: value.clone(), reason },
    };
    let number = |key: &str| node.get(key).and_then(Value::as_f64);
    let limit = |key: &str| node.get(key).and_then(Value::as_u64);
    match value {
        Value::Number(n) => {
            let Some(x) = n.as_f64() else { return };
            if let Some(min) = number("minimum") {
                if node.flag("exclusiveMinimum") && x <= min {
                    errors.push(invalid(format!("{path} in body should be greater than {min}")));
                } else if x < min {
                    errors.push(invalid(format!("{path} in body should be greater than or equal to {min}")));
                }
            }
            if let Some(max) = number("maximum") {
                if node.flag("exclusiveMaximum") && x >= max {
                    errors.push(invalid(format!("{path} in body should be less than {max}")));
                } else if x > max {
                    errors.push(invalid(format!("{path} in body should be less than or equal to {max}")));
                }
            }
        }
        Value::String(s) => {
            let chars = s.chars().count() as u64;
            if let Some(min) = limit("minLength")
                && chars < min
            {
                errors.push(invalid(format!("{path} in body should be at least {min} chars long")));
            }
            if let Some(max) = limit("maxLength")
                && chars > max
            {
                // The API server checks nothing else of a string that is too long.
                errors.push(FieldError { path: path.to_owned(), problem: Problem::TooLong { max, items: false } });
                return;
            }
            if let Some(pattern) = node.get("pattern").and_then(Value::as_str)
                && let Some(regex) = compiled(pattern)
                && !regex.is_match(s)
            {
                errors.push(invalid(format!("{path} in body should match '{pattern}'")));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(min) = limit("minItems")
                && n < min
            {
                errors.push(invalid(format!("{path} in body should have at least {min} items")));
            }
            if let Some(max) = limit("maxItems")
                && n > max
            {
                errors.push(FieldError { path: path.to_owned(), problem: Problem::TooLong { max, items: true } });
            }
        }
        _ => {}
    }
}

/// A compiled `pattern`, cached; `None` if the regex does not compile (the
/// API server would have refused the CRD).
fn compiled(pattern: &str) -> Option<regex::Regex> {
    static CACHE: OnceLock<Mutex<std::collections::HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = crate::sync::lock(cache);
    cache.entry(pattern.to_owned()).or_insert_with(|| regex::Regex::new(pattern).ok()).clone()
}

/// A list-map may hold each key only once.
fn check_unique_keys(items: &[Value], keys: &[String], path: &str, errors: &mut Vec<FieldError>) {
    let mut seen = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let id: Vec<Option<&Value>> = keys.iter().map(|k| item.get(k)).collect();
        if seen.contains(&id) {
            let value = Value::Object(
                keys.iter().zip(&id).filter_map(|(k, v)| v.map(|v| (k.clone(), v.clone()))).collect::<Map<_, _>>(),
            );
            errors.push(FieldError { path: format!("{path}[{i}]"), problem: Problem::Duplicate(value) });
        } else {
            seen.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A CRD schema like the one `tests/tests/mock_fidelity.rs` creates on
    /// the real API server; its messages below are the real server's.
    fn widget() -> Schema {
        Schema::Custom(Arc::new(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                        "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                        "opts": {"type": "object", "default": {}, "properties": {"retries": {"type": "integer", "default": 3}}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                },
            },
        })))
    }

    fn messages(value: &Value, schema: &Schema) -> Vec<String> {
        validate(value, schema.root()).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn crd_defaults_fill_absent_fields_and_recurse_into_defaulted_objects() {
        let schema = widget();
        let mut widget = json!({"spec": {"size": 3}});
        apply_defaults(&mut widget, schema.root());
        assert_eq!(widget, json!({"spec": {"size": 3, "color": "red", "opts": {"retries": 3}}}));
        let mut explicit = json!({"spec": {"size": 3, "color": "blue", "opts": {"retries": 0}}});
        apply_defaults(&mut explicit, schema.root());
        assert_eq!(explicit["spec"]["color"], "blue");
        assert_eq!(explicit["spec"]["opts"]["retries"], 0);
    }

    #[test]
    fn pruning_drops_undeclared_fields_except_where_unknown_fields_are_preserved() {
        let schema = widget();
        let mut widget = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "bogus": 1},
            "spec": {"size": 3, "junk": 1, "free": {"anything": [1]}},
            "extra": 2,
        });
        let removed = prune(&mut widget, schema.root());
        assert_eq!(removed, ["extra", "metadata.bogus", "spec.junk"]);
        assert_eq!(
            widget,
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                   "spec": {"size": 3, "free": {"anything": [1]}}})
        );
    }

    #[test]
    fn crd_validation_reports_every_problem_like_the_api_server() {
        let schema = widget();
        assert_eq!(
            messages(&json!({"spec": {"size": "big", "color": "green", "name": "TOOLONGNAME"}}), &schema),
            [
                r#"spec.color: Unsupported value: "green": supported values: "red", "blue""#,
                "spec.name: Too long: may not be more than 5 bytes",
                r#"spec.size: Invalid value: "string": spec.size in body must be of type integer: "string""#,
            ]
        );
        assert_eq!(
            messages(&json!({"spec": {"size": 0, "name": "A1"}}), &schema),
            [
                r#"spec.name: Invalid value: "A1": spec.name in body should match '^[a-z]+$'"#,
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
            ]
        );
        assert_eq!(messages(&json!({"spec": {}}), &schema), ["spec.size: Required value"]);
        assert!(messages(&json!({"spec": {"size": 10, "name": "ok"}}), &schema).is_empty());
    }

    #[test]
    fn built_in_schemas_are_read_from_the_capture() {
        let deployment = Schema::BuiltIn("io.k8s.api.apps.v1.Deployment".to_owned());
        assert_eq!(
            messages(&json!({"metadata": {"name": "d"}, "spec": {"template": {}}}), &deployment),
            ["spec.selector: Required value"]
        );
        let typed = messages(&json!({"spec": {"replicas": "two", "selector": {}, "template": {}}}), &deployment);
        assert_eq!(typed.len(), 1);
        assert!(typed[0].starts_with("spec.replicas: Invalid value"), "{typed:?}");
        let pod = Schema::BuiltIn("io.k8s.api.core.v1.Pod".to_owned());
        let containers = pod.root().field("spec").and_then(|s| s.field("containers")).expect("declared");
        assert_eq!(containers.list_type(), ListType::Map(vec!["name".to_owned()]));
    }

    #[test]
    fn built_in_booleans_and_numbers_are_not_required_and_nor_is_status() {
        let pod = Schema::BuiltIn("io.k8s.api.core.v1.Pod".to_owned());
        let status = json!({"spec": {"containers": [{"name": "c"}]},
                            "status": {"containerStatuses": [{"name": "c"}]}});
        assert!(messages(&status, &pod).is_empty(), "{:?}", messages(&status, &pod));
        let no_name = json!({"spec": {"containers": [{"image": "i"}]}});
        assert_eq!(messages(&no_name, &pod), ["spec.containers[0].name: Required value"]);
    }

    #[test]
    fn map_keys_are_written_in_brackets_and_duplicate_list_map_keys_are_refused() {
        let schema = Schema::Custom(Arc::new(json!({"type": "object", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                      "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
        }})));
        assert_eq!(
            messages(&json!({"labels": {"a": 1}, "items": [{"k": "x"}, {"k": "x"}]}), &schema),
            [
                r#"items[1]: Duplicate value: {"k":"x"}"#,
                r#"labels[a]: Invalid value: "integer": labels[a] in body must be of type string: "integer""#,
            ]
        );
    }
}
