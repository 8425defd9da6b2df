//! The backend contract: what the engine needs from a place files live in
//! (a local directory tree, an SFTP server, an HTTP(S) server, an FTP(S)
//! server, an S3 bucket, or memory in the tests), and what each one can do.
//!
//! The engine ([`crate::engine`]) plans and runs every copy over two
//! backends, a source and a destination, and never asks which protocol is
//! behind them: it asks for [`Capabilities`] instead (in the spirit of
//! rclone's `Features()` and opendal's `AccessorInfo`). Paths are byte
//! strings with `/` separators, absolute in the backend's own namespace
//! (an SFTP backend has resolved `~` before the engine sees a path).
//!
//! A backend hides its threading: SFTP runs each SSH connection where
//! measurement put it, FTP's blocking client runs on blocking threads, and
//! the engine only sees futures. docs/internals/engine.md has the contract
//! in prose, with one file's way through the engine.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::TransferError;
use crate::{Cancel, Stats};

pub mod exec_hash;
pub mod ftp;
pub mod http;
pub mod local;
pub mod memory;
pub mod s3;
mod s3_creds;
mod s3_sts;
pub mod sftp;

/// What a backend can do. The engine checks these before it plans: a
/// destination without `offset_write` gets each file as one stream, one
/// without `rename_over` is written under the final name only when the
/// server itself makes a write appear whole (`atomic_write`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `read` can start anywhere and stop anywhere (ranges of one file in
    /// parallel, resume).
    pub ranged_read: bool,
    /// `write` can start at any offset of an existing file, from several
    /// writers at once (a big file in parallel ranges, resume).
    pub offset_write: bool,
    /// `write` in [`WriteMode::At`] the file's current length continues
    /// it (FTP's `APPE`): resume of one stream, without `offset_write`.
    pub append: bool,
    /// `rename_over` replaces the target atomically: the engine writes a
    /// temporary name and renames it when complete.
    pub rename_over: bool,
    /// A write becomes visible under its name only when it completes (an
    /// HTTP PUT to a WebDAV server or ferry serve): no temporary name is
    /// needed, or possible.
    pub atomic_write: bool,
    /// `set_attrs` can set modification times / permission bits.
    pub set_times: bool,
    pub set_mode: bool,
    /// `list` works (directories can be walked).
    pub list: bool,
    /// `copy_within` copies on the server, no byte through us.
    pub server_copy: bool,
    /// Most files the engine should move at once through this backend
    /// (an FTP server: one control connection each).
    pub max_files: usize,
    /// Most parallel ranges of one file worth opening.
    pub max_ranges: usize,
}

impl Capabilities {
    /// A part file here can be continued from where it stopped: written
    /// at an offset, or appended to (`--resume`, and what a failed range
    /// flushed before it failed).
    pub fn continues(&self) -> bool {
        self.offset_write || self.append
    }

    /// Nothing optional.
    pub const NONE: Capabilities = Capabilities {
        ranged_read: false,
        offset_write: false,
        append: false,
        rename_over: false,
        atomic_write: false,
        set_times: false,
        set_mode: false,
        list: false,
        server_copy: false,
        max_files: 1,
        max_ranges: 1,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    /// A link, device, socket...: skipped with a warning.
    Other,
}

/// One name in a listing, or the answer to `stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The last path component (for `stat`, of the path asked).
    pub name: Vec<u8>,
    pub kind: EntryKind,
    pub size: Option<u64>,
    /// Seconds since the epoch.
    pub mtime: Option<i64>,
    /// Permission bits, no file type.
    pub mode: Option<u32>,
}

impl Entry {
    /// A directory named `name`, nothing else known about it.
    pub fn dir(name: Vec<u8>) -> Entry {
        Entry {
            name,
            kind: EntryKind::Dir,
            size: None,
            mtime: None,
            mode: None,
        }
    }
}

/// What [`Backend::read_info`] finds out about one source file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadInfo {
    /// Reads from an offset other than 0 work (an HTTP server that
    /// ignores `Range` answers with the whole file: no split, no resume).
    pub ranges: bool,
    /// Changes whenever the content does (an HTTP strong ETag, else its
    /// Last-Modified): a resume record made for another version is void.
    pub version: Option<String>,
    /// The whole file's hash as the server announced it (ferry serve's
    /// `Repr-Digest`): a split copy is checked against it at the end.
    pub digest: Option<(HashAlgo, Vec<u8>)>,
    /// Not empty: `digest` is a CRC32 of these parts' CRC32s (the sizes
    /// of an S3 multipart object's parts, in order), not of the content.
    pub digest_parts: Vec<u64>,
}

/// A read of a whole file whose size the plan did not know
/// ([`Backend::read_unsized`]), with what its answer said of the file.
pub struct UnsizedRead {
    /// The file's bytes from its start; it errs when it ends before
    /// `size`.
    pub stream: Box<dyn ByteStream>,
    /// The whole file's size as the answer said it; `None` when it did
    /// not (a compressed or chunked HTTP body): the stream ends where the
    /// file does.
    pub size: Option<u64>,
    /// Seconds since the epoch (an HTTP Last-Modified), for `-p`.
    pub mtime: Option<i64>,
    /// What [`Backend::read_info`] would say, from the same answer.
    pub info: ReadInfo,
}

/// What [`Backend::unfinished`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// Bytes held, from the start of the file.
    pub have: u64,
    /// Where a block ending at `have` starts, and its SHA-256: the caller
    /// checks it against its source before trusting the bytes.
    pub tail: Option<(u64, [u8; 32])>,
}

