//! The typed Kubernetes client: [`Api`], in the style of kube-rs.

use std::marker::PhantomData;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, Result};
use crate::imports::kube as wit_kube;
use crate::manifest::gvk_of;
use crate::wit::capstan::operator::types as wit;

/// Selectors for [`Api::list`].
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    label_selector: Option<String>,
    field_selector: Option<String>,
}

impl ListParams {
    /// Everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only objects matching a label selector, e.g. `app=web,tier!=db`.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Only objects matching a field selector, e.g. `metadata.name=x`.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }
}

/// Patch formats for [`Api::patch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Kubernetes strategic merge patch (built-in kinds only).
    Strategic,
}

/// How dependents are treated by [`Api::delete_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// The API server's default for the kind.
    #[default]
    Default,
    /// Delete dependents in the background.
    Background,
    /// Delete dependents first.
    Foreground,
    /// Leave dependents in place.
    Orphan,
}

/// A typed client for one kind in one namespace (or all namespaces, or a
/// cluster-scoped kind), made by [`Context::api`](crate::Context::api).
///
/// Every call goes through the host, which checks it against the
/// controller's grants.
pub struct Api<K> {
    namespace: Option<String>,
    /// Another cluster than the request's, for reads only.
    cluster: Option<String>,
    kind: PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("namespace", &self.namespace).field("cluster", &self.cluster).finish()
    }
}

fn decode<K: DeserializeOwned>(json: &[u8]) -> Result<K, ApiError> {
    serde_json::from_slice(json).map_err(|e| ApiError::Decode(e.to_string()))
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|e| ApiError::BadRequest(e.to_string()))
}

impl<K> Api<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Serialize,
{
    pub(crate) fn new(namespace: Option<&str>) -> Self {
        Self { namespace: namespace.map(str::to_owned), cluster: None, kind: PhantomData }
    }

    pub(crate) fn in_cluster(cluster: &str, namespace: Option<&str>) -> Self {
        Self { namespace: namespace.map(str::to_owned), cluster: Some(cluster.to_owned()), kind: PhantomData }
    }

    /// Refuses a write through an Api of another cluster, before the host
    /// is asked.
    fn writable(&self) -> Result<(), ApiError> {
        match &self.cluster {
            Some(cluster) => Err(ApiError::Denied(format!(
                "writes in cluster {cluster} go through Outcome::child_in: an Api of another cluster reads only"
            ))),
            None => Ok(()),
        }
    }

    fn object_ref(&self, name: &str) -> wit::ObjectRef {
        wit::ObjectRef { kind: gvk_of::<K>(), namespace: self.namespace.clone(), name: name.to_owned() }
    }

    /// Serializes `object` with this Api's namespace filled in when unset.
    fn encode_object(&self, object: &K) -> Result<Vec<u8>, ApiError> {
        let mut value = serde_json::to_value(object).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if let (Some(ns), Some(meta)) = (&self.namespace, value.get_mut("metadata").and_then(|m| m.as_object_mut())) {
            meta.entry("namespace").or_insert_with(|| serde_json::Value::String(ns.clone()));
        }
        encode(&value)
    }

    /// Reads one object.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`] if it does not exist; any other API error.
    pub fn get(&self, name: &str) -> Result<K, ApiError> {
        match &self.cluster {
            Some(cluster) => decode(&wit_kube::get_in(cluster, &self.object_ref(name))?),
            None => decode(&wit_kube::get(&self.object_ref(name))?),
        }
    }

