//! Response bodies: small in-memory ones, files streamed in large chunks
//! read on the blocking pool, and zstd-compressed files.
//!
//! A file body is a list of segments (bytes held in memory, or a span of
//! the open file) so one type serves a whole file, a single range and a
//! `multipart/byteranges` answer.
//!
//! A chunk whose bytes are in memory (the page cache, or tmpfs) is read
//! on the connection's own thread, `INLINE_CHUNK` at a time, so the bytes
//! are still in this core's cache when TLS copies and encrypts them: on a
//! 1 GiB download to curl over h2 that copy was 30% of the server's CPU
//! with 512 KiB chunks read on the blocking pool (docs/internals/server.md).
//! Whether a read can block is asked with `preadv2(RWF_NOWAIT)`; tmpfs does
//! not support the flag and never waits for a disk, so it is read inline
//! always. Anything else goes to tokio's blocking pool, and there the next
//! chunk's read starts as soon as the previous one is handed to hyper.
use std::collections::VecDeque;
use std::fs::File;
use std::future::Future;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use tokio::task::JoinHandle;

use crate::readnow::{read_now, Inline};

/// Bytes read per `pread` (and so per body chunk). 512 KiB: large enough
/// that the per-chunk costs (a blocking-pool hop, an allocation) vanish,
/// small enough that a connection holds at most two chunks at a time.
pub const READ_CHUNK: usize = 512 * 1024;

/// Bytes read per inline chunk: half of this machine's 512 KiB L2, so a
/// chunk is still cached when rustls copies it into TLS records.
pub const INLINE_CHUNK: usize = 128 * 1024;

/// The zstd level: 1 compresses at several hundred MB/s per core, which
/// keeps compression from being the bottleneck of a fast link.
pub const ZSTD_LEVEL: i32 = 1;

pub type RespBody = UnsyncBoxBody<Bytes, io::Error>;

