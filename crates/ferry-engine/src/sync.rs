//! `ferry sync` and `ferry check`: compare two trees on any two backends
//! and make the destination a copy of the source (one way, as `rclone
//! sync` and `rsync -a --delete`), or only say how they differ.
//!
//! How it runs (docs/internals/sync.md has the prose):
//! - the two trees are walked together, directory by directory: each step
//!   lists one directory on both sides at once, with [`LISTINGS`] steps in
//!   flight, and merges the two sorted listings. Only the listings of the
//!   directories in flight are in memory, never both whole trees;
//! - files that are missing or differ go to the copy pool as soon as they
//!   are found (the engine's own `copy_file`: part name, ranges, retries,
//!   rename), so copies start long before the walk ends; the walk pauses
//!   while [`QUEUED`] files wait;
//! - "differ" is size and modification time (within `modify_window`), or
//!   with [`Compare::Checksum`] a content hash computed where each file
//!   lives when its server can (ferry serve, the local disk), else by
//!   reading it (said once per side, never a silent fallback);
//! - deletions (`--delete`) wait until every listing and every copy has
//!   succeeded: after any error, nothing is deleted.
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::backend::{key_of, path, walk_tree, Entry, EntryKind, HashAlgo};
use crate::engine::{self, FilePlan, Place, Run};
use crate::error::TransferError;
use crate::filter::Filter;
use crate::transfer::{self, Cancel, Emitter, EndReport, Event, Handle, Verdict};
use crate::{BackendPath, CopyOptions, Location, Stats};

/// Directory pairs listed at once.
const LISTINGS: usize = 16;
/// Files found and waiting for the copy pool before the walk pauses.
const QUEUED: usize = 4096;
/// Files, or bytes, found to copy that are worth the connections a copy
/// opens (`engine::prepare`: four to an OpenSSH server); less is copied
/// on the connection the walk lists on. Another SSH session took about
/// 190 ms to come up on the measuring host, as long as a thousand small
/// files took on one; three of them made a sync of 100 changed small
/// files 0.04 s (15%) slower (BENCHMARKS.md run sync-3).
const SPREAD_FILES: u64 = 1000;
const SPREAD_BYTES: u64 = 64 << 20;

/// What makes two files "different".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compare {
    /// Size and modification time (rsync's and rclone's default).
    #[default]
    SizeAndTime,
    /// Size alone.
    SizeOnly,
    /// Size, then a content hash of files of the same size.
    Checksum,
}

/// How to sync or check.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// How files are copied. `preserve` (times and modes) should stay on,
    /// or the next run sees every copied file as changed; `resume`
    /// continues part files an interrupted run left.
    pub copy: CopyOptions,
    pub compare: Compare,
    /// Times this many seconds apart are the same (rclone's
    /// `--modify-window`, for backends with coarse clocks).
    pub modify_window: u64,
    /// Skip files whose destination copy is newer (`--update`).
    pub update: bool,
    /// Skip files that exist on the destination at all.
    pub ignore_existing: bool,
    /// Remove destination entries the source lacks, once everything else
    /// succeeded.
    pub delete: bool,
    /// Refuse to delete more than this many files (nothing is deleted).
    pub max_delete: Option<u64>,
    /// Decide and report, change nothing.
    pub dry_run: bool,
    /// Only compare (`ferry check`): like `dry_run`, and files of the same
    /// size are hashed with [`Compare::Checksum`].
    pub check_only: bool,
    pub filter: Filter,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            copy: CopyOptions {
                recursive: true,
                preserve: true,
                resume: true,
                ..CopyOptions::default()
            },
            compare: Compare::default(),
            modify_window: 0,
            update: false,
            ignore_existing: false,
            delete: false,
            max_delete: None,
            dry_run: false,
            check_only: false,
            filter: Filter::default(),
        }
    }
}

/// What a sync or check found and did.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Source files compared.
    pub checked: u64,
    pub same: u64,
    pub only_in_source: u64,
    pub only_in_dest: u64,
    pub differ: u64,
    /// Files copied complete under their final names, and their bytes.
    pub copied: u64,
    pub bytes: u64,
    /// Files (and directories) removed, or that would be with `dry_run`.
    pub deleted: u64,
    /// The hash compared with `Compare::Checksum`, and how many files had
    /// to be read through a connection to hash them.
    pub hash: Option<HashAlgo>,
    pub hashed_by_reading: u64,
    /// Every failure: listings, comparisons, copies, deletions.
    pub errors: Vec<crate::FileError>,
    pub seconds: f64,
    /// What the run as a whole ended with (the first error, "N more", or
    /// cancellation); `None` when all went well.
    pub error: Option<TransferError>,
}

impl SyncReport {
    /// Are the trees the same (for `check`), as far as was compared?
    pub fn trees_match(&self) -> bool {
        self.error.is_none()
            && self.only_in_source == 0
            && self.only_in_dest == 0
            && self.differ == 0
    }
}

impl EndReport for SyncReport {
    fn internal_failure(message: String) -> Self {
        SyncReport {
            error: Some(TransferError::Local(message)),
            ..SyncReport::default()
        }
    }
}

/// A sync (or check) to start.
pub struct Sync {
    ends: Ends,
    opts: SyncOptions,
}

