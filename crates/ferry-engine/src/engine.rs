//! The transfer engine: one planner, one scheduler, one copy loop, one
//! finalize step, one retry policy, for every pair of backends.
//!
//! One file's way through it (docs/internals/engine.md has the diagram):
//! 1. `plan` stats each source, walks directories (listings in parallel),
//!    and maps every file to its destination name as `cp -r` would;
//! 2. `run` creates the destination directories, then moves up to
//!    `parallel` files at once; a big file whose source reads ranges and
//!    whose destination writes at offsets is split into ranges moved at
//!    once;
//! 3. `copy_file` writes `.NAME.ferry-part` beside the final name (or the
//!    final name itself where the server only shows a write once it is
//!    whole), each range a stream from the source's `read` into the
//!    destination's `write`, through bounded memory;
//! 4. `finalize` checks the size, sets times and modes (`-p`), and renames
//!    the part over the final name: a failed, cancelled or interrupted copy
//!    never leaves a wrong file under the final name.
//!
//! A stalled stream (no byte within `timeout`) and transient network
//! failures are retried (`retry`); everything that fails is reported once,
//! per file, in the [`Report`](crate::Report).
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;

use crate::backend::{
    path, Backend, ByteStream, Entry, EntryKind, HashAlgo, LocalRange, LocalSource, LocalTarget,
    RangeProgress, RangeTask, ReadInfo, Role, Sink, SourceCheck, Unfinished, WriteMode,
};
use crate::error::{ErrorKind, TransferError};
use crate::journal;
use crate::transfer::{Cancel, Emitter, Event, FileReport};
use crate::widen;
use crate::{CopyOptions, Stats};

/// Bytes of a partial file compared with the source before resuming.
const RESUME_CHECK: u64 = 64 * 1024;
/// Listings in flight at once while walking a tree (and stats of the
/// sources named).
const LISTINGS: usize = 16;

/// A source or destination: a backend and a path in it.
#[derive(Clone)]
pub(crate) struct Place {
    pub backend: Arc<dyn Backend>,
    pub path: Vec<u8>,
    /// The user ended the path with `/`: "into this directory".
    pub dir_hint: bool,
}

/// One file to copy.
#[derive(Debug, Clone)]
pub(crate) struct FilePlan {
    /// Index into the sources.
    pub source: usize,
    pub src: Vec<u8>,
    pub dst: Vec<u8>,
    pub size: Option<u64>,
    pub mtime: Option<i64>,
    pub mode: Option<u32>,
    /// The destination's listing, taken before this copy, showed no part
    /// file for it (a sync lists the destination anyway): nothing to
    /// continue, so `--resume` need not look (one round trip a file).
    pub no_part: bool,
}

impl FilePlan {
    /// The permission bits a new copy is created with, with or without
    /// `-p`: the source's read/write/execute bits (the destination's umask
    /// then applies), as `cp` and OpenSSH's `sftp put` do. A private
    /// file stays private, its part file too.
    fn perm(&self) -> Option<u32> {
        self.mode.map(|m| m & 0o777)
    }
}

pub(crate) struct Plan {
    pub files: Vec<FilePlan>,
    /// Destination directories to create, parents first.
    pub dirs: Vec<Vec<u8>>,
    /// (directory, mtime, mode) to set after the copy, with -p.
    pub dir_times: Vec<(Vec<u8>, Option<i64>, Option<u32>)>,
    /// Sources that were not there, one of several named (`cp a b dir/`
    /// copies the others and reports these).
    pub missing: Vec<(FilePlan, TransferError)>,
}

/// Decide what goes where.
pub(crate) async fn plan(
    sources: &[Place],
    dest: &Place,
    opts: &CopyOptions,
    events: &Emitter,
) -> Result<Plan, TransferError> {
    let dst_entry = dest.backend.stat(&dest.path).await?;
    let dst_is_dir = matches!(&dst_entry, Some(e) if e.kind == EntryKind::Dir);
    if matches!(&dst_entry, Some(e) if e.kind == EntryKind::Other) {
        return Err(TransferError::Usage(format!(
            "{}: not a regular file or a directory (a device, pipe or socket); ferry writes a \
             temporary file and renames it into place, which would replace it. Copy to a file or a directory",
            dest.backend.display(&dest.path)
        )));
    }
    let into = dst_is_dir || dest.dir_hint || sources.len() > 1;
    if sources.len() > 1 && !dst_is_dir && !dest.dir_hint {
        return Err(TransferError::Usage(format!(
            "{}: several sources need an existing directory as the destination (or end it with /)",
            dest.backend.display(&dest.path)
        )));
    }
    let mut out = Plan {
        files: Vec::new(),
        dirs: Vec::new(),
        dir_times: Vec::new(),
        missing: Vec::new(),
    };
    if into && !dst_is_dir {
        out.dirs.push(dest.path.clone());
    }
    // A file name that is a link to a file: the copy goes where it points
    // (cp and sftp's get do that), and the link stays.
    let dest_file = if matches!(&dst_entry, Some(e) if e.kind == EntryKind::File) && !into {
        dest.backend.resolve_link(&dest.path).await?
    } else {
        dest.path.clone()
    };
    // Each named source's stat (an HTTP HEAD, an SFTP STAT), LISTINGS in
    // flight: one after the other, 1,000 URLs named cost 1,000 round
    // trips before the first byte.
    // Several files named without -r, from a backend whose read says the
    // size (HTTP): no stat at all, the GET alone, as curl and the copy
    // loop sent it (a HEAD before each GET of 1000 x 20 kB named URLs
    // made that set 0.54-0.71x the loop's speed). A missing one then
    // fails when it is read, in its place in the report.
    let by_reading =
        |s: &Place| !opts.recursive && sources.len() > 1 && s.backend.sizes_by_reading();
    let calls: Vec<_> = sources
        .iter()
        .map(|s| async move {
            if by_reading(s) {
                return Ok(None);
            }
            s.backend.stat(&s.path).await
        })
        .collect();
    let stats: Vec<_> = futures_util::stream::iter(calls)
        .buffered(LISTINGS)
        .collect()
        .await;
    for ((i, s), stat) in sources.iter().enumerate().zip(stats) {
        let target = if into {
            path::join(&dest.path, path::basename(&s.path))
        } else {
            dest_file.clone()
        };
        // Nothing known of it but its name.
        let unknown = |target| FilePlan {
            source: i,
            src: s.path.clone(),
            dst: target,
            size: None,
            mtime: None,
            mode: None,
            no_part: false,
        };
        if by_reading(s) {
            out.files.push(unknown(target));
            continue;
        }
        let Some(e) = stat? else {
            if sources.len() == 1 {
                return Err(s.backend.missing(&s.path));
            }
            out.missing
                .push((unknown(target), s.backend.missing(&s.path)));
            continue;
        };
        match e.kind {
            EntryKind::File => out.files.push(FilePlan {
                source: i,
                src: s.path.clone(),
                dst: target,
                size: e.size,
                mtime: e.mtime,
                mode: e.mode,
                no_part: false,
            }),
            EntryKind::Dir if !opts.recursive => {
                return Err(TransferError::Usage(format!(
                    "{}: is a directory; use -r to copy it",
                    s.backend.display(&s.path)
                )))
            }
            EntryKind::Dir => walk(i, s, target, (e.mtime, e.mode), &mut out, opts, events).await?,
            EntryKind::Other => {
                return Err(TransferError::Usage(format!(
                    "{}: not a regular file or directory",
                    s.backend.display(&s.path)
                )))
            }
        }
    }
    Ok(out)
}

/// Walk a source directory, `LISTINGS` listings at a time.
async fn walk(
    source: usize,
    s: &Place,
    target: Vec<u8>,
    (mtime, mode): (Option<i64>, Option<u32>),
    out: &mut Plan,
    opts: &CopyOptions,
    events: &Emitter,
) -> Result<(), TransferError> {
    out.dirs.push(target.clone());
    if opts.preserve {
        out.dir_times.push((target.clone(), mtime, mode));
    }
    let mut pending = vec![(s.path.clone(), target)];
    let mut running = FuturesUnordered::new();
    loop {
        while running.len() < LISTINGS {
            let Some((src, dst)) = pending.pop() else {
                break;
            };
            let b = s.backend.clone();
            running.push(async move {
                let r = b.list(&src).await;
                (src, dst, r)
            });
        }
        let Some((src, dst, listed)) = running.next().await else {
            break;
        };
        let mut entries: Vec<Entry> = listed?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            if !path::safe_name(&e.name) {
                events.warn(format!(
                    "{}: skipping the entry {:?}: not a plain file name (it could write outside the destination)",
                    s.backend.display(&src),
                    String::from_utf8_lossy(&e.name)
                ));
                continue;
            }
            let (sp, dp) = (path::join(&src, &e.name), path::join(&dst, &e.name));
            match e.kind {
                EntryKind::File => out.files.push(FilePlan {
                    source,
                    src: sp,
                    dst: dp,
                    size: e.size,
                    mtime: e.mtime,
                    mode: e.mode,
                    no_part: false,
                }),
                EntryKind::Dir => {
                    out.dirs.push(dp.clone());
                    if opts.preserve {
                        out.dir_times.push((dp.clone(), e.mtime, e.mode));
                    }
                    pending.push((sp, dp));
                }
                EntryKind::Other => events.warn(format!(
                    "skipping {}: not a regular file or directory",
                    s.backend.display(&sp)
                )),
            }
        }
    }
    Ok(())
}

/// Everything one run shares.
pub(crate) struct Run {
    pub sources: Vec<Place>,
    pub dest: Place,
    pub opts: CopyOptions,
    pub stats: Arc<Stats>,
    pub events: Emitter,
    pub cancel: Cancel,
    /// Set once the backends opened connections for the work (`prepare`).
    pub prepared: tokio::sync::OnceCell<()>,
}

/// Let the backends open connections for the work ahead (`bytes`, when
/// known), once per run.
pub(crate) async fn prepare(r: &Run, bytes: Option<u64>) {
    r.prepared
        .get_or_init(|| async {
            let mut prep = vec![r.dest.backend.prepare(Role::Destination, bytes)];
            prep.extend(
                r.sources
                    .iter()
                    .map(|s| s.backend.prepare(Role::Source, bytes)),
            );
            futures_util::future::join_all(prep).await;
        })
        .await;
}

