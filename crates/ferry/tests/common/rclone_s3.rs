//! A second S3 implementation for the S3 tests: `rclone serve s3`
//! (rclone 1.65 or later; Debian's 1.60 lacks it), serving a local
//! directory (each top-level directory is a bucket, object `K` of bucket
//! `B` is the file `root/B/K`), on a free 127.0.0.1 port, with TLS from a
//! fresh self-signed certificate and its own access and secret keys.
//! Installed by scripts/install-peers.sh as /usr/local/bin/rclone-s3
//! (kept apart from Debian's /usr/bin/rclone, which the other tests and
//! the benchmark use as a client). Stopped by PID when dropped.
//!
//! [`S3Peer`] is what the tests that run against both servers need from
//! either one.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tempfile::TempDir;

use super::versitygw::{store_dir, Versitygw};
use super::{installed, start_listening};

pub const ACCESS_KEY: &str = "ferryrcloneaccess";
pub const SECRET_KEY: &str = "ferryrclonesecret0123456789";

/// What a test needs from an S3 server on loopback.
pub trait S3Peer {
    /// The environment a ferry run needs to reach it.
    fn env(&self) -> Vec<(String, String)>;
    /// The directory whose subdirectories are the buckets.
    fn root(&self) -> PathBuf;
    fn name(&self) -> &'static str;
}

impl S3Peer for Versitygw {
    fn env(&self) -> Vec<(String, String)> {
        Versitygw::env(self)
    }
    fn root(&self) -> PathBuf {
        Versitygw::root(self)
    }
    fn name(&self) -> &'static str {
        "versitygw"
    }
}

pub struct RcloneS3 {
    dir: TempDir,
    child: Option<Child>,
    pub port: u16,
    pub cert: PathBuf,
}

/// `rclone-s3` (install-peers.sh's name for rclone >= 1.65), else an
/// `rclone` from `go install` in ~/go/bin when it is new enough.
pub fn rclone_s3_bin() -> Option<PathBuf> {
    installed("rclone-s3", "rclone", serves_s3)
}

/// Does this rclone have `serve s3` (1.65 and later)?
fn serves_s3(bin: &Path) -> bool {
    Command::new(bin)
        .args(["serve", "s3", "--help"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `rclone serve s3` with buckets `buckets`, or `None` (and a message)
/// when no rclone new enough is installed.
pub fn rclone_s3_or_skip(test: &str, buckets: &[&str]) -> Option<RcloneS3> {
    let Some(bin) = rclone_s3_bin() else {
        eprintln!(
            "SKIPPED {test}: rclone >= 1.65 (rclone-s3) not found (scripts/install-peers.sh installs it with go install)"
        );
        return None;
    };
    Some(RcloneS3::start(&bin, buckets))
}

impl RcloneS3 {
    pub fn start(bin: &Path, buckets: &[&str]) -> RcloneS3 {
        let (dir, root, cert, key) = store_dir(buckets);
        let conf = dir.path().join("rclone.conf");
        std::fs::write(&conf, "").unwrap_or_else(|e| panic!("rclone.conf: {e}"));
        let (child, port) =
            start_listening("rclone serve s3", &dir.path().join("rclone.log"), |port| {
                let mut c = Command::new(bin);
                c.arg("--config")
                    .arg(&conf)
                    .args(["serve", "s3", "--auth-key"])
                    .arg(format!("{ACCESS_KEY},{SECRET_KEY}"))
                    .arg("--addr")
                    .arg(format!("127.0.0.1:{port}"))
                    .arg("--cert")
                    .arg(&cert)
                    .arg("--key")
                    .arg(&key)
                    .arg(&root)
                    // rclone's own S3 client settings must not leak in.
                    .env_remove("AWS_CA_BUNDLE");
                c
            });
        RcloneS3 {
            dir,
            child: Some(child),
            port,
            cert,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("rclone.log")).unwrap_or_default()
    }
}

impl S3Peer for RcloneS3 {
    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET_KEY.into()),
            (
                "AWS_ENDPOINT_URL".into(),
                format!("https://127.0.0.1:{}", self.port),
            ),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_CA_BUNDLE".into(), self.cert.display().to_string()),
        ]
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    fn name(&self) -> &'static str {
        "rclone serve s3"
    }
}

impl Drop for RcloneS3 {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
