//! Copies over SFTP: the connection pool, the plan, and the pipelined
//! range transfers.
//!
//! Shape of a run:
//! 1. one connection is opened first (so a host-key question or a password
//!    prompt happens once), then the others in parallel, each on its own
//!    thread with a current-thread runtime: on two cores that was twice as
//!    fast as sharing a multi-thread runtime (docs/internals/baseline.md);
//! 2. the coordinator walks the sources, creates directories, prepares a
//!    temporary file per destination (`.NAME.ferry-part`, resumed when asked),
//!    and queues jobs: whole small files, or ranges of a large file;
//! 3. each worker pulls a job only when it has a free slot, so jobs spread
//!    over connections by how fast each one is going;
//! 4. a file is renamed to its final name when its last range is done.
use std::collections::VecDeque;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use ferry_sftp::{FileAttrs, OpenFlags};
use ferry_ssh::{Connector, Handle, SftpClient};
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::error::TransferError;
use crate::journal;
use crate::location::{RemotePath, RemoteSpec};
use crate::window::Window;
use crate::{CopyOptions, Stats, Summary, Tuning};

/// Fallback request size when the server does not state its limits: the
/// size every SFTP server must accept (draft-02 suggests 32 KiB).
const FALLBACK_CHUNK: u32 = 32 * 1024;
/// The request size we ask for by default (OpenSSH serves up to 255 KiB).
const DEFAULT_CHUNK: u32 = 1024 * 1024;

/// An SFTP DATA reply's bytes before its data: length, type, id, data
/// length.
const DATA_REPLY_HEADER: u32 = 4 + 1 + 4 + 4;
/// A WRITE request's bytes besides its data, for handles of up to 16 bytes
/// (OpenSSH's are 4, ferry serve's 8): length, type, id, handle, offset,
/// data length.
const WRITE_HEADER: u32 = 4 + 1 + 4 + (4 + 16) + 8 + 4;
/// Packets at least this large are worth fitting a request into.
const FIT_PACKET_MIN: u32 = 128 * 1024;

/// Shrink a READ or WRITE of `size` bytes so that the message carrying it
/// fits one SSH channel packet of `packet` bytes, when packets are large
/// enough for that to pay. Then each message arrives as a packet of its
/// own and is parsed where it lies (`Framer::push_bytes`) instead of
/// being copied together from two pieces. Measured, the gain is within
/// the noise (docs/internals/sftp.md, "Packet fitting"): it costs nothing,
/// so it stays. With small packets (OpenSSH's sshd accepts 32 KiB) the
/// size is left alone: many more requests would cost more than the copy.
fn fit_packet(size: u32, packet: u32, header: u32) -> u32 {
    if packet >= FIT_PACKET_MIN {
        size.min(packet - header)
    } else {
        size
    }
}
/// READ and WRITE sizes for a session: what `--chunk` wants (1 MiB by
/// default), capped by the server's limits@openssh.com, 32 KiB when it
/// states none, fitted to one channel packet.
pub(crate) fn chunk_sizes(info: &ferry_ssh::SftpInfo, opts: &CopyOptions) -> (u32, u32) {
    let want = opts.chunk.unwrap_or(DEFAULT_CHUNK).max(512);
    let capped = |max: Option<u32>| match max {
        Some(m) => want.min(m),
        None if opts.chunk.is_some() => want,
        None => FALLBACK_CHUNK,
    };
    (
        fit_packet(capped(info.max_read()), info.packet_in, DATA_REPLY_HEADER),
        fit_packet(capped(info.max_write()), info.packet_out, WRITE_HEADER),
    )
}

/// Bytes of the partial file compared with the source before resuming.
const RESUME_CHECK: u64 = 64 * 1024;
/// Bound on bytes in flight per file, whatever the depth says.
const MAX_INFLIGHT_BYTES: u64 = 64 * 1024 * 1024;

/// One destination file and where its bytes come from.
#[derive(Debug, Clone)]
struct FileTask {
    /// Remote path (download) or local path as bytes (upload).
    src: Vec<u8>,
    /// Final and temporary destination (local path bytes or remote path).
    dst: Vec<u8>,
    tmp: Vec<u8>,
    size: u64,
    /// Permission bits (no file type) and (atime, mtime) of the source.
    mode: u32,
    times: Option<(u32, u32)>,
    /// The ranges to copy, one job each (all of the file, unless resuming).
    jobs: Vec<(u64, u64)>,
    /// Jobs this file was split into (`jobs.len()`).
    parts: usize,
    /// The temporary file is new: nothing from an earlier run is in it.
    fresh: bool,
    /// Where progress is recorded if the copy fails (see journal.rs).
    journal: PathBuf,
    /// Source mtime, which voids a journal when the source changed.
    src_mtime: u32,
}

