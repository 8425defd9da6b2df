//! A backend in memory, with faults injected on demand: the engine's
//! planning, scheduling, resume, cancellation, retries and rename
//! atomicity are tested against it without a socket, deterministically
//! (quinn tests `quinn-proto` the same way with its in-memory `Pair`).
//!
//! Faults ([`Faults`]): a read that fails after N bytes (a few times, then
//! heals: a transient failure), a read of one named file that fails every
//! time, reads that stall (bytes stop, nothing closes), ranges that complete
//! in reverse order, writes that arrive in small pieces, a disk that fills
//! up after N bytes, and a rename that fails. For the fault matrix
//! (tests/fault_matrix.rs) also: writes that fail after N bytes or stall,
//! a destination that refuses writes, a rename that never answers or whose
//! answer is lost after it was done, and a hook run once after N bytes
//! (to change or truncate a source mid-copy). Reads serve the file as it
//! is when each piece is taken, as a server reading from disk does, so a
//! file changed during a read is seen. It can also stand in for an
//! HTML index: listings without sizes or times, each file's size learned
//! from its read (`Faults::listing_without_sizes`, `read_unsized`).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    path, Backend, ByteStream, Capabilities, Entry, EntryKind, HashAlgo, LocalRange, LocalSource,
    LocalTarget, RangeProgress, RangeTask, ReadInfo, Role, Sink, UnsizedRead, WriteMode,
};
use crate::error::TransferError;

/// What goes wrong, and when.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Reads fail with a network error once this many bytes of one read
    /// have been served, for the first `transient_reads` reads that get
    /// that far (0: every time).
    pub fail_read_after: Option<u64>,
    pub transient_reads: usize,
    /// Reads of this path fail at once, every time (a server refusal).
    pub refuse_path: Option<Vec<u8>>,
    /// Reads starting at this offset fail at once, every time: one range
    /// of a split file fails while the others go on.
    pub refuse_offset: Option<u64>,
    /// Reads stop delivering after this many bytes and never end.
    pub stall_after: Option<u64>,
    /// Each read delays its first piece by (1000 - offset / 1 MiB) µs, so
    /// later ranges of a split file finish before earlier ones.
    pub reorder: bool,
    /// Writes are stored a few bytes at a time.
    pub short_writes: bool,
    /// Stored bytes (all files) may not exceed this: "no space left".
    pub capacity: Option<u64>,
    /// `rename_over` fails.
    pub fail_rename: bool,
    /// Listing this directory fails (a server refusal mid-walk).
    pub refuse_list: Option<Vec<u8>>,
    /// The next this many `stat`s fail with a network error: a server
    /// lost while ferry connects and plans.
    pub lost_stats: usize,
    /// Listings give no sizes or times (an HTML index), and
    /// `read_unsized` says them as an HTTP GET's answer does (`stat`
    /// still says them, as a HEAD does).
    pub listing_without_sizes: bool,
    /// With `listing_without_sizes`: the read does not say the size
    /// either (a compressed or chunked body); the stream ends where the
    /// file does.
    pub read_without_size: bool,
    /// Reads end cleanly after this many bytes, against the contract (a
    /// body shorter than the length its answer announced).
    pub short_reads: Option<u64>,
    /// Reads and writes run on a thread of the backend's own, as an SSH
    /// connection's do: a copy between this backend and a local file goes
    /// whole to that thread (`ByteStream::write_into`, `Sink::read_from`).
    pub own_thread: bool,
    /// A whole file into a local one is made in one job on a blocking
    /// thread, as FTP's are ([`Backend::get_local`]).
    pub one_job: bool,
    /// With `own_thread`: `homes` names a thread that has ended (an SSH
    /// connection's that closed), so work handed there must be done
    /// elsewhere.
    pub home_gone: bool,
    /// A write that would take one sink past this many bytes fails with a
    /// network error (nothing of it stored), for the first
    /// `transient_writes` that get that far (0: every time): a connection
    /// reset mid-upload.
    pub fail_write_after: Option<u64>,
    pub transient_writes: usize,
    /// A write that would take one sink past this many bytes never
    /// returns (a stalled upload).
    pub stall_write_after: Option<u64>,
    /// Opening a file for writing is refused (permission denied).
    pub refuse_write: bool,
    /// `rename_over` never returns (the client killed during its rename).
    pub hold_rename: bool,
    /// `rename_over` renames, then reports a lost connection, this many
    /// times (the answer lost on the way back).
    pub lose_rename_answers: usize,
    /// Run once, when this store has served (`reads`) or stored that many
    /// bytes in all, counted from when the faults were set.
    pub hook: Option<Hook>,
    /// The path's round trip this store reports ([`Backend::round_trip`]):
    /// a long one lets the engine widen big files.
    pub round_trip: Option<Duration>,
    /// Each read delivers at most this many bytes a second: a connection
    /// held by its window or its losses on a long path.
    pub read_rate: Option<u64>,
    /// Each ranged read opens a connection of its own, as FTP's do
    /// ([`Backend::range_opens_connection`]).
    pub range_per_connection: bool,
    /// `read_info` announces a CRC32 as the file's digest, as S3 does.
    pub crc32_digest: Option<Crc32Digest>,
}