enum Ends {
    Locations(Location, Location),
    Backends(BackendPath, BackendPath),
}

impl Sync {
    /// Make `dst` a copy of the directory (or file) `src`: the contents
    /// of `src` go into `dst`, whether or not either ends with `/`.
    pub fn new(src: Location, dst: Location, opts: SyncOptions) -> Sync {
        Sync {
            ends: Ends::Locations(src, dst),
            opts,
        }
    }
    /// Between backends the application made.
    pub fn between(src: BackendPath, dst: BackendPath, opts: SyncOptions) -> Sync {
        Sync {
            ends: Ends::Backends(src, dst),
            opts,
        }
    }
    /// Start on the current tokio runtime and return at once.
    pub fn start(self) -> Handle<SyncReport> {
        Handle::spawn(move |stats, events, cancel| drive(self, stats, events, cancel))
    }
}

async fn drive(s: Sync, stats: Arc<Stats>, events: Emitter, cancel: Cancel) -> SyncReport {
    let started = Instant::now();
    let mut opened = Vec::new();
    let ends = match s.ends {
        Ends::Backends(a, b) => {
            let place = |b: BackendPath| Place {
                dir_hint: true,
                backend: b.backend,
                path: b.path.into_bytes(),
            };
            Ok((place(a), place(b)))
        }
        Ends::Locations(a, b) => {
            // A server lost while connecting or logging in is tried again
            // (`--retries`), as in a copy.
            let copy = &s.opts.copy;
            let mut attempt = 0;
            loop {
                let step = async {
                    let pa = transfer::open_shared(&mut opened, key_of(&a), &a, copy).await?;
                    let pb = transfer::open_shared(&mut opened, key_of(&b), &b, copy).await?;
                    Ok((pa, pb))
                };
                let e = match step.await {
                    Ok(ends) => break Ok(ends),
                    Err(e) => e,
                };
                match crate::retry::wait_to_retry(e, attempt, copy.retries, &events, &cancel).await
                {
                    Ok(()) => attempt += 1,
                    Err(e) => break Err(e),
                }
            }
        }
    };
    let mut report = match ends {
        Err(e) => SyncReport {
            error: Some(e),
            ..SyncReport::default()
        },
        Ok((src, dst)) => {
            if s.opts.compare == Compare::Checksum {
                tokio::join!(src.backend.prepare_hashes(), dst.backend.prepare_hashes());
            }
            let ticker = transfer::Ticker::start(&stats, &events);
            let r = Walk::new(src, dst, s.opts, stats.clone(), events.clone(), cancel)
                .run()
                .await;
            drop(ticker);
            transfer::emit_progress(&stats, &events);
            r
        }
    };
    transfer::close_all(&opened).await;
    report.seconds = engine::since(started);
    report
}

/// A directory pair to compare, relative to both tops.
struct DirJob {
    rel: Vec<u8>,
    /// The destination has this directory (else it is created, or with
    /// `dry_run` assumed empty).
    dst_exists: bool,
    /// The source directory's time, for the destination's.
    mtime: Option<i64>,
}

/// A file found on both sides or only on the source.
struct FileJob {
    rel: Vec<u8>,
    src: Entry,
    then: Then,
    /// The destination's listing had no part file for it: its copy
    /// need not look for one to continue.
    no_part: bool,
    /// Its source directory's time, put back on the destination's
    /// after a copy into it (the rename there changed it); `None`
    /// without `preserve`.
    dir_time: Option<i64>,
}

/// What a queued file still needs before (or instead of) its copy.
enum Then {
    /// It differs or is missing: copy.
    Copy,
    /// Same size: compare content hashes with the destination's.
    Hash,
    /// A listing left out its size or time (an HTML directory index):
    /// ask for them (HEAD, stat), then decide.
    Restat(Entry),
}

/// How two files are compared (the options that decide it).
#[derive(Debug, Clone, Copy)]
struct Rules {
    compare: Compare,
    modify_window: u64,
    update: bool,
    ignore_existing: bool,
}

/// What comparing two files' entries decided.
enum Decision {
    Same,
    NewerInDest,
    Differs(&'static str),
    /// Sizes match; only the contents can tell.
    Hash,
}

impl Rules {
    /// Does either entry lack what the comparison needs?
    fn needs_stat(&self, s: &Entry, d: &Entry) -> bool {
        self.lacks(s) || self.lacks(d)
    }

    /// Does this entry lack its size, or a time the comparison needs?
    fn lacks(&self, e: &Entry) -> bool {
        let times = self.compare == Compare::SizeAndTime || self.update;
        e.size.is_none() || (times && e.mtime.is_none())
    }

