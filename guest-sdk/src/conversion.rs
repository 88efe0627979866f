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
/// (B → A). `metadata` is carried over untouched.
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
    let metadata = object.get("metadata").cloned();
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
    if let (Some(map), Some(metadata)) = (converted.as_object_mut(), metadata) {
        map.insert("metadata".into(), metadata);
    }
    Ok(converted)
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
