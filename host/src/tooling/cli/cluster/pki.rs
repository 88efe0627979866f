//! The throw-away PKI of a local cluster: a CA, the API server's serving
//! certificate, the admin client certificate and the service-account
//! signing key, and a CA of its own for the client certificate the API
//! server presents to admission webhooks, all ECDSA P-256 made with rcgen.

use std::path::Path;

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// The files [`ensure`] writes into the `pki` directory.
pub const FILES: [&str; 8] =
    ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub"];

/// The files [`ensure`] writes for the webhook client certificate: its CA
/// (what a host's `--webhook-client-ca` names), the certificate the API
/// server presents and its key.
pub const WEBHOOK_CLIENT_FILES: [&str; 3] = ["webhook-client-ca.crt", "webhook-client.crt", "webhook-client.key"];

/// The name (DNS subjectAltName) the webhook client certificate carries,
/// for a host's `--webhook-client-name`.
pub const WEBHOOK_CLIENT_NAME: &str = "kube-apiserver-webhook-client";

/// Writes the PKI into `dir` unless it is complete there already (a cluster
/// keeps its PKI across `down` and `up`; one made before the webhook
/// client certificate gets it added).
///
/// # Errors
///
/// When a file cannot be written.
pub fn ensure(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if !FILES.iter().all(|f| dir.join(f).is_file()) {
        write(dir, make().context("cannot make the cluster's certificates")?)?;
    }
    if !WEBHOOK_CLIENT_FILES.iter().all(|f| dir.join(f).is_file()) {
        write(dir, webhook_client().context("cannot make the webhook client certificate")?)?;
    }
    Ok(())
}

/// Writes `files` into `dir`, each through a temporary file.
fn write(dir: &Path, files: Vec<(&'static str, String)>) -> anyhow::Result<()> {
    for (name, content) in files {
        let path = dir.join(name);
        let tmp = dir.join(format!("{name}.tmp"));
        write_private(&tmp, &content).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Writes a file readable by its owner only.
pub fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(content.as_bytes())
}

/// A new CA named `name`: its certificate, its key's PEM and the issuer
/// that signs with it.
fn ca(name: &str) -> Result<(rcgen::Certificate, String, Issuer<'static, KeyPair>), rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, name);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let ca_cert = ca.self_signed(&ca_key)?;
    let ca_key_pem = ca_key.serialize_pem();
    Ok((ca_cert, ca_key_pem, Issuer::new(ca, ca_key)))
}

/// The webhook client CA (its key is not kept: nothing else is signed
/// with it) and the certificate it signs for [`WEBHOOK_CLIENT_NAME`].
fn webhook_client() -> Result<Vec<(&'static str, String)>, rcgen::Error> {
    let (ca_cert, _, issuer) = ca("capstan-webhook-client-ca")?;
    let (cert, key) = leaf(
        &issuer,
        vec![WEBHOOK_CLIENT_NAME.to_owned()],
        &[(DnType::CommonName, WEBHOOK_CLIENT_NAME)],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    Ok(vec![
        ("webhook-client-ca.crt", ca_cert.pem()),
        ("webhook-client.crt", cert.pem()),
        ("webhook-client.key", key.serialize_pem()),
    ])
}

fn make() -> Result<Vec<(&'static str, String)>, rcgen::Error> {
    let (ca_cert, ca_key_pem, issuer) = ca("capstan-cluster-ca")?;

    let (server_cert, server_key) = leaf(
        &issuer,
        vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
        &[(DnType::CommonName, "kube-apiserver")],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (admin_cert, admin_key) = leaf(
        &issuer,
        Vec::new(),
        &[(DnType::OrganizationName, "system:masters"), (DnType::CommonName, "admin")],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;

    let sa_key = KeyPair::generate()?;
    Ok(vec![
        ("ca.crt", ca_cert.pem()),
        ("ca.key", ca_key_pem),
        ("apiserver.crt", server_cert.pem()),
        ("apiserver.key", server_key.serialize_pem()),
        ("admin.crt", admin_cert.pem()),
        ("admin.key", admin_key.serialize_pem()),
        ("sa.key", sa_key.serialize_pem()),
        ("sa.pub", sa_key.public_key_pem()),
    ])
}

/// A certificate for `names` with the subject `dn`, for one `usage`,
/// signed by the CA, and its key.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    names: Vec<String>,
    dn: &[(DnType, &str)],
    usage: ExtendedKeyUsagePurpose,
) -> Result<(rcgen::Certificate, KeyPair), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names)?;
    for (ty, value) in dn {
        params.distinguished_name.push(ty.clone(), *value);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![usage];
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    Ok((params.signed_by(&key, issuer)?, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pki_is_made_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("capstan-pki-{}", std::process::id()));
        ensure(&dir).expect("pki");
        for f in FILES.iter().chain(&WEBHOOK_CLIENT_FILES) {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let ca = std::fs::read_to_string(dir.join("ca.crt")).expect("ca");
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(std::fs::read_to_string(dir.join("sa.pub")).expect("sa.pub").contains("PUBLIC KEY"));
        ensure(&dir).expect("again");
        assert_eq!(std::fs::read_to_string(dir.join("ca.crt")).expect("ca"), ca, "an existing PKI is kept");
        // A PKI made before the webhook client certificate gets one.
        for f in WEBHOOK_CLIENT_FILES {
            std::fs::remove_file(dir.join(f)).expect("remove");
        }
        ensure(&dir).expect("again");
        assert_eq!(std::fs::read_to_string(dir.join("ca.crt")).expect("ca"), ca, "the cluster CA is kept");
        assert!(dir.join("webhook-client.key").is_file());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
