//! `ferry sync`, `ferry check` and `ferry ls`: flags, output and exit
//! codes. The work is the library's (`ferry_engine::sync`, the backends);
//! docs/internals/sync.md describes it.
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{ArgMatches, Args};
use ferry_engine::backend::{Entry, EntryKind};
use ferry_engine::filter::{Filter, RuleKind};
use ferry_engine::sync::{Compare, Sync, SyncOptions, SyncReport};
use ferry_engine::{ErrorKind, Event, Location, Stats, TransferError, Verdict};

use crate::{on_interrupt, spawn_progress, ConnArgs, ShowArgs};

/// What to compare and which paths take part: shared by sync and check.
#[derive(Args)]
pub struct CompareArgs {
    /// Compare files of the same size by content hash (BLAKE3, or SHA-256
    /// where that is what the server computes), hashed where each file
    /// lives when its server can (ferry serve, the local disk); otherwise
    /// ferry says so and reads the file to hash it.
    #[arg(short = 'c', long, conflicts_with = "size_only")]
    checksum: bool,
    /// Compare by size alone.
    #[arg(long)]
    size_only: bool,
    /// Times this many seconds apart count as equal (for servers with
    /// coarse clocks, e.g. FAT or some FTP servers).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    modify_window: u64,
    /// Take part only if matched (rsync rules: `*` within a name, `**`
    /// across `/`, a leading `/` anchors at the top, a trailing `/` matches
    /// directories only; the first matching --include/--exclude wins);
    /// may be repeated.
    #[arg(long, value_name = "PATTERN")]
    include: Vec<String>,
    /// Leave out what matches (an excluded directory is not entered, and
    /// nothing under it is copied or deleted); may be repeated.
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Read --exclude patterns from a file, one per line (`+ PAT` includes,
    /// `#` starts a comment).
    #[arg(long, value_name = "FILE")]
    exclude_from: Vec<PathBuf>,
    /// Read --include patterns from a file, one per line.
    #[arg(long, value_name = "FILE")]
    include_from: Vec<PathBuf>,
}

impl CompareArgs {
    fn compare(&self) -> Compare {
        if self.checksum {
            Compare::Checksum
        } else if self.size_only {
            Compare::SizeOnly
        } else {
            Compare::SizeAndTime
        }
    }

