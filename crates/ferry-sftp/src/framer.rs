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

/// Reassembles packets. Bytes pushed with [`Framer::push_bytes`] are kept
/// as they came while nothing else is buffered, and the packets that lie
/// whole inside them are returned as slices of them, without a copy; only
/// a packet that spans pieces is copied together.
#[derive(Debug)]
pub struct Framer {
    /// Received, not yet returned; the front of the stream.
    head: Bytes,
    /// The rest of the stream: always empty while `head` is not.
    buf: BytesMut,
    max_len: u32,
}

impl Framer {
    /// `max_len`: the largest packet accepted, length field excluded.
    pub fn new(max_len: u32) -> Self {
        Framer {
            head: Bytes::new(),
            buf: BytesMut::new(),
            max_len,
        }
    }

    /// Append bytes received from the peer.
    pub fn push(&mut self, data: &[u8]) {
        self.spill();
        self.reserve_packet(data);
        self.buf.extend_from_slice(data);
    }

    /// Room in `buf` for the rest of the packet it holds (or that `next`
    /// starts, when it holds none) and for `next`, once the packet's
    /// length is known. Grown in steps instead, `buf` was copied as it
    /// grew: a 255 KiB READ reply from sshd comes in 32 KiB pieces, and
    /// `realloc`'s copies were 3% of a download's client samples (perf,
    /// 2026-11-30). A length over the limit reserves nothing:
    /// [`Framer::next_frame`] refuses it.
    fn reserve_packet(&mut self, next: &[u8]) {
        let start: &[u8] = if self.buf.is_empty() { next } else { &self.buf };
        let Some(&[a, b, c, d]) = start.get(..4) else {
            return;
        };
        let len = u32::from_be_bytes([a, b, c, d]);
        if len > self.max_len {
            return;
        }
        let rest = (4 + len as usize).saturating_sub(self.buf.len());
        self.buf.reserve(rest.max(next.len()));
    }

    /// Append bytes received from the peer, keeping them without a copy
    /// when nothing else is buffered.
    pub fn push_bytes(&mut self, data: Bytes) {
        if self.head.is_empty() && self.buf.is_empty() {
            self.head = data;
        } else {
            self.push(&data);
        }
    }

    /// Move `head` into `buf` (the copy that a packet spanning two pieces
    /// needs).
    fn spill(&mut self) {
        if !self.head.is_empty() {
            let head = std::mem::take(&mut self.head);
            self.reserve_packet(&head);
            self.buf.extend_from_slice(&head);
        }
    }

    /// Bytes received but not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.head.len() + self.buf.len()
    }

    /// The next complete packet (type byte first, length prefix removed), if
    /// one is in. Errors are final: the stream cannot be resynchronised.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if !self.head.is_empty() {
            match self.frame_len(&self.head)? {
                Some(len) if self.head.len() >= 4 + len => {
                    self.head.advance(4);
                    return Ok(Some(self.head.split_to(len)));
                }
                _ => self.spill(),
            }
        }
        let Some(len) = self.frame_len(&self.buf)? else {
            return Ok(None);
        };
        let total = 4 + len;
        if self.buf.len() < total {
            // Reserve once for the whole packet instead of growing in steps.
            self.buf.reserve(total - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(4);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// The length of the packet at the start of `data`, once its four
    /// bytes are in, checked against the limit.
    fn frame_len(&self, data: &[u8]) -> Result<Option<usize>, FrameError> {
        let Some(&[a, b, c, d]) = data.get(..4) else {
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
        Ok(Some(len as usize))
    }
}
