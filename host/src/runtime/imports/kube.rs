//! The `kube` import: Kubernetes API calls, checked against the grants,
//! sent to the cluster backend.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::cluster::{self, Cluster, ListParams, Patch, Propagation, Subresource};
use crate::manifest::Verb;
use crate::metrics::metrics;
use crate::object::{Gvk, ObjectRef};
use crate::runtime::bindings::capstan::operator::kube as wit;
use crate::runtime::bindings::capstan::operator::types as wit_types;
use crate::runtime::grants::Request;

use super::validate::{self, Invalid};
use super::{CallResult, HostState, result_label};

impl From<wit_types::GroupVersionKind> for Gvk {
    fn from(k: wit_types::GroupVersionKind) -> Self {
        Gvk::new(k.group, k.version, k.kind)
    }
}

impl From<wit_types::ObjectRef> for ObjectRef {
    fn from(r: wit_types::ObjectRef) -> Self {
        ObjectRef { gvk: r.kind.into(), namespace: r.namespace, name: r.name }
    }
}

impl From<cluster::Status> for wit::Status {
    fn from(s: cluster::Status) -> Self {
        wit::Status { code: s.code, reason: s.reason, message: s.message }
    }
}

impl From<cluster::Error> for wit::Error {
    fn from(e: cluster::Error) -> Self {
        use cluster::Error as E;
        match e {
            E::NotFound(s) => Self::NotFound(s.into()),
            E::AlreadyExists(s) => Self::AlreadyExists(s.into()),
            E::Conflict(s) => Self::Conflict(s.into()),
            E::Invalid(s) => Self::Invalid(s.into()),
            E::Forbidden(s) => Self::Forbidden(s.into()),
            E::BadRequest(m) => Self::BadRequest(m),
            E::Unavailable(m) => Self::Unavailable(m),
            E::Other(s) => Self::Other(s.into()),
        }
    }
}

/// What a call needs the grants to allow.
struct Access {
    verb: Verb,
    kind: Gvk,
    namespace: Option<String>,
    status: bool,
    name: Option<String>,
    /// Another cluster than the caller's own (`get-in`, `list-in`).
    cluster: Option<String>,
}

impl Access {
    fn to(verb: Verb, r: &ObjectRef, status: bool) -> Self {
        Self {
            verb,
            kind: r.gvk.clone(),
            namespace: r.namespace.clone(),
            status,
            name: Some(r.name.clone()),
            cluster: None,
        }
    }

    /// The same access in the cluster named `cluster`.
    fn in_cluster(self, cluster: String) -> Self {
        Self { cluster: Some(cluster), ..self }
    }
}

fn to_json(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("a JSON value always serializes")
}

fn parse_object(bytes: &[u8]) -> Result<(Value, ObjectRef), wit::Error> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| wit::Error::BadRequest(format!("object is not JSON: {e}")))?;
    let r = ObjectRef::of(&value)
        .ok_or_else(|| wit::Error::BadRequest("object needs apiVersion, kind and metadata.name".into()))?;
    Ok((value, r))
}

fn parse_patch(patch_type: wit::PatchType, bytes: &[u8]) -> Result<Patch, wit::Error> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| wit::Error::BadRequest(format!("patch is not JSON: {e}")))?;
    Ok(match patch_type {
        wit::PatchType::Merge => Patch::Merge(value),
        wit::PatchType::Json => Patch::Json(value),
        wit::PatchType::Strategic => Patch::Strategic(value),
    })
}

