//! `--install-webhooks`: the configurations that make the API server call
//! the host, applied with server-side apply when a component loads.
//!
//! Per component `<name>` that declares admission webhooks: a
//! `ValidatingWebhookConfiguration` and a `MutatingWebhookConfiguration`
//! named `capstan-<name>` (each only if it has webhooks of its type), one
//! entry per declared webhook, its `failurePolicy` the operator's choice
//! ([`Install::failure_policies`]) or else the declared one. Per converted CRD: its `spec.conversion`
//! (strategy `Webhook`), applied by its own field manager
//! ([`FIELD_MANAGER`]) so that it does not take over the rest of the CRD.
//!
//! # Ownership
//!
//! Every object installed carries [`OWNER_ANNOTATION`]: the endpoint the
//! API server calls ([`Install::owner`]). A host installs over an object
//! only if it is its own (same endpoint: replicas behind one Service, or
//! the same host restarted), nobody's, or its owner no longer answers at
//! its address (a URL nothing listens on: a `capstan dev` that crashed);
//! otherwise the component is rejected with [`Error::Owned`] and the
//! object stays as it is, unless the operator passes
//! `--take-over-webhooks`. A CRD's conversion is set only by the component
//! the CRD belongs to (its `capstan.dev/installed-by` annotation); one
//! without the annotation only when the operator names it in
//! `--adopt-crd`; the same holds for a webhook on a kind the component
//! may review only because it defines the kind's CRD
//! ([`Manifest::reviews_as_own_kind`]). [`uninstall`] removes only what
//! the caller owns.
//!
//! # Hot swaps
//!
//! A new version of a component is installed over the running one's
//! configurations: a webhook it no longer declares leaves its
//! configuration (server-side apply drops the entry), and a configuration
//! of a type it declares no webhook of is deleted ([`withdraw_dropped`]).
//!
//! # Caveats
//!
//! The caBundle is the one known when the component loads (a rotated CA
//! in `--webhook-cert-dir` is written at the next load). A CRD's
//! conversion is never turned off by the host (see [`uninstall`]).
//!
//! `capstan gen` writes the same objects ([`objects`]) with a Service
//! endpoint and no caBundle, which the host then fills in.

use std::collections::HashMap;

use base64::Engine as _;
use serde_json::{Value, json};

use super::{Endpoint, Error, Install, ServiceRef};
use crate::cluster::kube::KubeCluster;
use crate::cluster::{Cluster, Patch, Subresource};
use crate::manifest::{AdmissionWebhook, Manifest};
use crate::object::{Gvk, ObjectRef};

/// Field manager of the webhook configurations and conversion stanzas.
pub const FIELD_MANAGER: &str = "capstan-webhooks";

/// The annotation naming who installed a webhook configuration or a CRD's
/// conversion: the endpoint the API server calls ([`Install::owner`]).
pub const OWNER_ANNOTATION: &str = "capstan.dev/webhooks-installed-by";

/// How long [`answers`] waits for a connection to an owner's address.
pub const OWNER_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

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
fn entry(
    manifest: &Manifest,
    webhook: &AdmissionWebhook,
    install: &Install,
    plurals: &HashMap<Gvk, String>,
    namespaces: &[String],
) -> Value {
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
        "clientConfig": client_config(install, &install.path(&format!("/admission/{}/{}", manifest.name, webhook.name))),
        "rules": rules,
        "failurePolicy": install.failure_policies.of(manifest, webhook).as_str(),
        "sideEffects": webhook.side_effects(),
        "timeoutSeconds": webhook.timeout.as_secs(),
        "admissionReviewVersions": ["v1"],
        "matchPolicy": "Equivalent",
    });
    entry["namespaceSelector"] = namespace_selector(webhook.namespace_selector.as_ref(), namespaces);
    if let Some(s) = &webhook.object_selector {
        entry["objectSelector"] = s.clone();
    }
    if webhook.mutating {
        entry["reinvocationPolicy"] = json!("Never");
    }
    entry
}