/// How `write` opens its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Create or truncate, then write from offset 0. A new file gets
    /// `perm` (permission bits, less the umask where it is created, as
    /// `cp` and OpenSSH's `sftp put` do without `-p`) where the backend
    /// has modes; `None`: the default (0666 less the umask).
    Create { perm: Option<u32> },
    /// Write into the existing file from this offset, keeping the rest
    /// (a range of a split file, or the rest of a resumed one).
    At(u64),
}

/// Bytes of one read, in order.
#[async_trait]
pub trait ByteStream: Send {
    /// The next piece; `None` at the end of the range asked for. A source
    /// that ends early is an error, never a short `None`.
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError>;

    /// Write the rest of the range into a local file from the thread the
    /// bytes arrive on (an SSH connection's, an FTP data connection's),
    /// each piece as it arrives, as the copy loops did, instead of handing
    /// every piece to the engine's task and on to a blocking thread (two
    /// thread switches a piece: 1.3-1.6x the client CPU of a 1 GiB
    /// download). `None`: this stream cannot; else the stream is spent
    /// and the task's end is the range's end (`Err`'s flag: the source
    /// failed, so the bytes written so far are good).
    fn write_into(&mut self, to: LocalRange) -> Option<RangeTask> {
        let _ = to;
        None
    }

    /// The local file under this stream, at its next byte, for a sink
    /// that reads it from its own thread ([`Sink::read_from`]). The
    /// stream stays as it was: the sink may decline.
    fn local_file(&mut self) -> Option<LocalFile> {
        None
    }
}

/// A small file a backend puts whole from its own thread (SFTP's and
/// FTP's `put_small`): bytes in hand, or the first `len` bytes of a local
/// file, read on that thread.
pub(crate) enum SmallFile {
    Bytes(Bytes),
    Local(std::path::PathBuf, u64),
}

impl SmallFile {
    /// The bytes, a local file read on the calling thread.
    pub(crate) fn into_bytes(self) -> Result<Bytes, TransferError> {
        match self {
            SmallFile::Bytes(b) => Ok(b),
            SmallFile::Local(path, len) => Ok(Bytes::from(local::read_start(&path, len)?)),
        }
    }
}

/// A range of a local file that a backend's thread writes
/// ([`ByteStream::write_into`]) or reads ([`Sink::read_from`]): `len`
/// bytes from `file.at`; `shown` names the other side in errors.
pub struct LocalRange {
    pub(crate) file: LocalFile,
    pub(crate) len: u64,
    pub(crate) shown: String,
    pub(crate) progress: Arc<RangeProgress>,
    /// For a sink that reads this range ([`Sink::read_from`]) into a
    /// destination that takes files whole: the range ends the file, and
    /// its last piece may go only if [`SourceCheck::check`] says so,
    /// asked after that piece was read.
    pub(crate) check: Option<Arc<SourceCheck>>,
}

/// A whole local file that a backend sends on its own thread
/// ([`Backend::put_from_local`]).
pub struct LocalSource {
    pub(crate) path: std::path::PathBuf,
    pub(crate) len: u64,
    /// The plan's time of the file, for the check before the rename.
    pub(crate) mtime: Option<i64>,
    pub(crate) progress: Arc<RangeProgress>,
    /// Set by the job when the file changed during the copy.
    pub(crate) changed: Arc<AtomicBool>,
}

impl LocalSource {
    /// Open the file: its range to send, and the check to ask after its
    /// last byte went ([`SourceCheck`]).
    pub(crate) fn open(&self, shown: &str) -> Result<(LocalRange, SourceCheck), TransferError> {
        let file = std::fs::File::open(&self.path)
            .map_err(|e| TransferError::local(&self.path, "cannot open", e))?;
        let file = Arc::new(file);
        let check = SourceCheck::new(file.clone(), self.len, self.mtime);
        let range = LocalRange::whole(
            file,
            &self.path,
            self.len,
            shown.to_string(),
            &self.progress,
        );
        Ok((range, check))
    }
}

/// A new local file that a backend makes whole on its own thread
/// ([`Backend::get_local`]).
pub struct LocalTarget {
    /// `Some`: the file is put in place as `to` only when whole, unnamed
    /// until then or written under this part name (`local::make_file`);
    /// `None`: written as `to` itself.
    pub(crate) part: Option<std::path::PathBuf>,
    pub(crate) to: std::path::PathBuf,
    pub(crate) len: u64,
    pub(crate) perm: Option<u32>,
    pub(crate) mtime: Option<i64>,
    pub(crate) mode: Option<u32>,
    /// The source, for errors.
    pub(crate) shown: String,
    pub(crate) progress: Arc<RangeProgress>,
}

impl LocalTarget {
    /// Make the file on this thread: `fill` writes its `len` bytes into
    /// the range it is given (the error flag as [`RangeTask`]'s).
    pub(crate) fn make(
        self,
        fill: impl FnOnce(LocalRange) -> Result<(), (TransferError, bool)>,
    ) -> Result<(), (TransferError, bool)> {
        let LocalTarget {
            part,
            to,
            len,
            perm,
            mtime,
            mode,
            shown,
            progress,
        } = self;
        local::make_file(part.as_deref(), &to, perm, mtime, mode, |file, path| {
            fill(LocalRange::whole(file.clone(), path, len, shown, &progress))?;
            let wrote = progress.bytes.load(Ordering::Relaxed);
            // A writer told to stop ends early without an error: the
            // file is never put in place.
            if progress.stopped() {
                return Err((TransferError::cancelled(), false));
            }
            if wrote != len {
                let msg = format!("{}: {wrote} of {len} bytes written", path.display());
                return Err((TransferError::Local(format!("internal: {msg}")), false));
            }
            Ok(())
        })
    }
}

impl LocalRange {
    pub(crate) fn new(file: LocalFile, len: u64, shown: String) -> LocalRange {
        LocalRange {
            file,
            len,
            shown,
            progress: Arc::default(),
            check: None,
        }
    }

