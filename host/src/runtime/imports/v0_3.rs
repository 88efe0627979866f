//! The imports of contract `capstan:operator@0.3.0`: the same `kube`,
//! `events` and `log` functions as the current version, with `types` of
//! the same shape (see `bindings::v0_3`), so each call is converted and
//! handed to the current implementation. Nothing is checked or sent here:
//! grants, journal and metrics are those of the current version's code.

use crate::runtime::bindings::capstan::operator::{events, kube, log};
use crate::runtime::bindings::v0_3::capstan::operator::types::{Event, GroupVersionKind, ObjectRef};
use crate::runtime::bindings::v0_3::capstan::operator::{events as old_events, kube as old_kube, log as old_log};

use super::HostState;

impl crate::runtime::bindings::v0_3::capstan::operator::types::Host for HostState {}

fn status(s: kube::Status) -> old_kube::Status {
    old_kube::Status { code: s.code, reason: s.reason, message: s.message }
}

fn error(e: kube::Error) -> old_kube::Error {
    use kube::Error as E;
    match e {
        E::Denied(m) => old_kube::Error::Denied(m),
        E::NotFound(s) => old_kube::Error::NotFound(status(s)),
        E::AlreadyExists(s) => old_kube::Error::AlreadyExists(status(s)),
        E::Conflict(s) => old_kube::Error::Conflict(status(s)),
        E::Invalid(s) => old_kube::Error::Invalid(status(s)),
        E::Forbidden(s) => old_kube::Error::Forbidden(status(s)),
        E::BadRequest(m) => old_kube::Error::BadRequest(m),
        E::Unavailable(m) => old_kube::Error::Unavailable(m),
        E::Other(s) => old_kube::Error::Other(status(s)),
    }
}

fn patch_type(p: old_kube::PatchType) -> kube::PatchType {
    match p {
        old_kube::PatchType::Merge => kube::PatchType::Merge,
        old_kube::PatchType::Json => kube::PatchType::Json,
        old_kube::PatchType::Strategic => kube::PatchType::Strategic,
    }
}

impl old_kube::Host for HostState {
    async fn get(&mut self, object: ObjectRef) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::get(self, object.into()).await.map_err(error)
    }

    async fn list(
        &mut self,
        kind: GroupVersionKind,
        namespace: Option<String>,
        params: old_kube::ListParams,
    ) -> Result<Vec<Vec<u8>>, old_kube::Error> {
        let params = kube::ListParams { label_selector: params.label_selector, field_selector: params.field_selector };
        kube::Host::list(self, kind.into(), namespace, params).await.map_err(error)
    }

    async fn create(&mut self, object: Vec<u8>) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::create(self, object).await.map_err(error)
    }

    async fn replace(&mut self, object: Vec<u8>) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::replace(self, object).await.map_err(error)
    }

    async fn patch(
        &mut self,
        object: ObjectRef,
        patch: old_kube::PatchType,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::patch(self, object.into(), patch_type(patch), body).await.map_err(error)
    }

    async fn apply(&mut self, object: Vec<u8>, force: bool) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::apply(self, object, force).await.map_err(error)
    }

    async fn delete(&mut self, object: ObjectRef, propagation: old_kube::Propagation) -> Result<(), old_kube::Error> {
        let propagation = match propagation {
            old_kube::Propagation::Default => kube::Propagation::Default,
            old_kube::Propagation::Background => kube::Propagation::Background,
            old_kube::Propagation::Foreground => kube::Propagation::Foreground,
            old_kube::Propagation::Orphan => kube::Propagation::Orphan,
        };
        kube::Host::delete(self, object.into(), propagation).await.map_err(error)
    }

    async fn replace_status(&mut self, object: Vec<u8>) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::replace_status(self, object).await.map_err(error)
    }

    async fn patch_status(
        &mut self,
        object: ObjectRef,
        patch: old_kube::PatchType,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::patch_status(self, object.into(), patch_type(patch), body).await.map_err(error)
    }

    async fn apply_status(&mut self, object: Vec<u8>, force: bool) -> Result<Vec<u8>, old_kube::Error> {
        kube::Host::apply_status(self, object, force).await.map_err(error)
    }
}

impl old_events::Host for HostState {
    async fn record(&mut self, event: Event) -> Result<(), old_kube::Error> {
        events::Host::record(self, event.into()).await.map_err(error)
    }
}

impl old_log::Host for HostState {
    async fn log(&mut self, level: old_log::Level, message: String, fields: Vec<old_log::Field>) {
        let level = match level {
            old_log::Level::Trace => log::Level::Trace,
            old_log::Level::Debug => log::Level::Debug,
            old_log::Level::Info => log::Level::Info,
            old_log::Level::Warn => log::Level::Warn,
            old_log::Level::Error => log::Level::Error,
        };
        let fields = fields.into_iter().map(|f| log::Field { key: f.key, value: f.value }).collect();
        log::Host::log(self, level, message, fields).await;
    }
}
