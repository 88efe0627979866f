//! What the project's control plane serves, as captured by
//! `tests/control-plane/capture-api.sh`: every group, version and kind
//! from discovery, and the OpenAPI v3 schemas of the built-in kinds.
//!
//! The capture is embedded gzipped (`api.json.gz` beside this file) and
//! decoded once, on first use.

use std::io::Read as _;
use std::sync::OnceLock;

use flate2::read::GzDecoder;
use serde::Deserialize;
use serde_json::{Map, Value};

/// The capture, gzipped JSON.
const CAPTURED: &[u8] = include_bytes!("api.json.gz");

/// Everything captured.
#[derive(Debug, Deserialize)]
pub(super) struct Catalog {
    /// The Kubernetes version captured, e.g. `v1.37.2`.
    pub(super) kubernetes: String,
    /// Every kind of every served group version.
    pub(super) kinds: Vec<Kind>,
    /// Schema definitions by name (`io.k8s.api.core.v1.Pod`); `$ref`s in
    /// them name other definitions.
    pub(super) schemas: Map<String, Value>,
}

/// One kind of one group version, as discovery describes it.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Kind {
    /// API group; empty for the core group.
    pub(super) group: String,
    /// Version.
    pub(super) version: String,
    /// Kind.
    pub(super) kind: String,
    /// Plural resource name.
    pub(super) plural: String,
    /// True for namespaced kinds.
    pub(super) namespaced: bool,
    /// Verbs the resource supports (`create`, `get`, `list`, ...).
    pub(super) verbs: Vec<String>,
    /// Subresources (`status`, `scale`, `log`, ...).
    pub(super) subresources: Vec<String>,
    /// The name of the kind's schema definition, if it has one.
    pub(super) schema: Option<String>,
}

/// Errors reading the embedded capture.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    /// The gzip stream is broken.
    #[error("cannot decompress the captured API: {0}")]
    Decompress(#[source] std::io::Error),
    /// The JSON does not have the captured shape.
    #[error("cannot parse the captured API: {0}")]
    Parse(#[source] serde_json::Error),
}

/// Decodes a capture.
fn decode(gzipped: &[u8]) -> Result<Catalog, Error> {
    let mut text = Vec::new();
    GzDecoder::new(gzipped).read_to_end(&mut text).map_err(Error::Decompress)?;
    serde_json::from_slice(&text).map_err(Error::Parse)
}

/// The embedded capture.
pub(super) fn get() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| decode(CAPTURED).expect("the embedded capture is valid: the tests in catalog.rs decode it"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_capture_decodes_and_holds_common_kinds() {
        let catalog = decode(CAPTURED).expect("valid capture");
        assert!(catalog.kubernetes.starts_with('v'));
        let find = |group: &str, kind: &str| catalog.kinds.iter().find(|k| k.group == group && k.kind == kind);
        for (group, kind) in [
            ("", "ResourceQuota"),
            ("", "LimitRange"),
            ("", "Endpoints"),
            ("autoscaling", "HorizontalPodAutoscaler"),
            ("storage.k8s.io", "StorageClass"),
            ("scheduling.k8s.io", "PriorityClass"),
        ] {
            let found = find(group, kind).unwrap_or_else(|| panic!("{group}/{kind} is captured"));
            let schema = found.schema.as_deref().unwrap_or_else(|| panic!("{kind} has a schema"));
            assert!(catalog.schemas.contains_key(schema), "{schema} is in the table");
        }
        let deployment = find("apps", "Deployment").expect("deployments are captured");
        assert!(deployment.namespaced);
        assert!(deployment.subresources.iter().any(|s| s == "scale"));
        assert!(!find("storage.k8s.io", "StorageClass").expect("captured").namespaced);
    }

    #[test]
    fn every_reference_in_the_capture_resolves() {
        let catalog = decode(CAPTURED).expect("valid capture");
        let mut stack: Vec<&Value> = catalog.schemas.values().collect();
        while let Some(node) = stack.pop() {
            match node {
                Value::Object(map) => {
                    if let Some(Value::String(name)) = map.get("$ref") {
                        assert!(catalog.schemas.contains_key(name), "{name} is defined");
                    }
                    stack.extend(map.values());
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
    }

    #[test]
    fn a_broken_capture_is_an_error_that_says_so() {
        let err = decode(b"not gzip").expect_err("not gzip");
        assert!(matches!(err, Error::Decompress(_)));
        assert!(err.to_string().starts_with("cannot decompress the captured API"));
    }
}