    /// All `len` bytes of a file opened for one job, counted in
    /// `progress`.
    fn whole(
        file: Arc<std::fs::File>,
        path: &std::path::Path,
        len: u64,
        shown: String,
        progress: &Arc<RangeProgress>,
    ) -> LocalRange {
        let at = LocalFile {
            file,
            path: path.to_path_buf(),
            at: 0,
        };
        LocalRange {
            progress: progress.clone(),
            ..LocalRange::new(at, len, shown)
        }
    }

    /// [`SourceCheck::check`] as an HTTP body asks it
    /// ([`ferry_http::EndCheck`]).
    pub(crate) fn end_check(&self) -> Option<ferry_http::EndCheck> {
        let c = self.check.clone()?;
        Some(Arc::new(move || c.check()))
    }
}

/// A local source file asked once more after the last bytes of its copy
/// were read and before they go, where the destination takes files
/// whole (an HTTP PUT, issue #24): a file rewritten in place while it was
/// read must not be completed there, since the server would put the mix
/// under the final name at once. Its size and time must still be the
/// plan's (whole seconds, as [`Backend::stat`] says), and its time to the
/// nanosecond what it was when this range started. One `fstat` when the
/// range starts and one at its end, on the file read (a file renamed over
/// the source's name meanwhile does not change the bytes read).
pub struct SourceCheck {
    file: Arc<std::fs::File>,
    size: u64,
    mtime: Option<i64>,
    /// The file's time (seconds, nanoseconds) when the range started.
    start: Option<(i64, i64)>,
    /// [`SourceCheck::ASKED`], [`SourceCheck::CHANGED`]: sticky once set.
    state: std::sync::atomic::AtomicU8,
}

impl SourceCheck {
    const ASKED: u8 = 1;
    const CHANGED: u8 = 2;

    /// `size` and `mtime`: the whole file's, as the plan saw them.
    pub(crate) fn new(file: Arc<std::fs::File>, size: u64, mtime: Option<i64>) -> SourceCheck {
        use std::os::unix::fs::MetadataExt;
        let start = file.metadata().ok().map(|m| (m.mtime(), m.mtime_nsec()));
        SourceCheck {
            file,
            size,
            mtime,
            start,
            state: Default::default(),
        }
    }

    /// Called by the reader after it read the last bytes and before it
    /// hands them on: an error means they must not go.
    pub fn check(&self) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let same = self.state.load(Ordering::Acquire) != Self::CHANGED
            && self.file.metadata().is_ok_and(|m| {
                m.len() == self.size
                    && self.mtime.is_none_or(|t| t == m.mtime())
                    && self.start.is_none_or(|s| s == (m.mtime(), m.mtime_nsec()))
            });
        if same {
            self.state.fetch_max(Self::ASKED, Ordering::AcqRel);
            return Ok(());
        }
        self.state.store(Self::CHANGED, Ordering::Release);
        Err(std::io::Error::other(
            "the source file changed while it was read; its last bytes were not sent",
        ))
    }

    /// The check ran (whatever it said).
    pub(crate) fn asked(&self) -> bool {
        self.state.load(Ordering::Acquire) != 0
    }

    /// The check found the file changed.
    pub(crate) fn changed(&self) -> bool {
        self.state.load(Ordering::Acquire) == Self::CHANGED
    }
}

/// Between a range run on a backend's thread and the engine's task that
/// watches it: the bytes written so far (progress and stall checks read
/// them), and the engine's word to stop (a cancel, a stall), which a
/// blocking thread checks between pieces.
#[derive(Default)]
pub struct RangeProgress {
    pub(crate) bytes: AtomicU64,
    pub(crate) stop: AtomicBool,
    /// For a job that may run on its watcher's own thread (an FTP lane's
    /// file), where the watcher cannot look until it ends: the transfer's
    /// cancel, checked with `stop`, and its count of bytes done, added to
    /// as the bytes come.
    run: Option<(Cancel, Arc<Stats>)>,
    /// Set by a backend that runs the job on its watcher's own thread: it
    /// ends when the job does, so a watcher's timer could never fire.
    inline: AtomicBool,
}

impl RangeProgress {
    /// Progress that reaches the transfer's count and cancel by itself.
    pub(crate) fn of_run(cancel: Cancel, stats: Arc<Stats>) -> RangeProgress {
        RangeProgress {
            run: Some((cancel, stats)),
            ..RangeProgress::default()
        }
    }
    pub(crate) fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        if let Some((_, stats)) = &self.run {
            stats.bytes_done.fetch_add(n, Ordering::Relaxed);
        }
    }
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
            || self.run.as_ref().is_some_and(|(c, _)| c.is_cancelled())
    }
    /// Its bytes are counted in the transfer's as they come.
    pub(crate) fn counts_itself(&self) -> bool {
        self.run.is_some()
    }
    /// The job runs on its watcher's thread (see `inline`).
    pub(crate) fn set_inline(&self) {
        self.inline.store(true, Ordering::Relaxed);
    }
    pub(crate) fn is_inline(&self) -> bool {
        self.inline.load(Ordering::Relaxed)
    }
}

/// A range run on a backend's own thread: its result, and for a failure
/// whether the source failed (the bytes written before are good).
pub type RangeTask = tokio::task::JoinHandle<Result<(), (TransferError, bool)>>;

/// A local file a local sink lends to a source that writes it from its
/// own thread ([`ByteStream::write_into`]), at the next byte to write.
#[derive(Clone)]
pub struct LocalFile {
    pub(crate) file: Arc<std::fs::File>,
    pub(crate) path: std::path::PathBuf,
    pub(crate) at: u64,
}