pub fn full(b: impl Into<Bytes>) -> RespBody {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub fn empty() -> RespBody {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A piece of a file body.
pub enum Seg {
    Mem(Bytes),
    File { off: u64, len: u64 },
}

/// Segments of one open file, streamed.
pub struct FileBody {
    file: Arc<File>,
    segs: VecDeque<Seg>,
    left: u64,
    inflight: Option<JoinHandle<io::Result<Bytes>>>,
    inline: Inline,
    /// Over HTTP/2: hand hyper pieces of this size (see `for_version`).
    piece: usize,
    /// What is left of a chunk being handed over in pieces.
    rest: Option<Bytes>,
}

/// One h2 DATA frame whose 9-byte header and payload fill exactly one TLS
/// record (16 KiB of plaintext). h2 writes a frame's header and payload in
/// one call, and rustls cuts records at 16 KiB: a full 16 KiB payload made
/// a 16 KiB record plus a 9-byte one, so the client read and decrypted
/// twice as many records (curl: 262 000 reads per GiB from ferry serve,
/// 166 000 from nginx).
pub const H2_PIECE: usize = 16 * 1024 - 9;

impl FileBody {
    pub fn new(file: Arc<File>, segs: Vec<Seg>) -> FileBody {
        let segs: VecDeque<Seg> = segs
            .into_iter()
            .filter(|s| match s {
                Seg::Mem(b) => !b.is_empty(),
                Seg::File { len, .. } => *len > 0,
            })
            .collect();
        let left = segs
            .iter()
            .map(|s| match s {
                Seg::Mem(b) => b.len() as u64,
                Seg::File { len, .. } => *len,
            })
            .sum();
        FileBody {
            inline: Inline::for_file(&file),
            file,
            segs,
            left,
            inflight: None,
            piece: 0,
            rest: None,
        }
    }

    /// Sized for the response's HTTP version: over HTTP/2, chunks are
    /// handed to hyper in `H2_PIECE`s (slices, no copy) so that each DATA
    /// frame is one TLS record for a client with the default 16 KiB frame
    /// size.
    pub fn for_version(mut self, v: http::Version) -> FileBody {
        self.piece = if v == http::Version::HTTP_2 {
            H2_PIECE
        } else {
            0
        };
        self
    }

    /// A data frame of (the first piece of) `b`; the rest is kept.
    fn emit(&mut self, mut b: Bytes) -> Frame<Bytes> {
        if self.piece > 0 && b.len() > self.piece {
            let tail = b.split_off(self.piece);
            self.rest = Some(tail);
        }
        self.left = self.left.saturating_sub(b.len() as u64);
        Frame::data(b)
    }

    /// The next `len` bytes of the file segment in front (at most `max`):
    /// where they are, and the segment advanced past them.
    fn take(&mut self, max: usize) -> Option<(u64, usize)> {
        let Some(Seg::File { off, len }) = self.segs.front_mut() else {
            return None;
        };
        let n = (*len).min(max as u64);
        let at = *off;
        *off += n;
        *len -= n;
        if *len == 0 {
            self.segs.pop_front();
        }
        Some((at, n as usize))
    }

    /// The next chunk read on this thread, if it is in memory. What is
    /// not (part of it, or all) is left to the blocking pool.
    fn read_inline(&mut self) -> Option<io::Result<Bytes>> {
        if self.inline == Inline::Never || self.inflight.is_some() {
            return None;
        }
        let (at, n) = self.take(INLINE_CHUNK)?;
        let got = match read_now(&self.file, at, n, &mut self.inline) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        // Short at end of file too: the blocking read below reports that
        // the file shrank.
        let (have, skew) = (got.len(), got.skew);
        let mut buf = got.buf;
        if have == n {
            return Some(Ok(Bytes::from(buf).slice(skew..)));
        }
        // The rest of this chunk waits for the disk: finish it on the pool.
        let file = self.file.clone();
        self.inflight = Some(tokio::task::spawn_blocking(move || {
            buf.resize(skew + n, 0);
            if let Some(rest) = buf.get_mut(skew + have..) {
                file.read_exact_at(rest, at + have as u64)?;
            }
            Ok(Bytes::from(buf).slice(skew..))
        }));
        None
    }

    pub fn boxed(self) -> RespBody {
        BodyExt::boxed_unsync(self)
    }

    /// Start reading the next chunk if the next segment is file data.
    fn start_read(&mut self) {
        // Inline reads happen when hyper asks for the chunk, not ahead.
        if self.inflight.is_some() || self.inline != Inline::Never {
            return;
        }
        let Some((at, n)) = self.take(READ_CHUNK) else {
            return;
        };
        let file = self.file.clone();
        self.inflight = Some(tokio::task::spawn_blocking(move || read_at(&file, at, n)));
    }
}

/// Exactly `n` bytes at `at`; a file that shrank meanwhile is an error
/// (the response promised a length), which makes hyper cut the response.
fn read_at(file: &File, at: u64, n: usize) -> io::Result<Bytes> {
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, at)?;
    Ok(Bytes::from(buf))
}

fn joined<T>(r: Result<io::Result<T>, tokio::task::JoinError>) -> io::Result<T> {
    r.map_err(io::Error::other)?
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if let Some(b) = this.rest.take() {
            return Poll::Ready(Some(Ok(this.emit(b))));
        }
        if this.inflight.is_none() {
            match this.segs.pop_front() {
                None => return Poll::Ready(None),
                Some(Seg::Mem(b)) => {
                    this.start_read();
                    return Poll::Ready(Some(Ok(this.emit(b))));
                }
                Some(seg) => {
                    this.segs.push_front(seg);
                    match this.read_inline() {
                        Some(Ok(b)) => {
                            return Poll::Ready(Some(Ok(this.emit(b))));
                        }
                        Some(Err(e)) => {
                            this.segs.clear();
                            return Poll::Ready(Some(Err(e)));
                        }
                        None => this.start_read(),
                    }
                }
            }
        }
        let Some(h) = this.inflight.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(h).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                this.inflight = None;
                match joined(r) {
                    Ok(b) => {
                        // Read ahead while this chunk is encrypted and sent.
                        this.start_read();
                        Poll::Ready(Some(Ok(this.emit(b))))
                    }
                    Err(e) => {
                        this.segs.clear();
                        Poll::Ready(Some(Err(e)))
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inflight.is_none() && self.segs.is_empty() && self.rest.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

/// Compression state carried from one blocking step to the next.
struct ZState {
    file: Arc<File>,
    off: u64,
    end: u64,
    enc: zstd::stream::write::Encoder<'static, Vec<u8>>,
}

type ZStep = io::Result<(Option<ZState>, Bytes)>;

/// A whole file, zstd-compressed on the fly (one frame, with checksum).
/// The length is not known in advance: HTTP/1.1 sends it chunked.
pub struct ZstdBody {
    state: Option<ZState>,
    inflight: Option<JoinHandle<ZStep>>,
}

impl ZstdBody {
    pub fn new(file: Arc<File>, size: u64) -> io::Result<ZstdBody> {
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL)?;
        enc.include_checksum(true)?;
        enc.set_pledged_src_size(Some(size))?;
        Ok(ZstdBody {
            state: Some(ZState {
                file,
                off: 0,
                end: size,
                enc,
            }),
            inflight: None,
        })
    }

    pub fn boxed(self) -> RespBody {
        BodyExt::boxed_unsync(self)
    }

    fn start(&mut self) {
        if self.inflight.is_some() {
            return;
        }
        if let Some(st) = self.state.take() {
            self.inflight = Some(tokio::task::spawn_blocking(move || zstep(st)));
        }
    }
}

/// Read and compress until there is output (or the end).
fn zstep(mut st: ZState) -> ZStep {
    loop {
        if st.off >= st.end {
            let out = st.enc.finish()?;
            return Ok((None, Bytes::from(out)));
        }
        let n = (st.end - st.off).min(READ_CHUNK as u64);
        let mut buf = vec![0u8; n as usize];
        st.file.read_exact_at(&mut buf, st.off)?;
        st.off += n;
        st.enc.write_all(&buf)?;
        let out = std::mem::take(st.enc.get_mut());
        if !out.is_empty() {
            return Ok((Some(st), Bytes::from(out)));
        }
    }
}

impl Body for ZstdBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            this.start();
            let Some(h) = this.inflight.as_mut() else {
                return Poll::Ready(None);
            };
            let r = match Pin::new(h).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            };
            this.inflight = None;
            match joined(r) {
                Ok((st, b)) => {
                    this.state = st;
                    this.start(); // compress the next chunk meanwhile
                    if !b.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(b))));
                    }
                }
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state.is_none() && self.inflight.is_none()
    }
}

