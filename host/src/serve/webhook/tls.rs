//! The webhook server's certificates.
//!
//! Two modes:
//!
//! - **files** ([`Certs::from_dir`]): `tls.crt` and `tls.key` (PEM) in a
//!   directory, e.g. a cert-manager Secret mounted as a volume. The
//!   directory is watched ([`Certs::watch`]); new files serve the next
//!   handshake, and files that cannot be read leave the current
//!   certificate serving. The CA bundle for `--install-webhooks` is
//!   `ca.crt` if present, else `tls.crt`.
//! - **self-managed** ([`Certs::self_managed`]): a CA and a serving
//!   certificate for the given names, made at start and kept in memory;
//!   the CA goes into the configurations the host installs.
//!
//! # Callers
//!
//! By default any client that reaches the port may call. With a
//! [`ClientAuth`] (`--webhook-client-ca`) the server asks every client for
//! a certificate: one that does not chain to that CA (or, with names,
//! carries none of them) fails the handshake; a connection without one
//! is [`Peer::Unverified`], which admission routes refuse (conversion
//! routes do not: the API server presents no client certificate to
//! conversion webhooks, kubernetes/kubernetes#131810).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use notify_debouncer_mini::notify::{self, RecommendedWatcher, RecursiveMode, Watcher as _};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use super::Error;

/// The serving certificate and the CA bundle that vouches for it.
#[derive(Debug)]
pub struct Certs {
    current: RwLock<Arc<CertifiedKey>>,
    ca_bundle: RwLock<Vec<u8>>,
    dir: Option<PathBuf>,
    /// How often the directory was read again.
    reloads: AtomicU64,
    /// Whom the server asks for a client certificate.
    clients: Option<ClientAuth>,
}

/// The callers the webhook server accepts: clients with a certificate of
/// these CAs (`--webhook-client-ca`), and if names are given only one that
/// carries one of them as a subjectAltName (`--webhook-client-name`).
///
/// ```
/// # fn example(ca_pem: &[u8]) -> Result<(), capstan_host::serve::webhook::Error> {
/// use capstan_host::serve::webhook::tls::ClientAuth;
///
/// let clients = ClientAuth::from_pem(ca_pem)?.names(["kube-apiserver-webhook-client".to_owned()]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ClientAuth {
    roots: Arc<rustls::RootCertStore>,
    names: Vec<String>,
}

impl ClientAuth {
    /// Clients with a certificate of a CA in `pem` (one or more
    /// certificates), any name.
    ///
    /// # Errors
    ///
    /// [`Error::Certs`] when `pem` holds no CA certificate.
    pub fn from_pem(pem: &[u8]) -> Result<Self, Error> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| Error::Certs(format!("client CA: {e}")))?;
            roots.add(cert).map_err(|e| Error::Certs(format!("client CA: {e}")))?;
        }
        if roots.is_empty() {
            return Err(Error::Certs("client CA: no certificate".into()));
        }
        Ok(Self { roots: Arc::new(roots), names: Vec::new() })
    }

    /// [`from_pem`](Self::from_pem) of the file at `path`.
    ///
    /// # Errors
    ///
    /// [`Error::Certs`] when it cannot be read or holds no certificate.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let pem = std::fs::read(path).map_err(|e| Error::Certs(format!("{}: {e}", path.display())))?;
        Self::from_pem(&pem).map_err(|e| Error::Certs(format!("{}: {e}", path.display())))
    }

    /// Only clients whose certificate carries one of `names` (DNS names
    /// or IP addresses, as subjectAltNames; a name that is neither
    /// matches no certificate). Default: any name.
    pub fn names(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.names.extend(names);
        self
    }

    /// Whether `leaf` (already verified against the CA) carries one of
    /// the names, or no names are asked for.
    fn admits(&self, leaf: &CertificateDer<'_>) -> bool {
        if self.names.is_empty() {
            return true;
        }
        let Ok(cert) = webpki::EndEntityCert::try_from(leaf) else { return false };
        self.names.iter().any(|name| {
            rustls::pki_types::ServerName::try_from(name.as_str())
                .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
        })
    }
}

/// What the handshake of a connection learnt about its client, for each
/// request on it (an extension of the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// No [`ClientAuth`]: callers are not asked who they are.
    Unchecked,
    /// A client certificate of the [`ClientAuth`]'s CA, with one of its
    /// names.
    Verified,
    /// [`ClientAuth`] is set and the client presented no certificate.
    Unverified,
}