impl FileTask {
    /// Bytes this run moves.
    fn todo(&self) -> u64 {
        self.jobs.iter().map(|(a, b)| b - a).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Download,
    Upload,
}

#[derive(Debug)]
struct Job {
    file: usize,
    offset: u64,
    len: u64,
    /// The only job of its file: the worker finalizes it itself.
    whole: bool,
}

struct JobResult {
    file: usize,
    result: Result<(), TransferError>,
    /// Ranges that reached the destination, even if the job failed.
    done: Vec<(u64, u64)>,
}

/// What every worker shares.
struct Ctx {
    dir: Direction,
    files: Vec<FileTask>,
    read_chunk: u32,
    write_chunk: u32,
    max_depth: usize,
    preserve: bool,
    host: String,
    stats: Arc<Stats>,
    /// Bytes requested and not yet answered, over every connection, in KiB.
    budget: Arc<Semaphore>,
}

impl Ctx {
    fn new(
        dir: Direction,
        files: Vec<FileTask>,
        (read_chunk, write_chunk): (u32, u32),
        opts: &CopyOptions,
        host: &str,
        stats: &Arc<Stats>,
    ) -> Arc<Ctx> {
        let inflight = match dir {
            Direction::Download => Tuning::DOWNLOAD_INFLIGHT,
            Direction::Upload => Tuning::UPLOAD_INFLIGHT,
        };
        Arc::new(Ctx {
            dir,
            files,
            read_chunk,
            write_chunk,
            max_depth: opts.max_depth,
            preserve: opts.preserve,
            host: host.to_string(),
            stats: stats.clone(),
            budget: Arc::new(Semaphore::new(budget_kib(opts, inflight))),
        })
    }
}

/// Take room for `bytes` in flight from the copy-wide budget. With `must`
/// (nothing of this job is in flight) wait for room; otherwise give up at
/// once so the job goes back to collecting replies.
async fn reserve(budget: &Arc<Semaphore>, bytes: u32, must: bool) -> Option<OwnedSemaphorePermit> {
    let k = bytes.div_ceil(1024).max(1);
    match budget.clone().try_acquire_many_owned(k) {
        Ok(p) => Some(p),
        Err(_) if must => budget.clone().acquire_many_owned(k).await.ok(),
        Err(_) => None,
    }
}

/// Joins the connection threads when the copy is over.
struct PoolHandle {
    hold: Option<oneshot::Sender<()>>,
    threads: Threads,
}

/// Connection threads, shared so that ones started late are joined too.
type Threads = Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>>;

impl PoolHandle {
    /// Let the first connection go and wait for every connection thread.
    fn finish(&mut self) {
        drop(self.hold.take());
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        // Join what ends within a grace period; a thread stuck in a
        // handshake with a dead server is left to its connect timeout.
        let deadline = Instant::now() + Duration::from_secs(5);
        for t in threads {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for PoolHandle {
    fn drop(&mut self) {
        // On an early error return: still release the first connection, so
        // its thread ends instead of waiting forever.
        drop(self.hold.take());
    }
}

struct Pool {
    /// The first connection, used by the coordinator too.
    control: Option<SftpClient>,
    job_tx: async_channel::Sender<Job>,
    job_rx: async_channel::Receiver<Job>,
    results_rx: mpsc::UnboundedReceiver<JobResult>,
    results_tx: mpsc::UnboundedSender<JobResult>,
    /// Each worker waits for the shared context before taking jobs.
    ctx_txs: Vec<oneshot::Sender<Arc<Ctx>>>,
    threads: Threads,
    /// Connections asked for.
    streams: usize,
    /// The user chose `--streams`: open them all, whatever the plan.
    explicit_streams: bool,
    /// Readiness of the connections after the first.
    pending: Vec<oneshot::Receiver<Result<SftpClient, TransferError>>>,
    /// Dropped in [`Pool::finish`] to let the first connection close.
    hold: Option<oneshot::Sender<()>>,
    connector: Arc<Connector>,
    /// `-P`: files (or ranges) in flight over all connections.
    parallel: usize,
    /// The first connection's job slots, given out once the number of
    /// connections is known.
    first_slots: Arc<Semaphore>,
    max_in_flight: usize,
}

/// Longest wait for an extra connection to be up and authenticated.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(120);

/// Ranges of split files one connection works on at once.
const RANGES_PER_CONNECTION: usize = 2;

/// Bytes of work that justify one more connection.
const EXTRA_STREAM_BYTES: u64 = 64 * 1024 * 1024;
/// A server window at least this large makes one connection enough.
pub(crate) const ONE_STREAM_WINDOW: u32 = 16 * 1024 * 1024;

#[allow(clippy::too_many_arguments)]
fn worker(
    connector: Arc<Connector>,
    sem: Arc<Semaphore>,
    max_in_flight: usize,
    ready: oneshot::Sender<Result<SftpClient, TransferError>>,
    ctx_rx: oneshot::Receiver<Arc<Ctx>>,
    jobs: async_channel::Receiver<Job>,
    results: mpsc::UnboundedSender<JobResult>,
    hold: Option<oneshot::Receiver<()>>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(TransferError::Local(format!(
                "cannot start a runtime: {e}"
            ))));
            return;
        }
    };
    rt.block_on(async move {
        // An extra connection to a server that accepts but never answers
        // must not hold a thread forever. (The first one may be waiting for
        // a person to type a password: no limit there.)
        let limit = if hold.is_some() {
            Duration::MAX
        } else {
            HANDSHAKE_TIMEOUT
        };
        let conn = match tokio::time::timeout(limit, connector.connect()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                let _ = ready.send(Err(e.into()));
                return;
            }
            Err(_) => {
                let _ = ready.send(Err(TransferError::Network(format!(
                    "{}: no SSH handshake within {} s",
                    connector.label(),
                    HANDSHAKE_TIMEOUT.as_secs()
                ))));
                return;
            }
        };
        let sftp = match conn.sftp(max_in_flight).await {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(e.into()));
                return;
            }
        };
        let _ = ready.send(Ok(sftp.clone()));
        let Ok(ctx) = ctx_rx.await else {
            conn.close().await;
            return;
        };
        let mut tasks = tokio::task::JoinSet::new();
        // Ranges of a split file each keep a deep pipeline of their own:
        // more than two on one connection gain nothing, and would leave
        // nothing for the connections still shaking hands.
        let ranges = Arc::new(Semaphore::new(RANGES_PER_CONNECTION));
        loop {
            let Ok(permit) = sem.clone().acquire_owned().await else {
                break;
            };
            // Room for a range before taking a job: taken first, a range
            // waited here for one of ours to end while a connection that
            // joined later found the queue empty (1 GiB in four ranges over
            // two connections: three went to the first one).
            let Ok(room) = ranges.clone().acquire_owned().await else {
                break;
            };
            let Ok(job) = jobs.recv().await else {
                break;
            };
            let range_permit = (!job.whole).then_some(room);
            let (sftp, ctx, results) = (sftp.clone(), ctx.clone(), results.clone());
            tasks.spawn(async move {
                let file = job.file;
                let mut done = Vec::new();
                let result = run_job(&sftp, &ctx, job, &mut done).await;
                let _ = results.send(JobResult { file, result, done });
                drop(permit);
                drop(range_permit);
            });
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        // The coordinator keeps using the first connection (finalizing
        // split files, directory times) after the jobs are done.
        // Drop our ends first: the coordinator waits for every results
        // sender to go before it returns and releases `hold`.
        drop(results);
        drop(jobs);
        if let Some(hold) = hold {
            let _ = hold.await;
        }
        conn.close().await;
    });
}

impl Pool {
    /// Connect `streams` times to `remote`. The first connection is made
    /// alone, so prompts and host-key questions come once.
    async fn start(
        remote: &RemoteSpec,
        opts: &CopyOptions,
        default_streams: usize,
    ) -> Result<Pool, TransferError> {
        let mut copts = opts.connect.clone();
        if remote.user.is_some() {
            copts.user = remote.user.clone();
        }
        if remote.port.is_some() {
            copts.port = remote.port;
        }
        let connector = Arc::new(Connector::new(&remote.host, copts)?);
        let streams = opts.streams.unwrap_or(default_streams).max(1);
        let (job_tx, job_rx) = async_channel::bounded::<Job>(1024);
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        // Requests in flight per connection: every slot at full depth.
        let max_in_flight =
            (opts.files_in_flight().max(1) * opts.max_depth.max(4)).clamp(64, 16384);
        let (hold_tx, hold_rx) = oneshot::channel();
        let mut pool = Pool {
            control: None,
            job_tx,
            job_rx,
            results_rx,
            results_tx,
            ctx_txs: Vec::new(),
            threads: Threads::default(),
            streams,
            explicit_streams: opts.streams.is_some(),
            pending: Vec::new(),
            hold: Some(hold_tx),
            connector,
            parallel: opts.files_in_flight().max(1),
            first_slots: Arc::new(Semaphore::new(0)),
            max_in_flight,
        };
        let first = pool.first_slots.clone();
        let ready = pool.spawn_worker(Some(hold_rx), first)?;
        let first = ready
            .await
            .map_err(|_| TransferError::Network("connection thread died".into()))??;
        // The extra upload connections are there for the server's windows:
        // OpenSSH's sshd gives each channel 2 MiB. A server whose window
        // alone covers the link (ferry serve: 32 MiB) gains nothing from
        // them, and its disk threads then contend for the file's lock
        // (docs/internals/sftp.md, "Streams against ferry serve").
        if !pool.explicit_streams && first.info().window_out >= ONE_STREAM_WINDOW {
            pool.streams = 1;
        }
        pool.control = Some(first);
        Ok(pool)
    }

