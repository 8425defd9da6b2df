//! The server's identity, made once and kept: the SSH host key, the TLS
//! certificate and the bearer token live in a state directory so clients
//! that trusted them once keep trusting them after a restart.
//!
//! Layout of the state directory (created 0700, secrets 0600):
//! - `ssh_host_ed25519_key`: OpenSSH private key format;
//! - `tls-cert.pem`, `tls-key.pem`: a self-signed certificate for
//!   `localhost`, `127.0.0.1`, `::1` and the machine's host name;
//! - `token`: the HTTPS bearer token, when none is given on the command line.
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use russh::keys::{HashAlg, PrivateKey};
use sha2::Digest;

/// What [`Identity::load_or_create`] produced.
pub struct Identity {
    pub host_key: PrivateKey,
    /// PEM of the certificate chain and key.
    pub tls_cert_pem: Vec<u8>,
    pub tls_key_pem: Vec<u8>,
    /// SHA-256 of the end-entity certificate (DER), lowercase hex: what
    /// `ferry cp --pin sha256:...` takes.
    pub cert_sha256: String,
    pub token: String,
    /// Files created on this start, for the banner.
    pub created: Vec<PathBuf>,
}

/// The default state directory: `$XDG_DATA_HOME/ferry/serve`, i.e.
/// `~/.local/share/ferry/serve`.
pub fn default_state_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("ferry")
        .join("serve")
}

fn write_secret(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    fs::rename(&tmp, path)
}

fn ctx(path: &Path, what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {what}: {e}", path.display()))
}

impl Identity {
    /// Load the identity from `state`, creating what is missing. A TLS
    /// certificate given by the user (`tls`) is used as it is.
    pub fn load_or_create(
        state: &Path,
        tls: Option<(&Path, &Path)>,
        token: Option<&str>,
    ) -> io::Result<Identity> {
        fs::create_dir_all(state)
            .map_err(|e| ctx(state, "cannot create the state directory", e))?;
        let _ = fs::set_permissions(state, fs::Permissions::from_mode(0o700));
        let mut created = Vec::new();

        let key_path = state.join("ssh_host_ed25519_key");
        let host_key = if key_path.exists() {
            russh::keys::load_secret_key(&key_path, None).map_err(|e| {
                ctx(
                    &key_path,
                    "cannot read the host key (delete it to make a new one)",
                    e,
                )
            })?
        } else {
            let seed: [u8; 32] = rand::random();
            let pair = russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed);
            let key = PrivateKey::from(pair);
            let text = key
                .to_openssh(russh::keys::ssh_key::LineEnding::LF)
                .map_err(|e| ctx(&key_path, "cannot encode the host key", e))?;
            write_secret(&key_path, text.as_bytes())?;
            created.push(key_path.clone());
            key
        };

        let (tls_cert_pem, tls_key_pem) = match tls {
            Some((cert, key)) => (
                fs::read(cert).map_err(|e| ctx(cert, "cannot read the TLS certificate", e))?,
                fs::read(key).map_err(|e| ctx(key, "cannot read the TLS key", e))?,
            ),
            None => {
                let cert_path = state.join("tls-cert.pem");
                let tkey_path = state.join("tls-key.pem");
                if cert_path.exists() && tkey_path.exists() {
                    (
                        fs::read(&cert_path).map_err(|e| ctx(&cert_path, "cannot read", e))?,
                        fs::read(&tkey_path).map_err(|e| ctx(&tkey_path, "cannot read", e))?,
                    )
                } else {
                    let (c, k) = self_signed()?;
                    write_secret(&tkey_path, &k)?;
                    write_secret(&cert_path, &c)?;
                    created.push(cert_path);
                    (c, k)
                }
            }
        };
        let cert_sha256 = first_cert_sha256(&tls_cert_pem)?;

        let token = match token {
            Some(t) => t.to_string(),
            None => {
                let tpath = state.join("token");
                match fs::read_to_string(&tpath) {
                    Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
                    _ => {
                        let bytes: [u8; 24] = rand::random();
                        let t = hex(&bytes);
                        write_secret(&tpath, t.as_bytes())?;
                        created.push(tpath);
                        t
                    }
                }
            }
        };
        Ok(Identity {
            host_key,
            tls_cert_pem,
            tls_key_pem,
            cert_sha256,
            token,
            created,
        })
    }

    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fn host_key_fingerprint(&self) -> String {
        self.host_key
            .public_key()
            .fingerprint(HashAlg::Sha256)
            .to_string()
    }

    /// `ssh-ed25519 AAAA...`, for a known_hosts line.
    pub fn host_key_line(&self) -> String {
        self.host_key.public_key().to_openssh().unwrap_or_default()
    }
}

fn self_signed() -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if let Ok(h) = fs::read_to_string("/etc/hostname") {
        let h = h.trim();
        if !h.is_empty() && h != "localhost" {
            names.push(h.to_string());
        }
    }
    let ck = rcgen::generate_simple_self_signed(names)
        .map_err(|e| io::Error::other(format!("cannot make a TLS certificate: {e}")))?;
    Ok((
        ck.cert.pem().into_bytes(),
        ck.signing_key.serialize_pem().into_bytes(),
    ))
}

/// SHA-256 of the first certificate in a PEM bundle.
fn first_cert_sha256(pem: &[u8]) -> io::Result<String> {
    let text = String::from_utf8_lossy(pem);
    let begin = "-----BEGIN CERTIFICATE-----";
    let end = "-----END CERTIFICATE-----";
    let start = text
        .find(begin)
        .ok_or_else(|| io::Error::other("the TLS certificate file has no PEM certificate"))?;
    let rest = &text[start + begin.len()..];
    let stop = rest.find(end).ok_or_else(|| {
        io::Error::other("the TLS certificate file has an unterminated PEM block")
    })?;
    let b64: String = rest[..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    use base64::Engine;
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| io::Error::other(format!("the TLS certificate is not valid PEM: {e}")))?;
    Ok(hex(&sha2::Sha256::digest(&der)))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn identity_persists_across_starts() {
        let t = tempfile::tempdir().unwrap();
        let a = Identity::load_or_create(t.path(), None, None).unwrap();
        assert_eq!(a.created.len(), 3);
        let b = Identity::load_or_create(t.path(), None, None).unwrap();
        assert!(b.created.is_empty());
        assert_eq!(a.host_key_fingerprint(), b.host_key_fingerprint());
        assert_eq!(a.cert_sha256, b.cert_sha256);
        assert_eq!(a.token, b.token);
        assert_eq!(a.cert_sha256.len(), 64);
        assert!(a.host_key_line().starts_with("ssh-ed25519 "));
        let mode = fs::metadata(t.path().join("token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0);
        let c = Identity::load_or_create(t.path(), None, Some("given")).unwrap();
        assert_eq!(c.token, "given");
    }
}
