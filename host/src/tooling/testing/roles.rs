//! The mock host's admission and conversion: the declared webhooks run on
//! the writes a test makes, in the API server's order (every matching
//! mutating webhook, then every matching validating one on the result),
//! and conversion requests go to the component that converts the kind.
//!
//! Webhooks match as the installed configurations do (`matchPolicy:
//! Equivalent`): a webhook declared for one version of a kind reviews a
//! write at another version too, with the objects converted to its
//! version (through the component that converts the kind), and a mutation
//! converted back. [`MockHost::convert_to`] converts one object as the API
//! server would, for the scenario runner's storage at the storage version.

use serde_json::Value;

use super::{Error, MockHost};
use crate::manifest::{AdmissionWebhook, Operation};
use crate::object::{self, Gvk};
use crate::runtime::bindings::capstan::operator::types as wit;

/// What the admission webhooks decided about one write.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// Every webhook allowed it.
    Allowed {
        /// The object to store, as the mutating webhooks left it (`None`
        /// for a delete).
        object: Option<Value>,
        /// Every warning, in order.
        warnings: Vec<String>,
    },
    /// A webhook denied it, or failed under `failurePolicy: Fail`.
    Denied {
        /// The webhook.
        webhook: String,
        /// The message, worded as the API server words it.
        message: String,
        /// The HTTP status code.
        code: u16,
    },
}

impl Admission {
    /// The denial's message, if denied.
    pub fn denial(&self) -> Option<&str> {
        match self {
            Admission::Denied { message, .. } => Some(message),
            Admission::Allowed { .. } => None,
        }
    }
}

/// Whether a `metav1.LabelSelector` (as JSON) selects these labels. An
/// absent selector selects everything; a malformed one nothing.
pub fn label_selector_matches(selector: Option<&Value>, labels: Option<&Value>) -> bool {
    let Some(selector) = selector else { return true };
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    if !match_labels.into_iter().flatten().all(|(k, v)| label(k) == v.as_str()) {
        return false;
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    expressions.into_iter().flatten().all(|e| {
        let Some(key) = e.get("key").and_then(Value::as_str) else { return false };
        let values: Vec<&str> =
            e.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        match e.get("operator").and_then(Value::as_str) {
            Some("In") => label(key).is_some_and(|v| values.contains(&v)),
            Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
            Some("Exists") => label(key).is_some(),
            Some("DoesNotExist") => label(key).is_none(),
            _ => false,
        }
    })
}

/// The version of the kind of `gvk` at which `webhook` reviews a write at
/// `gvk`: that version if declared, else (`matchPolicy: Equivalent`) the
/// first declared version of the same group and kind; `None` when the
/// webhook does not review the kind, the operation or the object.
fn applies(webhook: &AdmissionWebhook, gvk: &Gvk, operation: Operation, object: &Value) -> Option<Gvk> {
    let same_kind = |k: &&Gvk| k.group == gvk.group && k.kind == gvk.kind;
    let at = webhook.kinds.iter().find(|k| *k == gvk).or_else(|| webhook.kinds.iter().find(same_kind))?;
    (webhook.operations.contains(&operation)
        && label_selector_matches(webhook.object_selector.as_ref(), object.pointer("/metadata/labels")))
    .then(|| at.clone())
}

/// `object` with its `apiVersion` replaced: what the API server does for a
/// kind no webhook converts (strategy `None`).
fn relabelled(mut object: Value, api_version: &str) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".to_owned(), Value::from(api_version));
    }
    object
}