    /// Start one more connection thread; it takes jobs once it is up.
    fn spawn_worker(
        &mut self,
        hold: Option<oneshot::Receiver<()>>,
        sem: Arc<Semaphore>,
    ) -> Result<oneshot::Receiver<Result<SftpClient, TransferError>>, TransferError> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (ctx_tx, ctx_rx) = oneshot::channel();
        let (c, jr, rt) = (
            self.connector.clone(),
            self.job_rx.clone(),
            self.results_tx.clone(),
        );
        let max_in_flight = self.max_in_flight;
        let t = std::thread::Builder::new()
            .name(format!("ferry-conn-{}", self.ctx_txs.len()))
            .spawn(move || worker(c, sem, max_in_flight, ready_tx, ctx_rx, jr, rt, hold))
            .map_err(|e| TransferError::Local(format!("cannot start a thread: {e}")))?;
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t);
        self.ctx_txs.push(ctx_tx);
        Ok(ready_rx)
    }

    /// Open the other connections, if the plan has work enough for them:
    /// each costs the server a process and a key exchange, which a 100 MB
    /// copy over four connections paid back less than it cost.
    fn grow(&mut self, todo_bytes: u64) -> Result<(), TransferError> {
        let worth = if self.explicit_streams {
            usize::MAX
        } else {
            (todo_bytes / EXTRA_STREAM_BYTES) as usize
        };
        let extra = (self.streams - 1).min(worth);
        // -P is shared out over the connections that will exist.
        let per = self.parallel.div_ceil(extra + 1).max(1);
        self.first_slots.add_permits(per);
        for _ in 0..extra {
            let ready = self.spawn_worker(None, Arc::new(Semaphore::new(per)))?;
            self.pending.push(ready);
        }
        Ok(())
    }

    fn control(&self) -> Result<SftpClient, TransferError> {
        self.control
            .clone()
            .ok_or_else(|| TransferError::Network("no connection".into()))
    }

    fn chunks(&self, opts: &CopyOptions) -> (u32, u32) {
        match &self.control {
            Some(c) => chunk_sizes(&c.info(), opts),
            None => (FALLBACK_CHUNK, FALLBACK_CHUNK),
        }
    }

    /// What must outlive [`Pool::run`]: the threads and the first
    /// connection, which the coordinator still uses afterwards.
    fn handle(&mut self) -> PoolHandle {
        PoolHandle {
            hold: self.hold.take(),
            threads: self.threads.clone(),
        }
    }

    /// [`Pool::run`], and on failure release the connections before the
    /// error goes up.
    async fn execute(self, ctx: Arc<Ctx>, handle: &mut PoolHandle) -> Result<usize, TransferError> {
        let result = self.run(ctx).await;
        if result.is_err() {
            handle.finish();
        }
        result
    }

    /// Hand the plan to the workers, queue the jobs, finalize split files
    /// as their last range completes, and wait.
    async fn run(mut self, ctx: Arc<Ctx>) -> Result<usize, TransferError> {
        let control = self.control()?;
        self.grow(ctx.files.iter().map(FileTask::todo).sum())?;
        for tx in self.ctx_txs.drain(..) {
            let _ = tx.send(ctx.clone());
        }
        drop(self.job_rx);
        drop(self.results_tx);
        // Largest first: a big file started last would finish alone.
        let mut order: Vec<usize> = (0..ctx.files.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ctx.files.get(i).map(|f| f.size).unwrap_or(0)));
        let mut pending: Vec<usize> = ctx.files.iter().map(|f| f.parts).collect();
        let mut failed = vec![false; ctx.files.len()];
        let mut arrived: Vec<Vec<(u64, u64)>> = vec![Vec::new(); ctx.files.len()];
        let mut jobs = VecDeque::new();
        for i in order {
            let Some(f) = ctx.files.get(i) else { continue };
            for &(a, b) in &f.jobs {
                jobs.push_back(Job {
                    file: i,
                    offset: a,
                    len: b - a,
                    whole: f.parts == 1,
                });
            }
        }
        let total_jobs = jobs.len();
        let job_tx = self.job_tx.clone();
        drop(self.job_tx);
        let feeder = async move {
            while let Some(j) = jobs.pop_front() {
                if job_tx.send(j).await.is_err() {
                    break;
                }
            }
            drop(job_tx);
        };
        let mut first_err: Option<TransferError> = None;
        let mut errors = 0usize;
        let mut results_rx = self.results_rx;
        let collector = async {
            // Stop at the last result, not when every worker has gone: a
            // connection still shaking hands must not hold up the copy.
            let mut received = 0;
            while received < total_jobs {
                let Some(r) = results_rx.recv().await else {
                    break;
                };
                received += 1;
                let (Some(left), Some(f)) = (pending.get_mut(r.file), ctx.files.get(r.file)) else {
                    continue;
                };
                *left = left.saturating_sub(1);
                if let Some(a) = arrived.get_mut(r.file) {
                    a.extend(r.done);
                }
                if let Err(e) = r.result {
                    // The ranges of a split file fail together (a full
                    // disk, a lost connection): one error per file.
                    let again = failed.get(r.file).copied().unwrap_or(false);
                    if let Some(fl) = failed.get_mut(r.file) {
                        *fl = true;
                    }
                    if !again {
                        errors += 1;
                        report(&mut first_err, e);
                    }
                }
                if *left > 0 {
                    continue;
                }
                let file_failed = failed.get(r.file).copied().unwrap_or(true);
                if !file_failed && f.parts > 1 {
                    if let Err(e) = finalize(&control, &ctx, f).await {
                        errors += 1;
                        report(&mut first_err, e);
                        continue;
                    }
                    ctx.stats.files_done.fetch_add(1, Ordering::Relaxed);
                }
                if file_failed {
                    save_journal(f, arrived.get_mut(r.file).map(std::mem::take));
                } else {
                    journal::remove(&f.journal);
                    if let Some(a) = arrived.get_mut(r.file) {
                        *a = Vec::new();
                    }
                }
            }
        };
        tokio::join!(feeder, collector);
        // Workers whose connection died may never report their jobs: the
        // files they were on still get a journal of what arrived, or
        // --resume would have to trust the part file's size.
        for (i, f) in ctx.files.iter().enumerate() {
            if pending.get(i).copied().unwrap_or(0) > 0 {
                save_journal(f, arrived.get_mut(i).map(std::mem::take));
            }
        }
        // How many connections really came up (for the summary).
        let mut streams_up = 1;
        for rx in self.pending {
            // Connections not up by now did no work: don't wait for them.
            match tokio::time::timeout(Duration::from_millis(100), rx)
                .await
                .unwrap_or(Ok(Err(TransferError::Network(
                    "still connecting when the copy ended".into(),
                )))) {
                Ok(Ok(_)) => streams_up += 1,
                // A server that caps sessions (MaxStartups) still lets us
                // work with fewer connections.
                Ok(Err(e)) => tracing::warn!("an extra connection failed; worked with fewer: {e}"),
                Err(_) => {}
            }
        }
        match first_err {
            None => Ok(streams_up),
            Some(e) if errors > 1 => Err(with_more(e, errors - 1)),
            Some(e) => Err(e),
        }
    }
}

/// Keep the first error to return (the command line prints it); print
/// the others as they come.
pub(crate) fn report(first: &mut Option<TransferError>, e: TransferError) {
    let Some(f) = first.as_ref() else {
        *first = Some(e);
        return;
    };
    // A lost connection fails every transfer in flight on it: say it once.
    if !matches!(
        (&e, f),
        (TransferError::Network(_), TransferError::Network(_))
    ) {
        tracing::warn!("{e}");
    }
}

pub(crate) fn with_more(e: TransferError, more: usize) -> TransferError {
    let suffix = format!(
        " (and {more} more error{})",
        if more == 1 { "" } else { "s" }
    );
    match e {
        TransferError::Usage(m) => TransferError::Usage(m + &suffix),
        TransferError::Auth(m) => TransferError::Auth(m + &suffix),
        TransferError::Remote(m) => TransferError::Remote(m + &suffix),
        TransferError::Local(m) => TransferError::Local(m + &suffix),
        TransferError::Network(m) => TransferError::Network(m + &suffix),
        TransferError::Cancelled(m) => TransferError::Cancelled(m),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, TransferError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TransferError::Local(format!("cannot start a runtime: {e}")))
}

fn lossy(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

pub(crate) fn os(p: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsString::from_vec(p.to_vec()))
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut v = dir.to_vec();
    if !v.ends_with(b"/") {
        v.push(b'/');
    }
    v.extend_from_slice(name);
    v
}

