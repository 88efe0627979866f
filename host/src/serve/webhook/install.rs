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
//!
//! `capstan gen` writes the same objects ([`objects`]) with a Service
//! endpoint and no caBundle, which the host then fills in.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{Value, json};

use super::{Endpoint, Error, Install};
use crate::cluster::kube::KubeCluster;
use crate::cluster::{Cluster, Patch, Subresource};
use crate::manifest::{AdmissionWebhook, Manifest};
use crate::object::{Gvk, ObjectRef};

/// Field manager of the webhook configurations and conversion stanzas.
pub const FIELD_MANAGER: &str = "capstan-webhooks";

/// The name of the webhook configurations of `manifest`:
/// `capstan-<component>`.
pub(crate) fn configuration_name(manifest: &Manifest) -> String {
    format!("capstan-{}", manifest.name)
}

/// The CRD of the manifest that defines `group` and `kind`.
pub(crate) fn crd_of<'a>(manifest: &'a Manifest, group: &str, kind: &str) -> Option<&'a Value> {
    manifest.crds.iter().find(|c| {
        c.pointer("/spec/group").and_then(Value::as_str) == Some(group)
            && c.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind)
    })
}

/// The resource (plural) of every kind the webhooks of `manifest` name:
/// from the manifest's CRDs, else from discovery.
async fn plurals(cluster: &KubeCluster, manifest: &Manifest) -> Result<HashMap<Gvk, String>, Error> {
    let mut plurals = HashMap::new();
    for kind in manifest.roles.admission.iter().flat_map(|w| &w.kinds) {
        let from_crd = crd_of(manifest, &kind.group, &kind.kind)
            .and_then(|c| c.pointer("/spec/names/plural"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let plural = match from_crd {
            Some(p) => p,
            None => cluster
                .resolve(kind)
                .await
                .map(|r| r.resource.plural)
                .map_err(|e| Error::Install { what: format!("webhook rules for {kind}"), error: e.to_string() })?,
        };
        plurals.insert(kind.clone(), plural);
    }
    Ok(plurals)
}

/// One webhook entry of a configuration.
fn entry(manifest: &Manifest, webhook: &AdmissionWebhook, install: &Install, plurals: &HashMap<Gvk, String>) -> Value {
    let rules: Vec<Value> = webhook
        .kinds
        .iter()
        .map(|kind| {
            json!({
                "apiGroups": [kind.group],
                "apiVersions": [kind.version],
                "resources": [plurals.get(kind).cloned().unwrap_or_default()],
                "operations": webhook.operations.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
                "scope": "*",
            })
        })
        .collect();
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
    entry
}

fn client_config(install: &Install, path: &str) -> Value {
    let mut config = match &install.endpoint {
        Endpoint::Url(url) => json!({"url": format!("{}{path}", url.trim_end_matches('/'))}),
        Endpoint::Service(s) => {
            json!({"service": {"namespace": s.namespace, "name": s.name, "port": s.port, "path": path}})
        }
    };
    if !install.ca_bundle.is_empty() {
        config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(&install.ca_bundle));
    }
    config
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

/// The objects that make the API server call the webhooks of `manifest`
/// at `install`: its Validating- and MutatingWebhookConfiguration (each
/// only if it has webhooks of that type), then the conversion stanza of
/// each CRD it converts. `plurals` names the resource of each webhook kind.
pub fn objects(manifest: &Manifest, install: &Install, plurals: &HashMap<Gvk, String>) -> Vec<Value> {
    let mut objects = Vec::new();
    for (mutating, kind) in [(false, "ValidatingWebhookConfiguration"), (true, "MutatingWebhookConfiguration")] {
        let webhooks: Vec<Value> = manifest
            .roles
            .admission
            .iter()
            .filter(|w| w.mutating == mutating)
            .map(|w| entry(manifest, w, install, plurals))
            .collect();
        if webhooks.is_empty() {
            continue;
        }
        objects.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": configuration_name(manifest), "labels": {"app.kubernetes.io/managed-by": "capstan"}},
            "webhooks": webhooks,
        }));
    }
    for gk in &manifest.roles.conversion {
        let Some(name) = crd_of(manifest, &gk.group, &gk.kind).and_then(|c| crate::object::meta_str(c, "name")) else {
            continue;
        };
        objects.push(json!({
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
        }));
    }
    objects
}