/// The CRC32 a store announces ([`Faults::crc32_digest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crc32Digest {
    /// The file's own.
    Right,
    /// Another one: the stored bytes changed behind the store's back.
    Wrong,
}

/// Something a test does to the world at a given point of a copy (change
/// the source, truncate it), from inside the backend's read or write.
#[derive(Clone)]
pub struct Hook {
    /// Bytes served (`reads`) or stored, in all, before it runs.
    pub after: u64,
    pub reads: bool,
    pub run: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hook {{ after: {}, reads: {} }}", self.after, self.reads)
    }
}

/// `f` run to its end from a blocking thread, or left (cancelled) once
/// the engine told the job to stop: a held or stalled call never keeps
/// the thread.
fn until_stopped<T>(
    rt: &tokio::runtime::Handle,
    progress: &RangeProgress,
    f: impl std::future::Future<Output = Result<T, TransferError>>,
) -> Result<T, TransferError> {
    rt.block_on(async {
        tokio::select! {
            r = f => r,
            _ = async {
                while !progress.stopped() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            } => Err(TransferError::cancelled()),
        }
    })
}

/// The thread of every in-memory backend with `own_thread`: a
/// current-thread runtime, as an SSH connection has.
fn own_thread() -> tokio::runtime::Handle {
    static RT: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
    RT.get_or_init(|| match super::OwnThread::start("ferry-memory".into()) {
        Ok(t) => {
            let rt = t.rt.clone();
            // For the life of the process.
            std::mem::forget(t);
            rt
        }
        Err(_) => tokio::runtime::Handle::current(),
    })
    .clone()
}

#[derive(Debug, Clone)]
struct MemFile {
    data: Vec<u8>,
    mtime: i64,
    mode: u32,
}

#[derive(Default)]
struct State {
    files: BTreeMap<Vec<u8>, MemFile>,
    dirs: BTreeSet<Vec<u8>>,
}

/// Counters a test reads after a run.
#[derive(Debug, Default)]
pub struct Counters {
    pub reads: AtomicUsize,
    /// `stat` calls.
    pub stats: AtomicUsize,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub renames: AtomicUsize,
    /// Reads that failed by injection so far.
    pub failed_reads: AtomicUsize,
    /// Writes that failed by injection so far.
    pub failed_writes: AtomicUsize,
    /// Reads, writes and renames now stalled or held by injection.
    pub stalled: AtomicUsize,
    /// The most ranges the engine asked to widen a file over
    /// ([`Backend::widen`]); 0: never asked.
    pub widened: AtomicUsize,
    /// Files hashed where they lie ([`Backend::hash`]).
    pub hashed: AtomicUsize,
    /// Local files made whole in one job ([`Backend::get_local`]).
    pub made_local: AtomicUsize,
    /// Local files taken whole in one job ([`Backend::put_from_local`]).
    pub sent_local: AtomicUsize,
}

/// A tree of files in memory; clones share it (a test keeps one, the
/// engine gets another).
#[derive(Clone)]
pub struct Memory(Arc<Inner>);

pub struct Inner {
    name: String,
    state: Mutex<State>,
    faults: Mutex<Faults>,
    /// Bytes served and stored since the faults were set (for `Hook`),
    /// and whether the hook has run.
    since_faults: Mutex<(u64, u64, bool)>,
    pub counters: Counters,
    /// Bytes served per read piece.
    piece: usize,
    /// Takes files whole, as an HTTP PUT does ([`Memory::set_whole_files`]).
    whole: AtomicBool,
}

