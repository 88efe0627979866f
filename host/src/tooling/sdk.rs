//! The guest SDKs and the WIT contract, carried inside the binary.
//!
//! `capstan-guest` is not on crates.io, PyPI or npm, so a project made
//! outside a Capstan checkout needs the SDK from somewhere: the binary
//! writes it out (`capstan sdk --out DIR`, and `capstan new` into the new
//! project's `capstan-sdk/`). The tree it writes has a checkout's layout,
//! so every path that works against a checkout works against it:
//!
//! ```text
//! DIR/wit/*.wit                      the contract this binary runs (capstan:operator)
//! DIR/wit/deps/*/*.wit               the WASI packages it uses (wasi:http and its dependencies)
//! DIR/guest-sdk/                     the Rust crate capstan-guest (a standalone Cargo.toml)
//! DIR/guest-sdk/python/              the Python package capstan-guest (pyproject.toml)
//! DIR/guest-sdk/js/                  the npm package capstan-guest (package.json)
//! DIR/Cargo.lock                     the versions the checkout builds with
//! ```
//!
//! The files are those of the checkout the binary was built from; a unit
//! test fails when a file of those folders is missing from the list.

use std::path::{Path, PathBuf};

/// A file of the SDK tree: its path below the tree's root and its text.
#[derive(Clone, Copy, Debug)]
pub struct File {
    /// The path below the root, with `/` separators.
    pub path: &'static str,
    /// The contents.
    pub text: &'static str,
}