/// Would zstd save at least 10% on this sample (the start of the file)?
pub fn compressible(sample: &[u8]) -> bool {
    if sample.is_empty() {
        return false;
    }
    match zstd::bulk::compress(sample, ZSTD_LEVEL) {
        Ok(c) => c.len() * 10 <= sample.len() * 9,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    async fn collect(b: RespBody) -> Vec<u8> {
        b.collect().await.unwrap().to_bytes().to_vec()
    }

    fn file_with(data: &[u8]) -> (tempfile::NamedTempFile, Arc<File>) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(data).unwrap();
        let f = Arc::new(File::open(t.path()).unwrap());
        (t, f)
    }

    #[tokio::test]
    async fn segments_come_out_in_order() {
        let data: Vec<u8> = (0..(3 * READ_CHUNK + 17))
            .map(|i| (i % 251) as u8)
            .collect();
        let (_t, f) = file_with(&data);
        let body = FileBody::new(
            f,
            vec![
                Seg::Mem(Bytes::from_static(b"<")),
                Seg::File {
                    off: 5,
                    len: (2 * READ_CHUNK + 3) as u64,
                },
                Seg::Mem(Bytes::from_static(b"|")),
                Seg::File { off: 0, len: 4 },
                Seg::File { off: 9, len: 0 },
                Seg::Mem(Bytes::from_static(b">")),
            ],
        );
        assert_eq!(
            body.size_hint().exact(),
            Some((2 * READ_CHUNK + 3 + 4 + 3) as u64)
        );
        let got = collect(body.boxed()).await;
        let mut want = b"<".to_vec();
        want.extend_from_slice(&data[5..5 + 2 * READ_CHUNK + 3]);
        want.push(b'|');
        want.extend_from_slice(&data[..4]);
        want.push(b'>');
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_file_that_shrank_is_an_error() {
        let (_t, f) = file_with(b"short");
        let body = FileBody::new(f, vec![Seg::File { off: 0, len: 100 }]);
        assert!(body.boxed().collect().await.is_err());
    }

    #[tokio::test]
    async fn zstd_round_trips() {
        let data: Vec<u8> = (0..(2 * READ_CHUNK + 1000))
            .map(|i| b"ferry "[i % 6])
            .collect();
        assert!(compressible(&data[..65536]));
        let (_t, f) = file_with(&data);
        let got = collect(ZstdBody::new(f, data.len() as u64).unwrap().boxed()).await;
        assert!(got.len() < data.len() / 10);
        assert_eq!(zstd::decode_all(&got[..]).unwrap(), data);
        let (_t, f) = file_with(b"");
        let got = collect(ZstdBody::new(f, 0).unwrap().boxed()).await;
        assert_eq!(zstd::decode_all(&got[..]).unwrap(), b"");
    }

    #[test]
    fn random_bytes_are_not_compressible() {
        let mut x = 0x1234_5678_u64;
        let data: Vec<u8> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(!compressible(&data));
    }
}
