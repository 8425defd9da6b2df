//! ferry's FTP and FTPS client pieces, over the `suppaftp` crate's
//! blocking client: one [`Conn`] is one logged-in control connection in
//! binary mode (TYPE I) and passive mode (EPSV, falling back to PASV),
//! plain, explicit TLS (`AUTH TLS`, then `PBSZ 0` / `PROT P` so data
//! connections are encrypted too) or implicit TLS (`ftps://`, port 990).
//! Certificates are checked with the HTTP path's rustls configuration
//! (`ferry_http::tls::client_config`: system roots, `--cacert`, `--pin`,
//! `--insecure`).
//!
//! FTP allows one transfer per control connection, so the engine keeps a
//! pool of these, one per worker thread (docs/internals/ftp.md).
//!
//! - [`Endpoint`]: where and who (host, port, credentials, TLS);
//! - [`Conn`]: commands (`SIZE`, `MDTM`, listings, `RETR`/`STOR`/`APPE`
//!   with `REST`, `RNFR`/`RNTO`, `MKD`);
//! - [`listing`]: MLSD and `LIST` lines into safe [`listing::Entry`]s;
//! - [`hash`]: FEAT's `HASH` line and `HASH`'s reply (draft-bryan-ftpext-hash);
//! - [`FtpError`]: every failure, with the server's reply code and text.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ferry_ftp::{Conn, Endpoint, Security};
//! let ep = Arc::new(Endpoint::new("127.0.0.1", 21, "anonymous", "ferry@", Security::Plain, None));
//! let mut c = Conn::open(&ep).unwrap();
//! println!("{} bytes", c.size("pub/file.bin").unwrap());
//! ```
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod conn;
mod error;
pub mod hash;
pub mod listing;

pub use conn::{plain_socket, Conn, Endpoint, Security, Transfer};
pub use error::FtpError;

/// Port of `ftp://`.
pub const FTP_PORT: u16 = 21;
/// Port of `ftps://` (implicit TLS).
pub const FTPS_PORT: u16 = 990;

/// Can `name` go into an FTP command? A CR or LF would end the command
/// and start another one (RFC 959 section 4.1.3: commands end at CRLF), so
/// such names are refused rather than sent.
pub fn sendable(name: &str) -> bool {
    !name.contains(['\r', '\n', '\0'])
}
