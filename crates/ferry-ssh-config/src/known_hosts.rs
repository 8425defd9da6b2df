//! Checking and recording server host keys in OpenSSH `known_hosts` files
//! (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"), so ferry trusts exactly the keys
//! `ssh` trusts and records new ones where `ssh` will find them.
//!
//! Keys are compared by type name and raw public-key blob (the SSH wire
//! encoding that the file stores in base64), so this module needs no SSH
//! library. The files are treated as untrusted input: lines that do not
//! parse are skipped, never fatal.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use base64::alphabet;
use base64::engine::general_purpose::{
    GeneralPurpose, GeneralPurposeConfig, STANDARD, STANDARD_NO_PAD,
};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::pattern::match_list;

/// Padding is optional when reading: hand-edited files sometimes lack it.
const LENIENT_B64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Magic prefix of a hashed host name (`HashKnownHosts`).
const HASH_MAGIC: &str = "|1|";

/// What the known_hosts files say about a host's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyStatus {
    /// A line for this host has exactly this key.
    Match {
        path: PathBuf,
        line: usize,
    },
    /// The host is known with a key of the same type but different value:
    /// possibly an attack; refuse loudly.
    Mismatch {
        path: PathBuf,
        line: usize,
        known_algorithm: String,
    },
    /// An `@revoked` line lists this key (for any host): refuse.
    Revoked {
        path: PathBuf,
        line: usize,
    },
    /// The host is known, but only with keys of other types.
    OtherTypesKnown {
        algorithms: Vec<String>,
    },
    NotFound,
}

/// The host-key *type* for an algorithm name. RSA servers sign with
/// `rsa-sha2-256`/`rsa-sha2-512`, but the key (and the file) says `ssh-rsa`.
pub fn key_type(algorithm: &str) -> &str {
    match algorithm {
        "rsa-sha2-256" | "rsa-sha2-512" => "ssh-rsa",
        other => other,
    }
}

/// The name under which a host is recorded: `host` for port 22, otherwise
/// `[host]:port`.
pub fn host_port_name(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// SHA256 fingerprint as OpenSSH prints it: `SHA256:` and unpadded base64.
pub fn fingerprint_sha256(key_blob: &[u8]) -> String {
    format!(
        "SHA256:{}",
        STANDARD_NO_PAD.encode(Sha256::digest(key_blob))
    )
}

/// The key type string at the start of a wire-encoded key blob.
fn blob_key_type(blob: &[u8]) -> Option<&str> {
    let len_bytes: [u8; 4] = blob.get(..4)?.try_into().ok()?;
    let len = usize::try_from(u32::from_be_bytes(len_bytes)).ok()?;
    let name = blob.get(4..4usize.checked_add(len)?)?;
    std::str::from_utf8(name).ok()
}

#[derive(Debug, PartialEq, Eq)]
enum Marker {
    None,
    Revoked,
    CertAuthority,
}

struct Entry<'a> {
    marker: Marker,
    hosts: &'a str,
    key_type: &'a str,
    blob: Vec<u8>,
}

/// Parse one line; `None` for blank lines, comments and anything malformed.
fn parse_line(line: &str) -> Option<Entry<'_>> {
    let mut fields = line.split_ascii_whitespace();
    let mut first = fields.next()?;
    if first.starts_with('#') {
        return None;
    }
    let marker = if let Some(m) = first.strip_prefix('@') {
        let marker = match m {
            "revoked" => Marker::Revoked,
            "cert-authority" => Marker::CertAuthority,
            _ => return None,
        };
        first = fields.next()?;
        marker
    } else {
        Marker::None
    };
    let key_type = fields.next()?;
    let blob = LENIENT_B64.decode(fields.next()?).ok()?;
    // A blob whose embedded type disagrees with the type field is corrupt
    // (OpenSSH rejects it too); comparing it would be meaningless.
    if blob_key_type(&blob) != Some(key_type) {
        return None;
    }
    Some(Entry {
        marker,
        hosts: first,
        key_type,
        blob,
    })
}

/// Whether a line's host field covers `name` (already lower-cased and in
/// `[host]:port` form where needed).
fn hosts_match(hosts: &str, name: &str) -> bool {
    match hosts.strip_prefix(HASH_MAGIC) {
        Some(hashed) => {
            let Some((salt, hash)) = hashed.split_once('|') else {
                return false;
            };
            let (Ok(salt), Ok(hash)) = (LENIENT_B64.decode(salt), LENIENT_B64.decode(hash)) else {
                return false;
            };
            let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(&salt) else {
                return false;
            };
            mac.update(name.as_bytes());
            mac.verify_slice(&hash).is_ok()
        }
        None => match_list(name, hosts, true),
    }
}

