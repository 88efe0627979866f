//! The webhooks of components that serve admission or conversion: the
//! Service in front of the host, the Validating- and
//! MutatingWebhookConfigurations, the conversion stanza of each converted
//! CRD, and the RBAC the host needs to keep their `caBundle` current.
//!
//! The objects are the ones `capstan run --install-webhooks` applies
//! ([`crate::serve::webhook::install::objects`]), pointing at the Service instead
//! of a URL and without a `caBundle`: the host, run with
//! `--webhook-service`, makes a CA and serving certificate for the
//! Service's name at start and writes their `caBundle` into them.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::{Component, Error, Options};
use crate::manifest::{Manifest, Verb};
use crate::policy::{Resources, Rules};
use crate::serve::webhook::{Endpoint, Install, ServiceRef};

/// The container port the host serves webhooks on.
pub const WEBHOOK_PORT: u16 = 9443;

/// Whether `manifest` declares admission webhooks or converts a kind.
pub(crate) fn serves(manifest: &Manifest) -> bool {
    !manifest.roles.admission.is_empty() || !manifest.roles.conversion.is_empty()
}

/// The Service in front of the host's webhooks: `<name>-webhooks`, port 443.
pub(crate) fn service_ref(options: &Options) -> ServiceRef {
    ServiceRef { namespace: options.namespace.clone(), name: format!("{}-webhooks", options.name), port: 443 }
}

/// What the host's command line gains to serve them, and to install them
/// with the operator's failure policies.
pub(crate) fn args(options: &Options) -> Vec<String> {
    let s = service_ref(options);
    vec![
        "--webhook-listen".to_owned(),
        format!("0.0.0.0:{WEBHOOK_PORT}"),
        "--webhook-service".to_owned(),
        format!("{}/{}:{}", s.namespace, s.name, s.port),
        "--install-webhooks".to_owned(),
    ]
    .into_iter()
    .chain(options.failure_policies.args())
    .collect()
}

/// The Service: port 443 to the host's `webhooks` container port.
pub(crate) fn service(options: &Options) -> Value {
    let s = service_ref(options);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": s.name, "namespace": s.namespace, "labels": options.labels(None)},
        "spec": {
            "selector": {"app.kubernetes.io/name": options.name},
            "ports": [{"name": "webhooks", "port": s.port, "targetPort": "webhooks", "protocol": "TCP"}],
        },
    })
}

/// The webhook configurations of `component`, and the conversion stanza of
/// each CRD it converts, by CRD name.
pub(crate) fn objects(
    component: &Component,
    resources: &Resources,
    options: &Options,
) -> Result<(Vec<Value>, BTreeMap<String, Value>), Error> {
    let manifest = &component.manifest;
    let mut plurals = HashMap::new();
    for kind in manifest.roles.admission.iter().flat_map(|w| &w.kinds) {
        plurals.insert(kind.clone(), resources.plural(&kind.group, &kind.kind)?);
    }
    let install = Install {
        failure_policies: options.failure_policies.clone(),
        ..Install::new(Endpoint::Service(service_ref(options)), Vec::new())
    };
    let mut configurations = Vec::new();
    let mut conversions = BTreeMap::new();
    for mut object in
        crate::serve::webhook::install::objects(manifest, &install, &plurals, options.watched_namespaces())
    {
        if object["kind"] == "CustomResourceDefinition" {
            let name = crate::object::meta_str(&object, "name").unwrap_or_default().to_owned();
            conversions.insert(name, object["spec"]["conversion"].take());
        } else {
            object["metadata"]["labels"] = json!(options.labels(Some(&manifest.name)));
            configurations.push(object);
        }
    }
    Ok((configurations, conversions))
}

/// What the host needs to keep the `caBundle` of `manifest`'s webhooks
/// current: get and patch of its own configurations (and delete, to
/// withdraw them) and converted CRDs, by name;
/// `create` of configurations too when `create` (a host outside the
/// cluster, with no generated configurations to patch). `create` cannot
/// be limited to names.
pub(crate) fn rules(manifest: &Manifest, create: bool) -> Rules {
    let mut rules = Rules::default();
    let name = vec![crate::serve::webhook::install::configuration_name(manifest)];
    for (mutating, resource) in [(false, "validatingwebhookconfigurations"), (true, "mutatingwebhookconfigurations")] {
        if manifest.roles.admission.iter().any(|w| w.mutating == mutating) {
            // get: whose it is before installing; delete: withdrawn when
            // the component is removed from the host.
            rules.add_named("admissionregistration.k8s.io", resource, &name, [Verb::Get, Verb::Patch, Verb::Delete]);
            if create {
                rules.add("admissionregistration.k8s.io", resource, [Verb::Create]);
            }
        }
    }
    let converted: Vec<String> = manifest
        .roles
        .conversion
        .iter()
        .filter_map(|gk| crate::serve::webhook::install::crd_of(manifest, &gk.group, &gk.kind))
        .filter_map(|crd| crate::object::meta_str(crd, "name").map(str::to_owned))
        .collect();
    if !converted.is_empty() {
        rules.add_named("apiextensions.k8s.io", "customresourcedefinitions", &converted, [Verb::Get, Verb::Patch]);
    }
    rules
}
