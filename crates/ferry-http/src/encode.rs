//! zstd-coded upload bodies (`Content-Encoding: zstd` on a PUT to ferry
//! serve, which says in its `OPTIONS` answer `Accept-Encoding: zstd`, as
//! RFC 7694 lets a server say which codings it takes in requests).
//!
//! The body is a run of zstd frames, one per [`SEGMENT`] of the file: each
//! frame is either compressed (level 1 under `auto`, with zstd's content
//! checksum) or *stored*, a frame of raw blocks made here without zstd
//! (the file's bytes with a 3-byte header every 128 KiB; any zstd decoder
//! reads it at memory speed). So `auto` can change its mind at every MiB
//! without the receiver knowing, as the SSH `AutoLevel` does per packet.
//! Every frame states its content size, and windows stay at or under the
//! segment (RFC 9659's 8 MiB is far away).
//!
//! [`Auto`] decides, per segment ([`Auto::choose`]), from three figures:
//! the ratio level 1 reached on the last compressed segment, and the file
//! bytes per second the body moved while compressing and while storing,
//! each timed from one segment's first piece to the next one's and
//! counted for the way that held the body up: the next segment's when
//! the connection had to wait for it to be made, else the segment's
//! own (the connection was still sending it). It compresses while the data compresses (ratio <=
//! [`MAX_RATIO`]) and compressing moved the file faster than storing:
//! compression must not become the serial stage of a fast link. It
//! probes: the first segment is compressed (the sample), and every
//! [`PROBE_EVERY`] segments two go the other way, so a link that got
//! busier or data that changed is noticed.
//! One `Auto` serves a whole copy, so a tree of small files learns once.
//!
//! The work (read, compress or store) runs on tokio's blocking pool, one
//! segment ahead of the connection, so compression overlaps sending.
//!
//! ferry cp's `auto` (the default) does not send that per-segment rule's
//! stored frames: measured, they cost on loopback (0.58-0.72x plain, run
//! zstd-4 in BENCHMARKS.md) and a stored MiB vanishes into buffers long
//! before the link has carried it, so the rule could not see a slow link.
//! It decides per file, before the body, with [`Auto::code_file`]: a
//! file goes plain (no `Content-Encoding` at all) unless the link is known
//! to be slower than zstd -1 on this machine ([`GAIN`]) and a sample of
//! the file compresses ([`CODE_RATIO`]); then it is coded at level 1
//! throughout. The link's rate comes from a plain request's whole time,
//! sent to its answer ([`Auto::measured_link`]): the first [`PROBE`]
//! bytes of a big file go as a ranged PUT of their own, and the server
//! answers only when it has them all, whatever the buffers on the way.
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::task::JoinHandle;

use crate::client::Body;

/// Plain bytes per frame: what `auto` decides for at once.
pub const SEGMENT: usize = 1024 * 1024;
/// Stored blocks carry at most this many bytes (zstd's block limit).
const RAW_BLOCK: usize = 128 * 1024;
/// A segment compressed to more than this fraction of its size is not
/// worth it: sent stored.
pub const MAX_RATIO: f64 = 0.95;
/// Segments between two probes of the road not taken.
pub const PROBE_EVERY: u64 = 16;
/// Bytes handed to the connection per body frame.
const PIECE: usize = 256 * 1024;
/// The zstd level of `auto` and `on`: several hundred MB/s per core.
pub const AUTO_LEVEL: i32 = 1;
/// File bytes of the plain first request that times the link, when a
/// file's rate is not known yet ([`Auto::code_file`]).
pub const PROBE: u64 = 8 << 20;
/// The least a file (what is left of it) must hold to be split for the
/// probe: smaller ones go plain until a big one has timed the link.
pub const PROBE_MIN: u64 = 2 * PROBE;
/// Coding a file must promise at least this factor over plain: the
/// coded rate is at most the compressor's (measured on the sample) and
/// at most the link's divided by the ratio.
pub const GAIN: f64 = 1.25;
/// A file whose sample compresses to more than this goes plain
/// (1 / [`GAIN`]: what the link alone would gain).
pub const CODE_RATIO: f64 = 1.0 / GAIN;
/// Bytes of a file compressed aside to learn its ratio and zstd's speed.
pub const SAMPLE: usize = SEGMENT;

