//! A fleet controller's children in its member clusters: checked, marked
//! (see [`crate::object::mark`]), applied, pruned, deleted or kept with
//! their owner, and swept when their owner is gone.
//!
//! # Guarantees
//!
//! - A child in a member is checked as one here is (an owned kind, a valid
//!   name, the owner's namespace, the grants, the kind's label selector,
//!   none twice in one cluster), and only placed in a member the manifest
//!   declares; one placed elsewhere makes the outcome invalid.
//! - It carries the marks, never an ownerReference: the marks the guest
//!   gave are overwritten, its ownerReferences dropped. An object there
//!   that another owner's marks claim is refused, as a child another owner
//!   controls is here.
//! - A member that is declared but not engaged refuses its children
//!   (`ClusterNotEngaged`); one whose API server does not answer holds up
//!   only its own children: the rest of the outcome is applied, and the
//!   object is tried again with backoff ([`Error::Unreachable`]).
//! - Pruning runs in every engaged member, as here, when no child was
//!   refused.
//! - When the owner goes, its children go in every engaged member (with
//!   `children-policy: keep`, their marks go instead and they stay). A
//!   member out of reach then catches up by the sweep: a marked child
//!   whose owner its home no longer has (asked of the API server, not a
//!   cache) is deleted when the watch of the member next shows it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    ChildFailure, Error, Existing, LastApply, MAX_CHILDREN, Reconciler, Report, digest, key_of, prepare_children,
    refusal,
};
use crate::cluster::{self, Cluster, Patch, Propagation, Subresource};
use crate::manifest::Manifest;
use crate::object::mark::{self, Owner};
use crate::object::{self, ObjectRef};
use crate::runtime::bindings::capstan::operator::types as wit;
use crate::runtime::component::Loaded;
use crate::runtime::imports::Reach;
use crate::sync::lock;

/// The member children of one outcome, checked and marked, by cluster.
pub(super) type Placed = BTreeMap<String, Vec<(ObjectRef, Value)>>;

/// What applying in the members came to.
#[derive(Default)]
pub(super) struct InMembers {
    /// Children refused, each naming its cluster.
    pub(super) refused: Vec<ChildFailure>,
    /// Members that did not answer, each with what was tried.
    pub(super) unreachable: Vec<String>,
    /// The children desired in each engaged member.
    desired: BTreeMap<String, BTreeSet<ObjectRef>>,
}

impl Reconciler {
    /// Where the calls of `manifest`'s component reach beyond this
    /// cluster: `None` unless it is a fleet controller on a host with
    /// members.
    pub(super) fn reach(&self, manifest: &Manifest) -> Option<Reach> {
        let fleet = manifest.fleet.clone()?;
        Some(Reach { members: Arc::clone(self.members.as_ref()?), fleet })
    }

    /// The member clusters of `manifest`'s fleet engaged now, in order.
    pub(super) fn engaged_members(&self, manifest: &Manifest) -> Vec<String> {
        match (&manifest.fleet, &self.members) {
            (Some(fleet), Some(members)) => fleet.engaged(members.names().iter().map(String::as_str)),
            _ => Vec::new(),
        }
    }

    /// This cluster's identity, learned once: what a fleet controller's
    /// marks name as home.
    ///
    /// # Errors
    ///
    /// When the cluster cannot tell it (see [`Cluster::id`]).
    pub async fn home_id(&self) -> Result<String, cluster::Error> {
        self.home_id.get_or_try_init(|| self.cluster.id()).await.cloned()
    }

    /// The owner the marks of `r`'s children name.
    async fn owner(&self, manifest: &Manifest, r: &ObjectRef, uid: &str) -> Result<Owner, Error> {
        Ok(Owner {
            controller: manifest.name.clone(),
            home_id: self.home_id().await?,
            home: self.cluster_name.to_string(),
            object: r.clone(),
            uid: uid.to_owned(),
        })
    }

