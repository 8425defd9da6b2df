//! The library API: start a transfer, get a handle at once, read its
//! events, cancel it, and get a report with a result per file.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ferry_engine::TransferError> {
//! use ferry_engine::{CopyOptions, Event, Location, Transfer};
//!
//! let src = Location::parse("sftp://example.org/srv/data.bin").map_err(ferry_engine::TransferError::Usage)?;
//! let dst = Location::parse("/tmp/").map_err(ferry_engine::TransferError::Usage)?;
//! let mut t = Transfer::new(vec![src], dst, CopyOptions::default()).start();
//! while let Some(ev) = t.next_event().await {
//!     if let Event::Progress { bytes_done, bytes_total, .. } = ev {
//!         eprintln!("{bytes_done}/{bytes_total}");
//!     }
//! }
//! let report = t.wait().await;
//! for f in &report.files {
//!     println!("{} -> {}: {:?}", f.source, f.dest, f.error);
//! }
//! # Ok(()) }
//! ```
//!
//! Nothing here prints, reads the environment or prompts: warnings are
//! events, and passwords, passphrases and host-key questions go through
//! the [`Prompt`](crate::Prompt) the application puts in
//! `CopyOptions::connect.prompt` (`ferry` the binary answers them on the
//! terminal and from `FERRY_PASSWORD`).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify};

use crate::engine::{self, FilePlan, Place, Run};
use crate::error::{ErrorKind, TransferError};
use crate::{CopyOptions, Location, Stats, Summary};

/// What happens during a transfer, in order. New kinds of events may be
/// added: match with a `_` arm.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The plan is made: this many files and bytes will move (`bytes`
    /// counts the sizes the listings gave; an HTML index gives none).
    Planned { files: u64, bytes: u64 },
    /// `size`: `None` when the listing did not say it; the file's read
    /// then says it, and `Progress`'s `bytes_total` grows by it (by each
    /// piece as it arrives, where no answer says the size).
    FileStarted {
        source: String,
        dest: String,
        size: Option<u64>,
    },
    /// At most ten a second, and once at the end.
    Progress {
        bytes_done: u64,
        bytes_total: u64,
        files_done: u64,
        files_total: u64,
    },
    /// One file is finished, well or not.
    FileDone(FileReport),
    /// Something the user should know that did not stop the transfer.
    Warning(String),
    /// `sync` and `check`: how a path (relative to both tops, `/`-separated)
    /// differs. Paths that are the same are counted, not sent.
    Compared { path: String, verdict: Verdict },
    /// `sync --delete`: removed from the destination (with `dry_run`, it
    /// would have been).
    Deleted { path: String, dry_run: bool },
}

/// What comparing one path of the two trees found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The source has it, the destination does not.
    OnlyInSource,
    /// The destination has it, the source does not.
    OnlyInDest,
    /// Both have it and it differs: `"size"`, `"time"`, `"hash"` or
    /// `"type"` (a file on one side, a directory on the other).
    Differs(&'static str),
    /// The destination's copy is newer and `--update` keeps it.
    NewerInDest,
}

/// How one file went.
#[derive(Debug, Clone)]
pub struct FileReport {
    pub source: String,
    pub dest: String,
    /// Bytes this run moved for it (resumed bytes not counted).
    pub bytes: u64,
    /// `None` when it is complete under its final name.
    pub error: Option<FileError>,
}

/// Why a file failed: its kind (what the CLI turns into an exit code) and
/// the message, which names the file and says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub kind: ErrorKind,
    pub message: String,
}

impl FileReport {
    pub(crate) fn failed(r: &Run, f: &FilePlan, e: TransferError) -> FileReport {
        let (source, dest) = shown(r, f);
        FileReport::of(source, dest, Err(e))
    }
    /// The report of a file whose source and destination are shown as
    /// `source` and `dest`: `Ok` with the bytes moved, or why it failed.
    pub(crate) fn of(source: String, dest: String, res: Result<u64, TransferError>) -> FileReport {
        let (bytes, error) = match res {
            Ok(n) => (n, None),
            Err(e) => (
                0,
                Some(FileError {
                    kind: e.kind(),
                    message: e.to_string(),
                }),
            ),
        };
        FileReport {
            source,
            dest,
            bytes,
            error,
        }
    }
}

