//! The SFTP v3 server: one [`run`] per "sftp" subsystem channel.
//!
//! Bytes from the channel go through `ferry-sftp`'s [`Framer`] and
//! [`Request::decode`]; every path goes through [`Root::resolve`]; file
//! system calls run on tokio's blocking pool; replies go to one writer task
//! ([`ferry_ssh::channel_writer`]) that coalesces small ones.
//!
//! READ and WRITE are served concurrently (each on the blocking pool),
//! but replies leave in request order, as OpenSSH's sftp-server sends
//! them: OpenSSH's own client truncates a download at the first reply that
//! came out of order (`truncating at ...` in `scp -vvv`). Concurrency is
//! bounded by a per-session byte budget: when it is spent, requests wait
//! for it; the session reads up to `READ_AHEAD` more bytes of requests from
//! the channel meanwhile and then stops reading it, and the client waits.
//! (It must read on: russh hands each CHANNEL_DATA to its channel before it
//! reads the next packet, so a channel not read stops the connection, and
//! with it the client's WINDOW_ADJUST that replies holding the budget wait
//! for.) A READ's share of the budget is
//! held by its reply's buffer until russh has sealed the bytes into an SSH
//! packet ([`Budgeted`]), so replies waiting for a slow client count too. Every other request on a handle
//! first waits for that handle's reads and writes to finish, so CLOSE never
//! overtakes a WRITE. READ replies are read from the file straight into the
//! reply buffer behind a 13-byte DATA header: one copy from the page cache.
//!
//! A file opened with CREAT|TRUNC (a whole-file upload, as `sftp put` and
//! `scp` do it) is written under a temporary name next to it and renamed
//! over the final name on CLOSE; if the client goes away first, the
//! temporary file is removed and whatever was under the final name before
//! is untouched. Names that already are a client's temporary name
//! (`.NAME.ferry-part`, `NAME.filepart`) are written in place, so an
//! interrupted upload can be resumed.
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use ferry_hash::{Algo, Hasher};
use ferry_sftp::consts::*;
use ferry_sftp::packet_ext::{Extended, DATA_PREFIX_LEN};
use ferry_sftp::{FileAttrs, Framer, Limits, NameEntry, OpenFlags, Request, Response, StatusCode};
use ferry_ssh::Outgoing;
use russh::ChannelMsg;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};

use crate::confine::{ConfineError, Resolved, Root};
use crate::readnow::{self, Inline};

/// Per-session limits; see docs/internals/server.md.
#[derive(Debug, Clone)]
pub struct SftpLimits {
    /// Largest READ or WRITE payload, advertised with limits@openssh.com.
    pub max_io: u32,
    /// Open files and directories per session.
    pub max_handles: usize,
    /// Bytes of READ and WRITE requests being served at once per session.
    pub max_inflight_bytes: usize,
    /// The same for all sessions together: what bounds the server's
    /// memory when many clients read slower than the disk.
    pub max_server_inflight_bytes: usize,
}

impl Default for SftpLimits {
    fn default() -> Self {
        SftpLimits {
            max_io: 1024 * 1024,
            max_handles: 1024,
            // 8 MiB, ferry cp's default in flight per connection, so it
            // never waits for the server's budget; with the budget held
            // until the bytes are sealed (`Budgeted`) this bounds what one
            // session's READ replies hold. 32 MiB before issue #24.
            max_inflight_bytes: 8 * 1024 * 1024,
            // 256 MiB: 32 sessions at their full budget; beyond that,
            // sessions share it (issue #24: 500 sessions of slow ferry cp
            // clients held 1.6 GiB of READ replies with only the
            // per-session budget).
            max_server_inflight_bytes: 256 * 1024 * 1024,
        }
    }
}

/// What a session needs from the server.
pub struct SessionConfig {
    pub root: Root,
    pub writable: bool,
    pub limits: SftpLimits,
    /// Make metadata calls on the session's thread instead of the
    /// blocking pool (a local filesystem: `crate::fskind`).
    pub inline_metadata: bool,
    /// The server-wide budget (`SftpLimits::max_server_inflight_bytes`
    /// in [`BUDGET_UNIT`]s), shared by every session.
    pub budget: Arc<Semaphore>,
}

impl SessionConfig {
    /// A configuration whose server-wide budget is sized from `limits`.
    pub fn new(root: Root, writable: bool, limits: SftpLimits, inline_metadata: bool) -> Self {
        let units = (limits.max_server_inflight_bytes / BUDGET_UNIT).max(1);
        SessionConfig {
            root,
            writable,
            limits,
            inline_metadata,
            budget: Arc::new(Semaphore::new(units.min(Semaphore::MAX_PERMITS))),
        }
    }
}

/// A share of the session's budget and of the server's, returned together
/// on drop.
struct Permit {
    _session: tokio::sync::OwnedSemaphorePermit,
    _server: tokio::sync::OwnedSemaphorePermit,
}

/// A READ reply's buffer with the session's budget it took: the permit is
/// returned when the last `Bytes` of the buffer is dropped. russh's
/// `data_bytes` hands the channel slices of it (no copy) that live until
/// they are sealed into an SSH packet, so the budget covers a reply until
/// it has left for the socket. Before (issue #24) the permit was returned
/// as soon as the reply was queued: for a client that reads slower than
/// the disk, every READ it had in flight (8 MiB per ferry cp connection)
/// sat in the server's queues uncounted, and ferry serve grew to 1.14 GiB
/// under 500 SFTP + 1000 HTTPS clients.
struct Budgeted {
    buf: Vec<u8>,
    _permit: Option<Permit>,
}

impl AsRef<[u8]> for Budgeted {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

/// The budget is counted in units of this many bytes.
const BUDGET_UNIT: usize = 16 * 1024;

/// Most request bytes read from the channel ahead while a request waits
/// for the budget ([`run`]): what a client sends beyond it waits in
/// russh's channel queue and then in the socket.
const READ_AHEAD: usize = 16 * 1024 * 1024;
/// `check-file-name` ranges up to this size are hashed on the session's
/// thread when the page cache holds them (`ferry sync -c` of small files).
const HASH_NOW_MAX: u64 = 256 * 1024;
/// `check-file-name` requests hashed on the blocking pool at once per
/// session; the session reads no further requests while they are taken.
const HASHING: usize = 8;
const READDIR_BATCH: usize = 128;

type Reply = Result<Response, (StatusCode, String)>;

enum Handle {
    File(Arc<OpenFile>),
    Dir(Arc<OpenDir>),
}

struct OpenFile {
    file: File,
    /// Reads and writes still running on this handle.
    pending: AtomicUsize,
    idle: Notify,
    /// Written under `temp`; renamed to `final_path` on CLOSE.
    temp: Mutex<Option<(PathBuf, PathBuf)>>,
    /// WRITEs waiting for this file's writer.
    writes: Mutex<WriteQueue>,
    /// Whether READs and WRITEs may run on the session's thread
    /// ([`OpenFile::inline`]).
    inline: Mutex<Option<Inline>>,
}

/// WRITEs to one file go through one blocking thread at a time, in the
/// order they came. Run side by side, the writers of one file only
/// queued on its inode lock in the kernel: spinning on it
/// (`rwsem_spin_on_owner`); one writer took 14% off ferry serve's CPU
/// on a 1 GiB upload (docs/internals/server.md, "One writer per file").
#[derive(Default)]
struct WriteQueue {
    jobs: std::collections::VecDeque<WriteJob>,
    /// A blocking thread is draining `jobs`.
    running: bool,
}

struct WriteJob {
    id: u32,
    offset: u64,
    data: Bytes,
    slot: oneshot::Sender<Outgoing>,
    permit: Permit,
}

impl OpenFile {
    /// How this file may be read and written on the session's thread;
    /// asked of the file system at the first READ or WRITE.
    fn inline(&self) -> Inline {
        let mut how = self.inline.lock().unwrap_or_else(|e| e.into_inner());
        *how.get_or_insert_with(|| Inline::for_file(&self.file))
    }

    fn set_inline(&self, how: Inline) {
        *self.inline.lock().unwrap_or_else(|e| e.into_inner()) = Some(how);
    }

