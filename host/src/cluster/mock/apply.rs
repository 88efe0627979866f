//! Server-side apply, approximated: field sets per manager, merging an
//! applied configuration, and removing what a manager stopped applying,
//! all following the lists' `x-kubernetes-list-type` in the schema.
//!
//! A list is merged according to its schema: `map` lists item by item,
//! identified by `x-kubernetes-list-map-keys` (each item's fields merged and
//! owned one by one), `set` lists value by value, and every other list
//! (`atomic`, or no list type at all) as one value.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::Subresource;
use super::schema::{ListType, Node};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Seg {
    /// A field of a map.
    Field(String),
    /// An item of a `map` list, identified by its keys: each key with the
    /// JSON text of its value, in the schema's order. A path ending here
    /// stands for the item's membership in the list.
    Key(Vec<(String, String)>),
    /// An item of a `set` list: the JSON text of the value.
    Value(String),
}

/// A path from the object root to an owned field.
pub(super) type Path = Vec<Seg>;

/// The fields one manager owns.
pub(super) type FieldSet = BTreeSet<Path>;

/// Metadata fields the server sets; an applied configuration cannot own them.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// The part of an applied configuration a manager takes ownership of: for
/// the main resource everything but identity, server-set metadata and (for
/// kinds with a status subresource) `status`; for the status subresource
/// only `status`. Nulls are dropped.
pub(super) fn applied_part(config: &Map<String, Value>, status_subresource: bool, subresource: Subresource) -> Value {
    let mut out = Map::new();
    for (key, value) in config {
        let keep = match (key.as_str(), subresource) {
            ("apiVersion" | "kind", _) => false,
            ("status", Subresource::Status) => true,
            ("status", Subresource::Main) => !status_subresource,
            (_, Subresource::Status) => false,
            (_, Subresource::Main) => true,
        };
        if !keep {
            continue;
        }
        let mut value = without_nulls(value);
        if key == "metadata" {
            let Value::Object(meta) = &mut value else { continue };
            meta.retain(|k, _| !SERVER_METADATA.contains(&k.as_str()));
            if meta.is_empty() {
                continue;
            }
        }
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// A copy without null values in maps.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), without_nulls(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// How a list at some place in the object merges: its list type and the
/// schema of its items.
fn list_of<'a>(node: Option<Node<'a>>) -> (ListType, Option<Node<'a>>) {
    match node {
        Some(node) => (node.list_type(), node.items()),
        None => (ListType::Atomic, None),
    }
}

/// The identity of an item of a `map` list: its keys' values (a key the
/// item lacks takes the schema's default), or `None` if a key has neither.
fn item_key(item: &Value, keys: &[String], items: Option<Node<'_>>) -> Option<Vec<(String, String)>> {
    keys.iter()
        .map(|key| {
            let value = item.get(key).or_else(|| items.and_then(|n| n.field(key)).and_then(Node::default_value))?;
            Some((key.clone(), value.to_string()))
        })
        .collect()
}

/// True if every item of a `map` list has its keys, so it can be merged by
/// item; otherwise it is treated as atomic.
fn keyed(items: &[Value], keys: &[String], schema: Option<Node<'_>>) -> bool {
    !keys.is_empty() && items.iter().all(|item| item.is_object() && item_key(item, keys, schema).is_some())
}

/// The paths an applied configuration owns: scalars, atomic lists, empty
/// maps, the items of `set` lists, and for `map` lists each item's
/// membership and the paths inside it.
pub(super) fn field_set(applied: &Value, schema: Node<'_>) -> FieldSet {
    let mut out = FieldSet::new();
    collect(applied, Some(schema), &mut Vec::new(), &mut out);
    out
}

fn collect(value: &Value, node: Option<Node<'_>>, path: &mut Path, out: &mut FieldSet) {
    match value {
        Value::Object(map) if map.is_empty() => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
        Value::Object(map) => {
            for (field, child) in map {
                path.push(Seg::Field(field.clone()));
                collect(child, node.and_then(|n| n.field(field)), path, out);
                path.pop();
            }
        }
        Value::Array(items) => match list_of(node) {
            (ListType::Set, _) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                for item in items {
                    path.push(Seg::Value(item.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            (ListType::Map(keys), schema) if keyed(items, &keys, schema) => {
                for item in items {
                    let Some(key) = item_key(item, &keys, schema) else { continue };
                    path.push(Seg::Key(key));
                    out.insert(path.clone());
                    collect(item, schema, path, out);
                    path.pop();
                }
            }
            _ => {
                out.insert(path.clone());
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The first item an applied configuration lists twice in a `map` list
/// (the same keys) or a `set` list (the same value), as the path of the
/// item; the API server refuses such a configuration (merging it would
/// not be idempotent).
pub(super) fn duplicate(applied: &Value, schema: Node<'_>) -> Option<String> {
    find_duplicate(applied, Some(schema), &mut Vec::new())
}

fn find_duplicate(value: &Value, node: Option<Node<'_>>, path: &mut Path) -> Option<String> {
    let mut within = |seg: Seg, child: &Value, node: Option<Node<'_>>| {
        path.push(seg);
        let found = find_duplicate(child, node, path);
        path.pop();
        found
    };
    match value {
        Value::Object(map) => map
            .iter()
            .find_map(|(field, child)| within(Seg::Field(field.clone()), child, node.and_then(|n| n.field(field)))),
        Value::Array(items) => {
            let twice = |seg: Seg, path: &mut Path| {
                path.push(seg);
                let at = display(path);
                path.pop();
                Some(at)
            };
            match list_of(node) {
                (ListType::Set, _) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                    let mut seen = BTreeSet::new();
                    let item = items.iter().find(|i| !seen.insert(i.to_string()))?;
                    twice(Seg::Value(item.to_string()), path)
                }
                (ListType::Map(keys), schema) if keyed(items, &keys, schema) => {
                    let keyed_items: Vec<(Vec<(String, String)>, &Value)> =
                        items.iter().filter_map(|i| Some((item_key(i, &keys, schema)?, i))).collect();
                    let mut seen = BTreeSet::new();
                    if let Some((key, _)) = keyed_items.iter().find(|(k, _)| !seen.insert(k.clone())) {
                        return twice(Seg::Key(key.clone()), path);
                    }
                    keyed_items.into_iter().find_map(|(key, item)| within(Seg::Key(key), item, schema))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// True if the path stands for the membership of a `map` list item.
pub(super) fn is_membership(path: &[Seg]) -> bool {
    matches!(path.last(), Some(Seg::Key(_)))
}

/// True if owning `a` and owning `b` concern the same value: the same path,
/// or one a value that contains the other. An item's membership does not
/// contain the fields inside the item (they are owned one by one).
pub(super) fn shares(a: &Path, b: &Path) -> bool {
    a == b || (a.starts_with(b) && !is_membership(b)) || (b.starts_with(a) && !is_membership(a))
}

/// True if a path sits inside `prefix` (or is it).
pub(super) fn within(path: &Path, prefix: &Path) -> bool {
    path.starts_with(prefix)
}

/// The value at a path, if present.
pub(super) fn value_at<'a>(value: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(value, |current, seg| match seg {
        Seg::Field(field) => current.get(field),
        Seg::Key(key) => current.as_array()?.iter().find(|item| matches_key(item, key)),
        Seg::Value(text) => current.as_array()?.iter().find(|item| is_text_of(item, text)),
    })
}

/// True if an item has these key values; a key the item lacks matches
/// only a `null` key value.
fn matches_key(item: &Value, key: &[(String, String)]) -> bool {
    key.iter().all(|(k, v)| item.get(k).map_or_else(|| v == "null", |actual| is_text_of(actual, v)))
}

/// True if `text` is the JSON text of `value`.
fn is_text_of(value: &Value, text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|parsed| parsed == *value)
}

/// Removes the field or item at a path, then any map or list that became
/// empty because of it (never the root).
pub(super) fn remove_at(value: &mut Value, path: &[Seg]) -> bool {
    let Some((first, rest)) = path.split_first() else { return false };
    if rest.is_empty() {
        return match (value, first) {
            (Value::Object(map), Seg::Field(field)) => map.remove(field).is_some(),
            (Value::Array(items), Seg::Key(key)) => {
                let before = items.len();
                items.retain(|item| !matches_key(item, key));
                items.len() != before
            }
            (Value::Array(items), Seg::Value(text)) => {
                let before = items.len();
                items.retain(|item| !is_text_of(item, text));
                items.len() != before
            }
            _ => false,
        };
    }
    let child = match (value, first) {
        (Value::Object(map), Seg::Field(field)) => {
            let Some(child) = map.get_mut(field) else { return false };
            let removed = remove_at(child, rest);
            if removed && is_empty(child) {
                map.remove(field);
            }
            return removed;
        }
        (Value::Array(items), Seg::Key(key)) => items.iter_mut().find(|item| matches_key(item, key)),
        _ => None,
    };
    child.is_some_and(|child| remove_at(child, rest))
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// Merges an applied configuration into an object: maps field by field,
/// `map` lists item by item (by key), `set` lists as a union, everything
/// else replaced.
pub(super) fn merge(target: &mut Value, applied: &Value, schema: Node<'_>) {
    merge_value(target, applied, Some(schema));
}

fn merge_value(target: &mut Value, applied: &Value, node: Option<Node<'_>>) {
    match (target, applied) {
        (Value::Object(existing), Value::Object(map)) => {
            for (field, value) in map {
                let child = node.and_then(|n| n.field(field));
                match existing.get_mut(field) {
                    Some(current) => merge_value(current, value, child),
                    None => {
                        existing.insert(field.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(existing), Value::Array(items)) => match list_of(node) {
            (ListType::Set, _) => {
                for item in items {
                    if !existing.contains(item) {
                        existing.push(item.clone());
                    }
                }
            }
            (ListType::Map(keys), schema) if keyed(items, &keys, schema) && keyed(existing, &keys, schema) => {
                for item in items {
                    let key = item_key(item, &keys, schema);
                    match existing.iter_mut().find(|e| item_key(e, &keys, schema) == key) {
                        Some(current) => merge_value(current, item, schema),
                        None => existing.push(item.clone()),
                    }
                }
            }
            _ => *existing = items.clone(),
        },
        (target, applied) => *target = applied.clone(),
    }
}

/// A path as the API server prints it in apply conflicts:
/// `.spec.replicas`, `.metadata.finalizers[="x"]`,
/// `.status.conditions[type="Ready"]`.
pub(super) fn display(path: &Path) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Field(field) => write!(out, ".{field}"),
            Seg::Key(key) => {
                let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(out, "[{}]", parts.join(","))
            }
            Seg::Value(value) => write!(out, "[={value}]"),
        }
        .expect("writing to a String cannot fail");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::super::schema::Schema;
    use super::*;

    fn field(name: &str) -> Seg {
        Seg::Field(name.to_owned())
    }

    /// A CRD schema whose `status.conditions` is a list-map keyed by `type`
    /// and whose `spec.tags` is a set and `spec.args` has no list type.
    fn widget() -> Schema {
        Schema::Custom(Arc::new(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                }},
                "status": {"type": "object", "properties": {
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {"type": "object", "properties": {
                            "type": {"type": "string"}, "status": {"type": "string"}, "reason": {"type": "string"},
                        }},
                    },
                }},
            },
        })))
    }

    fn paths(set: &FieldSet) -> Vec<String> {
        set.iter().map(display).collect()
    }

    #[test]
    fn field_sets_follow_the_list_types_of_the_schema() {
        let schema = widget();
        let applied = json!({
            "metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"tags": ["t"], "args": ["a"], "empty": {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        });
        assert_eq!(
            paths(&field_set(&applied, schema.root())),
            [
                ".metadata.finalizers[=\"x\"]",
                ".metadata.labels.a",
                ".spec.args",
                ".spec.empty",
                ".spec.tags[=\"t\"]",
                ".status.conditions[type=\"Ready\"]",
                ".status.conditions[type=\"Ready\"].status",
                ".status.conditions[type=\"Ready\"].type",
            ]
        );
    }

    #[test]
    fn an_item_listed_twice_in_a_map_or_set_list_is_found() {
        let schema = widget();
        let twice = json!({"status": {"conditions": [{"type": "Ready"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(duplicate(&twice, schema.root()).as_deref(), Some(".status.conditions[type=\"Ready\"]"));
        let set = json!({"spec": {"tags": ["a", "b", "a"]}});
        assert_eq!(duplicate(&set, schema.root()).as_deref(), Some(".spec.tags[=\"a\"]"));
        let fine = json!({
            "spec": {"tags": ["a", "b"], "args": ["x", "x"]},
            "status": {"conditions": [{"type": "A"}, {"type": "B"}]},
        });
        assert_eq!(duplicate(&fine, schema.root()), None);
    }

    #[test]
    fn built_in_metadata_lists_are_merged_by_key_from_the_captured_schema() {
        let schema = Schema::BuiltIn("io.k8s.api.core.v1.ConfigMap".to_owned());
        let applied = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "o"}]}});
        assert!(
            paths(&field_set(&applied, schema.root())).contains(&".metadata.ownerReferences[uid=\"1\"]".to_owned())
        );
    }

    #[test]
    fn applied_part_drops_identity_server_fields_and_subresource_status() {
        let config = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "resourceVersion": "3", "labels": {"a": "1", "b": null}},
            "spec": {"x": 1}, "status": {"phase": "Running"},
        });
        let config = config.as_object().expect("object");
        assert_eq!(
            applied_part(config, true, Subresource::Main),
            json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}})
        );
        assert_eq!(applied_part(config, true, Subresource::Status), json!({"status": {"phase": "Running"}}));
        assert_eq!(applied_part(config, false, Subresource::Main)["status"], json!({"phase": "Running"}));
    }

    #[test]
    fn removing_a_leaf_removes_parents_it_emptied() {
        let mut object = json!({"metadata": {"name": "n", "labels": {"a": "1"}, "finalizers": ["x"]}, "spec": {}});
        assert!(remove_at(&mut object, &[field("metadata"), field("labels"), field("a")]));
        assert!(remove_at(&mut object, &[field("metadata"), field("finalizers"), Seg::Value("\"x\"".into())]));
        assert_eq!(object, json!({"metadata": {"name": "n"}, "spec": {}}));
        assert!(!remove_at(&mut object, &[field("spec"), field("missing")]));
    }

    #[test]
    fn removing_a_field_inside_a_map_item_keeps_the_item() {
        let mut object = json!({"status": {"conditions": [{"type": "A", "reason": "x"}, {"type": "B"}]}});
        let key = Seg::Key(vec![("type".into(), "\"A\"".into())]);
        assert!(remove_at(&mut object, &[field("status"), field("conditions"), key.clone(), field("reason")]));
        assert_eq!(object, json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}]}}));
        assert!(remove_at(&mut object, &[field("status"), field("conditions"), key]));
        assert_eq!(object, json!({"status": {"conditions": [{"type": "B"}]}}));
    }

    #[test]
    fn merge_follows_map_set_and_atomic_lists() {
        let schema = widget();
        let mut object = json!({
            "metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "old", "kind": "K"}]},
            "spec": {"tags": ["x"], "args": ["x"], "keep": true},
            "status": {"conditions": [{"type": "A", "status": "False", "reason": "r"}]},
        });
        merge(
            &mut object,
            &json!({
                "metadata": {"finalizers": ["b", "a"], "ownerReferences": [{"uid": "1", "name": "new"}]},
                "spec": {"tags": ["y"], "args": ["y"]},
                "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]},
            }),
            schema.root(),
        );
        assert_eq!(
            object,
            json!({
                "metadata": {"finalizers": ["a", "b"], "ownerReferences": [{"uid": "1", "name": "new", "kind": "K"}]},
                "spec": {"tags": ["x", "y"], "args": ["y"], "keep": true},
                "status": {"conditions": [
                    {"type": "A", "status": "True", "reason": "r"},
                    {"type": "B", "status": "True"},
                ]},
            })
        );
    }

    #[test]
    fn membership_of_an_item_does_not_share_the_fields_inside_it() {
        let item = vec![field("status"), field("conditions"), Seg::Key(vec![("type".into(), "\"A\"".into())])];
        let mut inside = item.clone();
        inside.push(field("status"));
        assert!(!shares(&item, &inside));
        assert!(shares(&inside, &inside));
        let atomic = vec![field("spec"), field("args")];
        assert!(shares(&atomic, &vec![field("spec")]));
    }
}