    fn decide(&self, s: &Entry, d: &Entry) -> Decision {
        if self.ignore_existing {
            return Decision::Same;
        }
        let window = self.modify_window.min(i64::MAX as u64) as i64;
        if let (true, Some(a), Some(b)) = (self.update, s.mtime, d.mtime) {
            if b > a.saturating_add(window) {
                return Decision::NewerInDest;
            }
        }
        if s.size != d.size {
            return Decision::Differs("size");
        }
        match self.compare {
            Compare::SizeOnly => Decision::Same,
            Compare::Checksum => Decision::Hash,
            Compare::SizeAndTime => match (s.mtime, d.mtime) {
                (Some(a), Some(b)) if a.abs_diff(b) > self.modify_window => {
                    Decision::Differs("time")
                }
                // No time on a side even after a stat: size decides.
                _ => Decision::Same,
            },
        }
    }
}

/// A directory listed on both sides.
struct Listed {
    rel: Vec<u8>,
    /// The source directory's time.
    mtime: Option<i64>,
    src: Result<Vec<Entry>, TransferError>,
    dst: Result<Vec<Entry>, TransferError>,
}

/// One file's work, finished.
struct FileDone {
    outcome: FileOutcome,
    /// Source and destination were read through the link to hash.
    read_to_hash: [bool; 2],
    /// Found different only by this work (a stat or the hashes).
    differs: bool,
    /// A copy went into this destination directory: the source
    /// directory's time to put back.
    dir_time: Option<(Vec<u8>, i64)>,
}

enum FileOutcome {
    Same,
    Copied(u64),
    /// Compared or would copy only (check, dry run).
    NotCopied,
    /// A copy that failed (already reported as an event).
    CopyFailed(crate::FileError),
}

struct Walk {
    src: Place,
    dst: Place,
    opts: SyncOptions,
    run: Arc<Run>,
    events: Emitter,
    cancel: Cancel,
    stats: Arc<Stats>,
    hash: Option<HashAlgo>,
    report: SyncReport,
    /// Destination paths only the destination has (relative), for --delete.
    extra: Vec<(Vec<u8>, EntryKind)>,
    /// Directory times to put back at the end: those that differ, and
    /// those of directories a copy or deletion changes.
    dir_times: Vec<(Vec<u8>, i64)>,
    /// Said once each: "reading files to hash them".
    warned_reading: [bool; 2],
    /// Source and destination listings show a time that is not the
    /// file's own (S3: ListObjectsV2 gives the upload time, the kept time
    /// is in `x-amz-meta-mtime`, which only a HEAD returns).
    listed_times_approx: [bool; 2],
}

/// Does this backend's listing show times other than its `stat`?
fn listed_times_approx(b: &dyn crate::backend::Backend) -> bool {
    b.scheme() == "s3"
}

impl Walk {
    fn new(
        src: Place,
        dst: Place,
        mut opts: SyncOptions,
        stats: Arc<Stats>,
        events: Emitter,
        cancel: Cancel,
    ) -> Walk {
        opts.copy.recursive = true;
        if opts.check_only {
            opts.dry_run = true;
        }
        if opts.compare == Compare::SizeAndTime
            && !opts.check_only
            && !dst.backend.capabilities().set_times
        {
            // The copies would get the time of the upload, so the next
            // run would see every file as changed (rclone does the same).
            events.warn(format!(
                "{}: this server cannot keep modification times; comparing by size \
                 (--checksum compares contents)",
                dst.backend.display(&dst.path)
            ));
            opts.compare = Compare::SizeOnly;
        }
        let hash = (opts.compare == Compare::Checksum).then(|| {
            crate::hash::choose(
                &crate::hash::offered(src.backend.as_ref()),
                &crate::hash::offered(dst.backend.as_ref()),
            )
        });
        let run = copy_run(&src, &dst, &opts.copy, &stats, &events, &cancel);
        let approx = [
            listed_times_approx(src.backend.as_ref()),
            listed_times_approx(dst.backend.as_ref()),
        ];
        Walk {
            src,
            dst,
            opts,
            run,
            events,
            cancel,
            stats,
            hash,
            report: SyncReport {
                hash,
                ..SyncReport::default()
            },
            extra: Vec::new(),
            dir_times: Vec::new(),
            warned_reading: [false; 2],
            listed_times_approx: approx,
        }
    }

    fn sp(&self, rel: &[u8]) -> Vec<u8> {
        path::join_rel(&self.src.path, rel)
    }
    fn dp(&self, rel: &[u8]) -> Vec<u8> {
        path::join_rel(&self.dst.path, rel)
    }

    fn fail(&mut self, e: TransferError) {
        if e.kind() != crate::ErrorKind::Cancelled {
            self.events.warn(e.to_string());
        }
        self.report.errors.push(crate::FileError {
            kind: e.kind(),
            message: e.to_string(),
        });
    }