/// Copy every planned file; a report per file, in plan order.
pub(crate) async fn run(r: Arc<Run>, plan: Plan) -> Vec<FileReport> {
    let dst = &r.dest.backend;
    if r.opts.resume && !plan.files.is_empty() {
        if let Some(why) = dst.resume_refusal().await {
            r.events.warn(why);
        }
    }
    for d in &plan.dirs {
        if let Err(e) = dst.mkdir_all(d).await {
            // Every file under it will fail and say so; this says why.
            r.events.warn(e.to_string());
        }
    }
    let total: u64 = plan.files.iter().filter_map(|f| f.size).sum();
    r.stats.bytes_total.store(total, Ordering::Relaxed);
    r.stats.files_total.store(
        (plan.files.len() + plan.missing.len()) as u64,
        Ordering::Relaxed,
    );
    // Sources not found: reported as failed files, in the order named.
    let mut missing = Vec::new();
    for (f, e) in &plan.missing {
        let rep = FileReport::failed(&r, f, TransferError::from_kind(e.kind(), e.to_string()));
        r.stats.files_done.fetch_add(1, Ordering::Relaxed);
        r.events.emit(Event::FileDone(rep.clone()));
        missing.push(rep);
    }
    r.events.emit(Event::Planned {
        files: plan.files.len() as u64,
        bytes: total,
    });
    prepare(&r, Some(total)).await;
    let caps = (
        max_files(&r),
        r.sources
            .iter()
            .map(|s| s.backend.capabilities().max_files)
            .min(),
    );
    let parallel = caps.0.min(caps.1.unwrap_or(usize::MAX)).max(1);
    let gate = Arc::new(Semaphore::new(parallel));
    let mut running = FuturesUnordered::new();
    let mut reports: Vec<Option<FileReport>> = vec![None; plan.files.len()];
    let (homes, files) = HomeQueue::split(&r, plan.files);
    let pullers = HomeQueue::start(&r, &homes, &gate, !files.is_empty());
    for (i, f) in files {
        if r.cancel.is_cancelled() {
            reports[i] = Some(FileReport::failed(&r, &f, TransferError::cancelled()));
            continue;
        }
        // Wait for a slot while finishing what is done (bounded memory,
        // bounded futures).
        let permit = loop {
            if let Ok(p) = gate.clone().try_acquire_owned() {
                break p;
            }
            if let Some((j, rep)) = running.next().await {
                reports[j] = Some(rep);
            }
        };
        let run = r.clone();
        running.push(async move {
            let rep = copy_file(&run, &f).await;
            drop(permit);
            (i, rep)
        });
    }
    while let Some((j, rep)) = running.next().await {
        reports[j] = Some(rep);
    }
    // After a cancel the queues' tasks are not waited for (dropped, they
    // are aborted): a file on an FTP lane runs on the lane's own thread,
    // which nothing watches while it does. It stops at its next piece and
    // puts nothing under the final name; its file is reported cancelled
    // with the others its lane had not finished.
    let lanes_done = async move {
        for mut p in pullers {
            let _ = (&mut p.0).await;
        }
    };
    tokio::select! {
        _ = lanes_done => {}
        _ = r.cancel.cancelled() => {}
    }
    // What the backends' threads did, and what they left (a connection's
    // thread that ended): copied here instead, `parallel` at once.
    let mut left = Vec::new();
    for q in homes {
        let (done, rest) = q.finish();
        for (j, rep) in done {
            reports[j] = Some(rep);
        }
        left.extend(rest);
    }
    let copies = left.into_iter().map(|(j, f)| {
        let r = &r;
        async move {
            if r.cancel.is_cancelled() {
                return (j, FileReport::failed(r, &f, TransferError::cancelled()));
            }
            (j, copy_file(r, &f).await)
        }
    });
    let mut copies = futures_util::stream::iter(copies).buffer_unordered(parallel);
    while let Some((j, rep)) = copies.next().await {
        reports[j] = Some(rep);
    }
    if r.opts.preserve && !r.cancel.is_cancelled() {
        let dc = dst.capabilities();
        for (d, t, m) in plan.dir_times.iter().rev() {
            let t = t.filter(|_| dc.set_times);
            let m = m.filter(|_| dc.set_mode).map(|m| m & 0o7777);
            if t.is_some() || m.is_some() {
                if let Err(e) = dst.set_attrs(d, t, m).await {
                    r.events.warn(e.to_string());
                }
            }
        }
    }
    missing.extend(reports.into_iter().flatten());
    missing
}

tokio::task_local! {
    /// Set while a copy runs on a thread of the backend whose queue it
    /// came from ([`HomeQueue`]).
    static ON_HOME: ();
}

/// Is this copy running on its source's or destination's own thread
/// (the one whose queue it came from)?
fn on_home_thread() -> bool {
    ON_HOME.try_with(|_| ()).is_ok()
}

/// Small files into local files, from one source backend with threads of
/// its own ([`Backend::homes`]), or small local files to such a
/// destination: tasks on those threads take them from here one after the
/// other and copy each there, as the copy loops' workers took files from
/// their queue. Per file nothing crosses threads (a task spawned from the
/// engine onto a shard and its answer back cost 1.5x the loop's client
/// CPU for 1,000 x 20 kB over HTTPS).
struct HomeQueue {
    backend: Arc<dyn Backend>,
    state: std::sync::Mutex<HomeState>,
}

/// Files with their index in the plan.
type Queued = Vec<(usize, FilePlan)>;

#[derive(Default)]
struct HomeState {
    todo: std::collections::VecDeque<(usize, FilePlan)>,
    /// Taken and not yet done: given back if its thread ends first. A
    /// few, one a task.
    busy: Vec<(usize, FilePlan)>,
    done: Vec<(usize, FileReport)>,
}

impl HomeQueue {
    /// The files that go to a backend's threads (the source's for a
    /// download into local files, the destination's for an upload of
    /// local files), queued per backend, and the others with their index
    /// in the plan.
    fn split(r: &Run, files: Vec<FilePlan>) -> (Vec<Arc<HomeQueue>>, Queued) {
        let dst = &r.dest.backend;
        let mut queues: Vec<Arc<HomeQueue>> = Vec::new();
        // Per backend: its queue's index, if it has threads.
        let mut seen: Vec<(*const (), Option<usize>)> = Vec::new();
        let mut rest = Vec::new();
        for (i, f) in files.into_iter().enumerate() {
            let b = &r.sources[f.source].backend;
            // Of a size not known yet (URLs named, an HTML index): the
            // read that says it is made there too, and a big one goes on
            // there (its bytes arrive and are written there anyway).
            let small = match f.size {
                Some(n) => n <= b.home_file_max(),
                None => b.sizes_by_reading(),
            };
            // Downloads into local files go to the source's threads,
            // uploads of small local files to the destination's.
            let b = if small && dst.local_path(&f.dst).is_some() {
                b
            } else if f.size.is_some_and(|n| n <= dst.home_file_max())
                && b.local_path(&f.src).is_some()
            {
                dst
            } else {
                rest.push((i, f));
                continue;
            };
            let key = Arc::as_ptr(b) as *const ();
            let q = match seen.iter().find(|(k, _)| *k == key) {
                Some((_, q)) => *q,
                None => {
                    let q = (!b.homes_for(1).is_empty()).then(|| {
                        queues.push(Arc::new(HomeQueue {
                            backend: b.clone(),
                            state: Default::default(),
                        }));
                        queues.len() - 1
                    });
                    seen.push((key, q));
                    q
                }
            };
            match q {
                Some(q) => lock(&queues[q].state).todo.push_back((i, f)),
                None => rest.push((i, f)),
            }
        }
        (queues, rest)
    }

    /// Start the tasks that take from the queues, each holding one of
    /// `gate`'s slots (half of them at most when `others` wait too),
    /// shared out among the queues.
    fn start(
        r: &Arc<Run>,
        queues: &[Arc<HomeQueue>],
        gate: &Arc<Semaphore>,
        others: bool,
    ) -> Vec<AbortOnDrop<()>> {
        let mut out = Vec::new();
        let mut slots = gate.available_permits();
        if others {
            slots = slots.div_ceil(2);
        }
        let per_queue = (slots / queues.len().max(1)).max(1);
        for q in queues {
            let files = lock(&q.state).todo.len();
            let homes = q.backend.homes_for(per_queue.min(files));
            let per_home = (per_queue.min(files) / homes.len().max(1)).max(1);
            for rt in homes {
                for _ in 0..per_home {
                    let Ok(permit) = gate.clone().try_acquire_owned() else {
                        break;
                    };
                    let (r, q) = (r.clone(), q.clone());
                    out.push(AbortOnDrop(rt.spawn(async move {
                        let _permit = permit;
                        while let Some((i, f)) = q.take() {
                            let rep = ON_HOME.scope((), copy_file(&r, &f)).await;
                            q.done(i, rep);
                        }
                    })));
                }
            }
        }
        out
    }

    fn take(&self) -> Option<(usize, FilePlan)> {
        let mut s = lock(&self.state);
        let (i, f) = s.todo.pop_front()?;
        s.busy.push((i, f.clone()));
        Some((i, f))
    }

    fn done(&self, i: usize, rep: FileReport) {
        let mut s = lock(&self.state);
        if let Some(k) = s.busy.iter().position(|(j, _)| *j == i) {
            s.busy.swap_remove(k);
        }
        s.done.push((i, rep));
    }

