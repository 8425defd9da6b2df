//! The local file system as a backend: positioned reads and writes
//! (`pread`/`pwrite`) on blocking threads, `rename(2)` over the final
//! name, times and modes kept with `utimensat`/`chmod`.
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::{
    Backend, ByteStream, Capabilities, Entry, EntryKind, LocalFile, Role, Sink, WriteMode,
};
use crate::error::TransferError;

/// Bytes read per piece: large enough that a blocking-thread hand-off per
/// piece costs nothing measurable, small enough to keep memory bounded.
const PIECE: usize = 1024 * 1024;
/// Pieces smaller than this are gathered (copied) into one write of
/// `PIECE`; larger ones, HTTP/2 frames of 8-16 KiB among them, are queued
/// as they came and written with one `writev`: gathering HTTP bodies by
/// copying was 6% of a 512 MiB HTTPS download's samples (perf).
const GATHER_BELOW: usize = 4 * 1024;
/// Most pieces queued for one `writev` (the kernel takes 1024).
const MAX_QUEUED: usize = 256;

pub struct Local;

fn os(p: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsString::from_vec(p.to_vec()))
}

fn entry_of(name: &[u8], m: &std::fs::Metadata) -> Entry {
    let kind = if m.is_dir() {
        EntryKind::Dir
    } else if m.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    };
    Entry {
        name: name.to_vec(),
        kind,
        size: Some(m.len()),
        mtime: Some(m.mtime()),
        mode: Some(m.mode() & 0o7777),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, TransferError> + Send + 'static,
) -> Result<T, TransferError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| TransferError::Local(format!("internal: a file task failed: {e}")))?
}

/// [`Backend::put_whole`] of a local file, on the calling thread: `data`
/// into `part` (or `to` itself), mode and times, then the rename over
/// `to`. The engine calls it on a source's own thread
/// ([`Backend::home`]).
pub(crate) fn write_whole(
    part: Option<&[u8]>,
    to: &[u8],
    data: &[u8],
    perm: Option<u32>,
    mtime: Option<i64>,
    mode: Option<u32>,
) -> Result<(), TransferError> {
    use std::io::Write;
    let (w, t) = (os(part.unwrap_or(to)), os(to));
    let part = part.is_some().then_some(w.as_path());
    make_file(part, &t, perm, mtime, mode, |f, w| {
        let mut f: &std::fs::File = f;
        f.write_all(data)
            .map_err(|e| (TransferError::local(w, "cannot write", e), false))
    })
    .map_err(|(e, _)| e)
}

/// A new local file in one go on the calling thread: filled by `fill`,
/// given `mode` and `mtime`, then put in place as `to`. With a `part`
/// name it is first an unnamed file in `to`'s directory ([`Unnamed`]),
/// linked in as `to` once whole (where the file system has no unnamed
/// files, `part` itself, created or truncated, renamed over `to`);
/// without one, `to` itself. A failure of `fill` never touches `to`: an
/// unnamed file vanishes, a part with bytes in it is kept (for
/// `--resume`), an empty one removed. `Err`'s flag is `fill`'s (a
/// [`RangeTask`](super::RangeTask)'s: the source failed); this file's
/// own errors have it unset.
pub(crate) fn make_file(
    part: Option<&std::path::Path>,
    to: &std::path::Path,
    perm: Option<u32>,
    mtime: Option<i64>,
    mode: Option<u32>,
    fill: impl FnOnce(&Arc<std::fs::File>, &std::path::Path) -> Result<(), (TransferError, bool)>,
) -> Result<(), (TransferError, bool)> {
    let local = |e| (e, false);
    let unnamed = part.and_then(|_| Unnamed::open(to, perm));
    // What errors name: the part, or for an unnamed file its final name.
    let w = match (&unnamed, part) {
        (None, Some(p)) => p,
        _ => to,
    };
    let f = match &unnamed {
        Some(u) => u.file.clone(),
        None => {
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create(true).truncate(true);
            if let Some(p) = perm {
                o.mode(p & 0o777);
            }
            Arc::new(
                o.open(w)
                    .map_err(|e| local(TransferError::local(w, "cannot create", e)))?,
            )
        }
    };
    if let Err(e) = fill(&f, w) {
        // Refused before its first byte (the file went away since the
        // listing): no empty part file left behind.
        if unnamed.is_none() && part.is_some() && f.metadata().is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(w);
        }
        return Err(e);
    }
    if let Some(m) = mode {
        f.set_permissions(std::fs::Permissions::from_mode(m & 0o7777))
            .map_err(|e| local(TransferError::local(w, "cannot set permissions", e)))?;
    }
    if let Some(t) = mtime {
        set_file_times(&f, w, t).map_err(local)?;
    }
    match (unnamed, part) {
        (Some(u), Some(p)) => u.link_as(p, to).map_err(local),
        (None, Some(p)) => {
            drop(f);
            rename_into_place(p, to).map_err(local)
        }
        _ => Ok(()),
    }
}

