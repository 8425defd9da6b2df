//! SSH transport for ferry: a `russh` client set up the way OpenSSH users
//! expect, and the async adapter that runs the SFTP core over a channel.
//!
//! - [`Connector`] resolves `ssh_config` for a host once (files, `-o`
//!   overrides, identities, passwords) and then opens as many connections as
//!   the engine asks for, each checked against `known_hosts` with OpenSSH's
//!   meaning of `StrictHostKeyChecking`, `@cert-authority` host
//!   certificates included; through `ProxyJump` hosts (each a connection
//!   of its own, the next hop a `direct-tcpip` channel of it) or a
//!   `ProxyCommand`.
//! - [`SftpClient`] is one SFTP session over one SSH channel: requests are
//!   encoded by `ferry-sftp`, written by one writer task (so concurrent
//!   requests never interleave on the wire), and replies are matched to
//!   their requests by the O(1) [`ferry_sftp::RequestTable`].
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod connect;
mod error;
mod hostcert;
mod proxy_command;
mod sftp;

pub use connect::{ConnectOptions, Connector, SshConnection};
pub use error::{SftpError, SshError};
pub use sftp::{channel_writer, Handle, SftpClient, SftpInfo};