/// How an upload is coded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// Compress when it pays ([`Auto`]).
    Auto,
    /// Every segment at this zstd level (1..=19).
    Level(i32),
}

/// What one segment becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Compress(i32),
    Store,
}

/// `auto`'s figures, shared by every upload of a copy.
#[derive(Debug, Default, Clone)]
pub struct Auto {
    /// Segments decided so far.
    seen: u64,
    /// wire / plain of the last compressed segment.
    ratio: Option<f64>,
    /// File bytes per second the body moved while compressing and while
    /// storing (moving averages of [`Auto::went`]).
    rate_compressed: Option<f64>,
    rate_stored: Option<f64>,
    /// Per-file rule (ferry cp's `auto`): the link's rate in file bytes
    /// per second, from the last plain request timed whole.
    link: Option<f64>,
    /// Bytes per second zstd -1 compressed the last sample at.
    zstd_rate: Option<f64>,
    /// The last file's choice (for bodies handed over in pieces, which
    /// are not sampled).
    last_coded: bool,
}

/// What [`Auto::code_file`] says of a file before its body goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilePlan {
    /// Plain, no `Content-Encoding`.
    Plain,
    /// Sample it; code it at level 1 if the sample compresses.
    Sample,
    /// The link's rate is not known: send the first [`PROBE`] bytes plain
    /// as a request of their own, timed, then decide.
    Probe,
}

/// Weight of the newest segment in the moving averages.
const NEWEST: f64 = 0.3;

impl Auto {
    /// What the next segment becomes.
    pub fn choose(&mut self) -> Choice {
        let n = self.seen;
        self.seen += 1;
        let phase = n % PROBE_EVERY;
        let Some(ratio) = self.ratio else {
            return Choice::Compress(AUTO_LEVEL);
        };
        if ratio > MAX_RATIO {
            // Does not compress: stored, the data sampled again now and
            // then.
            return if phase == 0 {
                Choice::Compress(AUTO_LEVEL)
            } else {
                Choice::Store
            };
        }
        let (Some(c), Some(st)) = (self.rate_compressed, self.rate_stored) else {
            // Small files only so far (no body timed): the ratio decides.
            return if self.rate_stored.is_none() && phase == 1 {
                Choice::Store
            } else {
                Choice::Compress(AUTO_LEVEL)
            };
        };
        let best = if c >= st {
            Choice::Compress(AUTO_LEVEL)
        } else {
            Choice::Store
        };
        // Two segments of the other way now and then: either may have
        // become the faster.
        if phase == 1 || phase == 2 {
            return match best {
                Choice::Store => Choice::Compress(AUTO_LEVEL),
                Choice::Compress(_) => Choice::Store,
            };
        }
        best
    }

    /// Does compressing pay on what was measured last?
    pub fn pays(&self) -> bool {
        match (self.ratio, self.rate_compressed, self.rate_stored) {
            (Some(r), Some(c), Some(s)) => r <= MAX_RATIO && c >= s,
            (Some(r), _, _) => r <= MAX_RATIO,
            _ => false,
        }
    }

    /// Per-file rule: what to do with a file of `len` bytes (left to
    /// send) that can be split into ranged requests (`ranged`).
    pub fn code_file(&self, len: u64, ranged: bool) -> FilePlan {
        match self.link_slow() {
            Some(true) => FilePlan::Sample,
            Some(false) => FilePlan::Plain,
            None if ranged && len >= PROBE_MIN => FilePlan::Probe,
            None => FilePlan::Plain,
        }
    }

    /// Is the link slower than zstd -1 here, by [`GAIN`]? `None`: not
    /// measured yet.
    pub fn link_slow(&self) -> Option<bool> {
        let (l, z) = (self.link?, self.zstd_rate?);
        Some(l * GAIN <= z)
    }

    /// A plain request of `plain` file bytes took `took` from its start
    /// to the server's answer.
    pub fn measured_link(&mut self, plain: u64, took: Duration) {
        self.link = Some(plain as f64 / took.as_secs_f64().max(1e-6));
    }