/// Where one writer's bytes go, in order from where it was opened.
#[async_trait]
pub trait Sink: Send {
    /// Queue `data`; a pipelining sink may return before it is on disk.
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError>;

    /// Everything written reached the destination (every reply is in, the
    /// file is closed). Dropping a sink without `finish` abandons it.
    async fn finish(self: Box<Self>) -> Result<(), TransferError>;

    /// The local file under this sink, at the next byte to write, for a
    /// source that writes it from its own thread; the bytes it wrote are
    /// then counted with `wrote` before `finish`.
    fn local_file(&mut self) -> Option<LocalFile> {
        None
    }

    /// `n` bytes were written into [`Sink::local_file`]'s file, or by
    /// [`Sink::read_from`]'s task.
    fn wrote(&mut self, n: u64) {
        let _ = n;
    }

    /// Read the range from a local file and write it from the thread this
    /// sink's replies arrive on (an SSH connection's), as the copy loops
    /// did: handed over from the engine's task, each piece was read on
    /// one thread and sealed on another, and copying it across cores was
    /// a third of a 1 GiB upload's client CPU. `None`: this sink cannot;
    /// else the task's end is the range's end (written and answered; its
    /// bytes are counted with `wrote`, then `finish` closes), and `Err`'s
    /// flag says the local file failed, so what was written is good.
    /// With `from.check` (a destination that takes files whole): read the
    /// last piece, then ask [`SourceCheck::check`], and send that piece
    /// only if it says so; otherwise end the write without it, so the
    /// destination never completes the file.
    fn read_from(&mut self, from: LocalRange) -> Option<RangeTask> {
        let _ = from;
        None
    }
}

/// One place files live. Every method but `stat`, `read` and `write` has a
/// default that says the backend cannot, so a new backend starts small and
/// grows (opendal's `Accessor` does the same).
#[async_trait]
pub trait Backend: Send + Sync {
    /// `sftp`, `https`, `ftp`, `local`, `memory`: for reports.
    fn scheme(&self) -> &'static str;
    /// `path` as the user would write it (a URL or a local path): for
    /// every message about it.
    fn display(&self, path: &[u8]) -> String;
    fn capabilities(&self) -> Capabilities;

    /// `None` when nothing is there.
    async fn stat(&self, path: &[u8]) -> Result<Option<Entry>, TransferError>;

    /// The error for a source `stat` found missing, with what the server
    /// said where it said more (an FTP server's `550` reply).
    fn missing(&self, path: &[u8]) -> TransferError {
        let msg = format!("{}: no such file or directory", self.display(path));
        if self.scheme() == "local" {
            TransferError::Local(msg)
        } else {
            TransferError::Remote(msg)
        }
    }

    /// What a split or a resume of `path` needs to know first: whether
    /// this one file can be read from any offset, a validator that
    /// changes with its content, and a digest the server announced. Asked
    /// only for files big enough to split or with a part file to continue.
    /// The default: what the capabilities say, nothing else known.
    async fn read_info(&self, _path: &[u8]) -> Result<ReadInfo, TransferError> {
        Ok(ReadInfo {
            ranges: self.capabilities().ranged_read,
            ..ReadInfo::default()
        })
    }

    /// Whether `stat` says a file's size and time as the listing did, so
    /// that a file is asked again before its rename whether it changed
    /// during the copy (local, SFTP). The default: no (an FTP server's
    /// `MDTM` and its listing's times may differ; an HTML index has none).
    fn stat_as_listed(&self) -> bool {
        false
    }

    /// Whether `read_unsized` learns a file's size from its read, so that
    /// a file named among several needs no `stat` before it (HTTP: the
    /// GET alone, as curl sends it). The default: no.
    fn sizes_by_reading(&self) -> bool {
        false
    }

    /// Open a file the plan knows no size of (a listing without sizes:
    /// an HTML index) from its start, and learn its size, time and
    /// validators from that same answer: one request instead of a `stat`
    /// and a read (an HTTP HEAD and GET: two round trips a file). A
    /// missing file is the error `read` gives. `Ok(None)`: this backend
    /// does not; the engine then `stat`s the file first. The default.
    async fn read_unsized(&self, _path: &[u8]) -> Result<Option<UnsizedRead>, TransferError> {
        Ok(None)
    }