/// A file's source and destination as its events and report show them.
pub(crate) fn shown(r: &Run, f: &FilePlan) -> (String, String) {
    (
        r.sources[f.source].backend.display(&f.src),
        r.dest.backend.display(&f.dst),
    )
}

/// What a finished transfer did.
#[derive(Debug)]
pub struct Report {
    /// One entry per file: sources not found among several named first,
    /// then the plan's files in order.
    pub files: Vec<FileReport>,
    /// Files complete under their final names.
    pub files_copied: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub protocol: String,
    pub streams: usize,
    pub chunk: u32,
    pub cipher: Option<String>,
    /// Why the transfer as a whole failed (planning failed, a file failed:
    /// the first in plan order, with the number of others), or `None`.
    pub error: Option<TransferError>,
}

impl Report {
    /// A transfer that failed before any file moved.
    fn failed(e: TransferError, seconds: f64) -> Report {
        Report {
            files: Vec::new(),
            files_copied: 0,
            bytes: 0,
            seconds,
            protocol: String::new(),
            streams: 0,
            chunk: 0,
            cipher: None,
            error: Some(e),
        }
    }

    /// The totals, or the error the transfer ended with.
    pub fn into_result(self) -> Result<Summary, TransferError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(Summary {
                bytes: self.bytes,
                files: self.files_copied,
                seconds: self.seconds,
                protocol: leak(self.protocol),
                streams: self.streams,
                chunk: self.chunk,
                cipher: self.cipher,
            }),
        }
    }
}

/// `Summary.protocol` is a `&'static str` (kept for the old API); the few
/// protocol names there are live for the process.
fn leak(s: String) -> &'static str {
    match s.as_str() {
        "sftp" => "sftp",
        "local" => "local",
        "memory" => "memory",
        "ftp" => "ftp",
        "ftps" => "ftps",
        "http" => "http",
        "https" => "https",
        _ => Box::leak(s.into_boxed_str()),
    }
}

/// Cancels a transfer; clones share it.
#[derive(Clone, Default)]
pub struct Cancel(Arc<CancelInner>);

#[derive(Default)]
struct CancelInner {
    flag: AtomicBool,
    notify: Notify,
}

impl Cancel {
    pub fn cancel(&self) {
        self.0.flag.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.flag.load(Ordering::SeqCst)
    }
    /// Completes once `cancel` was called.
    pub async fn cancelled(&self) {
        loop {
            let n = self.0.notify.notified();
            if self.is_cancelled() {
                return;
            }
            n.await;
        }
    }
}

/// Sends events to the handle, if anyone still listens.
#[derive(Clone)]
pub(crate) struct Emitter(Option<mpsc::UnboundedSender<Event>>);

impl Emitter {
    pub(crate) fn emit(&self, e: Event) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(e);
        }
    }
    pub(crate) fn warn(&self, m: String) {
        tracing::debug!("{m}");
        self.emit(Event::Warning(m));
    }
}

/// A transfer to start: sources, a destination and options.
pub struct Transfer {
    sources: Vec<Location>,
    dest: Location,
    opts: CopyOptions,
    /// Backends given by the application instead of locations.
    places: Option<(Vec<Place>, Place)>,
}

/// A backend and a path in it, for [`Transfer::between`].
pub struct BackendPath {
    pub backend: Arc<dyn crate::backend::Backend>,
    pub path: String,
}

impl Transfer {
    pub fn new(sources: Vec<Location>, dest: Location, opts: CopyOptions) -> Transfer {
        Transfer {
            sources,
            dest,
            opts,
            places: None,
        }
    }

    /// A transfer between backends the application made (its own
    /// [`Backend`](crate::backend::Backend), or the in-memory one in
    /// tests). A destination path ending in `/` means "into this
    /// directory", as on the command line.
    pub fn between(sources: Vec<BackendPath>, dest: BackendPath, opts: CopyOptions) -> Transfer {
        let place = |b: BackendPath| Place {
            dir_hint: b.path.ends_with('/') && b.path.len() > 1,
            backend: b.backend,
            path: b.path.into_bytes(),
        };
        Transfer {
            sources: Vec::new(),
            dest: Location::Local(std::path::PathBuf::new()),
            opts,
            places: Some((sources.into_iter().map(place).collect(), place(dest))),
        }
    }