    /// Run the queued WRITEs until none is left; one caller at a time
    /// (`WriteQueue::running`).
    fn drain_writes(&self) {
        loop {
            let job = {
                let mut q = self.writes.lock().unwrap_or_else(|e| e.into_inner());
                match q.jobs.pop_front() {
                    Some(job) => job,
                    None => {
                        q.running = false;
                        return;
                    }
                }
            };
            let out = write_reply(&self.file, job.id, job.offset, &job.data);
            if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                self.idle.notify_waiters();
            }
            let _ = job.slot.send(out.into());
            drop(job.permit);
        }
    }
}

struct OpenDir {
    path: PathBuf,
    entries: Mutex<Option<fs::ReadDir>>,
}

/// Handles are `index (u32) | generation (u32)`: a stale handle never
/// reaches a file opened later in the same slot.
struct Handles {
    slots: Vec<Option<(u32, Handle)>>,
    free: Vec<usize>,
    next_gen: u32,
    open: usize,
}

impl Handles {
    fn new() -> Self {
        Handles {
            slots: Vec::new(),
            free: Vec::new(),
            next_gen: 1,
            open: 0,
        }
    }

    fn insert(&mut self, h: Handle) -> Bytes {
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let idx = match self.free.pop() {
            Some(i) => {
                if let Some(slot) = self.slots.get_mut(i) {
                    *slot = Some((gen, h));
                }
                i
            }
            None => {
                self.slots.push(Some((gen, h)));
                self.slots.len() - 1
            }
        };
        self.open += 1;
        let mut b = BytesMut::with_capacity(8);
        b.extend_from_slice(&(idx as u32).to_be_bytes());
        b.extend_from_slice(&gen.to_be_bytes());
        b.freeze()
    }

    fn parse(handle: &[u8]) -> Option<(usize, u32)> {
        let idx: [u8; 4] = handle.get(0..4)?.try_into().ok()?;
        let gen: [u8; 4] = handle.get(4..8)?.try_into().ok()?;
        if handle.len() != 8 {
            return None;
        }
        Some((u32::from_be_bytes(idx) as usize, u32::from_be_bytes(gen)))
    }

    fn get(&self, handle: &[u8]) -> Option<&Handle> {
        let (idx, gen) = Self::parse(handle)?;
        match self.slots.get(idx)? {
            Some((g, h)) if *g == gen => Some(h),
            _ => None,
        }
    }

    fn remove(&mut self, handle: &[u8]) -> Option<Handle> {
        let (idx, gen) = Self::parse(handle)?;
        let slot = self.slots.get_mut(idx)?;
        match slot {
            Some((g, _)) if *g == gen => {
                let h = slot.take().map(|(_, h)| h);
                self.free.push(idx);
                self.open -= 1;
                h
            }
            _ => None,
        }
    }

    fn drain(&mut self) -> Vec<Handle> {
        self.open = 0;
        self.slots.drain(..).flatten().map(|(_, h)| h).collect()
    }
}

/// Serve SFTP on `channel` until the client closes it or sends something
/// that is not SFTP. `peer` is for log lines.
pub async fn run<S>(channel: russh::Channel<S>, cfg: Arc<SessionConfig>, peer: String)
where
    S: From<(russh::ChannelId, ChannelMsg)> + Send + Sync + 'static,
{
    let (mut read_half, write_half) = channel.split();
    let (out_tx, rx) = mpsc::channel::<Outgoing>(256);
    let writer = tokio::spawn(ferry_ssh::channel_writer(write_half, rx, true));
    // Replies in request order: each request queues the receiver of its
    // reply; this task forwards them to the writer in that order.
    let (tx, mut order_rx) = mpsc::channel::<oneshot::Receiver<Outgoing>>(4096);
    let sequencer = tokio::spawn(async move {
        while let Some(next) = order_rx.recv().await {
            if let Ok(bytes) = next.await {
                if out_tx.send(bytes).await.is_err() {
                    return;
                }
            }
        }
    });
    let budget_units = (cfg.limits.max_inflight_bytes / BUDGET_UNIT).max(1);
    let mut session = Session {
        cfg: cfg.clone(),
        tx,
        handles: Handles::new(),
        budget: Arc::new(Semaphore::new(budget_units)),
        budget_units,
        hashing: Arc::new(Semaphore::new(HASHING)),
        hash_buf: Vec::new(),
        peer: peer.clone(),
        initialized: false,
    };
    // The longest request we accept: a WRITE of max_io plus its header.
    let mut framer = Framer::new(cfg.limits.max_io + 64 * 1024);
    let mut inbox = Inbox::default();
    let why = 'outer: loop {
        let frame = match framer.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => {
                if let Some(data) = inbox.pop() {
                    framer.push_bytes(data);
                } else if inbox.ended {
                    break String::new();
                } else {
                    inbox.take(read_half.wait().await);
                }
                continue;
            }
            Err(e) => break format!("bad packet: {e}"),
        };
        // Lenient about bytes after the last field, as OpenSSH's
        // sftp-server is: rclone (Go's pkg/sftp) sends WRITE packets
        // longer than their data.
        let req = match Request::decode_lenient(frame) {
            Ok((r, 0)) => r,
            Ok((r, extra)) => {
                tracing::trace!(%peer, extra, "ignored bytes after an SFTP request");
                r
            }
            Err(e) => break format!("malformed request: {e}"),
        };
        // A request may wait for the budget, which READ replies hold
        // until the client's window lets them out. The channel is read on
        // meanwhile (up to READ_AHEAD bytes): russh hands each
        // CHANNEL_DATA to its channel before it reads the next packet, so
        // a channel left unread stops the whole connection, the client's
        // WINDOW_ADJUST with it, and those replies never leave.
        let handled = session.handle(req);
        tokio::pin!(handled);
        loop {
            tokio::select! {
                biased;
                r = &mut handled => match r {
                    Ok(()) => break,
                    Err(e) => break 'outer e,
                },
                msg = read_half.wait(), if !inbox.ended && inbox.len < READ_AHEAD => inbox.take(msg),
            }
        }
    };
    if !why.is_empty() {
        tracing::warn!(%peer, "closing SFTP session: {why}");
    }
    session.shutdown().await;
    drop(session);
    let _ = sequencer.await;
    let _ = writer.await;
}

/// What the channel said and the session has not framed yet: its data as
/// it came (no copy), and whether it has ended (EOF, close), after which
/// what was read is still served.
#[derive(Default)]
struct Inbox {
    data: std::collections::VecDeque<Bytes>,
    len: usize,
    ended: bool,
}

impl Inbox {
    fn take(&mut self, msg: Option<ChannelMsg>) {
        match msg {
            Some(ChannelMsg::Data { data }) => {
                self.len += data.len();
                self.data.push_back(data);
            }
            Some(ChannelMsg::Eof) | Some(ChannelMsg::Close) | None => self.ended = true,
            Some(_) => {}
        }
    }

    fn pop(&mut self) -> Option<Bytes> {
        let data = self.data.pop_front()?;
        self.len -= data.len();
        Some(data)
    }
}

struct Session {
    cfg: Arc<SessionConfig>,
    /// Reply slots, in request order.
    tx: mpsc::Sender<oneshot::Receiver<Outgoing>>,
    handles: Handles,
    budget: Arc<Semaphore>,
    budget_units: usize,
    /// Room for `check-file-name` requests on the blocking pool.
    hashing: Arc<Semaphore>,
    /// The bytes of a small file hashed on this thread, kept between
    /// requests (fresh pages cost more than hashing them).
    hash_buf: Vec<u8>,
    peer: String,
    initialized: bool,
}

fn status(id: u32, code: StatusCode, msg: &str) -> Response {
    Response::Status {
        id,
        code,
        message: Bytes::copy_from_slice(msg.as_bytes()),
        lang: Bytes::from_static(b"en"),
    }
}

fn ok(id: u32) -> Response {
    status(id, StatusCode::OK, "")
}

fn encode(r: &Response) -> Bytes {
    let mut b = BytesMut::new();
    r.encode(&mut b);
    b.freeze()
}