    /// Reads one object, `None` if it does not exist.
    ///
    /// # Errors
    ///
    /// Any API error but 404.
    pub fn get_opt(&self, name: &str) -> Result<Option<K>, ApiError> {
        match self.get(name) {
            Ok(k) => Ok(Some(k)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Lists objects.
    ///
    /// # Errors
    ///
    /// Any API error.
    pub fn list(&self, params: &ListParams) -> Result<Vec<K>, ApiError> {
        let params = wit_kube::ListParams {
            label_selector: params.label_selector.clone(),
            field_selector: params.field_selector.clone(),
        };
        let items = match &self.cluster {
            Some(cluster) => wit_kube::list_in(cluster, &gvk_of::<K>(), self.namespace.as_deref(), &params)?,
            None => wit_kube::list(&gvk_of::<K>(), self.namespace.as_deref(), &params)?,
        };
        items.iter().map(|item| decode(item)).collect()
    }

    /// Creates an object; returns it as stored.
    ///
    /// # Errors
    ///
    /// [`ApiError::AlreadyExists`]; any other API error.
    pub fn create(&self, object: &K) -> Result<K, ApiError> {
        self.writable()?;
        decode(&wit_kube::create(&self.encode_object(object)?)?)
    }

    /// Replaces an object; its `metadata.resourceVersion`, if set, is a
    /// precondition.
    ///
    /// # Errors
    ///
    /// [`ApiError::Conflict`] on a stale resourceVersion; any other API error.
    pub fn replace(&self, object: &K) -> Result<K, ApiError> {
        self.writable()?;
        decode(&wit_kube::replace(&self.encode_object(object)?)?)
    }

    /// Patches an object.
    ///
    /// # Errors
    ///
    /// Any API error.
    pub fn patch(&self, name: &str, patch_type: PatchType, patch: &serde_json::Value) -> Result<K, ApiError> {
        self.writable()?;
        decode(&wit_kube::patch(&self.object_ref(name), patch_type.into(), &encode(patch)?)?)
    }

    /// Server-side apply with this controller's field manager.
    ///
    /// # Errors
    ///
    /// [`ApiError::Conflict`] if another manager owns a field (unless
    /// `force`); any other API error.
    pub fn apply(&self, object: &K, force: bool) -> Result<K, ApiError> {
        self.writable()?;
        decode(&wit_kube::apply(&self.encode_object(object)?, force)?)
    }

    /// Deletes an object with the default propagation.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`]; any other API error.
    pub fn delete(&self, name: &str) -> Result<(), ApiError> {
        self.delete_with(name, Propagation::Default)
    }

    /// Deletes an object.
    ///
    /// # Errors
    ///
    /// [`ApiError::NotFound`]; any other API error.
    pub fn delete_with(&self, name: &str, propagation: Propagation) -> Result<(), ApiError> {
        self.writable()?;
        Ok(wit_kube::delete(&self.object_ref(name), propagation.into())?)
    }

    /// Replaces the status subresource.
    ///
    /// # Errors
    ///
    /// Any API error.
    pub fn replace_status(&self, object: &K) -> Result<K, ApiError> {
        self.writable()?;
        decode(&wit_kube::replace_status(&self.encode_object(object)?)?)
    }

    /// Patches the status subresource.
    ///
    /// # Errors
    ///
    /// Any API error.
    pub fn patch_status(&self, name: &str, patch_type: PatchType, patch: &serde_json::Value) -> Result<K, ApiError> {
        self.writable()?;
        decode(&wit_kube::patch_status(&self.object_ref(name), patch_type.into(), &encode(patch)?)?)
    }

    /// Server-side apply of the status subresource.
    ///
    /// # Errors
    ///
    /// Any API error.
    pub fn apply_status(&self, object: &K, force: bool) -> Result<K, ApiError> {
        self.writable()?;
        decode(&wit_kube::apply_status(&self.encode_object(object)?, force)?)
    }
}

impl From<PatchType> for wit_kube::PatchType {
    fn from(p: PatchType) -> Self {
        match p {
            PatchType::Merge => Self::Merge,
            PatchType::Json => Self::Json,
            PatchType::Strategic => Self::Strategic,
        }
    }
}

impl From<Propagation> for wit_kube::Propagation {
    fn from(p: Propagation) -> Self {
        match p {
            Propagation::Default => Self::Default,
            Propagation::Background => Self::Background,
            Propagation::Foreground => Self::Foreground,
            Propagation::Orphan => Self::Orphan,
        }
    }
}
