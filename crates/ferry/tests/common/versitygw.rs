//! A real S3 server on 127.0.0.1 for the S3 tests: versitygw (Apache-2.0,
//! installed by scripts/install-peers.sh from the Go module proxy) with its
//! POSIX backend in a temporary directory, its own root access and secret
//! keys, a free port, and TLS with a fresh self-signed certificate (so
//! ferry's certificate check is exercised: the tests trust it through
//! `AWS_CA_BUNDLE`). Stopped by PID when dropped.
//!
//! The POSIX backend stores bucket `B`'s object `K` as the file `root/B/K`,
//! so tests check uploads byte for byte on disk, and unfinished multipart
//! uploads under `root/B/.sgwtmp/multipart/`.
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use tempfile::TempDir;

use super::{installed, start_listening, tempdir};

/// A temporary directory for an S3 server: `root/` with one directory per
/// bucket, and a fresh self-signed certificate and key beside it.
pub fn store_dir(buckets: &[&str]) -> (TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempdir();
    let root = dir.path().join("root");
    for b in buckets {
        std::fs::create_dir_all(root.join(b)).unwrap_or_else(|e| panic!("mkdir {b}: {e}"));
    }
    let (cert, key) = ferry_bench::servers::self_signed_cert(dir.path())
        .unwrap_or_else(|e| panic!("certificate: {e:#}"));
    (dir, root, cert, key)
}

pub const ACCESS_KEY: &str = "ferrytestaccess";
pub const SECRET_KEY: &str = "ferrytestsecret0123456789";

pub struct Versitygw {
    dir: TempDir,
    child: Option<Child>,
    pub port: u16,
    pub cert: PathBuf,
    tls: bool,
}

/// versitygw on PATH or in /usr/local/bin, or where Go puts it.
pub fn versitygw_bin() -> Option<PathBuf> {
    installed("versitygw", "versitygw", |_| true)
}

/// versitygw with buckets `buckets`, or `None` (and a message) when it is
/// not installed.
pub fn versitygw_or_skip(test: &str, buckets: &[&str]) -> Option<Versitygw> {
    let Some(bin) = versitygw_bin() else {
        eprintln!(
            "SKIPPED {test}: versitygw not found (scripts/install-peers.sh installs it with go install)"
        );
        return None;
    };
    Some(Versitygw::start(&bin, buckets))
}

impl Versitygw {
    pub fn start(bin: &Path, buckets: &[&str]) -> Versitygw {
        Self::start_with(bin, buckets, true)
    }

    /// `tls: false`: plain HTTP (for a test proxy in front of it).
    pub fn start_with(bin: &Path, buckets: &[&str], tls: bool) -> Versitygw {
        let (dir, root, cert, key) = store_dir(buckets);
        let (child, port) =
            start_listening("versitygw", &dir.path().join("versitygw.log"), |port| {
                let mut c = Command::new(bin);
                c.args(["--access", ACCESS_KEY, "--secret", SECRET_KEY, "--quiet"])
                    .arg("--port")
                    .arg(format!("127.0.0.1:{port}"))
                    .args(if tls {
                        vec![
                            "--cert".into(),
                            cert.clone().into_os_string(),
                            "--key".into(),
                            key.clone().into_os_string(),
                        ]
                    } else {
                        Vec::<std::ffi::OsString>::new()
                    })
                    .arg("posix")
                    .arg(&root);
                c
            });
        Versitygw {
            dir,
            child: Some(child),
            port,
            cert,
            tls,
        }
    }

    /// The POSIX backend's top directory (one subdirectory per bucket).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The environment a ferry run needs to reach this server: keys,
    /// endpoint, region, the CA bundle that trusts its certificate.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET_KEY.into()),
            ("AWS_ENDPOINT_URL".into(), self.endpoint()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_CA_BUNDLE".into(), self.cert.display().to_string()),
        ]
    }

    /// Unfinished multipart uploads of `bucket` left on disk.
    pub fn leftover_uploads(&self, bucket: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mp = self.root().join(bucket).join(".sgwtmp/multipart");
        let mut stack = vec![mp];
        while let Some(d) = stack.pop() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                for e in rd.flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        stack.push(p);
                    } else {
                        out.push(p);
                    }
                }
            }
        }
        out
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("versitygw.log")).unwrap_or_default()
    }
}

impl Drop for Versitygw {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `len` pseudo-random bytes (xorshift, seeded): the S3 tests' objects.
pub fn data(len: usize, seed: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9u32 ^ u32::from(seed);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Every file under `dir` (relative path, bytes), sorted; versitygw keeps
/// its own state under `.sgwtmp`, which is left out.
pub fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_name() == ".sgwtmp" {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}
