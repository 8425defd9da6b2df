//! Splits the byte stream of an SSH channel into SFTP packets.
//!
//! The declared length of each packet is checked against a limit as soon as
//! its four bytes are in, so a peer cannot make us buffer a gigabyte by
//! announcing one.
use bytes::{Buf, Bytes, BytesMut};

/// A packet announced a length above the limit, or zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    TooLong { len: u32, max: u32 },
    Empty,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLong { len, max } => {
                write!(f, "SFTP packet of {len} bytes is over the limit of {max}")
            }
            FrameError::Empty => write!(f, "SFTP packet of length 0"),
        }
    }
}

impl std::error::Error for FrameError {}

#[derive(Debug)]
pub struct Framer {
    buf: BytesMut,
    max_len: u32,
}

impl Framer {
    /// `max_len`: the largest packet accepted, length field excluded.
    pub fn new(max_len: u32) -> Self {
        Framer {
            buf: BytesMut::with_capacity(64 * 1024),
            max_len,
        }
    }

    /// Append bytes received from the peer.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes received but not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete packet (type byte first, length prefix removed), if
    /// one is in. Errors are final: the stream cannot be resynchronised.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        let Some(&[a, b, c, d]) = self.buf.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([a, b, c, d]);
        if len == 0 {
            return Err(FrameError::Empty);
        }
        if len > self.max_len {
            return Err(FrameError::TooLong {
                len,
                max: self.max_len,
            });
        }
        let total = 4 + len as usize;
        if self.buf.len() < total {
            // Reserve once for the whole packet instead of growing in steps.
            self.buf.reserve(total - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(4);
        Ok(Some(self.buf.split_to(len as usize).freeze()))
    }
}
