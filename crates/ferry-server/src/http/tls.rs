//! The TLS server configuration: rustls with `ferry_http::tls::provider()`
//! (ring's ciphers, aws-lc-rs's key exchange), TLS 1.3 and 1.2,
//! ALPN `h2` then `http/1.1`, no client certificates, no 0-RTT (early data
//! could be replayed; a file server gains nothing from it).
use std::io;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// ALPN protocol ids (RFC 7301 registry): HTTP/2 over TLS first.
pub const ALPN_H2: &[u8] = b"h2";
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Build the configuration from a PEM certificate chain and a PEM private
/// key (PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> io::Result<Arc<ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| io::Error::other(format!("the certificate file is not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(io::Error::other(
            "the certificate file holds no certificate",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| io::Error::other(format!("the key file holds no usable private key: {e}")))?;
    let provider = Arc::new(ferry_http::tls::provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| io::Error::other(format!("TLS versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| io::Error::other(format!("the certificate and key do not fit: {e}")))?;
    cfg.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    cfg.max_early_data_size = 0;
    // Our order (AES-128-GCM first), not the client's: curl and browsers
    // list AES-256-GCM first, which costs both ends more CPU per byte.
    cfg.ignore_client_order = true;
    Ok(Arc::new(cfg))
}
