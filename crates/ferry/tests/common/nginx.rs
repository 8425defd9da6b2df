//! A real nginx on 127.0.0.1 for the HTTP(S) tests: its own config, pid
//! file, logs and temp paths in a temporary directory, `daemon off` and
//! `master_process off` so the one process it runs is ours, killed by PID
//! when dropped.
//!
//! One server block on two free ports: HTTPS (TLS 1.3, h2) with a fresh
//! self-signed P-256 certificate for 127.0.0.1/localhost, and plain HTTP.
//! Locations:
//! - `/` static files from `www/`, autoindex on (HTML);
//! - `/upload/` WebDAV PUT with create_full_put_path;
//! - `/loop` and `/loop2` redirect to each other;
//! - `/error500` answers 500, `/forbidden/` 403;
//! - `/noranges/` ignores Range (max_ranges 0);
//! - `/slow/` sends at 1 MB/s (to interrupt a transfer);
//! - `/gz/` gzips text;
//! - `/jsondir/` answers a directory with its `listing.json` (to stand in
//!   for ferry serve's JSON listing);
//! - `/digest/` sends `Repr-Digest: sha-256=:<digest>:` as given to start;
//! - `/private/` wants Basic [`BASIC_USER`]:[`BASIC_PASS`], `/bearer/`
//!   the token [`BEARER`].
use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::{free_port, run_checked, tempdir};

pub const NGINX_BIN: &str = "/usr/sbin/nginx";
/// Basic credentials `/private/` accepts.
pub const BASIC_USER: &str = "alice";
pub const BASIC_PASS: &str = "wonderland";
/// The Bearer token `/bearer/` accepts.
pub const BEARER: &str = "sekrit-token";

pub struct Nginx {
    dir: TempDir,
    child: Option<Child>,
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

impl Nginx {
    /// Start nginx; `/digest/` answers with the given Repr-Digest value.
    pub fn start(repr_digest: &str) -> Nginx {
        let dir = tempdir();
        let d = dir.path();
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
            "tmp",
        ] {
            fs::create_dir_all(d.join(sub)).unwrap_or_else(|e| panic!("mkdir {sub}: {e}"));
        }
        run_checked(
            Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                ])
                .args([
                    "-subj",
                    "/CN=localhost",
                    "-addext",
                    "subjectAltName=IP:127.0.0.1,DNS:localhost",
                ])
                .args(["-days", "2"])
                .arg("-keyout")
                .arg(d.join("key.pem"))
                .arg("-out")
                .arg(d.join("cert.pem")),
        );
        let hash = run_checked(Command::new("openssl").args(["passwd", "-apr1", BASIC_PASS]));
        let hash = String::from_utf8_lossy(&hash.stdout).trim().to_string();
        fs::write(d.join("htpasswd"), format!("{BASIC_USER}:{hash}\n"))
            .unwrap_or_else(|e| panic!("htpasswd: {e}"));
        let (https_port, http_port, h2c_port) = (free_port(), free_port(), free_port());
        let conf = config(d, (https_port, http_port, h2c_port), repr_digest);
        fs::write(d.join("nginx.conf"), conf).unwrap_or_else(|e| panic!("nginx.conf: {e}"));
        let child = spawn(d);
        let mut n = Nginx {
            dir,
            child: Some(child),
            https_port,
            http_port,
            h2c_port,
        };
        if !n.wait_ready() {
            let log = n.error_log();
            n.stop();
            panic!("nginx did not start:\n{log}");
        }
        n
    }

    /// Stop nginx (as if it crashed) and start it again on the same ports.
    pub fn restart(&mut self) {
        self.stop();
        for _ in 0..50 {
            self.child = Some(spawn(self.dir.path()));
            if self.wait_ready() {
                return;
            }
            // The old socket may linger a moment.
            self.stop();
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("nginx did not restart:\n{}", self.error_log());
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    return false;
                }
            }
            let up = |p: u16| TcpStream::connect(("127.0.0.1", p)).is_ok();
            if up(self.https_port) && up(self.http_port) && up(self.h2c_port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
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
        fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
    pub fn access_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

fn spawn(d: &Path) -> Child {
    Command::new(NGINX_BIN)
        .arg("-p")
        .arg(d)
        .arg("-c")
        .arg(d.join("nginx.conf"))
        .arg("-e")
        .arg(d.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start nginx: {e}"))
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

fn config(
    d: &Path,
    (https_port, http_port, h2c_port): (u16, u16, u16),
    repr_digest: &str,
) -> String {
    let d = d.display();
    format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 1024; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    types {{ text/html html; text/plain txt; application/json json; }}
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{https_port} ssl http2;
        listen 127.0.0.1:{http_port};
        listen 127.0.0.1:{h2c_port} http2;
        server_name localhost;
        ssl_certificate {d}/cert.pem;
        ssl_certificate_key {d}/key.pem;
        ssl_protocols TLSv1.3;
        http2_max_concurrent_streams 256;
        root {d}/www;
        location / {{ autoindex on; }}
        location /upload/ {{
            dav_methods PUT DELETE MKCOL;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
            client_max_body_size 0;
            autoindex on;
        }}
        location = /loop {{ return 302 /loop2; }}
        location = /loop2 {{ return 302 /loop; }}
        location = /error500 {{ return 500; }}
        location /forbidden/ {{ deny all; }}
        location /noranges/ {{ max_ranges 0; }}
        location /slow/ {{ limit_rate 1m; }}
        location /gz/ {{ gzip on; gzip_types text/plain application/octet-stream; gzip_min_length 0; }}
        location /jsondir/ {{ index listing.json; }}
        location /digest/ {{ add_header Repr-Digest "{repr_digest}" always; }}
        location /private/ {{ auth_basic "ferry"; auth_basic_user_file {d}/htpasswd; }}
        location /bearer/ {{ if ($http_authorization != "Bearer {BEARER}") {{ return 401; }} }}
    }}
}}
"#
    )
}