    /// Start on the current tokio runtime (any flavour) and return at once.
    /// Panics outside a runtime, like `tokio::spawn`.
    pub fn start(self) -> TransferHandle {
        Handle::spawn(move |stats, events, cancel| drive(self, stats, events, cancel))
    }
}

/// A running transfer ([`Report`] at the end) or sync
/// ([`SyncReport`](crate::sync::SyncReport)).
pub struct Handle<R> {
    pub(crate) events: mpsc::UnboundedReceiver<Event>,
    pub(crate) cancel: Cancel,
    pub(crate) stats: Arc<Stats>,
    pub(crate) task: tokio::task::JoinHandle<R>,
    /// The task's end, once `next_event` saw it.
    pub(crate) ended: Option<Result<R, tokio::task::JoinError>>,
}

/// A running copy.
pub type TransferHandle = Handle<Report>;

/// What a report says when the task behind it died.
pub trait EndReport: Send + 'static {
    fn internal_failure(message: String) -> Self;
}

impl EndReport for Report {
    fn internal_failure(message: String) -> Self {
        Report::failed(TransferError::Local(message), 0.0)
    }
}

impl<R: EndReport> Handle<R> {
    /// Start `work` on the current runtime with fresh events, cancel and
    /// counters.
    pub(crate) fn spawn<F, Fut>(work: F) -> Handle<R>
    where
        F: FnOnce(Arc<Stats>, Emitter, Cancel) -> Fut,
        Fut: std::future::Future<Output = R> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let cancel = Cancel::default();
        let stats = Arc::new(Stats::default());
        let task = tokio::spawn(work(stats.clone(), Emitter(Some(tx)), cancel.clone()));
        Handle {
            events: rx,
            cancel,
            stats,
            task,
            ended: None,
        }
    }

    /// The next event; `None` once the transfer is over and every event was
    /// read.
    pub async fn next_event(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = &self.ended {
                // A task that died (a panic) may have left tasks it started
                // holding the stream open: what is queued, then the end.
                return match end {
                    Ok(_) => self.events.recv().await,
                    Err(_) => self.events.try_recv().ok(),
                };
            }
            tokio::select! {
                biased;
                ev = self.events.recv() => return ev,
                end = &mut self.task => self.ended = Some(end),
            }
        }
    }
    /// Stop promptly: ranges in flight are abandoned, part files are kept
    /// for `--resume`, nothing appears under a final name that was not
    /// complete before.
    pub fn cancel(&self) {
        self.cancel.cancel()
    }
    /// A handle that cancels this transfer from elsewhere.
    pub fn canceller(&self) -> Cancel {
        self.cancel.clone()
    }
    /// Live counters (bytes and files done and planned).
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }
    /// Wait for the end. Events not read yet are dropped.
    pub async fn wait(self) -> R {
        let end = match self.ended {
            Some(end) => end,
            None => self.task.await,
        };
        match end {
            Ok(r) => r,
            Err(e) => R::internal_failure(format!("internal: the transfer task failed: {e}")),
        }
    }
}

/// For programs without a tokio runtime: run a transfer to the end on a
/// runtime of its own, calling `on_event` for each event. Returning
/// `false` from `on_event` cancels (as libcurl's progress callback).
pub fn run_blocking(t: Transfer, on_event: impl FnMut(&Event) -> bool) -> Report {
    block_on(move || t.start(), on_event)
}

/// Blocking threads of the runtime [`block_on`] builds.
const BLOCKING_THREADS: usize = 16;

/// [`run_blocking`] for any handle: `start` is called on a runtime of
/// its own.
pub fn block_on<R: EndReport>(
    start: impl FnOnce() -> Handle<R>,
    on_event: impl FnMut(&Event) -> bool,
) -> R {
    blocking(start, None, on_event)
}

