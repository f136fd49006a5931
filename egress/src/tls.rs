//! TLS to `https://` destinations of absolute-form requests.
//!
//! A container that wants a secret put into an HTTPS request cannot use a CONNECT tunnel (the
//! proxy would see only ciphertext), so it sends `GET https://host/... HTTP/1.1` in plain HTTP
//! to the proxy, and the proxy makes the TLS connection: to the address it checked, verifying
//! the certificate against the public web roots (`webpki-roots`) and the operator's
//! `egress.proxy.extra_ca_files`, for the name in the URL. `ring` is the crypto provider, the
//! one the rest of the workspace's rustls already uses.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::config::ConfigError;

const FIELD: &str = "proxy.extra_ca_files";

/// The client side of the proxy's TLS connections: web roots plus `extra_ca_files`, HTTP/1.1.
pub(crate) fn client_config(
    extra_ca_files: &[PathBuf],
) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for path in extra_ca_files {
        let invalid = |reason: String| ConfigError {
            field: FIELD,
            reason: format!("{}: {reason}", path.display()),
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| invalid(format!("cannot be read as PEM: {e}")))?
            .collect::<Result<_, _>>()
            .map_err(|e| invalid(format!("is not valid PEM: {e}")))?;
        if certs.is_empty() {
            return Err(invalid("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| invalid(format!("holds an unusable CA certificate: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError { field: FIELD, reason: format!("TLS set-up: {e}") })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The proxy speaks HTTP/1.1 upstream (hyper's http1 client).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// TLS over `stream` (already connected to the checked address) for the URL's `host`
/// (normalised: lower case, no brackets), within `timeout`. The error says what failed, for
/// the audit line and the container.
pub(crate) async fn connect(
    config: &Arc<rustls::ClientConfig>,
    host: &str,
    stream: TcpStream,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, String> {
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| format!("upstream_tls: {host} is not a TLS server name: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(err)) => Err(format!("upstream_tls: TLS with {host} failed: {err}")),
        Err(_) => Err(format!("upstream_tls: TLS with {host} timed out")),
    }
}