/// A file without a name yet (`O_TMPFILE`) in the directory of the name
/// it will have, linked in under that name once it is whole. Against a
/// named part file renamed over the final name this is one change to the
/// directory a file instead of two, and a failed or killed copy leaves
/// nothing behind. Where making an inode is slow (this project's VMs:
/// ext4 without a journal, just after many deletions) the threads stop
/// waiting for the directory's lock, which creating a name and renaming
/// both take: 1,000 files of 100 kB by eight threads, medians of 0.28 s
/// of system time against 0.52 s. On a journaled ext4 and on tmpfs the
/// two cost the same (docs/internals/engine.md, "Local files").
struct Unnamed {
    file: Arc<std::fs::File>,
}

/// Off once a file system here has refused an unnamed file.
#[cfg(target_os = "linux")]
static UNNAMED_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Unnamed {
    /// `None` where it cannot be made: no `O_TMPFILE` on this system or
    /// file system, or no `/proc` to link it by (the caller then writes a
    /// named part, whose errors say what is wrong).
    #[cfg(target_os = "linux")]
    fn open(to: &std::path::Path, perm: Option<u32>) -> Option<Unnamed> {
        use rustix::fs::{Mode, OFlags};
        use std::sync::atomic::Ordering;
        static PROC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if UNNAMED_OFF.load(Ordering::Relaxed)
            || !*PROC.get_or_init(|| std::path::Path::new("/proc/self/fd").is_dir())
        {
            return None;
        }
        let dir = match to.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(perm.unwrap_or(0o666) & 0o777);
        match rustix::fs::open(dir, flags, mode) {
            Ok(fd) => Some(Unnamed {
                file: Arc::new(std::fs::File::from(fd)),
            }),
            Err(e) => {
                // Not this file system's (or this kernel's) to give;
                // other errors (no directory, no permission) the named
                // part reports itself.
                use rustix::io::Errno;
                if matches!(e, Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) {
                    UNNAMED_OFF.store(true, Ordering::Relaxed);
                }
                None
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    fn open(_to: &std::path::Path, _perm: Option<u32>) -> Option<Unnamed> {
        None
    }

    /// Give the file its name `to`. Where something is there already, the
    /// file is linked as `part` and renamed over it, so what was there is
    /// replaced in one step, as a named part would have been.
    #[cfg(target_os = "linux")]
    fn link_as(self, part: &std::path::Path, to: &std::path::Path) -> Result<(), TransferError> {
        use rustix::fs::{AtFlags, CWD};
        use rustix::io::Errno;
        use std::os::fd::AsRawFd;
        let me = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let link =
            |at: &std::path::Path| rustix::fs::linkat(CWD, &me, CWD, at, AtFlags::SYMLINK_FOLLOW);
        let cannot = |at: &std::path::Path, e: Errno| {
            TransferError::local(at, "cannot link the finished file into place", e.into())
        };
        match link(to) {
            Ok(()) => return Ok(()),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(cannot(to, e)),
        }
        // A part left by an earlier copy is replaced, as a named part's
        // open would have truncated it.
        match link(part) {
            Err(Errno::EXIST) => {
                let _ = std::fs::remove_file(part);
                link(part).map_err(|e| cannot(part, e))?;
            }
            r => r.map_err(|e| cannot(part, e))?,
        }
        rename_into_place(part, to)
    }
    #[cfg(not(target_os = "linux"))]
    fn link_as(self, _part: &std::path::Path, _to: &std::path::Path) -> Result<(), TransferError> {
        unreachable!("no unnamed files here")
    }
}

#[async_trait]
impl Backend for Local {
    fn scheme(&self) -> &'static str {
        "local"
    }
    fn stat_as_listed(&self) -> bool {
        true
    }
    fn local_path(&self, path: &[u8]) -> Option<PathBuf> {
        Some(os(path))
    }
    fn display(&self, path: &[u8]) -> String {
        super::path::text(path)
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_read: true,
            offset_write: true,
            append: true,
            rename_over: true,
            atomic_write: false,
            set_times: true,
            set_mode: true,
            list: true,
            server_copy: false,
            max_files: 64,
            max_ranges: 4,
        }
    }
    fn endpoint_key(&self) -> String {
        "local".into()
    }
    /// Any number of ranges write into a local file at once.
    async fn widen(&self, _role: Role, ranges: usize) -> usize {
        ranges
    }

    async fn resolve_link(&self, path: &[u8]) -> Result<Vec<u8>, TransferError> {
        let p = os(path);
        let is_link = std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return Ok(path.to_vec());
        }
        let to = std::fs::canonicalize(&p)
            .map_err(|e| TransferError::local(&p, "cannot follow the link", e))?;
        Ok(std::os::unix::ffi::OsStrExt::as_bytes(to.as_os_str()).to_vec())
    }

    async fn stat(&self, path: &[u8]) -> Result<Option<Entry>, TransferError> {
        let p = os(path);
        let name = super::path::basename(path).to_vec();
        blocking(move || match std::fs::metadata(&p) {
            Ok(m) => Ok(Some(entry_of(&name, &m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(TransferError::local(&p, "cannot stat", e)),
        })
        .await
    }

    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        let p = os(dir);
        blocking(move || {
            let rd =
                std::fs::read_dir(&p).map_err(|e| TransferError::local(&p, "cannot list", e))?;
            let mut out = Vec::new();
            for e in rd {
                let e = e.map_err(|e| TransferError::local(&p, "cannot list", e))?;
                let name = e.file_name().as_bytes().to_vec();
                // Follow links as cp -r does for its sources' files.
                match std::fs::metadata(e.path()) {
                    Ok(m) => out.push(entry_of(&name, &m)),
                    Err(_) => out.push(Entry {
                        name,
                        kind: EntryKind::Other,
                        size: None,
                        mtime: None,
                        mode: None,
                    }),
                }
            }
            Ok(out)
        })
        .await
    }

    async fn read(
        &self,
        path: &[u8],
        offset: u64,
        len: Option<u64>,
    ) -> Result<Box<dyn ByteStream>, TransferError> {
        let p = os(path);
        if let Some(n) = len.filter(|n| *n <= SMALL_READ) {
            // A small file (or range): open and read it in one trip to the
            // blocking pool, not two; a sync of 10,000 small files makes
            // that hand-off a measurable part of its CPU.
            let p2 = p.clone();
            let data = blocking(move || {
                let f = std::fs::File::open(&p2)
                    .map_err(|e| TransferError::local(&p2, "cannot open", e))?;
                read_exact_at(&f, &p2, offset, n as usize)
            })
            .await?;
            return Ok(Box::new(Ready(Some(Bytes::from(data)))));
        }
        let p2 = p.clone();
        let file = blocking(move || {
            std::fs::File::open(&p2).map_err(|e| TransferError::local(&p2, "cannot open", e))
        })
        .await?;
        let left = match len {
            Some(l) => l,
            None => file
                .metadata()
                .map_err(|e| TransferError::local(&p, "cannot stat", e))?
                .len()
                .saturating_sub(offset),
        };
        Ok(Box::new(LocalRead {
            file: Arc::new(file),
            path: p,
            at: offset,
            left,
        }))
    }

    async fn write(
        &self,
        path: &[u8],
        mode: WriteMode,
        _size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        let p = os(path);
        let p2 = p.clone();
        let (file, at) = blocking(move || {
            let mut o = std::fs::OpenOptions::new();
            o.write(true);
            match mode {
                WriteMode::Create { perm } => {
                    o.create(true).truncate(true);
                    if let Some(p) = perm {
                        o.mode(p & 0o777);
                    }
                    &mut o
                }
                WriteMode::At(_) => o.create(true),
            };
            let f = o
                .open(&p2)
                .map_err(|e| TransferError::local(&p2, "cannot create", e))?;
            Ok((
                f,
                match mode {
                    WriteMode::Create { .. } => 0,
                    WriteMode::At(a) => a,
                },
            ))
        })
        .await?;
        Ok(Box::new(LocalWrite {
            file: Arc::new(file),
            turn: write_turn(&p),
            path: p,
            at,
            pending: BytesMut::new(),
            queued: Vec::new(),
            queued_len: 0,
        }))
    }

    async fn mkdir_all(&self, dir: &[u8]) -> Result<(), TransferError> {
        let p = os(dir);
        blocking(move || {
            std::fs::create_dir_all(&p)
                .map_err(|e| TransferError::local(&p, "cannot create the directory", e))
        })
        .await
    }

    async fn rename_over(&self, from: &[u8], to: &[u8]) -> Result<(), TransferError> {
        let (f, t) = (os(from), os(to));
        blocking(move || rename_into_place(&f, &t)).await
    }

    /// Create, write, times and mode, rename: one trip to the blocking
    /// pool for a small file instead of four (a 1,000-file download spent
    /// more client CPU on those hand-offs than on the bytes).
    async fn put_whole(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        data: Bytes,
        perm: Option<u32>,
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Result<(), TransferError> {
        let (part, to) = (part.map(<[u8]>::to_vec), to.to_vec());
        blocking(move || write_whole(part.as_deref(), &to, &data, perm, mtime, mode)).await
    }

    async fn remove(&self, path: &[u8]) -> Result<(), TransferError> {
        let p = os(path);
        blocking(move || {
            std::fs::remove_file(&p).map_err(|e| TransferError::local(&p, "cannot remove", e))
        })
        .await
    }

    async fn remove_dir(&self, path: &[u8]) -> Result<(), TransferError> {
        let p = os(path);
        blocking(move || {
            std::fs::remove_dir(&p)
                .map_err(|e| TransferError::local(&p, "cannot remove the directory", e))
        })
        .await
    }

    fn hashes(&self) -> Vec<super::HashAlgo> {
        vec![
            super::HashAlgo::Xxh128,
            super::HashAlgo::Blake3,
            super::HashAlgo::Sha256,
        ]
    }

    async fn hash(
        &self,
        path: &[u8],
        algo: super::HashAlgo,
    ) -> Result<Option<Vec<u8>>, TransferError> {
        let p = os(path);
        // A small file in the page cache is hashed right here; anything
        // else (or any trouble, reported below) on a blocking thread.
        if let Ok(Some(h)) = crate::hash::of_cached_file(&p, algo) {
            return Ok(Some(h));
        }
        blocking(move || {
            let f = std::fs::File::open(&p)
                .map_err(|e| TransferError::local(&p, "cannot open to hash", e))?;
            let size = f.metadata().map(|m| m.len()).unwrap_or(1 << 20);
            crate::hash::of_reader(f, algo, size)
                .map(Some)
                .map_err(|e| TransferError::local(&p, "cannot read to hash", e))
        })
        .await
    }

    async fn set_attrs(
        &self,
        path: &[u8],
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Result<(), TransferError> {
        let p = os(path);
        blocking(move || {
            if let Some(m) = mode {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m & 0o7777))
                    .map_err(|e| TransferError::local(&p, "cannot set permissions", e))?;
            }
            if let Some(t) = mtime {
                // Read-only works for directories too (setting times
                // needs ownership, not write access); a write-only file
                // is opened for writing.
                let f = std::fs::File::open(&p)
                    .or_else(|_| std::fs::File::options().write(true).open(&p))
                    .map_err(|e| TransferError::local(&p, "cannot set times", e))?;
                set_file_times(&f, &p, t)?;
            }
            Ok(())
        })
        .await
    }
}

struct LocalRead {
    file: Arc<std::fs::File>,
    path: PathBuf,
    at: u64,
    left: u64,
}

#[async_trait]
impl ByteStream for LocalRead {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.left == 0 {
            return Ok(None);
        }
        let n = self.left.min(PIECE as u64) as usize;
        let (file, path, at) = (self.file.clone(), self.path.clone(), self.at);
        // The piece starts half a page off the page offset rustls copies
        // plaintext to (ferry_http::tls::PLAINTEXT_PAGE_OFFSET): read to a
        // page boundary, that copy was a third of an HTTPS upload's CPU
        // (perf, 4K aliasing). Costs nothing elsewhere.
        let mut buf = Vec::with_capacity(n + 4096);
        let skew = ferry_http::tls::skew_to(&buf, 0, ferry_http::tls::PLAINTEXT_PAGE_OFFSET);
        buf.resize(skew, 0);
        let buf = blocking(move || append_at(&file, &path, at, n as u64, buf)).await?;
        self.at += n as u64;
        self.left -= n as u64;
        Ok(Some(Bytes::from(buf).slice(skew..)))
    }

    fn local_file(&mut self) -> Option<LocalFile> {
        Some(LocalFile {
            file: self.file.clone(),
            path: self.path.clone(),
            at: self.at,
        })
    }
}

/// Reads at most this much at once when opening (one blocking trip).
const SMALL_READ: u64 = 256 * 1024;

/// `n` bytes of `file` at `at`; a file that ends early has shrunk. Read
/// into fresh capacity, not a zeroed buffer: zeroing each MiB before the
/// read overwrote it was 9% of an upload's samples (perf). Moves the
/// file's position: each stream opens its own file.
fn read_exact_at(
    file: &std::fs::File,
    path: &std::path::Path,
    at: u64,
    n: usize,
) -> Result<Vec<u8>, TransferError> {
    append_at(file, path, at, n as u64, Vec::with_capacity(n))
}

/// The first `len` bytes of the file at `path`, read on the caller's
/// thread: for a backend that sends a small local file from its own
/// thread ([`Backend::put_local`](super::Backend::put_local)). A file
/// shorter than `len` has shrunk: an error.
pub(crate) fn read_start(path: &std::path::Path, len: u64) -> Result<Vec<u8>, TransferError> {
    let f = std::fs::File::open(path).map_err(|e| TransferError::local(path, "cannot open", e))?;
    read_exact_at(&f, path, 0, len as usize)
}

/// `buf` with `n` bytes of `file` at `at` appended (the same rules).
fn append_at(
    file: &std::fs::File,
    path: &std::path::Path,
    at: u64,
    n: u64,
    mut buf: Vec<u8>,
) -> Result<Vec<u8>, TransferError> {
    append_into(file, path, at, n, &mut buf)?;
    Ok(buf)
}

/// Append `n` bytes of `file` at `at` to `buf` (the same rules); after an
/// error `buf` may hold some of them.
fn append_into(
    file: &std::fs::File,
    path: &std::path::Path,
    at: u64,
    n: u64,
    buf: &mut Vec<u8>,
) -> Result<(), TransferError> {
    // One positional read of the whole piece: `read_to_end` on a `take`
    // read it in 8, 16, 32, 64 and 128 KiB steps (six system calls and a
    // seek per 255 KiB WRITE, most of what an upload's client spent
    // beyond the copy loop's, 2026-11-27). Into the spare capacity:
    // zeroing the piece first was 6% of the client's CPU in a 2.5 GB
    // upload to sshd (`perf`, 2026-11-30), as it had been 5% of ferry
    // serve's on a download (`ferry_server::readnow::append_all`).
    let start = buf.len();
    let end = start + n as usize;
    buf.reserve_exact(n as usize);
    while buf.len() < end {
        let at = at + (buf.len() - start) as u64;
        let want = end - buf.len();
        let Some(spare) = buf.spare_capacity_mut().get_mut(..want) else {
            // Not after `reserve_exact`; never a short piece handed on.
            return Err(TransferError::Local(format!(
                "{}: internal: no room to read {n} bytes into",
                path.display()
            )));
        };
        let got = match rustix::io::pread(file, spare, at) {
            Ok((init, _)) => init.len(),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(TransferError::local(path, "cannot read", e.into())),
        };
        if got == 0 {
            return Err(TransferError::Local(format!(
                "{}: the file shrank while it was being copied",
                path.display()
            )));
        }
        // SAFETY: pread initialised the first `got` bytes of the spare
        // capacity, and `got <= want` fits in it.
        unsafe { buf.set_len(buf.len() + got) };
    }
    Ok(())
}

/// A read that is already done.
struct Ready(Option<Bytes>);

#[async_trait]
impl ByteStream for Ready {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        Ok(self.0.take())
    }
}