    /// The reports, and the files no thread finished.
    fn finish(&self) -> (Vec<(usize, FileReport)>, Queued) {
        let mut s = lock(&self.state);
        let mut left: Vec<_> = s.busy.drain(..).collect();
        left.extend(s.todo.drain(..));
        left.sort_by_key(|(i, _)| *i);
        (std::mem::take(&mut s.done), left)
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn max_files(r: &Run) -> usize {
    r.opts
        .parallel
        .unwrap_or(usize::MAX)
        .min(r.dest.backend.capabilities().max_files)
}

/// How a file is written.
struct Target {
    /// Where the bytes go: the part name, or the final name.
    write: Vec<u8>,
    /// Renamed over the final name when complete.
    renamed: bool,
}

/// A file's copy that failed, and what it knows it left behind.
struct Failed {
    error: TransferError,
    /// No part file is left for a `--resume` to continue, whatever the
    /// destination: said by the copy that knows it (`copy_in_one_job`).
    nothing_kept: bool,
}

impl From<TransferError> for Failed {
    fn from(error: TransferError) -> Self {
        Failed {
            error,
            nothing_kept: false,
        }
    }
}

pub(crate) async fn copy_file(r: &Arc<Run>, f: &FilePlan) -> FileReport {
    // Shown once: the event's names are the report's.
    let (source, dest) = crate::transfer::shown(r, f);
    r.events.emit(Event::FileStarted {
        source: source.clone(),
        dest: dest.clone(),
        size: f.size,
    });
    let result = copy_file_inner(r, f).await;
    let rep = FileReport::of(source, dest, result.map_err(|e| explain(r, f, e)));
    r.stats.files_done.fetch_add(1, Ordering::Relaxed);
    r.events.emit(Event::FileDone(rep.clone()));
    rep
}

/// A file's failure as the user reads it: naming the file (a lost
/// connection names only the server), and saying that `--resume`
/// continues where a part file was kept.
fn explain(r: &Run, f: &FilePlan, failed: Failed) -> TransferError {
    let Failed {
        error: e,
        nothing_kept,
    } = failed;
    let kind = e.kind();
    if matches!(kind, ErrorKind::Cancelled | ErrorKind::Usage) {
        return e;
    }
    let (src, dst) = (&r.sources[f.source].backend, &r.dest.backend);
    let (sd, dd) = (src.display(&f.src), dst.display(&f.dst));
    let mut msg = e.to_string();
    if !msg.contains(&sd) && !msg.contains(&dd) {
        msg = format!("{sd}: {msg}");
    }
    let (sc, dc) = (src.capabilities(), dst.capabilities());
    // Not where a backend's message says what --resume does in its own
    // words (SFTP's lost connection: `TransferError::sftp`).
    let kept = matches!(kind, ErrorKind::Network)
        && !nothing_kept
        && dc.rename_over
        && f.size.is_some_and(|s| s > WHOLE_FILE)
        && !msg.contains("--resume");
    if kept {
        msg.push_str(match (r.opts.resume, sc.ranged_read && dc.continues()) {
            (true, _) => {
                "; the part file is kept: run the same command again (with --resume) to continue"
            }
            (false, true) => {
                "; the part file is kept: run the same command with --resume to continue"
            }
            (false, false) => "; run the same command again (--resume cannot continue this pair)",
        });
    }
    TransferError::from_kind(kind, msg)
}

async fn copy_file_inner(r: &Arc<Run>, f: &FilePlan) -> Result<u64, Failed> {
    let src = &r.sources[f.source].backend;
    let dst = &r.dest.backend;
    let (sc, dc) = (src.capabilities(), dst.capabilities());
    let target = if dc.rename_over {
        Target {
            write: path::part_name(&f.dst),
            renamed: true,
        }
    } else {
        Target {
            write: f.dst.clone(),
            renamed: false,
        }
    };
    // --resume for this file. Written under a part name, all there is to
    // continue is that part file (and its record beside it): not where the
    // caller saw in a listing that there is none.
    let resume = r.opts.resume && !(f.no_part && target.renamed);
    // A part file here can be continued later (from a record, or from its
    // length where it was written in order).
    let resumable = target.renamed && dc.continues() && sc.ranged_read;
    // A listing without sizes (an HTML index): the read itself says the
    // size, the time for -p and the validators a later resume needs, so
    // the file costs one request (a stat before it made two round trips
    // a file). The stat still comes first where the size must be known
    // before any byte moves: a part file --resume may continue, a
    // server that may copy by itself, a backend that cannot.
    let mut first: Option<Box<dyn ByteStream>> = None;
    let mut first_info: Option<ReadInfo> = None;
    // The plan said the size: the source is asked again before the rename.
    let listed = f.size.is_some();
    let learned;
    let f = match f.size {
        Some(_) => f,
        None => {
            let server_side = dc.server_copy
                && (target.renamed || dc.atomic_write)
                && src.endpoint_key() == dst.endpoint_key()
                && !resume;
            let may_resume = resume
                && if target.renamed {
                    resumable && dst.stat(&target.write).await?.is_some()
                } else {
                    sc.ranged_read
                };
            let opened = if server_side || may_resume {
                None
            } else {
                retried(r, |_| src.read_unsized(&f.src)).await?
            };
            learned = match opened {
                Some(o) => {
                    first = Some(o.stream);
                    first_info = Some(o.info);
                    FilePlan {
                        size: o.size,
                        mtime: f.mtime.or(o.mtime),
                        ..f.clone()
                    }
                }
                None => match retried(r, |_| src.stat(&f.src)).await? {
                    None => return Err(src.missing(&f.src).into()),
                    Some(e) if e.kind != EntryKind::File => {
                        return Err(TransferError::Remote(format!(
                            "{}: not a regular file any more",
                            src.display(&f.src)
                        ))
                        .into())
                    }
                    Some(e) => FilePlan {
                        size: e.size,
                        mtime: f.mtime.or(e.mtime),
                        ..f.clone()
                    },
                },
            };
            // The plan's total had nothing of this file: it grows as
            // sizes are learned (by the bytes as they come, below, where
            // nothing says the size).
            if let Some(n) = learned.size {
                r.stats.bytes_total.fetch_add(n, Ordering::Relaxed);
            }
            &learned
        }
    };
    let Some(size) = f.size else {
        return Ok(copy_unsized(r, f, &target, first).await?);
    };

    // One server holds both ends and can copy by itself (into a part
    // file, or, where writes appear whole, the final name: S3's
    // CopyObject).
    if dc.server_copy
        && (target.renamed || dc.atomic_write)
        && src.endpoint_key() == dst.endpoint_key()
        && !resume
        && dst.copy_within(&f.src, &target.write, size).await?
    {
        tracing::info!("{}: copied on the server (copy-data)", dst.display(&f.dst));
        r.stats.bytes_done.fetch_add(size, Ordering::Relaxed);
        finalize(r, f, &target, size, false).await?;
        return Ok(size);
    }

    // What is left to move: all of it, or with --resume what an earlier
    // run's part file (and its record, for a split file) lacks.
    let mut missing = vec![(0, size)];
    let streams = r
        .opts
        .streams
        .unwrap_or(sc.max_ranges.min(dc.max_ranges))
        .clamp(1, 64);
    // Split when big enough, or when --streams asked for ranges and each
    // gets at least MIN_RANGE; a file whose size came with its first read
    // goes on in that one stream.
    let asked = r.opts.streams.is_some() && size >= 2 * MIN_RANGE;
    let splittable = first.is_none() && sc.ranged_read && dc.offset_write && target.renamed;
    // A big file on a long path, where one connection is held by its
    // window or its losses: its ranges are widened over more connections
    // as measured (widen.rs), even where the protocol's default is one.
    let long_path = long_path(src.as_ref(), dst.as_ref());
    let widening = splittable
        && r.opts.streams.is_none()
        && r.opts.max_streams > 1
        && size >= widen::WIDEN_MIN
        && long_path.is_some();
    let may_split = splittable && ((size >= r.opts.split_min || asked) && streams > 1 || widening);
    // What this file allows (an HTTP server may ignore ranges for it), and
    // its version for the record: asked only where it matters.
    let info = if let Some(i) = first_info {
        i
    } else if size > WHOLE_FILE && (may_split || resumable) {
        src.read_info(&f.src).await?
    } else {
        ReadInfo {
            ranges: sc.ranged_read,
            ..ReadInfo::default()
        }
    };
    // A destination that can only append (FTP's APPE) continues one
    // stream from the part's length; the record of split copies needs
    // offset writes.
    if resume && resumable {
        let record = path::side_name(&f.dst, RECORD);
        missing = resume_missing(r, f, &target.write, &record, size, &info).await?;
        let have = size - span(&missing);
        if have > 0 {
            r.events.warn(format!(
                "{}: resuming: {have} of {size} bytes are already there",
                dst.display(&f.dst)
            ));
        }
    }
    // A destination where files appear whole that kept what a cut
    // write sent (ferry serve's ranged PUT): continue after it.
    if resume && !target.renamed && sc.ranged_read {
        if let Some(u) = dst.unfinished(&f.dst, size).await? {
            let from = continue_unfinished(r, f, &u, size).await?;
            if from > 0 {
                r.events.warn(format!(
                    "{}: resuming: {from} of {size} bytes are already there",
                    dst.display(&f.dst)
                ));
                missing = vec![(from, size)];
            }
        }
    }
    let fresh = missing == [(0, size)];
    // A whole file between a local disk and a backend that moves it in
    // one job on its own thread (FTP, both ways). Not where the engine
    // asks a remote source again before the rename, nor for a --resume
    // (its record and checks), nor for a big file, which a retry would
    // send again from its start.
    let one_job = fresh
        && first.is_none()
        && !resume
        && size <= ONE_JOB_MAX
        && !may_split
        // A local source is asked again by the job itself (an fstat).
        && (!(listed && src.stat_as_listed()) || src.local_path(&f.src).is_some());
    if one_job {
        if let Some(res) = copy_in_one_job(r, f, &target, size).await {
            return res;
        }
    }
    if fresh && size <= WHOLE_FILE {
        return Ok(copy_whole(r, f, &target, size, first).await?);
    }
    let record = path::side_name(&f.dst, RECORD);
    // Where files appear whole (an HTTP PUT), the server puts the file
    // under its final name as its last byte arrives: the source is asked
    // again before that byte goes (a file of WHOLE_FILE or less is one
    // read, and not asked). `checked`: it was, and had not changed.
    let checked = std::sync::atomic::AtomicBool::new(false);
    let end_check = (listed && !target.renamed && src.stat_as_listed()).then_some(&checked);
    let todo = span(&missing);
    let asked = r.opts.streams.is_some() && todo >= 2 * MIN_RANGE;
    let widening = widening && info.ranges && todo >= widen::WIDEN_MIN;
    let split = may_split && info.ranges && (todo >= r.opts.split_min || asked || widening);
    // The source's version noted beside a part written in order, so a
    // later --resume knows whether the file changed in between.
    let in_order_record = !split && resumable && info.ranges && info.version.is_some();
    let mut rec = Record {
        path: record.clone(),
        journal: journal::Journal {
            size,
            mtime: record_mtime(f),
            done: journal::missing(&missing, size),
            version: info.version.clone(),
            in_order: !split,
        },
    };
    if fresh {
        // Create (or truncate) first, so ranges write into one file.
        let sink = dst
            .write(
                &target.write,
                WriteMode::Create { perm: f.perm() },
                Some(size),
            )
            .await?;
        if split || size == 0 {
            sink.finish().await?;
        } else {
            if in_order_record {
                rec.save(dst.as_ref()).await?;
            }
            let pumped = pump_with_retry(
                r,
                f,
                &target,
                0,
                size,
                (Some(sink), first),
                end_check,
                &mut 0,
                &mut None,
            )
            .await;
            if let Err(e) = pumped {
                // The server's own word against its bytes (a digest that
                // does not match): what arrived is not worth keeping.
                if info.digest.is_some() && e.kind() == ErrorKind::Remote {
                    discard(dst.as_ref(), &target.write, &record).await;
                }
                return Err(e.into());
            }
            if in_order_record {
                let _ = dst.remove(&record).await;
            }
            if listed {
                let asked = checked.load(Ordering::Acquire);
                source_unchanged(r, f, &target, &record, asked).await?;
            }
            // One stream into a truncated file, every byte counted and
            // acknowledged: its size needs no second look.
            finalize(r, f, &target, size, true).await?;
            return Ok(size);
        }
    }
    // The whole file's CRC32 from its ranges', when they were taken.
    let mut known_crc32 = None;
    if todo > 0 {
        if split || in_order_record {
            // Before the first byte: a split part file has holes until
            // every range is in, and only this record says where they are
            // (a hard kill leaves it erring on the side of sending again).
            rec.save(dst.as_ref()).await?;
        }
        let mut n = if split {
            streams.min((todo / MIN_RANGE).max(1) as usize)
        } else {
            1
        };
        // One stream is one write from where it starts (a ranged PUT
        // says its whole range up front); split ranges go in pieces the
        // record notes as they complete. A widened file is cut finer, so
        // that there are pieces for the connections it may grow to.
        // `--streams N` read from a server on a long path is cut finer
        // too: its extra connections join after the first ranges started,
        // and a read stays on the connection it started on (run
        // streams-long-1: SFTP download 12.7 -> 10.9 s at loss100). An
        // upload's writes wait for the joining connections, and there
        // each piece only costs round trips: an upload of a local file is
        // cut coarser ([`UPLOAD_WIDEN_PIECES`]) and `--streams` keeps N.
        let local_source = src.local_path(&f.src).is_some();
        let pieces = if local_source {
            UPLOAD_WIDEN_PIECES
        } else {
            WIDEN_PIECES
        };
        let fine = (todo / pieces).clamp(MIN_WIDEN_CHUNK, MAX_CHUNK);
        let mut wider = match long_path {
            Some(rtt) if widening => Some(widen::Widening::new(
                n.max(widen_start(r, f)),
                r.opts.max_streams,
                rtt,
                Instant::now(),
                r.stats.bytes_done.load(Ordering::Relaxed),
            )),
            _ => None,
        };
        // Where each range read is a data connection of its own (FTP), a
        // piece costs a new connection's slow start and several round
        // trips, so the ranges are not cut finer: one piece for each range
        // the file starts on, as `lftp pget -n 8` does (run ftp-wide-1).
        let per_connection = src.range_opens_connection() || dst.range_opens_connection();
        let chunk = if split && per_connection {
            let ranges = wider.as_ref().map_or(n, widen::Widening::ranges);
            todo.div_ceil(ranges as u64).min(MAX_CHUNK)
        } else if widening {
            fine
        } else if split && long_path.is_some() && !local_source {
            fine.min(todo.div_ceil(n as u64))
        } else if split {
            todo.div_ceil(n as u64).min(MAX_CHUNK)
        } else {
            todo
        };
        if let Some(w) = &wider {
            n = w.ranges();
            if n > 1 {
                n = widen_to(r, f, n).await.max(1);
            }
        }
        let mut queue = chunks(&missing, chunk).into_iter();
        // A fresh split download checked against the CRC32 the store keeps
        // (S3): each range's CRC32 is taken as its bytes pass, and the
        // whole file's is combined from them, so the part file is not read
        // a second time after its last byte (run s3-3: 1 GiB 0.90 -> 0.76
        // s, client 0.94 -> 0.81 CPU-s).
        let crc_as_they_pass = fresh
            && info.digest_parts.is_empty()
            && matches!(info.digest, Some((HashAlgo::Crc32, _)));
        let mut range_crcs = crc_as_they_pass.then(Vec::new);
        let mut running = FuturesUnordered::new();
        let mut failed = None;
        let target = &target;
        loop {
            // After a failure no new range starts; those in flight finish
            // (or stop on a cancel), so the record keeps what they moved.
            while running.len() < n && failed.is_none() {
                let Some((at, len)) = queue.next() else { break };
                running.push(async move {
                    let mut kept = 0;
                    let mut crc = crc_as_they_pass.then(crc32fast::Hasher::new);
                    let opened = (None, None);
                    let pumped = pump_with_retry(
                        r, f, target, at, len, opened, end_check, &mut kept, &mut crc,
                    );
                    match pumped.await {
                        Ok(()) => (at, len, crc, None),
                        Err(e) => (at, kept, None, Some(e)),
                    }
                });
            }
            let tick = wider.as_ref().and_then(widen::Widening::next_tick);
            let res = tokio::select! {
                res = running.next() => res,
                _ = sleep_until(tick), if tick.is_some() => {
                    if let Some(w) = wider.as_mut() {
                        let want = w.tick(Instant::now(), r.stats.bytes_done.load(Ordering::Relaxed));
                        if want > n {
                            n = widen_to(r, f, want).await.max(n);
                            tracing::debug!("{}: {n} ranges in flight", dst.display(&f.dst));
                        }
                    }
                    continue;
                }
            };
            let Some(res) = res else {
                break;
            };
            // What is in: the whole range, or what a failed one kept.
            let (at, len, crc, err) = res;
            if let Some(v) = range_crcs.as_mut() {
                match crc {
                    Some(crc) => v.push(RangeCrc { at, len, crc }),
                    // Not hashed as it passed: the part is read instead.
                    None => range_crcs = None,
                }
            }
            if split && len > 0 {
                rec.journal.done.push((at, at + len));
                rec.journal.done = journal::merge(std::mem::take(&mut rec.journal.done));
                // Best effort: a record one range behind only sends
                // that range again.
                let _ = rec.save(dst.as_ref()).await;
            }
            if let Some(e) = err {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        known_crc32 = range_crcs.and_then(|v| whole_crc32(v, size));
    }
    if listed {
        let asked = checked.load(Ordering::Acquire);
        source_unchanged(r, f, &target, &record, asked).await?;
    }
    // Split or resumed: no one response carried the whole file, so the
    // part is checked where it lies.
    check_digest(r, f, &target, &record, &info, known_crc32).await?;
    finalize(r, f, &target, size, false).await?;
    if split || !fresh {
        let _ = dst.remove(&record).await;
    }
    Ok(todo)
}

/// Ranges of a split file are moved in pieces of this size or less, each
/// noted in the resume record when it is in.
const MAX_CHUNK: u64 = 64 * 1024 * 1024;
/// A widened file is cut into about this many pieces (32 MiB for 1 GiB)...
const WIDEN_PIECES: u64 = 32;
/// A widened upload of a local file is cut into about this many pieces
/// (64 MiB for 512 MiB): each piece costs its connection round trips to
/// open and close, and its writes wait for the connections still joining
/// anyway. At loss100, 512 MiB to ferry serve, each range on a connection
/// of its own: 12.95 s with 32 pieces, 9.57 s with 8 (run streams-long-1).
const UPLOAD_WIDEN_PIECES: u64 = 8;
/// ...of at least this size: each piece's start costs its connection a
/// round trip, 1% of a piece at 100 MB/s and 100 ms.
const MIN_WIDEN_CHUNK: u64 = 8 * 1024 * 1024;

/// The round trip of the longer of the two paths when it is long
/// ([`ferry_tcp::LONG_PATH`], 10 ms): a file there may be widened. Below
/// it (loopback, a LAN) one connection is not what holds a transfer, and
/// more would only cost CPU.
fn long_path(src: &dyn Backend, dst: &dyn Backend) -> Option<Duration> {
    [src.round_trip(), dst.round_trip()]
        .into_iter()
        .flatten()
        .max()
        .filter(|&d| ferry_tcp::is_long(d))
}

/// Ranges a widened file starts on: the larger of its two ends' wish.
fn widen_start(r: &Run, f: &FilePlan) -> usize {
    let src = r.sources[f.source].backend.widen_start();
    src.max(r.dest.backend.widen_start())
}

/// Ask both ends of file `f` to let `want` ranges each have a connection:
/// how many they can take now.
async fn widen_to(r: &Run, f: &FilePlan, want: usize) -> usize {
    let src = r.sources[f.source].backend.widen(Role::Source, want);
    let dst = r.dest.backend.widen(Role::Destination, want);
    let (s, d) = futures_util::future::join(src, dst).await;
    s.min(d).min(want).max(1)
}

/// Sleep until `at`; never wakes without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
/// The smallest range `--streams` splits a file into below `split_min`.
const MIN_RANGE: u64 = 1024 * 1024;

fn span(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().map(|(a, b)| b - a).sum()
}

/// `[start, end)` ranges cut into `(offset, length)` pieces of at most
/// `chunk` bytes.
fn chunks(ranges: &[(u64, u64)], chunk: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(mut a, b) in ranges {
        while a < b {
            let len = chunk.max(1).min(b - a);
            out.push((a, len));
            a += len;
        }
    }
    out
}

/// The suffix of a split file's resume record beside it
/// (`.NAME.ferry-resume`).
const RECORD: &[u8] = b".ferry-resume";

fn record_mtime(f: &FilePlan) -> u32 {
    f.mtime.unwrap_or(0).clamp(0, u32::MAX as i64) as u32
}

/// The resume record of a split file, `.NAME.ferry-resume` beside the
/// final name on the destination: which ranges of the part file are in.
struct Record {
    path: Vec<u8>,
    journal: journal::Journal,
}

impl Record {
    async fn save(&self, dst: &dyn Backend) -> Result<(), TransferError> {
        let text = journal::encode(&self.journal);
        dst.put_whole(None, &self.path, bytes::Bytes::from(text), None, None, None)
            .await
    }
}

/// With `--resume`: the ranges still missing from the part file. A
/// resume record (a split copy) says which ranges are in; without one the
/// part was written in order, and its length counts if its last bytes are
/// the source's. A record that cannot be read, or that belongs to another
/// version of the source, means starting over.
async fn resume_missing(
    r: &Run,
    f: &FilePlan,
    part: &[u8],
    record: &[u8],
    size: u64,
    info: &ReadInfo,
) -> Result<Vec<(u64, u64)>, TransferError> {
    let dst = &r.dest.backend;
    let src = &r.sources[f.source].backend;
    let all = vec![(0, size)];
    let Some(pe) = dst.stat(part).await? else {
        return Ok(all);
    };
    if !info.ranges {
        r.events.warn(format!(
            "{}: the server does not continue downloads (it ignores byte ranges); starting over",
            src.display(&f.src)
        ));
        return Ok(all);
    }
    if let Some(re) = dst.stat(record).await? {
        let n = re.size.unwrap_or(0).min(64 * 1024);
        let text = read_all(dst.as_ref(), record, 0, n).await?;
        let j = journal::decode(&String::from_utf8_lossy(&text));
        let have = pe.size.unwrap_or(0);
        match j {
            // The source has another version than the part was made of.
            Some(j) if j.version.is_some() && j.version != info.version => {
                r.events.warn(format!(
                    "{}: the file changed on the server since the partial copy; starting over",
                    src.display(&f.src)
                ));
                // A copy in one stream writes no record: this one would
                // stay beside the final file.
                let _ = dst.remove(record).await;
                return Ok(all);
            }
            // Written in order: the part's length counts (checked below).
            Some(j) if j.in_order && j.size == size => {}
            // A split part's length reaches the end of every range in it;
            // a record claiming more is stale (the part was written anew
            // in order since), and the part's length says what is there.
            Some(j) if j.done.iter().any(|&(_, end)| end > have) => {}
            Some(j) if j.size == size && j.mtime == record_mtime(f) => {
                return Ok(journal::missing(&j.done, size));
            }
            _ => {
                r.events.warn(format!(
                    "{}: the resume record is unreadable or for another version of the source; starting over",
                    dst.display(record)
                ));
                let _ = dst.remove(record).await;
                return Ok(all);
            }
        }
    }
    let from = resume_point(r, f, part, pe.size.unwrap_or(0), size).await?;
    Ok(vec![(from, size)])
}

/// Where an unfinished write on the destination goes on: after what it
/// holds, if the SHA-256 of its last block equals the source's same bytes
/// (the check a part file's tail gets); else 0, said. When all is there
/// but the write was never completed, the last byte is sent again so the
/// server completes it.
async fn continue_unfinished(
    r: &Run,
    f: &FilePlan,
    u: &Unfinished,
    size: u64,
) -> Result<u64, TransferError> {
    use sha2::Digest;
    let src = &r.sources[f.source].backend;
    let same = match u.tail {
        Some((a, want)) if u.have <= size && a < u.have => {
            let block = read_all(src.as_ref(), &f.src, a, u.have - a).await?;
            sha2::Sha256::digest(&block).as_slice() == want.as_slice()
        }
        _ => false,
    };
    if !same {
        r.events.warn(format!(
            "{}: the partial upload on the server ({} bytes) is not the start of {}; starting over",
            r.dest.backend.display(&f.dst),
            u.have,
            src.display(&f.src)
        ));
        return Ok(0);
    }
    Ok(u.have.min(size.saturating_sub(1)))
}

/// One range's CRC32, taken as its bytes passed through [`pump`].
struct RangeCrc {
    at: u64,
    len: u64,
    crc: crc32fast::Hasher,
}

/// The CRC32 of a file of `size` bytes (big-endian, as S3 keeps it) from
/// the CRC32s of ranges that cover it exactly, in any order; `None` when
/// they leave a gap, overlap or run past its end.
fn whole_crc32(mut ranges: Vec<RangeCrc>, size: u64) -> Option<Vec<u8>> {
    ranges.sort_by_key(|r| r.at);
    let mut all = crc32fast::Hasher::new();
    let mut next = 0;
    for r in ranges {
        if r.at != next {
            return None;
        }
        all.combine(&r.crc);
        next = r.at.checked_add(r.len)?;
    }
    (next == size).then(|| all.finalize().to_be_bytes().to_vec())
}

/// A split copy against the digest the server announced for the whole
/// file (ferry serve's `Repr-Digest`, S3's CRC32): `known`, when its
/// ranges were hashed as they passed, else hashed where the part file
/// lives; a mismatch removes the part, and the final name is left alone.
async fn check_digest(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    record: &[u8],
    info: &ReadInfo,
    known: Option<Vec<u8>>,
) -> Result<(), TransferError> {
    let Some((algo, want)) = &info.digest else {
        return Ok(());
    };
    let dst = &r.dest.backend;
    let got = if let Some(h) = known.filter(|_| *algo == HashAlgo::Crc32) {
        Some(h)
    } else if info.digest_parts.is_empty() {
        dst.hash(&target.write, *algo).await?
    } else {
        Some(
            crate::hash::composite_by_reading(dst.as_ref(), &target.write, &info.digest_parts)
                .await?,
        )
    };
    let Some(got) = got else {
        return Ok(());
    };
    if &got == want {
        return Ok(());
    }
    discard(dst.as_ref(), &target.write, record).await;
    Err(TransferError::Remote(format!(
        "{}: the data does not match the server's digest ({}); nothing was kept",
        r.sources[f.source].backend.display(&f.src),
        algo.name()
    )))
}

/// The source asked again before the rename of a file moved in ranges or
/// a stream (a small file is one read), where a listing and a stat say
/// its time alike (a local file, SFTP; an FTP LIST or an HTML index says
/// minutes where MDTM or HEAD say seconds, and a size learned from the
/// read itself is checked by the read): its size and time must still be
/// the plan's. A file rewritten or cut during the copy is then not put
/// under the final name, and its part is removed: it mixes two versions,
/// which a `--resume` checking only its tail could not tell. A rewrite
/// within the same second, keeping the size, is not seen.
///
/// Where files appear whole (an HTTP PUT, S3) the file is complete on
/// the server already; `asked_before_the_end`: the source was asked, and
/// unchanged, after its last bytes were read and before they went
/// ([`pump`]'s `end_check`), so the server holds the version read. A
/// change since is still the copy's failure, as before a rename (the
/// destination is not the source as it is), said as what it is.
async fn source_unchanged(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    record: &[u8],
    asked_before_the_end: bool,
) -> Result<(), TransferError> {
    let src = &r.sources[f.source].backend;
    if !src.stat_as_listed() || !source_changed(r, f).await? {
        return Ok(());
    }
    let why = changed_why(r, f);
    if !target.renamed {
        // The server took it as complete already. Said, not removed.
        let dst = r.dest.backend.display(&f.dst);
        return Err(TransferError::Remote(if asked_before_the_end {
            format!(
                "{why}; it changed after it was read, so {dst} holds it as it was: copy it again"
            )
        } else {
            format!("{why}; {dst} holds a copy that mixes both versions: copy it again")
        }));
    }
    discard(r.dest.backend.as_ref(), &target.write, record).await;
    Err(changed_error(r, f))
}

/// The source's size or time is not the plan's any more (or it is gone).
async fn source_changed(r: &Run, f: &FilePlan) -> Result<bool, TransferError> {
    let src = &r.sources[f.source].backend;
    let now = retried(r, |_| src.stat(&f.src)).await?;
    Ok(match now {
        None => true,
        Some(e) => {
            (e.size.is_some() && e.size != f.size)
                || (f.mtime.is_some() && e.mtime.is_some() && e.mtime != f.mtime)
        }
    })
}

fn changed_why(r: &Run, f: &FilePlan) -> String {
    format!(
        "{}: the file changed during the copy (its size or time is not what it was)",
        r.sources[f.source].backend.display(&f.src)
    )
}

/// A file whose source changed during its copy, failed before anything
/// went under its final name.
fn changed_error(r: &Run, f: &FilePlan) -> TransferError {
    TransferError::Remote(format!(
        "{}; nothing was kept, copy it again",
        changed_why(r, f)
    ))
}

/// The source changed before the last piece of a file went to a
/// destination that takes files whole: the write was cut, so the server
/// never completed it; what a server keeps of a cut write (ferry serve's
/// ranged PUT) mixes both versions and goes too.
async fn changed_before_the_end(r: &Run, f: &FilePlan) -> TransferError {
    if let Err(e) = r.dest.backend.discard_unfinished(&f.dst).await {
        tracing::debug!("{}: {e}", r.dest.backend.display(&f.dst));
    }
    changed_error(r, f)
}

/// Remove a part file and its resume record: their bytes are not the
/// source's, so a `--resume` must not continue them.
async fn discard(dst: &dyn Backend, part: &[u8], record: &[u8]) {
    let _ = dst.remove(part).await;
    let _ = dst.remove(record).await;
}

/// Files up to this size are read whole and written with one
/// `put_whole`, with retries as a range's.
pub(crate) const WHOLE_FILE: u64 = 256 * 1024;

/// A small file in one read and one `put_whole`.
async fn copy_whole(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    size: u64,
    mut first: Option<Box<dyn ByteStream>>,
) -> Result<u64, TransferError> {
    let src = &r.sources[f.source].backend;
    let dst = &r.dest.backend;
    let (mtime, mode) = kept_attrs(r, f);
    let part = target.renamed.then_some(target.write.as_slice());
    let stall = r.opts.timeout;
    let to_local = dst.local_path(&f.dst).is_some();
    // A local file to a destination that reads it on its own thread.
    let local = src.local_path(&f.src).filter(|_| first.is_none());
    // Already on the source's thread ([`HomeQueue`]): read and written
    // right here. On the destination's, a local source is read here.
    let here = to_local && on_home_thread();
    let read_here = !to_local && local.is_some() && on_home_thread();
    retried(r, |_| {
        // The read that said the size, on the first attempt.
        let opened = first.take();
        // From a backend with threads of its own into a local file: read
        // and written on the source's thread ([`Backend::home`]), asked
        // each attempt (a lost connection's thread is gone).
        let home = if to_local && !here {
            src.home(&f.src)
        } else {
            None
        };
        let local = local.as_deref();
        let once = async move {
            if r.cancel.is_cancelled() {
                return Err(TransferError::cancelled());
            }
            if here || home.is_some() {
                let (from, p, to) = (src.clone(), f.src.clone(), f.dst.clone());
                let part = part.map(<[u8]>::to_vec);
                let (cancel, perm) = (r.cancel.clone(), f.perm());
                let job = async move {
                    let data = read_whole(from.as_ref(), &p, size, opened, stall).await?;
                    if cancel.is_cancelled() {
                        return Err(TransferError::cancelled());
                    }
                    crate::backend::local::write_whole(
                        part.as_deref(),
                        &to,
                        &data,
                        perm,
                        mtime,
                        mode,
                    )
                };
                let Some(rt) = home else {
                    // Already on the source's thread.
                    return job.await;
                };
                let mut job = AbortOnDrop(rt.spawn(job));
                return (&mut job.0).await.unwrap_or_else(|e| {
                    Err(TransferError::Network(format!(
                        "{}: the connection's thread ended: {e}",
                        src.display(&f.src)
                    )))
                });
            }
            if let Some(from) = local {
                let put = dst.put_local(part, &f.dst, from, size, f.perm(), mtime, mode);
                match tokio::time::timeout(stall, put).await {
                    Err(_) => return Err(stalled(dst.as_ref(), &f.dst, stall)),
                    Ok(Some(res)) => return res,
                    Ok(None) => {}
                }
            }
            let data = match local {
                // A small local file, on a thread of the destination's own
                // (no trip to a blocking thread and back).
                Some(from) if read_here => {
                    bytes::Bytes::from(crate::backend::local::read_start(from, size)?)
                }
                _ => read_whole(src.as_ref(), &f.src, size, opened, stall).await?,
            };
            if r.cancel.is_cancelled() {
                return Err(TransferError::cancelled());
            }
            tokio::time::timeout(
                stall,
                dst.put_whole(part, &f.dst, data, f.perm(), mtime, mode),
            )
            .await
            .map_err(|_| stalled(dst.as_ref(), &f.dst, stall))?
        };
        async move {
            tokio::select! {
                biased;
                _ = r.cancel.cancelled() => Err(TransferError::cancelled()),
                res = once => res,
            }
        }
    })
    .await?;
    r.stats.bytes_done.fetch_add(size, Ordering::Relaxed);
    Ok(size)
}

/// The time and mode `f`'s copy is given: with `-p`, where the
/// destination keeps them.
fn kept_attrs(r: &Run, f: &FilePlan) -> (Option<i64>, Option<u32>) {
    if !r.opts.preserve {
        return (None, None);
    }
    let dc = r.dest.backend.capabilities();
    let mtime = f.mtime.filter(|_| dc.set_times);
    let mode = f.mode.filter(|_| dc.set_mode).map(|m| m & 0o7777);
    (mtime, mode)
}

/// The largest file moved in one job on a backend's thread
/// ([`Backend::get_local`], [`Backend::put_from_local`]): a lost
/// connection sends it again whole.
pub(crate) const ONE_JOB_MAX: u64 = 16 * 1024 * 1024;

/// `f` moved whole in one job on a thread of the remote side's own: made
/// into a local file by its source ([`Backend::get_local`]), or sent from
/// a local file by its destination ([`Backend::put_from_local`]). Watched
/// for progress, stalls and a cancel as a range is; again from its start
/// after a lost connection. `None`: neither side does.
async fn copy_in_one_job(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    size: u64,
) -> Option<Result<u64, Failed>> {
    let src = &r.sources[f.source].backend;
    let dst = &r.dest.backend;
    let (mtime, mode) = kept_attrs(r, f);
    // Into a local file: where it goes. Else from a local file: where
    // it is.
    let into = match dst.local_path(&f.dst) {
        Some(to) if target.renamed => Some((to, Some(dst.local_path(&target.write)?))),
        Some(to) => Some((to, None)),
        None => None,
    };
    // From a local file only under a part name: the job's check of the
    // source comes before the rename, and a write that appears whole as
    // it ends (HTTP) would be there before it.
    let from = match into {
        Some(_) => None,
        None if target.renamed => Some(src.local_path(&f.src)?),
        None => return None,
    };
    let shown = match into {
        Some(_) => src.display(&f.src),
        None => dst.display(&f.dst),
    };
    let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let res = retried(r, |_| {
        // Counted and told to stop by itself: on an FTP lane the job runs
        // on this task's thread, and `on_home` cannot look until it ends.
        let progress = Arc::new(RangeProgress::of_run(r.cancel.clone(), r.stats.clone()));
        let job = match (&into, &from) {
            (Some((to, part)), _) => src.get_local(
                &f.src,
                LocalTarget {
                    part: part.clone(),
                    to: to.clone(),
                    len: size,
                    perm: f.perm(),
                    mtime,
                    mode,
                    shown: shown.clone(),
                    progress: progress.clone(),
                },
            ),
            (None, Some(path)) => dst.put_from_local(
                target.renamed.then_some(target.write.as_slice()),
                &f.dst,
                LocalSource {
                    path: path.clone(),
                    len: size,
                    mtime: f.mtime,
                    progress: progress.clone(),
                    changed: changed.clone(),
                },
            ),
            (None, None) => None,
        };
        let (shown, changed) = (&shown, &changed);
        async move {
            // Asked on the first attempt: this side does not.
            let Some(job) = job else {
                return Ok(false);
            };
            let (res, n) = on_home(r, shown, job, progress).await;
            match res {
                Ok(Ok(())) => Ok(true),
                Ok(Err((e, _))) | Err((e, _)) => {
                    // Sent again from its start: its bytes are counted then.
                    r.stats.bytes_done.fetch_sub(n, Ordering::Relaxed);
                    if changed.load(Ordering::Relaxed) {
                        return Err(changed_error(r, f));
                    }
                    Err(e)
                }
            }
        }
    })
    .await;
    match res {
        Ok(false) => None,
        Ok(true) => Some(Ok(size)),
        // A local file made in one job is unnamed until whole
        // (`local::make_file`): nothing is kept for a --resume.
        Err(e) if into.is_some() => {
            let error = if e.kind() == ErrorKind::Network {
                TransferError::from_kind(
                    ErrorKind::Network,
                    format!("{e}; run the same command again to copy it from its start"),
                )
            } else {
                e
            };
            Some(Err(Failed {
                error,
                nothing_kept: true,
            }))
        }
        Err(e) => Some(Err(e.into())),
    }
}

/// A small file's `size` bytes, from the read that said its size or one
/// `get_whole`, within `--timeout`.
async fn read_whole(
    src: &dyn Backend,
    p: &[u8],
    size: u64,
    opened: Option<Box<dyn ByteStream>>,
    stall: Duration,
) -> Result<bytes::Bytes, TransferError> {
    let read = async {
        match opened {
            Some(s) => crate::backend::gather(s, size).await,
            None => src.get_whole(p, size).await,
        }
    };
    let data = tokio::time::timeout(stall, read)
        .await
        .map_err(|_| stalled(src, p, stall))??;
    if data.len() as u64 != size {
        return Err(TransferError::Remote(format!(
            "{}: {} bytes arrived where {size} were expected (the file changed during the copy?)",
            src.display(p),
            data.len()
        )));
    }
    Ok(data)
}

/// A task spawned on a backend's thread, aborted when its caller lets go
/// of it (a cancel).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `call` (given the attempt's number, from 0), again after a transient
/// failure (a lost connection) as a range is.
async fn retried<T, C, F>(r: &Run, mut call: C) -> Result<T, TransferError>
where
    C: FnMut(u32) -> F,
    F: std::future::Future<Output = Result<T, TransferError>>,
{
    let mut attempt = 0u32;
    loop {
        match call(attempt).await {
            Ok(v) => return Ok(v),
            Err(e) => retry_after(r, e, attempt, true).await?,
        }
        attempt += 1;
    }
}

/// After a failed attempt: `Err` when it is final (not `restartable`, or
/// as `retry::wait_to_retry` says), else after the backoff's wait.
async fn retry_after(
    r: &Run,
    e: TransferError,
    attempt: u32,
    restartable: bool,
) -> Result<(), TransferError> {
    if !restartable {
        return Err(e);
    }
    crate::retry::wait_to_retry(e, attempt, r.opts.retries, &r.events, &r.cancel).await
}

fn stalled(b: &dyn Backend, p: &[u8], stall: Duration) -> TransferError {
    TransferError::stalled(&b.display(p), "no progress", stall)
}

/// Where a part file can continue: its length, if its last bytes are the
/// source's bytes at the same place; else 0 (start over).
async fn resume_point(
    r: &Run,
    f: &FilePlan,
    part: &[u8],
    have: u64,
    size: u64,
) -> Result<u64, TransferError> {
    let src = &r.sources[f.source].backend;
    let dst = &r.dest.backend;
    if have == 0 || have > size {
        return Ok(0);
    }
    let n = have.min(RESUME_CHECK);
    let (a, b) = tokio::join!(
        read_all(src.as_ref(), &f.src, have - n, n),
        read_all(dst.as_ref(), part, have - n, n)
    );
    if a? == b? {
        Ok(have)
    } else {
        r.events.warn(format!(
            "{}: the partial file does not match the source; starting over",
            dst.display(part)
        ));
        Ok(0)
    }
}

async fn read_all(b: &dyn Backend, p: &[u8], at: u64, n: u64) -> Result<Vec<u8>, TransferError> {
    let mut s = b.read(p, at, Some(n)).await?;
    let mut out = Vec::with_capacity(n as usize);
    while let Some(piece) = s.next().await? {
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

/// A sink and a stream already open for a range's first attempt.
type Opened = (Option<Box<dyn Sink>>, Option<Box<dyn ByteStream>>);

/// Move one range, retrying transient failures with backoff and jitter.
/// `first`: a sink and a stream already open for the first attempt.
/// `kept` is how much of the range, from `at`, is in the destination
/// for sure when this returns an error (a resume record keeps it).
/// `crc`: the range's CRC32, taken as its bytes pass; `None` after a
/// retry or where the bytes did not pass here.
#[allow(clippy::too_many_arguments)]
async fn pump_with_retry(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    at: u64,
    len: u64,
    first: Opened,
    end_check: Option<&std::sync::atomic::AtomicBool>,
    kept: &mut u64,
    crc: &mut Option<crc32fast::Hasher>,
) -> Result<(), TransferError> {
    let (mut first_sink, mut first_stream) = first;
    let dc = r.dest.backend.capabilities();
    // Bytes written before a failure of the source's side stay, where
    // the part file can be continued from them: flushed, they need not
    // travel again (a retry, or --resume after a killed server). Never
    // for a write that appears under its final name when finished.
    let keep = target.renamed && dc.continues();
    let mut attempt = 0u32;
    loop {
        let from = at + *kept;
        let sink = match first_sink.take() {
            Some(s) => s,
            None => {
                let mode = if from == 0 && !dc.offset_write {
                    WriteMode::Create { perm: f.perm() }
                } else {
                    WriteMode::At(from)
                };
                r.dest.backend.write(&target.write, mode, f.size).await?
            }
        };
        let mut moved = 0u64;
        let res = pump(
            r,
            f,
            from,
            len - *kept,
            sink,
            first_stream.take(),
            end_check,
            &mut moved,
            crc,
        )
        .await;
        match res {
            Ok(()) => return Ok(()),
            Err((e, sink)) => {
                // A retry sends some bytes again, or continues after
                // bytes this hash has not seen in order.
                *crc = None;
                let flushed = match sink {
                    Some(sink) if keep && moved > 0 && crate::retry::transient(&e) => {
                        let stall = r.opts.timeout;
                        matches!(tokio::time::timeout(stall, sink.finish()).await, Ok(Ok(())))
                    }
                    _ => false,
                };
                if flushed {
                    *kept += moved;
                } else {
                    // Bytes of a failed attempt are sent again: take
                    // them back.
                    r.stats.bytes_done.fetch_sub(moved, Ordering::Relaxed);
                }
                // A destination that only takes whole files starts over
                // from 0, which only a range starting at 0 can do; one
                // that appends continues from what was flushed.
                let restartable = dc.offset_write || flushed || from == 0;
                retry_after(r, e, attempt, restartable).await?;
                attempt += 1;
            }
        }
    }
}

/// A failed range: the error, and the sink when the failure was the
/// source's (its bytes so far can still be flushed).
type Pumped = Result<(), (TransferError, Option<Box<dyn Sink>>)>;

/// Stream `len` bytes of the source at `at` into `sink` ([`TO_END`]:
/// all there is, its bytes counted in `bytes_total` too as they come),
/// from `first` when a read is already open there. `end_check`: the
/// destination takes files whole, so when this range ends the file its
/// last piece goes only once the source was asked again (and read before
/// it was asked); set when that was done and the source unchanged.
/// `crc` takes every byte that passes; a range run on a connection's
/// thread does not pass here and sets it to `None`.
#[allow(clippy::too_many_arguments)]
async fn pump(
    r: &Run,
    f: &FilePlan,
    at: u64,
    len: u64,
    mut sink: Box<dyn Sink>,
    first: Option<Box<dyn ByteStream>>,
    end_check: Option<&std::sync::atomic::AtomicBool>,
    moved: &mut u64,
    crc: &mut Option<crc32fast::Hasher>,
) -> Pumped {
    let src = &r.sources[f.source].backend;
    let to_end = len == TO_END;
    let end_check = end_check.filter(|_| !to_end && f.size == Some(at + len));
    let mut stream = match first {
        Some(s) => s,
        None => match src.read(&f.src, at, (!to_end).then_some(len)).await {
            Ok(s) => s,
            Err(e) => return Err((e, None)),
        },
    };
    // A local file on one side and a connection's thread on the other:
    // the whole range runs on that thread (a range of known length).
    if !to_end {
        if let Some(file) = sink.local_file() {
            let to = LocalRange::new(file, len, src.display(&f.src));
            let (shown, progress) = (to.shown.clone(), to.progress.clone());
            if let Some(task) = stream.write_into(to) {
                *crc = None;
                return pump_on_home(r, &shown, task, progress, sink, moved).await;
            }
        }
        if let Some(file) = stream.local_file() {
            let check = end_check.map(|_| {
                let size = f.size.unwrap_or(at + len);
                Arc::new(SourceCheck::new(file.file.clone(), size, f.mtime))
            });
            let mut from = LocalRange::new(file, len, r.dest.backend.display(&f.dst));
            from.check = check.clone();
            let (shown, progress) = (from.shown.clone(), from.progress.clone());
            if let Some(task) = sink.read_from(from) {
                *crc = None;
                let res = pump_on_home(r, &shown, task, progress, sink, moved).await;
                if let (Some(c), Some(done)) = (&check, end_check) {
                    if c.changed() {
                        return Err((changed_before_the_end(r, f).await, None));
                    }
                    done.store(res.is_ok() && c.asked(), Ordering::Release);
                }
                return res;
            }
        }
    }
    let cancelled = || (TransferError::cancelled(), None);
    let stall = r.opts.timeout;
    loop {
        let next = tokio::select! {
            biased;
            _ = r.cancel.cancelled() => return Err(cancelled()),
            n = tokio::time::timeout(stall, stream.next()) => n,
        };
        let piece = match next {
            Err(_) => return Err((stalled(src.as_ref(), &f.src, stall), Some(sink))),
            Ok(Err(e)) => return Err((e, Some(sink))),
            Ok(Ok(p)) => p,
        };
        let Some(piece) = piece else { break };
        let n = piece.len() as u64;
        if *moved + n > len {
            return Err((too_long(&src.display(&f.src)), None));
        }
        if let Some(done) = end_check.filter(|_| *moved + n == len) {
            // The last piece is in hand, not sent: the source asked
            // again now has no write before it that could have changed
            // a byte already read.
            match source_changed(r, f).await {
                Ok(false) => done.store(true, Ordering::Release),
                Ok(true) => return Err((changed_before_the_end(r, f).await, None)),
                Err(e) => return Err((e, None)),
            }
        }
        if let Some(h) = crc.as_mut() {
            h.update(&piece);
        }
        // A destination that stops taking bytes is a stall too.
        tokio::select! {
            biased;
            _ = r.cancel.cancelled() => return Err(cancelled()),
            w = tokio::time::timeout(stall, sink.write(piece)) => match w {
                Err(_) => return Err((stalled(r.dest.backend.as_ref(), &f.dst, stall), None)),
                Ok(w) => w.map_err(|e| (e, None))?,
            },
        }
        *moved += n;
        r.stats.bytes_done.fetch_add(n, Ordering::Relaxed);
        if to_end {
            r.stats.bytes_total.fetch_add(n, Ordering::Relaxed);
        }
    }
    if !to_end && *moved != len {
        return Err((too_short(&src.display(&f.src), *moved, len), None));
    }
    match tokio::time::timeout(stall, sink.finish()).await {
        Err(_) => Err((stalled(r.dest.backend.as_ref(), &f.dst, stall), None)),
        Ok(done) => done.map_err(|e| (e, None)),
    }
}

/// A stream's length for "to the end of the file" ([`pump`]).
const TO_END: u64 = u64::MAX;

/// A file nothing gave the size of (a compressed HTTP body after a
/// listing without sizes): one stream to its end, into a file created
/// anew on each attempt; its size is what arrived (checked where it lies
/// before the rename), its bytes counted in `bytes_total` as they come.
async fn copy_unsized(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    mut first: Option<Box<dyn ByteStream>>,
) -> Result<u64, TransferError> {
    let dst = &r.dest.backend;
    let mut attempt = 0u32;
    loop {
        let opened = first.take();
        let sink = dst
            .write(&target.write, WriteMode::Create { perm: f.perm() }, None)
            .await?;
        let mut moved = 0u64;
        match pump(r, f, 0, TO_END, sink, opened, None, &mut moved, &mut None).await {
            Ok(()) => {
                finalize(r, f, target, moved, false).await?;
                return Ok(moved);
            }
            Err((e, _)) => {
                // Sent again from the start: take them back.
                r.stats.bytes_done.fetch_sub(moved, Ordering::Relaxed);
                r.stats.bytes_total.fetch_sub(moved, Ordering::Relaxed);
                retry_after(r, e, attempt, true).await?;
                attempt += 1;
            }
        }
    }
}

fn too_long(src: &str) -> TransferError {
    TransferError::Remote(format!(
        "{src}: the source sent more bytes than its size said (it changed during the copy?)"
    ))
}

fn too_short(src: &str, got: u64, len: u64) -> TransferError {
    TransferError::Remote(format!(
        "{src}: {got} bytes arrived where {len} were expected (the file changed during the copy?)"
    ))
}

/// A range between a local file and a connection, run whole on the
/// connection's thread ([`ByteStream::write_into`], [`Sink::read_from`]);
/// this task watches it. `shown` names the connection's side.
async fn pump_on_home(
    r: &Run,
    shown: &str,
    task: RangeTask,
    progress: Arc<RangeProgress>,
    mut sink: Box<dyn Sink>,
    moved: &mut u64,
) -> Pumped {
    let (res, n) = on_home(r, shown, task, progress).await;
    *moved += n;
    sink.wrote(n);
    match res {
        Ok(Ok(())) => sink.finish().await.map_err(|e| (e, None)),
        Ok(Err((e, source))) => Err((e, source.then_some(sink))),
        Err((e, stalled)) => Err((e, stalled.then_some(sink))),
    }
}

/// [`ByteStream::write_into`] for a stream whose bytes arrive on a
/// runtime's thread: spawned there, it writes each piece as it comes, or
/// with `gather` > 0 gathers small pieces (an HTTP body's frames: nginx
/// sends 8 KiB) into writes of that size, as the HTTP copy loop did. The
/// bytes gathered count as moved only once written, so a failed source
/// leaves the file and the count agreeing.
pub(crate) async fn drain_into(
    mut stream: Box<dyn ByteStream>,
    into: LocalRange,
    gather: usize,
) -> Result<(), (TransferError, bool)> {
    let LocalRange {
        file: mut to,
        len,
        shown,
        progress,
        ..
    } = into;
    let mut write = |data: &[u8]| -> Result<(), (TransferError, bool)> {
        to.write(data).map_err(|e| (e, false))?;
        progress.add(data.len() as u64);
        Ok(())
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut n = 0u64;
    loop {
        let piece = match stream.next().await {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                write(&buf)?;
                return Err((e, true));
            }
        };
        if n + piece.len() as u64 > len {
            return Err((too_long(&shown), false));
        }
        n += piece.len() as u64;
        if buf.is_empty() && piece.len() >= gather {
            write(&piece)?;
            continue;
        }
        if buf.capacity() == 0 {
            buf.reserve_exact(gather);
        }
        buf.extend_from_slice(&piece);
        if buf.len() >= gather {
            write(&buf)?;
            buf.clear();
        }
    }
    write(&buf)?;
    if n != len {
        return Err((too_short(&shown, n, len), false));
    }
    Ok(())
}

/// Watch `task`, a range run on a backend's thread: its byte count feeds
/// the progress and the stall timeout; a cancel or a stall tells it to
/// stop (and aborts it where it is async). Returns its output, or the
/// cancel or stall (`true`: a stall or a lost thread, which a retry may
/// continue), and the bytes counted, which are then in `stats`. `shown`
/// names the side whose thread runs it.
async fn on_home(
    r: &Run,
    shown: &str,
    task: RangeTask,
    progress: Arc<RangeProgress>,
) -> (
    Result<Result<(), (TransferError, bool)>, (TransferError, bool)>,
    u64,
) {
    let mut task = StopOnDrop(task, progress.clone());
    // What the job counts itself is not counted here again.
    let counted = |n: u64| {
        if !progress.counts_itself() {
            r.stats.bytes_done.fetch_add(n, Ordering::Relaxed);
        }
    };
    // A job that runs on this thread (an FTP lane's file) counts its
    // bytes, stops at a cancel and ends a stall at its connection's
    // timeout by itself, and a tick could not fire before it ends: none
    // is polled (arming one cost an eventfd write and an epoll_wait a
    // file).
    let watch = !(progress.is_inline() && progress.counts_itself());
    let stall = r.opts.timeout;
    let mut tick = tokio::time::interval(PROGRESS_TICK.min(stall).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut seen, mut last) = (0u64, Instant::now());
    let res = loop {
        tokio::select! {
            biased;
            _ = r.cancel.cancelled() => break Err((TransferError::cancelled(), false)),
            done = &mut task.0 => {
                break done.map_err(|e| {
                    let lost = format!("{shown}: the connection's thread ended: {e}");
                    (TransferError::Network(lost), true)
                })
            }
            _ = tick.tick(), if watch => {
                let now = progress.bytes.load(Ordering::Relaxed);
                if now != seen {
                    counted(now - seen);
                    (seen, last) = (now, Instant::now());
                } else if last.elapsed() >= stall {
                    break Err((TransferError::stalled(shown, "no progress", stall), true));
                }
            }
        }
    };
    drop(task);
    let now = progress.bytes.load(Ordering::Relaxed).max(seen);
    counted(now - seen);
    (res, now)
}

/// How often a range run on a backend's thread reports its bytes.
const PROGRESS_TICK: Duration = Duration::from_millis(100);

/// A range's task, told to stop (and aborted, where it is async) when
/// its watcher lets go of it: a cancelled or stalled range must not go
/// on writing.
struct StopOnDrop(RangeTask, Arc<RangeProgress>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.1.stop.store(true, Ordering::Relaxed);
        self.0.abort();
    }
}

/// Check the size, set times and modes, rename into place; again after a
/// lost connection (`--retries`), as a range is sent again.
async fn finalize(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    size: u64,
    size_known: bool,
) -> Result<(), TransferError> {
    // After a lost answer the rename may have been done: then the part
    // is gone and the final name holds the file's size. That look is part
    // of the attempt, so a server still away is retried.
    retried(r, |attempt| async move {
        if attempt > 0 && target.renamed && renamed_already(r, f, target, size).await? {
            return Ok(());
        }
        finalize_once(r, f, target, size, size_known).await
    })
    .await
}

/// The part is gone and the final name holds `size` bytes.
async fn renamed_already(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    size: u64,
) -> Result<bool, TransferError> {
    let dst = &r.dest.backend;
    if dst.stat(&target.write).await?.is_some() {
        return Ok(false);
    }
    Ok(dst
        .stat(&f.dst)
        .await?
        .is_some_and(|e| e.size == Some(size)))
}

async fn finalize_once(
    r: &Run,
    f: &FilePlan,
    target: &Target,
    size: u64,
    size_known: bool,
) -> Result<(), TransferError> {
    let dst = &r.dest.backend;
    if target.renamed && !size_known {
        if let Some(e) = dst.stat(&target.write).await? {
            if e.size.is_some_and(|s| s != size) {
                return Err(TransferError::Remote(format!(
                    "{}: holds {} bytes after the copy, {size} expected; the final name was left alone",
                    dst.display(&target.write),
                    e.size.unwrap_or(0)
                )));
            }
        }
    }
    let (mtime, mode) = kept_attrs(r, f);
    if mtime.is_some() || mode.is_some() {
        dst.set_attrs(&target.write, mtime, mode).await?;
    }
    if target.renamed {
        if r.cancel.is_cancelled() {
            return Err(TransferError::cancelled());
        }
        dst.rename_over(&target.write, &f.dst).await?;
    }
    Ok(())
}

/// The engine's default stall timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Seconds since `t`, for reports.
pub(crate) fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::backend::LocalFile;

    /// A file's CRC32 combined from its ranges' is the file's, whatever
    /// order the ranges finished in; gaps, overlaps and short covers give
    /// none (the part file is then read to hash it).
    #[test]
    fn a_files_crc32_from_its_ranges() {
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        let want = ferry_hash::of(HashAlgo::Crc32, &data);
        let range = |at: u64, len: u64| {
            let mut crc = crc32fast::Hasher::new();
            crc.update(&data[at as usize..(at + len) as usize]);
            RangeCrc { at, len, crc }
        };
        let size = data.len() as u64;
        let cuts = |v: &[(u64, u64)]| v.iter().map(|&(a, l)| range(a, l)).collect::<Vec<_>>();
        let parts = [(600_000, 400_000), (0, 1), (1, 299_999), (300_000, 300_000)];
        assert_eq!(whole_crc32(cuts(&parts), size), Some(want.clone()));
        assert_eq!(whole_crc32(cuts(&[(0, size)]), size), Some(want));
        // A gap, an overlap, a short cover, and nothing for a file.
        assert_eq!(whole_crc32(cuts(&[(0, 10), (11, size - 11)]), size), None);
        assert_eq!(whole_crc32(cuts(&[(0, 10), (5, size - 5)]), size), None);
        assert_eq!(whole_crc32(cuts(&[(0, size - 1)]), size), None);
        assert_eq!(whole_crc32(Vec::new(), size), None);
        let empty = ferry_hash::of(HashAlgo::Crc32, b"");
        assert_eq!(whole_crc32(Vec::new(), 0), Some(empty));
    }
    use bytes::Bytes;

    /// Pieces, then the end or a source error.
    struct Pieces(Vec<Result<Bytes, TransferError>>);

    #[async_trait::async_trait]
    impl ByteStream for Pieces {
        async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
            if self.0.is_empty() {
                return Ok(None);
            }
            self.0.remove(0).map(Some)
        }
    }

    fn range(dir: &tempfile::TempDir, len: u64) -> (LocalRange, std::path::PathBuf) {
        let path = dir.path().join("f");
        let file = std::fs::File::create(&path).unwrap();
        let lf = LocalFile {
            file: Arc::new(file),
            path: path.clone(),
            at: 0,
        };
        (LocalRange::new(lf, len, "src".into()), path)
    }

    fn piece(b: &[u8]) -> Result<Bytes, TransferError> {
        Ok(Bytes::copy_from_slice(b))
    }

    #[tokio::test]
    async fn gathered_pieces_are_written_whole_and_counted_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let (to, path) = range(&dir, 10);
        let progress = to.progress.clone();
        let s = Pieces(vec![piece(b"abc"), piece(b"def"), piece(b"ghij")]);
        drain_into(Box::new(s), to, 8)
            .await
            .map_err(|e| e.0)
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abcdefghij");
        assert_eq!(progress.bytes.load(Ordering::Relaxed), 10);
    }

    #[tokio::test]
    async fn a_source_error_keeps_what_was_gathered() {
        let dir = tempfile::tempdir().unwrap();
        let (to, path) = range(&dir, 10);
        let progress = to.progress.clone();
        let cut = Err(TransferError::Network("cut".into()));
        let s = Pieces(vec![piece(b"abc"), piece(b"de"), cut]);
        let (e, source) = drain_into(Box::new(s), to, 8).await.unwrap_err();
        assert!(source, "{e}");
        // What arrived before the cut is on disk and counted: a retry
        // continues from there.
        assert_eq!(std::fs::read(&path).unwrap(), b"abcde");
        assert_eq!(progress.bytes.load(Ordering::Relaxed), 5);
    }

    #[tokio::test]
    async fn too_much_or_too_little_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (to, _) = range(&dir, 4);
        let s = Pieces(vec![piece(b"abc"), piece(b"de")]);
        let (_, source) = drain_into(Box::new(s), to, 8).await.unwrap_err();
        assert!(!source);
        let (to, _) = range(&dir, 4);
        let s = Pieces(vec![piece(b"abc")]);
        let (e, _) = drain_into(Box::new(s), to, 0).await.unwrap_err();
        assert!(e.to_string().contains("src"), "{e}");
    }
}