impl std::ops::Deref for Memory {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Memory {
    /// An empty store with a root directory `/`. `name` tells two stores
    /// apart in messages (`mem://NAME/path`).
    pub fn new(name: &str) -> Memory {
        let m = Inner {
            name: name.into(),
            state: Mutex::new(State::default()),
            faults: Mutex::new(Faults::default()),
            since_faults: Mutex::new((0, 0, false)),
            counters: Counters::default(),
            piece: 64 * 1024,
            whole: AtomicBool::new(false),
        };
        lock(&m.state).dirs.insert(b"/".to_vec());
        Memory(Arc::new(m))
    }

    /// From now on this store takes files whole, as a server of HTTP PUTs
    /// does (nginx's dav module, ferry serve): no rename, no write at an
    /// offset; a write appears under its name only when `finish`ed, and
    /// an abandoned one leaves nothing (`atomic_write`).
    pub fn set_whole_files(&self, on: bool) {
        self.whole.store(on, Ordering::Relaxed);
    }

    fn whole_files(&self) -> bool {
        self.whole.load(Ordering::Relaxed)
    }

    pub fn set_faults(&self, f: Faults) {
        *lock(&self.faults) = f;
        *lock(&self.since_faults) = (0, 0, false);
    }

    /// Count `n` bytes served (`read`) or stored, and run the hook once
    /// its point is passed (outside every lock of the store).
    fn passed(&self, n: u64, read: bool) {
        let hook = lock(&self.faults).hook.clone();
        let Some(h) = hook else { return };
        let run = {
            let mut c = lock(&self.since_faults);
            if read {
                c.0 += n;
            } else {
                c.1 += n;
            }
            let seen = if h.reads { c.0 } else { c.1 };
            let now = !c.2 && h.reads == read && seen >= h.after;
            c.2 |= now;
            now
        };
        if run {
            (h.run)();
        }
    }

    /// Replace a file's bytes (and time), as a program writing the source
    /// in place during a copy does; the file must exist.
    pub fn rewrite(&self, p: &str, data: &[u8], mtime: i64) {
        if let Some(f) = lock(&self.state).files.get_mut(p.as_bytes()) {
            f.data = data.to_vec();
            f.mtime = mtime;
        }
    }

    /// Put a file (its parents are created).
    pub fn put(&self, p: &str, data: &[u8], mtime: i64) {
        let mut s = lock(&self.state);
        let mut d = path::parent(p.as_bytes()).to_vec();
        while !d.is_empty() && s.dirs.insert(d.clone()) {
            d = path::parent(&d).to_vec();
        }
        s.files.insert(
            p.as_bytes().to_vec(),
            MemFile {
                data: data.to_vec(),
                mtime,
                mode: 0o644,
            },
        );
    }

    pub fn mkdir(&self, p: &str) {
        lock(&self.state).dirs.insert(p.as_bytes().to_vec());
    }

    pub fn get(&self, p: &str) -> Option<Vec<u8>> {
        lock(&self.state)
            .files
            .get(p.as_bytes())
            .map(|f| f.data.clone())
    }

    pub fn mtime(&self, p: &str) -> Option<i64> {
        lock(&self.state).files.get(p.as_bytes()).map(|f| f.mtime)
    }

    /// Every file's path, sorted.
    pub fn files(&self) -> Vec<String> {
        lock(&self.state)
            .files
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    fn stored(&self) -> u64 {
        lock(&self.state)
            .files
            .values()
            .map(|f| f.data.len() as u64)
            .sum()
    }
}

#[async_trait]
impl Backend for Memory {
    fn scheme(&self) -> &'static str {
        "memory"
    }
    fn display(&self, p: &[u8]) -> String {
        format!("mem://{}{}", self.name, String::from_utf8_lossy(p))
    }