    /// A sample compressed to `ratio` (wire / plain) at `rate` bytes per
    /// second. Says whether the file it came from is to be coded.
    pub fn sampled(&mut self, ratio: f64, rate: f64) -> bool {
        self.ratio = Some(ratio);
        self.zstd_rate = Some(rate);
        self.last_coded = ratio <= CODE_RATIO && self.link_slow() == Some(true);
        self.last_coded
    }

    /// The last sampled file was coded: a body handed over in pieces
    /// (a small file) follows it.
    pub fn last_coded(&self) -> bool {
        self.last_coded
    }

    /// A segment of `plain` bytes compressed to `wire`.
    pub fn compressed(&mut self, plain: usize, wire: usize) {
        if plain > 0 {
            self.ratio = Some(wire as f64 / plain as f64);
        }
    }

    /// A segment of `plain` file bytes went out in `took`: from its first
    /// piece handed to the connection to the next segment's, which counts
    /// both waits, for the compressor and for the connection. Segments
    /// too small to time are ignored.
    pub fn went(&mut self, stored: bool, plain: usize, took: Duration) {
        if plain < SEGMENT / 4 {
            return;
        }
        let rate = plain as f64 / took.as_secs_f64().max(1e-6);
        let avg = if stored {
            &mut self.rate_stored
        } else {
            &mut self.rate_compressed
        };
        *avg = Some(match *avg {
            Some(a) => a * (1.0 - NEWEST) + rate * NEWEST,
            None => rate,
        });
    }
}

/// What coded uploads of this process sent: file bytes and the bytes on
/// the wire, segments compressed and stored (`--json`, `-v`), and file
/// bytes `auto` sent plain to a server that takes zstd.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadReport {
    pub plain: u64,
    pub wire: u64,
    pub compressed: u64,
    pub stored: u64,
    pub uncoded: u64,
}

static PLAIN: AtomicU64 = AtomicU64::new(0);
static WIRE: AtomicU64 = AtomicU64::new(0);
static COMPRESSED: AtomicU64 = AtomicU64::new(0);
static STORED: AtomicU64 = AtomicU64::new(0);
static UNCODED: AtomicU64 = AtomicU64::new(0);

/// `auto` sent `n` file bytes plain to a server that takes zstd.
pub fn count_uncoded(n: u64) {
    UNCODED.fetch_add(n, Ordering::Relaxed);
}

/// The coded uploads of this process so far; `None` when there were none
/// (nor any that `auto` chose to send plain).
pub fn upload_report() -> Option<UploadReport> {
    let r = UploadReport {
        plain: PLAIN.load(Ordering::Relaxed),
        wire: WIRE.load(Ordering::Relaxed),
        compressed: COMPRESSED.load(Ordering::Relaxed),
        stored: STORED.load(Ordering::Relaxed),
        uncoded: UNCODED.load(Ordering::Relaxed),
    };
    (r.compressed + r.stored + r.uncoded > 0).then_some(r)
}

/// Compress `n` bytes of `file` from `at` aside at level 1 (the output
/// is dropped): the ratio (wire / plain) and zstd's speed in bytes per
/// second of wall time. Blocking.
pub fn sample(file: &File, at: u64, n: usize) -> io::Result<(f64, f64)> {
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, at)?;
    let mut z = compressor(AUTO_LEVEL)?;
    let t = Instant::now();
    let out = z.compress(&buf)?;
    let secs = t.elapsed().as_secs_f64().max(1e-6);
    Ok((out.len() as f64 / n.max(1) as f64, n as f64 / secs))
}

/// A zstd frame of raw blocks holding `n` bytes of `file` from `at`:
/// header (magic, a single-segment descriptor, a 4-byte content size),
/// then one 3-byte block header per [`RAW_BLOCK`]. The file is read
/// straight into place.
pub fn stored_frame(file: &File, at: u64, n: usize) -> io::Result<Vec<u8>> {
    stored_frame_with(n, |dst, done| file.read_exact_at(dst, at + done as u64))
}

/// [`stored_frame`] of bytes in memory.
pub fn stored_frame_of(data: &[u8]) -> Vec<u8> {
    let r = stored_frame_with(data.len(), |dst, done| {
        dst.copy_from_slice(data.get(done..done + dst.len()).unwrap_or_default());
        Ok(())
    });
    r.unwrap_or_default()
}