struct LocalWrite {
    file: Arc<std::fs::File>,
    path: PathBuf,
    at: u64,
    /// Small pieces gathered into one write.
    pending: BytesMut,
    /// Large pieces waiting, written together with one `writev` once they
    /// make `PIECE` (no copy, a quarter of the system calls and trips to
    /// the blocking pool of one write per 255 KiB READ reply).
    queued: Vec<Bytes>,
    queued_len: usize,
    turn: WriteTurn,
}

/// The turn to write into the file at `path` from the blocking pool,
/// shared by every [`LocalWrite`] open on it now. A split download whose
/// ranges come through the engine's task (S3's, a remote's into a local
/// file) wrote the part file from up to four blocking threads at once; a
/// buffered write holds the inode's lock through its whole copy, so the
/// others spun on that lock (`rwsem_spin_on_owner`: 3% of a 1 GiB S3
/// download's client samples, 9-10% when the page cache's pages were
/// fresh to this VM) on a core the network and the server needed.
/// Waiting for the turn here sleeps instead; the kernel lets one buffered
/// write into a file at a time either way. Writes from a connection's
/// own thread (`LocalFile::write`: SFTP, HTTP shards, FTP lanes) take no
/// turn: there a sleeping writer also stops reading its connection, and
/// 1 GiB from sshd measured 0.91-0.92x with it (BENCHMARKS.md, run
/// s3-turn-1).
type WriteTurn = Arc<std::sync::Mutex<()>>;