fn certified(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, Error> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Certs(format!("tls.crt: {e}")))?;
    if chain.is_empty() {
        return Err(Error::Certs("tls.crt holds no certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| Error::Certs(format!("tls.key: {e}")))?;
    let key =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| Error::Certs(format!("tls.key: {e}")))?;
    Ok(CertifiedKey::new(chain, key))
}

/// Reads `tls.crt`, `tls.key` and the CA bundle of `dir`.
fn read_dir(dir: &Path) -> Result<(CertifiedKey, Vec<u8>), Error> {
    let read = |name: &str| {
        std::fs::read(dir.join(name)).map_err(|e| Error::Certs(format!("{}: {e}", dir.join(name).display())))
    };
    let (cert, key) = (read("tls.crt")?, read("tls.key")?);
    let certified = certified(&cert, &key)?;
    let ca = read("ca.crt").unwrap_or(cert);
    Ok((certified, ca))
}

impl Certs {
    /// The certificate in `dir` (`tls.crt`, `tls.key`).
    ///
    /// # Errors
    ///
    /// [`Error::Certs`] when they cannot be read or do not match.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self, Error> {
        let dir = dir.into();
        let (key, ca) = read_dir(&dir)?;
        Ok(Self {
            current: RwLock::new(Arc::new(key)),
            ca_bundle: RwLock::new(ca),
            dir: Some(dir),
            reloads: AtomicU64::new(0),
            clients: None,
        })
    }

    /// A new CA and a serving certificate it signs for `names` (DNS names
    /// or IP addresses), valid for ten years.
    ///
    /// # Errors
    ///
    /// [`Error::Certs`] when a name is not valid in a certificate.
    pub fn self_managed(names: &[String]) -> Result<Self, Error> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let bad = |e: rcgen::Error| Error::Certs(e.to_string());
        let ca_key = KeyPair::generate().map_err(bad)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(bad)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "capstan webhook CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        ca.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let ca_cert = ca.self_signed(&ca_key).map_err(bad)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().map_err(bad)?;
        let mut leaf = CertificateParams::new(names.to_vec()).map_err(bad)?;
        leaf.distinguished_name.push(DnType::CommonName, "capstan webhooks");
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        leaf.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = leaf.signed_by(&key, &issuer).map_err(bad)?;
        let certified = certified(cert.pem().as_bytes(), key.serialize_pem().as_bytes())?;
        Ok(Self {
            current: RwLock::new(Arc::new(certified)),
            ca_bundle: RwLock::new(ca_cert.pem().into_bytes()),
            dir: None,
            reloads: AtomicU64::new(0),
            clients: None,
        })
    }

    /// Asks every client for a certificate of `clients` (see [the module
    /// docs](self#callers)). Default: no client is asked.
    #[must_use]
    pub fn verifying(mut self, clients: Option<ClientAuth>) -> Self {
        self.clients = clients;
        self
    }

    /// What the handshake of `connection` says about its client: a
    /// certificate there is one the verifier accepted; `None` when it
    /// carries none of the [`ClientAuth`]'s names (the connection is to
    /// be closed).
    pub fn peer(&self, connection: &rustls::ServerConnection) -> Option<Peer> {
        let Some(clients) = &self.clients else { return Some(Peer::Unchecked) };
        match connection.peer_certificates().and_then(|chain| chain.first()) {
            None => Some(Peer::Unverified),
            Some(leaf) => clients.admits(leaf).then_some(Peer::Verified),
        }
    }

    /// The PEM CA bundle the API server should trust.
    pub fn ca_bundle(&self) -> Vec<u8> {
        self.ca_bundle.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The certificate that serves now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Reads the directory again; keeps the current certificate if the
    /// files cannot be read. Returns whether the certificate changed.
    pub fn reload(&self) -> bool {
        let Some(dir) = &self.dir else { return false };
        self.reloads.fetch_add(1, Ordering::Relaxed);
        match read_dir(dir) {
            Ok((key, ca)) => {
                let changed = key.cert != self.current().cert;
                if changed {
                    *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(key);
                    *self.ca_bundle.write().unwrap_or_else(std::sync::PoisonError::into_inner) = ca;
                    tracing::info!(dir = %dir.display(), "webhook certificate reloaded");
                }
                changed
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "webhook certificate not reloaded, the current one serves");
                false
            }
        }
    }

    /// Follows the directory of [`from_dir`](Self::from_dir): reloads on
    /// every change (files created, written, renamed, removed; opening and
    /// reading them is not a change, so its own reads make no reload),
    /// once changes have stopped for [`DEBOUNCE`](crate::serve::reload::DEBOUNCE),
    /// until the returned watch is dropped. `None` for self-managed
    /// certificates.
    ///
    /// # Errors
    ///
    /// [`Error::Certs`] when the directory cannot be watched.
    pub fn watch(self: &Arc<Self>) -> Result<Option<CertWatch>, Error> {
        let Some(dir) = &self.dir else { return Ok(None) };
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
            match &result {
                Ok(event) if !crate::serve::reload::is_change(event) => return,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "webhook certificate watch error"),
            }
            let _ = tx.send(());
        })
        .map_err(|e| Error::Certs(e.to_string()))?;
        // Kubernetes updates Secret volumes by swapping a symlink: watch
        // the directory, not the files.
        watcher.watch(dir, RecursiveMode::NonRecursive).map_err(|e| Error::Certs(e.to_string()))?;
        let certs = Arc::downgrade(self);
        // Ends when the watcher is dropped (its sender with it).
        std::thread::Builder::new()
            .name("capstan-cert-watch".to_owned())
            .spawn(move || {
                while rx.recv().is_ok() {
                    // A rotation is several changes: reload once they stop.
                    while rx.recv_timeout(crate::serve::reload::DEBOUNCE).is_ok() {}
                    match certs.upgrade() {
                        Some(certs) => {
                            certs.reload();
                        }
                        None => return,
                    }
                }
            })
            .map_err(|e| Error::Certs(format!("cannot start the certificate watch: {e}")))?;
        Ok(Some(CertWatch { _watcher: watcher }))
    }

    /// A rustls server configuration that serves [`current`](Self::current)
    /// at every handshake.
    /// With [`verifying`](Self::verifying), the client is asked for a
    /// certificate; one that does not chain to the CA fails the
    /// handshake.
    ///
    /// # Errors
    ///
    /// [`Error::Certs`] when the client CA cannot make a verifier.
    pub fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        let builder = match &self.clients {
            None => builder.with_no_client_auth(),
            Some(clients) => {
                // Conversion calls come without a certificate: the request
                // decides (see `Peer`).
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::clone(&clients.roots), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| Error::Certs(format!("client CA: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A running watch of a certificate directory; stops when dropped.
pub struct CertWatch {
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for CertWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertWatch").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use rustls::client::danger::ServerCertVerifier as _;

    use super::*;

    /// Writes a self-managed pair's files into `dir`.
    fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
        use rcgen::{CertificateParams, KeyPair};
        let key = KeyPair::generate().expect("a key");
        let cert = CertificateParams::new(vec![name.to_owned()]).expect("params").self_signed(&key).expect("a cert");
        std::fs::write(dir.join("tls.key.tmp"), key.serialize_pem()).expect("write");
        std::fs::write(dir.join("tls.crt.tmp"), cert.pem()).expect("write");
        std::fs::rename(dir.join("tls.key.tmp"), dir.join("tls.key")).expect("rename");
        std::fs::rename(dir.join("tls.crt.tmp"), dir.join("tls.crt")).expect("rename");
        cert.der().to_vec()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("capstan-certs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp dir");
        dir
    }

    #[test]
    fn self_managed_certificate_is_signed_by_its_ca() {
        let certs = Certs::self_managed(&["127.0.0.1".into(), "localhost".into()]).expect("certs");
        let ca = certs.ca_bundle();
        assert!(String::from_utf8_lossy(&ca).starts_with("-----BEGIN CERTIFICATE-----"));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(&ca).expect("a CA")).expect("added");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .expect("a verifier");
        let leaf = certs.current().cert[0].clone();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("a name");
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], rustls::pki_types::UnixTime::now())
            .expect("the CA vouches for the serving certificate");
    }

    #[test]
    fn client_names_admit_only_certificates_that_carry_one() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().expect("a key");
        let ca_pem = ca.self_signed(&ca_key).expect("a CA").pem();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |name: &str| {
            let key = KeyPair::generate().expect("a key");
            let cert = CertificateParams::new(vec![name.to_owned()]).expect("params").signed_by(&key, &issuer);
            cert.expect("a cert").der().clone()
        };
        let any = ClientAuth::from_pem(ca_pem.as_bytes()).expect("a CA");
        assert!(any.admits(&leaf("someone")), "no names: any certificate of the CA");
        let named = any.names(["kube-apiserver-webhook-client".to_owned()]);
        assert!(named.admits(&leaf("kube-apiserver-webhook-client")));
        assert!(!named.admits(&leaf("admin")));
        let err = ClientAuth::from_pem(b"not a certificate").expect_err("no CA");
        assert_eq!(err.to_string(), "webhook certificates: client CA: no certificate");
    }

    #[test]
    fn files_that_cannot_be_read_leave_the_certificate_serving() {
        let dir = temp_dir("broken");
        let first = write_pair(&dir, "localhost");
        let certs = Certs::from_dir(&dir).expect("certs");
        std::fs::write(dir.join("tls.crt"), "not a certificate").expect("write");
        assert!(!certs.reload());
        assert_eq!(certs.current().cert[0].as_ref(), first.as_slice());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn rotated_files_are_picked_up_without_a_restart_and_reading_them_is_no_change() {
        let dir = temp_dir("rotate");
        write_pair(&dir, "localhost");
        let certs = Arc::new(Certs::from_dir(&dir).expect("certs"));
        let _watch = certs.watch().expect("a watch").expect("a directory to watch");
        let second = write_pair(&dir, "localhost");
        // The watch reloads on its own; no reload() call here.
        let mut served = Vec::new();
        for _ in 0..100 {
            served = certs.current().cert[0].to_vec();
            if served == second {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(served, second, "the rotated certificate serves");
        // The reload opened and read the files: no change to reload for.
        // Twenty debounce periods later, at most the reload of a rotation
        // seen in two parts has come.
        let after_rotation = certs.reloads.load(Ordering::Relaxed);
        std::thread::sleep(crate::serve::reload::DEBOUNCE * 20);
        let reloads = certs.reloads.load(Ordering::Relaxed);
        assert!(reloads <= after_rotation + 1, "{after_rotation} reloads for the rotation, {reloads} in all");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