    /// The entries of a directory (no `.` or `..`).
    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        Err(TransferError::Usage(format!(
            "{}: this server cannot list directories",
            self.display(dir)
        )))
    }

    /// `len` bytes of `path` from `offset` (`None`: to the end).
    async fn read(
        &self,
        path: &[u8],
        offset: u64,
        len: Option<u64>,
    ) -> Result<Box<dyn ByteStream>, TransferError>;

    /// A writer into `path`. `size` is the whole file's, when known.
    async fn write(
        &self,
        path: &[u8],
        mode: WriteMode,
        size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError>;

    /// What an unfinished write of `path` (a `size`-byte file) left on a
    /// server that keeps it though the file appears only when whole
    /// (ferry serve keeps what a cut ranged PUT sent); `None` when nothing
    /// or when this backend cannot tell. `--resume` then writes from
    /// `have` with `WriteMode::At`.
    async fn unfinished(
        &self,
        _path: &[u8],
        _size: u64,
    ) -> Result<Option<Unfinished>, TransferError> {
        Ok(None)
    }

    /// Drop what an unfinished write of `path` left ([`Backend::unfinished`]):
    /// the copy failed because its source changed, so those bytes mix two
    /// versions and a `--resume` must not continue them. Best effort; the
    /// final name is not touched.
    async fn discard_unfinished(&self, _path: &[u8]) -> Result<(), TransferError> {
        Ok(())
    }

    /// Why `--resume` cannot continue a file written here, said once per
    /// copy (an HTTP PUT takes a whole file); `None` where it can.
    async fn resume_refusal(&self) -> Option<String> {
        None
    }

    /// Create `dir` and its missing parents; an existing directory is fine.
    async fn mkdir_all(&self, dir: &[u8]) -> Result<(), TransferError> {
        Err(TransferError::Usage(format!(
            "{}: this server cannot create directories",
            self.display(dir)
        )))
    }

    /// Rename `from` over `to`, replacing it (see `Capabilities::rename_over`).
    async fn rename_over(&self, from: &[u8], _to: &[u8]) -> Result<(), TransferError> {
        Err(TransferError::Usage(format!(
            "{}: this server cannot rename",
            self.display(from)
        )))
    }

    async fn remove(&self, path: &[u8]) -> Result<(), TransferError> {
        Err(TransferError::Usage(format!(
            "{}: this server cannot remove files",
            self.display(path)
        )))
    }

    /// Write a whole small file in one go: `data` into `part` (the final
    /// name itself when `None`, created with `perm` as in
    /// [`WriteMode::Create`]), then times and mode (`-p`'s, set exactly),
    /// then rename `part` over `to`. The engine sends files up to 256 KiB this way; a backend
    /// whose calls cross threads (SFTP) does the whole sequence in one
    /// trip. The default makes the ordinary calls.
    async fn put_whole(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        data: Bytes,
        perm: Option<u32>,
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Result<(), TransferError> {
        let w = part.unwrap_or(to);
        let mut sink = self
            .write(w, WriteMode::Create { perm }, Some(data.len() as u64))
            .await?;
        sink.write(data).await?;
        sink.finish().await?;
        if mtime.is_some() || mode.is_some() {
            self.set_attrs(w, mtime, mode).await?;
        }
        if let Some(p) = part {
            self.rename_over(p, to).await?;
        }
        Ok(())
    }

    /// [`Backend::put_whole`] of the first `len` bytes of the local file
    /// `from`, which the backend reads itself where its calls run on a
    /// thread of their own (SFTP: the connection's), so a small file
    /// costs one hand-off between threads, not two (the blocking pool's
    /// read, then the connection's write). A file shorter than `len` is an
    /// error. `None`: this backend does not; the engine reads the file
    /// and calls `put_whole`.
    #[allow(clippy::too_many_arguments)]
    async fn put_local(
        &self,
        _part: Option<&[u8]>,
        _to: &[u8],
        _from: &std::path::Path,
        _len: u64,
        _perm: Option<u32>,
        _mtime: Option<i64>,
        _mode: Option<u32>,
    ) -> Option<Result<(), TransferError>> {
        None
    }

    /// The whole of `path` (`to.len` bytes) into a new local file, in one
    /// job on a thread of this backend's own: the file made, every byte
    /// written, its mode and time set, then put in place under its final
    /// name ([`LocalTarget::make`]). A file then costs one hand-off
    /// between threads, not four (the part's open, the transfer, the
    /// rename, each a trip to the blocking pool and back: 100 x 1 MB
    /// from vsftpd took 1.24x the copy loop's time). The task's end is
    /// the file's; a failure never touches the final name (and leaves no
    /// part where the file was unnamed, `local::make_file`). `None`:
    /// this backend does not; the engine reads and writes the file.
    fn get_local(&self, _path: &[u8], _to: LocalTarget) -> Option<RangeTask> {
        None
    }

    /// The upload's mirror of [`Backend::get_local`]: the whole local
    /// file `from.path` (`from.len` bytes) into `part` (else `to`
    /// itself) and renamed over `to`, in one job on a thread of this
    /// backend's own. After its last byte went and before the rename the
    /// job asks the local file again (`fstat`: size and time as the plan
    /// saw them, time unchanged since it was opened); a change removes
    /// the part, sets `from.changed` and fails the job. `None`: this
    /// backend does not; the engine reads and writes the file.
    fn put_from_local(
        &self,
        _part: Option<&[u8]>,
        _to: &[u8],
        _from: LocalSource,
    ) -> Option<RangeTask> {
        None
    }

    /// Where `path` is on this machine's disk, for
    /// [`Backend::put_local`] and for a small file written on a source's
    /// thread ([`Backend::home`]): the local backend's paths only.
    fn local_path(&self, _path: &[u8]) -> Option<std::path::PathBuf> {
        None
    }

    /// Read a whole small file (`len` bytes from the start) in one go. The
    /// engine reads files up to 256 KiB this way; a backend whose calls
    /// cross threads (SFTP) does OPEN, READs and CLOSE in one trip. The
    /// default reads the stream.
    async fn get_whole(&self, path: &[u8], len: u64) -> Result<Bytes, TransferError> {
        gather(self.read(path, 0, Some(len)).await?, len).await
    }

    /// The runtime on whose thread this backend's requests about `path`
    /// run and its bytes arrive (an HTTP shard's), if it has one. A small
    /// file read from here into a local file is then read and written
    /// there, one hand-off a file, as the copy loops did: from the
    /// engine's task, its request, answer and body crossed threads, and
    /// its write went on to one of many blocking threads that fought over
    /// the directory's lock (1.6x the loop's client CPU for 1,000 x 20 kB
    /// over HTTPS).
    fn home(&self, path: &[u8]) -> Option<tokio::runtime::Handle> {
        let _ = path;
        None
    }

    /// Every thread this backend's requests can run on now (each HTTP
    /// shard's, each live SSH connection's). A request made on one of them for a
    /// small whole file ([`Backend::get_whole`]) is served by that
    /// thread's own connection, so the engine runs small files into local
    /// files there, taken from one queue: no hand-off between threads for
    /// each file (the copy loops' shape; one spawn and one wake-up a file
    /// cost 1.5x the loop's client CPU for 1,000 x 20 kB over HTTPS).
    fn homes(&self) -> Vec<tokio::runtime::Handle> {
        Vec::new()
    }

    /// [`Backend::homes`] for a queue of `files` files: a backend that
    /// starts its threads when first asked (FTP's lanes) starts no more
    /// than the files need, and gives at most that many.
    fn homes_for(&self, files: usize) -> Vec<tokio::runtime::Handle> {
        let _ = files;
        self.homes()
    }

    /// The largest file the engine copies on [`Backend::homes`]' threads:
    /// by default one read whole (256 KiB); FTP moves a file of up to 16
    /// MiB in one blocking job there.
    fn home_file_max(&self) -> u64 {
        crate::engine::WHOLE_FILE
    }

    /// Remove an empty directory.
    async fn remove_dir(&self, path: &[u8]) -> Result<(), TransferError> {
        Err(TransferError::Usage(format!(
            "{}: this server cannot remove directories",
            self.display(path)
        )))
    }

    /// Hashes this backend computes where the bytes live (a server
    /// hashing its own disk), best first; empty when it cannot.
    fn hashes(&self) -> Vec<HashAlgo> {
        Vec::new()
    }

    /// Called once before a run that compares hashes (`sync -c`, `check
    /// -c`), before [`Backend::hashes`]: a backend that must ask the server
    /// what it can hash (SFTP: which tools an exec channel can run) asks
    /// here, not on every copy.
    async fn prepare_hashes(&self) {}

    /// The hash of a whole file computed where it lives; `Ok(None)` when
    /// this backend cannot (the caller then reads the file to hash it:
    /// [`crate::hash::by_reading`]).
    async fn hash(&self, _path: &[u8], _algo: HashAlgo) -> Result<Option<Vec<u8>>, TransferError> {
        Ok(None)
    }

    /// A CRC32 of part CRC32s the store keeps for the file, and the part
    /// sizes (an S3 COMPOSITE multipart object), for a comparison with a
    /// file hashed part by part ([`crate::hash::composite_by_reading`]).
    async fn composite_crc32(
        &self,
        _path: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u64>)>, TransferError> {
        Ok(None)
    }

    /// Set the modification time and permission bits, where the
    /// capabilities say it can; others are ignored.
    async fn set_attrs(
        &self,
        _path: &[u8],
        _mtime: Option<i64>,
        _mode: Option<u32>,
    ) -> Result<(), TransferError> {
        Ok(())
    }

    /// Copy `len` bytes of `from` to a new `to` on the server itself.
    /// `Ok(false)`: not offered, the engine moves the bytes.
    async fn copy_within(
        &self,
        _from: &[u8],
        _to: &[u8],
        _len: u64,
    ) -> Result<bool, TransferError> {
        Ok(false)
    }

    /// Identity of the server and account, for "is this the same store?":
    /// two backends with the same key may use `copy_within`.
    fn endpoint_key(&self) -> String;

    /// Connections opened, cipher and request size, for the report.
    fn info(&self) -> BackendInfo {
        BackendInfo::default()
    }

    /// Where a link at `path` points (a symbolic link on the local disk);
    /// `path` itself for anything else.
    async fn resolve_link(&self, path: &[u8]) -> Result<Vec<u8>, TransferError> {
        Ok(path.to_vec())
    }

    /// The work ahead, before it starts: a backend that opens more
    /// connections for more work (SFTP) starts opening them now (and
    /// may let the work start before they are up). `bytes`: the total,
    /// when known. The default does nothing.
    async fn prepare(&self, _role: Role, _bytes: Option<u64>) {}

    /// The round trip of the path to this backend's server, as its TCP
    /// handshakes measured it; `None` for local files, or when unknown.
    /// On a long path the engine widens a big file over more connections
    /// as measured (widen.rs).
    fn round_trip(&self) -> Option<std::time::Duration> {
        None
    }

    /// Ranges a file widened on a long path starts on, at least: four
    /// (lftp's `pget` and aria2c's `-s` default to 5). A backend whose
    /// extra connections are cheap may start wider.
    fn widen_start(&self) -> usize {
        crate::widen::START
    }

    /// Whether each ranged read opens a data connection of its own (FTP's
    /// `REST` and `RETR`): a new connection's round trips and slow start
    /// a range. The engine then cuts a split file into one piece a range,
    /// not finer. The default: no.
    fn range_opens_connection(&self) -> bool {
        false
    }

    /// Let `ranges` ranges of one file go each over a connection of its
    /// own, opening more as needed (a file the engine widens on a long
    /// path): how many ranges it can spread over now, connections still
    /// shaking hands counted. The default opens nothing: `max_ranges`.
    async fn widen(&self, _role: Role, ranges: usize) -> usize {
        self.capabilities().max_ranges.min(ranges)
    }

    /// Close connections politely. Dropping works too.
    async fn close(&self) {}
}

/// A thread of a backend's own running a current-thread runtime (an HTTP
/// or S3 shard's, an FTP lane's, the in-memory backend's): the handle
/// its tasks are spawned with, and what holds it up. The thread ends
/// when this is dropped.
pub(crate) struct OwnThread {
    pub(crate) rt: tokio::runtime::Handle,
    _hold: tokio::sync::oneshot::Sender<()>,
}

impl OwnThread {
    /// A thread named `name`.
    pub(crate) fn start(name: String) -> Result<OwnThread, TransferError> {
        OwnThread::start_with(name, || {})
    }

    /// [`OwnThread::start`], running `first` on the new thread before its
    /// runtime takes any task (a shard or a lane marks its thread).
    pub(crate) fn start_with(
        name: String,
        first: impl FnOnce() + Send + 'static,
    ) -> Result<OwnThread, TransferError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TransferError::Local(format!("cannot start a runtime: {e}")))?;
        let handle = rt.handle().clone();
        let (hold, held) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                first();
                let _ = rt.block_on(held);
            })
            .map_err(|e| TransferError::Local(format!("cannot start a thread: {e}")))?;
        Ok(OwnThread {
            rt: handle,
            _hold: hold,
        })
    }
}