    fn home(&self, _p: &[u8]) -> Option<tokio::runtime::Handle> {
        lock(&self.faults).own_thread.then(own_thread)
    }
    fn put_from_local(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        from: LocalSource,
    ) -> Option<RangeTask> {
        if !lock(&self.faults).one_job {
            return None;
        }
        let me = self.clone();
        let (w, to, renamed) = (part.unwrap_or(to).to_vec(), to.to_vec(), part.is_some());
        let rt = tokio::runtime::Handle::current();
        self.counters.sent_local.fetch_add(1, Ordering::Relaxed);
        Some(tokio::task::spawn_blocking(move || {
            let (range, check) = from.open(&me.display(&w)).map_err(|e| (e, true))?;
            let progress = range.progress.clone();
            let local = |e| (e, false);
            let create = me.write(&w, WriteMode::Create { perm: None }, Some(from.len));
            let mut sink = until_stopped(&rt, &progress, create).map_err(local)?;
            let mut at = 0;
            while at < from.len {
                let n = (from.len - at).min(256 * 1024);
                let buf = range
                    .file
                    .append(range.file.at + at, n, Vec::new())
                    .map_err(|e| (e, true))?;
                until_stopped(&rt, &progress, sink.write(Bytes::from(buf))).map_err(local)?;
                at += n;
                range.progress.add(n);
            }
            until_stopped(&rt, &progress, sink.finish()).map_err(local)?;
            if check.check().is_err() {
                from.changed.store(true, Ordering::Relaxed);
                let _ = rt.block_on(me.remove(&w));
                let msg = format!("{}: the file changed during the copy", from.path.display());
                return Err((TransferError::Remote(msg), false));
            }
            if renamed {
                until_stopped(&rt, &progress, me.rename_over(&w, &to)).map_err(local)?;
            }
            Ok(())
        }))
    }
    fn get_local(&self, p: &[u8], to: LocalTarget) -> Option<RangeTask> {
        if !lock(&self.faults).one_job {
            return None;
        }
        let (me, p, rt) = (self.clone(), p.to_vec(), tokio::runtime::Handle::current());
        self.counters.made_local.fetch_add(1, Ordering::Relaxed);
        Some(tokio::task::spawn_blocking(move || {
            let len = to.len;
            to.make(|mut range| {
                let progress = range.progress.clone();
                let source = |e| (e, true);
                let read = me.read(&p, 0, Some(len));
                let mut s = until_stopped(&rt, &progress, read).map_err(source)?;
                while let Some(piece) = until_stopped(&rt, &progress, s.next()).map_err(source)? {
                    range.file.write(&piece).map_err(|e| (e, false))?;
                    range.progress.add(piece.len() as u64);
                }
                Ok(())
            })
        }))
    }
    fn stat_as_listed(&self) -> bool {
        // A store that makes local files as FTP does stands in for it.
        !lock(&self.faults).one_job
    }
    fn sizes_by_reading(&self) -> bool {
        // As HTTP's: a read says the size where the listing did not.
        lock(&self.faults).listing_without_sizes
    }
    fn homes(&self) -> Vec<tokio::runtime::Handle> {
        if lock(&self.faults).home_gone {
            // A runtime already shut down (on a thread of its own: one
            // may not be dropped inside another): what is spawned there
            // never runs.
            let gone = std::thread::spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread().build().ok()?;
                Some(rt.handle().clone())
            })
            .join();
            return match gone {
                Ok(Some(h)) => vec![h],
                _ => Vec::new(),
            };
        }
        self.home(b"").into_iter().collect()
    }

    fn capabilities(&self) -> Capabilities {
        let whole = self.whole_files();
        Capabilities {
            ranged_read: true,
            offset_write: !whole,
            append: !whole,
            rename_over: !whole,
            atomic_write: whole,
            set_times: true,
            set_mode: true,
            list: true,
            server_copy: false,
            max_files: 16,
            max_ranges: 4,
        }
    }
    fn endpoint_key(&self) -> String {
        format!("memory:{}", self.name)
    }
    fn round_trip(&self) -> Option<Duration> {
        lock(&self.faults).round_trip
    }
    fn range_opens_connection(&self) -> bool {
        lock(&self.faults).range_per_connection
    }
    async fn widen(&self, _role: Role, ranges: usize) -> usize {
        self.counters.widened.fetch_max(ranges, Ordering::Relaxed);
        ranges
    }

    async fn stat(&self, p: &[u8]) -> Result<Option<Entry>, TransferError> {
        self.counters.stats.fetch_add(1, Ordering::Relaxed);
        {
            let mut f = lock(&self.faults);
            if f.lost_stats > 0 {
                f.lost_stats -= 1;
                return Err(TransferError::Network(format!(
                    "{}: connection lost (injected)",
                    self.display(p)
                )));
            }
        }
        let s = lock(&self.state);
        let name = path::basename(p).to_vec();
        if let Some(f) = s.files.get(p) {
            return Ok(Some(Entry {
                name,
                kind: EntryKind::File,
                size: Some(f.data.len() as u64),
                mtime: Some(f.mtime),
                mode: Some(f.mode),
            }));
        }
        let d = if p.len() > 1 {
            p.strip_suffix(b"/").unwrap_or(p)
        } else {
            p
        };
        Ok(s.dirs.contains(d).then_some(Entry {
            name,
            kind: EntryKind::Dir,
            size: None,
            mtime: None,
            mode: Some(0o755),
        }))
    }

    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        if lock(&self.faults).refuse_list.as_deref() == Some(dir) {
            return Err(TransferError::Remote(format!(
                "{}: permission denied (injected)",
                self.display(dir)
            )));
        }
        let s = lock(&self.state);
        let d = if dir.len() > 1 {
            dir.strip_suffix(b"/").unwrap_or(dir)
        } else {
            dir
        };
        if !s.dirs.contains(d) {
            return Err(TransferError::Remote(format!(
                "{}: no such directory",
                self.display(dir)
            )));
        }
        let under = |p: &[u8]| path::parent(p) == d && p != d;
        let sizes = !lock(&self.faults).listing_without_sizes;
        let mut out: Vec<Entry> = s
            .dirs
            .iter()
            .filter(|p| under(p))
            .map(|p| Entry {
                name: path::basename(p).to_vec(),
                kind: EntryKind::Dir,
                size: None,
                mtime: None,
                mode: Some(0o755),
            })
            .collect();
        out.extend(
            s.files
                .iter()
                .filter(|(p, _)| under(p))
                .map(|(p, f)| Entry {
                    name: path::basename(p).to_vec(),
                    kind: EntryKind::File,
                    size: Some(f.data.len() as u64).filter(|_| sizes),
                    mtime: Some(f.mtime).filter(|_| sizes),
                    mode: Some(f.mode),
                }),
        );
        Ok(out)
    }

    async fn read(
        &self,
        p: &[u8],
        offset: u64,
        len: Option<u64>,
    ) -> Result<Box<dyn ByteStream>, TransferError> {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        let faults = lock(&self.faults).clone();
        if faults.refuse_path.as_deref() == Some(p) || faults.refuse_offset == Some(offset) {
            return Err(TransferError::Remote(format!(
                "{}: permission denied",
                self.display(p)
            )));
        }
        let (start, end) = {
            let s = lock(&self.state);
            let f = s.files.get(p).ok_or_else(|| {
                TransferError::Remote(format!("{}: no such file", self.display(p)))
            })?;
            let start = offset.min(f.data.len() as u64);
            let end = match len {
                Some(l) => start.saturating_add(l).min(f.data.len() as u64),
                None => f.data.len() as u64,
            };
            let end = match faults.short_reads {
                Some(n) => end.min(start + n),
                None => end,
            };
            (start, end)
        };
        let fail_after = faults.fail_read_after.filter(|_| {
            faults.transient_reads == 0
                || self.counters.failed_reads.load(Ordering::Relaxed) < faults.transient_reads
        });
        let delay = faults
            .reorder
            .then(|| Duration::from_micros(1000u64.saturating_sub(offset >> 20) * 5));
        Ok(Box::new(MemRead {
            path: p.to_vec(),
            start,
            end,
            at: 0,
            piece: self.piece,
            fail_after,
            stall_after: faults.stall_after,
            delay,
            display: self.display(p),
            store: self.clone(),
            own_thread: faults.own_thread,
            rate: faults.read_rate,
        }))
    }

    /// With `listing_without_sizes`, a version as an HTTP server's
    /// validator (size and time), the same `read_unsized` says.
    async fn read_info(&self, p: &[u8]) -> Result<ReadInfo, TransferError> {
        let faults = lock(&self.faults).clone();
        let version = faults
            .listing_without_sizes
            .then(|| lock(&self.state).files.get(p).map(version_of))
            .flatten();
        let digest = faults.crc32_digest.and_then(|d| {
            let mut crc = ferry_hash::of(HashAlgo::Crc32, &lock(&self.state).files.get(p)?.data);
            if d == Crc32Digest::Wrong {
                crc[0] ^= 1;
            }
            Some((HashAlgo::Crc32, crc))
        });
        Ok(ReadInfo {
            ranges: true,
            version,
            digest,
            ..ReadInfo::default()
        })
    }

    async fn read_unsized(&self, p: &[u8]) -> Result<Option<UnsizedRead>, TransferError> {
        let faults = lock(&self.faults).clone();
        if !faults.listing_without_sizes {
            return Ok(None);
        }
        let stream = self.read(p, 0, None).await?;
        let Some((size, mtime, version)) = lock(&self.state)
            .files
            .get(p)
            .map(|f| (f.data.len() as u64, f.mtime, version_of(f)))
        else {
            return Err(TransferError::Remote(format!(
                "{}: no such file",
                self.display(p)
            )));
        };
        Ok(Some(UnsizedRead {
            stream,
            size: Some(size).filter(|_| !faults.read_without_size),
            mtime: Some(mtime),
            info: ReadInfo {
                ranges: true,
                version: Some(version),
                ..ReadInfo::default()
            },
        }))
    }

    async fn write(
        &self,
        p: &[u8],
        mode: WriteMode,
        _size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        let parent = path::parent(p);
        if lock(&self.faults).refuse_write {
            return Err(TransferError::Remote(format!(
                "{}: permission denied (injected)",
                self.display(p)
            )));
        }
        let whole = self.whole_files();
        if whole && !matches!(mode, WriteMode::Create { .. }) {
            return Err(TransferError::Usage(format!(
                "internal: {}: this store takes whole files only",
                self.display(p)
            )));
        }
        {
            let s = lock(&self.state);
            if !parent.is_empty() && !s.dirs.contains(parent) {
                return Err(TransferError::Remote(format!(
                    "{}: no such directory",
                    self.display(parent)
                )));
            }
        }
        let perm = match mode {
            WriteMode::Create { perm } => perm,
            WriteMode::At(_) => None,
        };
        if !whole {
            let mut s = lock(&self.state);
            let f = s.files.entry(p.to_vec()).or_insert(MemFile {
                data: Vec::new(),
                mtime: 0,
                mode: 0o644,
            });
            if let WriteMode::Create { perm } = mode {
                f.data.clear();
                if let Some(p) = perm {
                    f.mode = p & 0o777;
                }
            }
        }
        let at = match mode {
            WriteMode::Create { .. } => 0,
            WriteMode::At(a) => a,
        };
        let own_thread = lock(&self.faults).own_thread;
        Ok(Box::new(MemWrite {
            path: p.to_vec(),
            at,
            stored: 0,
            store: self.clone(),
            own_thread,
            staged: whole.then(Vec::new),
            perm,
        }))
    }

    async fn mkdir_all(&self, dir: &[u8]) -> Result<(), TransferError> {
        let mut s = lock(&self.state);
        let mut d = if dir.len() > 1 {
            dir.strip_suffix(b"/").unwrap_or(dir).to_vec()
        } else {
            dir.to_vec()
        };
        if s.files.contains_key(&d) {
            return Err(TransferError::Remote(format!(
                "{}: a file is in the way",
                self.display(dir)
            )));
        }
        while !d.is_empty() && s.dirs.insert(d.clone()) {
            d = path::parent(&d).to_vec();
        }
        Ok(())
    }

    async fn rename_over(&self, from: &[u8], to: &[u8]) -> Result<(), TransferError> {
        if lock(&self.faults).hold_rename {
            self.counters.stalled.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<()>().await;
        }
        if lock(&self.faults).fail_rename {
            return Err(TransferError::Remote(format!(
                "{}: rename refused (injected)",
                self.display(to)
            )));
        }
        let mut s = lock(&self.state);
        if s.dirs.contains(to) {
            return Err(TransferError::Remote(format!(
                "{}: a directory is in the way",
                self.display(to)
            )));
        }
        let f = s.files.remove(from).ok_or_else(|| {
            TransferError::Remote(format!("{}: no such file", self.display(from)))
        })?;
        s.files.insert(to.to_vec(), f);
        drop(s);
        self.counters.renames.fetch_add(1, Ordering::Relaxed);
        let mut faults = lock(&self.faults);
        if faults.lose_rename_answers > 0 {
            faults.lose_rename_answers -= 1;
            return Err(TransferError::Network(format!(
                "{}: connection lost after the rename (injected)",
                self.display(to)
            )));
        }
        Ok(())
    }

    async fn remove(&self, p: &[u8]) -> Result<(), TransferError> {
        lock(&self.state).files.remove(p);
        Ok(())
    }

    async fn remove_dir(&self, p: &[u8]) -> Result<(), TransferError> {
        let mut s = lock(&self.state);
        let mut prefix = p.to_vec();
        prefix.push(b'/');
        let busy = s.files.keys().any(|k| k.starts_with(&prefix))
            || s.dirs.iter().any(|k| k.starts_with(&prefix));
        if busy {
            return Err(TransferError::Remote(format!(
                "{}: the directory is not empty",
                self.display(p)
            )));
        }
        s.dirs.remove(p);
        Ok(())
    }

    fn hashes(&self) -> Vec<super::HashAlgo> {
        vec![super::HashAlgo::Blake3, super::HashAlgo::Sha256]
    }

    async fn hash(
        &self,
        p: &[u8],
        algo: super::HashAlgo,
    ) -> Result<Option<Vec<u8>>, TransferError> {
        self.counters.hashed.fetch_add(1, Ordering::Relaxed);
        let data = match lock(&self.state).files.get(p) {
            Some(f) => f.data.clone(),
            None => {
                return Err(TransferError::Remote(format!(
                    "{}: no such file",
                    self.display(p)
                )))
            }
        };
        Ok(Some(ferry_hash::of(algo, &data)))
    }

    async fn set_attrs(
        &self,
        p: &[u8],
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Result<(), TransferError> {
        let mut s = lock(&self.state);
        if let Some(f) = s.files.get_mut(p) {
            if let Some(t) = mtime {
                f.mtime = t;
            }
            if let Some(m) = mode {
                f.mode = m;
            }
        }
        Ok(())
    }
}

