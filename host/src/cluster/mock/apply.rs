//! Server-side apply, approximated: field sets of leaf paths per manager,
//! merging an applied configuration, and removing what a manager stopped
//! applying.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::Subresource;

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Seg {
    /// A field of a map.
    Field(String),
    /// An item of a list that is merged by identity: a `metadata.finalizers`
    /// entry (`key` empty, `value` the finalizer) or a
    /// `metadata.ownerReferences` entry (`key` `uid`).
    Item {
        /// The identifying field of the item; empty for a list of strings.
        key: &'static str,
        /// The identifying value.
        value: String,
    },
}

/// A path from the object root to an owned field.
pub(super) type Path = Vec<Seg>;

/// The fields one manager owns.
pub(super) type FieldSet = BTreeSet<Path>;

/// Where a map sits in the object, for the lists that are not atomic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Root,
    Metadata,
    Other,
}

impl Level {
    fn child(self, field: &str) -> Self {
        if self == Self::Root && field == "metadata" { Self::Metadata } else { Self::Other }
    }

    /// The identifying key of the items of `field`, if that list is merged
    /// by item: `Some("")` for a set of strings, `Some("uid")` for owner
    /// references.
    fn item_key(self, field: &str) -> Option<&'static str> {
        match (self, field) {
            (Self::Metadata, "finalizers") => Some(""),
            (Self::Metadata, "ownerReferences") => Some("uid"),
            _ => None,
        }
    }
}

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

/// The leaf paths of an applied configuration: scalars, lists (atomic,
/// except finalizers and owner references, whose items are owned one by
/// one) and empty maps.
pub(super) fn field_set(applied: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    collect(applied, &mut Vec::new(), Level::Root, &mut out);
    out
}

fn collect(value: &Value, path: &mut Path, level: Level, out: &mut FieldSet) {
    let Value::Object(map) = value else {
        out.insert(path.clone());
        return;
    };
    if map.is_empty() {
        if !path.is_empty() {
            out.insert(path.clone());
        }
        return;
    }
    for (field, child) in map {
        path.push(Seg::Field(field.clone()));
        match (level.item_key(field), child) {
            (Some(key), Value::Array(items)) => match items.iter().map(|i| item_id(i, key)).collect::<Option<Vec<_>>>()
            {
                Some(ids) => {
                    for value in ids {
                        path.push(Seg::Item { key, value });
                        out.insert(path.clone());
                        path.pop();
                    }
                }
                None => {
                    out.insert(path.clone());
                }
            },
            _ => collect(child, path, level.child(field), out),
        }
        path.pop();
    }
}

/// The identity of a list item: the string itself (`key` empty) or its
/// `key` field.
fn item_id(item: &Value, key: &str) -> Option<String> {
    let id = if key.is_empty() { item.as_str() } else { item.get(key).and_then(Value::as_str) };
    id.map(str::to_owned)
}

/// True if one path is a prefix of the other: owning one means owning part
/// of the other.
pub(super) fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The value at a path, if present.
pub(super) fn value_at<'a>(value: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(value, |current, seg| match seg {
        Seg::Field(field) => current.get(field),
        Seg::Item { key, value } => {
            current.as_array()?.iter().find(|item| item_id(item, key).as_deref() == Some(value.as_str()))
        }
    })
}

/// Removes the field or item at a path, then any map or list that became
/// empty because of it (never the root).
pub(super) fn remove_at(value: &mut Value, path: &[Seg]) -> bool {
    let Some((first, rest)) = path.split_first() else { return false };
    if rest.is_empty() {
        return match (value, first) {
            (Value::Object(map), Seg::Field(field)) => map.remove(field).is_some(),
            (Value::Array(items), Seg::Item { key, value }) => {
                let before = items.len();
                items.retain(|item| item_id(item, key).as_deref() != Some(value.as_str()));
                items.len() != before
            }
            _ => false,
        };
    }
    let Seg::Field(field) = first else { return false };
    let Some(map) = value.as_object_mut() else { return false };
    let Some(child) = map.get_mut(field) else { return false };
    let removed = remove_at(child, rest);
    let emptied = match child {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    if removed && emptied {
        map.remove(field);
    }
    removed
}

/// Merges an applied configuration into an object: maps recursively,
/// finalizers as a set, owner references by uid, anything else replaced.
pub(super) fn merge(target: &mut Value, applied: &Value) {
    if let (Value::Object(target), Value::Object(applied)) = (target, applied) {
        merge_map(target, applied, Level::Root);
    }
}

fn merge_map(target: &mut Map<String, Value>, applied: &Map<String, Value>, level: Level) {
    for (field, value) in applied {
        match (target.get_mut(field), value, level.item_key(field)) {
            (Some(Value::Array(existing)), Value::Array(items), Some(key)) => {
                for item in items {
                    let id = item_id(item, key);
                    match existing.iter().position(|e| id.is_some() && item_id(e, key) == id) {
                        Some(i) if !key.is_empty() => existing[i] = item.clone(),
                        Some(_) => {}
                        None if !existing.contains(item) => existing.push(item.clone()),
                        None => {}
                    }
                }
            }
            (Some(Value::Object(existing)), Value::Object(map), _) => merge_map(existing, map, level.child(field)),
            _ => {
                target.insert(field.clone(), value.clone());
            }
        }
    }
}

/// A path as the API server prints it in apply conflicts:
/// `.spec.replicas`, `.metadata.finalizers[="x"]`,
/// `.metadata.ownerReferences[uid="..."]`.
pub(super) fn display(path: &Path) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Field(field) => write!(out, ".{field}"),
            Seg::Item { key, value } => write!(out, "[{key}={value:?}]"),
        }
        .expect("writing to a String cannot fail");
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field(name: &str) -> Seg {
        Seg::Field(name.to_owned())
    }

    #[test]
    fn field_sets_hold_leaves_and_finalizer_items() {
        let applied = json!({
            "metadata": {"labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"replicas": 2, "args": ["a"], "empty": {}},
        });
        let paths: Vec<String> = field_set(&applied).iter().map(display).collect();
        assert_eq!(
            paths,
            [".metadata.finalizers[=\"x\"]", ".metadata.labels.a", ".spec.args", ".spec.empty", ".spec.replicas"]
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
        assert!(remove_at(
            &mut object,
            &[field("metadata"), field("finalizers"), Seg::Item { key: "", value: "x".into() }]
        ));
        assert_eq!(object, json!({"metadata": {"name": "n"}, "spec": {}}));
        assert!(!remove_at(&mut object, &[field("spec"), field("missing")]));
    }

    #[test]
    fn merge_unions_finalizers_and_replaces_owner_references_by_uid() {
        let mut object = json!({"metadata": {
            "finalizers": ["a"],
            "ownerReferences": [{"uid": "1", "name": "old"}],
        }, "spec": {"args": ["x"], "keep": true}});
        merge(
            &mut object,
            &json!({"metadata": {
                "finalizers": ["b", "a"],
                "ownerReferences": [{"uid": "1", "name": "new"}, {"uid": "2", "name": "other"}],
            }, "spec": {"args": ["y"]}}),
        );
        assert_eq!(
            object,
            json!({"metadata": {
                "finalizers": ["a", "b"],
                "ownerReferences": [{"uid": "1", "name": "new"}, {"uid": "2", "name": "other"}],
            }, "spec": {"args": ["y"], "keep": true}})
        );
    }
}
