//! `known_hosts` files (ferry_ssh_config::known_hosts): plain and hashed
//! host patterns, `@revoked` and `@cert-authority` markers, base64 key
//! blobs, as `ssh` and users leave them. The first byte picks the host,
//! port and whether a learned line is hashed; the rest is the file, written
//! to a private directory (the public API reads files, as ferry does).
//! Nothing may panic; after `learn` records a key, `check` must find it
//! (or find it revoked) whatever the file held before.

use std::path::PathBuf;
use std::sync::OnceLock;

use ferry_ssh_config::known_hosts::{
    check, check_cert_authority, learn, revoked_in, HostKeyStatus,
};

/// An ssh-ed25519 public key blob, the seeds' key.
const BLOB: &[u8] = &[
    0, 0, 0, 11, 115, 115, 104, 45, 101, 100, 50, 53, 53, 49, 57, 0, 0, 0, 32, 189, 190, 61, 107,
    133, 84, 2, 142, 243, 11, 36, 124, 97, 239, 178, 9, 26, 213, 30, 186, 177, 45, 231, 164, 156,
    153, 143, 81, 184, 211, 220, 108,
];
const HOSTS: [&str; 4] = ["example.test", "127.0.0.1", "Host.Test", "::1"];

/// The scratch directory this process's inputs are written to.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("ferry-fuzz-known-hosts-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("fuzz scratch directory");
        d
    })
}

/// One input of the `known_hosts` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn known_hosts(data: &[u8]) {
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let path = dir().join("known_hosts");
    std::fs::write(&path, text).expect("write scratch known_hosts");
    let files = [path.clone(), dir().join("missing")];
    let host = HOSTS[usize::from(pick & 3)];
    let port = if pick & 4 == 0 { 22 } else { 2222 };
    let _ = check(&files, host, port, "ssh-ed25519", BLOB);
    let _ = check(&files, host, port, "rsa-sha2-512", BLOB);
    let _ = check_cert_authority(&files, host, port, BLOB, &[BLOB]);
    let _ = revoked_in(&path, &[BLOB]);

    learn(&path, host, port, "ssh-ed25519", BLOB, pick & 8 != 0).expect("learn");
    let after = check(&files, host, port, "ssh-ed25519", BLOB).expect("check");
    assert!(
        matches!(
            after,
            HostKeyStatus::Match { .. } | HostKeyStatus::Revoked { .. }
        ),
        "{after:?}"
    );
}

/// Removes this process's scratch directory (libFuzzer never returns, so
/// only a replay calls it, when done).
pub fn remove_scratch() {
    let _ = std::fs::remove_dir_all(dir());
}