fn basename(p: &[u8]) -> &[u8] {
    let trimmed = {
        let mut end = p.len();
        while end > 1 && p.get(end - 1) == Some(&b'/') {
            end -= 1;
        }
        p.get(..end).unwrap_or(p)
    };
    match trimmed.iter().rposition(|&c| c == b'/') {
        Some(i) => trimmed.get(i + 1..).unwrap_or(trimmed),
        None => trimmed,
    }
}

fn parent(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|&c| c == b'/') {
        Some(0) => b"/",
        Some(i) => p.get(..i).unwrap_or(b"."),
        None => b".",
    }
}

/// `.NAME.ferry-part` next to NAME: same directory, so the final rename is
/// atomic and never crosses file systems.
pub(crate) fn tmp_name(dst: &[u8]) -> Vec<u8> {
    side_name(dst, b".ferry-part")
}

/// `.NAME<suffix>` in NAME's directory.
pub(crate) fn side_name(dst: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut name = b".".to_vec();
    name.extend_from_slice(basename(dst));
    name.extend_from_slice(suffix);
    join(parent(dst), &name)
}

async fn resolve_remote(
    sftp: &SftpClient,
    host: &str,
    p: &RemotePath,
    home: &mut Option<Vec<u8>>,
) -> Result<Vec<u8>, TransferError> {
    match p {
        RemotePath::Absolute(a) => Ok(a.clone()),
        RemotePath::HomeRelative(rel) => {
            if home.is_none() {
                let h = sftp
                    .realpath(b".")
                    .await
                    .map_err(|e| TransferError::sftp(host, b"~", e))?;
                *home = Some(h.to_vec());
            }
            let h = home.clone().unwrap_or_default();
            Ok(if rel.is_empty() { h } else { join(&h, rel) })
        }
    }
}

fn mtime_of(meta: &std::fs::Metadata) -> Option<(u32, u32)> {
    Some((
        meta.atime().clamp(0, u32::MAX as i64) as u32,
        meta.mtime().clamp(0, u32::MAX as i64) as u32,
    ))
}

/// Add the plan to the progress totals; returns (bytes, files) to move.
fn count_plan(tasks: &[FileTask], stats: &Stats) -> (u64, u64) {
    let total: u64 = tasks.iter().map(FileTask::todo).sum();
    stats.bytes_total.fetch_add(total, Ordering::Relaxed);
    stats
        .files_total
        .fetch_add(tasks.len() as u64, Ordering::Relaxed);
    (total, tasks.len() as u64)
}

fn budget_kib(opts: &CopyOptions, default: u64) -> usize {
    (opts.max_inflight.unwrap_or(default) / 1024).clamp(64, Semaphore::MAX_PERMITS as u64) as usize
}

/// Cut the ranges still to copy into jobs. A big file is split so that
/// every connection gets a share (up to two each), in pieces of at least
/// `split_min`; an empty file or a finished one still gets one (empty) job,
/// which creates or finalizes it.
fn plan_jobs(
    todo: Vec<(u64, u64)>,
    size: u64,
    opts: &CopyOptions,
    streams: usize,
) -> Vec<(u64, u64)> {
    if todo.is_empty() {
        return vec![(size, size)];
    }
    let total: u64 = todo.iter().map(|(a, b)| b - a).sum();
    let min = opts.split_min.max(1);
    if streams <= 1 || total < 2 * min {
        return todo;
    }
    let pieces = (total / min).clamp(1, streams as u64 * 2);
    let piece = total.div_ceil(pieces).max(min);
    let mut jobs = Vec::new();
    for (mut a, b) in todo {
        while a < b {
            let e = (a + piece).min(b);
            jobs.push((a, e));
            a = e;
        }
    }
    jobs
}

// ---------------------------------------------------------------- download

pub(crate) fn download(
    remote: &RemoteSpec,
    sources: &[RemotePath],
    dest: &Path,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    let dest = &crate::part::local_dest(dest)?;
    runtime()?.block_on(async {
        let mut pool = Pool::start(remote, opts, Tuning::DOWNLOAD_STREAMS).await?;
        let mut handle = pool.handle();
        let sftp = pool.control()?;
        let host = remote.host.clone();
        let (read_chunk, write_chunk) = pool.chunks(opts);
        let mut home = None;
        let backoff = opts
            .max_inflight
            .unwrap_or(Tuning::DOWNLOAD_INFLIGHT)
            .max(MAX_INFLIGHT_BYTES);

        let dest_is_dir = dest.is_dir();
        let dest_wants_dir = dest.as_os_str().as_bytes().ends_with(b"/");
        if sources.len() > 1 && !dest_is_dir {
            return Err(TransferError::Usage(format!(
                "{}: several sources need an existing directory as destination",
                dest.display()
            )));
        }
        let mut files = Vec::new();
        let mut dirs: LocalDirs = Vec::new();
        for src in sources {
            let path = resolve_remote(&sftp, &host, src, &mut home).await?;
            let attrs = sftp
                .stat(&path)
                .await
                .map_err(|e| TransferError::sftp(&host, &path, e))?;
            let name = basename(&path).to_vec();
            let target = if dest_is_dir || dest_wants_dir {
                dest.join(os(&name))
            } else {
                dest.to_path_buf()
            };
            if attrs.is_dir() {
                if !opts.recursive {
                    return Err(TransferError::Usage(format!(
                        "{host}:{} is a directory; use -r to copy it",
                        lossy(&path)
                    )));
                }
                walk_remote(&sftp, &host, &path, &target, &mut files, &mut dirs).await?;
            } else {
                files.push((path, target, attrs));
            }
        }
        // Directories first, parents before children.
        for (d, _, _) in &dirs {
            std::fs::create_dir_all(d)
                .map_err(|e| TransferError::local(d, "cannot create directory", e))?;
        }
        let mut tasks = Vec::new();
        for (src, dst, attrs) in files {
            let size = attrs.size.unwrap_or(0);
            let dst_b = dst.as_os_str().as_bytes().to_vec();
            if dst.is_dir() {
                return Err(TransferError::Local(format!(
                    "{}: is a directory; cannot replace it with the file {host}:{}",
                    dst.display(),
                    lossy(&src)
                )));
            }
            let tmp = tmp_name(&dst_b);
            let journal_path = os(&side_name(&dst_b, b".ferry-resume"));
            let src_mtime = attrs.mtime().unwrap_or(0);
            let (todo, fresh) = prepare_local_tmp(
                &sftp,
                &host,
                &src,
                &dst,
                &os(&tmp),
                &journal_path,
                (size, src_mtime),
                opts.resume,
                backoff,
            )
            .await?;
            let jobs = plan_jobs(todo, size, opts, pool.streams);
            let task = FileTask {
                src,
                dst: dst_b,
                tmp,
                size,
                mode: attrs.permissions.unwrap_or(0o644) & 0o7777,
                times: attrs.atime_mtime,
                parts: jobs.len(),
                jobs,
                fresh,
                journal: journal_path,
                src_mtime,
            };
            start_journal(&task)?;
            tasks.push(task);
        }
        let (total, nfiles) = count_plan(&tasks, &stats);
        let ctx = Ctx::new(
            Direction::Download,
            tasks,
            (read_chunk, write_chunk),
            opts,
            &host,
            &stats,
        );
        let streams = pool.execute(ctx, &mut handle).await?;
        if opts.preserve {
            // Directory times last: writing files into them changed them.
            for (d, times, mode) in dirs.iter().rev() {
                let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(*mode));
                if let Some((a, m)) = times {
                    set_local_times(d, *a, *m);
                }
            }
        }
        handle.finish();
        Ok(Summary {
            bytes: total,
            files: nfiles,
            seconds: started.elapsed().as_secs_f64(),
            protocol: "sftp",
            streams,
            chunk: read_chunk,
            cipher: sftp.info().cipher,
        })
    })
}