/// The rest of a stream in one buffer, `len` bytes expected (a stream
/// that ends early errs; one that sends more is cut by the caller's
/// length check).
pub(crate) async fn gather(mut s: Box<dyn ByteStream>, len: u64) -> Result<Bytes, TransferError> {
    let mut out = bytes::BytesMut::with_capacity(len.min(WHOLE_GATHER) as usize);
    while let Some(piece) = s.next().await? {
        if out.is_empty() && piece.len() as u64 == len {
            return Ok(piece);
        }
        out.extend_from_slice(&piece);
    }
    Ok(out.freeze())
}

/// Most bytes [`gather`] reserves up front.
const WHOLE_GATHER: u64 = 1 << 20;

/// Which end of a copy a backend is, for [`Backend::prepare`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Source,
    Destination,
}

/// A content hash that `ferry sync --checksum` and `ferry check`
/// compare (ferry-hash has the list and the order of preference).
pub use ferry_hash::Algo as HashAlgo;

/// What a backend tells the report.
#[derive(Debug, Clone, Default)]
pub struct BackendInfo {
    pub connections: usize,
    pub cipher: Option<String>,
    pub chunk: u32,
    /// `sftp`, `https (h2)`...: what the protocol field of the report says.
    pub protocol: Option<String>,
}