fn write_turn(path: &std::path::Path) -> WriteTurn {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, Weak};
    static TURNS: LazyLock<Mutex<HashMap<PathBuf, Weak<Mutex<()>>>>> =
        LazyLock::new(Default::default);
    let mut turns = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = turns.get(path).and_then(Weak::upgrade) {
        return t;
    }
    // Only the files open now stay (a few per file in flight).
    turns.retain(|_, t| t.strong_count() > 0);
    let t = WriteTurn::default();
    turns.insert(path.to_path_buf(), Arc::downgrade(&t));
    t
}

impl LocalWrite {
    /// Write `pieces` at the current offset, in one `writev` where the
    /// kernel takes them all, on a blocking thread.
    async fn put(&mut self, pieces: Vec<Bytes>) -> Result<(), TransferError> {
        let (file, path, at) = (self.file.clone(), self.path.clone(), self.at);
        let turn = self.turn.clone();
        let n: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        blocking(move || {
            use std::io::{IoSlice, Seek, SeekFrom, Write};
            let _turn = turn.lock().unwrap_or_else(|e| e.into_inner());
            let fail = |e| TransferError::local(&path, "cannot write", e);
            let mut f = &*file;
            f.seek(SeekFrom::Start(at)).map_err(fail)?;
            let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
            let mut left = &mut slices[..];
            while !left.is_empty() {
                let k = f.write_vectored(left).map_err(fail)?;
                if k == 0 {
                    return Err(fail(std::io::ErrorKind::WriteZero.into()));
                }
                IoSlice::advance_slices(&mut left, k);
            }
            Ok(())
        })
        .await?;
        self.at += n;
        Ok(())
    }

