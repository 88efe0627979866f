//! Clusters from kubeconfig Secrets (`capstan run --clusters-from-secrets`):
//! each Secret in one namespace of the default cluster whose name ends in
//! `-kubeconfig` and that holds a kubeconfig under the key `value` (the
//! Cluster API convention) is a cluster, named by the rest of the Secret's
//! name. It is engaged when the Secret appears, engaged again when its
//! kubeconfig changes (rotated credentials), and disengaged when the
//! Secret goes.
//!
//! A kubeconfig from a Secret may only carry its credentials inline: one
//! that runs a command (`exec`, `auth-provider`) or reads files is refused,
//! since whoever may write Secrets in that namespace would otherwise run
//! commands or read files in the host.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event, watcher};

use super::Fleet;
use crate::cluster::kube::wait_until_answers;

/// The ending of a kubeconfig Secret's name; the rest is the cluster's.
pub const SECRET_SUFFIX: &str = "-kubeconfig";
/// The key of the kubeconfig in the Secret.
pub const SECRET_KEY: &str = "value";

/// Where kubeconfig Secrets are found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The namespace of the default cluster that holds them.
    pub namespace: String,
    /// A label selector they must match, if any.
    pub selector: Option<String>,
}

/// Why a kubeconfig Secret names no cluster the fleet may engage.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    /// The cluster name is not a DNS-1123 label, or is `default`.
    #[error("the cluster name {0:?} is not a DNS-1123 label other than `default`")]
    Name(String),
    /// No kubeconfig under the key `value`.
    #[error("no kubeconfig under the key `value`")]
    Missing,
    /// The kubeconfig does not parse.
    #[error("not a kubeconfig: {0}")]
    Invalid(String),
    /// The kubeconfig runs a command or reads a file.
    #[error("the kubeconfig {0}; a kubeconfig from a Secret must carry its credentials inline")]
    Unsafe(&'static str),
}

/// The cluster a Secret names, and its kubeconfig, checked; `None` for a
/// Secret that is not a kubeconfig Secret (its name does not end in
/// `-kubeconfig`).
///
/// # Errors
///
/// [`Refused`]: why the Secret cannot be engaged.
pub fn cluster_of(secret: &Secret) -> Option<Result<(String, Kubeconfig), Refused>> {
    let name = secret.metadata.name.as_deref()?.strip_suffix(SECRET_SUFFIX)?;
    Some(checked(name, secret))
}

fn checked(name: &str, secret: &Secret) -> Result<(String, Kubeconfig), Refused> {
    if !crate::manifest::is_dns1123_label(name) || name == super::DEFAULT_CLUSTER {
        return Err(Refused::Name(name.to_owned()));
    }
    let bytes = secret.data.as_ref().and_then(|d| d.get(SECRET_KEY)).ok_or(Refused::Missing)?;
    let text = std::str::from_utf8(&bytes.0).map_err(|e| Refused::Invalid(e.to_string()))?;
    let kubeconfig = Kubeconfig::from_yaml(text).map_err(|e| Refused::Invalid(e.to_string()))?;
    for auth in kubeconfig.auth_infos.iter().filter_map(|a| a.auth_info.as_ref()) {
        if auth.exec.is_some() {
            return Err(Refused::Unsafe("runs a command (`exec`)"));
        }
        if auth.auth_provider.is_some() {
            return Err(Refused::Unsafe("runs an auth provider"));
        }
        if auth.client_certificate.is_some() || auth.client_key.is_some() || auth.token_file.is_some() {
            return Err(Refused::Unsafe("reads its credentials from a file"));
        }
    }
    for cluster in kubeconfig.clusters.iter().filter_map(|c| c.cluster.as_ref()) {
        if cluster.certificate_authority.is_some() {
            return Err(Refused::Unsafe("reads its certificate authority from a file"));
        }
    }
    Ok((name.to_owned(), kubeconfig))
}