/// A stored frame of `n` bytes, each block's bytes put in place by
/// `fill(block, bytes before it)`.
fn stored_frame_with(
    n: usize,
    mut fill: impl FnMut(&mut [u8], usize) -> io::Result<()>,
) -> io::Result<Vec<u8>> {
    let blocks = n.div_ceil(RAW_BLOCK).max(1);
    let mut out = Vec::with_capacity(9 + 3 * blocks + n);
    out.extend_from_slice(&0xFD2F_B528u32.to_le_bytes());
    // Frame_Content_Size_flag 2 (4 bytes), Single_Segment_flag, no
    // checksum: the window is the content size.
    out.push(0xA0);
    let size = u32::try_from(n).map_err(|_| io::Error::other("segment too large"))?;
    out.extend_from_slice(&size.to_le_bytes());
    let mut done = 0usize;
    for b in 0..blocks {
        let len = (n - done).min(RAW_BLOCK);
        let last = u32::from(b + 1 == blocks);
        let head = last | ((len as u32) << 3); // Block_Type 0: raw
        out.extend_from_slice(&head.to_le_bytes()[..3]);
        let from = out.len();
        out.resize(from + len, 0);
        let dst = out
            .get_mut(from..)
            .ok_or_else(|| io::Error::other("internal: stored frame"))?;
        fill(dst, done)?;
        done += len;
    }
    Ok(out)
}

/// A zstd compressor with the checksum and content size on.
fn compressor(level: i32) -> io::Result<zstd::bulk::Compressor<'static>> {
    let mut z = zstd::bulk::Compressor::new(level)?;
    z.include_checksum(true)?;
    z.include_contentsize(true)?;
    Ok(z)
}

/// Code one segment in memory as `choice` says: the frame, and whether it
/// was stored. Timed for `auto` when compressed.
fn code(
    buf: &[u8],
    choice: Choice,
    zc: &mut Option<zstd::bulk::Compressor<'static>>,
    auto: Option<&Mutex<Auto>>,
) -> io::Result<(Vec<u8>, bool)> {
    match choice {
        Choice::Store => Ok((stored_frame_of(buf), true)),
        Choice::Compress(level) => {
            let z = match zc.as_mut() {
                Some(z) => z,
                None => zc.insert(compressor(level)?),
            };
            let out = z.compress(buf)?;
            if let Some(a) = auto {
                lock(a).compressed(buf.len(), out.len());
            }
            Ok((out, false))
        }
    }
}