/// `/`-separated path helpers shared by the engine and the backends.
pub mod path {
    /// A path as text, for messages and for protocols that name files in
    /// text: as it is where it is UTF-8 (a check a word at a time), else
    /// with U+FFFD for what is not. `String::from_utf8_lossy` alone looks
    /// at each byte: 9 calls a file were 5% of the client's instructions
    /// for 1000 x 20 kB to an FTP server.
    pub fn text(p: &[u8]) -> String {
        text_ref(p).into_owned()
    }

    /// [`text`], borrowed where it is UTF-8.
    pub fn text_ref(p: &[u8]) -> std::borrow::Cow<'_, str> {
        match std::str::from_utf8(p) {
            Ok(t) => std::borrow::Cow::Borrowed(t),
            Err(_) => String::from_utf8_lossy(p),
        }
    }

    /// `dir` + `/` + `name`, without doubling the slash.
    pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
        let mut p = dir.to_vec();
        if !p.ends_with(b"/") && !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        p
    }

    /// The last component, trailing slashes ignored.
    pub fn basename(p: &[u8]) -> &[u8] {
        let t = trim_end(p);
        match t.iter().rposition(|&c| c == b'/') {
            Some(i) => t.get(i + 1..).unwrap_or_default(),
            None => t,
        }
    }

    /// Everything before the last component (`/` for `/x`, empty for `x`).
    pub fn parent(p: &[u8]) -> &[u8] {
        let t = trim_end(p);
        match t.iter().rposition(|&c| c == b'/') {
            Some(0) => b"/",
            Some(i) => t.get(..i).unwrap_or_default(),
            None => b"",
        }
    }

    fn trim_end(p: &[u8]) -> &[u8] {
        let mut t = p;
        while t.len() > 1 && t.ends_with(b"/") {
            t = t.get(..t.len() - 1).unwrap_or_default();
        }
        t
    }

    /// `top` + `/` + `rel`, where an empty `rel` is `top` itself (paths
    /// relative to the top of a walked tree).
    pub fn join_rel(top: &[u8], rel: &[u8]) -> Vec<u8> {
        if rel.is_empty() {
            top.to_vec()
        } else {
            join(top, rel)
        }
    }

    /// The temporary name a file is written under before it is renamed:
    /// `.NAME.ferry-part` beside it (every protocol, every direction).
    pub fn part_name(p: &[u8]) -> Vec<u8> {
        side_name(p, b".ferry-part")
    }

    /// `.NAME` + `suffix` beside NAME: the part file, and the resume
    /// record of a split file (`.NAME.ferry-resume`).
    pub fn side_name(p: &[u8], suffix: &[u8]) -> Vec<u8> {
        let (dir, name) = (parent(p), basename(p));
        let mut side = Vec::with_capacity(dir.len() + 2 + name.len() + suffix.len());
        side.extend_from_slice(dir);
        if !dir.is_empty() && !dir.ends_with(b"/") {
            side.push(b'/');
        }
        side.push(b'.');
        side.extend_from_slice(name);
        side.extend_from_slice(suffix);
        side
    }

    /// A name that can be a plain file name: not empty, `.`, `..`, and no
    /// `/` or NUL (a listing that names anything else could write outside
    /// the destination).
    pub fn safe_name(name: &[u8]) -> bool {
        !name.is_empty()
            && name != b"."
            && name != b".."
            && !name.contains(&b'/')
            && !name.contains(&0)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn names() {
            assert_eq!(join(b"/a", b"b"), b"/a/b");
            assert_eq!(join(b"/a/", b"b"), b"/a/b");
            assert_eq!(join(b"", b"b"), b"b");
            assert_eq!(basename(b"/a/b/"), b"b");
            assert_eq!(basename(b"b"), b"b");
            assert_eq!(parent(b"/a/b"), b"/a");
            assert_eq!(parent(b"/a"), b"/");
            assert_eq!(parent(b"a"), b"");
            assert_eq!(part_name(b"/d/f.bin"), b"/d/.f.bin.ferry-part");
            assert_eq!(part_name(b"f"), b".f.ferry-part");
            assert_eq!(part_name(b"/f"), b"/.f.ferry-part");
            assert_eq!(part_name(b"/d/f/"), b"/d/.f.ferry-part");
            assert_eq!(side_name(b"/d/f", b".ferry-resume"), b"/d/.f.ferry-resume");
            assert_eq!(text(b"/d/f \xc3\xa9"), "/d/f \u{e9}");
            assert_eq!(text(b"/d/\xff"), "/d/\u{fffd}");
            assert!(safe_name(b"a b"));
            assert!(!safe_name(b".."));
            assert!(!safe_name(b"a/b"));
        }
    }
}

