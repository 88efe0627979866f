//! An approximation of Kubernetes strategic merge patch without schemas:
//! JSON merge patch, except that well-known lists are merged by key.

use serde_json::{Map, Value};

/// The merge keys of well-known lists, by field name (wherever the field
/// appears). When a field has several candidates, each patch item uses the
/// first key it has (container ports by `containerPort`, service ports by
/// `port`).
const MERGE_KEYS: &[(&str, &[&str])] = &[
    ("containers", &["name"]),
    ("initContainers", &["name"]),
    ("ephemeralContainers", &["name"]),
    ("volumes", &["name"]),
    ("env", &["name"]),
    ("imagePullSecrets", &["name"]),
    ("volumeMounts", &["mountPath"]),
    ("volumeDevices", &["devicePath"]),
    ("ports", &["containerPort", "port"]),
    ("conditions", &["type"]),
    ("hostAliases", &["ip"]),
    ("ownerReferences", &["uid"]),
];

/// Lists of scalars merged as sets (the patch's items are added).
const SET_LISTS: &[&str] = &["finalizers"];

/// Applies a strategic merge patch to `target`.
///
/// Supported beyond JSON merge patch: lists in [`MERGE_KEYS`] merged by key,
/// `{"$patch": "delete"}` list items and map values, `{"$patch":
/// "replace"}` in maps and as a list item, `$deleteFromPrimitiveList/<field>`
/// and set semantics for `finalizers`. Other directives (`$retainKeys`,
/// `$setElementOrder`) are ignored.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => merge_map(target, patch),
        (target, patch) => *target = without_directives(patch),
    }
}

/// Merges a patch map into a target map.
fn merge_map(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = map_without_directives(patch);
        return;
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(gone)) = (target.get_mut(field), value) {
                items.retain(|item| !gone.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(map) if map.get("$patch").and_then(Value::as_str) == Some("delete") => {
                target.remove(key);
            }
            Value::Object(map) => match target.get_mut(key) {
                Some(Value::Object(existing)) => merge_map(existing, map),
                _ => {
                    target.insert(key.clone(), Value::Object(map_without_directives(map)));
                }
            },
            Value::Array(items) => match (target.get_mut(key), merge_keys(key)) {
                (Some(Value::Array(existing)), Some(keys)) => merge_list(existing, items, keys),
                (Some(Value::Array(existing)), None) if SET_LISTS.contains(&key.as_str()) => {
                    for item in items {
                        if !existing.contains(item) {
                            existing.push(item.clone());
                        }
                    }
                }
                _ => {
                    target.insert(key.clone(), without_directives(value));
                }
            },
            scalar => {
                target.insert(key.clone(), scalar.clone());
            }
        }
    }
}

/// The merge keys for a list field, if it is a well-known one.
fn merge_keys(field: &str) -> Option<&'static [&'static str]> {
    MERGE_KEYS.iter().find(|(name, _)| *name == field).map(|(_, keys)| *keys)
}

/// The key name and value identifying a list item.
fn item_key<'a>(item: &'a Value, keys: &[&'static str]) -> Option<(&'static str, &'a Value)> {
    keys.iter().find_map(|&k| item.get(k).map(|v| (k, v)))
}

/// Merges a patch list into a target list by merge key. A patch item
/// without any merge key makes the whole list replaced, as a JSON merge
/// patch would.
fn merge_list(target: &mut Vec<Value>, patch: &[Value], keys: &[&'static str]) {
    let directive = |item: &Value| item.get("$patch").and_then(Value::as_str).map(str::to_owned);
    if patch.iter().any(|item| directive(item).as_deref() == Some("replace")) {
        *target = patch.iter().filter(|item| directive(item).is_none()).map(without_directives).collect();
        return;
    }
    if patch.iter().any(|item| item_key(item, keys).is_none()) {
        *target = patch.iter().map(without_directives).collect();
        return;
    }
    for item in patch {
        let Some((key, value)) = item_key(item, keys) else { continue };
        let position = target.iter().position(|existing| existing.get(key) == Some(value));
        match (directive(item).as_deref(), position) {
            (Some("delete"), Some(i)) => {
                target.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => merge(&mut target[i], item),
            (_, None) => target.push(without_directives(item)),
        }
    }
}

/// A copy of a patch value without `$` directives and null map values, as
/// stored when there is nothing to merge into.
fn without_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map_without_directives(map)),
        Value::Array(items) => Value::Array(items.iter().map(without_directives).collect()),
        other => other.clone(),
    }
}

/// A copy of a patch map without `$` directives and null values.
fn map_without_directives(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
        .map(|(k, v)| (k.clone(), without_directives(v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patched(mut target: Value, patch: Value) -> Value {
        merge(&mut target, &patch);
        target
    }

    #[test]
    fn containers_are_merged_by_name() {
        let target = json!({"spec": {"containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "proxy:1"},
        ]}});
        let patch = json!({"spec": {"containers": [
            {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]},
            {"name": "sidecar", "$patch": "delete"},
            {"name": "new", "image": "new:1"},
        ]}});
        assert_eq!(
            patched(target, patch),
            json!({"spec": {"containers": [
                {"name": "app", "image": "app:2", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "new", "image": "new:1"},
            ]}})
        );
    }

    #[test]
    fn conditions_are_merged_by_type_and_ports_by_their_port() {
        let target = json!({
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Synced", "status": "True"}]},
            "spec": {"ports": [{"port": 80, "name": "http"}]},
        });
        let patch = json!({
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            "spec": {"ports": [{"port": 443, "name": "https"}]},
        });
        assert_eq!(
            patched(target, patch),
            json!({
                "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}]},
                "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]},
            })
        );
    }

    #[test]
    fn unknown_lists_are_replaced_and_nulls_remove_fields() {
        let target = json!({"spec": {"args": ["a", "b"], "keep": 1, "drop": 2}});
        let patch = json!({"spec": {"args": ["c"], "drop": null}});
        assert_eq!(patched(target, patch), json!({"spec": {"args": ["c"], "keep": 1}}));
    }

    #[test]
    fn finalizers_are_merged_as_a_set_and_can_be_deleted() {
        let target = json!({"metadata": {"finalizers": ["a", "b"]}});
        let added = patched(target.clone(), json!({"metadata": {"finalizers": ["b", "c"]}}));
        assert_eq!(added, json!({"metadata": {"finalizers": ["a", "b", "c"]}}));
        let removed = patched(target, json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}));
        assert_eq!(removed, json!({"metadata": {"finalizers": ["b"]}}));
    }

    #[test]
    fn replace_directive_replaces_maps_and_lists() {
        let target = json!({"spec": {"selector": {"a": "1", "b": "2"}, "env": [{"name": "A"}]}});
        let patch = json!({"spec": {"selector": {"$patch": "replace", "c": "3"}, "env": [{"$patch": "replace"}, {"name": "B"}]}});
        assert_eq!(patched(target, patch), json!({"spec": {"selector": {"c": "3"}, "env": [{"name": "B"}]}}));
    }
}