fn io_status(e: &io::Error) -> StatusCode {
    match e.kind() {
        io::ErrorKind::NotFound => StatusCode::NO_SUCH_FILE,
        io::ErrorKind::PermissionDenied => StatusCode::PERMISSION_DENIED,
        _ => StatusCode::FAILURE,
    }
}

fn io_err(what: &str, e: io::Error) -> (StatusCode, String) {
    (io_status(&e), format!("{what}: {e}"))
}

fn confine_err(e: ConfineError) -> (StatusCode, String) {
    let code = match e {
        ConfineError::NotFound(_) => StatusCode::NO_SUCH_FILE,
        ConfineError::Io(_) => StatusCode::FAILURE,
        ConfineError::BadName(_) | ConfineError::Escapes(_) => StatusCode::PERMISSION_DENIED,
    };
    (code, e.to_string())
}

fn read_only() -> (StatusCode, String) {
    (
        StatusCode::PERMISSION_DENIED,
        "the server is read-only (start ferry serve with --writable to allow changes)".into(),
    )
}

pub(crate) fn attrs_of(m: &fs::Metadata) -> FileAttrs {
    FileAttrs {
        size: Some(m.size()),
        uid_gid: Some((m.uid(), m.gid())),
        permissions: Some(m.mode()),
        atime_mtime: Some((clamp_time(m.atime()), clamp_time(m.mtime()))),
        extended: Vec::new(),
    }
}

fn clamp_time(t: i64) -> u32 {
    t.clamp(0, u32::MAX as i64) as u32
}

/// An `ls -l` line, as OpenSSH's sftp-server sends in SSH_FXP_NAME.
fn longname(name: &str, m: &fs::Metadata) -> String {
    let mode = m.mode();
    let kind = match mode & 0o170000 {
        0o040000 => 'd',
        0o120000 => 'l',
        0o020000 => 'c',
        0o060000 => 'b',
        0o010000 => 'p',
        0o140000 => 's',
        _ => '-',
    };
    let mut perms = String::with_capacity(10);
    perms.push(kind);
    for shift in [6u32, 3, 0] {
        let bits = (mode >> shift) & 7;
        perms.push(if bits & 4 != 0 { 'r' } else { '-' });
        perms.push(if bits & 2 != 0 { 'w' } else { '-' });
        perms.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    let (y, mo, d, h, mi, _) = ferry_sftp::civil(m.mtime());
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.get(mo.saturating_sub(1) as usize).unwrap_or(&"Jan");
    format!(
        "{perms} {:>4} {:<8} {:<8} {:>8} {month} {d:>2} {y} {h:02}:{mi:02} {name}",
        m.nlink(),
        m.uid(),
        m.gid(),
        m.size()
    )
}

fn apply_attrs(path: &std::path::Path, file: Option<&File>, a: &FileAttrs) -> io::Result<()> {
    if let Some(size) = a.size {
        match file {
            Some(f) => f.set_len(size)?,
            None => OpenOptions::new().write(true).open(path)?.set_len(size)?,
        }
    }
    if let Some(p) = a.permissions {
        let perm = fs::Permissions::from_mode(p & 0o7777);
        match file {
            Some(f) => f.set_permissions(perm)?,
            None => fs::set_permissions(path, perm)?,
        }
    }
    if let Some((at, mt)) = a.atime_mtime {
        let to_time = |s: u32| std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(s));
        let times = fs::FileTimes::new()
            .set_accessed(to_time(at))
            .set_modified(to_time(mt));
        match file {
            Some(f) => f.set_times(times)?,
            None => File::open(path)?.set_times(times)?,
        }
    }
    // uid/gid: the server runs as one user and does not chown.
    Ok(())
}

fn is_client_temp(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".ferry-part") || n.ends_with(".filepart"))
}

fn temp_name_for(final_path: &std::path::Path) -> PathBuf {
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nonce: u32 = rand::random();
    final_path.with_file_name(format!(".{name}.ferry-upload-{nonce:08x}"))
}