impl HostState {
    /// Counts the call against [`Limits::host_calls`](crate::runtime::limits::Limits),
    /// refuses what `valid` found wrong, checks `access` against the grants,
    /// runs `call` on the cluster, and journals the outcome. Nothing is sent
    /// unless every check passes.
    async fn run<T, F, Fut>(
        &mut self,
        function: &'static str,
        target: String,
        valid: Result<(), Invalid>,
        access: Access,
        call: F,
    ) -> Result<T, wit::Error>
    where
        F: FnOnce(Arc<dyn Cluster>) -> Fut,
        Fut: Future<Output = cluster::Result<T>>,
    {
        let start = Instant::now();
        let Some(caller) = self.caller.clone() else {
            let msg = "the kube import is not available while the manifest is read".to_owned();
            self.journal_call(function, target, CallResult::Denied(msg.clone()), start.elapsed());
            return Err(wit::Error::Denied(msg));
        };
        let controller = caller.owner();
        self.kube_calls = self.kube_calls.saturating_add(1);
        if self.kube_calls > self.limits.host_calls {
            metrics().call_limited(&controller, "host_calls");
            let msg = format!(
                "limit of {} kube calls per invocation reached; nothing was sent (host setting --max-host-calls)",
                self.limits.host_calls
            );
            if self.kube_calls == self.limits.host_calls.saturating_add(1) && self.may_log() {
                tracing::warn!(function, limit = self.limits.host_calls, "host call limit of the invocation reached");
            }
            self.journal_call(function, target, CallResult::Denied(msg.clone()), start.elapsed());
            return Err(wit::Error::Denied(msg));
        }
        let kind = caller.kind_label(&access.kind);
        if let Err(invalid) = valid {
            metrics().host_call(&controller, access.verb, &kind, "bad_request");
            let msg = invalid.to_string();
            self.journal_call(function, target, CallResult::Failed(msg.clone()), start.elapsed());
            return Err(wit::Error::BadRequest(msg));
        }
        let request = Request {
            verb: access.verb,
            kind: &access.kind,
            namespace: access.namespace.as_deref(),
            status: access.status,
            name: access.name.as_deref(),
        };
        if let Err(denied) = caller.grants.check(request, caller.own_namespace()) {
            metrics().grant_denied(&controller, access.verb, &kind);
            metrics().host_call(&controller, access.verb, &kind, "denied");
            let msg = denied.to_string();
            if self.may_log() {
                tracing::warn!(function, target = %target, reason = %msg, "host call denied by grants");
            }
            self.journal_call(function, target, CallResult::Denied(msg.clone()), start.elapsed());
            return Err(wit::Error::Denied(msg));
        }
        let cluster = match &access.cluster {
            None => Arc::clone(&caller.cluster),
            Some(name) => match caller.cluster_named(name) {
                Ok(cluster) => cluster,
                Err(msg) => {
                    metrics().grant_denied(&controller, access.verb, &kind);
                    metrics().host_call(&controller, access.verb, &kind, "denied");
                    if self.may_log() {
                        tracing::warn!(function, target = %target, reason = %msg, "host call denied: cluster out of reach");
                    }
                    self.journal_call(function, target, CallResult::Denied(msg.clone()), start.elapsed());
                    return Err(wit::Error::Denied(msg));
                }
            },
        };
        // What was asked and the answer's code: never an object's contents.
        let span = tracing::info_span!(
            parent: &self.spans.parent(),
            "host_call",
            function,
            verb = access.verb.as_str(),
            kind = %access.kind,
            namespace = access.namespace.as_deref(),
            name = access.name.as_deref(),
            cluster = access.cluster.as_deref(),
            status_code = tracing::field::Empty,
            "otel.status_code" = tracing::field::Empty,
            "otel.status_message" = tracing::field::Empty,
        );
        let result = tracing::Instrument::instrument(call(cluster), span.clone()).await;
        crate::telemetry::record_request(&span, &result);
        metrics().host_call(&controller, access.verb, &kind, result_label(&result));
        let outcome = match &result {
            Ok(_) => CallResult::Ok,
            Err(e) => CallResult::Failed(e.to_string()),
        };
        self.journal_call(function, target, outcome, start.elapsed());
        result.map_err(wit::Error::from)
    }

    fn field_manager(&self) -> String {
        self.caller.as_ref().map(|c| c.field_manager.to_string()).unwrap_or_default()
    }

    async fn write_object(
        &mut self,
        function: &'static str,
        verb: Verb,
        object: Vec<u8>,
        subresource: Subresource,
        apply: Option<bool>,
    ) -> Result<Vec<u8>, wit::Error> {
        let (value, r) = parse_object(&object)?;
        let valid = validate::object_identity(&r);
        let access = Access::to(verb, &r, subresource == Subresource::Status);
        let field_manager = self.field_manager();
        self.run(function, r.to_string(), valid, access, move |c| async move {
            match (verb, apply) {
                (_, Some(force)) => {
                    let patch = Patch::Apply { object: value, field_manager, force };
                    c.patch(&r, patch, subresource).await
                }
                (Verb::Create, None) => c.create(value).await,
                _ => c.replace(value, subresource).await,
            }
            .map(|v| to_json(&v))
        })
        .await
    }

    async fn patch_object(
        &mut self,
        function: &'static str,
        object: wit_types::ObjectRef,
        patch_type: wit::PatchType,
        patch: Vec<u8>,
        subresource: Subresource,
    ) -> Result<Vec<u8>, wit::Error> {
        let r = ObjectRef::from(object);
        let patch = parse_patch(patch_type, &patch)?;
        let valid = validate::object_ref(&r, "");
        let access = Access::to(Verb::Patch, &r, subresource == Subresource::Status);
        self.run(function, r.to_string(), valid, access, move |c| async move {
            c.patch(&r, patch, subresource).await.map(|v| to_json(&v))
        })
        .await
    }
}

impl HostState {
    /// `get`, in the caller's own cluster or (`get-in`) the one named.
    async fn get_object(
        &mut self,
        function: &'static str,
        cluster: Option<String>,
        object: wit_types::ObjectRef,
    ) -> Result<Vec<u8>, wit::Error> {
        let r = ObjectRef::from(object);
        let valid = validate::object_ref(&r, "");
        let mut access = Access::to(Verb::Get, &r, false);
        let mut target = r.to_string();
        if let Some(cluster) = cluster {
            target = format!("{target} in cluster {}", cluster::bounded(&cluster, 64));
            access = access.in_cluster(cluster);
        }
        self.run(function, target, valid, access, move |c| async move { c.get(&r).await.map(|v| to_json(&v)) }).await
    }

