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

pub mod compression;
mod connect;
mod error;
mod hostcert;
mod prompt;
mod proxy_command;
mod sftp;
pub mod zlib_switch;

pub use compression::{compression_report, CompressionReport, SshCompression};
pub use connect::{ConnectOptions, Connector, ExecOutput, SshConnection, CIPHERS};
pub use prompt::{Prompt, PromptHandle};

/// The largest channel packet to advertise or ask for. russh drops a
/// connection whose transport packet is over 256 KiB + 33 bytes, before or
/// after decompression; zlib (`-C`) makes random data ~0.05% larger, so a
/// full 256 KiB channel packet of it did not fit (every `-C` upload of
/// random data to ferry serve failed). 1 KiB of room is ten times enough.
pub const MAX_CHANNEL_PACKET: u32 = 255 * 1024;
pub use error::{SftpError, SshError};
pub use sftp::{
    channel_writer, Handle, Outgoing, Pending, ReadFn, SftpClient, SftpInfo, WriteRoom,
};