impl Session {
    /// Queue a reply slot; what is sent on the returned sender goes out
    /// after every earlier reply.
    async fn slot(&self) -> Result<oneshot::Sender<Outgoing>, String> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(rx)
            .await
            .map_err(|_| "the channel closed".to_string())?;
        Ok(tx)
    }

    async fn send(&self, r: Response) -> Result<(), String> {
        let _ = self.slot().await?.send(encode(&r).into());
        Ok(())
    }

    async fn reply(&self, id: u32, r: Reply) -> Result<(), String> {
        let resp = match r {
            Ok(r) => r,
            Err((code, msg)) => status(id, code, &msg),
        };
        self.send(resp).await
    }

    fn resolve(&self, path: &[u8], no_follow: bool) -> Result<Resolved, (StatusCode, String)> {
        self.cfg.root.resolve(path, no_follow).map_err(confine_err)
    }

    fn writable(&self) -> Result<(), (StatusCode, String)> {
        if self.cfg.writable {
            Ok(())
        } else {
            Err(read_only())
        }
    }

    /// Run a metadata call (open, stat, rename, ...) where the filesystem
    /// says (`crate::fskind`): on this thread on a local one, where it
    /// takes microseconds and a handoff to the pool costs more, else on
    /// the blocking pool.
    async fn blocking<T, F>(&self, f: F) -> Result<T, (StatusCode, String)>
    where
        F: FnOnce() -> Result<T, (StatusCode, String)> + Send + 'static,
        T: Send + 'static,
    {
        match crate::fskind::run(self.cfg.inline_metadata, f).await {
            Ok(r) => r,
            Err(e) => Err((StatusCode::FAILURE, format!("internal error: {e}"))),
        }
    }

    fn file(&self, handle: &[u8]) -> Result<Arc<OpenFile>, (StatusCode, String)> {
        match self.handles.get(handle) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err((StatusCode::FAILURE, "invalid file handle".into())),
        }
    }

    /// Wait until no READ or WRITE runs on `f`.
    async fn quiesce(f: &OpenFile) {
        loop {
            let notified = f.idle.notified();
            if f.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    async fn handle(&mut self, req: Request) -> Result<(), String> {
        if !self.initialized {
            return match req {
                Request::Init { .. } => {
                    self.initialized = true;
                    let ext = |k: &str, v: &str| {
                        (
                            Bytes::copy_from_slice(k.as_bytes()),
                            Bytes::copy_from_slice(v.as_bytes()),
                        )
                    };
                    self.send(Response::Version {
                        version: SFTP_VERSION,
                        extensions: vec![
                            ext(EXT_POSIX_RENAME, "1"),
                            ext(EXT_STATVFS, "2"),
                            ext(EXT_FSTATVFS, "2"),
                            ext(EXT_HARDLINK, "1"),
                            ext(EXT_COPY_DATA, "1"),
                            ext(EXT_CHECK_FILE_NAME, &check_file_algos()),
                            ext(EXT_FSYNC, "1"),
                            ext(EXT_LIMITS, "1"),
                            ext(EXT_EXPAND_PATH, "1"),
                        ],
                    })
                    .await
                }
                _ => Err("the client did not start with SSH_FXP_INIT".into()),
            };
        }
        match req {
            Request::Init { .. } => Err("a second SSH_FXP_INIT".into()),
            Request::Read {
                id,
                handle,
                offset,
                len,
            } => self.read(id, &handle, offset, len).await,
            Request::Write {
                id,
                handle,
                offset,
                data,
            } => self.write(id, &handle, offset, data).await,
            Request::Extended {
                id,
                request:
                    Extended::CheckFileName {
                        path,
                        algorithms,
                        start,
                        length,
                        block_size,
                    },
            } => {
                let range = HashRange {
                    start,
                    length,
                    block_size,
                };
                self.check_file_name(id, &path, &algorithms, range).await
            }
            other => {
                let id = other.id().unwrap_or(0);
                let r = self.other(other).await;
                self.reply(id, r).await
            }
        }
    }

    /// The session's share first, then the server's: always in this
    /// order, and both are returned without waiting for anything a session
    /// holds (a reply is sealed when the client's window allows), so no
    /// session waits on another in a cycle.
    async fn take_budget(&self, bytes: usize) -> Result<Permit, String> {
        let units = bytes.div_ceil(BUDGET_UNIT).clamp(1, self.budget_units) as u32;
        let session = self
            .budget
            .clone()
            .acquire_many_owned(units)
            .await
            .map_err(|_| "session closed".to_string())?;
        let server = self
            .cfg
            .budget
            .clone()
            .acquire_many_owned(units)
            .await
            .map_err(|_| "server closed".to_string())?;
        Ok(Permit {
            _session: session,
            _server: server,
        })
    }

    async fn read(&mut self, id: u32, handle: &[u8], offset: u64, len: u32) -> Result<(), String> {
        let f = match self.file(handle) {
            Ok(f) => f,
            Err(e) => return self.reply(id, Err(e)).await,
        };
        let len = len.min(self.cfg.limits.max_io) as usize;
        if f.inline() == Inline::Always {
            // Memory (tmpfs): read when the reply's turn comes, straight
            // into the SSH packet (docs/internals/server.md, "Reading into
            // the packet"). Nothing is held until then, so no budget.
            let slot = self.slot().await?;
            let fill = Box::new(move |out: &mut Vec<u8>| fill_read(out, &f.file, id, offset, len));
            let _ = slot.send(Outgoing::Fill {
                len: DATA_PREFIX_LEN + len.max(MAX_READ_ERROR),
                fill,
            });
            return Ok(());
        }
        let permit = self.take_budget(len).await?;
        let slot = self.slot().await?;
        // The data starts half a page away from the page cache's page
        // offset: 13 bytes off (the DATA header in front on a page-aligned
        // buffer), the kernel's copy stalled on 4K aliasing and took a
        // third of the server's CPU (ferry_http::tls::PLAINTEXT_PAGE_OFFSET
        // has the story).
        let mut buf: Vec<u8> = Vec::with_capacity(4096 + DATA_PREFIX_LEN + len);
        let skew = ferry_http::tls::skew_to(&buf, DATA_PREFIX_LEN, 2048);
        let head = skew + DATA_PREFIX_LEN;
        buf.resize(head, 0);
        // On this thread when no disk wait is possible (docs/internals/
        // server.md, "Reading on the session's thread"), else on the pool.
        let mut how = f.inline();
        let now = readnow::append_now(&f.file, &mut buf, head, offset, len, &mut how);
        if how == Inline::Never {
            f.set_inline(how);
        }
        match now {
            Ok(true) => {
                let _ = slot.send(data_reply(buf, skew, head, len, id, Some(permit)).into());
                return Ok(());
            }
            Ok(false) => {}
            Err(e) => {
                let _ = slot.send(read_error(id, &e).into());
                return Ok(());
            }
        }
        f.pending.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            let f2 = f.clone();
            let out = tokio::task::spawn_blocking(move || {
                match readnow::append_all(&f2.file, &mut buf, head, offset, len) {
                    Ok(()) => data_reply(buf, skew, head, len, id, Some(permit)),
                    Err(e) => read_error(id, &e),
                }
            })
            .await
            .unwrap_or_else(|e| encode(&status(id, StatusCode::FAILURE, &format!("read: {e}"))));
            if f.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                f.idle.notify_waiters();
            }
            let _ = slot.send(out.into());
        });
        Ok(())
    }

    async fn write(
        &mut self,
        id: u32,
        handle: &[u8],
        offset: u64,
        data: Bytes,
    ) -> Result<(), String> {
        let f = match self.file(handle) {
            Ok(f) => f,
            Err(e) => return self.reply(id, Err(e)).await,
        };
        let permit = self.take_budget(data.len()).await?;
        let slot = self.slot().await?;
        // On this thread when the file is memory (tmpfs) and no earlier
        // WRITE to it is still queued for the pool: a write there never
        // waits for a disk (docs/internals/server.md, "Writing on the
        // session's thread").
        if f.inline() == Inline::Always {
            let idle = {
                let q = f.writes.lock().unwrap_or_else(|e| e.into_inner());
                q.jobs.is_empty() && !q.running
            };
            if idle {
                let _ = slot.send(write_reply(&f.file, id, offset, &data).into());
                return Ok(());
            }
        }
        f.pending.fetch_add(1, Ordering::AcqRel);
        let start = {
            let mut q = f.writes.lock().unwrap_or_else(|e| e.into_inner());
            q.jobs.push_back(WriteJob {
                id,
                offset,
                data,
                slot,
                permit,
            });
            !std::mem::replace(&mut q.running, true)
        };
        if start {
            tokio::task::spawn_blocking(move || f.drain_writes());
        }
        Ok(())
    }

    /// `check-file-name` (`ferry sync -c`): the file is hashed here, so
    /// it is read from this disk, not through the link. A small range the
    /// page cache holds is hashed right away on this thread: a trip to the
    /// blocking pool and back cost more than hashing 20 kB, and while the
    /// session waited for it, it read no further request, so the files of
    /// a sync were hashed one at a time. Others go to the pool, up to
    /// [`HASHING`] at once, while the session reads on. Replies leave in
    /// request order as always.
    async fn check_file_name(
        &mut self,
        id: u32,
        path: &[u8],
        algorithms: &[u8],
        range: HashRange,
    ) -> Result<(), String> {
        let asked = choose_hash(algorithms)
            .ok_or_else(|| {
                (
                    StatusCode::OP_UNSUPPORTED,
                    format!(
                        "check-file-name: none of {:?} is known here ({} are)",
                        String::from_utf8_lossy(algorithms),
                        check_file_algos()
                    ),
                )
            })
            .and_then(|algo| {
                range.check()?;
                Ok(algo)
            });
        let algo = match asked {
            Ok(a) => a,
            Err(e) => return self.reply(id, Err(e)).await,
        };
        let reply = move |hash: Vec<u8>| Response::ExtendedReply {
            id,
            data: ferry_sftp::CheckFileReply {
                algorithm: algo.name().into(),
                hash: hash.into(),
            }
            .encode(),
        };
        if self.cfg.inline_metadata {
            // The common case in one confined path walk; anything else
            // (a file not cached, a symlink out, a missing file) takes
            // the way below, which says why.
            let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK;
            if let Some(f) = self.cfg.root.open_beneath(path, flags) {
                if let Ok(Some(h)) = hash_cached_file(&f, algo, range, &mut self.hash_buf) {
                    return self.send(reply(h)).await;
                }
            }
        }
        let r = match self.resolve(path, false) {
            Ok(r) => r,
            Err(e) => return self.reply(id, Err(e)).await,
        };
        if self.cfg.inline_metadata {
            match hash_cached(&r.real, algo, range, &mut self.hash_buf) {
                Ok(Some(h)) => return self.send(reply(h)).await,
                Ok(None) => {}
                Err(e) => return self.reply(id, Err(io_err(&r.virtual_path, e))).await,
            }
        }
        let permit = self
            .hashing
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| "session closed".to_string())?;
        let slot = self.slot().await?;
        tokio::spawn(async move {
            let task = tokio::task::spawn_blocking(move || {
                check_file(&r.real, algo, range).map_err(|e| io_err(&r.virtual_path, e))
            });
            let out = match task.await {
                Ok(Ok(h)) => reply(h),
                Ok(Err((code, msg))) => status(id, code, &msg),
                Err(e) => status(id, StatusCode::FAILURE, &format!("internal error: {e}")),
            };
            drop(permit);
            let _ = slot.send(encode(&out).into());
        });
        Ok(())
    }

    async fn other(&mut self, req: Request) -> Reply {
        match req {
            Request::Open {
                id,
                path,
                flags,
                attrs,
            } => self.open(id, &path, flags, attrs).await,
            Request::Close { id, handle } => self.close(id, &handle).await,
            Request::Opendir { id, path } => {
                if self.handles.open >= self.cfg.limits.max_handles {
                    return Err(too_many_handles());
                }
                let r = self.resolve(&path, false)?;
                let real = r.real.clone();
                let rd = self
                    .blocking(move || fs::read_dir(&r.real).map_err(|e| io_err(&r.virtual_path, e)))
                    .await?;
                let h = self.handles.insert(Handle::Dir(Arc::new(OpenDir {
                    path: real,
                    entries: Mutex::new(Some(rd)),
                })));
                Ok(Response::Handle { id, handle: h })
            }
            Request::Readdir { id, handle } => {
                let d = match self.handles.get(&handle) {
                    Some(Handle::Dir(d)) => d.clone(),
                    _ => return Err((StatusCode::FAILURE, "invalid directory handle".into())),
                };
                self.blocking(move || readdir_batch(id, &d)).await
            }
            Request::Stat { id, path } => {
                let r = self.resolve(&path, false)?;
                self.blocking(move || {
                    let m = fs::metadata(&r.real).map_err(|e| io_err(&r.virtual_path, e))?;
                    Ok(Response::Attrs {
                        id,
                        attrs: attrs_of(&m),
                    })
                })
                .await
            }
            Request::Lstat { id, path } => {
                let r = self.resolve(&path, true)?;
                self.blocking(move || {
                    let m =
                        fs::symlink_metadata(&r.real).map_err(|e| io_err(&r.virtual_path, e))?;
                    Ok(Response::Attrs {
                        id,
                        attrs: attrs_of(&m),
                    })
                })
                .await
            }
            Request::Fstat { id, handle } => {
                let f = self.file(&handle)?;
                Self::quiesce(&f).await;
                self.blocking(move || {
                    let m = f.file.metadata().map_err(|e| io_err("fstat", e))?;
                    Ok(Response::Attrs {
                        id,
                        attrs: attrs_of(&m),
                    })
                })
                .await
            }
            Request::Setstat { id, path, attrs } => {
                self.writable()?;
                let r = self.resolve(&path, false)?;
                self.blocking(move || {
                    apply_attrs(&r.real, None, &attrs).map_err(|e| io_err(&r.virtual_path, e))?;
                    Ok(ok(id))
                })
                .await
            }
            Request::Fsetstat { id, handle, attrs } => {
                self.writable()?;
                let f = self.file(&handle)?;
                Self::quiesce(&f).await;
                self.blocking(move || {
                    apply_attrs(std::path::Path::new(""), Some(&f.file), &attrs)
                        .map_err(|e| io_err("fsetstat", e))?;
                    Ok(ok(id))
                })
                .await
            }
            Request::Remove { id, path } => {
                self.writable()?;
                let r = self.resolve(&path, true)?;
                self.blocking(move || {
                    fs::remove_file(&r.real).map_err(|e| io_err(&r.virtual_path, e))?;
                    Ok(ok(id))
                })
                .await
            }
            Request::Mkdir { id, path, attrs } => {
                self.writable()?;
                let r = self.resolve(&path, true)?;
                self.blocking(move || {
                    use std::os::unix::fs::DirBuilderExt;
                    fs::DirBuilder::new()
                        .mode(attrs.permissions.unwrap_or(0o777) & 0o7777)
                        .create(&r.real)
                        .map_err(|e| io_err(&r.virtual_path, e))?;
                    Ok(ok(id))
                })
                .await
            }
            Request::Rmdir { id, path } => {
                self.writable()?;
                let r = self.resolve(&path, true)?;
                if r.real == self.cfg.root.path() {
                    return Err((
                        StatusCode::PERMISSION_DENIED,
                        "/: cannot remove the served directory".into(),
                    ));
                }
                self.blocking(move || {
                    fs::remove_dir(&r.real).map_err(|e| io_err(&r.virtual_path, e))?;
                    Ok(ok(id))
                })
                .await
            }
            Request::Realpath { id, path } => {
                // As a chrooted sftp-server answers: `..` at the root stays
                // there (`cd ..` in sftp). Opening such a path is refused.
                let parts = Root::normalize_clamped(&path).map_err(confine_err)?;
                let v = format!("/{}", parts.join("/"));
                Ok(name_reply(id, v))
            }
            Request::Rename { id, from, to } => self.rename(id, &from, &to, false).await,
            Request::Readlink { id, path } => {
                let r = self.resolve(&path, true)?;
                let root = self.cfg.root.clone();
                self.blocking(move || {
                    let target = fs::read_link(&r.real).map_err(|e| io_err(&r.virtual_path, e))?;
                    let shown = if target.is_absolute() {
                        root.virtual_of(&target)
                    } else {
                        let parent = r.real.parent().map(|p| p.join(&target));
                        parent
                            .filter(|p| root.contains(p))
                            .map(|_| target.to_string_lossy().into_owned())
                    };
                    match shown {
                        Some(s) => Ok(name_reply(id, s)),
                        None => Err((
                            StatusCode::PERMISSION_DENIED,
                            format!(
                                "{}: the link points outside the served directory",
                                r.virtual_path
                            ),
                        )),
                    }
                })
                .await
            }
            Request::Symlink { .. } => Err((
                StatusCode::OP_UNSUPPORTED,
                "ferry serve does not create symbolic links".into(),
            )),
            Request::Extended { id, request } => self.extended(id, request).await,
            Request::Init { .. } | Request::Read { .. } | Request::Write { .. } => {
                Err((StatusCode::BAD_MESSAGE, "unexpected request".into()))
            }
        }
    }

    async fn open(&mut self, id: u32, path: &[u8], flags: OpenFlags, attrs: FileAttrs) -> Reply {
        if self.handles.open >= self.cfg.limits.max_handles {
            return Err(too_many_handles());
        }
        let write = flags.contains(OpenFlags::WRITE) || flags.contains(OpenFlags::APPEND);
        if write || flags.contains(OpenFlags::CREATE) || flags.contains(OpenFlags::TRUNCATE) {
            self.writable()?;
        }
        // Follow a final symlink only for reading; a write goes to the
        // name itself (a link to elsewhere in the tree is still followed
        // by the kernel, but the check below refused links leading out).
        let r = self.resolve(path, false)?;
        let create = flags.contains(OpenFlags::CREATE);
        let trunc = flags.contains(OpenFlags::TRUNCATE);
        let excl = flags.contains(OpenFlags::EXCLUDE);
        let mode = attrs.permissions.unwrap_or(0o666) & 0o7777;
        let read = flags.contains(OpenFlags::READ);
        let append = flags.contains(OpenFlags::APPEND);
        let opened = self
            .blocking(move || {
                // A whole-file upload goes to a temporary name first, unless
                // the client already writes to a temporary name of its own
                // (ferry's `.NAME.ferry-part`, WinSCP's `NAME.filepart`): that
                // file must survive a disconnect so `--resume` can continue it.
                if write && create && trunc && !excl && !append && !is_client_temp(&r.real) {
                    if let Ok(m) = fs::metadata(&r.real) {
                        if m.is_dir() {
                            return Err((
                                StatusCode::FAILURE,
                                format!("{}: is a directory", r.virtual_path),
                            ));
                        }
                    }
                    let temp = temp_name_for(&r.real);
                    let file = OpenOptions::new()
                        .read(read)
                        .write(true)
                        .create_new(true)
                        .mode(mode)
                        .custom_flags(libc_o_nofollow())
                        .open(&temp)
                        .map_err(|e| io_err(&r.virtual_path, e))?;
                    return Ok((file, Some((temp, r.real))));
                }
                let mut o = OpenOptions::new();
                o.read(read || !write)
                    .write(write && !append)
                    .append(append);
                if create {
                    if excl {
                        o.create_new(true);
                    } else {
                        o.create(true);
                    }
                    o.mode(mode);
                }
                if trunc {
                    o.truncate(true);
                }
                let file = o.open(&r.real).map_err(|e| io_err(&r.virtual_path, e))?;
                if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
                    return Err((
                        StatusCode::FAILURE,
                        format!("{}: is a directory", r.virtual_path),
                    ));
                }
                Ok((file, None))
            })
            .await?;
        let (file, temp) = opened;
        let h = self.handles.insert(Handle::File(Arc::new(OpenFile {
            file,
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            temp: Mutex::new(temp),
            writes: Mutex::default(),
            inline: Mutex::new(None),
        })));
        Ok(Response::Handle { id, handle: h })
    }

    async fn close(&mut self, id: u32, handle: &[u8]) -> Reply {
        let Some(h) = self.handles.remove(handle) else {
            return Err((StatusCode::FAILURE, "invalid handle".into()));
        };
        match h {
            Handle::Dir(_) => Ok(ok(id)),
            Handle::File(f) => {
                Self::quiesce(&f).await;
                let temp = f.temp.lock().map(|mut t| t.take()).unwrap_or(None);
                match temp {
                    None => Ok(ok(id)),
                    Some((temp, final_path)) => {
                        let root = self.cfg.root.clone();
                        self.blocking(move || {
                            let shown = root
                                .virtual_of(&final_path)
                                .unwrap_or_else(|| final_path.display().to_string());
                            fs::rename(&temp, &final_path).map_err(|e| {
                                let _ = fs::remove_file(&temp);
                                io_err(&shown, e)
                            })?;
                            Ok(ok(id))
                        })
                        .await
                    }
                }
            }
        }
    }

    async fn rename(&mut self, id: u32, from: &[u8], to: &[u8], overwrite: bool) -> Reply {
        self.writable()?;
        let a = self.resolve(from, true)?;
        let b = self.resolve(to, true)?;
        if a.real == self.cfg.root.path() || b.real == self.cfg.root.path() {
            return Err((
                StatusCode::PERMISSION_DENIED,
                "/: cannot rename the served directory".into(),
            ));
        }
        self.blocking(move || {
            if !overwrite && fs::symlink_metadata(&b.real).is_ok() {
                return Err((
                    StatusCode::FAILURE,
                    format!("{}: already exists", b.virtual_path),
                ));
            }
            fs::rename(&a.real, &b.real).map_err(|e| io_err(&a.virtual_path, e))?;
            Ok(ok(id))
        })
        .await
    }

    async fn extended(&mut self, id: u32, request: Extended) -> Reply {
        match request {
            Extended::PosixRename { from, to } => self.rename(id, &from, &to, true).await,
            Extended::Limits => {
                let l = &self.cfg.limits;
                let limits = Limits {
                    max_packet_len: u64::from(l.max_io) + 64 * 1024,
                    max_read_len: u64::from(l.max_io),
                    max_write_len: u64::from(l.max_io),
                    max_open_handles: l.max_handles as u64,
                };
                Ok(Response::ExtendedReply {
                    id,
                    data: limits.encode(),
                })
            }
            Extended::Statvfs { path } => {
                let r = self.resolve(&path, false)?;
                self.blocking(move || {
                    statvfs_reply(id, &r.real).map_err(|e| io_err(&r.virtual_path, e))
                })
                .await
            }
            Extended::Fstatvfs { handle } => {
                let _ = self.file(&handle)?;
                let root = self.cfg.root.path().to_path_buf();
                self.blocking(move || statvfs_reply(id, &root).map_err(|e| io_err("fstatvfs", e)))
                    .await
            }
            Extended::Fsync { handle } => {
                let f = self.file(&handle)?;
                Self::quiesce(&f).await;
                self.blocking(move || {
                    f.file.sync_all().map_err(|e| io_err("fsync", e))?;
                    Ok(ok(id))
                })
                .await
            }
            Extended::Hardlink { from, to } => {
                self.writable()?;
                let a = self.resolve(&from, true)?;
                let b = self.resolve(&to, true)?;
                self.blocking(move || {
                    fs::hard_link(&a.real, &b.real).map_err(|e| io_err(&b.virtual_path, e))?;
                    Ok(ok(id))
                })
                .await
            }
            Extended::CopyData {
                read_handle,
                read_offset,
                read_len,
                write_handle,
                write_offset,
            } => {
                // A copy on the server (ferry cp between two paths here):
                // copy_file_range, so a file system that can share blocks
                // does, and no byte crosses the connection.
                self.writable()?;
                if read_handle == write_handle {
                    return Err((
                        StatusCode::FAILURE,
                        "copy-data: the read and write handles are the same".into(),
                    ));
                }
                let (r, w) = (self.file(&read_handle)?, self.file(&write_handle)?);
                Self::quiesce(&r).await;
                Self::quiesce(&w).await;
                self.blocking(move || {
                    copy_data(&r.file, read_offset, read_len, &w.file, write_offset)
                        .map_err(|e| io_err("copy-data", e))?;
                    Ok(ok(id))
                })
                .await
            }
            Extended::ExpandPath { path } => {
                let p: &[u8] = &path;
                let p = p.strip_prefix(b"~").unwrap_or(p);
                let parts = Root::normalize(p).map_err(confine_err)?;
                Ok(name_reply(id, format!("/{}", parts.join("/"))))
            }
            other => Err((
                StatusCode::OP_UNSUPPORTED,
                format!("{}: not supported", String::from_utf8_lossy(other.name())),
            )),
        }
    }

    /// The client went away: drop open files, remove unfinished uploads.
    async fn shutdown(&mut self) {
        let handles = self.handles.drain();
        let mut temps = Vec::new();
        for h in handles {
            if let Handle::File(f) = h {
                Self::quiesce(&f).await;
                if let Some((temp, _)) = f.temp.lock().ok().and_then(|mut t| t.take()) {
                    temps.push(temp);
                }
            }
        }
        if !temps.is_empty() {
            tracing::info!(peer = %self.peer, "removing {} unfinished upload(s)", temps.len());
            let _ = tokio::task::spawn_blocking(move || {
                for t in temps {
                    let _ = fs::remove_file(t);
                }
            })
            .await;
        }
    }
}