    async fn run(mut self) -> SyncReport {
        let top = tokio::join!(
            self.src.backend.stat(&self.src.path),
            self.dst.backend.stat(&self.dst.path)
        );
        let (s, d) = match top {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) | (_, Err(e)) => return self.finish_with(e),
        };
        let Some(s) = s else {
            let e = self.src.backend.missing(&self.src.path);
            return self.finish_with(e);
        };
        match (s.kind, d.as_ref().map(|d| d.kind)) {
            (EntryKind::Dir, Some(EntryKind::Dir)) | (EntryKind::Dir, None) => {}
            (EntryKind::File, Some(EntryKind::Dir)) => {
                // A file into a directory: compare with DST/NAME.
                let name = path::basename(&self.src.path).to_vec();
                self.src.path = path::parent(&self.src.path).to_vec();
                return self.single(name).await;
            }
            (EntryKind::File, None | Some(EntryKind::File) | Some(EntryKind::Other)) => {
                let name = path::basename(&self.src.path).to_vec();
                self.src.path = path::parent(&self.src.path).to_vec();
                let dst_name = path::basename(&self.dst.path).to_vec();
                self.dst.path = path::parent(&self.dst.path).to_vec();
                if name != dst_name {
                    let e = TransferError::Usage(format!(
                        "{}: a file is synced to a file of the same name or into a directory; \
                         use `ferry cp` to copy it under another name",
                        self.dst.backend.display(&self.dp(&dst_name))
                    ));
                    return self.finish_with(e);
                }
                return self.single(name).await;
            }
            (EntryKind::Dir, Some(_)) => {
                let e = TransferError::Usage(format!(
                    "{}: not a directory; a directory is synced into a directory",
                    self.dst.backend.display(&self.dst.path)
                ));
                return self.finish_with(e);
            }
            (EntryKind::Other, _) => {
                let e = TransferError::Usage(format!(
                    "{}: not a regular file or directory",
                    self.src.backend.display(&self.src.path)
                ));
                return self.finish_with(e);
            }
        }
        if let (true, Some(t)) = (self.opts.copy.preserve, s.mtime) {
            if d.as_ref().and_then(|d| d.mtime) != Some(t) {
                self.dir_times.push((Vec::new(), t));
            }
        }
        if d.is_none() && !self.opts.dry_run {
            if let Err(e) = self.dst.backend.mkdir_all(&self.dst.path).await {
                return self.finish_with(e);
            }
        }
        let first = DirJob {
            rel: Vec::new(),
            dst_exists: d.is_some(),
            mtime: s.mtime,
        };
        self.walk(first).await;
        self.finish().await
    }

    /// The place of the destination moved (a single file): the copy
    /// context must see it.
    fn rebuild_run(&mut self) {
        self.run = copy_run(
            &self.src,
            &self.dst,
            &self.opts.copy,
            &self.stats,
            &self.events,
            &self.cancel,
        );
    }

    /// One source file against the destination directory.
    async fn single(mut self, name: Vec<u8>) -> SyncReport {
        self.rebuild_run();
        let (sp, dp) = (self.sp(&name), self.dp(&name));
        let (s, d) = tokio::join!(self.src.backend.stat(&sp), self.dst.backend.stat(&dp));
        match (s, d) {
            (Ok(Some(s)), Ok(d)) => {
                let mut s = s;
                s.name = name.clone();
                let mut work = FuturesUnordered::new();
                let mut queue = VecDeque::new();
                self.compare_file(&name, s, d, false, &mut queue);
                while let Some(job) = queue.pop_front() {
                    work.push(self.file_work(job));
                }
                while let Some(done) = work.next().await {
                    self.file_done(done);
                }
            }
            (Ok(None), _) => self.fail(TransferError::Remote(format!(
                "{}: no such file",
                self.src.backend.display(&self.sp(&name))
            ))),
            (Err(e), _) | (_, Err(e)) => self.fail(e),
        }
        self.finish().await
    }

    /// Walk both trees from `first`, copying as it goes.
    async fn walk(&mut self, first: DirJob) {
        let parallel = self.parallel();
        let mut dirs = vec![first];
        let mut queue: VecDeque<FileJob> = VecDeque::new();
        let mut listings = FuturesUnordered::new();
        let mut work = FuturesUnordered::new();
        loop {
            if self.cancel.is_cancelled() {
                break;
            }
            while listings.len() < LISTINGS && queue.len() < QUEUED {
                let Some(d) = dirs.pop() else { break };
                listings.push(self.list_pair(d));
            }
            while work.len() < parallel {
                let Some(job) = queue.pop_front() else { break };
                work.push(self.file_work(job));
            }
            if listings.is_empty() && work.is_empty() {
                break;
            }
            tokio::select! {
                Some(listed) = listings.next(), if !listings.is_empty() => {
                    self.merge(listed, &mut dirs, &mut queue);
                }
                Some(done) = work.next(), if !work.is_empty() => self.file_done(done),
                _ = self.cancel.cancelled() => break,
            }
        }
        // Cancelled: what is in flight ends at its next piece.
        while let Some(done) = work.next().await {
            self.file_done(done);
        }
    }

    fn parallel(&self) -> usize {
        let caps = (
            self.src.backend.capabilities().max_files,
            self.dst.backend.capabilities().max_files,
        );
        self.opts
            .copy
            .parallel
            .unwrap_or(usize::MAX)
            .min(caps.0)
            .min(caps.1)
            .max(1)
    }