/// Namespaces never reviewed unless the host serves them by name (`-n`):
/// the cluster's own.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// The webhook's namespace selector, narrowed to where the host serves:
/// the namespaces it watches (`-n`), else every namespace but
/// [`SYSTEM_NAMESPACES`]. A review outside them is not sent at all.
pub fn namespace_selector(declared: Option<&Value>, namespaces: &[String]) -> Value {
    let mut selector = declared.cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
    let scope = if namespaces.is_empty() {
        json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": SYSTEM_NAMESPACES})
    } else {
        json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces})
    };
    match selector.get_mut("matchExpressions").and_then(Value::as_array_mut) {
        Some(expressions) => expressions.push(scope),
        None => selector["matchExpressions"] = json!([scope]),
    }
    selector
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
    let (r, what) = ref_of(&object);
    let patch = Patch::Apply { object, field_manager: FIELD_MANAGER.into(), force: true };
    cluster.patch(&r, patch, Subresource::Main).await.map_err(|e| Error::Install { what, error: e.to_string() })?;
    Ok(())
}

/// The objects that make the API server call the webhooks of `manifest`
/// at `install`: its Validating- and MutatingWebhookConfiguration (each
/// only if it has webhooks of that type), then the conversion stanza of
/// each CRD it converts. `plurals` names the resource of each webhook kind;
/// `namespaces` are those the host watches (empty: all), which limit the
/// reviews (see [`namespace_selector`]).
pub fn objects(
    manifest: &Manifest,
    install: &Install,
    plurals: &HashMap<Gvk, String>,
    namespaces: &[String],
) -> Vec<Value> {
    let mut objects = Vec::new();
    for (mutating, kind) in [(false, "ValidatingWebhookConfiguration"), (true, "MutatingWebhookConfiguration")] {
        let webhooks: Vec<Value> = manifest
            .roles
            .admission
            .iter()
            .filter(|w| w.mutating == mutating)
            .map(|w| entry(manifest, w, install, plurals, namespaces))
            .collect();
        if webhooks.is_empty() {
            continue;
        }
        objects.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {
                "name": configuration_name(manifest),
                "labels": {"app.kubernetes.io/managed-by": "capstan"},
                "annotations": {OWNER_ANNOTATION: install.owner()},
            },
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
            "metadata": {"name": name, "annotations": {OWNER_ANNOTATION: install.owner()}},
            "spec": {"conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": client_config(install, &install.path(&format!("/convert/{}", manifest.name))),
                },
            }},
        }));
    }
    objects
}