fn too_many_handles() -> (StatusCode, String) {
    (
        StatusCode::FAILURE,
        "too many open files in this session; close some first".into(),
    )
}

fn libc_o_nofollow() -> i32 {
    // O_NOFOLLOW on Linux; the temp name is ours and fresh, so this only
    // guards against a racing symlink.
    0o400000
}

fn name_reply(id: u32, path: String) -> Response {
    Response::Name {
        id,
        entries: vec![NameEntry {
            filename: Bytes::from(path.clone().into_bytes()),
            longname: Bytes::from(path.into_bytes()),
            attrs: FileAttrs::default(),
        }],
    }
}

fn readdir_batch(id: u32, d: &OpenDir) -> Reply {
    let mut guard = d
        .entries
        .lock()
        .map_err(|_| (StatusCode::FAILURE, "directory handle poisoned".to_string()))?;
    let Some(rd) = guard.as_mut() else {
        return Err((StatusCode::EOF, "end of directory".into()));
    };
    let mut entries = Vec::new();
    for e in rd.by_ref() {
        let Ok(e) = e else { continue };
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            // Names that are not UTF-8 are not served (see confine.rs).
            continue;
        };
        let Ok(m) = fs::symlink_metadata(d.path.join(name)) else {
            continue;
        };
        entries.push(NameEntry {
            filename: Bytes::copy_from_slice(name.as_bytes()),
            longname: Bytes::from(longname(name, &m).into_bytes()),
            attrs: attrs_of(&m),
        });
        if entries.len() >= READDIR_BATCH {
            break;
        }
    }
    if entries.is_empty() {
        *guard = None;
        return Err((StatusCode::EOF, "end of directory".into()));
    }
    Ok(Response::Name { id, entries })
}

