//! A real nginx on 127.0.0.1 for the HTTP(S) tests, started by ferry
//! bench's harness (`ferry_bench::servers::Nginx`: its own config, logs,
//! temp paths and a fresh self-signed certificate for 127.0.0.1/localhost
//! in a temporary directory, free ports) and stopped by PID (master and
//! workers) when dropped or restarted.
//!
//! HTTPS (TLS 1.3, h2), plain HTTP and h2c on three ports, static files
//! from `www/` with autoindex (HTML), and the edge cases the tests need:
//! - `/upload/` WebDAV PUT with create_full_put_path;
//! - `/loop` and `/loop2` redirect to each other;
//! - `/error500` answers 500, `/forbidden/` 403;
//! - `/noranges/` ignores Range (max_ranges 0);
//! - `/slow/` sends at 1 MiB/s (to interrupt a transfer);
//! - `/gz/` gzips text;
//! - `/jsondir/` answers a directory with its `listing.json` (to stand in
//!   for ferry serve's JSON listing);
//! - `/digest/` sends `Repr-Digest: sha-256=:<digest>:` as given to start;
//! - `/private/` wants Basic [`BASIC_USER`]:[`BASIC_PASS`], `/bearer/`
//!   the token [`BEARER`].
use std::fs;
use std::path::{Path, PathBuf};

use ferry_bench::servers::{self, NginxLocation, NginxOptions};
use tempfile::TempDir;

use super::tempdir;

pub const NGINX_BIN: &str = "/usr/sbin/nginx";
/// Basic credentials `/private/` accepts.
pub const BASIC_USER: &str = "alice";
pub const BASIC_PASS: &str = "wonderland";
/// The Bearer token `/bearer/` accepts.
pub const BEARER: &str = "sekrit-token";

pub struct Nginx {
    dir: TempDir,
    opts: NginxOptions,
    server: Option<servers::Nginx>,
    pub https_port: u16,
    pub http_port: u16,
    /// Plain HTTP/2 with prior knowledge (h2c).
    pub h2c_port: u16,
}

/// nginx, or `None` (and a message) when it is not installed.
pub fn nginx_or_skip(test: &str) -> Option<Nginx> {
    if !Path::new(NGINX_BIN).exists() {
        eprintln!("SKIPPED {test}: {NGINX_BIN} not found (apt-get install nginx-light)");
        return None;
    }
    Some(Nginx::start(
        "sha-256=:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=:",
    ))
}

/// The test locations (see the module doc).
fn locations(repr_digest: &str) -> Vec<NginxLocation> {
    let p = |s: &str| s.to_string();
    vec![
        NginxLocation::Dav(p("/upload/")),
        NginxLocation::Redirect {
            from: p("/loop"),
            to: p("/loop2"),
        },
        NginxLocation::Redirect {
            from: p("/loop2"),
            to: p("/loop"),
        },
        NginxLocation::Status {
            path: p("/error500"),
            code: 500,
        },
        NginxLocation::Forbidden(p("/forbidden/")),
        NginxLocation::NoRanges(p("/noranges/")),
        NginxLocation::RateLimit {
            prefix: p("/slow/"),
            bytes_per_sec: 1 << 20,
        },
        NginxLocation::Gzip(p("/gz/")),
        NginxLocation::Index {
            prefix: p("/jsondir/"),
            file: p("listing.json"),
        },
        NginxLocation::Header {
            prefix: p("/digest/"),
            name: p("Repr-Digest"),
            value: repr_digest.to_string(),
        },
        NginxLocation::Basic {
            prefix: p("/private/"),
            user: p(BASIC_USER),
            pass: p(BASIC_PASS),
        },
        NginxLocation::Bearer {
            prefix: p("/bearer/"),
            token: p(BEARER),
        },
    ]
}

impl Nginx {
    /// Start nginx; `/digest/` answers with the given Repr-Digest value.
    pub fn start(repr_digest: &str) -> Nginx {
        let dir = tempdir();
        for sub in [
            "www",
            "www/upload",
            "www/forbidden",
            "www/noranges",
            "www/slow",
            "www/gz",
            "www/digest",
            "www/private",
            "www/bearer",
        ] {
            fs::create_dir_all(dir.path().join(sub)).unwrap_or_else(|e| panic!("mkdir {sub}: {e}"));
        }
        let opts = NginxOptions {
            plain: true,
            access_log: true,
            h2_streams: Some(256),
            locations: locations(repr_digest),
            ..NginxOptions::default()
        };
        let server = servers::Nginx::start_with(dir.path(), &dir.path().join("www"), &opts)
            .unwrap_or_else(|e| panic!("nginx did not start: {e:#}"));
        let (https_port, http_port, h2c_port) = (
            server.port,
            server.http_port.unwrap_or_default(),
            server.h2c_port.unwrap_or_default(),
        );
        Nginx {
            dir,
            opts: NginxOptions {
                port: Some(https_port),
                http_port: Some(http_port),
                h2c_port: Some(h2c_port),
                ..opts
            },
            server: Some(server),
            https_port,
            http_port,
            h2c_port,
        }
    }

    /// Stop nginx (transfers in flight die with it) and start it again on
    /// the same ports.
    pub fn restart(&mut self) {
        self.stop();
        let www = self.www();
        let mut last = String::new();
        for _ in 0..50 {
            match servers::Nginx::start_with(self.dir.path(), &www, &self.opts) {
                Ok(s) => {
                    self.server = Some(s);
                    return;
                }
                // The old sockets may linger a moment.
                Err(e) => last = format!("{e:#}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("nginx did not restart: {last}");
    }

    /// Stop nginx: SIGTERM, then SIGKILL to its process group.
    pub fn stop(&mut self) {
        self.server = None;
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    /// The served root.
    pub fn www(&self) -> PathBuf {
        self.dir.path().join("www")
    }
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }
    pub fn https(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.https_port)
    }
    pub fn h2c(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.h2c_port)
    }
    pub fn http(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }
    /// `sha256:HEX` of the certificate's DER, for --pin.
    pub fn pin(&self) -> String {
        let hex = super::cert_sha256(&self.cert()).replace(':', "");
        format!("sha256:{}", hex.to_ascii_lowercase())
    }
    pub fn error_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("logs/error.log")).unwrap_or_default()
    }
    pub fn access_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("logs/access.log")).unwrap_or_default()
    }
}
