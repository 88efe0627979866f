//! The host's webhook server for tests: started on a free loopback port
//! with a CA of its own ([`WebhookServer::start`]), and called directly,
//! as a client other than the API server would ([`post`]).

use std::sync::Arc;

use anyhow::{Context as _, Result};
use capstan_host::serve::server::Server;
use capstan_host::serve::webhook::tls::Certs;
use capstan_host::serve::webhook::{self, Endpoint, Install, Registry};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A webhook server serving the components of [`registry`](Self::registry).
pub struct WebhookServer {
    /// The loopback port it listens on.
    pub port: u16,
    /// The PEM CA bundle its serving certificate chains to.
    pub ca: Vec<u8>,
    /// The components it serves, as a host publishes them.
    pub registry: Arc<Registry>,
    /// The server; shut it down at the end of the test.
    pub server: Server,
}

impl WebhookServer {
    /// Serves HTTPS on a free loopback port, with a self-managed CA and no
    /// client CA (anyone may call). With `install`, the registry installs
    /// webhook configurations pointing at it (`--install-webhooks`);
    /// without, nothing is installed and calls are made with [`post`].
    ///
    /// # Errors
    ///
    /// When no port is free or the certificates cannot be made.
    pub async fn start(install: bool) -> Result<Self> {
        let port = crate::free_port()?;
        let certs = Arc::new(Certs::self_managed(&["127.0.0.1".to_owned()])?);
        let ca = certs.ca_bundle();
        let settings = install.then(|| Install::new(Endpoint::Url(format!("https://127.0.0.1:{port}")), ca.clone()));
        let registry = Arc::new(Registry::new().installing(settings));
        let server = webhook::serve(([127, 0, 0, 1], port).into(), certs, Arc::clone(&registry)).await?;
        Ok(Self { port, ca, registry, server })
    }
}

/// POSTs `body` to `path` on the webhook server at `port` (trusting
/// `server_ca`), presenting `client` if given; the HTTP code and the JSON
/// body (`null` if it is not JSON).
///
/// # Errors
///
/// When the connection or the TLS handshake fails, or the answer has no
/// status line.
pub async fn post(
    port: u16,
    server_ca: &[u8],
    client: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
    path: &str,
    body: &Value,
) -> Result<(u16, Value)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(server_ca)?)?;
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder.with_client_auth_cert(vec![cert], key)?,
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await?;
    let body = serde_json::to_vec(body)?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await?;
    tls.write_all(&body).await?;
    let mut answer = Vec::new();
    // TLS 1.3 reports a refused client certificate at the first read.
    tls.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    let code = answer.split(' ').nth(1).and_then(|c| c.parse().ok()).context("an HTTP status line")?;
    let json =
        answer.split_once("\r\n\r\n").map_or(Value::Null, |(_, b)| serde_json::from_str(b).unwrap_or(Value::Null));
    Ok((code, json))
}