/// Applies the [`objects`] of `manifest`, pointing at `install`, limited
/// to `namespaces` (empty: all but the system ones); see
/// [the ownership rules](self#ownership).
///
/// # Errors
///
/// [`Error::PolicyUnmatched`] when an operator's failure policy
/// ([`Install::failure_policies`]) names a webhook `manifest` does not
/// declare (nothing is applied), [`Error::Owned`] for an object another
/// host installed and still serves (unless `take_over`),
/// [`Error::ConversionOwned`] for a CRD another component installed,
/// [`Error::ConversionUnowned`] for one no component installed that is
/// not in `adopt` (`--adopt-crd`), [`Error::AdmissionOwned`] and
/// [`Error::AdmissionUnowned`] likewise for a CRD whose kind a webhook
/// reviews only as the component's own,
/// [`Error::Install`] naming the object that could not be read or applied,
/// or the kind whose resource discovery does not know.
pub async fn install(
    cluster: &KubeCluster,
    manifest: &Manifest,
    install: &Install,
    namespaces: &[String],
    take_over: bool,
    adopt: &std::collections::BTreeSet<String>,
) -> Result<(), Error> {
    install.failure_policies.check(manifest)?;
    check_own_kinds(cluster, manifest, adopt).await?;
    let plurals = plurals(cluster, manifest).await?;
    let owner = install.owner();
    for object in objects(manifest, install, &plurals, namespaces) {
        let (r, what) = ref_of(&object);
        let existing = existing(cluster, &r, &what).await?;
        if let Some(crd) = existing.as_ref().filter(|_| r.gvk.kind == "CustomResourceDefinition") {
            let installed_by = crd
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(crate::serve::host::INSTALLED_BY))
                .and_then(Value::as_str);
            match installed_by {
                Some(other) if other != manifest.name => {
                    return Err(Error::ConversionOwned {
                        crd: r.name.clone(),
                        owner: other.to_owned(),
                        component: manifest.name.clone(),
                    });
                }
                Some(_) => {}
                None if adopt.contains(&r.name) => {
                    tracing::warn!(crd = %r.name, component = %manifest.name, "setting the conversion of a CRD no component installed (--adopt-crd)");
                }
                None => return Err(Error::ConversionUnowned { crd: r.name.clone(), component: manifest.name.clone() }),
            }
        }
        if let Some(current) = existing.as_ref().and_then(owner_of).filter(|o| *o != owner) {
            if take_over {
                tracing::warn!(object = %what, owner = %current, "taking over from another host (--take-over-webhooks)");
            } else if answers(&current).await {
                return Err(Error::Owned { what, owner: current });
            } else {
                tracing::info!(object = %what, owner = %current, "its installer no longer answers; taking it over");
            }
        }
        apply(cluster, object).await?;
    }
    tracing::info!(component = %manifest.name, owner = %owner, "webhook configurations installed");
    Ok(())
}

