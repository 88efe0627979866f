//! Conversion between the versions of a CustomResourceDefinition.
//!
//! Declare the CRD in the manifest ([`Manifest::crd`](crate::Manifest::crd)
//! with every version) and that this component converts it
//! ([`Manifest::converts`](crate::Manifest::converts)), implement
//! [`Conversion`], and export it with `conversion: T`. The API server sends
//! objects in any served version and asks for another; [`between`] does the
//! typed work for two versions.

use kube::Resource;
use serde_json::Value;

use crate::wit::capstan::operator::types as wit;

/// Converts objects of one CRD between its versions.
pub trait Conversion: Default + 'static {
    /// Converts `object` (in its own `apiVersion`) to `desired_api_version`
    /// (e.g. `example.com/v1`). The result must keep the object's
    /// metadata (name, namespace, uid, labels, annotations) as it was.
    ///
    /// # Errors
    ///
    /// A message the API server shows the user; the whole request fails.
    fn convert(&self, object: Value, desired_api_version: &str) -> Result<Value, String>;
}

/// Typed conversion between two versions `A` and `B` of one kind:
/// `object` is in either version (or already the desired one) and comes
/// back in `desired_api_version`, converted by `up` (A → B) or `down`
/// (B → A).
///
/// What a conversion may not change is carried over: the object's
/// `metadata` comes back as it was, except `labels` and `annotations`,
/// which the converted object sets if it has them (the API server lets a
/// conversion change those two only): so a field one version cannot
/// represent can be kept in an annotation by `up` and read back (and
/// removed) by `down`. A `status` the converted object lacks (e.g. `A::new`
/// in `up` for a kind whose types do not model it) is carried over as it
/// was; the API server prunes what the desired version's schema does not
/// know.
///
/// # Errors
///
/// When the object or the desired version is neither `A`'s nor `B`'s, or
/// does not decode as its version's type.
pub fn between<A, B>(
    object: Value,
    desired_api_version: &str,
    up: fn(A) -> B,
    down: fn(B) -> A,
) -> Result<Value, String>
where
    A: Resource<DynamicType = ()> + serde::de::DeserializeOwned + serde::Serialize,
    B: Resource<DynamicType = ()> + serde::de::DeserializeOwned + serde::Serialize,
{
    let (a, b) = (A::api_version(&()).into_owned(), B::api_version(&()).into_owned());
    let from = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
    if from == desired_api_version {
        return Ok(object);
    }
    let original = object.clone();
    let decode = |what: &str, e: serde_json::Error| format!("object is not a valid {what}: {e}");
    let mut converted = if from == a && desired_api_version == b {
        let old: A = serde_json::from_value(object).map_err(|e| decode(&a, e))?;
        serde_json::to_value(up(old)).map_err(|e| e.to_string())?
    } else if from == b && desired_api_version == a {
        let old: B = serde_json::from_value(object).map_err(|e| decode(&b, e))?;
        serde_json::to_value(down(old)).map_err(|e| e.to_string())?
    } else {
        return Err(format!("cannot convert {from} to {desired_api_version} (this component converts {a} and {b})"));
    };
    carry_over(&original, &mut converted);
    Ok(converted)
}

/// Puts back into `converted` what a conversion of `original` may not
/// change or did not model (see [`between`]): `metadata` but its `labels`
/// and `annotations` where `converted` sets them, and `status` where
/// `converted` has none.
fn carry_over(original: &Value, converted: &mut Value) {
    let Some(map) = converted.as_object_mut() else { return };
    if let Some(metadata) = original.get("metadata").and_then(Value::as_object) {
        let mut kept = metadata.clone();
        let set = map.get("metadata").and_then(Value::as_object);
        for key in ["labels", "annotations"] {
            match set.and_then(|m| m.get(key)) {
                Some(Value::Null) => {
                    kept.remove(key);
                }
                Some(value) => {
                    kept.insert(key.to_owned(), value.clone());
                }
                None => {}
            }
        }
        map.insert("metadata".into(), Value::Object(kept));
    }
    if let Some(status) = original.get("status")
        && map.get("status").is_none_or(Value::is_null)
    {
        map.insert("status".into(), status.clone());
    }
}