/// A validator of a file's content, as an HTTP server's ETag.
fn version_of(f: &MemFile) -> String {
    format!("\"{}-{}\"", f.data.len(), f.mtime)
}

struct MemRead {
    path: Vec<u8>,
    /// The file's bytes `start..end` as the read was opened; each piece
    /// is taken from the file as it is then (it may have changed).
    start: u64,
    end: u64,
    at: usize,
    piece: usize,
    fail_after: Option<u64>,
    stall_after: Option<u64>,
    delay: Option<Duration>,
    display: String,
    store: Memory,
    own_thread: bool,
    /// Bytes a second at most (`Faults::read_rate`).
    rate: Option<u64>,
}

#[async_trait]
impl ByteStream for MemRead {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if let Some(d) = self.delay.take() {
            tokio::time::sleep(d).await;
        }
        if let Some(n) = self.stall_after {
            if self.at as u64 >= n {
                self.store.counters.stalled.fetch_add(1, Ordering::Relaxed);
                std::future::pending::<()>().await;
            }
        }
        if let Some(n) = self.fail_after {
            if self.at as u64 >= n {
                self.store
                    .counters
                    .failed_reads
                    .fetch_add(1, Ordering::Relaxed);
                return Err(TransferError::Network(format!(
                    "{}: connection reset (injected after {n} bytes)",
                    self.display
                )));
            }
        }
        let len = (self.end - self.start) as usize;
        if self.at >= len {
            return Ok(None);
        }
        let mut end = (self.at + self.piece).min(len);
        if let Some(n) = self.fail_after.or(self.stall_after) {
            end = end.min((n as usize).max(self.at + 1));
        }
        let b = {
            let s = lock(&self.store.state);
            let Some(f) = s.files.get(&self.path) else {
                return Err(TransferError::Remote(format!(
                    "{}: removed while reading",
                    self.display
                )));
            };
            let from = (self.start as usize + self.at).min(f.data.len());
            let to = (self.start as usize + end).min(f.data.len());
            // A file cut short since: the stream ends where it does now.
            if from >= to {
                return Ok(None);
            }
            Bytes::copy_from_slice(&f.data[from..to])
        };
        self.at += b.len();
        self.store
            .counters
            .bytes_read
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        self.store.passed(b.len() as u64, true);
        match self.rate {
            Some(r) => {
                tokio::time::sleep(Duration::from_secs_f64(b.len() as f64 / r.max(1) as f64)).await
            }
            None => tokio::task::yield_now().await,
        }
        Ok(Some(b))
    }

    fn write_into(&mut self, to: LocalRange) -> Option<RangeTask> {
        if !self.own_thread {
            return None;
        }
        let spent = MemRead {
            path: Vec::new(),
            start: 0,
            end: 0,
            delay: None,
            display: self.display.clone(),
            store: self.store.clone(),
            ..*self
        };
        let me = std::mem::replace(self, spent);
        Some(own_thread().spawn(crate::engine::drain_into(Box::new(me), to, 0)))
    }
}