    /// `list`, in the caller's own cluster or (`list-in`) the one named.
    async fn list_objects(
        &mut self,
        function: &'static str,
        cluster: Option<String>,
        kind: wit_types::GroupVersionKind,
        namespace: Option<String>,
        params: wit::ListParams,
    ) -> Result<Vec<Vec<u8>>, wit::Error> {
        let kind = Gvk::from(kind);
        let mut target = match &namespace {
            Some(ns) => format!("{kind} in {ns}"),
            None => format!("{kind} in all namespaces"),
        };
        if let Some(cluster) = &cluster {
            target = format!("{target} in cluster {}", cluster::bounded(cluster, 64));
        }
        let valid = validate::gvk(&kind, "").and_then(|()| match &namespace {
            Some(ns) => validate::namespace(ns, ""),
            None => Ok(()),
        });
        let access = Access {
            verb: Verb::List,
            kind: kind.clone(),
            namespace: namespace.clone(),
            status: false,
            name: None,
            cluster,
        };
        let params = ListParams { label_selector: params.label_selector, field_selector: params.field_selector };
        self.run(function, target, valid, access, move |c| async move {
            let items = c.list(&kind, namespace.as_deref(), &params).await?;
            Ok(items.iter().map(to_json).collect())
        })
        .await
    }
}

impl wit::Host for HostState {
    async fn get(&mut self, object: wit_types::ObjectRef) -> Result<Vec<u8>, wit::Error> {
        self.get_object("kube.get", None, object).await
    }

    async fn list(
        &mut self,
        kind: wit_types::GroupVersionKind,
        namespace: Option<String>,
        params: wit::ListParams,
    ) -> Result<Vec<Vec<u8>>, wit::Error> {
        self.list_objects("kube.list", None, kind, namespace, params).await
    }

    async fn get_in(&mut self, cluster: String, object: wit_types::ObjectRef) -> Result<Vec<u8>, wit::Error> {
        self.get_object("kube.get-in", Some(cluster), object).await
    }

    async fn list_in(
        &mut self,
        cluster: String,
        kind: wit_types::GroupVersionKind,
        namespace: Option<String>,
        params: wit::ListParams,
    ) -> Result<Vec<Vec<u8>>, wit::Error> {
        self.list_objects("kube.list-in", Some(cluster), kind, namespace, params).await
    }

    async fn create(&mut self, object: Vec<u8>) -> Result<Vec<u8>, wit::Error> {
        self.write_object("kube.create", Verb::Create, object, Subresource::Main, None).await
    }

    async fn replace(&mut self, object: Vec<u8>) -> Result<Vec<u8>, wit::Error> {
        self.write_object("kube.replace", Verb::Update, object, Subresource::Main, None).await
    }

    async fn patch(
        &mut self,
        object: wit_types::ObjectRef,
        patch_type: wit::PatchType,
        patch: Vec<u8>,
    ) -> Result<Vec<u8>, wit::Error> {
        self.patch_object("kube.patch", object, patch_type, patch, Subresource::Main).await
    }

    async fn apply(&mut self, object: Vec<u8>, force: bool) -> Result<Vec<u8>, wit::Error> {
        self.write_object("kube.apply", Verb::Patch, object, Subresource::Main, Some(force)).await
    }

    async fn delete(&mut self, object: wit_types::ObjectRef, propagation: wit::Propagation) -> Result<(), wit::Error> {
        let r = ObjectRef::from(object);
        let valid = validate::object_ref(&r, "");
        let access = Access::to(Verb::Delete, &r, false);
        let propagation = match propagation {
            wit::Propagation::Default => Propagation::Default,
            wit::Propagation::Background => Propagation::Background,
            wit::Propagation::Foreground => Propagation::Foreground,
            wit::Propagation::Orphan => Propagation::Orphan,
        };
        self.run("kube.delete", r.to_string(), valid, access, move |c| async move { c.delete(&r, propagation).await })
            .await
    }

    async fn replace_status(&mut self, object: Vec<u8>) -> Result<Vec<u8>, wit::Error> {
        self.write_object("kube.replace-status", Verb::Update, object, Subresource::Status, None).await
    }

    async fn patch_status(
        &mut self,
        object: wit_types::ObjectRef,
        patch_type: wit::PatchType,
        patch: Vec<u8>,
    ) -> Result<Vec<u8>, wit::Error> {
        self.patch_object("kube.patch-status", object, patch_type, patch, Subresource::Status).await
    }

    async fn apply_status(&mut self, object: Vec<u8>, force: bool) -> Result<Vec<u8>, wit::Error> {
        self.write_object("kube.apply-status", Verb::Patch, object, Subresource::Status, Some(force)).await
    }
}