macro_rules! files {
    ($($path:literal),* $(,)?) => {
        &[$(File { path: $path, text: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../", $path)) }),*]
    };
}

/// The files taken from the checkout as they are.
const CHECKOUT_FILES: &[File] = files![
    "wit/controller.wit",
    "wit/events.wit",
    "wit/kube.wit",
    "wit/log.wit",
    "wit/types.wit",
    "wit/deps/cli/cli.wit",
    "wit/deps/clocks/clocks.wit",
    "wit/deps/filesystem/filesystem.wit",
    "wit/deps/http/http.wit",
    "wit/deps/io/io.wit",
    "wit/deps/random/random.wit",
    "wit/deps/sockets/sockets.wit",
    "guest-sdk/src/admission.rs",
    "guest-sdk/src/api.rs",
    "guest-sdk/src/conditions.rs",
    "guest-sdk/src/context.rs",
    "guest-sdk/src/conversion.rs",
    "guest-sdk/src/error.rs",
    "guest-sdk/src/export.rs",
    "guest-sdk/src/http.rs",
    "guest-sdk/src/imports.rs",
    "guest-sdk/src/lib.rs",
    "guest-sdk/src/log.rs",
    "guest-sdk/src/manifest.rs",
    "guest-sdk/src/outcome.rs",
    "guest-sdk/src/scheduler.rs",
    "guest-sdk/src/testing.rs",
    "guest-sdk/python/README.md",
    "guest-sdk/python/pyproject.toml",
    "guest-sdk/python/capstan_guest/__init__.py",
    "guest-sdk/python/capstan_guest/_json.py",
    "guest-sdk/python/capstan_guest/_plain.py",
    "guest-sdk/python/capstan_guest/admission.py",
    "guest-sdk/python/capstan_guest/api.py",
    "guest-sdk/python/capstan_guest/component.py",
    "guest-sdk/python/capstan_guest/conditions.py",
    "guest-sdk/python/capstan_guest/context.py",
    "guest-sdk/python/capstan_guest/controller.py",
    "guest-sdk/python/capstan_guest/conversion.py",
    "guest-sdk/python/capstan_guest/errors.py",
    "guest-sdk/python/capstan_guest/export.py",
    "guest-sdk/python/capstan_guest/http.py",
    "guest-sdk/python/capstan_guest/kinds.py",
    "guest-sdk/python/capstan_guest/log.py",
    "guest-sdk/python/capstan_guest/manifest.py",
    "guest-sdk/python/capstan_guest/outcome.py",
    "guest-sdk/python/capstan_guest/py.typed",
    "guest-sdk/python/capstan_guest/scheduler.py",
    "guest-sdk/python/capstan_guest/testing.py",
    "guest-sdk/python/capstan_guest/tracebacks.py",
    "guest-sdk/js/README.md",
    "guest-sdk/js/package.json",
    "guest-sdk/js/index.d.ts",
    "guest-sdk/js/src/admission.js",
    "guest-sdk/js/src/api.js",
    "guest-sdk/js/src/component.js",
    "guest-sdk/js/src/conditions.js",
    "guest-sdk/js/src/context.js",
    "guest-sdk/js/src/controller.js",
    "guest-sdk/js/src/conversion.js",
    "guest-sdk/js/src/errors.js",
    "guest-sdk/js/src/export.js",
    "guest-sdk/js/src/http.js",
    "guest-sdk/js/src/index.js",
    "guest-sdk/js/src/json.js",
    "guest-sdk/js/src/kinds.js",
    "guest-sdk/js/src/log.js",
    "guest-sdk/js/src/manifest.js",
    "guest-sdk/js/src/outcome.js",
    "guest-sdk/js/src/scheduler.js",
    "guest-sdk/js/testing/hooks.js",
    "guest-sdk/js/testing/host.js",
    "guest-sdk/js/testing/imports/events.js",
    "guest-sdk/js/testing/imports/kube.js",
    "guest-sdk/js/testing/imports/log.js",
    "guest-sdk/js/testing/imports/wasi-http.js",
    "guest-sdk/js/testing/index.js",
    "guest-sdk/js/testing/register.js",
    "Cargo.lock",
];

/// `guest-sdk/Cargo.toml` outside the workspace: the workspace's versions
/// written out (a unit test checks they agree with the workspace's).
const RUST_MANIFEST: &str = concat!(
    r#"[package]
name = "capstan-guest"
description = "Write Kubernetes controllers for the Capstan host as WebAssembly components"
version = ""#,
    env!("CARGO_PKG_VERSION"),
    r#""
edition = "2024"
rust-version = "1.95"
license = "Apache-2.0"

[dependencies]
wit-bindgen = { version = "0.61.1", default-features = false, features = ["macros", "realloc"] }
serde = { version = "1", features = ["derive"] }
serde_json = "1"
k8s-openapi = { version = "0.29.0", default-features = false, features = ["std", "v1_37"] }
kube = { version = "5.0.0", default-features = false, features = ["derive"] }
"#
);

/// Every file of the SDK tree.
pub fn files() -> impl Iterator<Item = File> {
    CHECKOUT_FILES.iter().copied().chain([File { path: "guest-sdk/Cargo.toml", text: RUST_MANIFEST }])
}

/// Writes the SDK tree into `dir` (created if missing; files already there
/// are overwritten). Returns the files written.
///
/// # Errors
///
/// When a folder or file cannot be written.
pub fn write(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for file in files() {
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, file.text)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkout() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// Every file below `dir` (relative to the checkout), skipping what a
    /// build or a test run leaves behind.
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(checkout().join(dir)).expect("a folder of the checkout") {
            let entry = entry.expect("an entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = dir.join(&name);
            if entry.file_type().expect("a type").is_dir() {
                if !["__pycache__", "node_modules", "tests", "test", "build"].contains(&name.as_str())
                    && !name.ends_with(".egg-info")
                {
                    walk(&rel, out);
                }
            } else if !name.ends_with(".pyc") && name != "package-lock.json" {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    #[test]
    fn every_file_of_the_sdks_and_the_contract_is_carried() {
        let mut found = Vec::new();
        for dir in ["guest-sdk/src", "guest-sdk/python", "guest-sdk/js"] {
            walk(Path::new(dir), &mut found);
        }
        for entry in std::fs::read_dir(checkout().join("wit")).expect("wit") {
            let entry = entry.expect("an entry");
            if entry.file_type().expect("a type").is_file() {
                found.push(format!("wit/{}", entry.file_name().to_string_lossy()));
            }
        }
        walk(Path::new("wit/deps"), &mut found);
        let carried: Vec<&str> = files().map(|f| f.path).collect();
        let missing: Vec<&String> = found.iter().filter(|f| !carried.contains(&f.as_str())).collect();
        assert!(missing.is_empty(), "files of the checkout not in sdk::CHECKOUT_FILES: {missing:?}");
    }

    #[test]
    fn the_standalone_manifest_has_the_workspace_versions() {
        let workspace = std::fs::read_to_string(checkout().join("Cargo.toml")).expect("Cargo.toml");
        let sdk = std::fs::read_to_string(checkout().join("guest-sdk/Cargo.toml")).expect("guest-sdk/Cargo.toml");
        let deps: Vec<&str> = sdk
            .lines()
            .skip_while(|l| *l != "[dependencies]")
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .filter_map(|l| l.split_once(['.', ' ']).map(|(name, _)| name))
            .filter(|n| !n.is_empty())
            .collect();
        assert_eq!(deps, ["wit-bindgen", "serde", "serde_json", "k8s-openapi", "kube"], "{sdk}");
        for dep in deps {
            let line = |text: &str| {
                text.lines().find(|l| l.starts_with(&format!("{dep} = "))).map(str::to_owned).unwrap_or_default()
            };
            let (ours, theirs) = (line(RUST_MANIFEST), line(&workspace));
            let version = |l: &str| {
                l.split('"').find(|p| p.chars().next().is_some_and(|c| c.is_ascii_digit())).map(str::to_owned)
            };
            assert!(version(&theirs).is_some(), "{dep}: no version in the workspace: {theirs}");
            assert_eq!(version(&ours), version(&theirs), "{dep}: {ours} against the workspace's {theirs}");
        }
        for key in ["edition = \"2024\"", "rust-version = \"1.95\"", "license = \"Apache-2.0\""] {
            assert!(workspace.contains(key) && RUST_MANIFEST.contains(key), "{key}");
        }
    }

    #[test]
    fn the_tree_has_a_checkouts_layout() {
        let dir = std::env::temp_dir().join(format!("capstan-sdk-{}", std::process::id()));
        let written = write(&dir).expect("written");
        assert_eq!(written.len(), files().count());
        assert!(crate::tooling::scaffold::is_sdk(&dir.join("guest-sdk")));
        assert_eq!(crate::tooling::scaffold::find_checkout(&dir.join("guest-sdk/src")), Some(dir.clone()));
        assert!(dir.join("wit/controller.wit").is_file() && dir.join("guest-sdk/python/pyproject.toml").is_file());
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
