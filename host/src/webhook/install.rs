//! `--install-webhooks`: the configurations that make the API server call
//! the host, applied with server-side apply when a component loads.
//!
//! Per component `<name>` that declares admission webhooks: a
//! `ValidatingWebhookConfiguration` and a `MutatingWebhookConfiguration`
//! named `capstan-<name>` (each only if it has webhooks of its type), one
//! entry per declared webhook. Per converted CRD: its `spec.conversion`
//! (strategy `Webhook`), applied by its own field manager
//! ([`FIELD_MANAGER`]) so that it does not take over the rest of the CRD.
//!
//! # Caveats
//!
//! Configurations of webhooks a later version no longer declares are not
//! deleted; the caBundle is the one known when the component loads (a
//! rotated CA in `--webhook-cert-dir` is written at the next load).

use base64::Engine as _;
use serde_json::{Value, json};

use super::{Error, Install};
use crate::cluster::kube::KubeCluster;
use crate::cluster::{Cluster, Patch, Subresource};
use crate::manifest::{AdmissionWebhook, Manifest};
use crate::object::{Gvk, ObjectRef};

/// Field manager of the webhook configurations and conversion stanzas.
pub const FIELD_MANAGER: &str = "capstan-webhooks";

/// The resource (plural) of `kind`: from the manifest's CRDs, else from
/// discovery.
async fn plural(cluster: &KubeCluster, manifest: &Manifest, kind: &Gvk) -> Result<String, Error> {
    let from_crd = manifest.crds.iter().find_map(|c| {
        let same = c.pointer("/spec/group").and_then(Value::as_str) == Some(kind.group.as_str())
            && c.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind.kind.as_str());
        same.then(|| c.pointer("/spec/names/plural").and_then(Value::as_str).map(str::to_owned)).flatten()
    });
    match from_crd {
        Some(p) => Ok(p),
        None => cluster
            .resolve(kind)
            .await
            .map(|r| r.resource.plural)
            .map_err(|e| Error::Install { what: format!("webhook rules for {kind}"), error: e.to_string() }),
    }
}

/// One webhook entry of a configuration.
async fn entry(
    cluster: &KubeCluster,
    manifest: &Manifest,
    webhook: &AdmissionWebhook,
    install: &Install,
) -> Result<Value, Error> {
    let mut rules = Vec::new();
    for kind in &webhook.kinds {
        rules.push(json!({
            "apiGroups": [kind.group],
            "apiVersions": [kind.version],
            "resources": [plural(cluster, manifest, kind).await?],
            "operations": webhook.operations.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
            "scope": "*",
        }));
    }
    let mut entry = json!({
        "name": webhook.name,
        "clientConfig": client_config(install, &format!("/admission/{}/{}", manifest.name, webhook.name)),
        "rules": rules,
        "failurePolicy": webhook.failure_policy(),
        "sideEffects": webhook.side_effects(),
        "timeoutSeconds": webhook.timeout.as_secs(),
        "admissionReviewVersions": ["v1"],
        "matchPolicy": "Equivalent",
    });
    if let Some(s) = &webhook.namespace_selector {
        entry["namespaceSelector"] = s.clone();
    }
    if let Some(s) = &webhook.object_selector {
        entry["objectSelector"] = s.clone();
    }
    if webhook.mutating {
        entry["reinvocationPolicy"] = json!("Never");
    }
    Ok(entry)
}

fn client_config(install: &Install, path: &str) -> Value {
    json!({
        "url": format!("{}{path}", install.url.trim_end_matches('/')),
        "caBundle": base64::engine::general_purpose::STANDARD.encode(&install.ca_bundle),
    })
}

async fn apply(cluster: &KubeCluster, object: Value) -> Result<(), Error> {
    let gvk = Gvk::of(&object).expect("the host builds objects with apiVersion and kind");
    let name = crate::object::meta_str(&object, "name").unwrap_or_default().to_owned();
    let what = format!("{} {name}", gvk.kind);
    let r = ObjectRef::new(gvk, None, name);
    let patch = Patch::Apply { object, field_manager: FIELD_MANAGER.into(), force: true };
    cluster.patch(&r, patch, Subresource::Main).await.map_err(|e| Error::Install { what, error: e.to_string() })?;
    Ok(())
}

/// Applies the webhook configurations and conversion stanzas of
/// `manifest`, pointing at `install`.
///
/// # Errors
///
/// [`Error::Install`] naming the object that could not be applied.
pub async fn install(cluster: &KubeCluster, manifest: &Manifest, install: &Install) -> Result<(), Error> {
    for (mutating, kind) in [(false, "ValidatingWebhookConfiguration"), (true, "MutatingWebhookConfiguration")] {
        let mut webhooks = Vec::new();
        for w in manifest.roles.admission.iter().filter(|w| w.mutating == mutating) {
            webhooks.push(entry(cluster, manifest, w, install).await?);
        }
        if webhooks.is_empty() {
            continue;
        }
        let configuration = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": format!("capstan-{}", manifest.name), "labels": {"app.kubernetes.io/managed-by": "capstan"}},
            "webhooks": webhooks,
        });
        apply(cluster, configuration).await?;
        tracing::info!(component = %manifest.name, kind, "webhook configuration installed");
    }
    for gk in &manifest.roles.conversion {
        let crd = manifest.crds.iter().find(|c| {
            c.pointer("/spec/group").and_then(Value::as_str) == Some(gk.group.as_str())
                && c.pointer("/spec/names/kind").and_then(Value::as_str) == Some(gk.kind.as_str())
        });
        let Some(name) = crd.and_then(|c| crate::object::meta_str(c, "name")) else { continue };
        let conversion = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {"conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": client_config(install, &format!("/convert/{}", manifest.name)),
                },
            }},
        });
        apply(cluster, conversion).await?;
        tracing::info!(component = %manifest.name, crd = %name, "conversion webhook installed");
    }
    Ok(())
}
