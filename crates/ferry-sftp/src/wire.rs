//! Checked reading and writing of SSH wire types (RFC 4251 section 5).
//!
//! Every length read from the peer is compared with the bytes actually left
//! before anything is sliced or allocated: a hostile length is an error, not
//! an allocation.
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Why a packet could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The packet ended before a field it must contain.
    Truncated { what: &'static str },
    /// Bytes were left over after the last field.
    TrailingBytes { packet_type: u8, extra: usize },
    /// A packet type this side does not expect.
    UnknownType(u8),
    /// A count (of names, of extended attributes) larger than the packet
    /// could possibly hold.
    BadCount { what: &'static str, count: u32 },
    /// The packet was empty (no type byte).
    Empty,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated { what } => write!(f, "packet truncated while reading {what}"),
            DecodeError::TrailingBytes { packet_type, extra } => {
                write!(
                    f,
                    "{extra} unexpected bytes after packet of type {packet_type}"
                )
            }
            DecodeError::UnknownType(t) => write!(f, "unknown packet type {t}"),
            DecodeError::BadCount { what, count } => {
                write!(f, "impossible {what} count {count}")
            }
            DecodeError::Empty => write!(f, "empty packet"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over a packet's bytes. Strings are returned as slices of the
/// same buffer (no copy).
pub(crate) struct Reader {
    buf: Bytes,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Self {
        Reader { buf }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        if self.buf.remaining() < 1 {
            return Err(DecodeError::Truncated { what });
        }
        Ok(self.buf.get_u8())
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        if self.buf.remaining() < 4 {
            return Err(DecodeError::Truncated { what });
        }
        Ok(self.buf.get_u32())
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        if self.buf.remaining() < 8 {
            return Err(DecodeError::Truncated { what });
        }
        Ok(self.buf.get_u64())
    }

    pub(crate) fn string(&mut self, what: &'static str) -> Result<Bytes, DecodeError> {
        let len = self.u32(what)? as usize;
        if self.buf.remaining() < len {
            return Err(DecodeError::Truncated { what });
        }
        Ok(self.buf.split_to(len))
    }

    /// Everything left: the payload of an extended request or reply.
    pub(crate) fn rest(&mut self) -> Bytes {
        self.buf.split_off(0)
    }

    /// Check a count read from the wire against the smallest size one item
    /// can take, so that `Vec::with_capacity(count)` is bounded by the bytes
    /// we hold.
    pub(crate) fn check_count(
        &self,
        count: u32,
        min_item_len: usize,
        what: &'static str,
    ) -> Result<usize, DecodeError> {
        let count = count as usize;
        if count.saturating_mul(min_item_len) > self.buf.remaining() {
            return Err(DecodeError::BadCount {
                what,
                count: count as u32,
            });
        }
        Ok(count)
    }

    pub(crate) fn finish(self, packet_type: u8) -> Result<(), DecodeError> {
        if self.buf.has_remaining() {
            return Err(DecodeError::TrailingBytes {
                packet_type,
                extra: self.buf.remaining(),
            });
        }
        Ok(())
    }
}

pub(crate) fn put_string(out: &mut BytesMut, s: &[u8]) {
    out.put_u32(s.len() as u32);
    out.put_slice(s);
}

/// Start a packet: reserve the length field, write the type. Returns where
/// the length goes, for [`finish_packet`].
pub(crate) fn start_packet(out: &mut BytesMut, packet_type: u8) -> usize {
    let at = out.len();
    out.put_u32(0);
    out.put_u8(packet_type);
    at
}

pub(crate) fn finish_packet(out: &mut BytesMut, at: usize) {
    let len = (out.len() - at - 4) as u32;
    if let Some(slot) = out.get_mut(at..at + 4) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
}