/// Applies the [`objects`] of `manifest`, pointing at `install`.
///
/// # Errors
///
/// [`Error::Install`] naming the object that could not be applied, or the
/// kind whose resource discovery does not know.
pub async fn install(cluster: &KubeCluster, manifest: &Manifest, install: &Install) -> Result<(), Error> {
    let plurals = plurals(cluster, manifest).await?;
    for object in objects(manifest, install, &plurals) {
        apply(cluster, object).await?;
    }
    tracing::info!(component = %manifest.name, "webhook configurations installed");
    Ok(())
}

/// Undoes [`install`] for a host that stops for good (`capstan dev`,
/// `capstan e2e`): deletes the component's webhook configurations and turns
/// the conversion of the CRDs it converts back to `None`, so that the API
/// server does not keep calling an address where nothing answers. A
/// configuration already gone is no error.
///
/// # Errors
///
/// [`Error::Install`] naming the object that could not be deleted or
/// changed.
pub async fn uninstall(cluster: &KubeCluster, manifest: &Manifest) -> Result<(), Error> {
    let name = configuration_name(manifest);
    for kind in ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"] {
        let r = ObjectRef::new(Gvk::new("admissionregistration.k8s.io", "v1", kind), None, name.clone());
        match cluster.delete(&r, crate::cluster::Propagation::Background).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(Error::Install { what: format!("{kind} {name}"), error: e.to_string() }),
        }
    }
    for gk in &manifest.roles.conversion {
        let Some(crd) = crd_of(manifest, &gk.group, &gk.kind).and_then(|c| crate::object::meta_str(c, "name")) else {
            continue;
        };
        apply(
            cluster,
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": crd},
                "spec": {"conversion": {"strategy": "None"}},
            }),
        )
        .await?;
    }
    tracing::info!(component = %manifest.name, "webhook configurations removed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::manifest::{GroupKind, Operation, Roles};

    fn manifest() -> Manifest {
        let greeting = Gvk::new("example.com", "v1", "Greeting");
        let webhook = |name: &str, mutating: bool| AdmissionWebhook {
            name: name.into(),
            mutating,
            kinds: vec![greeting.clone()],
            operations: vec![Operation::Create, Operation::Update],
            ignore_failures: mutating,
            timeout: Duration::from_secs(5),
            side_effects_on_dry_run: false,
            namespace_selector: None,
            object_selector: Some(json!({"matchLabels": {"team": "a"}})),
        };
        Manifest {
            crds: vec![json!({
                "metadata": {"name": "greetings.example.com"},
                "spec": {"group": "example.com", "names": {"kind": "Greeting", "plural": "greetings"}},
            })],
            roles: Roles {
                reconcile: false,
                admission: vec![webhook("validate.example.com", false), webhook("default.example.com", true)],
                conversion: vec![GroupKind { group: "example.com".into(), kind: "Greeting".into() }],
                scheduler: None,
            },
            ..Manifest::bare("greeter", greeting.clone())
        }
    }

    #[test]
    fn each_webhook_points_at_its_route_with_the_ca_bundle() {
        let install = Install { endpoint: Endpoint::Url("https://127.0.0.1:9443/".into()), ca_bundle: b"PEM".to_vec() };
        let plurals = HashMap::from([(Gvk::new("example.com", "v1", "Greeting"), "greetings".to_owned())]);
        let objects = objects(&manifest(), &install, &plurals);
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "CustomResourceDefinition"]
        );
        let validating = &objects[0]["webhooks"][0];
        assert_eq!(validating["clientConfig"]["url"], "https://127.0.0.1:9443/admission/greeter/validate.example.com");
        assert_eq!(validating["clientConfig"]["caBundle"], "UEVN");
        assert_eq!(validating["failurePolicy"], "Fail");
        assert_eq!(validating["timeoutSeconds"], 5);
        assert_eq!(validating["sideEffects"], "None");
        assert_eq!(validating["objectSelector"], json!({"matchLabels": {"team": "a"}}));
        assert_eq!(
            validating["rules"],
            json!([{"apiGroups": ["example.com"], "apiVersions": ["v1"], "resources": ["greetings"],
                    "operations": ["CREATE", "UPDATE"], "scope": "*"}])
        );
        assert_eq!(objects[1]["webhooks"][0]["failurePolicy"], "Ignore");
        let conversion = &objects[2]["spec"]["conversion"];
        assert_eq!(conversion["strategy"], "Webhook");
        assert_eq!(conversion["webhook"]["clientConfig"]["url"], "https://127.0.0.1:9443/convert/greeter");
    }
}