fn count(plain: usize, frame: &[u8], stored: bool) {
    PLAIN.fetch_add(plain as u64, Ordering::Relaxed);
    WIRE.fetch_add(frame.len() as u64, Ordering::Relaxed);
    if stored {
        STORED.fetch_add(1, Ordering::Relaxed);
    } else {
        COMPRESSED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Codes a body handed over piece by piece (a small local file read
/// whole, a copy from another server) into the same frames as
/// [`zstd_file_body`], a [`SEGMENT`] at a time, on the caller's thread
/// (level 1 takes a few milliseconds per MiB). Stored segments are not
/// timed here: `auto` learns the link's rate from file bodies.
pub struct Segmenter {
    coding: Coding,
    auto: Arc<Mutex<Auto>>,
    buf: Vec<u8>,
    zc: Option<zstd::bulk::Compressor<'static>>,
    any: bool,
}

impl Segmenter {
    pub fn new(coding: Coding, auto: Arc<Mutex<Auto>>) -> Segmenter {
        Segmenter {
            coding,
            auto,
            buf: Vec::new(),
            zc: None,
            any: false,
        }
    }

    fn frame(&mut self) -> io::Result<Bytes> {
        let choice = match self.coding {
            Coding::Level(l) => Choice::Compress(l),
            Coding::Auto => lock(&self.auto).choose(),
        };
        let auto = (self.coding == Coding::Auto).then_some(&*self.auto);
        let (frame, stored) = code(&self.buf, choice, &mut self.zc, auto)?;
        count(self.buf.len(), &frame, stored);
        self.buf.clear();
        self.any = true;
        Ok(Bytes::from(frame))
    }

    /// The frames `data` completes (none until a segment is full).
    pub fn push(&mut self, mut data: &[u8]) -> io::Result<Vec<Bytes>> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let take = (SEGMENT - self.buf.len()).min(data.len());
            let (now, rest) = data.split_at(take);
            self.buf.extend_from_slice(now);
            data = rest;
            if self.buf.len() == SEGMENT {
                out.push(self.frame()?);
            }
        }
        Ok(out)
    }

    /// The last frame: what is held (an empty frame for an empty body).
    pub fn finish(mut self) -> io::Result<Option<Bytes>> {
        if self.buf.is_empty() && self.any {
            return Ok(None);
        }
        self.frame().map(Some)
    }
}

/// The compression state carried from one blocking step to the next.
struct Work {
    file: Arc<File>,
    at: u64,
    left: u64,
    coding: Coding,
    auto: Arc<Mutex<Auto>>,
    zc: Option<zstd::bulk::Compressor<'static>>,
    /// Asked after the last segment is read, before it is coded
    /// ([`crate::EndCheck`]).
    check: Option<crate::EndCheck>,
}

/// One segment made: its frame, how many file bytes it holds, and
/// whether it was stored.
struct Made {
    work: Work,
    frame: Bytes,
    plain: usize,
    stored: bool,
}

fn lock(a: &Mutex<Auto>) -> std::sync::MutexGuard<'_, Auto> {
    a.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read and code the next segment. Blocking.
fn make(mut w: Work) -> io::Result<Made> {
    let n = w.left.min(SEGMENT as u64) as usize;
    let last = n as u64 == w.left;
    let choice = match w.coding {
        Coding::Level(l) => Choice::Compress(l),
        Coding::Auto => lock(&w.auto).choose(),
    };
    let (frame, stored) = match choice {
        // Read straight into the frame.
        Choice::Store => {
            let frame = stored_frame(&w.file, w.at, n)?;
            end_check(&w, last)?;
            (frame, true)
        }
        Choice::Compress(_) => {
            let mut buf = vec![0u8; n];
            w.file.read_exact_at(&mut buf, w.at)?;
            end_check(&w, last)?;
            let auto = (w.coding == Coding::Auto).then_some(&*w.auto);
            code(&buf, choice, &mut w.zc, auto)?
        }
    };
    w.at += n as u64;
    w.left -= n as u64;
    Ok(Made {
        work: w,
        frame: Bytes::from(frame),
        plain: n,
        stored,
    })
}

/// The last segment was read: the file is asked ([`crate::EndCheck`])
/// before its frame is made, so a failed check hands out none of it.
fn end_check(w: &Work, last: bool) -> io::Result<()> {
    match (&w.check, last) {
        (Some(check), true) => check(),
        _ => Ok(()),
    }
}

/// A request body that sends `len` bytes of `file` from `offset` coded as
/// zstd frames ([`Coding`]). `progress` is told of file bytes as their
/// frame is handed to the connection. The length on the wire is not known
/// in advance (HTTP/1.1 sends it chunked).
///
/// With `check` (a [`crate::EndCheck`]), the last segment is coded and
/// handed out only if it says so.
pub fn zstd_file_body(
    file: Arc<File>,
    offset: u64,
    len: u64,
    coding: Coding,
    auto: Arc<Mutex<Auto>>,
    progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    check: Option<crate::EndCheck>,
) -> Body {
    ZstdFileBody {
        work: Some(Work {
            file,
            at: offset,
            left: len,
            coding,
            auto,
            zc: None,
            check,
        }),
        inflight: None,
        rest: Bytes::new(),
        rest_plain: 0,
        timing: None,
        waited: false,
        progress,
        empty: len == 0,
    }
    .boxed_unsync()
}

struct ZstdFileBody {
    /// The state, when no step runs with it.
    work: Option<Work>,
    inflight: Option<JoinHandle<io::Result<Made>>>,
    /// The frame being handed out.
    rest: Bytes,
    /// File bytes of that frame, told to `progress` with its last piece.
    rest_plain: u64,
    /// The frame being handed out (`auto` only): stored or not, its file
    /// bytes, when its first piece went; timed when the next one starts.
    timing: Option<(bool, usize, Instant)>,
    /// The connection asked for more before the next segment was made:
    /// the maker (that segment's way) held the body up, not the
    /// connection, so the interval is that segment's.
    waited: bool,
    progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    /// A zero-length body still owes one (empty) frame.
    empty: bool,
}

impl ZstdFileBody {
    fn start(&mut self) {
        if self.inflight.is_some() {
            return;
        }
        match self.work.take() {
            Some(w) if w.left > 0 => {
                self.inflight = Some(tokio::task::spawn_blocking(move || make(w)));
            }
            other => self.work = other,
        }
    }

    /// The next piece of the frame in hand.
    fn piece(&mut self) -> Frame<Bytes> {
        let n = self.rest.len().min(PIECE);
        let b = self.rest.split_to(n);
        if self.rest.is_empty() {
            if let Some(p) = &self.progress {
                p(self.rest_plain);
            }
        }
        Frame::data(b)
    }
}

impl http_body::Body for ZstdFileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(this.piece())));
        }
        if this.empty {
            // An empty file is one empty stored frame.
            this.empty = false;
            // Magic, single segment with a 1-byte content size of 0, one
            // last raw block of 0 bytes.
            const EMPTY: &[u8] = &[0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x00, 0x01, 0x00, 0x00];
            count(0, EMPTY, true);
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(EMPTY)))));
        }
        this.start();
        let Some(h) = this.inflight.as_mut() else {
            return Poll::Ready(None);
        };
        let made = match Pin::new(h).poll(cx) {
            Poll::Pending => {
                this.waited = true;
                return Poll::Pending;
            }
            Poll::Ready(r) => r.map_err(io::Error::other).and_then(|r| r),
        };
        this.inflight = None;
        let made = match made {
            Ok(m) => m,
            Err(e) => return Poll::Ready(Some(Err(e))),
        };
        count(made.plain, &made.frame, made.stored);
        if made.work.coding == Coding::Auto {
            let now = Instant::now();
            if let Some((stored, plain, t)) = this.timing.take() {
                // Whichever held the body up: the connection (still
                // sending the last segment) or the maker of this one.
                let which = if this.waited { made.stored } else { stored };
                lock(&made.work.auto).went(which, plain, now - t);
            }
            this.waited = false;
            this.timing = Some((made.stored, made.plain, now));
        }
        this.work = Some(made.work);
        this.rest = made.frame;
        this.rest_plain = made.plain as u64;
        // The next segment is made while this one is sent.
        this.start();
        Poll::Ready(Some(Ok(this.piece())))
    }

    fn is_end_stream(&self) -> bool {
        !self.empty
            && self.rest.is_empty()
            && self.inflight.is_none()
            && self.work.as_ref().is_none_or(|w| w.left == 0)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(data: &[u8]) -> (tempfile::NamedTempFile, Arc<File>) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(data).unwrap();
        let f = Arc::new(File::open(t.path()).unwrap());
        (t, f)
    }

    fn random(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn stored_frames_decode_with_stock_zstd() {
        for n in [1, 100, RAW_BLOCK, RAW_BLOCK + 1, SEGMENT, 3 * RAW_BLOCK - 7] {
            let data = random(n);
            let (_t, f) = file_with(&data);
            let frame = stored_frame(&f, 0, n).unwrap();
            assert_eq!(frame.len(), 9 + 3 * n.div_ceil(RAW_BLOCK) + n);
            assert_eq!(zstd::decode_all(&frame[..]).unwrap(), data, "{n}");
        }
        // From an offset.
        let data = random(1000);
        let (_t, f) = file_with(&data);
        let frame = stored_frame(&f, 10, 500).unwrap();
        assert_eq!(zstd::decode_all(&frame[..]).unwrap(), &data[10..510]);
    }

    #[test]
    fn auto_samples_then_follows_the_figures() {
        let ms = Duration::from_millis;
        let mut a = Auto::default();
        // Nothing known: compress (the sample).
        assert_eq!(a.choose(), Choice::Compress(AUTO_LEVEL));
        a.compressed(SEGMENT, SEGMENT / 3);
        // No body timed yet: the ratio decides, one stored to time.
        assert_eq!(a.choose(), Choice::Store);
        assert_eq!(a.choose(), Choice::Compress(AUTO_LEVEL));
        // A slow link: compressed MiBs go 3x faster than stored ones.
        a.went(false, SEGMENT, ms(14));
        a.went(true, SEGMENT, ms(40));
        let picks: Vec<Choice> = (0..PROBE_EVERY).map(|_| a.choose()).collect();
        let stored = picks.iter().filter(|c| **c == Choice::Store).count();
        assert_eq!(stored, 2, "two probes a round: {picks:?}");
        // Loopback: the compressor is the slow stage; storing wins after a
        // few segments of each.
        for _ in 0..4 {
            a.went(false, SEGMENT, ms(4));
            a.went(true, SEGMENT, ms(1));
        }
        let picks: Vec<Choice> = (0..PROBE_EVERY).map(|_| a.choose()).collect();
        let stored = picks.iter().filter(|c| **c == Choice::Store).count();
        assert_eq!(stored, PROBE_EVERY as usize - 2, "{picks:?}");
        // Incompressible: stored, sampled once a round.
        a.compressed(SEGMENT, SEGMENT);
        let picks: Vec<Choice> = (0..PROBE_EVERY).map(|_| a.choose()).collect();
        let stored = picks.iter().filter(|c| **c == Choice::Store).count();
        assert_eq!(stored, PROBE_EVERY as usize - 1, "{picks:?}");
        assert!(!a.pays());
        // Tiny segments are not timed.
        let before = a.rate_stored;
        a.went(true, 100, Duration::from_secs(1));
        assert_eq!(a.rate_stored, before);
    }

    #[test]
    fn per_file_rule_probes_then_codes_only_slow_links() {
        let mut a = Auto::default();
        // Nothing known: a big ranged file is probed, anything else plain.
        assert_eq!(a.code_file(PROBE_MIN, true), FilePlan::Probe);
        assert_eq!(a.code_file(PROBE_MIN, false), FilePlan::Plain);
        assert_eq!(a.code_file(PROBE_MIN - 1, true), FilePlan::Plain);
        assert!(!a.last_coded());
        // Loopback: plain went at 1.4 GB/s, zstd -1 at 400 MB/s.
        a.measured_link(PROBE, Duration::from_secs_f64(PROBE as f64 / 1.4e9));
        assert!(!a.sampled(0.3, 400e6), "a fast link is never coded");
        assert_eq!(a.code_file(1 << 30, true), FilePlan::Plain);
        // 200 Mbit/s: 24 MB/s plain.
        a.measured_link(PROBE, Duration::from_secs_f64(PROBE as f64 / 24e6));
        assert_eq!(a.code_file(1, false), FilePlan::Sample);
        assert!(a.sampled(0.33, 400e6), "text on a slow link is coded");
        assert!(a.last_coded());
        assert!(!a.sampled(0.97, 400e6), "random data is not");
        assert!(!a.sampled(CODE_RATIO + 0.01, 400e6));
        // A compressor slower than the link (a busy host) does not pay.
        assert!(!a.sampled(0.3, 25e6));
    }

    #[test]
    fn a_sample_says_ratio_and_speed() {
        let mut text = Vec::new();
        while text.len() < SAMPLE {
            text.extend_from_slice(b"ferry moves files; zstd makes text smaller. ");
        }
        let (_t, f) = file_with(&text);
        let (ratio, rate) = sample(&f, 0, SAMPLE).unwrap();
        assert!(ratio < 0.1, "{ratio}");
        assert!(rate > 1e6, "{rate}");
        let data = random(SAMPLE);
        let (_t, f) = file_with(&data);
        let (ratio, _) = sample(&f, 0, SAMPLE).unwrap();
        assert!(ratio > 0.99, "{ratio}");
    }

    async fn body_bytes(b: Body) -> Vec<u8> {
        b.collect().await.unwrap().to_bytes().to_vec()
    }

    /// A body to its end: the bytes handed out, and the error it ended
    /// with, if it did.
    async fn drain(mut b: Body) -> (Vec<u8>, Option<io::Error>) {
        let mut out = Vec::new();
        while let Some(frame) = b.frame().await {
            match frame {
                Ok(f) => out.extend_from_slice(&f.into_data().unwrap()),
                Err(e) => return (out, Some(e)),
            }
        }
        (out, None)
    }

    /// The end check (issue #24: a source rewritten during its upload)
    /// is asked once, after the last bytes were read; when it fails the
    /// body hands out everything before them and ends with its error, so
    /// the request is cut short; when it passes the body is whole.
    #[tokio::test]
    async fn a_failed_end_check_withholds_the_last_piece() {
        let data = random(3 * SEGMENT + 777);
        let n = data.len() as u64;
        let (_t, f) = file_with(&data);
        for fails in [false, true] {
            for zstd in [false, true] {
                let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
                let a2 = asked.clone();
                let check: crate::EndCheck = Arc::new(move || {
                    a2.fetch_add(1, Ordering::Relaxed);
                    if fails {
                        Err(io::Error::other("the source changed"))
                    } else {
                        Ok(())
                    }
                });
                let body = if zstd {
                    let auto = Arc::new(Mutex::new(Auto::default()));
                    let c = Coding::Level(1);
                    zstd_file_body(f.clone(), 0, n, c, auto, None, Some(check))
                } else {
                    crate::file_body_checked(f.clone(), 0, n, None, Some(check))
                };
                let (wire, err) = drain(body).await;
                let got = if zstd {
                    zstd::decode_all(&wire[..]).unwrap()
                } else {
                    wire
                };
                let what = format!("zstd {zstd}, check fails {fails}");
                assert_eq!(asked.load(Ordering::Relaxed), 1, "{what}");
                if fails {
                    assert!(
                        err.is_some_and(|e| e.to_string().contains("changed")),
                        "{what}"
                    );
                    assert!(got.len() < data.len(), "{what}");
                    assert!(got.len() >= data.len() - SEGMENT, "{what}: {}", got.len());
                    assert_eq!(got, data[..got.len()], "{what}");
                } else {
                    assert!(err.is_none(), "{what}: {err:?}");
                    assert_eq!(got, data, "{what}");
                }
            }
        }
    }

    #[tokio::test]
    async fn bodies_decode_to_the_file_whatever_is_chosen() {
        let mut text = Vec::new();
        while text.len() < 3 * SEGMENT + 777 {
            text.extend_from_slice(b"ferry moves files; zstd makes text smaller. ");
        }
        let mut mixed = text.clone();
        mixed.extend_from_slice(&random(2 * SEGMENT));
        for data in [text, mixed, Vec::new(), b"x".to_vec()] {
            let (_t, f) = file_with(&data);
            for coding in [Coding::Auto, Coding::Level(3)] {
                let auto = Arc::new(Mutex::new(Auto::default()));
                let body =
                    zstd_file_body(f.clone(), 0, data.len() as u64, coding, auto, None, None);
                let wire = body_bytes(body).await;
                assert_eq!(zstd::decode_all(&wire[..]).unwrap(), data);
                // Through ferry's own bounded decoder too.
                let mut d = crate::decode::Decoder::for_encoding(Some("zstd")).unwrap();
                let got = d.feed(&wire).unwrap();
                assert_eq!(got.len() + d.finish().unwrap().len(), data.len());
            }
        }
        // Handed over in pieces: the same frames.
        for n in [0usize, 1, SEGMENT - 1, SEGMENT, 2 * SEGMENT + 5] {
            let data = random(n);
            for coding in [Coding::Auto, Coding::Level(1)] {
                let mut seg = Segmenter::new(coding, Arc::new(Mutex::new(Auto::default())));
                let mut wire = Vec::new();
                for piece in data.chunks(100_000) {
                    for f in seg.push(piece).unwrap() {
                        wire.extend_from_slice(&f);
                    }
                }
                if let Some(f) = seg.finish().unwrap() {
                    wire.extend_from_slice(&f);
                }
                assert!(!wire.is_empty());
                assert_eq!(zstd::decode_all(&wire[..]).unwrap(), data, "{n}");
            }
        }
        // A range of the file.
        let data = random(SEGMENT + 5);
        let (_t, f) = file_with(&data);
        let auto = Arc::new(Mutex::new(Auto::default()));
        let wire = body_bytes(zstd_file_body(
            f,
            3,
            SEGMENT as u64,
            Coding::Auto,
            auto,
            None,
            None,
        ))
        .await;
        assert_eq!(zstd::decode_all(&wire[..]).unwrap(), &data[3..3 + SEGMENT]);
    }
}