struct MemWrite {
    path: Vec<u8>,
    at: u64,
    /// Bytes this write stored (for `fail_write_after`, `stall_write_after`).
    stored: u64,
    store: Memory,
    own_thread: bool,
    /// A store that takes files whole: the bytes so far, put under the
    /// name by `finish` (dropped unfinished, nothing).
    staged: Option<Vec<u8>>,
    /// The new file's permission bits, for `staged`.
    perm: Option<u32>,
}

impl MemWrite {
    /// A staged write complete: the file appears whole under its name.
    fn commit(&mut self) {
        let Some(data) = self.staged.take() else {
            return;
        };
        let mode = self.perm.map_or(0o644, |p| p & 0o777);
        let mut s = lock(&self.store.state);
        s.files.insert(
            self.path.clone(),
            MemFile {
                data,
                mtime: 0,
                mode,
            },
        );
    }
}

#[async_trait]
impl Sink for MemWrite {
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError> {
        let m = &self.store;
        let faults = lock(&m.faults).clone();
        if let Some(n) = faults.stall_write_after {
            if self.stored + data.len() as u64 > n {
                m.counters.stalled.fetch_add(1, Ordering::Relaxed);
                std::future::pending::<()>().await;
            }
        }
        let fail_after = faults.fail_write_after.filter(|_| {
            faults.transient_writes == 0
                || m.counters.failed_writes.load(Ordering::Relaxed) < faults.transient_writes
        });
        if let Some(n) = fail_after {
            if self.stored + data.len() as u64 > n {
                m.counters.failed_writes.fetch_add(1, Ordering::Relaxed);
                return Err(TransferError::Network(format!(
                    "{}: connection reset (injected after {n} bytes)",
                    m.display(&self.path)
                )));
            }
        }
        if let Some(cap) = faults.capacity {
            if m.stored() + data.len() as u64 > cap {
                return Err(TransferError::Remote(format!(
                    "{}: no space left on device",
                    m.display(&self.path)
                )));
            }
        }
        let step = if faults.short_writes {
            7
        } else {
            data.len().max(1)
        };
        for piece in data.chunks(step) {
            if let Some(staged) = self.staged.as_mut() {
                staged.extend_from_slice(piece);
                self.at += piece.len() as u64;
                continue;
            }
            {
                let mut s = lock(&m.state);
                let f = s.files.get_mut(&self.path).ok_or_else(|| {
                    TransferError::Remote(format!(
                        "{}: removed while writing",
                        m.display(&self.path)
                    ))
                })?;
                let at = self.at as usize;
                if f.data.len() < at + piece.len() {
                    f.data.resize(at + piece.len(), 0);
                }
                if let Some(dst) = f.data.get_mut(at..at + piece.len()) {
                    dst.copy_from_slice(piece);
                }
            }
            self.at += piece.len() as u64;
            if faults.short_writes {
                tokio::task::yield_now().await;
            }
        }
        self.stored += data.len() as u64;
        m.counters
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        m.passed(data.len() as u64, false);
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        self.commit();
        Ok(())
    }

