//! FTP and explicit FTPS (RFC 959, RFC 4217 `AUTH TLS`) over libunftp.
//!
//! [`Server::start`](crate::Server::start) accepts FTP control connections
//! on the same acceptor as SFTP and HTTPS (so `--max-connections` and the
//! shutdown grace period cover them too) and hands each to
//! [`FtpService::serve`] on a worker thread, which builds a libunftp server
//! for it and runs its control loop. libunftp parses the commands, runs
//! `AUTH TLS`/`PBSZ`/`PROT`, opens passive data connections on the control
//! connection's local address, and calls:
//!
//! - [`auth::TokenAuth`] for `USER`/`PASS` (password = the serve token);
//! - [`storage::ConfinedFs`] for every file operation, which maps each path
//!   into the served root with [`crate::Root`] or refuses it;
//! - [`hash::HashCommand`] for `HASH` and `OPTS HASH` (draft-bryan-ftpext-hash).
//!
//! TLS is required for the login and for data connections unless
//! [`FtpOptions::allow_plain`]. Implicit FTPS (TLS from the first byte, port
//! 990) is not offered: libunftp 0.24 only speaks explicit `AUTH TLS`.
//! docs/internals/server.md ("FTP") has the details and the defaults.
pub mod auth;
pub mod hash;
pub mod storage;

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use libunftp::options::{FtpsRequired, PassiveHost};

use crate::Root;

/// FTP settings; [`FtpOptions::default`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct FtpOptions {
    /// Also accept logins and data without TLS (passwords then travel in
    /// the clear).
    pub allow_plain: bool,
    /// Ports for passive data connections.
    pub passive_ports: RangeInclusive<u16>,
    /// A session with no command (and no transfer running) for this long
    /// is closed.
    pub idle_timeout: Duration,
}

impl Default for FtpOptions {
    fn default() -> Self {
        FtpOptions {
            allow_plain: false,
            passive_ports: 49152..=65535,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// Parse `LO-HI` (the `--ftp-passive-ports` syntax).
pub fn parse_port_range(s: &str) -> Result<RangeInclusive<u16>, String> {
    let (lo, hi) = s
        .split_once('-')
        .ok_or_else(|| format!("{s}: expected LO-HI, such as 50000-50100"))?;
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("{s}: {p:?} is not a port number (1-65535)"))
    };
    let (lo, hi) = (port(lo)?, port(hi)?);
    if lo > hi {
        return Err(format!("{s}: the first port must not be above the last"));
    }
    Ok(lo..=hi)
}

/// Everything one FTP session needs, shared by all of them.
pub struct FtpService {
    root: Root,
    auth: Arc<auth::TokenAuth>,
    cert: PathBuf,
    key: PathBuf,
    opts: FtpOptions,
}

impl FtpService {
    /// `cert` and `key` are the PEM files HTTPS serves too. Builds one
    /// session's server to check they load, so a bad file fails at start.
    pub fn new(
        root: Root,
        auth: auth::TokenAuth,
        cert: PathBuf,
        key: PathBuf,
        opts: FtpOptions,
    ) -> Result<FtpService, String> {
        let svc = FtpService {
            root,
            auth: Arc::new(auth),
            cert,
            key,
            opts,
        };
        // Data connections get the congestion control control connections
        // get (`--congestion`): libunftp opens them, and runs this on each
        // (vendor/libunftp/FERRY-PATCH.md).
        libunftp::options::set_data_socket_hook(|socket| {
            ferry_tcp::apply(socket);
        });
        svc.build(None)?;
        Ok(svc)
    }

    /// `login`: the connection's login slot, released when it logs in.
    fn build(
        &self,
        login: Option<Arc<crate::login::Login>>,
    ) -> Result<libunftp::Server<storage::ConfinedFs, auth::FtpUser>, String> {
        let root = self.root.clone();
        let authenticator: Arc<dyn unftp_core::auth::Authenticator + Send + Sync> = match login {
            Some(login) => Arc::new(auth::SessionAuth {
                inner: self.auth.clone(),
                login,
            }),
            None => self.auth.clone(),
        };
        let required = if self.opts.allow_plain {
            FtpsRequired::None
        } else {
            FtpsRequired::All
        };
        libunftp::ServerBuilder::<storage::ConfinedFs, auth::FtpUser>::with_user_detail_provider(
            Box::new(move || storage::ConfinedFs::new(root.clone())),
            self.auth.clone(),
        )
        .authenticator(authenticator)
        .command("HASH", hash::HashCommand::new())
        .greeting("ferry serve")
        .ftps(self.cert.clone(), self.key.clone())
        .ftps_required(required, required)
        .passive_ports(self.opts.passive_ports.clone())
        .passive_host(PassiveHost::FromConnection)
        .idle_session_timeout(self.opts.idle_timeout.as_secs().max(1))
        .build()
        .map_err(|e| {
            format!(
                "FTP: cannot use the TLS certificate {} / key {}: {e}",
                self.cert.display(),
                self.key.display()
            )
        })
    }

    /// Run one control connection to its end.
    pub async fn serve(
        &self,
        s: tokio::net::TcpStream,
        peer: std::net::SocketAddr,
        login: Arc<crate::login::Login>,
    ) {
        let server = match self.build(Some(login)) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%peer, "{e}");
                return;
            }
        };
        if let Err(e) = server.service(s).await {
            tracing::debug!(%peer, "ftp session ended: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("50000-50100").unwrap(), 50000..=50100);
        assert_eq!(parse_port_range("7-7").unwrap(), 7..=7);
        assert!(parse_port_range("50100-50000").is_err());
        assert!(parse_port_range("0-10").is_err());
        assert!(parse_port_range("5000").is_err());
        assert!(parse_port_range("a-b").is_err());
    }
}
