//! SFTP version 3 (draft-ietf-secsh-filexfer-02) with OpenSSH's extensions, as
//! a codec and a request table that do no I/O.
//!
//! This crate does not take care of network I/O: it turns bytes into typed
//! messages and back, and keeps track of which requests are outstanding. An
//! async adapter (see `ferry-ssh`) feeds it the bytes of an SSH channel and
//! sends what it produces. Keeping the protocol here, with no sockets and no
//! clock, is what lets the tests read like wire transcripts.
//!
//! The main types:
//! - [`Request`] and [`Response`]: every packet a client and a server need,
//!   with [`Request::encode`] / [`Request::decode`] and the same for
//!   [`Response`]. Decoding never panics and never allocates on the word of
//!   an untrusted length before that length has been checked against the
//!   bytes actually present.
//! - [`Framer`]: splits a byte stream into packets, refusing any packet whose
//!   declared length is above a limit before buffering it.
//! - [`RequestTable`]: hands out request ids and matches each reply to its
//!   request in O(1), in any order, with a bound on how many are in flight.
//!
//! ```
//! use bytes::BytesMut;
//! use ferry_sftp::{Framer, Request, Response, RequestTable};
//!
//! let mut table = RequestTable::new(64);
//! let id = table.insert("stat of /etc").unwrap();
//! let mut out = BytesMut::new();
//! Request::Stat { id, path: "/etc".into() }.encode(&mut out);
//!
//! // ... the server answers; its bytes arrive in pieces:
//! let mut reply = BytesMut::new();
//! Response::Status { id, code: ferry_sftp::StatusCode::OK, message: "".into(), lang: "".into() }
//!     .encode(&mut reply);
//! let mut framer = Framer::new(1 << 20);
//! framer.push(&reply[..3]);
//! assert!(framer.next_frame().unwrap().is_none());
//! framer.push(&reply[3..]);
//! let frame = framer.next_frame().unwrap().unwrap();
//! let response = Response::decode(frame).unwrap();
//! assert_eq!(table.take(response.id().unwrap()), Some("stat of /etc"));
//! ```
#![forbid(unsafe_code)]
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

mod attrs;
pub mod consts;
mod ext;
mod framer;
mod packet;
mod table;
mod wire;

pub use attrs::{civil, FileAttrs};
pub use consts::StatusCode;
pub use ext::{CheckFileReply, Limits, Statvfs};
pub use framer::{FrameError, Framer};
pub use packet::{NameEntry, OpenFlags, Request, Response};
/// Extended (SSH_FXP_EXTENDED) requests.
pub mod packet_ext {
    pub use crate::packet::{write_prefix_len, Extended, DATA_PREFIX_LEN};
}
pub use table::{RequestTable, TableFull, MAX_IN_FLIGHT};
pub use wire::DecodeError;