fn statvfs_reply(id: u32, path: &std::path::Path) -> io::Result<Response> {
    let s = rustix::fs::statvfs(path).map_err(io::Error::from)?;
    let v = ferry_sftp::Statvfs {
        bsize: s.f_bsize,
        frsize: s.f_frsize,
        blocks: s.f_blocks,
        bfree: s.f_bfree,
        bavail: s.f_bavail,
        files: s.f_files,
        ffree: s.f_ffree,
        favail: s.f_favail,
        fsid: s.f_fsid,
        flag: s.f_flag.bits(),
        namemax: s.f_namemax,
    };
    Ok(Response::ExtendedReply {
        id,
        data: v.encode(),
    })
}

/// Write a WRITE's payload; the reply.
fn write_reply(file: &File, id: u32, offset: u64, data: &[u8]) -> Bytes {
    match file.write_all_at(data, offset) {
        Ok(()) => encode(&ok(id)),
        Err(e) => encode(&status(id, io_status(&e), &format!("write: {e}"))),
    }
}

/// The longest error reply [`fill_read`] writes, less the DATA header.
const MAX_READ_ERROR: usize = 512;

/// The STATUS reply for a failed READ.
fn read_error(id: u32, e: &io::Error) -> Bytes {
    let mut msg = format!("read: {e}");
    if msg.len() > MAX_READ_ERROR - 64 {
        let mut cut = MAX_READ_ERROR - 64;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
    }
    encode(&status(id, io_status(e), &msg))
}