    async fn flush_queued(&mut self) -> Result<(), TransferError> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let pieces = std::mem::take(&mut self.queued);
        self.queued_len = 0;
        self.put(pieces).await
    }

    async fn flush(&mut self) -> Result<(), TransferError> {
        self.flush_queued().await?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let data = self.pending.split().freeze();
        self.put(vec![data]).await
    }
}

#[async_trait]
impl Sink for LocalWrite {
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError> {
        // A piece of a request's size (an SFTP READ reply, 255 KiB) is
        // queued as it came: gathering it by copying cost a memmove of
        // every byte and a fresh buffer per MiB (perf of a 1 GiB download:
        // memmove 18% of the client's samples).
        if self.pending.is_empty() && data.len() >= GATHER_BELOW {
            self.queued_len += data.len();
            self.queued.push(data);
            if self.queued_len >= PIECE || self.queued.len() >= MAX_QUEUED {
                self.flush_queued().await?;
            }
            return Ok(());
        }
        self.flush_queued().await?;
        self.pending.extend_from_slice(&data);
        if self.pending.len() >= PIECE {
            self.flush().await?;
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        self.flush().await
    }

    fn local_file(&mut self) -> Option<LocalFile> {
        // Only with nothing waiting: the lender writes from `at` on.
        if !self.pending.is_empty() || !self.queued.is_empty() {
            return None;
        }
        Some(LocalFile {
            file: self.file.clone(),
            path: self.path.clone(),
            at: self.at,
        })
    }

    fn wrote(&mut self, n: u64) {
        self.at += n;
    }
}

/// Reads from and writes into a lent file, from the borrower's thread
/// (blocking: the borrower is a thread of its own, as a copy loop's was).
impl LocalFile {
    /// `buf` with the `n` bytes at `at` (from the file's start) appended;
    /// an error names the file, and a file that ends early has shrunk.
    /// Moves the file's position: for the one reader of a lent file.
    pub(crate) fn append(&self, at: u64, n: u64, buf: Vec<u8>) -> Result<Vec<u8>, TransferError> {
        append_at(&self.file, &self.path, at, n, buf)
    }

