//! The throw-away PKI of a local cluster: a CA, the API server's serving
//! certificate, the admin client certificate and the service-account
//! signing key, all ECDSA P-256 made with rcgen.

use std::path::Path;

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// The files [`ensure`] writes into the `pki` directory.
pub const FILES: [&str; 8] =
    ["ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub"];

/// Writes the PKI into `dir` unless it is complete there already (a cluster
/// keeps its PKI across `down` and `up`).
///
/// # Errors
///
/// When a file cannot be written.
pub fn ensure(dir: &Path) -> anyhow::Result<()> {
    if FILES.iter().all(|f| dir.join(f).is_file()) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let files = make().context("cannot make the cluster's certificates")?;
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

fn make() -> Result<Vec<(&'static str, String)>, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "capstan-cluster-ca");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    ca.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let ca_cert = ca.self_signed(&ca_key)?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca, ca_key);

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
        for f in FILES {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let ca = std::fs::read_to_string(dir.join("ca.crt")).expect("ca");
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(std::fs::read_to_string(dir.join("sa.pub")).expect("sa.pub").contains("PUBLIC KEY"));
        ensure(&dir).expect("again");
        assert_eq!(std::fs::read_to_string(dir.join("ca.crt")).expect("ca"), ca, "an existing PKI is kept");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
