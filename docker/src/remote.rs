//! A Docker engine on another machine, reached over mutual TLS only.
//!
//! Why not bollard's own TLS client: it trusts the system's public roots beside the operator's
//! CA (any public certificate for the engine's address would then pass), and it says nothing
//! about whom it reached. Here the operator's CA is the only root, the daemon presents its own
//! certificate, and every handshake records the engine's certificate (its SHA-256), which
//! `health`, `/status`, `subagents ps` and the dashboard show as the engine's identity.

use std::sync::{Arc, Mutex};

use bollard::{BollardRequest, Docker};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::config::RemoteEngine;
use crate::connect::EngineUnreachable;

/// The engine's certificate as last seen in a handshake: `sha256:` and its hex digest.
#[derive(Debug, Clone, Default)]
pub struct SeenIdentity(Arc<Mutex<Option<String>>>);

impl SeenIdentity {
    /// The last certificate the engine presented (`None` before the first handshake).
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, cert: &CertificateDer<'_>) {
        let digest = Sha256::digest(cert.as_ref());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("sha256:{hex}"));
    }
}

/// Checks the engine's certificate against the operator's CA alone (the webpki verifier does
/// the work) and records which certificate passed.
#[derive(Debug)]
struct Recording {
    inner: Arc<WebPkiServerVerifier>,
    seen: SeenIdentity,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        self.seen.set(end_entity);
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The TLS client of `remote`: its CA the only root, the daemon's certificate presented.
fn client_config(
    remote: &RemoteEngine,
    seen: SeenIdentity,
) -> Result<rustls::ClientConfig, EngineUnreachable> {
    let fail = |what: &str, path: &std::path::Path, e: String| {
        EngineUnreachable::Connect(format!(
            "sandbox.{what} {}: {e} (docs/remote.md says how to make the certificates)",
            path.display()
        ))
    };
    let certs = |field: &str, path: &std::path::Path| {
        let found: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| fail(field, path, e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| fail(field, path, e.to_string()))?;
        match found.is_empty() {
            true => Err(fail(field, path, "no PEM certificate in it".into())),
            false => Ok(found),
        }
    };
    let mut roots = rustls::RootCertStore::empty();
    for ca in certs("tls_ca", &remote.ca)? {
        roots.add(ca).map_err(|e| fail("tls_ca", &remote.ca, e.to_string()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| fail("tls_ca", &remote.ca, e.to_string()))?;
    let chain = certs("tls_cert", &remote.cert)?;
    let key = PrivateKeyDer::from_pem_file(&remote.key)
        .map_err(|e| fail("tls_key", &remote.key, e.to_string()))?;
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EngineUnreachable::Connect(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Recording { inner, seen }))
        .with_client_auth_cert(chain, key)
        .map_err(|e| fail("tls_key", &remote.key, e.to_string()))
}

/// A client of `remote` over mutual TLS, and where the engine's identity will be recorded.
/// Nothing is sent yet (the caller pings).
pub(crate) fn connect(remote: &RemoteEngine) -> Result<(Docker, SeenIdentity), EngineUnreachable> {
    let seen = SeenIdentity::default();
    let config = client_config(remote, seen.clone())?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let client = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .build(https),
    );
    let authority = match remote.host.contains(':') {
        true => format!("https://[{}]:{}", remote.host, remote.port),
        false => format!("https://{}:{}", remote.host, remote.port),
    };
    let docker = Docker::connect_with_custom_transport(
        move |request: BollardRequest| {
            let client = client.clone();
            async move { client.request(request).await.map_err(bollard::errors::Error::from) }
        },
        Some(authority),
        120,
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| EngineUnreachable::Connect(e.to_string()))?;
    Ok((docker, seen))
}