/// Answers one request through `C` (used by [`export!`](crate::export)).
pub(crate) fn convert<C: Conversion>(request: wit::ConversionRequest) -> Result<Vec<wit::Json>, String> {
    let conversion = C::default();
    request
        .objects
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let object: Value = serde_json::from_slice(bytes).map_err(|e| format!("objects[{i}] is not JSON: {e}"))?;
            let converted = conversion.convert(object, &request.desired_api_version)?;
            let version = converted.get("apiVersion").and_then(Value::as_str);
            if version != Some(request.desired_api_version.as_str()) {
                return Err(format!("objects[{i}] came back as {version:?}, not {:?}", request.desired_api_version));
            }
            Ok(serde_json::to_vec(&converted).expect("a JSON value serializes"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;

    /// Declares a namespaced `Greeting` of `example.com` at `$version`,
    /// whose type models no `status`.
    macro_rules! greeting {
        ($ty:ident, $spec:ty, $version:literal) => {
            #[derive(Clone, Debug, Deserialize, Serialize)]
            #[serde(rename_all = "camelCase")]
            struct $ty {
                api_version: String,
                kind: String,
                metadata: ObjectMeta,
                spec: $spec,
            }

            impl Resource for $ty {
                type DynamicType = ();
                type Scope = kube::core::NamespaceResourceScope;

                fn kind(_: &()) -> Cow<'_, str> {
                    "Greeting".into()
                }
                fn group(_: &()) -> Cow<'_, str> {
                    "example.com".into()
                }
                fn version(_: &()) -> Cow<'_, str> {
                    $version.into()
                }
                fn plural(_: &()) -> Cow<'_, str> {
                    "greetings".into()
                }
                fn meta(&self) -> &ObjectMeta {
                    &self.metadata
                }
                fn meta_mut(&mut self) -> &mut ObjectMeta {
                    &mut self.metadata
                }
            }
        };
    }

    #[derive(Clone, Debug, Deserialize, Serialize)]
    struct OldSpec {
        message: String,
        colour: String,
    }

    #[derive(Clone, Debug, Deserialize, Serialize)]
    struct NewSpec {
        greeting: String,
    }

    greeting!(Old, OldSpec, "v1alpha1");
    greeting!(New, NewSpec, "v1");

    /// `v1` has no colour: kept in an annotation; new metadata (a name
    /// only), no status.
    fn keep(old: Old) -> New {
        let mut annotations = old.metadata.annotations.unwrap_or_default();
        annotations.insert("colour".to_owned(), old.spec.colour);
        New {
            api_version: "example.com/v1".to_owned(),
            kind: "Greeting".to_owned(),
            metadata: ObjectMeta {
                name: Some("ignored".to_owned()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: NewSpec { greeting: old.spec.message },
        }
    }

    /// Reads the colour back out of the annotation, and removes it.
    fn restore(mut new: New) -> Old {
        let mut annotations: BTreeMap<String, String> = new.metadata.annotations.take().unwrap_or_default();
        let colour = annotations.remove("colour").unwrap_or_default();
        new.metadata.annotations = Some(annotations);
        Old {
            api_version: "example.com/v1alpha1".to_owned(),
            kind: "Greeting".to_owned(),
            metadata: new.metadata,
            spec: OldSpec { message: new.spec.greeting, colour },
        }
    }

    #[test]
    fn between_keeps_what_a_version_cannot_represent_in_an_annotation_and_the_status() {
        let old = json!({
            "apiVersion": "example.com/v1alpha1",
            "kind": "Greeting",
            "metadata": {"name": "hi", "namespace": "demo", "uid": "u", "annotations": {"a": "1"}},
            "spec": {"message": "x", "colour": "red"},
            "status": {"ready": true},
        });
        let new = between::<Old, New>(old.clone(), "example.com/v1", keep, restore).expect("converts up");
        assert_eq!(new["apiVersion"], "example.com/v1");
        assert_eq!(
            new["metadata"],
            json!({"name": "hi", "namespace": "demo", "uid": "u", "annotations": {"a": "1", "colour": "red"}})
        );
        assert_eq!(new["spec"], json!({"greeting": "x"}));
        assert_eq!(new["status"], json!({"ready": true}));
        let back = between::<Old, New>(new, "example.com/v1alpha1", keep, restore).expect("converts down");
        assert_eq!(back, old);
    }

    #[test]
    fn metadata_comes_back_but_labels_and_annotations_the_conversion_set() {
        let original = json!({
            "apiVersion": "example.com/v1alpha1",
            "metadata": {"name": "a", "uid": "u", "labels": {"l": "1"}, "annotations": {"keep": "x"}},
            "status": {"ready": true},
        });
        // A conversion that made new metadata (name only) and no status.
        let mut fresh = json!({"apiVersion": "example.com/v1", "metadata": {"name": "a"}});
        carry_over(&original, &mut fresh);
        assert_eq!(fresh["metadata"], original["metadata"]);
        assert_eq!(fresh["status"], json!({"ready": true}));
        // One that keeps a field in an annotation, changes a label and
        // converts the status.
        let mut kept = json!({
            "metadata": {"name": "changed", "uid": "other", "annotations": {"keep": "x", "field": "7"}, "labels": null},
            "status": {"phase": "Ready"},
        });
        carry_over(&original, &mut kept);
        assert_eq!(kept["metadata"], json!({"name": "a", "uid": "u", "annotations": {"keep": "x", "field": "7"}}));
        assert_eq!(kept["status"], json!({"phase": "Ready"}));
    }
}