/// [`block_on`], taking the events that came meanwhile in one batch
/// `every` so often (and when the transfer ends) rather than one at a
/// time: this thread is not woken for each event (three a file), which
/// was a good part of the context switches of a sync of 10,000 small
/// files (perf). A cancel asked by `on_event` then takes effect up to
/// `every` later. `ferry sync` uses it with 20 ms.
pub fn block_on_batched<R: EndReport>(
    start: impl FnOnce() -> Handle<R>,
    every: Duration,
    on_event: impl FnMut(&Event) -> bool,
) -> R {
    blocking(start, Some(every), on_event)
}

fn blocking<R: EndReport>(
    start: impl FnOnce() -> Handle<R>,
    batch: Option<Duration>,
    mut on_event: impl FnMut(&Event) -> bool,
) -> R {
    // Few blocking threads: local file work (open, read, stat) is short,
    // and tokio's default of up to 512 threads, each with its own
    // allocator heap, made a sync of 10,000 small files fault in fresh
    // pages and switch threads more than it hashed or copied (perf).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return R::internal_failure(format!("cannot start a runtime: {e}")),
    };
    rt.block_on(async move {
        let mut h = start();
        let Some(every) = batch else {
            while let Some(ev) = h.next_event().await {
                if !on_event(&ev) {
                    h.cancel();
                }
            }
            return h.wait().await;
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ended = None;
        loop {
            let mut closed = false;
            loop {
                match h.events.try_recv() {
                    Ok(ev) => {
                        if !on_event(&ev) {
                            h.cancel();
                        }
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            if closed {
                break;
            }
            // The task died (a panic): what it started may hold the
            // stream open for good, and what was queued is read.
            if matches!(ended, Some(Err(_))) {
                break;
            }
            if ended.is_some() {
                // The task is over; what it started may still send a last
                // event or two.
                match h.events.recv().await {
                    Some(ev) => {
                        if !on_event(&ev) {
                            h.cancel();
                        }
                        continue;
                    }
                    None => break,
                }
            }
            tokio::select! {
                r = &mut h.task => ended = Some(r),
                _ = tick.tick() => {}
            }
        }
        let res = match ended {
            Some(r) => r,
            None => (&mut h.task).await,
        };
        match res {
            Ok(r) => r,
            Err(e) => R::internal_failure(format!("internal: the transfer task failed: {e}")),
        }
    })
}

async fn drive(t: Transfer, stats: Arc<Stats>, events: Emitter, cancel: Cancel) -> Report {
    let started = Instant::now();
    let mut opened: Vec<(String, Arc<dyn crate::backend::Backend>)> = Vec::new();
    if let Some((sources, dest)) = &t.places {
        for p in sources.iter().chain(std::iter::once(dest)) {
            let key = p.backend.endpoint_key();
            if !opened.iter().any(|(k, _)| *k == key) {
                opened.push((key, p.backend.clone()));
            }
        }
    }
    if t.places
        .as_ref()
        .map_or(t.sources.is_empty(), |(s, _)| s.is_empty())
    {
        return failed_report(TransferError::Usage("no source given".into()), started);
    }
    let ticker = Ticker::start(&stats, &events);
    // A server lost while ferry connects, logs in or lists is tried again
    // (`--retries`), as a lost range is.
    let mut attempt = 0;
    let planned = loop {
        let step = tokio::select! {
            p = open_and_plan(&t, &mut opened, &stats, &events, &cancel) => p,
            _ = cancel.cancelled() => Err(TransferError::cancelled()),
        };
        match step {
            Ok(p) => break Ok(p),
            Err(e) => {
                match crate::retry::wait_to_retry(e, attempt, t.opts.retries, &events, &cancel)
                    .await
                {
                    Ok(()) => attempt += 1,
                    Err(e) => break Err(e),
                }
            }
        }
    };
    let files = match planned {
        Ok((run, plan)) => engine::run(run, plan).await,
        Err(e) => {
            drop(ticker);
            close_all(&opened).await;
            return failed_report(e, started);
        }
    };
    drop(ticker);
    emit_progress(&stats, &events);
    let info: Vec<_> = opened.iter().map(|(_, b)| b.info()).collect();
    close_all(&opened).await;
    let bytes = files.iter().map(|f| f.bytes).sum();
    let failed: Vec<&FileReport> = files.iter().filter(|f| f.error.is_some()).collect();
    let error = failed.first().and_then(|f| f.error.as_ref()).map(|e| {
        let more = failed.len() - 1;
        let msg = if more > 0 {
            format!(
                "{} (and {more} more file{} failed)",
                e.message,
                if more == 1 { "" } else { "s" }
            )
        } else {
            e.message.clone()
        };
        TransferError::from_kind(e.kind, msg)
    });
    let protocol = opened
        .iter()
        .map(|(_, b)| b.info().protocol.unwrap_or_else(|| b.scheme().to_string()))
        .filter(|p| p != "local")
        .collect::<Vec<_>>();
    Report {
        files_copied: files.iter().filter(|f| f.error.is_none()).count() as u64,
        bytes,
        seconds: engine::since(started),
        protocol: if protocol.is_empty() {
            "local".into()
        } else {
            protocol.join(" -> ")
        },
        streams: info.iter().map(|i| i.connections).sum(),
        chunk: info.iter().map(|i| i.chunk).max().unwrap_or(0),
        cipher: info.iter().find_map(|i| i.cipher.clone()),
        files,
        error,
    }
}

/// Open the transfer's locations (or take the application's backends)
/// and plan the copy.
async fn open_and_plan(
    t: &Transfer,
    opened: &mut Vec<(String, Arc<dyn crate::backend::Backend>)>,
    stats: &Arc<Stats>,
    events: &Emitter,
    cancel: &Cancel,
) -> Result<(Arc<Run>, engine::Plan), TransferError> {
    let (sources, dest) = match &t.places {
        Some((sources, dest)) => (sources.clone(), dest.clone()),
        None => {
            let mut sources = Vec::new();
            for s in &t.sources {
                sources.push(open_shared(opened, crate::backend::key_of(s), s, &t.opts).await?);
            }
            let key = crate::backend::key_of(&t.dest);
            (sources, open_shared(opened, key, &t.dest, &t.opts).await?)
        }
    };
    let plan = engine::plan(&sources, &dest, &t.opts, events).await?;
    let run = Arc::new(Run {
        sources,
        dest,
        opts: t.opts.clone(),
        stats: stats.clone(),
        events: events.clone(),
        cancel: cancel.clone(),
        prepared: Default::default(),
    });
    Ok((run, plan))
}

/// One backend per server and account, shared by every source and the
/// destination that name it (so SFTP to the same server can copy on the
/// server).
pub(crate) async fn open_shared(
    opened: &mut Vec<(String, Arc<dyn crate::backend::Backend>)>,
    key: String,
    loc: &Location,
    opts: &CopyOptions,
) -> Result<Place, TransferError> {
    let existing = opened
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, b)| b.clone());
    let (backend, path, dir_hint) = crate::backend::open(loc, opts, existing).await?;
    if !opened.iter().any(|(k, _)| *k == key) {
        opened.push((key, backend.clone()));
    }
    Ok(Place {
        backend,
        path,
        dir_hint,
    })
}

pub(crate) async fn close_all(opened: &[(String, Arc<dyn crate::backend::Backend>)]) {
    for (_, b) in opened {
        b.close().await;
    }
}

fn failed_report(e: TransferError, started: Instant) -> Report {
    Report::failed(e, engine::since(started))
}

async fn tick(stats: Arc<Stats>, events: Emitter) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        emit_progress(&stats, &events);
    }
}

/// Progress events every 100 ms while it lives. Dropped, it stops: also
/// when the task that holds it panics, so that the event stream still
/// ends (it holds an [`Emitter`]).
pub(crate) struct Ticker(tokio::task::JoinHandle<()>);

impl Ticker {
    pub(crate) fn start(stats: &Arc<Stats>, events: &Emitter) -> Ticker {
        Ticker(tokio::spawn(tick(stats.clone(), events.clone())))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(crate) fn emit_progress(stats: &Stats, events: &Emitter) {
    let (bytes_done, bytes_total, files_done, files_total) = stats.snapshot();
    events.emit(Event::Progress {
        bytes_done,
        bytes_total,
        files_done,
        files_total,
    });
}