/// Append the reply to a READ of `len` bytes at `offset` to `out` (the
/// SSH packet being built): DATA with what the file has there, EOF, or
/// the error, never more than `DATA_PREFIX_LEN + max(len, MAX_READ_ERROR)`
/// bytes. Only for files that cannot wait for a disk (tmpfs).
fn fill_read(out: &mut Vec<u8>, file: &File, id: u32, offset: u64, len: usize) {
    let start = out.len();
    let head = start + DATA_PREFIX_LEN;
    out.resize(head, 0);
    match readnow::append_all(file, out, head, offset, len) {
        Ok(()) => data_or_eof(out, start, id),
        Err(e) => {
            out.truncate(start);
            out.extend_from_slice(&read_error(id, &e));
        }
    }
}

/// `buf[start..]` holds room for the DATA header and then the file bytes
/// read: write the header, or, when no bytes came, put EOF there instead.
fn data_or_eof(buf: &mut Vec<u8>, start: usize, id: u32) {
    let got = buf.len().saturating_sub(start + DATA_PREFIX_LEN);
    if got == 0 {
        buf.truncate(start);
        buf.extend_from_slice(&encode(&status(id, StatusCode::EOF, "end of file")));
    } else if let Some(pkt) = buf.get_mut(start..) {
        Response::fill_data_prefix(pkt, id, got as u32);
    }
}

/// The DATA reply for file bytes in `buf[head..]` (at most `len` of them),
/// the SFTP header written into `buf[skew..head]`; EOF when there are none.
/// `permit`: the budget the reply holds until its last byte is sealed
/// into an SSH packet ([`Budgeted`]).
fn data_reply(
    mut buf: Vec<u8>,
    skew: usize,
    head: usize,
    len: usize,
    id: u32,
    permit: Option<Permit>,
) -> Bytes {
    buf.truncate(head + len);
    data_or_eof(&mut buf, skew, id);
    Bytes::from_owner(Budgeted {
        buf,
        _permit: permit,
    })
    .slice(skew..)
}

/// The hashes `check-file-name` answers with, best first: XXH3-128
/// (a fifth of BLAKE3's CPU per byte; what rsync's `--checksum` compares
/// with), BLAKE3, SHA-256 for interoperability.
const CHECK_FILE_OFFERED: [Algo; 3] = [Algo::Xxh128, Algo::Blake3, Algo::Sha256];

/// [`CHECK_FILE_OFFERED`] as VERSION lists it: names, comma-separated.
fn check_file_algos() -> String {
    CHECK_FILE_OFFERED.map(Algo::name).join(",")
}

/// The hash `check-file-name` answers with: the first of the client's
/// comma-separated list that this server offers.
fn choose_hash(list: &[u8]) -> Option<Algo> {
    Algo::first_in(list, &CHECK_FILE_OFFERED)
}

/// What `check-file-name` hashes: `length` bytes (0: to the end) from
/// `start`, one hash per `block_size` bytes (0: one hash of it all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HashRange {
    pub start: u64,
    pub length: u64,
    pub block_size: u32,
}

impl HashRange {
    /// The whole file, one hash (FTP's `HASH`).
    pub const WHOLE: HashRange = HashRange {
        start: 0,
        length: 0,
        block_size: 0,
    };

    fn check(&self) -> Result<(), (StatusCode, String)> {
        if self.block_size != 0 && self.block_size < 256 {
            return Err((
                StatusCode::FAILURE,
                "check-file-name: a block size must be 0 or at least 256".into(),
            ));
        }
        Ok(())
    }

    /// Where the range ends in a file of `size` bytes.
    fn end(&self, size: u64) -> u64 {
        if self.length == 0 {
            size
        } else {
            self.start.saturating_add(self.length).min(size)
        }
    }

    fn block(&self) -> u64 {
        if self.block_size == 0 {
            u64::MAX
        } else {
            u64::from(self.block_size)
        }
    }
}

fn shrank() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the file shrank while it was hashed",
    )
}

/// Hash `range` of `path`: one hash, or one per block. FTP's `HASH` uses
/// it too.
pub(crate) fn check_file(
    path: &std::path::Path,
    algo: Algo,
    range: HashRange,
) -> io::Result<Vec<u8>> {
    let f = File::open(path)?;
    let size = f.metadata()?.len();
    let end = range.end(size);
    let block = range.block();
    let mut out = Vec::new();
    // Sized to the range: a fresh big buffer per small file costs more
    // than hashing it. At most 256 KiB, so that what a read copied is
    // still in the L2 cache when it is hashed (XXH3 reads its buffer at
    // memory speed otherwise: 29% of a big tree's `sync -c` in perf).
    let mut buf = vec![0u8; end.saturating_sub(range.start).clamp(4096, 256 << 10) as usize];
    let mut at = range.start.min(end);
    loop {
        let stop = at.saturating_add(block).min(end);
        let mut h = Hasher::new(algo);
        while at < stop {
            let want = (stop - at).min(buf.len() as u64) as usize;
            let n = f.read_at(&mut buf[..want], at)?;
            if n == 0 {
                return Err(shrank());
            }
            h.update(&buf[..n]);
            at += n as u64;
        }
        out.extend_from_slice(&h.finish());
        if at >= end {
            return Ok(out);
        }
    }
}

/// [`check_file`] without waiting for a disk, on the session's thread:
/// `Ok(None)` unless `path` is a regular file whose range is at most
/// [`HASH_NOW_MAX`] bytes and all in the page cache (the caller then
/// hashes on the blocking pool). Opened non-blocking: a FIFO's open
/// would wait for a writer. `buf` is kept between calls.
fn hash_cached(
    path: &std::path::Path,
    algo: Algo,
    range: HashRange,
    buf: &mut Vec<u8>,
) -> io::Result<Option<Vec<u8>>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    hash_cached_file(&f, algo, range, buf)
}

/// [`hash_cached`] of a file already open.
fn hash_cached_file(
    f: &File,
    algo: Algo,
    range: HashRange,
    buf: &mut Vec<u8>,
) -> io::Result<Option<Vec<u8>>> {
    let m = f.metadata()?;
    let end = range.end(m.len());
    let start = range.start.min(end);
    if !m.is_file() || end - start > HASH_NOW_MAX {
        return Ok(None);
    }
    let len = (end - start) as usize;
    buf.clear();
    let mut how = Inline::for_file(f);
    if !readnow::append_now(f, buf, 0, start, len, &mut how)? {
        return Ok(None);
    }
    if buf.len() < len {
        return Err(shrank());
    }
    Ok(Some(hash_blocks(buf, algo, range.block())))
}

/// One hash of `data` per `block` bytes (one at least).
fn hash_blocks(data: &[u8], algo: Algo, block: u64) -> Vec<u8> {
    let block = usize::try_from(block).unwrap_or(usize::MAX).max(1);
    let mut out = Vec::new();
    let mut blocks = data.chunks(block).peekable();
    if blocks.peek().is_none() {
        return Hasher::new(algo).finish();
    }
    for b in blocks {
        let mut h = Hasher::new(algo);
        h.update(b);
        out.extend_from_slice(&h.finish());
    }
    out
}