type RemoteFiles = Vec<(Vec<u8>, PathBuf, FileAttrs)>;
/// Local directories to create: path, (atime, mtime), permission bits.
type LocalDirs = Vec<(PathBuf, Option<(u32, u32)>, u32)>;

/// Walk a remote tree, listing up to 16 directories at once.
async fn walk_remote(
    sftp: &SftpClient,
    host: &str,
    root: &[u8],
    target: &Path,
    files: &mut RemoteFiles,
    dirs: &mut LocalDirs,
) -> Result<(), TransferError> {
    let root_attrs = sftp
        .stat(root)
        .await
        .map_err(|e| TransferError::sftp(host, root, e))?;
    dirs.push((
        target.to_path_buf(),
        root_attrs.atime_mtime,
        root_attrs.permissions.unwrap_or(0o755) & 0o7777,
    ));
    let mut queue: VecDeque<(Vec<u8>, PathBuf)> =
        VecDeque::from([(root.to_vec(), target.to_path_buf())]);
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < 16 {
            let Some((dir, local)) = queue.pop_front() else {
                break;
            };
            let s = sftp.clone();
            running.push(async move {
                let r = s.list_dir(&dir).await;
                (dir, local, r)
            });
        }
        let Some((dir, local, listing)) = running.next().await else {
            break;
        };
        let entries = listing.map_err(|e| TransferError::sftp(host, &dir, e))?;
        for e in entries {
            let name = e.filename.to_vec();
            if name.contains(&b'/') || name.is_empty() {
                return Err(TransferError::Network(format!(
                    "{host}:{}: the server sent a bad file name {:?}",
                    lossy(&dir),
                    lossy(&name)
                )));
            }
            let rpath = join(&dir, &name);
            let lpath = local.join(os(&name));
            let mut attrs = e.attrs;
            if attrs.is_symlink() {
                match sftp.stat(&rpath).await {
                    Ok(a) if a.is_regular() => attrs = a,
                    Ok(_) => {
                        tracing::warn!(
                            "skipping {host}:{}: symbolic link to a directory",
                            lossy(&rpath)
                        );
                        continue;
                    }
                    Err(_) => {
                        tracing::warn!("skipping {host}:{}: dangling symbolic link", lossy(&rpath));
                        continue;
                    }
                }
            }
            if attrs.is_dir() {
                dirs.push((
                    lpath.clone(),
                    attrs.atime_mtime,
                    attrs.permissions.unwrap_or(0o755) & 0o7777,
                ));
                queue.push_back((rpath, lpath));
            } else if attrs.is_regular() || attrs.permissions.is_none() {
                files.push((rpath, lpath, attrs));
            } else {
                tracing::warn!("skipping {host}:{}: not a regular file", lossy(&rpath));
            }
        }
    }
    Ok(())
}

/// Create or reuse `.NAME.ferry-part`. Returns the ranges still to copy
/// and whether the file starts empty.
///
/// With --resume, a journal (written when an earlier run failed) says
/// exactly which ranges arrived. Without one, the part file (or a shorter
/// file under the final name, e.g. from an interrupted `sftp get`) is
/// trusted up to its size less `backoff`, since replies land out of order
/// and the last requests in flight may have left holes; the block before
/// that point must match the source.
#[allow(clippy::too_many_arguments)]
async fn prepare_local_tmp(
    sftp: &SftpClient,
    host: &str,
    src: &[u8],
    dst: &Path,
    tmp: &Path,
    journal_path: &Path,
    (size, mtime): (u64, u32),
    resume: bool,
    backoff: u64,
) -> Result<(Vec<(u64, u64)>, bool), TransferError> {
    if resume {
        if !tmp.exists() {
            if let Ok(m) = std::fs::metadata(dst) {
                if m.is_file() && m.len() < size {
                    std::fs::rename(dst, tmp).map_err(|e| {
                        TransferError::local(dst, "cannot move the partial file aside", e)
                    })?;
                }
            }
        }
        if let Ok(m) = std::fs::metadata(tmp) {
            let have = m.len();
            if let Some(j) = journal::read(journal_path) {
                let end = j.done.last().map(|d| d.1).unwrap_or(0);
                if j.size == size && j.mtime == mtime && have >= end {
                    return Ok((journal::missing(&j.done, size), false));
                }
            }
            let start = have.saturating_sub(backoff);
            if have > size {
                tracing::warn!(
                    "{}: partial file is larger than the source; starting over",
                    dst.display()
                );
            } else if start > 0 {
                if tail_matches_remote(sftp, host, src, tmp, start).await? {
                    journal::remove(journal_path);
                    return Ok((vec![(start, size)], false));
                }
                tracing::warn!(
                    "{}: partial file does not match {host}:{}; starting over",
                    dst.display(),
                    lossy(src)
                );
            }
        }
    }
    journal::remove(journal_path);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(|e| TransferError::local(tmp, "cannot create", e))?;
    Ok((
        if size == 0 {
            Vec::new()
        } else {
            vec![(0, size)]
        },
        true,
    ))
}

/// A split file gets its journal before any byte moves: if ferry is killed
/// outright, the journal still says which ranges are trustworthy (those
/// from before this run), never more.
fn start_journal(f: &FileTask) -> Result<(), TransferError> {
    if f.parts <= 1 {
        return Ok(());
    }
    let j = journal::Journal {
        size: f.size,
        mtime: f.src_mtime,
        done: journal::missing(&journal::merge(f.jobs.clone()), f.size),
    };
    journal::write(&f.journal, &j).map_err(|e| TransferError::local(&f.journal, "cannot write", e))
}

async fn tail_matches_remote(
    sftp: &SftpClient,
    host: &str,
    src: &[u8],
    tmp: &Path,
    have: u64,
) -> Result<bool, TransferError> {
    let k = have.min(RESUME_CHECK);
    let off = have - k;
    let mut local = vec![0u8; k as usize];
    std::fs::File::open(tmp)
        .and_then(|f| f.read_exact_at(&mut local, off))
        .map_err(|e| TransferError::local(tmp, "cannot read the partial file", e))?;
    let h = sftp
        .open(src, OpenFlags::READ, FileAttrs::default())
        .await
        .map_err(|e| TransferError::sftp(host, src, e))?;
    let mut remote = Vec::with_capacity(k as usize);
    while (remote.len() as u64) < k {
        let at = off + remote.len() as u64;
        match sftp.read(&h, at, (k - remote.len() as u64) as u32).await {
            Ok(Some(d)) if !d.is_empty() => remote.extend_from_slice(&d),
            Ok(_) => break,
            Err(e) => {
                let _ = sftp.close(&h).await;
                return Err(TransferError::sftp(host, src, e));
            }
        }
    }
    let _ = sftp.close(&h).await;
    Ok(remote == local)
}

pub(crate) fn set_local_times(p: &Path, atime: u32, mtime: u32) {
    let t = |s: u32| UNIX_EPOCH + Duration::from_secs(s as u64);
    if let Ok(f) = std::fs::File::options()
        .read(true)
        .open(p)
        .or_else(|_| std::fs::File::open(p))
    {
        let _ = f.set_times(
            std::fs::FileTimes::new()
                .set_accessed(t(atime))
                .set_modified(t(mtime)),
        );
    }
}

// ------------------------------------------------------------------ upload