    /// The rules in the order they were given on the command line.
    fn filter(&self, m: Option<&ArgMatches>) -> Result<Filter, String> {
        let mut rules: Vec<(usize, RuleKind, Source)> = Vec::new();
        let mut take = |id: &str, kind: RuleKind, values: Vec<Source>| {
            let at: Vec<usize> = m
                .and_then(|m| m.indices_of(id))
                .map(|i| i.collect())
                .unwrap_or_default();
            for (n, v) in values.into_iter().enumerate() {
                rules.push((at.get(n).copied().unwrap_or(usize::MAX), kind, v));
            }
        };
        let pat = |v: &[String]| v.iter().cloned().map(Source::Pattern).collect();
        let file = |v: &[PathBuf]| v.iter().cloned().map(Source::File).collect();
        take("include", RuleKind::Include, pat(&self.include));
        take("exclude", RuleKind::Exclude, pat(&self.exclude));
        take("include_from", RuleKind::Include, file(&self.include_from));
        take("exclude_from", RuleKind::Exclude, file(&self.exclude_from));
        rules.sort_by_key(|r| r.0);
        let mut f = Filter::default();
        for (_, kind, src) in rules {
            match src {
                Source::Pattern(p) => f.push(kind, &p)?,
                Source::File(path) => {
                    let text = std::fs::read_to_string(&path).map_err(|e| {
                        format!("{}: cannot read the patterns: {e}", path.display())
                    })?;
                    f.push_lines(kind, &text, &path.display().to_string())?;
                }
            }
        }
        Ok(f)
    }
}

enum Source {
    Pattern(String),
    File(PathBuf),
}

#[derive(Args)]
pub struct SyncArgs {
    /// The tree to copy from, and the one to make like it: any two
    /// locations `ferry cp` takes. The contents of SRC go into DST (a
    /// trailing `/` changes nothing), as with `rclone sync`.
    #[arg(value_name = "SRC")]
    src: String,
    #[arg(value_name = "DST")]
    dst: String,
    /// Decide and print what would be copied and deleted; change nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Delete what DST has and SRC does not, after every listing and copy
    /// succeeded (never after an error).
    #[arg(long)]
    delete: bool,
    /// With --delete: delete nothing if more than N files would go.
    #[arg(long, value_name = "N")]
    max_delete: Option<u64>,
    /// Skip files that are newer on DST (rsync's -u; -u is --user here).
    #[arg(long)]
    update: bool,
    /// Skip files that exist on DST, whatever their contents.
    #[arg(long)]
    ignore_existing: bool,
    /// Do not keep modification times and modes (the next run then
    /// compares by size and DST's times; see --size-only).
    #[arg(long)]
    no_times: bool,
    /// Start partial files over instead of continuing them.
    #[arg(long)]
    no_resume: bool,
    /// Print a JSON summary on stdout when done.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    compare: CompareArgs,
    #[command(flatten)]
    show: ShowArgs,
    #[command(flatten)]
    conn: ConnArgs,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The two trees to compare (any locations `ferry cp` takes).
    #[arg(value_name = "SRC")]
    src: String,
    #[arg(value_name = "DST")]
    dst: String,
    /// Print a JSON summary on stdout when done.
    #[arg(long)]
    json: bool,
    /// No summary line on stderr.
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    compare: CompareArgs,
    #[command(flatten)]
    conn: ConnArgs,
}

#[derive(Args)]
pub struct LsArgs {
    /// What to list: a directory or a file, at any location `ferry cp` takes.
    #[arg(value_name = "URL")]
    url: String,
    /// Long format: type and mode, size, modification time (UTC), name.
    #[arg(short, long)]
    long: bool,
    /// Everything below, as paths relative to URL (directories listed in
    /// parallel: their order may vary between runs; pipe through sort).
    #[arg(short = 'R', short_alias = 'r', long)]
    recursive: bool,
    /// One JSON array of {path, type, size, mtime, mode}.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

fn parse(arg: &str) -> Result<Location, i32> {
    Location::parse(arg).map_err(|e| {
        say!("ferry: {arg}: {e}");
        2
    })
}

fn sync_options(
    conn: ConnArgs,
    compare: &CompareArgs,
    m: Option<&ArgMatches>,
) -> Result<SyncOptions, i32> {
    let mut o = SyncOptions::default();
    let copy = conn.options().map_err(|e| {
        say!("ferry: {e}");
        2
    })?;
    o.copy = ferry_engine::CopyOptions {
        recursive: true,
        preserve: true,
        resume: true,
        ..copy
    };
    o.compare = compare.compare();
    o.modify_window = compare.modify_window;
    o.filter = compare.filter(m).map_err(|e| {
        say!("ferry: {e}");
        2
    })?;
    Ok(o)
}

/// Run a sync or check to the end, printing what the user asked for.
fn drive(sync: Sync, show: bool, verbose: bool, check: bool) -> SyncReport {
    let stats = Arc::new(Stats::default());
    let done = Arc::new(AtomicBool::new(false));
    let bar = show.then(|| spawn_progress(stats.clone(), done.clone()));
    let interrupted = on_interrupt();
    let out = std::io::stdout();
    // Events in batches every 20 ms: not a wake-up of this thread for
    // each of a file's three (docs/internals/sync.md).
    let report = ferry_engine::block_on_batched(
        move || sync.start(),
        std::time::Duration::from_millis(20),
        |ev| {
            stats.observe(ev);
            let mut o = out.lock();
            match ev {
                Event::Compared { path, verdict } if check || verbose => {
                    let _ = writeln!(o, "{}", describe(verdict, path));
                }
                Event::Deleted { path, dry_run } if *dry_run || verbose => {
                    let what = if *dry_run { "would delete" } else { "deleted" };
                    let _ = writeln!(o, "{what}: {path}");
                }
                Event::FileDone(f) => {
                    if let Some(e) = &f.error {
                        if e.kind != ErrorKind::Cancelled {
                            say!("ferry: {}", e.message);
                        }
                    } else if verbose {
                        let _ = writeln!(o, "copied: {} ({} bytes)", f.dest, f.bytes);
                    }
                }
                Event::Warning(w) => say!("ferry: warning: {w}"),
                _ => {}
            }
            !interrupted.load(Ordering::Relaxed)
        },
    );
    done.store(true, Ordering::Relaxed);
    if let Some(b) = bar {
        let _ = b.join();
    }
    report
}

fn describe(v: &Verdict, path: &str) -> String {
    match v {
        Verdict::OnlyInSource => format!("only in SRC: {path}"),
        Verdict::OnlyInDest => format!("only in DST: {path}"),
        Verdict::Differs(why) => format!("differs ({why}): {path}"),
        Verdict::NewerInDest => format!("newer in DST, kept: {path}"),
    }
}

fn summary_json(r: &SyncReport, dry_run: bool) -> serde_json::Value {
    serde_json::json!({
        "checked": r.checked,
        "same": r.same,
        "only_in_source": r.only_in_source,
        "only_in_dest": r.only_in_dest,
        "differ": r.differ,
        "copied": r.copied,
        "bytes": r.bytes,
        "deleted": r.deleted,
        "dry_run": dry_run,
        "hash": r.hash.map(|h| h.name()),
        "hashed_by_reading": r.hashed_by_reading,
        "errors": r.errors.iter().map(|e| e.message.clone()).collect::<Vec<_>>(),
        "seconds": r.seconds,
    })
}

fn exit_code(e: &TransferError) -> i32 {
    if e.kind() != ErrorKind::Cancelled {
        say!("ferry: {e}");
    }
    e.exit_code()
}

pub fn run_sync(a: SyncArgs, m: Option<&ArgMatches>, verbose: u8) -> i32 {
    let (src, dst) = match (parse(&a.src), parse(&a.dst)) {
        (Ok(s), Ok(d)) => (s, d),
        (Err(c), _) | (_, Err(c)) => return c,
    };
    if a.max_delete.is_some() && !a.delete {
        say!("ferry: --max-delete only means something with --delete");
        return 2;
    }
    let show = a.show.visible() && !a.dry_run;
    let mut o = match sync_options(a.conn, &a.compare, m) {
        Ok(o) => o,
        Err(c) => return c,
    };
    o.copy.preserve = !a.no_times;
    o.copy.resume = !a.no_resume;
    o.delete = a.delete;
    o.max_delete = a.max_delete;
    o.dry_run = a.dry_run;
    o.update = a.update;
    o.ignore_existing = a.ignore_existing;
    let r = drive(
        Sync::new(src, dst, o),
        show,
        verbose > 0 || a.dry_run,
        false,
    );
    if a.json {
        println!("{}", summary_json(&r, a.dry_run));
    }
    if !a.show.quiet {
        let verb = if a.dry_run { "would copy" } else { "copied" };
        let del = if a.dry_run { "would delete" } else { "deleted" };
        let to_copy = if a.dry_run {
            r.only_in_source + r.differ
        } else {
            r.copied
        };
        say!(
            "ferry: {} files checked, {} same, {verb} {} ({}), {del} {}, {} error{} in {:.2} s",
            r.checked,
            r.same,
            to_copy,
            indicatif::HumanBytes(r.bytes),
            r.deleted,
            r.errors.len(),
            if r.errors.len() == 1 { "" } else { "s" },
            r.seconds
        );
    }
    match &r.error {
        None => 0,
        Some(e) => exit_code(e),
    }
}

/// Exit codes: 0 the trees match, 1 they differ, else the error's code.
pub fn run_check(a: CheckArgs, m: Option<&ArgMatches>, _verbose: u8) -> i32 {
    let (src, dst) = match (parse(&a.src), parse(&a.dst)) {
        (Ok(s), Ok(d)) => (s, d),
        (Err(c), _) | (_, Err(c)) => return c,
    };
    let mut o = match sync_options(a.conn, &a.compare, m) {
        Ok(o) => o,
        Err(c) => return c,
    };
    o.check_only = true;
    let r = drive(Sync::new(src, dst, o), false, false, true);
    if a.json {
        println!("{}", summary_json(&r, true));
    }
    if !a.quiet {
        say!(
            "ferry: {} files checked: {} same, {} differ, {} only in SRC, {} only in DST{}",
            r.checked,
            r.same,
            r.differ,
            r.only_in_source,
            r.only_in_dest,
            r.hash
                .map(|h| format!(" (compared by {})", h.name()))
                .unwrap_or_default()
        );
    }
    match &r.error {
        Some(e) => exit_code(e),
        None if r.trees_match() => 0,
        None => 1,
    }
}

pub fn run_ls(a: LsArgs) -> i32 {
    let loc = match parse(&a.url) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let opts = match a.conn.options() {
        Ok(o) => o,
        Err(e) => {
            say!("ferry: {e}");
            return 2;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say!("ferry: cannot start a runtime: {e}");
            return 1;
        }
    };
    let (long, json, recursive) = (a.long, a.json, a.recursive);
    let res = rt.block_on(async move {
        let opened = ferry_engine::backend::connect(&loc, &opts).await?;
        let r = list(&opened, long, json, recursive).await;
        opened.backend.close().await;
        r
    });
    match res {
        Ok(()) => 0,
        Err(e) => exit_code(&e),
    }
}

async fn list(
    o: &ferry_engine::backend::Opened,
    long: bool,
    json: bool,
    recursive: bool,
) -> Result<(), TransferError> {
    let b = &o.backend;
    let top = b.stat(&o.path).await?.ok_or_else(|| {
        TransferError::Remote(format!("{}: no such file or directory", b.display(&o.path)))
    })?;
    let mut out = Printer::new(long, json);
    if top.kind != EntryKind::Dir {
        out.entry(&top.name, &top)?;
        return out.end();
    }
    ferry_engine::backend::walk_tree(b, &o.path, |rel, e| {
        out.entry(rel, e)?;
        Ok(recursive && e.kind == EntryKind::Dir)
    })
    .await?;
    out.end()
}

/// Writes entries as they come: plain names, `ls -l`-like lines, or one
/// JSON array.
struct Printer {
    long: bool,
    json: bool,
    first: bool,
    out: std::io::BufWriter<std::io::Stdout>,
}

impl Printer {
    fn new(long: bool, json: bool) -> Printer {
        Printer {
            long,
            json,
            first: true,
            out: std::io::BufWriter::new(std::io::stdout()),
        }
    }

