//! TLS for the client: rustls (ring's ciphers, aws-lc-rs's key exchange
//! and signatures; see [`provider`]), trusting the system's roots
//! (webpki-roots when the system has none), a `--cacert` file, or a pinned
//! certificate (`--pin sha256:HEX`, for self-signed servers such as
//! `ferry serve`); `--insecure` trusts anything and says so loudly.
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

use crate::HttpError;

/// Where trust comes from.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM file of CA (or self-signed server) certificates; replaces the
    /// system's roots.
    pub cacert: Option<std::path::PathBuf>,
    /// SHA-256 of the server certificate (DER), as `sha256:HEX` or HEX.
    /// When given, only a certificate with one of these digests is accepted.
    pub pins: Vec<String>,
    /// Accept any certificate (no protection against an attacker).
    pub insecure: bool,
}

/// Parse `sha256:HEX` (64 hex digits; `:` between bytes allowed, as
/// `openssl x509 -fingerprint` prints them).
pub fn parse_pin(s: &str) -> Result<[u8; 32], String> {
    let t = s.trim();
    let hex = t
        .strip_prefix("sha256:")
        .or_else(|| t.strip_prefix("sha256//"))
        .or_else(|| t.strip_prefix("SHA256:"))
        .unwrap_or(t);
    let digits: Vec<u8> = hex.bytes().filter(|&c| c != b':').collect();
    if digits.len() != 64 {
        return Err(format!(
            "--pin {s:?}: want sha256: and 64 hex digits (the SHA-256 of the server's certificate)"
        ));
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks(2).enumerate() {
        let txt = std::str::from_utf8(pair).map_err(|_| format!("--pin {s:?}: not hex"))?;
        let b = u8::from_str_radix(txt, 16).map_err(|_| format!("--pin {s:?}: not hex"))?;
        if let Some(slot) = out.get_mut(i) {
            *slot = b;
        }
    }
    Ok(out)
}

/// `sha256:HEX` of a DER certificate, as `--pin` takes it.
pub fn pin_of(der: &[u8]) -> String {
    let d = Sha256::digest(der);
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[derive(Debug)]
struct Verifier {
    /// Checks the chain against the roots; `None` with --pin or --insecure.
    webpki: Option<Arc<WebPkiServerVerifier>>,
    pins: Vec<[u8; 32]>,
    /// The certificates of --cacert: a server presenting one of these
    /// exactly is trusted even when it is a self-signed CA certificate
    /// (`openssl req -x509` makes those), which webpki refuses as an end
    /// entity.
    exact: Vec<Vec<u8>>,
    insecure: bool,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.pins.is_empty() {
            let got: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
            if self.pins.contains(&got) {
                return Ok(ServerCertVerified::assertion());
            }
            return Err(rustls::Error::General(format!(
                "the server's certificate ({}) does not match --pin",
                pin_of(end_entity.as_ref())
            )));
        }
        if self.insecure || self.exact.iter().any(|c| c == end_entity.as_ref()) {
            return Ok(ServerCertVerified::assertion());
        }
        match &self.webpki {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            None => Err(rustls::Error::General("no trust anchors".into())),
        }
    }

    // The handshake signature is checked in every mode but --insecure: a
    // pinned certificate is worth nothing if the peer need not hold its key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

fn load_pem(path: &Path) -> Result<Vec<CertificateDer<'static>>, HttpError> {
    let iter = CertificateDer::pem_file_iter(path)
        .map_err(|e| HttpError::Usage(format!("--cacert {}: cannot read: {e}", path.display())))?;
    let mut out = Vec::new();
    for c in iter {
        out.push(
            c.map_err(|e| HttpError::Usage(format!("--cacert {}: bad PEM: {e}", path.display())))?,
        );
    }
    if out.is_empty() {
        return Err(HttpError::Usage(format!(
            "--cacert {}: no certificate in the file (want PEM, -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(out)
}

fn roots(opts: &TlsOptions) -> Result<(RootCertStore, Vec<Vec<u8>>), HttpError> {
    let mut store = RootCertStore::empty();
    if let Some(path) = &opts.cacert {
        let certs = load_pem(path)?;
        let exact = certs.iter().map(|c| c.as_ref().to_vec()).collect();
        for c in certs {
            store.add(c).map_err(|e| {
                HttpError::Usage(format!(
                    "--cacert {}: unusable certificate: {e}",
                    path.display()
                ))
            })?;
        }
        return Ok((store, exact));
    }
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = store.add_parsable_certificates(native.certs);
    if added == 0 {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    Ok((store, Vec::new()))
}

/// The TLS crypto: ring's bulk ciphers on aws-lc-rs's everything else.
///
/// The record layer (AES-GCM, ChaCha20-Poly1305, and each suite's
/// HMAC/HKDF) comes from ring, whose AES-GCM is BoringSSL's VAES/AVX2 code:
/// on this project's benchmark machine (AES-NI, VAES, VPCLMULQDQ, no
/// AVX-512) it seals at 5.2-6.4 GB/s against aws-lc-rs's 2.4-3.3 GB/s, and
/// both ends of a transfer pay for the cipher on every byte
/// (docs/internals/http.md, "TLS crypto"). Key exchange (with the
/// post-quantum X25519MLKEM768 hybrid, which ring lacks), certificate
/// signature checks, private keys and the random source stay aws-lc-rs.
///
/// AES-128-GCM is preferred over AES-256-GCM (rustls's and OpenSSL's
/// default first choice): it costs about 30% less CPU per byte, and the
/// SSH side prefers aes128-gcm for the same reason. Both are TLS 1.3's
/// standard suites.
pub fn provider() -> CryptoProvider {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    p.cipher_suites = rustls::crypto::ring::default_provider().cipher_suites;
    let rank = |s: &rustls::SupportedCipherSuite| match s.suite() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => 1,
        _ if s.tls13().is_some() => 2,
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 3,
        _ => 4,
    };
    // A stable sort keeps the provider's order within a rank.
    p.cipher_suites.sort_by_key(rank);
    p
}

/// The client configuration: trust as asked, ALPN protocols as given.
pub fn client_config(
    opts: &TlsOptions,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ClientConfig>, HttpError> {
    let provider = Arc::new(provider());
    let pins = opts
        .pins
        .iter()
        .map(|p| parse_pin(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(HttpError::Usage)?;
    let mut exact = Vec::new();
    let webpki = if pins.is_empty() && !opts.insecure {
        let (store, certs) = roots(opts)?;
        exact = certs;
        Some(
            WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                .build()
                .map_err(|e| HttpError::Usage(format!("TLS roots: {e}")))?,
        )
    } else {
        None
    };
    let verifier = Verifier {
        webpki,
        pins,
        exact,
        insecure: opts.insecure,
        algs: provider.signature_verification_algorithms,
    };
    let mut cfg =
        rustls::ClientConfig::builder_with_provider(provider.clone() as Arc<CryptoProvider>)
            .with_safe_default_protocol_versions()
            .map_err(|e| HttpError::Usage(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(cfg))
}

/// Turn a failed TLS handshake into an error that says what to do.
pub fn handshake_error(origin: &str, e: std::io::Error) -> HttpError {
    let inner = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .cloned();
    match inner {
        Some(
            err @ (rustls::Error::InvalidCertificate(_) | rustls::Error::General(_)),
        ) => HttpError::Trust(format!(
            "{origin}: the server's certificate is not trusted ({err}); if you expect this certificate, pass --cacert FILE (its CA or the certificate itself) or --pin sha256:HEX (ferry serve prints it); --insecure turns checking off"
        )),
        Some(err) => HttpError::Network(format!("{origin}: TLS handshake failed: {err}")),
        None => HttpError::Network(format!("{origin}: TLS handshake failed: {e}")),
    }
}

/// How many bytes to leave at the front of `buf` (which must have 4 KiB of
/// spare capacity for it) so that what follows a `head` of `head` bytes
/// starts at `page_offset` within a 4 KiB page.
pub fn skew_to(buf: &[u8], head: usize, page_offset: usize) -> usize {
    let at = (buf.as_ptr() as usize).wrapping_add(head) % 4096;
    (page_offset % 4096 + 4096 - at) % 4096
}

/// Where plaintext headed for rustls should start within a 4 KiB page. rustls copies each record's
/// plaintext into a fresh buffer, 5 bytes past the start of a block that
/// mimalloc places on a page boundary (16 KiB records fall in its 20 KiB
/// size class). When the source also starts on a page boundary, the
/// destination runs 5 bytes ahead of it modulo 4 KiB, and every load
/// waits on a store to the same page offset ("4K aliasing"): that copy
/// alone was a third of ferry serve's CPU on an HTTP/1.1 download. ferry
/// serve's file bodies and ferry cp's upload bodies are read to here. Half a
/// page apart, the copy runs at memory speed.
pub const PLAINTEXT_PAGE_OFFSET: usize = 2048 + 5;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn pins_parse() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let p = parse_pin(&format!("sha256:{hex}")).unwrap();
        assert_eq!(p[1], 0x11);
        assert_eq!(parse_pin(hex).unwrap(), p);
        let colons: Vec<String> = hex
            .as_bytes()
            .chunks(2)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        assert_eq!(parse_pin(&colons.join(":")).unwrap(), p);
        assert!(parse_pin("sha256:abc").is_err());
        assert!(parse_pin(&format!("sha256:{}", "zz".repeat(32))).is_err());
    }

    #[test]
    fn provider_mixes_ring_ciphers_with_aws_lc_key_exchange() {
        let p = provider();
        assert_eq!(
            p.cipher_suites.first().map(|s| s.suite()),
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256)
        );
        assert!(p
            .kx_groups
            .iter()
            .any(|g| g.name() == rustls::NamedGroup::X25519MLKEM768));
        // rustls accepts the mix for both ends.
        let p = Arc::new(p);
        assert!(rustls::ClientConfig::builder_with_provider(p.clone())
            .with_safe_default_protocol_versions()
            .is_ok());
        assert!(rustls::ServerConfig::builder_with_provider(p)
            .with_safe_default_protocol_versions()
            .is_ok());
    }
}