/// Checks that every kind a webhook of `manifest` reviews only as the
/// component's own ([`Manifest::reviews_as_own_kind`]) has its CRD in the
/// cluster marked as the component's (`capstan.dev/installed-by`), or
/// marked as no component's and named in `adopt`: a CRD another
/// component installed is never adopted, as for its conversion.
async fn check_own_kinds(
    cluster: &KubeCluster,
    manifest: &Manifest,
    adopt: &std::collections::BTreeSet<String>,
) -> Result<(), Error> {
    let mut checked = std::collections::BTreeSet::new();
    for webhook in &manifest.roles.admission {
        for kind in webhook.kinds.iter().filter(|k| manifest.reviews_as_own_kind(webhook, k)) {
            let Some(name) = crd_of(manifest, &kind.group, &kind.kind).and_then(|c| crate::object::meta_str(c, "name"))
            else {
                continue;
            };
            if !checked.insert(name.to_owned()) {
                continue;
            }
            let r = ObjectRef::new(Gvk::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition"), None, name);
            let existing = existing(cluster, &r, &format!("CustomResourceDefinition {name}")).await?;
            let installed_by = existing
                .as_ref()
                .and_then(|crd| crd.pointer("/metadata/annotations"))
                .and_then(|a| a.get(crate::serve::host::INSTALLED_BY))
                .and_then(Value::as_str);
            match installed_by {
                Some(owner) if owner == manifest.name => {}
                Some(owner) => {
                    return Err(Error::AdmissionOwned {
                        crd: name.to_owned(),
                        owner: owner.to_owned(),
                        component: manifest.name.clone(),
                    });
                }
                None if adopt.contains(name) => {
                    tracing::warn!(crd = %name, component = %manifest.name, "reviewing the kind of a CRD no component installed (--adopt-crd)");
                }
                None => {
                    return Err(Error::AdmissionUnowned {
                        crd: name.to_owned(),
                        component: manifest.name.clone(),
                        installed: existing.is_some(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Removes the admission webhook configurations of `manifest` that
/// `install` installed: for a component removed from a running host, and
/// for a tool that stops for good (`capstan dev`, `capstan e2e`), so that
/// the API server does not keep calling an address where nothing answers.
/// A configuration another host installed (it points elsewhere) is left
/// alone and says so in the log; one already gone is no error.
///
/// A CRD's conversion stays as it is, whoever installed it: turning it
/// off (`strategy: None`) would make the API server store an object
/// written at another version without the fields only the storage
/// version has, silently. Left pointing at a host that is gone,
/// reads and writes at the other versions fail until a host serves the
/// conversion again, and nothing is lost.
///
/// # Errors
///
/// [`Error::Install`] naming the object that could not be read or deleted.
pub async fn uninstall(cluster: &KubeCluster, manifest: &Manifest, install: &Install) -> Result<(), Error> {
    for kind in CONFIGURATION_KINDS {
        remove(cluster, manifest, kind, install).await?;
    }
    Ok(())
}

/// Removes the configurations `install` installed for `previous` (the
/// version of a component that ran before `manifest`, a new version of
/// the same component) of a type `manifest` no longer declares: a
/// `MutatingWebhookConfiguration` left behind by a version with a
/// defaulting webhook would keep sending reviews for a webhook the new
/// version does not serve, refused under `Fail`. Entries dropped from a
/// configuration that stays go at [`install`] (server-side apply).
///
/// # Errors
///
/// [`Error::Install`] naming the object that could not be read or deleted.
pub async fn withdraw_dropped(
    cluster: &KubeCluster,
    previous: &Manifest,
    manifest: &Manifest,
    install: &Install,
) -> Result<(), Error> {
    if previous.name != manifest.name {
        return Ok(());
    }
    let declares = |m: &Manifest, mutating: bool| m.roles.admission.iter().any(|w| w.mutating == mutating);
    for (mutating, kind) in [(false, CONFIGURATION_KINDS[0]), (true, CONFIGURATION_KINDS[1])] {
        if declares(previous, mutating) && !declares(manifest, mutating) {
            remove(cluster, manifest, kind, install).await?;
        }
    }
    Ok(())
}

/// The kinds of the admission configurations, validating first.
const CONFIGURATION_KINDS: [&str; 2] = ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"];

/// Deletes the configuration of `kind` of `manifest` if `install` owns it.
async fn remove(cluster: &KubeCluster, manifest: &Manifest, kind: &str, install: &Install) -> Result<(), Error> {
    let name = configuration_name(manifest);
    let r = ObjectRef::new(Gvk::new("admissionregistration.k8s.io", "v1", kind), None, name.clone());
    let what = format!("{kind} {name}");
    let Some(existing) = existing(cluster, &r, &what).await? else { return Ok(()) };
    match owner_of(&existing) {
        Some(current) if current == install.owner() => {}
        current => {
            let current = current.unwrap_or_else(|| "unknown".to_owned());
            tracing::info!(object = %what, owner = %current, "installed by another host; left in place");
            return Ok(());
        }
    }
    match cluster.delete(&r, crate::cluster::Propagation::Background).await {
        Ok(()) => tracing::info!(object = %what, "webhook configuration removed"),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(Error::Install { what, error: e.to_string() }),
    }
    Ok(())
}

/// The reference of an object [`objects`] made, and how to name it.
fn ref_of(object: &Value) -> (ObjectRef, String) {
    let gvk = Gvk::of(object).expect("the host builds objects with apiVersion and kind");
    let name = crate::object::meta_str(object, "name").unwrap_or_default().to_owned();
    let what = format!("{} {name}", gvk.kind);
    (ObjectRef::new(gvk, None, name), what)
}

/// The object `r` as it is on the server, `None` if there is none.
async fn existing(cluster: &KubeCluster, r: &ObjectRef, what: &str) -> Result<Option<Value>, Error> {
    match cluster.get(r).await {
        Ok(object) => Ok(Some(object)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(Error::Install { what: what.to_owned(), error: e.to_string() }),
    }
}

/// Who installed `object` (a webhook configuration or a CRD): its
/// [`OWNER_ANNOTATION`], else the endpoint its `clientConfig` names
/// (objects installed before the annotation existed). `None` for a CRD
/// whose conversion is not a webhook: nobody's.
pub fn owner_of(object: &Value) -> Option<String> {
    let crd = object["kind"] == "CustomResourceDefinition";
    if crd && object.pointer("/spec/conversion/strategy").and_then(Value::as_str) != Some("Webhook") {
        return None;
    }
    let annotated =
        object.pointer("/metadata/annotations").and_then(|a| a.get(OWNER_ANNOTATION)).and_then(Value::as_str);
    if let Some(owner) = annotated {
        return Some(owner.to_owned());
    }
    let config = if crd {
        object.pointer("/spec/conversion/webhook/clientConfig")
    } else {
        object.pointer("/webhooks/0/clientConfig")
    }?;
    if let Some(url) = config.get("url").and_then(Value::as_str) {
        let base = ["/admission/", "/convert/", "/clusters/"]
            .iter()
            .filter_map(|route| url.find(route))
            .min()
            .unwrap_or(url.len());
        return Some(Endpoint::Url(url[..base].to_owned()).owner());
    }
    let service = config.get("service")?;
    let text = |key: &str| service.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let port = service.get("port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()).unwrap_or(443);
    Some(Endpoint::Service(ServiceRef { namespace: text("namespace"), name: text("name"), port }).owner())
}

/// Whether the owner `owner` still answers: for a URL, a TCP connection to
/// its host and port succeeds within [`OWNER_PROBE_TIMEOUT`]. A Service
/// cannot be reached from everywhere the host may run, so it counts as
/// answering.
pub async fn answers(owner: &str) -> bool {
    let Some(rest) = owner.strip_prefix("https://").or_else(|| owner.strip_prefix("http://")) else {
        return true;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let address = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        authority.to_owned()
    } else {
        format!("{authority}:443")
    };
    matches!(
        tokio::time::timeout(OWNER_PROBE_TIMEOUT, tokio::net::TcpStream::connect(address.as_str())).await,
        Ok(Ok(_))
    )
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
        let install = Install::new(Endpoint::Url("https://127.0.0.1:9443/".into()), b"PEM".to_vec());
        let plurals = HashMap::from([(Gvk::new("example.com", "v1", "Greeting"), "greetings".to_owned())]);
        let objects = objects(&manifest(), &install, &plurals, &[]);
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
            validating["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                         "values": ["kube-system", "kube-public", "kube-node-lease"]}]})
        );
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

    #[test]
    fn another_clusters_configurations_point_under_its_prefix_and_have_the_same_owner() {
        let install = Install::new(Endpoint::Url("https://127.0.0.1:9443".into()), Vec::new()).in_cluster("west");
        let plurals = HashMap::from([(Gvk::new("example.com", "v1", "Greeting"), "greetings".to_owned())]);
        let west = objects(&manifest(), &install, &plurals, &[]);
        assert_eq!(
            west[0]["webhooks"][0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/clusters/west/admission/greeter/validate.example.com"
        );
        let conversion = &west[2]["spec"]["conversion"]["webhook"]["clientConfig"];
        assert_eq!(conversion["url"], "https://127.0.0.1:9443/clusters/west/convert/greeter");
        let mut old = west[0].clone();
        old["metadata"]["annotations"] = json!({});
        assert_eq!(owner_of(&old).as_deref(), Some("https://127.0.0.1:9443"), "the host, not the route");
        let service = ServiceRef { namespace: "capstan".into(), name: "host".into(), port: 443 };
        let install = Install::new(Endpoint::Service(service), Vec::new()).in_cluster("west");
        let through_service = objects(&manifest(), &install, &plurals, &[]);
        assert_eq!(
            through_service[0]["webhooks"][0]["clientConfig"]["service"]["path"],
            "/clusters/west/admission/greeter/validate.example.com"
        );
        // A Service for the home, a URL the members reach the host at.
        let service = ServiceRef { namespace: "capstan".into(), name: "host".into(), port: 443 };
        let install = Install {
            members_endpoint: Some(Endpoint::Url("https://hub.example.com:9443".into())),
            ..Install::new(Endpoint::Service(service), Vec::new())
        };
        let home = objects(&manifest(), &install.in_cluster("default"), &plurals, &[]);
        assert_eq!(home[0]["webhooks"][0]["clientConfig"]["service"]["name"], "host");
        let member = objects(&manifest(), &install.in_cluster("west"), &plurals, &[]);
        assert_eq!(
            member[0]["webhooks"][0]["clientConfig"]["url"],
            "https://hub.example.com:9443/clusters/west/admission/greeter/validate.example.com"
        );
        assert_eq!(owner_of(&member[0]).as_deref(), Some("https://hub.example.com:9443"));
    }

    #[test]
    fn the_operators_failure_policy_is_installed_over_the_declared_one() {
        use crate::serve::webhook::policy::FailurePolicies;
        let choices = ["greeter/validate.example.com=Ignore", "greeter=Fail"].map(|c| c.parse().expect("valid"));
        let install = Install {
            failure_policies: FailurePolicies::new(choices).expect("no conflict"),
            ..Install::new(Endpoint::Url("https://127.0.0.1:9443".into()), Vec::new())
        };
        let plurals = HashMap::from([(Gvk::new("example.com", "v1", "Greeting"), "greetings".to_owned())]);
        let objects = objects(&manifest(), &install, &plurals, &[]);
        assert_eq!(objects[0]["webhooks"][0]["failurePolicy"], "Ignore", "declared Fail, the webhook named Ignore");
        assert_eq!(objects[1]["webhooks"][0]["failurePolicy"], "Fail", "declared Ignore, the component Fail");
        assert!(objects[2]["spec"]["conversion"].get("failurePolicy").is_none(), "conversion has none");
    }

    #[test]
    fn the_owner_is_the_annotation_else_the_endpoint_the_object_points_at() {
        let install = Install::new(Endpoint::Url("https://127.0.0.1:9443/".into()), Vec::new());
        let plurals = HashMap::from([(Gvk::new("example.com", "v1", "Greeting"), "greetings".to_owned())]);
        let objects = objects(&manifest(), &install, &plurals, &[]);
        for object in &objects {
            assert_eq!(owner_of(object).as_deref(), Some("https://127.0.0.1:9443"), "{object}");
        }
        // Installed before the annotation: the endpoint its clientConfig names.
        let mut old = objects[0].clone();
        old["metadata"]["annotations"] = json!({});
        assert_eq!(owner_of(&old).as_deref(), Some("https://127.0.0.1:9443"));
        old["webhooks"][0]["clientConfig"] =
            json!({"service": {"namespace": "ops", "name": "capstan-webhooks", "path": "/admission/greeter/x"}});
        assert_eq!(owner_of(&old).as_deref(), Some("service:ops/capstan-webhooks:443"));
        // A CRD converted by nobody belongs to nobody, whatever its annotation says.
        let mut crd = objects[2].clone();
        crd["spec"]["conversion"] = json!({"strategy": "None"});
        assert_eq!(owner_of(&crd), None);
    }

    #[tokio::test]
    async fn an_owner_answers_while_something_listens_at_its_address() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("a port");
        let port = listener.local_addr().expect("an address").port();
        assert!(answers(&format!("https://127.0.0.1:{port}")).await);
        drop(listener);
        assert!(!answers(&format!("https://127.0.0.1:{port}")).await);
        assert!(answers("service:ops/capstan-webhooks:443").await, "a Service cannot be probed from here");
    }

    #[test]
    fn reviews_are_limited_to_the_namespaces_the_host_serves() {
        let declared = json!({"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "x", "operator": "Exists"}]});
        let narrowed = namespace_selector(Some(&declared), &["apps".to_owned()]);
        assert_eq!(
            narrowed,
            json!({"matchLabels": {"team": "a"}, "matchExpressions": [
                {"key": "x", "operator": "Exists"},
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["apps"]},
            ]})
        );
        let everywhere = namespace_selector(None, &[]);
        assert_eq!(everywhere["matchExpressions"][0]["operator"], "NotIn");
        assert_eq!(everywhere["matchExpressions"][0]["values"], json!(SYSTEM_NAMESPACES));
    }
}