/// Engages and disengages the fleet's clusters from the Secrets `source`
/// names in the cluster of `client`, until the returned task is aborted.
pub fn follow(fleet: Arc<Fleet>, client: kube::Client, source: Source) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: kube::Api<Secret> = kube::Api::namespaced(client, &source.namespace);
        let config = match &source.selector {
            Some(selector) => watcher::Config::default().labels(selector),
            None => watcher::Config::default(),
        };
        // What each engaged cluster was engaged from: its Secret's data.
        let mut engaged: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut listed: Option<Vec<String>> = None;
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Init) => listed = Some(Vec::new()),
                Ok(Event::InitApply(secret)) => {
                    if let Some(name) = apply(&fleet, &mut engaged, &secret) {
                        listed.get_or_insert_with(Vec::new).push(name);
                    }
                }
                Ok(Event::InitDone) => {
                    // Secrets gone while the watch was down.
                    let listed = listed.take().unwrap_or_default();
                    let gone: Vec<String> = engaged.keys().filter(|n| !listed.contains(n)).cloned().collect();
                    for name in gone {
                        engaged.remove(&name);
                        fleet.disengage(&name).await;
                    }
                }
                Ok(Event::Apply(secret)) => {
                    apply(&fleet, &mut engaged, &secret);
                }
                Ok(Event::Delete(secret)) => {
                    if let Some(name) = secret.metadata.name.as_deref().and_then(|n| n.strip_suffix(SECRET_SUFFIX))
                        && engaged.remove(name).is_some()
                    {
                        fleet.disengage(name).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(namespace = %source.namespace, error = %e, "cannot watch kubeconfig Secrets, retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    })
}

/// Engages the cluster `secret` names if it is new or its kubeconfig
/// changed; returns its name if it names one.
fn apply(fleet: &Fleet, engaged: &mut BTreeMap<String, Vec<u8>>, secret: &Secret) -> Option<String> {
    let (name, kubeconfig) = match cluster_of(secret)? {
        Ok(found) => found,
        Err(e) => {
            let secret_name = secret.metadata.name.as_deref().unwrap_or_default();
            tracing::warn!(secret = %secret_name, error = %e, "kubeconfig Secret refused");
            return None;
        }
    };
    let data = secret.data.as_ref().and_then(|d| d.get(SECRET_KEY)).map(|b| b.0.clone()).unwrap_or_default();
    if engaged.get(&name) == Some(&data) {
        return Some(name);
    }
    let rotated = engaged.insert(name.clone(), data).is_some();
    tracing::info!(cluster = %name, rotated, "engaging a cluster from its kubeconfig Secret");
    let cluster = name.clone();
    drop(fleet.engage(&name, async move {
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| anyhow::anyhow!("invalid kubeconfig in the Secret of cluster {cluster}: {e}"))?;
        let client = kube::Client::try_from(config)?;
        wait_until_answers(&client).await;
        Ok(client)
    }));
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(name: &str, kubeconfig: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.to_owned());
        s.data = Some([(SECRET_KEY.to_owned(), ByteString(kubeconfig.as_bytes().to_vec()))].into());
        s
    }

    const INLINE: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    certificate-authority-data: AAAA\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n";

    #[test]
    fn a_kubeconfig_secret_names_its_cluster_and_others_are_not_clusters() {
        let (name, _) = cluster_of(&secret("west-kubeconfig", INLINE)).expect("a kubeconfig Secret").expect("valid");
        assert_eq!(name, "west");
        assert!(cluster_of(&secret("west-credentials", INLINE)).is_none());
        let refused = |s: &Secret| cluster_of(s).expect("a kubeconfig Secret").expect_err("refused");
        assert_eq!(refused(&secret("default-kubeconfig", INLINE)), Refused::Name("default".into()));
        assert_eq!(refused(&secret("West-kubeconfig", INLINE)), Refused::Name("West".into()));
        let mut empty = secret("x-kubeconfig", INLINE);
        empty.data = None;
        assert_eq!(refused(&empty), Refused::Missing);
        assert!(matches!(refused(&secret("x-kubeconfig", "clusters: 7")), Refused::Invalid(_)));
    }

    #[test]
    fn a_kubeconfig_that_runs_commands_or_reads_files_is_refused() {
        let exec = INLINE.replace("    token: t\n", "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, 'cat /etc/shadow']\n");
        let refused =
            |s: &str| cluster_of(&secret("x-kubeconfig", s)).expect("a kubeconfig Secret").expect_err("refused");
        assert_eq!(refused(&exec), Refused::Unsafe("runs a command (`exec`)"));
        let token_file =
            INLINE.replace("    token: t\n", "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n");
        assert_eq!(refused(&token_file), Refused::Unsafe("reads its credentials from a file"));
        let cert = INLINE.replace("    token: t\n", "    client-certificate: /etc/kubernetes/admin.crt\n");
        assert_eq!(refused(&cert), Refused::Unsafe("reads its credentials from a file"));
        let ca = INLINE.replace("certificate-authority-data: AAAA", "certificate-authority: /etc/ca.crt");
        assert_eq!(refused(&ca), Refused::Unsafe("reads its certificate authority from a file"));
    }
}