    /// [`LocalFile::append`] into a buffer lent: after an error `buf` may
    /// hold some of the bytes.
    pub(crate) fn append_into(
        &self,
        at: u64,
        n: u64,
        buf: &mut Vec<u8>,
    ) -> Result<(), TransferError> {
        append_into(&self.file, &self.path, at, n, buf)
    }

    /// Write `data` at the file's position and move past it.
    pub(crate) fn write(&mut self, data: &[u8]) -> Result<(), TransferError> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(data, self.at)
            .map_err(|e| TransferError::local(&self.path, "cannot write", e))?;
        self.at += data.len() as u64;
        Ok(())
    }
}

/// Rename a finished part file over its final name.
fn rename_into_place(f: &std::path::Path, t: &std::path::Path) -> Result<(), TransferError> {
    std::fs::rename(f, t).map_err(|e| {
        if e.kind() == std::io::ErrorKind::IsADirectory {
            let _ = std::fs::remove_file(f);
            TransferError::Local(format!(
                "{}: a directory is in the way; move it or copy into it",
                t.display()
            ))
        } else {
            TransferError::local(t, "cannot rename the finished file into place", e)
        }
    })
}

/// Access and modification time of an open file (or directory) to `t`.
fn set_file_times(f: &std::fs::File, p: &std::path::Path, t: i64) -> Result<(), TransferError> {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.max(0) as u64);
    f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t))
        .map_err(|e| TransferError::local(p, "cannot set times", e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names(d: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn whole(d: &std::path::Path, name: &str, data: &[u8]) -> Result<(), TransferError> {
        let to = d.join(name);
        let part = d.join(format!(".{name}.ferry-part"));
        write_whole(
            Some(part.as_os_str().as_bytes()),
            to.as_os_str().as_bytes(),
            data,
            Some(0o640),
            Some(1_000_000_000),
            None,
        )
    }

    #[test]
    fn a_whole_file_appears_under_its_name_only() {
        let d = tempfile::tempdir().unwrap();
        whole(d.path(), "new.bin", b"fresh").unwrap();
        // Over a file that was there, and over a part an earlier copy left.
        std::fs::write(d.path().join("old.bin"), b"what was there").unwrap();
        std::fs::write(d.path().join(".old.bin.ferry-part"), b"stale part").unwrap();
        whole(d.path(), "old.bin", b"replaced").unwrap();
        assert_eq!(names(d.path()), ["new.bin", "old.bin"]);
        assert_eq!(std::fs::read(d.path().join("new.bin")).unwrap(), b"fresh");
        assert_eq!(
            std::fs::read(d.path().join("old.bin")).unwrap(),
            b"replaced"
        );
        let m = std::fs::metadata(d.path().join("new.bin")).unwrap();
        assert_eq!(m.mtime(), 1_000_000_000);
        assert_eq!(m.mode() & 0o077, 0o040 & !umask() & 0o077);
    }

    fn umask() -> u32 {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("probe");
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o777)
            .open(&p)
            .unwrap();
        !std::fs::metadata(&p).unwrap().mode() & 0o777
    }

    #[test]
    fn a_failed_fill_leaves_nothing_and_keeps_what_was_there() {
        let d = tempfile::tempdir().unwrap();
        let to = d.path().join("f.bin");
        let part = d.path().join(".f.bin.ferry-part");
        std::fs::write(&to, b"keep me").unwrap();
        let r = make_file(Some(&part), &to, None, None, None, |f, _| {
            let mut f: &std::fs::File = f;
            std::io::Write::write_all(&mut f, b"half of it").unwrap();
            Err((TransferError::Network("lost".into()), true))
        });
        assert!(r.is_err());
        assert_eq!(names(d.path()), ["f.bin"]);
        assert_eq!(std::fs::read(&to).unwrap(), b"keep me");
    }

    #[test]
    fn a_directory_in_the_way_is_said_and_nothing_is_left() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("dir.bin")).unwrap();
        let e = whole(d.path(), "dir.bin", b"data").unwrap_err();
        assert!(e.to_string().contains("a directory is in the way"), "{e}");
        assert_eq!(names(d.path()), ["dir.bin"]);
    }
}