    fn read_from(&mut self, from: LocalRange) -> Option<RangeTask> {
        if !self.own_thread {
            return None;
        }
        // A staged write goes with the task, which completes it, as an
        // HTTP PUT's request does: this sink has nothing left to finish.
        let mut to = MemWrite {
            path: self.path.clone(),
            at: self.at,
            stored: 0,
            store: self.store.clone(),
            own_thread: false,
            staged: self.staged.take(),
            perm: self.perm,
        };
        let piece = self.store.piece as u64;
        Some(own_thread().spawn(async move {
            let check = from.check.clone();
            let LocalRange {
                file,
                len,
                progress,
                ..
            } = from;
            let mut done = 0u64;
            while done < len {
                if progress.stopped() {
                    return Err((TransferError::cancelled(), false));
                }
                let n = (len - done).min(piece.max(1));
                let buf = file
                    .append(file.at + done, n, Vec::new())
                    .map_err(|e| (e, true))?;
                if done + n == len {
                    // Read, then asked: the last piece goes only if the
                    // source is as it was.
                    if let Some(c) = &check {
                        c.check().map_err(|e| {
                            (
                                TransferError::Local(format!("{}: {e}", file.path.display())),
                                true,
                            )
                        })?;
                    }
                }
                to.write(Bytes::from(buf)).await.map_err(|e| (e, false))?;
                done += n;
                progress.add(n);
            }
            to.commit();
            Ok(())
        }))
    }

    fn wrote(&mut self, n: u64) {
        self.at += n;
    }
}