    /// Checks and marks the member children of an outcome for the object
    /// `r` (uid `uid`), by cluster.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOutcome`] when the component declares no fleet, a
    /// child names a cluster that is not a member, there are more than
    /// [`MAX_CHILDREN`], or a child fails the checks of
    /// [`prepare_children`]; a cluster error when this cluster's identity
    /// cannot be learned.
    pub(super) async fn prepare_member_children(
        &self,
        component: &Loaded,
        r: &ObjectRef,
        uid: &str,
        children: &[wit::MemberChild],
    ) -> Result<Placed, Error> {
        if children.is_empty() {
            return Ok(Placed::new());
        }
        let invalid = |m: String| Error::InvalidOutcome(cluster::bounded(&m, cluster::MAX_MESSAGE));
        let manifest = &component.manifest;
        let Some(fleet) = &manifest.fleet else {
            return Err(invalid("children in other clusters from a component that declares no fleet".into()));
        };
        if children.len() > MAX_CHILDREN {
            return Err(invalid(format!("{} member children, more than {MAX_CHILDREN}", children.len())));
        }
        let mut by_cluster: BTreeMap<&str, Vec<Vec<u8>>> = BTreeMap::new();
        for child in children {
            if !fleet.has_member(&child.cluster) {
                return Err(invalid(format!(
                    "a child in cluster {}: not a member of the fleet the manifest declares",
                    cluster::bounded(&child.cluster, 64)
                )));
            }
            by_cluster.entry(child.cluster.as_str()).or_default().push(child.object.clone());
        }
        let owner = self.owner(manifest, r, uid).await?;
        let grants = self.grants_for(component);
        let mut placed = Placed::new();
        for (cluster, objects) in by_cluster {
            // The checks of a child here; the ownerReference they set is
            // replaced by the marks.
            let prepared = prepare_children(manifest, &grants, r, &json!({}), &objects).map_err(|e| match e {
                Error::InvalidOutcome(m) => invalid(format!("in cluster {cluster}: {m}")),
                other => other,
            })?;
            let marked = prepared
                .into_iter()
                .map(|(child_ref, mut child)| {
                    owner.mark(&mut child);
                    (child_ref, child)
                })
                .collect();
            placed.insert(cluster.to_owned(), marked);
        }
        Ok(placed)
    }

    /// Applies `placed` in its clusters for the object `r` (uid `uid`).
    pub(super) async fn apply_in_members(
        &self,
        r: &ObjectRef,
        uid: &str,
        placed: Placed,
        report: &mut Report,
    ) -> InMembers {
        let mut result = InMembers::default();
        let field_manager = self.component().manifest.field_manager();
        for (name, children) in placed {
            let desired = result.desired.entry(name.clone()).or_default();
            desired.extend(children.iter().map(|(child_ref, _)| child_ref.clone()));
            let Some(member) = self.members.as_ref().and_then(|m| m.get(&name)) else {
                for (child_ref, _) in children {
                    result.refused.push(ChildFailure {
                        child: child_ref,
                        code: 503,
                        reason: "ClusterNotEngaged".into(),
                        message: format!("cluster {name} is not engaged now; the child is placed once it is"),
                        cluster: Some(name.clone()),
                    });
                }
                continue;
            };
            for (child_ref, child) in children {
                match self.apply_member_child(&name, &*member, &child_ref, child, uid, &field_manager).await {
                    Ok(true) => report.applied.push(child_ref),
                    Ok(false) => report.unchanged.push(child_ref),
                    Err(Refused::Child(code, reason, message)) => result.refused.push(ChildFailure {
                        child: child_ref,
                        code,
                        reason,
                        message: cluster::bounded(&message, cluster::MAX_MESSAGE),
                        cluster: Some(name.clone()),
                    }),
                    Err(Refused::Cluster(e)) => {
                        tracing::warn!(object = %r, cluster = %name, child = %child_ref, error = %e, "member cluster not reached");
                        result.unreachable.push(format!("{name}: applying {child_ref}: {e}"));
                        break;
                    }
                }
            }
        }
        result
    }