pub(crate) fn upload(
    sources: &[PathBuf],
    remote: &RemoteSpec,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    check_local_sources(sources, opts)?;
    runtime()?.block_on(async {
        let mut pool = Pool::start(remote, opts, Tuning::UPLOAD_STREAMS).await?;
        let mut handle = pool.handle();
        let sftp = pool.control()?;
        let host = remote.host.clone();
        let (read_chunk, write_chunk) = pool.chunks(opts);
        let mut home = None;
        let backoff = opts
            .max_inflight
            .unwrap_or(Tuning::UPLOAD_INFLIGHT)
            .max(MAX_INFLIGHT_BYTES);
        let server = format!(
            "{}@{}:{}",
            remote.user.as_deref().unwrap_or(""),
            remote.host,
            remote.port.unwrap_or(22)
        );
        let dest = resolve_remote(&sftp, &host, &remote.path, &mut home).await?;
        let dest_attrs = match sftp.stat(&dest).await {
            Ok(a) => Some(a),
            Err(e) if e.is_no_such_file() => None,
            Err(e) => return Err(TransferError::sftp(&host, &dest, e)),
        };
        let dest_is_dir = dest_attrs.as_ref().is_some_and(|a| a.is_dir());
        if sources.len() > 1 && !dest_is_dir {
            return Err(TransferError::Usage(format!(
                "{}: several sources need an existing directory as destination",
                remote.original
            )));
        }
        if !dest_is_dir && remote.trailing_slash() {
            return Err(TransferError::Remote(format!(
                "{host}:{}: no such directory",
                lossy(&dest)
            )));
        }
        let mut files: Vec<(PathBuf, Vec<u8>, std::fs::Metadata)> = Vec::new();
        let mut dirs: Vec<(Vec<u8>, std::fs::Metadata)> = Vec::new();
        for src in sources {
            let meta =
                std::fs::metadata(src).map_err(|e| TransferError::local(src, "cannot read", e))?;
            let name = src
                .file_name()
                .map(|n| n.as_bytes().to_vec())
                .unwrap_or_else(|| basename(src.as_os_str().as_bytes()).to_vec());
            let target = if dest_is_dir {
                join(&dest, &name)
            } else {
                dest.clone()
            };
            if meta.is_dir() {
                walk_local(src, &target, &mut files, &mut dirs)?;
            } else {
                files.push((src.clone(), target, meta));
            }
        }
        for (d, meta) in &dirs {
            mkdir_remote(&sftp, &host, d, meta.permissions().mode() & 0o7777).await?;
        }
        let mut tasks = Vec::new();
        for (src, dst, meta) in files {
            let size = meta.len();
            let tmp = tmp_name(&dst);
            let journal_path = journal::upload_path(&server, &tmp);
            let src_mtime = meta.mtime().clamp(0, u32::MAX as i64) as u32;
            let resumed = if opts.resume {
                resume_remote_tmp(
                    &sftp,
                    &host,
                    &src,
                    (&dst, &tmp),
                    &journal_path,
                    (size, src_mtime),
                    backoff,
                )
                .await?
            } else {
                None
            };
            let fresh = resumed.is_none();
            let todo = resumed.unwrap_or_else(|| {
                if size == 0 {
                    Vec::new()
                } else {
                    vec![(0, size)]
                }
            });
            if fresh {
                journal::remove(&journal_path);
            }
            let jobs = plan_jobs(todo, size, opts, pool.streams);
            // A file sent as one job is created by that job (one round
            // trip less per small file); ranges need the file to exist first.
            if jobs.len() > 1 && fresh {
                create_remote_tmp(&sftp, &host, &tmp).await?;
            }
            let task = FileTask {
                src: src.as_os_str().as_bytes().to_vec(),
                dst,
                tmp,
                size,
                mode: meta.permissions().mode() & 0o7777,
                times: mtime_of(&meta),
                parts: jobs.len(),
                jobs,
                fresh,
                journal: journal_path,
                src_mtime,
            };
            start_journal(&task)?;
            tasks.push(task);
        }
        let (total, nfiles) = count_plan(&tasks, &stats);
        let ctx = Ctx::new(
            Direction::Upload,
            tasks,
            (read_chunk, write_chunk),
            opts,
            &host,
            &stats,
        );
        let streams = pool.execute(ctx, &mut handle).await?;
        if opts.preserve {
            for (d, meta) in dirs.iter().rev() {
                let attrs = FileAttrs {
                    permissions: Some(meta.permissions().mode() & 0o7777),
                    atime_mtime: mtime_of(meta),
                    ..Default::default()
                };
                if let Err(e) = sftp.setstat(d, attrs).await {
                    tracing::warn!("{}", TransferError::sftp(&host, d, e));
                }
            }
        }
        handle.finish();
        Ok(Summary {
            bytes: total,
            files: nfiles,
            seconds: started.elapsed().as_secs_f64(),
            protocol: "sftp",
            streams,
            chunk: write_chunk,
            cipher: sftp.info().cipher,
        })
    })
}

pub(crate) type LocalFiles = Vec<(PathBuf, Vec<u8>, std::fs::Metadata)>;

/// Check local sources before connecting (a typo should not cost a
/// login): each must exist, and a directory needs `-r`.
pub(crate) fn check_local_sources(
    sources: &[PathBuf],
    opts: &CopyOptions,
) -> Result<(), TransferError> {
    for s in sources {
        let m = std::fs::metadata(s).map_err(|e| TransferError::local(s, "cannot read", e))?;
        if m.is_dir() && !opts.recursive {
            return Err(TransferError::Usage(format!(
                "{}: is a directory; use -r to copy it",
                s.display()
            )));
        }
    }
    Ok(())
}

pub(crate) fn walk_local(
    root: &Path,
    target: &[u8],
    files: &mut LocalFiles,
    dirs: &mut Vec<(Vec<u8>, std::fs::Metadata)>,
) -> Result<(), TransferError> {
    let meta = std::fs::metadata(root).map_err(|e| TransferError::local(root, "cannot read", e))?;
    dirs.push((target.to_vec(), meta));
    let mut stack = vec![(root.to_path_buf(), target.to_vec())];
    while let Some((dir, rdir)) = stack.pop() {
        let rd =
            std::fs::read_dir(&dir).map_err(|e| TransferError::local(&dir, "cannot list", e))?;
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rp = join(&rdir, e.file_name().as_bytes());
            // Follow symlinks to files, as scp does; skip links to directories.
            let m = match std::fs::metadata(&p) {
                Ok(m) => m,
                Err(_) => {
                    tracing::warn!("skipping {}: dangling symbolic link", p.display());
                    continue;
                }
            };
            if m.is_dir() {
                if e.file_type().map(|t| t.is_symlink()).unwrap_or(false) {
                    tracing::warn!("skipping {}: symbolic link to a directory", p.display());
                    continue;
                }
                dirs.push((rp.clone(), m));
                stack.push((p, rp));
            } else if m.is_file() {
                files.push((p, rp, m));
            } else {
                tracing::warn!("skipping {}: not a regular file", p.display());
            }
        }
    }
    Ok(())
}

async fn mkdir_remote(
    sftp: &SftpClient,
    host: &str,
    d: &[u8],
    mode: u32,
) -> Result<(), TransferError> {
    let attrs = FileAttrs {
        permissions: Some(mode | 0o700),
        ..Default::default()
    };
    match sftp.mkdir(d, attrs).await {
        Ok(()) => Ok(()),
        Err(e) => match sftp.stat(d).await {
            Ok(a) if a.is_dir() => Ok(()),
            Ok(_) => Err(TransferError::Remote(format!(
                "{host}:{}: exists and is not a directory",
                lossy(d)
            ))),
            Err(_) => Err(TransferError::sftp(host, d, e)),
        },
    }
}

