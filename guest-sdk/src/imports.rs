//! The host's imports as the rest of the crate calls them: the WIT imports
//! in a component, and in a native build (a controller's unit tests under
//! `cargo test`) the [`FakeHost`](crate::testing::FakeHost) that
//! [`testing`](crate::testing) installs on the calling thread.

#[cfg(target_arch = "wasm32")]
pub(crate) use crate::wit::capstan::operator::{events, kube, log};

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod kube {
    pub(crate) use crate::wit::capstan::operator::kube::*;
    use crate::wit::capstan::operator::types::{GroupVersionKind, Json, ObjectRef};

    use crate::testing::with_host;

    pub(crate) fn get(object: &ObjectRef) -> Result<Json, Error> {
        with_host(|h| h.get(object))
    }

    pub(crate) fn list(
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<Vec<Json>, Error> {
        with_host(|h| h.list(kind, namespace, params.label_selector.as_deref()))
    }

    pub(crate) fn get_in(cluster: &str, object: &ObjectRef) -> Result<Json, Error> {
        with_host(|h| h.get_in(cluster, object))
    }

    pub(crate) fn list_in(
        cluster: &str,
        kind: &GroupVersionKind,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<Vec<Json>, Error> {
        with_host(|h| h.list_in(cluster, kind, namespace, params.label_selector.as_deref()))
    }

    pub(crate) fn create(object: &[u8]) -> Result<Json, Error> {
        with_host(|h| h.create(object))
    }

    pub(crate) fn replace(object: &[u8]) -> Result<Json, Error> {
        with_host(|h| h.replace(object, false))
    }

    pub(crate) fn patch(object: &ObjectRef, patch_type: PatchType, patch: &[u8]) -> Result<Json, Error> {
        with_host(|h| h.patch(object, patch_type, patch, false))
    }

    pub(crate) fn apply(object: &[u8], _force: bool) -> Result<Json, Error> {
        with_host(|h| h.apply(object, false))
    }

    pub(crate) fn delete(object: &ObjectRef, _propagation: Propagation) -> Result<(), Error> {
        with_host(|h| h.delete(object))
    }

    pub(crate) fn replace_status(object: &[u8]) -> Result<Json, Error> {
        with_host(|h| h.replace(object, true))
    }

    pub(crate) fn patch_status(object: &ObjectRef, patch_type: PatchType, patch: &[u8]) -> Result<Json, Error> {
        with_host(|h| h.patch(object, patch_type, patch, true))
    }

    pub(crate) fn apply_status(object: &[u8], _force: bool) -> Result<Json, Error> {
        with_host(|h| h.apply(object, true))
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod events {
    use crate::wit::capstan::operator::kube::Error;
    use crate::wit::capstan::operator::types::Event;

    pub(crate) fn record(event: &Event) -> Result<(), Error> {
        crate::testing::with_host(|h| {
            h.record(event);
            Ok(())
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod log {
    pub(crate) use crate::wit::capstan::operator::log::*;

    pub(crate) fn log(level: Level, message: &str, fields: &[Field]) {
        crate::testing::log(level, message, fields);
    }

    pub(crate) fn start_span(name: &str, attributes: &[Field]) -> SpanId {
        crate::testing::start_span(name, attributes)
    }

    pub(crate) fn end_span(span: SpanId, error: Option<&str>) {
        crate::testing::end_span(span, error);
    }
}
