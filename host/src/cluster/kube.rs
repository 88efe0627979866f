//! The real cluster backend: the Kubernetes API through kube-rs, with kinds
//! resolved by discovery and reads served from the host's watch caches
//! where a cache for the kind covers the namespace read (a read in a
//! namespace the host does not watch goes to the API server).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PatchParams, PostParams, PropagationPolicy};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;

use super::{Cluster, Error, EventRecord, ListParams, Patch, Propagation, Result, Status, Subresource};
use crate::object::{Gvk, ObjectRef};
use crate::sync::lock;

mod cache;
mod events;

pub use cache::{Cache, OwnerIndex};
use events::Recorder;

/// A kind as the API server serves it.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// URL path pieces (group, version, plural).
    pub resource: ApiResource,
    /// Scope and subresources.
    pub capabilities: ApiCapabilities,
}

impl Resolved {
    /// True for namespaced kinds.
    pub fn namespaced(&self) -> bool {
        self.capabilities.scope == Scope::Namespaced
    }
}

/// The API server rejects Event notes longer than this (bytes).
pub const MAX_EVENT_NOTE: usize = super::MAX_MESSAGE;

/// First wait between attempts to reach an API server that does not answer.
pub const CONNECT_BACKOFF_START: std::time::Duration = std::time::Duration::from_millis(500);
/// Longest wait between such attempts.
pub const CONNECT_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until the API server of `client` answers (`/version`), trying
/// again with a growing delay (from [`CONNECT_BACKOFF_START`], doubling up
/// to [`CONNECT_BACKOFF_MAX`]).
///
/// # Cancel safety
///
/// Cancel-safe: nothing is kept between attempts.
pub async fn wait_until_answers(client: &kube::Client) {
    let mut delay = CONNECT_BACKOFF_START;
    let mut attempt = 1u32;
    loop {
        match client.apiserver_version().await {
            Ok(version) => {
                tracing::info!(version = %version.git_version, attempt, "connected");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, retry_in_ms = delay.as_millis() as u64, "cannot reach the cluster, retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(CONNECT_BACKOFF_MAX);
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// Maps a kube-rs error to a cluster error.
pub fn map_error(e: kube::Error) -> Error {
    match e {
        kube::Error::Api(status) => Error::from_status(Status::new(status.code, &status.reason, status.message)),
        kube::Error::SerdeError(e) => Error::BadRequest(format!("cannot decode: {e}")),
        other => Error::Unavailable(other.to_string()),
    }
}

/// The Kubernetes API through kube-rs.
#[derive(Clone)]
pub struct KubeCluster {
    client: kube::Client,
    kinds: Arc<Mutex<HashMap<Gvk, Resolved>>>,
    caches: Arc<RwLock<HashMap<GroupKind, Cache>>>,
    /// Caches of the children fleet controllers placed here, each of the
    /// objects its label selector (a controller's marks) picks.
    marked: Arc<RwLock<HashMap<GroupKind, MarkedCaches>>>,
    recorders: Arc<Mutex<HashMap<String, Arc<Recorder>>>>,
    instance: Option<String>,
    /// Whom the API server authenticates `client` as, once learned.
    user: Arc<tokio::sync::OnceCell<String>>,
    /// The cluster's identity, once learned (see [`Cluster::id`]).
    id: Arc<tokio::sync::OnceCell<String>>,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster").finish_non_exhaustive()
    }
}

impl KubeCluster {
    /// A backend on `client`. `instance` names this host replica in Events
    /// (`reportingInstance`), e.g. the pod name.
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self {
            client,
            kinds: Arc::default(),
            caches: Arc::default(),
            marked: Arc::default(),
            recorders: Arc::default(),
            instance,
            user: Arc::default(),
            id: Arc::default(),
        }
    }

    /// The kube-rs client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Resolves a kind through discovery (cached once found).
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when the server does not serve the kind;
    /// [`Error::Unavailable`] when it cannot be asked.
    pub async fn resolve(&self, gvk: &Gvk) -> Result<Resolved> {
        if let Some(r) = lock(&self.kinds).get(gvk) {
            return Ok(r.clone());
        }
        let wanted = kube::api::GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        let (resource, capabilities) =
            kube::discovery::pinned_kind(&self.client, &wanted).await.map_err(|e| match e {
                kube::Error::Api(s) if s.code == 404 => {
                    Error::NotFound(Status::new(404, "NotFound", format!("the server does not serve {gvk}")))
                }
                kube::Error::Discovery(d) => {
                    Error::NotFound(Status::new(404, "NotFound", format!("the server does not serve {gvk}: {d}")))
                }
                other => map_error(other),
            })?;
        let resolved = Resolved { resource, capabilities };
        lock(&self.kinds).insert(gvk.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Forgets resolved kinds (after a CRD change, re-discovery).
    pub fn forget_kinds(&self) {
        lock(&self.kinds).clear();
    }

    /// Serves reads of `group`/`kind` from `cache` from now on, where it
    /// [covers](Cache::covers) the namespace read.
    pub fn use_cache(&self, group: &str, kind: &str, cache: Cache) {
        self.caches.write().unwrap_or_else(PoisonError::into_inner).insert((group.to_owned(), kind.to_owned()), cache);
    }

    /// Stops serving reads of `group`/`kind` from a cache: they go to the
    /// API server again.
    pub fn forget_cache(&self, group: &str, kind: &str) {
        self.caches.write().unwrap_or_else(PoisonError::into_inner).remove(&(group.to_owned(), kind.to_owned()));
    }

    /// Looks up fleet controllers' children of `group`/`kind` in `cache`
    /// (of a watch of the objects `selector` picks) from now on:
    /// [`Cluster::list_marked`] finds an owner's there, and a read of an
    /// object it holds is answered from it.
    pub fn use_marked_cache(&self, group: &str, kind: &str, selector: &str, cache: Cache) {
        let mut marked = self.marked.write().unwrap_or_else(PoisonError::into_inner);
        let caches = marked.entry((group.to_owned(), kind.to_owned())).or_default();
        caches.retain(|(s, _)| s != selector);
        caches.push((selector.to_owned(), cache));
    }

    /// Stops looking up children in the cache of `selector`'s watch.
    pub fn forget_marked_cache(&self, group: &str, kind: &str, selector: &str) {
        let mut marked = self.marked.write().unwrap_or_else(PoisonError::into_inner);
        let key = (group.to_owned(), kind.to_owned());
        if let Some(caches) = marked.get_mut(&key) {
            caches.retain(|(s, _)| s != selector);
            if caches.is_empty() {
                marked.remove(&key);
            }
        }
    }

    /// The caches of fleet controllers' children of `gvk`'s kind.
    fn marked_caches(&self, gvk: &Gvk) -> Vec<Cache> {
        let marked = self.marked.read().unwrap_or_else(PoisonError::into_inner);
        marked
            .get(&(gvk.group.clone(), gvk.kind.clone()))
            .map(|c| c.iter().map(|(_, c)| c.clone()).collect())
            .unwrap_or_default()
    }

    /// The cache of `gvk`'s kind, if there is one and it covers reads in
    /// `namespace`.
    fn cache(&self, gvk: &Gvk, namespace: Option<&str>) -> Option<Cache> {
        let caches = self.caches.read().unwrap_or_else(PoisonError::into_inner);
        caches.get(&(gvk.group.clone(), gvk.kind.clone())).filter(|c| c.covers(namespace)).cloned()
    }

    async fn api(&self, gvk: &Gvk, namespace: Option<&str>) -> Result<(Api<DynamicObject>, Resolved)> {
        let resolved = self.resolve(gvk).await?;
        let api = match (resolved.namespaced(), namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            (true, None) => Api::all_with(self.client.clone(), &resolved.resource),
            (false, _) => Api::all_with(self.client.clone(), &resolved.resource),
        };
        Ok((api, resolved))
    }

    async fn api_for(&self, r: &ObjectRef) -> Result<Api<DynamicObject>> {
        let (api, resolved) = self.api(&r.gvk, r.namespace.as_deref()).await?;
        if resolved.namespaced() && r.namespace.is_none() {
            return Err(Error::BadRequest(format!("{} is namespaced: a namespace is required", r.gvk)));
        }
        Ok(api)
    }
}

/// A kind's group and name, without version: the key of the watch caches.
type GroupKind = (String, String);

/// The caches of fleet controllers' children of one kind, each with the
/// label selector of its watch.
type MarkedCaches = Vec<(String, Cache)>;

/// The JSON of a cached or fetched object, with `apiVersion` and `kind` as
/// requested (watch caches may hold objects without them).
fn to_value(object: &DynamicObject, gvk: &Gvk) -> Value {
    let mut value = serde_json::to_value(object).expect("a DynamicObject always serializes");
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(gvk.api_version()));
        map.insert("kind".into(), Value::String(gvk.kind.clone()));
    }
    value
}

/// Trims the `managedFields` of an object the host caches to who manages
/// it: each entry keeps `manager`, `operation`, `apiVersion`, `time` and
/// `subresource`, and loses `fieldsType` and `fieldsV1` (the field sets,
/// often the bulk of a cached object). The host reads only the managers
/// (to know, after a restart, whether its field manager wrote an object);
/// the API server keeps the full field sets either way (see
/// [`drop_trimmed_managed_fields`]).
pub fn trim_managed_fields(meta: &mut ObjectMeta) {
    for entry in meta.managed_fields.iter_mut().flatten() {
        entry.fields_type = None;
        entry.fields_v1 = None;
    }
}

/// Removes `metadata.managedFields` from a body about to be written when it
/// is the trimmed form the cache holds (no entry has a `fieldsType`), so an
/// object read from the cache and written back leaves the server's field
/// ownership as it is (an update without `managedFields` keeps them) instead
/// of replacing it with entries that have no fields. A body that sets full
/// entries is sent as it is.
pub fn drop_trimmed_managed_fields(body: &mut Value) {
    let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let trimmed = meta
        .get("managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| entries.iter().all(|e| e.get("fieldsType").is_none()));
    if trimmed {
        meta.remove("managedFields");
    }
}

fn from_value(value: Value) -> Result<DynamicObject> {
    serde_json::from_value(value).map_err(|e| Error::BadRequest(format!("not a Kubernetes object: {e}")))
}

#[async_trait]
impl Cluster for KubeCluster {
    /// Asks the API server with a `SelfSubjectReview` (no RBAC needed) the
    /// first time; a failure is logged and asked again next time.
    async fn user(&self) -> Option<String> {
        use k8s_openapi::api::authentication::v1::SelfSubjectReview;
        let learned = self
            .user
            .get_or_try_init(|| async {
                let reviews: Api<SelfSubjectReview> = Api::all(self.client.clone());
                let answer = reviews.create(&PostParams::default(), &SelfSubjectReview::default()).await;
                let answer = answer.map_err(|e| e.to_string())?;
                let user = answer.status.and_then(|s| s.user_info).and_then(|u| u.username);
                user.filter(|u| !u.is_empty()).ok_or_else(|| "the API server names no user".to_owned())
            })
            .await;
        match learned {
            Ok(user) => Some(user.clone()),
            Err(error) => {
                tracing::warn!(%error, "cannot learn the user the host's requests are made as");
                None
            }
        }
    }

    async fn get(&self, object: &ObjectRef) -> Result<Value> {
        if let Some(cache) = self.cache(&object.gvk, object.namespace.as_deref()) {
            // A version the server does not serve is not found, cached or not.
            self.resolve(&object.gvk).await?;
            return match cache.get(object.namespace.as_deref(), &object.name) {
                Some(o) => Ok(to_value(&o, &object.gvk)),
                None => Err(Error::NotFound(Status::new(404, "NotFound", format!("{object} not found")))),
            };
        }
        // A child a fleet controller placed here, as its watch last saw it.
        if let Some(o) = self
            .marked_caches(&object.gvk)
            .iter()
            .find_map(|cache| cache.get(object.namespace.as_deref(), &object.name))
        {
            return Ok(to_value(&o, &object.gvk));
        }
        let api = self.api_for(object).await?;
        let found = api.get(&object.name).await.map_err(map_error)?;
        Ok(to_value(&found, &object.gvk))
    }

    async fn list_marked(&self, kind: &Gvk, namespace: Option<&str>, owner_uid: &str) -> Result<Vec<Value>> {
        let caches = self.marked_caches(kind);
        if caches.is_empty() {
            if owner_uid.is_empty() || !super::mock::meta::is_label_value(owner_uid) {
                return Ok(Vec::new());
            }
            let selector = format!("{}={owner_uid}", crate::object::mark::OWNER_UID);
            let params = ListParams { label_selector: Some(selector), field_selector: None };
            return self.list(kind, namespace, &params).await;
        }
        let mut seen = std::collections::BTreeSet::new();
        Ok(caches
            .iter()
            .flat_map(|cache| cache.owned_by(namespace, owner_uid))
            .filter(|o| seen.insert((o.metadata.namespace.clone(), o.metadata.name.clone())))
            .map(|o| to_value(&o, kind))
            .collect())
    }

    /// Reads the `kube-system` Namespace once (`get` on it is what the
    /// host's RBAC grants for this).
    async fn id(&self) -> Result<String> {
        let id = self
            .id
            .get_or_try_init(|| async {
                let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
                let system = namespaces.get("kube-system").await.map_err(map_error)?;
                system.metadata.uid.filter(|u| !u.is_empty()).ok_or_else(|| {
                    Error::Unavailable("the kube-system Namespace has no uid: the cluster has no identity".into())
                })
            })
            .await?;
        Ok(id.clone())
    }

    async fn list(&self, kind: &Gvk, namespace: Option<&str>, params: &ListParams) -> Result<Vec<Value>> {
        let unfiltered = params.label_selector.is_none() && params.field_selector.is_none();
        if let (Some(cache), true) = (self.cache(kind, namespace), unfiltered) {
            let mut items: Vec<Value> = cache.list(namespace).iter().map(|o| to_value(o, kind)).collect();
            items.sort_by(|a, b| {
                let key = |v: &Value| {
                    (
                        crate::object::meta_str(v, "namespace").map(str::to_owned),
                        crate::object::meta_str(v, "name").map(str::to_owned),
                    )
                };
                key(a).cmp(&key(b))
            });
            return Ok(items);
        }
        let (api, _) = self.api(kind, namespace).await?;
        let mut lp = kube::api::ListParams::default();
        if let Some(l) = &params.label_selector {
            lp = lp.labels(l);
        }
        if let Some(f) = &params.field_selector {
            lp = lp.fields(f);
        }
        let list = api.list(&lp).await.map_err(map_error)?;
        Ok(list.items.iter().map(|o| to_value(o, kind)).collect())
    }

    async fn list_owned(&self, kind: &Gvk, namespace: Option<&str>, owner_uid: &str) -> Result<Vec<Value>> {
        let Some(cache) = self.cache(kind, namespace) else {
            let all = self.list(kind, namespace, &ListParams::default()).await?;
            return Ok(all.into_iter().filter(|o| crate::object::owner_uids(o).any(|u| u == owner_uid)).collect());
        };
        Ok(cache.owned_by(namespace, owner_uid).iter().map(|o| to_value(o, kind)).collect())
    }

    async fn create(&self, mut object: Value) -> Result<Value> {
        drop_trimmed_managed_fields(&mut object);
        let r =
            ObjectRef::of(&object).ok_or_else(|| Error::BadRequest("object lacks apiVersion, kind or name".into()))?;
        let api = self.api_for(&r).await?;
        let created = api.create(&PostParams::default(), &from_value(object)?).await.map_err(map_error)?;
        Ok(to_value(&created, &r.gvk))
    }

    async fn replace(&self, mut object: Value, subresource: Subresource) -> Result<Value> {
        drop_trimmed_managed_fields(&mut object);
        let r =
            ObjectRef::of(&object).ok_or_else(|| Error::BadRequest("object lacks apiVersion, kind or name".into()))?;
        let api = self.api_for(&r).await?;
        let pp = PostParams::default();
        let replaced = match subresource {
            Subresource::Main => api.replace(&r.name, &pp, &from_value(object)?).await,
            Subresource::Status => api.replace_status(&r.name, &pp, &from_value(object)?).await,
        }
        .map_err(map_error)?;
        Ok(to_value(&replaced, &r.gvk))
    }

    async fn patch(&self, object: &ObjectRef, patch: Patch, subresource: Subresource) -> Result<Value> {
        let api = self.api_for(object).await?;
        let (params, patch) = match patch {
            Patch::Merge(v) => (PatchParams::default(), kube::api::Patch::Merge(v)),
            Patch::Strategic(v) => (PatchParams::default(), kube::api::Patch::Strategic(v)),
            Patch::Json(v) => {
                let ops: json_patch::Patch =
                    serde_json::from_value(v).map_err(|e| Error::BadRequest(format!("invalid JSON patch: {e}")))?;
                (PatchParams::default(), kube::api::Patch::Json::<Value>(ops))
            }
            Patch::Apply { mut object, field_manager, force } => {
                drop_trimmed_managed_fields(&mut object);
                let mut params = PatchParams::apply(&field_manager);
                if force {
                    params = params.force();
                }
                (params, kube::api::Patch::Apply(object))
            }
        };
        let patched = match subresource {
            Subresource::Main => api.patch(&object.name, &params, &patch).await,
            Subresource::Status => api.patch_status(&object.name, &params, &patch).await,
        }
        .map_err(map_error)?;
        Ok(to_value(&patched, &object.gvk))
    }

    async fn delete(&self, object: &ObjectRef, propagation: Propagation) -> Result<()> {
        let api = self.api_for(object).await?;
        let params = DeleteParams {
            propagation_policy: match propagation {
                Propagation::Default => None,
                Propagation::Background => Some(PropagationPolicy::Background),
                Propagation::Foreground => Some(PropagationPolicy::Foreground),
                Propagation::Orphan => Some(PropagationPolicy::Orphan),
            },
            ..DeleteParams::default()
        };
        api.delete(&object.name, &params).await.map_err(map_error)?;
        Ok(())
    }

    async fn record_event(&self, event: EventRecord) -> Result<()> {
        let recorder = lock(&self.recorders)
            .entry(event.reporting_controller.clone())
            .or_insert_with(|| {
                let controller = format!("capstan.dev/{}", event.reporting_controller);
                Arc::new(Recorder::new(self.client.clone(), controller, self.instance.clone()))
            })
            .clone();
        let regarding = ObjectReference {
            api_version: Some(event.regarding.gvk.api_version()),
            kind: Some(event.regarding.gvk.kind.clone()),
            name: Some(event.regarding.name.clone()),
            namespace: event.regarding.namespace.clone(),
            uid: event.regarding_uid.clone(),
            ..ObjectReference::default()
        };
        let note = event.note.map(|n| super::bounded(&n, MAX_EVENT_NOTE));
        let trace_id = crate::telemetry::current_trace_id();
        recorder.publish(event.warning, event.reason, event.action, note, regarding, trace_id).await.map_err(map_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_event_notes_are_cut_to_what_the_api_server_accepts() {
        let cut = super::super::bounded(&"é".repeat(1000), MAX_EVENT_NOTE);
        assert!(cut.len() <= MAX_EVENT_NOTE && cut.ends_with("… (996 bytes cut)"), "{cut}");
        assert_eq!(super::super::bounded("short", MAX_EVENT_NOTE), "short");
    }

    #[test]
    fn cached_managed_fields_keep_the_managers_and_go_back_to_the_server_untouched() {
        let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "managedFields": [{
                "manager": "capstan-greeter", "operation": "Apply", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:message": {}}},
            }]},
        }))
        .expect("a valid object");
        trim_managed_fields(&mut object.metadata);
        let mut cached = serde_json::to_value(&object).expect("serializes");
        assert_eq!(
            cached["metadata"]["managedFields"],
            serde_json::json!([{"manager": "capstan-greeter", "operation": "Apply", "apiVersion": "v1"}])
        );
        // Written back as read from the cache: the server keeps its own.
        drop_trimmed_managed_fields(&mut cached);
        assert!(cached["metadata"].get("managedFields").is_none());
        // Full entries a writer sets on purpose are sent.
        let mut full = serde_json::json!({"metadata": {"managedFields": [{"manager": "m", "fieldsType": "FieldsV1"}]}});
        drop_trimmed_managed_fields(&mut full);
        assert!(full["metadata"]["managedFields"].is_array());
    }

    #[test]
    fn api_errors_map_to_typed_cluster_errors() {
        let status = kube::core::Status::failure("x exists", "AlreadyExists").with_code(409);
        assert!(matches!(map_error(kube::Error::Api(status.boxed())), Error::AlreadyExists(_)));
    }
}
