//! A real vsftpd on 127.0.0.1 for the FTP(S) tests, started by ferry
//! bench's harness (`ferry_bench::servers::Vsftpd`: its own config file on
//! a free port, anonymous login as the launching user with uploads, passive
//! mode on 127.0.0.1) and stopped by PID (its process group: the listener
//! and every session) when dropped or [`Ftpd::kill`]ed.
//!
//! vsftpd refuses local-user logins when it runs as the launching user,
//! so the password tests use its one check that works there: anonymous
//! logins must give a password from a list (`secure_email_list_enable`).
use std::path::{Path, PathBuf};

use ferry_bench::servers::{Vsftpd, VsftpdOptions};
use tempfile::TempDir;

use super::tempdir;

pub const VSFTPD_BIN: &str = "/usr/sbin/vsftpd";
/// The password of [`VsftpdOptions::password`] servers.
pub const FTP_PASS: &str = "s3cret-ftp";

pub struct Ftpd {
    /// What the server serves as the login directory.
    root: TempDir,
    dir: TempDir,
    opts: VsftpdOptions,
    server: Option<Vsftpd>,
    port: u16,
}

/// vsftpd with `opts`, or `None` (and a message) when it is not installed.
pub fn vsftpd_or_skip(test: &str, opts: VsftpdOptions) -> Option<Ftpd> {
    if !Path::new(VSFTPD_BIN).exists() {
        eprintln!("SKIPPED {test}: {VSFTPD_BIN} not found (apt-get install vsftpd)");
        return None;
    }
    let root = tempdir();
    let dir = tempdir();
    let server = Vsftpd::start_with(dir.path(), root.path(), &opts)
        .unwrap_or_else(|e| panic!("vsftpd: {e:#}"));
    let port = server.port;
    Some(Ftpd {
        root,
        dir,
        opts: VsftpdOptions {
            port: Some(port),
            ..opts
        },
        server: Some(server),
        port,
    })
}

impl Ftpd {
    /// The listener's PID (it forks a process per session).
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(|s| s.guard.pid() as u32)
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `ftp://127.0.0.1:PORT/path` (path relative to the login directory).
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.opts.implicit_tls {
            "ftps"
        } else {
            "ftp"
        };
        format!("{scheme}://127.0.0.1:{}/{path}", self.port)
    }

    /// Stop the server hard: the listener and every session (transfers in
    /// flight die with them).
    pub fn kill(&mut self) {
        self.server = None;
    }

    /// Start again on the same port, with `max_rate` bytes/s per transfer.
    pub fn restart(&mut self, max_rate: u64) {
        self.server = None;
        self.opts.max_rate = max_rate;
        let s = Vsftpd::start_with(self.dir.path(), self.root.path(), &self.opts)
            .unwrap_or_else(|e| panic!("vsftpd restart: {e:#}"));
        self.server = Some(s);
    }

    /// The server's certificate (PEM), with TLS.
    pub fn cert(&self) -> PathBuf {
        self.server
            .as_ref()
            .and_then(|s| s.cert.clone())
            .unwrap_or_else(|| panic!("this vsftpd has no TLS"))
    }

    /// `sha256:XX:YY:...` of the certificate, as --pin takes it.
    pub fn pin(&self) -> String {
        format!("sha256:{}", super::cert_sha256(&self.cert()))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("vsftpd.log")).unwrap_or_default()
    }
}
