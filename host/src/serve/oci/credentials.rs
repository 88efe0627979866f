//! Registry credentials from the docker config file, the one `docker
//! login`, `oras login` and a Kubernetes image pull secret
//! (`.dockerconfigjson`) all write.
//!
//! For a registry, in order: its entry in `credHelpers` (the helper
//! `docker-credential-<name> get` is run), its entry in `auths` (`auth`,
//! base64 of `user:password`, or `username` and `password`, or an
//! `identitytoken` used as a bearer token), the `credsStore` helper;
//! else anonymous. Keys of `auths` may carry a scheme and a path
//! (`https://index.docker.io/v1/`): only the host and port count.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

use super::Error;

/// The docker config file: `$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`.
pub fn config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker").join("config.json"))
}

/// The host and port of an `auths` key (`https://r.io/v1/` → `r.io`).
fn key_host(key: &str) -> &str {
    let rest = key.split_once("://").map_or(key, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

/// Docker Hub goes by several names.
fn same_registry(a: &str, b: &str) -> bool {
    let hub = |r: &str| matches!(r, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    a == b || (hub(a) && hub(b))
}

/// The credentials for `registry` from the docker config file at `path`
/// (anonymous if there is no file, or no entry for it).
///
/// # Errors
///
/// [`Error::Credentials`] for a file that is not JSON, an entry that does
/// not decode, or a credential helper that fails.
pub fn for_registry(path: Option<&Path>, registry: &str) -> Result<RegistryAuth, Error> {
    let error = |reason: String| Error::Credentials { registry: registry.to_owned(), reason };
    let Some(path) = path else { return Ok(RegistryAuth::Anonymous) };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RegistryAuth::Anonymous),
        Err(e) => return Err(error(format!("cannot read {}: {e}", path.display()))),
    };
    let config: Value =
        serde_json::from_str(&text).map_err(|e| error(format!("{} is not JSON: {e}", path.display())))?;
    let helper = config["credHelpers"]
        .as_object()
        .and_then(|h| h.iter().find(|(k, _)| same_registry(key_host(k), registry)))
        .and_then(|(_, v)| v.as_str());
    if let Some(helper) = helper {
        return from_helper(helper, registry).map_err(error);
    }
    let entry = config["auths"]
        .as_object()
        .and_then(|auths| auths.iter().find(|(k, _)| same_registry(key_host(k), registry)))
        .map(|(_, v)| v);
    if let Some(entry) = entry {
        if let Some(auth) = entry["auth"].as_str().filter(|a| !a.is_empty()) {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|e| error(format!("{}: auths entry is not base64: {e}", path.display())))?;
            let decoded = String::from_utf8(decoded).map_err(|_| error("auths entry is not UTF-8".to_owned()))?;
            let (user, password) = decoded
                .split_once(':')
                .ok_or_else(|| error(format!("{}: auths entry is not user:password", path.display())))?;
            return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
        }
        if let (Some(user), Some(password)) = (entry["username"].as_str(), entry["password"].as_str()) {
            return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
        }
        if let Some(token) = entry["identitytoken"].as_str().filter(|t| !t.is_empty()) {
            return Ok(RegistryAuth::Bearer(token.to_owned()));
        }
    }
    if let Some(store) = config["credsStore"].as_str().filter(|s| !s.is_empty()) {
        return from_helper(store, registry).map_err(error);
    }
    Ok(RegistryAuth::Anonymous)
}

/// Asks `docker-credential-<helper> get` for `registry`'s credentials.
fn from_helper(helper: &str, registry: &str) -> Result<RegistryAuth, String> {
    use std::io::Write as _;
    let program = format!("docker-credential-{helper}");
    let mut child = std::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(registry.as_bytes());
    }
    let output = child.wait_with_output().map_err(|e| format!("{program}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        // "credentials not found in native keychain": anonymous, as docker does.
        if stdout.contains("credentials not found") {
            return Ok(RegistryAuth::Anonymous);
        }
        return Err(format!("{program} get failed: {}", stdout.trim()));
    }
    let answer: Value = serde_json::from_str(&stdout).map_err(|e| format!("{program} answered no JSON: {e}"))?;
    match (answer["Username"].as_str(), answer["Secret"].as_str()) {
        (Some("<token>"), Some(token)) => Ok(RegistryAuth::Bearer(token.to_owned())),
        (Some(user), Some(secret)) => Ok(RegistryAuth::Basic(user.to_owned(), secret.to_owned())),
        _ => Err(format!("{program} answered without Username and Secret")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> (PathBuf, impl Drop) {
        struct Gone(PathBuf);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let path = std::env::temp_dir()
            .join(format!("capstan-docker-config-{}.json", crate::serve::oci::sha256(json.as_bytes())));
        std::fs::write(&path, json).expect("written");
        (path.clone(), Gone(path))
    }

    #[test]
    fn auths_entries_are_found_by_host_in_any_spelling() {
        let (path, _gone) = config(
            r#"{"auths": {
                "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
                "registry.example:5000": {"username": "u", "password": "p"},
                "http://tokens.example/v2/": {"identitytoken": "t0k"}
            }}"#,
        );
        let auth = |r: &str| for_registry(Some(&path), r).expect("reads");
        assert_eq!(auth("docker.io"), RegistryAuth::Basic("hub".into(), "secret".into()));
        assert_eq!(auth("registry.example:5000"), RegistryAuth::Basic("u".into(), "p".into()));
        assert_eq!(auth("tokens.example"), RegistryAuth::Bearer("t0k".into()));
        assert_eq!(auth("other.example"), RegistryAuth::Anonymous);
        assert_eq!(
            for_registry(Some(Path::new("/nonexistent/config.json")), "r").expect("none"),
            RegistryAuth::Anonymous
        );
    }

    #[test]
    fn a_broken_config_or_a_missing_helper_is_an_error_naming_the_registry() {
        let (path, _gone) = config("not json");
        let err = for_registry(Some(&path), "r.example").expect_err("not JSON");
        assert!(err.to_string().starts_with("credentials for r.example: "), "{err}");
        let (path, _gone) = config(r#"{"credHelpers": {"r.example": "capstan-test-missing"}}"#);
        let err = for_registry(Some(&path), "r.example").expect_err("no helper");
        assert!(err.to_string().contains("cannot run docker-credential-capstan-test-missing"), "{err}");
    }
}
