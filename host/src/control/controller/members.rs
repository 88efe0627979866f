//! A fleet controller's watches in its member clusters: one watch per
//! owned kind and member, of exactly the objects its marks select
//! ([`Owner::selector`]), and one per watched kind and member. A change of
//! a child queues its owner; a change of a watched object queues what the
//! watch's mapping names in the home; a child whose owner is gone is
//! swept
//! ([`Reconciler::sweep`](crate::control::reconciler::Reconciler::sweep)).
//! A member engaged starts its watches (whose first list brings every
//! child, so a member that was away catches up), and queues every primary
//! object, so the guest sees the new member; a member disengaged ends
//! them.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinSet;

use super::{Informer, Parts, State};
use crate::control::clusters::{Clusters, Engaged};
use crate::control::informer::{Change, Informers};
use crate::control::mapping;
use crate::manifest::Manifest;
use crate::object::mark::Owner;
use crate::object::{Gvk, ObjectRef};

/// How often a watch of children that a member cannot serve yet is tried
/// again.
const RETRY_WATCH: std::time::Duration = std::time::Duration::from_secs(10);

/// Follows the members of `manifest`'s fleet as they are engaged, until
/// the controller stops (the task is aborted).
pub(super) async fn follow(
    parts: Arc<Parts>,
    manifest: Arc<Manifest>,
    clusters: Arc<Clusters>,
    primary: Arc<Informer>,
    namespaced: bool,
) {
    let Some(fleet) = manifest.fleet.clone() else { return };
    let home_id = loop {
        match parts.reconciler.home_id().await {
            Ok(id) => break id,
            Err(e) => {
                tracing::warn!(error = %e, "cannot learn the home cluster's identity: member clusters not watched yet");
                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            }
        }
    };
    let marks = Owner::selector(&manifest.name, &home_id);
    let mut changes = clusters.subscribe();
    // The members followed, each with the informers it was followed on
    // (a member engaged again has new ones) and its watch tasks.
    let mut followed: BTreeMap<String, (Arc<Informers>, JoinSet<()>)> = BTreeMap::new();
    loop {
        let engaged: BTreeMap<String, Engaged> =
            clusters.all().into_iter().filter(|(name, _)| fleet.has_member(name)).collect();
        let before = followed.len();
        let mut changed = false;
        followed.retain(|name, (informers, _)| {
            let same = engaged.get(name).and_then(|e| e.informers.as_ref()).is_some_and(|i| Arc::ptr_eq(i, informers));
            if !same {
                tracing::info!(cluster = %name, "member cluster gone: its children no longer watched");
            }
            same
        });
        changed |= followed.len() != before;
        for (name, member) in &engaged {
            let Some(informers) = &member.informers else { continue };
            if followed.contains_key(name) {
                continue;
            }
            let mut tasks = JoinSet::new();
            for owned in &manifest.owns {
                let selector = match &owned.label_selector {
                    Some(own) => format!("{marks},{own}"),
                    None => marks.clone(),
                };
                let (parts, manifest, primary) = (Arc::clone(&parts), Arc::clone(&manifest), Arc::clone(&primary));
                let (name, home_id, informers, kind) =
                    (name.clone(), home_id.clone(), Arc::clone(informers), owned.kind.clone());
                tasks.spawn(async move {
                    let informer = watch(&parts, &informers, &name, &kind, Some(&selector), true).await;
                    route(parts, manifest, primary, name, home_id, informer).await;
                });
            }
            for watched in &manifest.watches {
                let (parts, manifest, primary) = (Arc::clone(&parts), Arc::clone(&manifest), Arc::clone(&primary));
                let (name, informers, watched) = (name.clone(), Arc::clone(informers), watched.clone());
                tasks.spawn(async move {
                    let informer =
                        watch(&parts, &informers, &name, &watched.kind, watched.label_selector.as_deref(), false).await;
                    route_watched(parts, manifest, namespaced, primary, name, informer).await;
                });
            }
            tracing::info!(cluster = %name, "member cluster engaged: its children watched");
            followed.insert(name.clone(), (Arc::clone(informers), tasks));
            changed = true;
        }
        if changed {
            // Every object again: its outcome may place children in the
            // member that came (or prune none in one that went).
            for r in parts.primary_objects() {
                parts.queue.add(r);
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The informer of `kind` (of the objects `selector` selects, or of all
/// with `None`) in the member `member`, whose watch is started
/// ([`Informers::get_marked`] for the `marked` selector of children). A kind
/// the member does not serve yet (its CRD not installed there) is tried
/// again until it is, and every primary object queued then: what changed
/// there meanwhile.
async fn watch(
    parts: &Parts,
    informers: &Informers,
    member: &str,
    kind: &Gvk,
    selector: Option<&str>,
    marked: bool,
) -> Arc<Informer> {
    let mut warned = false;
    loop {
        let got = match (marked, selector) {
            (true, Some(selector)) => informers.get_marked(kind, selector).await,
            _ => informers.get_selected(kind, selector).await,
        };
        match got {
            Ok(informer) => {
                if warned {
                    tracing::info!(cluster = %member, kind = %kind, "watched in a member cluster");
                    for r in parts.primary_objects() {
                        parts.queue.add(r);
                    }
                }
                return informer;
            }
            Err(e) => {
                if !std::mem::replace(&mut warned, true) {
                    tracing::warn!(cluster = %member, kind = %kind, error = %e, "cannot watch a kind in a member cluster: tried again every {}s", RETRY_WATCH.as_secs());
                }
                tokio::time::sleep(RETRY_WATCH).await;
            }
        }
    }
}

/// Turns the changes of one watched kind in the member `member` into
/// queue entries of the primary objects in the home that the watch's
/// mapping names ([`mapping::watch_targets`]): the member's namespace is
/// the home's, its names the home's names.
async fn route_watched(
    parts: Arc<Parts>,
    manifest: Arc<Manifest>,
    namespaced: bool,
    primary: Arc<Informer>,
    member: String,
    informer: Arc<Informer>,
) {
    let mut receiver = informer.subscribe();
    let kind = informer.gvk().clone();
    loop {
        let changes: Vec<Change> = match receiver.recv().await {
            Ok(change) => vec![change],
            Err(RecvError::Lagged(_)) => informer.store().state().iter().map(|o| Change::of(o, false)).collect(),
            Err(RecvError::Closed) => return,
        };
        let primaries = |namespace: Option<&str>| -> Vec<ObjectRef> {
            primary
                .store()
                .state()
                .iter()
                .filter(|p| namespace.is_none() || p.metadata.namespace.as_deref() == namespace)
                .filter_map(|p| {
                    Some(ObjectRef::new(
                        manifest.primary.clone(),
                        p.metadata.namespace.as_deref(),
                        p.metadata.name.clone()?,
                    ))
                })
                .collect()
        };
        for Change { meta, .. } in changes {
            for r in mapping::watch_targets(&manifest, namespaced, &kind, &meta, &primaries) {
                tracing::trace!(cluster = %member, from = %kind, object = %r, "a watched object in a member changed: queued");
                parts.queue.add(r);
            }
        }
    }
}

/// Turns the changes of one watch of children in the member `member` into
/// queue entries of their owners, and sweeps children whose owner is gone.
async fn route(
    parts: Arc<Parts>,
    manifest: Arc<Manifest>,
    primary: Arc<Informer>,
    member: String,
    home_id: String,
    informer: Arc<Informer>,
) {
    let mut receiver = informer.subscribe();
    let mut sweeps = JoinSet::new();
    loop {
        let changes: Vec<Change> = match receiver.recv().await {
            Ok(change) => vec![change],
            Err(RecvError::Lagged(_)) => informer.store().state().iter().map(|o| Change::of(o, false)).collect(),
            Err(RecvError::Closed) => return,
        };
        for Change { meta, deleted } in changes {
            let (Some(labels), Some(annotations)) = (&meta.labels, &meta.annotations) else { continue };
            let Some(owner) = Owner::of(labels, annotations) else { continue };
            if !owner.same_controller(&manifest.name, &home_id) || owner.home != parts.reconciler.cluster_name() {
                continue;
            }
            let owner_ref = ObjectRef { gvk: manifest.primary.clone(), ..owner.object.clone() };
            let current = primary.store().get(owner_ref.namespace.as_deref(), &owner_ref.name);
            if current.as_ref().and_then(|o| o.metadata.uid.as_deref()) == Some(owner.uid.as_str()) {
                tracing::trace!(cluster = %member, object = %owner_ref, "a child in a member changed: queued");
                parts.queue.add(owner_ref);
                continue;
            }
            let Some(name) = meta.name.clone() else { continue };
            // Only a controller that reconciles sweeps: a standby replica
            // writes nothing.
            if deleted || parts.state() != State::Running {
                continue;
            }
            let child = ObjectRef::new(informer.gvk().clone(), meta.namespace.as_deref(), name);
            let (reconciler, member) = (Arc::clone(&parts.reconciler), member.clone());
            sweeps.spawn(async move {
                if let Err(e) = reconciler.sweep(&member, &child, &owner).await {
                    tracing::warn!(cluster = %member, child = %child, error = %e, "cannot sweep a child whose owner may be gone: tried at its next change");
                }
            });
        }
        while sweeps.try_join_next().is_some() {}
    }
}