/// Look `host` (on `port`) up in `files`, in order; missing files are skipped.
///
/// Precedence: an `@revoked` line with this key anywhere wins, then an exact
/// match, then a same-type different key (first in file order), then other
/// key types known for the host. `@cert-authority` lines are not host keys
/// and are ignored.
pub fn check(
    files: &[PathBuf],
    host: &str,
    port: u16,
    algorithm: &str,
    key_blob: &[u8],
) -> io::Result<HostKeyStatus> {
    // ssh lower-cases the host before lookup; hashed entries depend on it.
    let name = host_port_name(&host.to_ascii_lowercase(), port);
    let want_type = key_type(algorithm);
    let mut matched = None;
    let mut mismatch = None;
    let mut others: Vec<String> = Vec::new();
    for path in files {
        let Some(text) = read_known_hosts(path)? else {
            continue;
        };
        for (index, line) in text.lines().enumerate() {
            let Some(entry) = parse_line(line) else {
                continue;
            };
            let line = index + 1;
            match entry.marker {
                Marker::CertAuthority => continue,
                // Stricter than OpenSSH (which also requires the host field
                // to match): a key revoked anywhere is not trusted anywhere.
                Marker::Revoked => {
                    if entry.blob == key_blob {
                        return Ok(HostKeyStatus::Revoked {
                            path: path.clone(),
                            line,
                        });
                    }
                    continue;
                }
                Marker::None => {}
            }
            if !hosts_match(entry.hosts, &name) {
                continue;
            }
            if entry.key_type == want_type {
                if entry.blob == key_blob {
                    matched.get_or_insert((path.clone(), line));
                } else {
                    mismatch.get_or_insert((path.clone(), line, entry.key_type.to_string()));
                }
            } else if !others.iter().any(|a| a == entry.key_type) {
                others.push(entry.key_type.to_string());
            }
        }
    }
    Ok(if let Some((path, line)) = matched {
        HostKeyStatus::Match { path, line }
    } else if let Some((path, line, known_algorithm)) = mismatch {
        HostKeyStatus::Mismatch {
            path,
            line,
            known_algorithm,
        }
    } else if !others.is_empty() {
        HostKeyStatus::OtherTypesKnown { algorithms: others }
    } else {
        HostKeyStatus::NotFound
    })
}

/// A file's text, or `None` when it does not exist.
fn read_known_hosts(path: &Path) -> io::Result<Option<String>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("reading {}: {e}", path.display()),
        )),
    }
}

/// The magic that starts an OpenSSH binary Key Revocation List
/// (PROTOCOL.krl), which `RevokedHostKeys` may also name.
const KRL_MAGIC: &[u8] = b"SSHKRL\n\0";

/// `RevokedHostKeys` (ssh_config(5)): the line of `path` that lists one of
/// `blobs` (wire-encoded public keys: the host key, or a certificate's CA,
/// key and whole certificate), or `None` when none is listed.
///
/// The file lists public keys one per line (`TYPE BASE64 [COMMENT]`, as in a
/// `.pub` file; `#` comments and blank lines skipped). As in OpenSSH, a file
/// that does not exist or cannot be read is an error, which the caller turns
/// into refusing every host key; so is a binary KRL, which ferry does not
/// parse: failing closed is the only safe reading of a revocation list
/// ferry cannot read.
pub fn revoked_in(path: &Path, blobs: &[&[u8]]) -> io::Result<Option<usize>> {
    let bytes = fs::read(path).map_err(|e| {
        io::Error::new(e.kind(), format!("RevokedHostKeys {}: {e}", path.display()))
    })?;
    if bytes.starts_with(KRL_MAGIC) {
        return Err(invalid(format!(
            "RevokedHostKeys {} is a binary key revocation list (ssh-keygen -k), which ferry \
             cannot read; list the revoked public keys one per line instead",
            path.display()
        )));
    }
    let text = String::from_utf8_lossy(&bytes);
    for (n, line) in text.lines().enumerate() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(key_type), Some(b64)) = (fields.next(), fields.next()) else {
            continue;
        };
        if key_type.starts_with('#') {
            continue;
        }
        let Ok(blob) = LENIENT_B64.decode(b64) else {
            continue;
        };
        if blob_key_type(&blob) == Some(key_type) && blobs.contains(&blob.as_slice()) {
            return Ok(Some(n + 1));
        }
    }
    Ok(None)
}

/// What the known_hosts files say about the authority that signed a host
/// certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertAuthorityStatus {
    /// An `@cert-authority` line whose patterns cover the host lists this
    /// CA key.
    Trusted { path: PathBuf, line: usize },
    /// An `@revoked` line lists the CA (`revoked_index` `None`) or
    /// `revocable[i]` (`Some(i)`).
    Revoked {
        path: PathBuf,
        line: usize,
        revoked_index: Option<usize>,
    },
    /// No `@cert-authority` line for this host lists this CA;
    /// `other_authorities` counts the lines for this host with other CAs.
    NotTrusted { other_authorities: usize },
}