    fn entry(&mut self, rel: &[u8], e: &Entry) -> Result<(), TransferError> {
        let name = String::from_utf8_lossy(rel);
        let dir = e.kind == EntryKind::Dir;
        let line = if self.json {
            let v = serde_json::json!({
                "path": name,
                "type": match e.kind { EntryKind::File => "file", EntryKind::Dir => "dir", EntryKind::Other => "other" },
                "size": e.size,
                "mtime": e.mtime,
                "mode": e.mode,
            });
            let sep = if self.first { "[\n" } else { ",\n" };
            format!("{sep}{v}")
        } else if self.long {
            let kind = match e.kind {
                EntryKind::Dir => 'd',
                EntryKind::File => '-',
                EntryKind::Other => '?',
            };
            format!(
                "{kind}{} {:>14} {} {name}{}\n",
                e.mode
                    .map(mode_string)
                    .unwrap_or_else(|| "?????????".into()),
                e.size.map(|s| s.to_string()).unwrap_or_else(|| "-".into()),
                e.mtime
                    .map(time_string)
                    .unwrap_or_else(|| "-                  ".into()),
                if dir { "/" } else { "" }
            )
        } else {
            format!("{name}{}\n", if dir { "/" } else { "" })
        };
        self.first = false;
        self.out
            .write_all(line.as_bytes())
            .map_err(|e| TransferError::Local(format!("stdout: {e}")))
    }

    fn end(mut self) -> Result<(), TransferError> {
        if self.json {
            let close = if self.first { "[]\n" } else { "\n]\n" };
            let _ = self.out.write_all(close.as_bytes());
        }
        self.out
            .flush()
            .map_err(|e| TransferError::Local(format!("stdout: {e}")))
    }
}

fn mode_string(m: u32) -> String {
    let mut s = String::with_capacity(9);
    for (bit, c) in [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o040, 'r'),
        (0o020, 'w'),
        (0o010, 'x'),
        (0o004, 'r'),
        (0o002, 'w'),
        (0o001, 'x'),
    ] {
        s.push(if m & bit != 0 { c } else { '-' });
    }
    s
}

fn time_string(t: i64) -> String {
    let (y, mo, d, h, mi, s) = ferry_sftp::civil(t);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
}