    /// List a directory on both sides (creating it on the destination
    /// first where it is missing).
    fn list_pair(&self, d: DirJob) -> impl std::future::Future<Output = Listed> + Send + 'static {
        let (sb, db) = (self.src.backend.clone(), self.dst.backend.clone());
        let (sp, dp) = (self.sp(&d.rel), self.dp(&d.rel));
        let make = !d.dst_exists && !self.opts.dry_run && !d.rel.is_empty();
        let mtime = d.mtime;
        async move {
            let dst_side = async {
                if d.dst_exists {
                    db.list(&dp).await
                } else if make {
                    db.mkdir_all(&dp).await.map(|_| Vec::new())
                } else {
                    Ok(Vec::new())
                }
            };
            let (src, dst) = tokio::join!(sb.list(&sp), dst_side);
            Listed {
                rel: d.rel,
                mtime,
                src,
                dst,
            }
        }
    }

    /// Merge two listings of one directory: queue what differs, descend.
    fn merge(
        &mut self,
        Listed {
            rel,
            mtime,
            src,
            dst,
        }: Listed,
        dirs: &mut Vec<DirJob>,
        queue: &mut VecDeque<FileJob>,
    ) {
        let (mut s, mut d) = match (src, dst) {
            (Ok(s), Ok(d)) => (s, d),
            (Err(e), _) | (_, Err(e)) => {
                // Nothing under this directory is compared; and since a
                // listing failed, nothing will be deleted anywhere.
                self.fail(e);
                return;
            }
        };
        // Names whose part file (`.NAME.ferry-part`) an interrupted run
        // left: only their copies look for something to continue.
        let parts: HashSet<Vec<u8>> = d
            .iter()
            .filter_map(|e| part_of(&e.name))
            .map(<[u8]>::to_vec)
            .collect();
        s.retain(|e| self.keep_src(&rel, e));
        d.retain(|e| self.keep_dst(&rel, e));
        s.sort_by(|a, b| a.name.cmp(&b.name));
        d.sort_by(|a, b| a.name.cmp(&b.name));
        let (queued, extra) = (queue.len(), self.extra.len());
        let (mut i, mut j) = (s.into_iter().peekable(), d.into_iter().peekable());
        loop {
            let order = match (i.peek(), j.peek()) {
                (None, None) => break,
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(a), Some(b)) => a.name.cmp(&b.name),
            };
            let (a, b) = match order {
                std::cmp::Ordering::Less => (i.next(), None),
                std::cmp::Ordering::Greater => (None, j.next()),
                std::cmp::Ordering::Equal => (i.next(), j.next()),
            };
            let name = a.as_ref().or(b.as_ref()).map(|e| e.name.clone());
            let Some(name) = name else { break };
            let r = path::join(&rel, &name);
            match (a, b) {
                (Some(a), b) if a.kind == EntryKind::Dir => match b.as_ref().map(|b| b.kind) {
                    Some(EntryKind::Dir) | None => {
                        if let (true, Some(t)) = (self.opts.copy.preserve, a.mtime) {
                            if b.as_ref().and_then(|b| b.mtime) != Some(t) {
                                self.dir_times.push((r.clone(), t));
                            }
                        }
                        if b.is_none() {
                            self.verdict(&r, Verdict::OnlyInSource);
                        }
                        dirs.push(DirJob {
                            rel: r,
                            dst_exists: b.is_some(),
                            mtime: a.mtime,
                        });
                    }
                    Some(_) => self.type_conflict(&r),
                },
                (Some(a), b) => {
                    let no_part = !parts.contains(&a.name);
                    self.compare_file(&r, a, b, no_part, queue)
                }
                (None, Some(b)) => {
                    self.verdict(&r, Verdict::OnlyInDest);
                    self.extra.push((r, b.kind));
                }
                (None, None) => {}
            }
        }
        // What this directory's copies and deletions will change: its
        // time, which is then put back.
        if self.opts.copy.preserve && !self.opts.dry_run {
            for job in queue.range_mut(queued..) {
                job.dir_time = mtime;
            }
            if let (true, Some(t)) = (self.opts.delete && self.extra.len() > extra, mtime) {
                self.dir_times.push((rel, t));
            }
        }
    }

    /// Source entries taking part: plain names, regular files and
    /// directories, allowed by the filter.
    fn keep_src(&self, rel: &[u8], e: &Entry) -> bool {
        if !path::safe_name(&e.name) {
            self.events.warn(format!(
                "{}: skipping the entry {:?}: not a plain file name",
                self.src.backend.display(&self.sp(rel)),
                String::from_utf8_lossy(&e.name)
            ));
            return false;
        }
        if e.kind == EntryKind::Other {
            self.events.warn(format!(
                "skipping {}: not a regular file or directory",
                self.src
                    .backend
                    .display(&self.sp(&path::join(rel, &e.name)))
            ));
            return false;
        }
        self.opts
            .filter
            .allows(&path::join(rel, &e.name), e.kind == EntryKind::Dir)
    }

    /// Destination entries taking part: not part files of copies (this
    /// run's or an interrupted one's), allowed by the filter.
    fn keep_dst(&self, rel: &[u8], e: &Entry) -> bool {
        if !path::safe_name(&e.name) || is_part_name(&e.name) {
            return false;
        }
        self.opts
            .filter
            .allows(&path::join(rel, &e.name), e.kind == EntryKind::Dir)
    }

    fn type_conflict(&mut self, rel: &[u8]) {
        self.report.differ += 1;
        self.verdict(rel, Verdict::Differs("type"));
        let e = TransferError::Usage(format!(
            "{}: a file on one side and a directory on the other; remove it from the destination \
             and run again",
            self.dst.backend.display(&self.dp(rel))
        ));
        self.fail(e);
    }

    fn verdict(&self, rel: &[u8], v: Verdict) {
        self.events.emit(Event::Compared {
            path: String::from_utf8_lossy(rel).into_owned(),
            verdict: v,
        });
    }

    /// Decide about one source file (`dst`: what the destination has).
    fn compare_file(
        &mut self,
        rel: &[u8],
        src: Entry,
        dst: Option<Entry>,
        no_part: bool,
        queue: &mut VecDeque<FileJob>,
    ) {
        self.report.checked += 1;
        let Some(d) = dst else {
            self.report.only_in_source += 1;
            self.verdict(rel, Verdict::OnlyInSource);
            self.queue_copy(rel, src, no_part, queue);
            return;
        };
        if d.kind != EntryKind::File {
            self.type_conflict(rel);
            return;
        }
        let rules = self.rules();
        if rules.needs_stat(&src, &d) {
            self.queue_job(rel, src, Then::Restat(d), no_part, queue);
            return;
        }
        let decision = rules.decide(&src, &d);
        let by_time = matches!(decision, Decision::Differs("time") | Decision::NewerInDest);
        if by_time && self.listed_times_approx.contains(&true) {
            // The listing's time may not be the file's: ask each such
            // side for its own (a HEAD on S3), then decide.
            let (mut src, mut d) = (src, d);
            if self.listed_times_approx[0] {
                src.mtime = None;
            }
            if self.listed_times_approx[1] {
                d.mtime = None;
            }
            self.queue_job(rel, src, Then::Restat(d), no_part, queue);
            return;
        }
        match decision {
            Decision::Same => self.report.same += 1,
            Decision::NewerInDest => {
                self.report.same += 1;
                self.verdict(rel, Verdict::NewerInDest);
            }
            Decision::Differs(why) => {
                self.report.differ += 1;
                self.verdict(rel, Verdict::Differs(why));
                self.queue_copy(rel, src, no_part, queue);
            }
            Decision::Hash => self.queue_job(rel, src, Then::Hash, no_part, queue),
        }
    }

    fn rules(&self) -> Rules {
        Rules {
            compare: self.opts.compare,
            modify_window: self.opts.modify_window,
            update: self.opts.update,
            ignore_existing: self.opts.ignore_existing,
        }
    }

    /// Queue work that decides by itself whether to copy.
    fn queue_job(
        &mut self,
        rel: &[u8],
        src: Entry,
        then: Then,
        no_part: bool,
        queue: &mut VecDeque<FileJob>,
    ) {
        queue.push_back(FileJob {
            rel: rel.to_vec(),
            src,
            then,
            no_part,
            dir_time: None,
        });
    }

    /// Queue a copy (counted in the progress totals), unless only
    /// deciding.
    fn queue_copy(&mut self, rel: &[u8], src: Entry, no_part: bool, queue: &mut VecDeque<FileJob>) {
        if self.opts.dry_run {
            return;
        }
        self.stats.files_total.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes_total
            .fetch_add(src.size.unwrap_or(0), Ordering::Relaxed);
        self.queue_job(rel, src, Then::Copy, no_part, queue);
    }

    /// Stat, compare hashes, copy: what the job still needs.
    fn file_work(
        &self,
        job: FileJob,
    ) -> impl std::future::Future<Output = Result<FileDone, TransferError>> + Send + 'static {
        let run = self.run.clone();
        let (sp, dp) = (self.sp(&job.rel), self.dp(&job.rel));
        let (sb, db) = (self.src.backend.clone(), self.dst.backend.clone());
        let hash = self.hash;
        let rules = self.rules();
        let dry = self.opts.dry_run;
        // The time to keep is the source file's own, not its listing's.
        let restat_src = self.listed_times_approx[0] && self.opts.copy.preserve && !dry;
        let rel = String::from_utf8_lossy(&job.rel).into_owned();
        let dir_time = job.dir_time.map(|t| (path::parent(&job.rel).to_vec(), t));
        async move {
            let mut done = FileDone {
                outcome: FileOutcome::NotCopied,
                read_to_hash: [false; 2],
                differs: false,
                dir_time: None,
            };
            let FileJob {
                mut src,
                then,
                no_part,
                ..
            } = job;
            let restat_src = restat_src && !matches!(then, Then::Restat(_));
            let differs = |why: &'static str, done: &mut FileDone| {
                done.differs = true;
                run.events.emit(Event::Compared {
                    path: rel.clone(),
                    verdict: Verdict::Differs(why),
                });
            };
            let then = match then {
                Then::Restat(mut d) => {
                    let (a, b) = tokio::join!(sb.stat(&sp), async {
                        if rules.lacks(&d) {
                            db.stat(&dp).await
                        } else {
                            Ok(None)
                        }
                    });
                    match (a, b) {
                        (Ok(Some(a)), Ok(b)) => {
                            src.size = a.size.or(src.size);
                            src.mtime = a.mtime.or(src.mtime);
                            if let Some(b) = b {
                                d.size = b.size.or(d.size);
                                d.mtime = b.mtime.or(d.mtime);
                            }
                        }
                        (Ok(None), _) => {
                            return Err(TransferError::Remote(format!(
                                "{}: vanished during the sync",
                                sb.display(&sp)
                            )))
                        }
                        (Err(e), _) | (_, Err(e)) => return Err(e),
                    }
                    match rules.decide(&src, &d) {
                        Decision::Same => {
                            done.outcome = FileOutcome::Same;
                            return Ok(done);
                        }
                        Decision::NewerInDest => {
                            run.events.emit(Event::Compared {
                                path: rel.clone(),
                                verdict: Verdict::NewerInDest,
                            });
                            done.outcome = FileOutcome::Same;
                            return Ok(done);
                        }
                        Decision::Differs(why) => {
                            differs(why, &mut done);
                            Then::Copy
                        }
                        Decision::Hash => Then::Hash,
                    }
                }
                t => t,
            };
            if let (Then::Hash, Some(algo)) = (&then, hash) {
                let ((ha, ra), (hb, rb)) =
                    crate::hash::pair(sb.as_ref(), &sp, db.as_ref(), &dp, algo).await?;
                done.read_to_hash = [ra, rb];
                if ha == hb {
                    done.outcome = FileOutcome::Same;
                    return Ok(done);
                }
                differs("hash", &mut done);
            }
            if dry {
                return Ok(done);
            }
            if restat_src {
                if let Some(a) = sb.stat(&sp).await? {
                    src.mtime = a.mtime.or(src.mtime);
                }
            }
            if done.differs {
                // Not counted when it was queued: count it now.
                run.stats.files_total.fetch_add(1, Ordering::Relaxed);
                run.stats
                    .bytes_total
                    .fetch_add(src.size.unwrap_or(0), Ordering::Relaxed);
            }
            let plan = FilePlan {
                source: 0,
                src: sp,
                dst: dp,
                size: src.size,
                mtime: src.mtime,
                mode: src.mode,
                no_part,
            };
            // Once there is work enough, the connections a copy wants
            // (a sync with little to copy needs only the one it lists on).
            let found = (
                run.stats.files_total.load(Ordering::Relaxed),
                run.stats.bytes_total.load(Ordering::Relaxed),
            );
            if found.0 >= SPREAD_FILES || found.1 >= SPREAD_BYTES {
                engine::prepare(&run, None).await;
            }
            done.dir_time = dir_time;
            let rep = engine::copy_file(&run, &plan).await;
            done.outcome = match rep.error {
                None => FileOutcome::Copied(rep.bytes),
                Some(e) => FileOutcome::CopyFailed(e),
            };
            Ok(done)
        }
    }

    fn file_done(&mut self, r: Result<FileDone, TransferError>) {
        let d = match r {
            Err(e) => return self.fail(e),
            Ok(d) => d,
        };
        for (side, read) in d.read_to_hash.iter().enumerate() {
            if !read {
                continue;
            }
            self.report.hashed_by_reading += 1;
            if !self.warned_reading[side] {
                self.warned_reading[side] = true;
                let (b, p) = if side == 0 {
                    (&self.src.backend, &self.src.path)
                } else {
                    (&self.dst.backend, &self.dst.path)
                };
                self.events.warn(format!(
                    "{}: this server cannot hash files; reading them through the connection to hash \
                     them (--checksum)",
                    b.display(p)
                ));
            }
        }
        if d.differs {
            self.report.differ += 1;
        }
        if let Some(dt) = d.dir_time {
            self.dir_times.push(dt);
        }
        match d.outcome {
            FileOutcome::Same => self.report.same += 1,
            FileOutcome::NotCopied => {}
            FileOutcome::Copied(b) => {
                self.report.copied += 1;
                self.report.bytes += b;
            }
            FileOutcome::CopyFailed(e) => self.report.errors.push(e),
        }
    }

    /// Deletions, directory times, the closing error.
    async fn finish(mut self) -> SyncReport {
        let cancelled = self.cancel.is_cancelled();
        if self.opts.delete && !self.extra.is_empty() {
            if cancelled {
                // Nothing deleted: said by the cancellation itself.
            } else if !self.report.errors.is_empty() {
                self.events.warn(format!(
                    "not deleting anything on the destination: {} error{} occurred (a sync deletes only \
                     after every listing and copy succeeded)",
                    self.report.errors.len(),
                    if self.report.errors.len() == 1 { "" } else { "s" }
                ));
            } else {
                self.delete_extra().await;
            }
        }
        if self.opts.copy.preserve && !self.opts.dry_run && !cancelled {
            self.put_dir_times().await;
        }
        self.report.only_in_dest = self
            .extra
            .iter()
            .filter(|(_, k)| *k != EntryKind::Dir)
            .count() as u64;
        let n = self.report.errors.len();
        self.report.error = if cancelled {
            Some(TransferError::cancelled())
        } else {
            self.report.errors.first().map(|e| {
                let msg = if n > 1 {
                    format!(
                        "{} (and {} more error{})",
                        e.message,
                        n - 1,
                        if n == 2 { "" } else { "s" }
                    )
                } else {
                    e.message.clone()
                };
                TransferError::from_kind(e.kind, msg)
            })
        };
        self.report
    }

    /// Directory times, after every copy and deletion (which change
    /// them); setting a child's time does not touch its parent's, so they
    /// go out together, each once.
    async fn put_dir_times(&mut self) {
        let mut times = std::mem::take(&mut self.dir_times);
        times.sort();
        times.dedup_by(|a, b| a.0 == b.0);
        let parallel = self.parallel().min(16);
        let dst = &self.dst;
        futures_util::stream::iter(times)
            .map(|(rel, t)| async move {
                let _ = dst
                    .backend
                    .set_attrs(&path::join_rel(&dst.path, &rel), Some(t), None)
                    .await;
            })
            .buffer_unordered(parallel)
            .collect::<()>()
            .await;
    }

    fn finish_with(mut self, e: TransferError) -> SyncReport {
        self.report.errors.push(crate::FileError {
            kind: e.kind(),
            message: e.to_string(),
        });
        self.report.error = Some(e);
        self.report
    }

    /// Remove what only the destination has: files first (within
    /// `max_delete`), then directories, deepest first.
    async fn delete_extra(&mut self) {
        // Directories only the destination has: everything under them
        // goes too (what the filter allows).
        let mut files: Vec<Vec<u8>> = Vec::new();
        let mut dirs: Vec<Vec<u8>> = Vec::new();
        let extra = std::mem::take(&mut self.extra);
        for (rel, kind) in &extra {
            match kind {
                EntryKind::Dir => {
                    if let Err(e) = self.collect_tree(rel, &mut files, &mut dirs).await {
                        self.fail(e);
                        self.events.warn(
                            "not deleting anything on the destination: a listing failed".into(),
                        );
                        self.extra = extra;
                        return;
                    }
                }
                _ => files.push(rel.clone()),
            }
        }
        self.extra = extra;
        if let Some(max) = self.opts.max_delete {
            if files.len() as u64 > max {
                self.fail(TransferError::Usage(format!(
                    "{}: {} files would be deleted, more than --max-delete {max}; nothing was deleted",
                    self.dst.backend.display(&self.dst.path),
                    files.len()
                )));
                return;
            }
        }
        let dry = self.opts.dry_run;
        let mut running = FuturesUnordered::new();
        let parallel = self.parallel().min(16);
        let mut todo = files.into_iter();
        loop {
            while running.len() < parallel {
                let Some(rel) = todo.next() else { break };
                let b = self.dst.backend.clone();
                let p = self.dp(&rel);
                running.push(async move {
                    let r = if dry { Ok(()) } else { b.remove(&p).await };
                    (rel, r)
                });
            }
            let Some((rel, r)) = running.next().await else {
                break;
            };
            self.after_delete(rel, r);
        }
        // Deepest first, one at a time (a parent needs its children gone).
        dirs.sort_by_key(|d| std::cmp::Reverse(d.iter().filter(|&&c| c == b'/').count()));
        for rel in dirs {
            let r = if dry {
                Ok(())
            } else {
                self.dst.backend.remove_dir(&self.dp(&rel)).await
            };
            self.after_delete(rel, r);
        }
    }

    fn after_delete(&mut self, rel: Vec<u8>, r: Result<(), TransferError>) {
        match r {
            Ok(()) => {
                self.report.deleted += 1;
                self.events.emit(Event::Deleted {
                    path: String::from_utf8_lossy(&rel).into_owned(),
                    dry_run: self.opts.dry_run,
                });
            }
            Err(e) => self.fail(e),
        }
    }

    /// Everything under a destination-only directory, for deletion.
    async fn collect_tree(
        &self,
        top: &[u8],
        files: &mut Vec<Vec<u8>>,
        dirs: &mut Vec<Vec<u8>>,
    ) -> Result<(), TransferError> {
        dirs.push(top.to_vec());
        let filter = &self.opts.filter;
        walk_tree(&self.dst.backend, &self.dp(top), |rel, e| {
            let r = path::join_rel(top, rel);
            let dir = e.kind == EntryKind::Dir;
            if !is_part_name(&e.name) && !filter.allows(&r, dir) {
                return Ok(false);
            }
            if dir {
                dirs.push(r);
            } else {
                files.push(r);
            }
            Ok(dir)
        })
        .await
    }
}

/// The engine's copy context for one source and destination place.
fn copy_run(
    src: &Place,
    dst: &Place,
    copy: &CopyOptions,
    stats: &Arc<Stats>,
    events: &Emitter,
    cancel: &Cancel,
) -> Arc<Run> {
    Arc::new(Run {
        sources: vec![src.clone()],
        dest: dst.clone(),
        opts: copy.clone(),
        stats: stats.clone(),
        events: events.clone(),
        cancel: cancel.clone(),
        prepared: Default::default(),
    })
}

/// NAME, for the part file `.NAME.ferry-part`.
fn part_of(name: &[u8]) -> Option<&[u8]> {
    name.strip_prefix(b".")?
        .strip_suffix(b".ferry-part")
        .filter(|n| !n.is_empty())
}

/// `.NAME.ferry-part` (a copy in progress, or one an interrupted run left
/// for `--resume`) and its `.NAME.ferry-resume` record.
fn is_part_name(name: &[u8]) -> bool {
    name.starts_with(b".") && (name.ends_with(b".ferry-part") || name.ends_with(b".ferry-resume"))
}