/// Look up the authority of a host certificate for `host` on `port`
/// (matched as `[host]:port` unless the port is 22, as for host keys).
///
/// `ca_blob` is the wire encoding of the CA's public key (the
/// certificate's signature key); `revocable` are the blobs an `@revoked`
/// line may name to refuse this certificate: the CA, the certified key,
/// and the whole certificate. Revocation wins over trust wherever it is.
/// This decides only whether the CA is trusted for this host; the
/// certificate's own checks (signature, type, principals, validity) are the
/// caller's.
pub fn check_cert_authority(
    files: &[PathBuf],
    host: &str,
    port: u16,
    ca_blob: &[u8],
    revocable: &[&[u8]],
) -> io::Result<CertAuthorityStatus> {
    let name = host_port_name(&host.to_ascii_lowercase(), port);
    let mut trusted = None;
    let mut other_authorities = 0;
    for path in files {
        let Some(text) = read_known_hosts(path)? else {
            continue;
        };
        for (index, line) in text.lines().enumerate() {
            let Some(entry) = parse_line(line) else {
                continue;
            };
            let line = index + 1;
            match entry.marker {
                Marker::Revoked => {
                    let revoked_index = if entry.blob == ca_blob {
                        None
                    } else if let Some(i) = revocable.iter().position(|b| entry.blob == *b) {
                        Some(i)
                    } else {
                        continue;
                    };
                    return Ok(CertAuthorityStatus::Revoked {
                        path: path.clone(),
                        line,
                        revoked_index,
                    });
                }
                Marker::CertAuthority => {
                    if !hosts_match(entry.hosts, &name) {
                        continue;
                    }
                    if entry.blob == ca_blob {
                        trusted.get_or_insert((path.clone(), line));
                    } else {
                        other_authorities += 1;
                    }
                }
                Marker::None => {}
            }
        }
    }
    Ok(match trusted {
        Some((path, line)) => CertAuthorityStatus::Trusted { path, line },
        None => CertAuthorityStatus::NotTrusted { other_authorities },
    })
}

/// A hashed host field: `|1|base64(salt)|base64(HMAC-SHA1(salt, name))`.
fn hash_host(name: &str, salt: &[u8]) -> io::Result<String> {
    let mut mac = Hmac::<Sha1>::new_from_slice(salt)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    mac.update(name.as_bytes());
    Ok(format!(
        "{HASH_MAGIC}{}|{}",
        STANDARD.encode(salt),
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

fn random_salt() -> io::Result<[u8; 20]> {
    let mut salt = [0u8; 20];
    File::open("/dev/urandom")?.read_exact(&mut salt)?;
    Ok(salt)
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Append `host key` (or `[host]:port key` when port != 22) to `path`,
/// creating the parent directory (0700) and file (0600) as needed and
/// making sure the previous last line was terminated. With `hash`, the host
/// is written as a `|1|salt|hash` entry, as `HashKnownHosts yes` does.
pub fn learn(
    path: &Path,
    host: &str,
    port: u16,
    algorithm: &str,
    key_blob: &[u8],
    hash: bool,
) -> io::Result<()> {
    // Refuse anything that would make the line parse differently (or match
    // other hosts) when read back.
    let bad_char = |c: char| c.is_whitespace() || c.is_control() || c == ',';
    if host.is_empty() || host.contains(bad_char) || host.starts_with(['@', '|', '!', '#']) {
        return Err(invalid(format!(
            "refusing to record host key for unusable host name {host:?}"
        )));
    }
    if key_blob.is_empty() {
        return Err(invalid("refusing to record an empty host key".to_string()));
    }
    let key_type = blob_key_type(key_blob)
        .filter(|t| !t.is_empty() && !t.contains(bad_char))
        .unwrap_or_else(|| key_type(algorithm));
    if key_type.is_empty() || key_type.contains(bad_char) {
        return Err(invalid(format!("unusable key algorithm {algorithm:?}")));
    }
    let name = host_port_name(&host.to_ascii_lowercase(), port);
    let host_field = if hash {
        hash_host(&name, &random_salt()?)?
    } else {
        name
    };
    let mut entry = format!("{host_field} {key_type} {}\n", STANDARD.encode(key_blob));

    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder.create(parent)?;
    }
    let mut options = OpenOptions::new();
    options.read(true).append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    if file.metadata()?.len() > 0 {
        file.seek(SeekFrom::End(-1))?;
        let mut last = [0u8; 1];
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            entry.insert(0, '\n');
        }
    }
    // One write, so concurrent appenders do not interleave within a line.
    file.write_all(entry.as_bytes())?;
    file.flush()
}

#[cfg(test)]
#[path = "known_hosts_tests.rs"]
mod tests;