/// With --resume: the ranges still to send, or `None` to start over.
/// Same rules as [`prepare_local_tmp`], with the journal kept locally.
async fn resume_remote_tmp(
    sftp: &SftpClient,
    host: &str,
    src: &Path,
    (dst, tmp): (&[u8], &[u8]),
    journal_path: &Path,
    (size, mtime): (u64, u32),
    backoff: u64,
) -> Result<Option<Vec<(u64, u64)>>, TransferError> {
    let mut have = match sftp.stat(tmp).await {
        Ok(a) => a.size,
        Err(_) => None,
    };
    if have.is_none() {
        if let Ok(a) = sftp.stat(dst).await {
            if a.is_regular() && a.size.unwrap_or(0) < size {
                sftp.rename_over(dst, tmp)
                    .await
                    .map_err(|e| TransferError::sftp(host, dst, e))?;
                have = a.size;
            }
        }
    }
    let Some(have) = have else {
        return Ok(None);
    };
    if let Some(j) = journal::read(journal_path) {
        let end = j.done.last().map(|d| d.1).unwrap_or(0);
        if j.size == size && j.mtime == mtime && have >= end {
            return Ok(Some(journal::missing(&j.done, size)));
        }
    }
    let start = have.saturating_sub(backoff);
    if have > size {
        tracing::warn!(
            "{host}:{}: partial file is larger than the source; starting over",
            lossy(dst)
        );
    } else if start > 0 {
        if tail_matches_local(sftp, host, src, tmp, start).await? {
            journal::remove(journal_path);
            return Ok(Some(vec![(start, size)]));
        }
        tracing::warn!(
            "{host}:{}: partial file does not match {}; starting over",
            lossy(dst),
            src.display()
        );
    }
    Ok(None)
}

