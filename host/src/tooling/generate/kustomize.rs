//! kustomize folders: a `kustomization.yaml` beside the generated files.

use serde_json::{Value, json};

use super::File;

/// The file kustomize reads.
pub(crate) const KUSTOMIZATION: &str = "kustomization.yaml";

fn kustomization(resources: Vec<String>, patches: Vec<String>) -> Value {
    let mut k = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    });
    if !patches.is_empty() {
        k["patches"] = patches.into_iter().map(|p| json!({"path": p})).collect();
    }
    k
}

fn path_of(file: &File) -> String {
    file.path.to_string_lossy().into_owned()
}

/// A self-contained base: `files` and a kustomization listing them.
pub(crate) fn base(mut files: Vec<File>) -> Vec<File> {
    let resources = files.iter().map(path_of).collect();
    files.push(File::new(KUSTOMIZATION, vec![kustomization(resources, Vec::new())]));
    files
}

/// An overlay on `base`: adds `resources` and applies `patch`.
pub(crate) fn overlay(base: &str, resources: Vec<File>, patch: Option<File>) -> Vec<File> {
    let listed = std::iter::once(base.to_owned()).chain(resources.iter().map(path_of)).collect();
    let patches = patch.iter().map(path_of).collect();
    let k = kustomization(listed, patches);
    let mut files = resources;
    files.extend(patch);
    files.push(File::new(KUSTOMIZATION, vec![k]));
    files
}