    /// Applies one marked child in `member`; returns whether it was sent
    /// (not still as last applied).
    async fn apply_member_child(
        &self,
        name: &str,
        member: &dyn Cluster,
        child_ref: &ObjectRef,
        child: Value,
        uid: &str,
        field_manager: &str,
    ) -> Result<bool, Refused> {
        let before = match existing_in(member, child_ref, uid).await? {
            Existing::Absent => None,
            Existing::Ours(object) => Some(object),
            Existing::ControlledBy(other) => {
                return Err(Refused::Child(
                    409,
                    "AlreadyOwned".into(),
                    format!("marked as {other}'s; the host does not take it over"),
                ));
            }
        };
        let key = (name.to_owned(), key_of(child_ref));
        let sent = digest(&child);
        let same = lock(&self.member_applied).get(&key).is_some_and(|(rv, last): &LastApply| {
            before.as_ref().and_then(|b| object::meta_str(b, "resourceVersion")) == Some(rv.as_str()) && *last == sent
        });
        if same {
            return Ok(false);
        }
        let patch = Patch::Apply { object: child, field_manager: field_manager.to_owned(), force: true };
        match member.patch(child_ref, patch, Subresource::Main).await {
            Ok(written) => {
                match object::meta_str(&written, "resourceVersion") {
                    Some(rv) => lock(&self.member_applied).insert(key, (rv.to_owned(), sent)),
                    None => lock(&self.member_applied).remove(&key),
                };
                Ok(true)
            }
            Err(e) => Err(Refused::of(e)),
        }
    }

    /// Deletes the children of `r` (uid `uid`) not in `result`'s desired
    /// ones, in every engaged member; a member that does not answer is
    /// noted in `result`.
    pub(super) async fn prune_in_members(
        &self,
        manifest: &Manifest,
        r: &ObjectRef,
        uid: &str,
        result: &mut InMembers,
        report: &mut Report,
    ) {
        for name in self.engaged_members(manifest) {
            let Some(member) = self.members.as_ref().and_then(|m| m.get(&name)) else { continue };
            if result.unreachable.iter().any(|u| u.starts_with(&format!("{name}:"))) {
                continue;
            }
            let desired = result.desired.get(&name).cloned().unwrap_or_default();
            let children = match self.marked_children(manifest, &*member, r, uid).await {
                Ok(children) => children,
                Err(e) => {
                    result.unreachable.push(format!("{name}: listing children: {e}"));
                    continue;
                }
            };
            for child_ref in children.into_iter().filter(|c| !desired.contains(c)) {
                lock(&self.member_applied).remove(&(name.clone(), key_of(&child_ref)));
                match member.delete(&child_ref, Propagation::Background).await {
                    Ok(()) => report.pruned.push(child_ref),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => {
                        result.unreachable.push(format!("{name}: pruning {child_ref}: {e}"));
                        break;
                    }
                }
            }
        }
    }

    /// The children `r` (uid `uid`) has in `member`: objects of its owned
    /// kinds, selected by their label selectors, marked with its uid by
    /// this controller of this home, and not being deleted.
    async fn marked_children(
        &self,
        manifest: &Manifest,
        member: &dyn Cluster,
        r: &ObjectRef,
        uid: &str,
    ) -> Result<Vec<ObjectRef>, cluster::Error> {
        let home_id = self.home_id().await?;
        let mut children = Vec::new();
        for owned in &manifest.owns {
            for child in member.list_marked(&owned.kind, r.namespace.as_deref(), uid).await? {
                let ours = Owner::of_value(&child)
                    .is_some_and(|o| o.uid == uid && o.same_controller(&manifest.name, &home_id));
                if !ours || !owned.selects(child.pointer("/metadata/labels")) || object::is_deleting(&child) {
                    continue;
                }
                if let Some(child_ref) = ObjectRef::of(&child) {
                    children.push(ObjectRef { gvk: owned.kind.clone(), ..child_ref });
                }
            }
        }
        Ok(children)
    }