async fn create_remote_tmp(sftp: &SftpClient, host: &str, tmp: &[u8]) -> Result<(), TransferError> {
    let h = sftp
        .open(
            tmp,
            OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE,
            FileAttrs {
                permissions: Some(0o600),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| TransferError::sftp(host, tmp, e))?;
    sftp.close(&h)
        .await
        .map_err(|e| TransferError::sftp(host, tmp, e))
}

async fn tail_matches_local(
    sftp: &SftpClient,
    host: &str,
    src: &Path,
    tmp: &[u8],
    have: u64,
) -> Result<bool, TransferError> {
    let k = have.min(RESUME_CHECK);
    let off = have - k;
    let mut local = vec![0u8; k as usize];
    std::fs::File::open(src)
        .and_then(|f| f.read_exact_at(&mut local, off))
        .map_err(|e| TransferError::local(src, "cannot read", e))?;
    let h = sftp
        .open(tmp, OpenFlags::READ, FileAttrs::default())
        .await
        .map_err(|e| TransferError::sftp(host, tmp, e))?;
    let mut remote = Vec::with_capacity(k as usize);
    while (remote.len() as u64) < k {
        match sftp
            .read(
                &h,
                off + remote.len() as u64,
                (k - remote.len() as u64) as u32,
            )
            .await
        {
            Ok(Some(d)) if !d.is_empty() => remote.extend_from_slice(&d),
            _ => break,
        }
    }
    let _ = sftp.close(&h).await;
    Ok(remote == local)
}

// ------------------------------------------------------------ the jobs

async fn run_job(
    sftp: &SftpClient,
    ctx: &Ctx,
    job: Job,
    done: &mut Vec<(u64, u64)>,
) -> Result<(), TransferError> {
    let Some(f) = ctx.files.get(job.file) else {
        return Err(TransferError::Local("internal: bad job".into()));
    };
    match ctx.dir {
        Direction::Download => download_range(sftp, ctx, f, job.offset, job.len, done).await?,
        Direction::Upload => upload_range(sftp, ctx, f, job.offset, job.len, done).await?,
    }
    if job.whole {
        finalize(sftp, ctx, f).await?;
        ctx.stats.files_done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

async fn download_range(
    sftp: &SftpClient,
    ctx: &Ctx,
    f: &FileTask,
    offset: u64,
    len: u64,
    done: &mut Vec<(u64, u64)>,
) -> Result<(), TransferError> {
    let tmp = os(&f.tmp);
    let out = std::fs::OpenOptions::new()
        .write(true)
        .open(&tmp)
        .map_err(|e| TransferError::local(&tmp, "cannot open", e))?;
    if len == 0 && f.size > 0 {
        return Ok(());
    }
    let h = sftp
        .open(&f.src, OpenFlags::READ, FileAttrs::default())
        .await
        .map_err(|e| TransferError::sftp(&ctx.host, &f.src, e))?;
    // Written inline, on the connection's thread (docs/internals/sftp.md,
    // "Writing to disk").
    let res = pull(sftp, ctx, f, &h, &out, &tmp, offset, len, done).await;
    // Closing a read handle cannot lose data: don't wait for the answer.
    let (s, h2) = (sftp.clone(), h.clone());
    tokio::spawn(async move {
        let _ = s.close(&h2).await;
    });
    res
}

#[allow(clippy::too_many_arguments)]
async fn pull(
    sftp: &SftpClient,
    ctx: &Ctx,
    f: &FileTask,
    h: &Handle,
    out: &std::fs::File,
    tmp: &Path,
    offset: u64,
    len: u64,
    done: &mut Vec<(u64, u64)>,
) -> Result<(), TransferError> {
    let chunk = ctx.read_chunk;
    let max_depth = ctx
        .max_depth
        .min((MAX_INFLIGHT_BYTES / chunk as u64).max(4) as usize);
    let mut window = Window::new(max_depth, chunk);
    let end = offset + len;
    let mut next = offset;
    // Pieces a short read left behind, asked for again before new ones.
    let mut holes: Vec<(u64, u32)> = Vec::new();
    let mut inflight = FuturesUnordered::new();
    let issue = |at: u64, n: u32, permit: OwnedSemaphorePermit| {
        let s = sftp.clone();
        let h = h.clone();
        async move {
            let t0 = Instant::now();
            let r = s.read(&h, at, n).await;
            (at, n, t0, r, permit)
        }
    };
    loop {
        while inflight.len() < window.depth() {
            let (at, n, hole) = if let Some(&(at, n)) = holes.last() {
                (at, n, true)
            } else if next < end {
                (next, (end - next).min(chunk as u64) as u32, false)
            } else {
                break;
            };
            let Some(permit) = reserve(&ctx.budget, n, inflight.is_empty()).await else {
                break;
            };
            if hole {
                holes.pop();
            } else {
                next += n as u64;
            }
            inflight.push(issue(at, n, permit));
        }
        let Some((at, n, t0, r, _permit)) = inflight.next().await else {
            break;
        };
        let data: Bytes = match r {
            Ok(Some(d)) => d,
            Ok(None) => {
                return Err(TransferError::Remote(format!(
                    "{}:{}: the file ended at {at} bytes, but was {} bytes when the copy started (it changed during the copy); run again",
                    ctx.host,
                    lossy(&f.src),
                    f.size
                )))
            }
            Err(e) => return Err(TransferError::sftp(&ctx.host, &f.src, e)),
        };
        let got = data.len().min(n as usize);
        let piece = data.get(..got).unwrap_or(&data);
        out.write_all_at(piece, at)
            .map_err(|e| TransferError::local(tmp, "cannot write", e))?;
        record(done, at, got as u64);
        ctx.stats
            .bytes_done
            .fetch_add(got as u64, Ordering::Relaxed);
        ctx.stats.check()?;
        let now = Instant::now();
        window.on_reply(got as u64, now - t0, now);
        if got < n as usize {
            if got == 0 {
                return Err(TransferError::Network(format!(
                    "{}:{}: the server returned an empty read",
                    ctx.host,
                    lossy(&f.src)
                )));
            }
            holes.push((at + got as u64, n - got as u32));
        }
    }
    Ok(())
}

/// Note that `len` bytes at `at` reached the destination. Kept merged now
/// and then so a long job's list stays short.
/// Record what really arrived of a file that did not finish, for --resume:
/// the ranges this run was not asked to move (done before) plus `arrived`.
fn save_journal(f: &FileTask, arrived: Option<Vec<(u64, u64)>>) {
    let mut done = journal::missing(&journal::merge(f.jobs.clone()), f.size);
    done.extend(arrived.unwrap_or_default());
    let j = journal::Journal {
        size: f.size,
        mtime: f.src_mtime,
        done: journal::merge(done),
    };
    if j.done.is_empty() {
        journal::remove(&f.journal);
    } else if let Err(e) = journal::write(&f.journal, &j) {
        tracing::warn!("cannot write {}: {e}", f.journal.display());
    }
}

fn record(done: &mut Vec<(u64, u64)>, at: u64, len: u64) {
    done.push((at, at + len));
    if done.len() >= 1024 {
        *done = journal::merge(std::mem::take(done));
    }
}

async fn upload_range(
    sftp: &SftpClient,
    ctx: &Ctx,
    f: &FileTask,
    offset: u64,
    len: u64,
    done: &mut Vec<(u64, u64)>,
) -> Result<(), TransferError> {
    let src = os(&f.src);
    let input =
        std::fs::File::open(&src).map_err(|e| TransferError::local(&src, "cannot open", e))?;
    // A whole file not resumed is created here, with the source's mode
    // (the server's umask applies, as with cp); resumed files and ranges
    // open what the coordinator prepared.
    let single = f.parts <= 1;
    let (flags, attrs) = if single && f.fresh {
        (
            OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE,
            FileAttrs {
                permissions: Some(f.mode & 0o777),
                ..Default::default()
            },
        )
    } else {
        (OpenFlags::WRITE, FileAttrs::default())
    };
    let h = sftp
        .open(&f.tmp, flags, attrs)
        .await
        .map_err(|e| TransferError::sftp(&ctx.host, &f.dst, e))?;
    let mut res = push(sftp, ctx, f, &h, &input, &src, offset, len, done).await;
    if res.is_ok() && single && ctx.preserve {
        let attrs = FileAttrs {
            permissions: Some(f.mode),
            atime_mtime: f.times,
            ..Default::default()
        };
        res = sftp
            .fsetstat(&h, attrs)
            .await
            .map_err(|e| TransferError::sftp(&ctx.host, &f.dst, e));
    }
    // Closing a written file can report a failed write (NFS, quota): wait.
    let closed = sftp
        .close(&h)
        .await
        .map_err(|e| TransferError::sftp(&ctx.host, &f.dst, e));
    res?;
    closed
}

#[allow(clippy::too_many_arguments)]
async fn push(
    sftp: &SftpClient,
    ctx: &Ctx,
    f: &FileTask,
    h: &Handle,
    input: &std::fs::File,
    src: &Path,
    offset: u64,
    len: u64,
    done: &mut Vec<(u64, u64)>,
) -> Result<(), TransferError> {
    let chunk = ctx.write_chunk;
    let max_depth = ctx
        .max_depth
        .min((MAX_INFLIGHT_BYTES / chunk as u64).max(4) as usize);
    let mut window = Window::new(max_depth, chunk);
    let end = offset + len;
    let mut next = offset;
    let mut inflight = FuturesUnordered::new();
    loop {
        while inflight.len() < window.depth() && next < end {
            let n = (end - next).min(chunk as u64) as usize;
            let Some(permit) = reserve(&ctx.budget, n as u32, inflight.is_empty()).await else {
                break;
            };
            // Read the data straight into its place in the WRITE packet.
            let prefix = ferry_sftp::packet_ext::write_prefix_len(h.0.len());
            let mut buf = bytes::BytesMut::zeroed(prefix + n);
            let data = buf.get_mut(prefix..).unwrap_or_default();
            input.read_exact_at(data, next).map_err(|e| {
                TransferError::local(src, "cannot read (did it shrink during the copy?)", e)
            })?;
            let (s, h, at) = (sftp.clone(), h.clone(), next);
            inflight.push(async move {
                let t0 = Instant::now();
                let r = s.write_prepared(&h, at, buf).await;
                drop(permit);
                (at, n, t0, r)
            });
            next += n as u64;
        }
        let Some((at, n, t0, r)) = inflight.next().await else {
            break;
        };
        r.map_err(|e| TransferError::sftp(&ctx.host, &f.dst, e))?;
        record(done, at, n as u64);
        ctx.stats.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
        ctx.stats.check()?;
        let now = Instant::now();
        window.on_reply(n as u64, now - t0, now);
    }
    Ok(())
}

/// Move a complete temporary file over its final name, with -p's times
/// and modes. Only here does the destination name change.
async fn finalize(sftp: &SftpClient, ctx: &Ctx, f: &FileTask) -> Result<(), TransferError> {
    match ctx.dir {
        Direction::Download => {
            let (tmp, dst) = (os(&f.tmp), os(&f.dst));
            let meta = std::fs::metadata(&tmp)
                .map_err(|e| TransferError::local(&tmp, "cannot stat", e))?;
            if meta.len() != f.size {
                return Err(TransferError::Local(format!(
                    "{}: got {} bytes, expected {}; partial data kept in {}, rerun with --resume",
                    dst.display(),
                    meta.len(),
                    f.size,
                    tmp.display()
                )));
            }
            if ctx.preserve {
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(f.mode))
                    .map_err(|e| TransferError::local(&tmp, "cannot set permissions", e))?;
                if let Some((a, m)) = f.times {
                    set_local_times(&tmp, a, m);
                }
            } else {
                // Like cp: the source's permission bits less the umask. The
                // temporary file was created 0666 & ~umask, so only narrow.
                let cur = meta.permissions().mode() & 0o7777;
                let want = cur & (f.mode | !0o777) & 0o777;
                if want != cur {
                    let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(want));
                }
            }
            std::fs::rename(&tmp, &dst).map_err(|e| {
                TransferError::local(&dst, "cannot rename the finished file into place", e)
            })
        }
        Direction::Upload => {
            // Whole files got their mode at creation (and -p's times before
            // close); split or resumed files get them here.
            if f.parts > 1 || !f.fresh {
                let attrs = FileAttrs {
                    permissions: Some(if ctx.preserve { f.mode } else { f.mode & 0o777 }),
                    atime_mtime: if ctx.preserve { f.times } else { None },
                    ..Default::default()
                };
                sftp.setstat(&f.tmp, attrs)
                    .await
                    .map_err(|e| TransferError::sftp(&ctx.host, &f.dst, e))?;
            }
            sftp.rename_over(&f.tmp, &f.dst)
                .await
                .map_err(|e| TransferError::sftp(&ctx.host, &f.dst, e))
        }
    }
}

#[cfg(test)]
mod fit_tests {
    use super::*;

    #[test]
    fn requests_fit_large_packets_only() {
        // ferry serve and ferry cp: 255 KiB packets, replies and writes fit.
        let p = ferry_ssh::MAX_CHANNEL_PACKET;
        assert_eq!(fit_packet(1 << 20, p, DATA_REPLY_HEADER) + 13, p);
        assert!(fit_packet(1 << 20, p, WRITE_HEADER) + 25 + 8 <= p);
        // OpenSSH's sshd accepts 32 KiB: its 255 KiB writes stay as they are.
        assert_eq!(fit_packet(261_120, 32 * 1024, WRITE_HEADER), 261_120);
        // Smaller requests are never made larger.
        assert_eq!(fit_packet(4096, p, DATA_REPLY_HEADER), 4096);
    }
}