impl MockHost {
    /// Runs the admission webhooks the loaded components declare on one
    /// write, as the API server would: `object` is what would be stored
    /// (`None` for a delete), `old` what is stored (`None` for a create).
    /// The mock cluster has no namespace labels, so namespace selectors
    /// select every namespace.
    ///
    /// # Errors
    ///
    /// When neither object names a kind.
    pub async fn admit(
        &self,
        operation: Operation,
        object: Option<Value>,
        old: Option<Value>,
    ) -> Result<Admission, Error> {
        let Some(subject) = object.as_ref().or(old.as_ref()).cloned() else {
            return Ok(Admission::Allowed { object: None, warnings: Vec::new() });
        };
        let Some(gvk) = Gvk::of(&subject) else {
            return Err(Error::Seed(crate::cluster::Error::BadRequest("object lacks apiVersion or kind".into())));
        };
        let mut object = object;
        let mut warnings = Vec::new();
        for mutating in [true, false] {
            // Each component once (its instance in `default`), however many
            // clusters it serves.
            for controller in self.controllers.iter().filter(|c| c.cluster == 0) {
                for webhook in controller.manifest.roles.admission.iter().filter(|w| w.mutating == mutating) {
                    let Some(at) = applies(webhook, &gvk, operation, object.as_ref().unwrap_or(&subject)) else {
                        continue;
                    };
                    // Objects at the webhook's version, as the API server
                    // sends them under `matchPolicy: Equivalent`.
                    let (reviewed, reviewed_old) = match (
                        self.convert_option(object.clone(), &at).await,
                        self.convert_option(old.clone(), &at).await,
                    ) {
                        (Ok(o), Ok(old)) => (o, old),
                        (Err(e), _) | (_, Err(e)) => {
                            return Ok(Admission::Denied {
                                webhook: webhook.name.clone(),
                                message: format!(
                                    "conversion to {} for webhook {:?} failed: {e}",
                                    at.api_version(),
                                    webhook.name
                                ),
                                code: 500,
                            });
                        }
                    };
                    let request = wit::AdmissionRequest {
                        webhook: webhook.name.clone(),
                        webhook_type: if mutating { wit::WebhookType::Mutating } else { wit::WebhookType::Validating },
                        uid: format!("mock-{}", self.now.as_nanos()),
                        kind: wit::GroupVersionKind {
                            group: at.group.clone(),
                            version: at.version.clone(),
                            kind: at.kind.clone(),
                        },
                        request_kind: wit::GroupVersionKind {
                            group: gvk.group.clone(),
                            version: gvk.version.clone(),
                            kind: gvk.kind.clone(),
                        },
                        sub_resource: None,
                        name: object::meta_str(&subject, "name").unwrap_or_default().to_owned(),
                        namespace: object::meta_str(&subject, "namespace").map(str::to_owned),
                        operation: operation.into(),
                        object: reviewed.as_ref().map(|o| serde_json::to_vec(o).expect("JSON serializes")),
                        old_object: reviewed_old.as_ref().map(|o| serde_json::to_vec(o).expect("JSON serializes")),
                        user_info: wit::UserInfo {
                            username: "capstan-test".into(),
                            uid: String::new(),
                            groups: vec!["system:authenticated".into()],
                        },
                        dry_run: false,
                    };
                    let deadline = webhook.deadline(self.loader.runtime().limits().deadline);
                    let invocation = controller.reconciler.review(request, deadline).await;
                    let response = match invocation.result {
                        Ok(response) => response,
                        Err(_) if webhook.ignore_failures => continue,
                        Err(e) => {
                            // Worded as kube-apiserver words it.
                            return Ok(Admission::Denied {
                                webhook: webhook.name.clone(),
                                message: format!(
                                    "failed calling webhook {:?}: failed to call webhook: {e}",
                                    webhook.name
                                ),
                                code: 500,
                            });
                        }
                    };
                    warnings.extend(response.warnings);
                    if !response.allowed {
                        let reason = response.message.unwrap_or_default();
                        return Ok(Admission::Denied {
                            message: format!("admission webhook {:?} denied the request: {reason}", webhook.name),
                            webhook: webhook.name.clone(),
                            code: response.code.unwrap_or(403),
                        });
                    }
                    if mutating && let Some(bytes) = response.patched {
                        match serde_json::from_slice::<Value>(&bytes) {
                            // Back at the version of the write.
                            Ok(patched) => match self.convert_to(patched, &gvk).await {
                                Ok(patched) => object = Some(patched),
                                Err(e) => {
                                    return Ok(Admission::Denied {
                                        webhook: webhook.name.clone(),
                                        message: format!(
                                            "conversion of webhook {:?}'s object to {} failed: {e}",
                                            webhook.name,
                                            gvk.api_version()
                                        ),
                                        code: 500,
                                    });
                                }
                            },
                            Err(e) => {
                                return Ok(Admission::Denied {
                                    webhook: webhook.name.clone(),
                                    message: format!(
                                        "webhook {:?} returned an object that is not JSON: {e}",
                                        webhook.name
                                    ),
                                    code: 500,
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(Admission::Allowed { object, warnings })
    }

    /// Whether a loaded component converts `group`/`kind`.
    pub fn converts(&self, group: &str, kind: &str) -> bool {
        self.controllers
            .iter()
            .any(|c| c.manifest.roles.conversion.iter().any(|gk| gk.group == group && gk.kind == kind))
    }

    /// The version a loaded component's CRD stores `group`/`kind` at
    /// (`storage: true`), if a loaded component defines the kind.
    pub fn storage_version(&self, group: &str, kind: &str) -> Option<String> {
        self.controllers
            .iter()
            .flat_map(|c| &c.manifest.crds)
            .filter(|crd| {
                crd.pointer("/spec/group").and_then(Value::as_str) == Some(group)
                    && crd.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind)
            })
            .flat_map(|crd| crd.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten())
            .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            .and_then(|v| v.get("name").and_then(Value::as_str))
            .map(str::to_owned)
    }

    /// Converts one object to the version of `to`, as the API server
    /// would: unchanged at its own version, through the component that
    /// converts its kind, else by its `apiVersion` alone (a kind without a
    /// conversion webhook).
    ///
    /// # Errors
    ///
    /// The guest's failure, or an object that names no kind.
    pub async fn convert_to(&self, object: Value, to: &Gvk) -> Result<Value, String> {
        let from = Gvk::of(&object).ok_or("the object lacks apiVersion or kind")?;
        if from.version == to.version {
            return Ok(object);
        }
        if !self.converts(&to.group, &to.kind) {
            return Ok(relabelled(object, &to.api_version()));
        }
        let mut converted = self
            .convert(&to.api_version(), vec![object])
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("the conversion webhook failed: {e}"))?;
        match (converted.pop(), converted.is_empty()) {
            (Some(object), true) => Ok(object),
            _ => Err("the conversion webhook returned other than one object".to_owned()),
        }
    }

    async fn convert_option(&self, object: Option<Value>, to: &Gvk) -> Result<Option<Value>, String> {
        match object {
            Some(object) => self.convert_to(object, to).await.map(Some),
            None => Ok(None),
        }
    }

    /// Converts `objects` to `desired_api_version` through the component
    /// that declares conversion for their kind, as the API server asks a
    /// conversion webhook to.
    ///
    /// # Errors
    ///
    /// `Ok(Err(message))` when the guest fails the conversion (or traps);
    /// `Err` when no loaded component converts the kind.
    pub async fn convert(
        &self,
        desired_api_version: &str,
        objects: Vec<Value>,
    ) -> Result<Result<Vec<Value>, String>, Error> {
        let kind = objects.first().and_then(|o| o.get("kind")).and_then(Value::as_str).unwrap_or_default();
        let group = desired_api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let Some(controller) = self
            .controllers
            .iter()
            .find(|c| c.manifest.roles.conversion.iter().any(|gk| gk.group == group && gk.kind == kind))
        else {
            return Err(Error::Seed(crate::cluster::Error::BadRequest(format!(
                "no loaded component converts {group}/{kind}"
            ))));
        };
        let request = wit::ConversionRequest {
            desired_api_version: desired_api_version.to_owned(),
            objects: objects.iter().map(|o| serde_json::to_vec(o).expect("JSON serializes")).collect(),
        };
        let deadline = self.loader.runtime().limits().deadline;
        let invocation = controller.reconciler.convert(request, deadline).await;
        Ok(match invocation.result {
            Err(e) => Err(e.to_string()),
            Ok(Err(message)) => Err(message),
            Ok(Ok(converted)) => converted
                .iter()
                .enumerate()
                .map(|(i, b)| serde_json::from_slice(b).map_err(|e| format!("convertedObjects[{i}] is not JSON: {e}")))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::label_selector_matches;

    #[test]
    fn label_selectors_match_like_the_api_server() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(label_selector_matches(None, None));
        assert!(label_selector_matches(Some(&json!({"matchLabels": {"app": "web"}})), Some(&labels)));
        assert!(!label_selector_matches(Some(&json!({"matchLabels": {"app": "db"}})), Some(&labels)));
        let expr = |op: &str, values: &[&str]| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": values}]});
        assert!(label_selector_matches(Some(&expr("In", &["front", "back"])), Some(&labels)));
        assert!(!label_selector_matches(Some(&expr("NotIn", &["front"])), Some(&labels)));
        assert!(label_selector_matches(Some(&expr("Exists", &[])), Some(&labels)));
        assert!(!label_selector_matches(Some(&expr("DoesNotExist", &[])), Some(&labels)));
        assert!(!label_selector_matches(Some(&expr("Bogus", &[])), Some(&labels)));
        assert!(!label_selector_matches(Some(&json!({"matchLabels": {"app": "web"}})), None));
    }
}