/// Walk the tree under `top`, [`WALK_LISTINGS`] listings in flight.
/// `each` gets every entry with a plain name (its path relative to `top`,
/// a directory's entries sorted by name) and says whether to enter it;
/// an error from `each` or from a listing ends the walk. The order
/// between directories follows the listings' arrival.
pub async fn walk_tree(
    b: &std::sync::Arc<dyn Backend>,
    top: &[u8],
    mut each: impl FnMut(&[u8], &Entry) -> Result<bool, TransferError>,
) -> Result<(), TransferError> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let mut pending: Vec<Vec<u8>> = vec![Vec::new()];
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < WALK_LISTINGS {
            let Some(rel) = pending.pop() else { break };
            let (b, p) = (b.clone(), path::join_rel(top, &rel));
            running.push(async move { (rel, b.list(&p).await) });
        }
        let Some((rel, listed)) = running.next().await else {
            return Ok(());
        };
        let mut entries = listed?;
        entries.sort_by(|x, y| x.name.cmp(&y.name));
        for e in entries {
            if !path::safe_name(&e.name) {
                continue;
            }
            let r = path::join_rel(&rel, &e.name);
            if each(&r, &e)? {
                pending.push(r);
            }
        }
    }
}

/// Listings in flight in [`walk_tree`].
pub const WALK_LISTINGS: usize = 16;

/// One key per server and account: locations with the same key share a
/// backend (one set of connections; `copy_within` between them).
pub(crate) fn key_of(l: &crate::Location) -> String {
    use crate::Location;
    match l {
        Location::Local(_) => "local".into(),
        Location::Sftp(r) => format!("sftp://{:?}@{}:{:?}", r.user, r.host, r.port),
        Location::Http(h) => format!("{}://{}", h.url.scheme(), h.url.authority()),
        Location::S3(s) => format!("s3://{}", s.bucket),
        Location::Ftp(f) => format!(
            "ftp{}://{:?}:{:?}@{}:{:?}",
            if f.implicit_tls { "s" } else { "" },
            f.user,
            f.password.as_deref().map(|_| "*"),
            f.host,
            f.port
        ),
    }
}

/// A location opened for direct use: the backend that serves it and the
/// location's path in that backend. This is what `ferry ls`, `ferry sync`
/// and the bindings' filesystem objects use when they need more than a
/// copy (listing, stat, ranged reads of one file).
pub struct Opened {
    pub backend: std::sync::Arc<dyn Backend>,
    pub path: Vec<u8>,
    /// The user ended the location with `/` (a directory).
    pub dir: bool,
}

/// Connect to a location (SSH handshake, TLS, FTP login as needed) and
/// resolve its path. Call [`Backend::close`] when done.
pub async fn connect(
    l: &crate::Location,
    opts: &crate::CopyOptions,
) -> Result<Opened, TransferError> {
    let (backend, path, dir) = open(l, opts, None).await?;
    Ok(Opened { backend, path, dir })
}

/// The backend for a location (a new one, or `existing` for the same
/// server), the location's path in it, and whether the user ended it
/// with `/`.
pub(crate) async fn open(
    l: &crate::Location,
    opts: &crate::CopyOptions,
    existing: Option<std::sync::Arc<dyn Backend>>,
) -> Result<(std::sync::Arc<dyn Backend>, Vec<u8>, bool), TransferError> {
    use crate::location::RemotePath;
    use crate::Location;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::Arc;
    match l {
        Location::Local(p) => {
            let b = p.as_os_str().as_bytes().to_vec();
            let dir = b.ends_with(b"/");
            let backend = existing.unwrap_or_else(|| Arc::new(local::Local));
            Ok((backend, b, dir))
        }
        Location::Sftp(r) => {
            let dir = r.trailing_slash();
            if let Some(b) = existing {
                // Same server: resolve the path on the open connections.
                let p = match &r.path {
                    RemotePath::Absolute(a) => a.clone(),
                    RemotePath::HomeRelative(_) => {
                        // Rare (two scp-style locations on one server):
                        // connect once more to resolve home.
                        let (_, p) = sftp::Sftp::open(r, opts).await?;
                        p
                    }
                };
                return Ok((b, p, dir));
            }
            let (b, p) = sftp::Sftp::open(r, opts).await?;
            Ok((Arc::new(b), p, dir))
        }
        Location::Http(h) => {
            if let Some(b) = existing {
                // Same server: no new clients (each loads its TLS trust
                // and .netrc), only the path.
                let (p, dir) = http::Http::path_of(h);
                return Ok((b, p, dir));
            }
            let (b, p, dir) = http::Http::open(h, opts)?;
            Ok((Arc::new(b), p, dir))
        }
        Location::S3(s) => {
            if let Some(b) = existing {
                // Not opened again: a credential_process runs once.
                let (p, dir) = s3::S3::path_of(s);
                return Ok((b, p, dir));
            }
            let (b, p, dir) = s3::S3::open(s, opts).await?;
            Ok((Arc::new(b), p, dir))
        }
        Location::Ftp(f) => {
            let dir = f.trailing_slash();
            let (b, p) = ftp::Ftp::open(f, opts).await?;
            Ok((existing.unwrap_or_else(|| Arc::new(b)), p, dir))
        }
    }
}