    /// Deletes the children of the object `r` (uid `uid`, gone) in every
    /// engaged member, best effort: a member out of reach catches up by
    /// its sweep.
    pub(super) async fn delete_in_members(&self, manifest: &Manifest, r: &ObjectRef, uid: &str) {
        for name in self.engaged_members(manifest) {
            let Some(member) = self.members.as_ref().and_then(|m| m.get(&name)) else { continue };
            let deleted = async {
                for child_ref in self.marked_children(manifest, &*member, r, uid).await? {
                    lock(&self.member_applied).remove(&(name.clone(), key_of(&child_ref)));
                    match member.delete(&child_ref, Propagation::Background).await {
                        Ok(()) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok::<(), cluster::Error>(())
            };
            if let Err(e) = deleted.await {
                tracing::warn!(object = %r, cluster = %name, error = %e, "children in a member not deleted now: swept when it answers");
            }
        }
    }

    /// What the `deleted` outcome's `policy` asks for the children of `r`
    /// (uid `uid`) in the members: with `prune` they are deleted (a member
    /// out of reach catches up by its sweep); with `keep` their marks are
    /// removed, so they stay for good.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when a member could not unmark its children
    /// (the finalizer stays: unmarked later, they would be swept).
    pub(super) async fn finish_deleted_in_members(
        &self,
        manifest: &Manifest,
        r: &ObjectRef,
        uid: &str,
        policy: wit::ChildrenPolicy,
    ) -> Result<(), Error> {
        if manifest.fleet.is_none() {
            return Ok(());
        }
        if policy == wit::ChildrenPolicy::Prune {
            self.delete_in_members(manifest, r, uid).await;
            return Ok(());
        }
        let mut unreachable = Vec::new();
        for name in self.engaged_members(manifest) {
            let Some(member) = self.members.as_ref().and_then(|m| m.get(&name)) else { continue };
            let kept = async {
                for child_ref in self.marked_children(manifest, &*member, r, uid).await? {
                    lock(&self.member_applied).remove(&(name.clone(), key_of(&child_ref)));
                    let patch = Patch::Merge(mark::unmark_patch());
                    match member.patch(&child_ref, patch, Subresource::Main).await {
                        Ok(_) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok::<(), cluster::Error>(())
            };
            if let Err(e) = kept.await {
                unreachable.push(format!("{name}: keeping the children: {e}"));
            }
        }
        if unreachable.is_empty() { Ok(()) } else { Err(Error::Unreachable(unreachable)) }
    }

    /// Sweeps `child` (of the kind `child_ref` names) in the member
    /// `member`: deletes it when the object its marks name as owner is
    /// gone from this (home) cluster, or is another object now (another
    /// uid). The owner is read from the API server, not a cache. Returns
    /// whether it was deleted.
    ///
    /// # Errors
    ///
    /// When this cluster or the member does not answer (the next look at
    /// the child tries again).
    pub async fn sweep(&self, member: &str, child_ref: &ObjectRef, owner: &Owner) -> Result<bool, cluster::Error> {
        let manifest = Arc::clone(&self.component().manifest);
        if owner.home != *self.cluster_name || !owner.same_controller(&manifest.name, &self.home_id().await?) {
            return Ok(false);
        }
        let owner_ref = ObjectRef { gvk: manifest.primary.clone(), ..owner.object.clone() };
        let gone = match self.read_through(&owner_ref, Subresource::Main).await {
            Ok(current) => object::meta_str(&current, "uid") != Some(owner.uid.as_str()),
            Err(e) if e.is_not_found() => true,
            Err(e) => return Err(e),
        };
        if !gone {
            return Ok(false);
        }
        let Some(cluster) = self.members.as_ref().and_then(|m| m.get(member)) else { return Ok(false) };
        lock(&self.member_applied).remove(&(member.to_owned(), key_of(child_ref)));
        match cluster.delete(child_ref, Propagation::Background).await {
            Ok(()) => {
                tracing::info!(cluster = member, child = %child_ref, owner = %owner_ref, "swept a child whose owner is gone");
                Ok(true)
            }
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Why a member child was not applied.
enum Refused {
    /// For a reason a retry cannot fix: code, reason, message.
    Child(u16, String, String),
    /// The member did not answer, or answered with a passing error.
    Cluster(cluster::Error),
}

impl Refused {
    fn of(e: cluster::Error) -> Self {
        match refusal(&e) {
            Some((code, reason, message)) => Self::Child(code, reason, message),
            None => Self::Cluster(e),
        }
    }
}

/// Whether `child` exists in `member`, and whether marks of an owner other
/// than `uid` claim it.
async fn existing_in(member: &dyn Cluster, child: &ObjectRef, uid: &str) -> Result<Existing, Refused> {
    let existing = match member.get(child).await {
        Ok(o) => o,
        Err(e) if e.is_not_found() => return Ok(Existing::Absent),
        Err(e) => return Err(Refused::of(e)),
    };
    let claimed = existing.pointer(&format!("/metadata/labels/{}", mark::OWNER_UID.replace('/', "~1")));
    Ok(match claimed.and_then(Value::as_str).filter(|owner| *owner != uid) {
        Some(_) => {
            let owner = Owner::of_value(&existing).map_or_else(
                || "another owner".to_owned(),
                |o| format!("{} {} in cluster {}", o.object.gvk.kind, o.object.name, o.home),
            );
            Existing::ControlledBy(owner)
        }
        None => Existing::Ours(existing),
    })
}