/// `copy-data@openssh.com`'s semantics: `len` bytes (0: to the end of the
/// source) from `r` at `roff` to `w` at `woff`. copy_file_range first;
/// pread/pwrite where the kernel cannot (another file system).
fn copy_data(r: &File, mut roff: u64, len: u64, w: &File, mut woff: u64) -> io::Result<()> {
    let mut left = if len == 0 { u64::MAX } else { len };
    while left > 0 {
        let want = left.min(1 << 30) as usize;
        match rustix::fs::copy_file_range(r, Some(&mut roff), w, Some(&mut woff), want) {
            Ok(0) => return Ok(()),
            Ok(n) => left = left.saturating_sub(n as u64),
            Err(rustix::io::Errno::XDEV | rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                break
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = r.read_at(buf.get_mut(..want).unwrap_or_default(), roff)?;
        if n == 0 {
            return Ok(());
        }
        w.write_all_at(buf.get(..n).unwrap_or_default(), woff)?;
        roff += n as u64;
        woff += n as u64;
        left = left.saturating_sub(n as u64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The READ budget comes back when the reply's last byte is gone
    /// (sealed into an SSH packet by russh, which holds slices of it), not
    /// when the reply is queued (issue #24).
    #[test]
    fn read_budget_is_held_until_the_reply_is_sent() {
        let budget = Arc::new(Semaphore::new(8));
        let server = Arc::new(Semaphore::new(100));
        let take = |s: &Arc<Semaphore>| {
            s.clone()
                .try_acquire_many_owned(5)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let permit = Permit {
            _session: take(&budget),
            _server: take(&server),
        };
        let mut buf = vec![0u8; DATA_PREFIX_LEN];
        buf.extend_from_slice(&[7u8; 1000]);
        let reply = data_reply(buf, 0, DATA_PREFIX_LEN, 1000, 9, Some(permit));
        assert_eq!(reply.len(), DATA_PREFIX_LEN + 1000);
        assert_eq!(budget.available_permits(), 3, "queued: still counted");
        // What russh's data_bytes keeps: slices of the reply, one per packet.
        let (a, b) = (reply.slice(..500), reply.slice(500..));
        drop(reply);
        drop(a);
        assert_eq!(budget.available_permits(), 3, "a packet not sealed yet");
        assert_eq!(server.available_permits(), 95);
        drop(b);
        assert_eq!(budget.available_permits(), 8, "all sealed: returned");
        assert_eq!(server.available_permits(), 100);
    }

    /// What `fill_read` appended after `prefix`, decoded (the frame after
    /// its 4-byte length, which must match).
    fn filled(prefix: &[u8], out: &[u8]) -> Response {
        assert_eq!(out.get(..prefix.len()), Some(prefix));
        let frame = out.get(prefix.len()..).unwrap_or_default();
        let (len, body) = frame.split_at(4);
        assert_eq!(
            u32::from_be_bytes(len.try_into().unwrap_or_default()) as usize,
            body.len()
        );
        Response::decode(Bytes::copy_from_slice(body)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn fill_read_appends_data_short_data_eof_and_errors() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = d.path().join("f");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let file = File::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let prefix = b"packet header".to_vec();
        let cases: [(u64, usize, Option<std::ops::Range<usize>>); 3] = [
            (100, 4096, Some(100..4196)),
            (9_000, 4096, Some(9_000..10_000)),
            (10_000, 4096, None),
        ];
        for (offset, len, want) in cases {
            let mut out = prefix.clone();
            fill_read(&mut out, &file, 9, offset, len);
            assert!(out.len() <= prefix.len() + DATA_PREFIX_LEN + len.max(MAX_READ_ERROR));
            match (filled(&prefix, &out), want) {
                (Response::Data { id: 9, data }, Some(r)) => assert_eq!(&data[..], &bytes[r]),
                (Response::Status { id: 9, code, .. }, None) => assert_eq!(code, StatusCode::EOF),
                (other, want) => panic!("{other:?} for {want:?}"),
            }
        }
        // A file opened for writing only cannot be read: the error, short.
        let wo = OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = prefix.clone();
        fill_read(&mut out, &wo, 9, 0, 1);
        assert!(out.len() <= prefix.len() + DATA_PREFIX_LEN + MAX_READ_ERROR);
        match filled(&prefix, &out) {
            Response::Status { id: 9, code, .. } => assert_eq!(code, StatusCode::FAILURE),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(ferry_sftp::civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(ferry_sftp::civil(1_700_000_000), (2023, 11, 14, 22, 13, 20));
    }

    #[test]
    fn handles_are_generation_checked() {
        let mut h = Handles::new();
        let dir = || {
            Handle::Dir(Arc::new(OpenDir {
                path: PathBuf::new(),
                entries: Mutex::new(None),
            }))
        };
        let a = h.insert(dir());
        assert!(h.get(&a).is_some());
        assert!(h.remove(&a).is_some());
        let b = h.insert(dir());
        // Same slot, new generation: the old handle is dead.
        assert!(h.get(&a).is_none());
        assert!(h.get(&b).is_some());
        assert!(h.get(b"short").is_none());
        assert!(h.get(b"123456789").is_none());
        assert_eq!(h.open, 1);
    }

    /// VERSION lists what `check-file-name` answers; a client's list is
    /// read for the first name offered, whatever comes before it.
    #[test]
    fn check_file_name_offers_what_it_lists() {
        assert_eq!(check_file_algos(), "xxh128,blake3,sha256");
        assert_eq!(choose_hash(b"crc32,md5,sha256"), Some(Algo::Sha256));
        assert_eq!(choose_hash(b"blake3,xxh128"), Some(Algo::Blake3));
        assert_eq!(choose_hash(b"crc32"), None);
    }

    /// `check-file-name` on the session's thread gives what the blocking
    /// pool's hashing gives, for whole files, ranges and blocks, and
    /// leaves to the pool what it should not do itself.
    #[test]
    fn cached_hashes_match_the_pools_and_leave_the_rest_to_it() {
        fn must<T>(r: io::Result<T>) -> T {
            r.unwrap_or_else(|e| panic!("{e}"))
        }
        let d = must(tempfile::tempdir());
        let path = d.path().join("f");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 13 + i / 256) as u8).collect();
        must(fs::write(&path, &bytes));
        let empty = d.path().join("empty");
        must(fs::write(&empty, b""));
        let range = |start, length, block_size| HashRange {
            start,
            length,
            block_size,
        };
        let mut buf = Vec::new();
        for algo in [Algo::Xxh128, Algo::Blake3, Algo::Sha256] {
            for r in [
                HashRange::WHOLE,
                range(1000, 0, 0),
                range(5, 30_000, 0),
                range(0, 0, 4096),
                range(7, 50_000, 1000),
                range(99_999, 0, 256),
                range(100_000, 0, 0),
                range(200_000, 10, 0),
            ] {
                let pool = must(check_file(&path, algo, r));
                // Right after the write the page cache holds it all.
                let here = must(hash_cached(&path, algo, r, &mut buf));
                assert_eq!(here.as_ref(), Some(&pool), "{algo:?} {r:?}");
            }
            let pool = must(check_file(&empty, algo, HashRange::WHOLE));
            let here = must(hash_cached(&empty, algo, HashRange::WHOLE, &mut buf));
            assert_eq!(here, Some(pool));
        }
        let mut one = Hasher::new(Algo::Blake3);
        one.update(&bytes[7..1007]);
        let blocks = must(check_file(&path, Algo::Blake3, range(7, 50_000, 1000)));
        assert_eq!(blocks.len(), 50 * 32);
        assert_eq!(&blocks[..32], &one.finish()[..]);

        // Larger than HASH_NOW_MAX: the pool's.
        let big = d.path().join("big");
        must(fs::write(&big, vec![1u8; HASH_NOW_MAX as usize + 1]));
        let r = must(hash_cached(&big, Algo::Blake3, HashRange::WHOLE, &mut buf));
        assert_eq!(r, None);
        let r = must(hash_cached(&big, Algo::Blake3, range(1, 0, 0), &mut buf));
        assert!(r.is_some(), "a small enough range of it is hashed here");
        // A FIFO is not opened to wait for a writer, and not hashed here.
        let fifo = d.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let r = must(hash_cached(&fifo, Algo::Blake3, HashRange::WHOLE, &mut buf));
        assert_eq!(r, None);
        assert!(hash_cached(
            &d.path().join("none"),
            Algo::Blake3,
            HashRange::WHOLE,
            &mut buf
        )
        .is_err());
    }
}
