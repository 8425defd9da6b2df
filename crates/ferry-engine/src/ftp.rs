//! Copies over FTP and FTPS: downloads of files and (with `-r`) trees,
//! uploads of files and trees, `-P` files at once and `--streams N` byte
//! ranges of one file, resume with REST (downloads) and APPE (uploads).
//!
//! FTP moves one file per control connection at a time, so parallelism is
//! connections: a bounded [`Pool`] per server, one worker thread per
//! connection, each pulling jobs (a whole file, one byte range, one
//! upload) from one queue. The blocking suppaftp client is used on these
//! threads: it reads at memory speed on loopback and needs no runtime
//! (docs/internals/ftp.md has the numbers).
//!
//! Shape of a download: the planner (on the caller's thread, on the first
//! connection) resolves each URL to a file (SIZE) or a directory (CWD), and
//! walks directories with MLSD or `LIST -a`; each file then goes to
//! `.NAME.ferry-part` and is renamed over NAME only when every byte
//! arrived (crate::part, shared with the HTTP path). Uploads go to
//! `.NAME.ferry-part` on the server, are checked with SIZE, and are renamed
//! with RNFR/RNTO.
use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferry_ftp::listing::Kind;
use ferry_ftp::{Conn, Endpoint, FtpError, Security};

use crate::error::TransferError;
use crate::journal;
use crate::location::{FtpSpec, Location};
use crate::loop_util::{check_local_sources, report, walk_local, with_more};
use crate::part::{self, kept, open_part, paths, write_at, Partial, Paths, NO_RESUME_BELOW};
use crate::{CopyOptions, Stats, Summary, Tuning};

/// Smallest byte range worth its own connection with `--streams`.
const MIN_SEGMENT: u64 = 1024 * 1024;
/// Bytes read from the data connection before one write to the file.
const BUF: usize = 1024 * 1024;
/// Attempts per file or range when the connection fails.
const ATTEMPTS: u32 = 3;
/// Bytes before the end of a partial upload compared with the local file
/// before APPE continues it.
const RESUME_CHECK: u64 = 64 * 1024;

/// FTP(S) options of `ferry cp`.
#[derive(Debug, Clone, Default)]
pub struct FtpOptions {
    /// `ftp://` with AUTH TLS, refused if the server cannot (curl's
    /// `--ssl-reqd`).
    pub ssl_reqd: bool,
}

pub(crate) fn copy(
    sources: &[Location],
    dest: &Location,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    match dest {
        Location::Local(d) => {
            let mut specs = Vec::new();
            for s in sources {
                match s {
                    Location::Ftp(f) => specs.push(f.clone()),
                    Location::Local(p) => {
                        return Err(TransferError::Usage(format!(
                            "{}: copy from FTP URLs and local files in separate commands",
                            p.display()
                        )))
                    }
                    other => return Err(TransferError::remote_to_remote(other)),
                }
            }
            let first = specs
                .first()
                .ok_or_else(|| TransferError::Usage("no source".into()))?;
            if let Some(other) = specs.iter().find(|s| !s.same_endpoint(first)) {
                return Err(TransferError::Usage(format!(
                    "{} and {} are on different servers or accounts; copy from one at a time",
                    first.original, other.original
                )));
            }
            download(&specs, d, opts, stats)
        }
        Location::Ftp(d) => {
            let mut files = Vec::new();
            for s in sources {
                match s {
                    Location::Local(p) => files.push(p.clone()),
                    other => return Err(TransferError::remote_to_remote(other)),
                }
            }
            upload(&files, d, opts, stats)
        }
        Location::Sftp(_) | Location::Http(_) | Location::S3(_) => {
            Err(TransferError::remote_to_remote(dest))
        }
    }
}

impl From<FtpError> for TransferError {
    fn from(e: FtpError) -> Self {
        match e {
            FtpError::Usage(m) => TransferError::Usage(m),
            FtpError::Trust(m) | FtpError::Auth(m) => TransferError::Auth(m),
            e @ FtpError::Reply { .. } => TransferError::Remote(e.to_string()),
            FtpError::Remote(m) => TransferError::Remote(m),
            FtpError::Network(m) => TransferError::Network(m),
        }
    }
}

// ------------------------------------------------------------- endpoint

/// User and password, in curl's order: the URL, then `-u`, then
/// `FERRY_PASSWORD` (for a user without a password), then `~/.netrc`,
/// else anonymous.
fn credentials(spec: &FtpSpec, opts: &CopyOptions) -> (String, String) {
    let dash_u = opts.http.user.as_deref().map(|u| match u.split_once(':') {
        Some((a, b)) => (a.to_string(), Some(b.to_string())),
        None => (u.to_string(), None),
    });
    let netrc = if opts.http.netrc {
        ferry_http::auth::load_netrc(None)
    } else {
        Vec::new()
    };
    let entry = ferry_http::auth::netrc_lookup(&netrc, &spec.host);
    let (user, pass) = match (&spec.user, dash_u) {
        (Some(u), d) => {
            let from_u = d.filter(|(du, _)| du == u).and_then(|(_, p)| p);
            (u.clone(), spec.password.clone().or(from_u))
        }
        (None, Some((u, p))) => (u, p),
        (None, None) => match entry {
            Some(e) => return (e.login.clone(), e.password.clone()),
            None => return ("anonymous".into(), "ferry@".into()),
        },
    };
    let pass = pass
        .or_else(|| {
            opts.connect
                .prompt
                .password(&format!("{user}@{}", spec.host), opts.connect.interactive)
        })
        .or_else(|| {
            entry
                .filter(|e| e.login == user)
                .map(|e| e.password.clone())
        })
        .unwrap_or_default();
    (user, pass)
}

pub(crate) fn endpoint(spec: &FtpSpec, opts: &CopyOptions) -> Result<Arc<Endpoint>, TransferError> {
    let security = if spec.implicit_tls {
        Security::Implicit
    } else if opts.ftp.ssl_reqd {
        Security::Explicit
    } else {
        Security::Plain
    };
    let port = spec.port.unwrap_or(if spec.implicit_tls {
        ferry_ftp::FTPS_PORT
    } else {
        ferry_ftp::FTP_PORT
    });
    let tls = if security == Security::Plain {
        None
    } else {
        if opts.http.tls.insecure {
            tracing::warn!(
                "--insecure: the server's certificate is not checked; anyone on the path can read and change this transfer"
            );
        }
        Some(ferry_http::tls::client_config(&opts.http.tls, &[])?)
    };
    let (user, pass) = credentials(spec, opts);
    let mut ep = Endpoint::new(&spec.host, port, &user, &pass, security, tls);
    // A connection that moves no byte for this long has stalled: its
    // sockets' read and write timeouts end the wait (`--timeout`).
    ep.timeout = opts.timeout;
    Ok(Arc::new(ep))
}

fn protocol(ep: &Endpoint) -> &'static str {
    match ep.security {
        Security::Plain => "ftp",
        Security::Explicit | Security::Implicit => "ftps",
    }
}

/// `path` from the URL made absolute: relative ones are under the login
/// directory (curl's reading of ftp:// paths).
pub(crate) fn absolute(home: &str, path: &str) -> String {
    if path.starts_with('/') {
        return path.to_string();
    }
    let p = path.trim_end_matches('/');
    if p.is_empty() {
        return home.to_string();
    }
    join(home, p)
}

fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn basename(p: &str) -> &str {
    p.trim_end_matches('/').rsplit('/').next().unwrap_or("")
}

fn parent(p: &str) -> &str {
    match p.trim_end_matches('/').rsplit_once('/') {
        Some(("", _)) => "/",
        Some((d, _)) => d,
        None => ".",
    }
}

/// The server's temporary name next to `remote`: `.NAME.ferry-part`.
fn remote_tmp(remote: &str) -> String {
    join(parent(remote), &format!(".{}.ferry-part", basename(remote)))
}

// ----------------------------------------------------------------- pool

/// Control connections to one server, at most `max`, reused across jobs.
struct Pool {
    ep: Arc<Endpoint>,
    idle: Mutex<Vec<Conn>>,
    opened: AtomicUsize,
}

impl Pool {
    fn new(ep: Arc<Endpoint>) -> Pool {
        Pool {
            ep,
            idle: Mutex::new(Vec::new()),
            opened: AtomicUsize::new(0),
        }
    }

    fn get(&self) -> Result<Conn, FtpError> {
        if let Some(c) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(c);
        }
        let c = Conn::open(&self.ep)?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(c)
    }

    fn put(&self, c: Conn) {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(c);
    }

    fn close(&self) {
        let conns: Vec<Conn> =
            std::mem::take(&mut *self.idle.lock().unwrap_or_else(|e| e.into_inner()));
        for c in conns {
            c.quit();
        }
    }
}

/// The first error (returned, and printed by the caller) and how many
/// there were; the others are printed as they come (`sftp::report`).
#[derive(Default)]
struct Errors {
    first: Option<TransferError>,
    count: usize,
}

impl Errors {
    fn add(m: &Mutex<Errors>, e: TransferError) {
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        g.count += 1;
        report(&mut g.first, e);
    }

    fn result(m: Mutex<Errors>) -> Result<(), TransferError> {
        let g = m.into_inner().unwrap_or_else(|e| e.into_inner());
        match g.first {
            None => Ok(()),
            Some(e) if g.count > 1 => Err(with_more(e, g.count - 1)),
            Some(e) => Err(e),
        }
    }
}

/// Run `jobs` on `workers` threads, each with its own connection from
/// `pool`. A job returns whether its connection is still usable.
fn run_jobs<J: Send>(
    pool: &Pool,
    jobs: Vec<J>,
    workers: usize,
    run: impl Fn(&mut Option<Conn>, &J, &mut Vec<u8>) -> Result<(), TransferError> + Sync,
) -> Result<(), TransferError> {
    let workers = workers.clamp(1, jobs.len().max(1));
    let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<J>>());
    let errors = Mutex::new(Errors::default());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut buf = Vec::with_capacity(BUF);
                let mut conn: Option<Conn> = None;
                loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some(job) = job else { break };
                    if let Err(e) = run(&mut conn, &job, &mut buf) {
                        Errors::add(&errors, e);
                    }
                }
                if let Some(c) = conn {
                    pool.put(c);
                }
            });
        }
    });
    Errors::result(errors)
}

/// Run `f` on a connection, reconnecting and trying again (at most
/// [`ATTEMPTS`] times) when the connection fails; a refusal (a 5xx reply)
/// or a local error is not retried. `f` gets the attempt number and keeps
/// its own progress, so a retry continues where the last one stopped.
fn with_conn<T>(
    pool: &Pool,
    conn: &mut Option<Conn>,
    what: &str,
    mut f: impl FnMut(&mut Conn, u32) -> Result<T, Fail>,
) -> Result<T, TransferError> {
    let mut attempt = 0;
    // What failed the last attempt: the message that names the file.
    let mut last: Option<TransferError> = None;
    loop {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match pool.get() {
                Ok(c) => conn.insert(c),
                Err(e) if e.is_network() && attempt + 1 < ATTEMPTS => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(300 * attempt as u64));
                    continue;
                }
                Err(e) => {
                    return Err(match last {
                        Some(TransferError::Network(m)) => {
                            TransferError::Network(format!("{m} (connecting again: {e})"))
                        }
                        _ => e.into(),
                    })
                }
            },
        };
        match f(c, attempt) {
            Ok(v) => return Ok(v),
            Err(Fail::Conn(e)) => {
                // The connection is in an unknown state: never reuse it.
                *conn = None;
                if attempt + 1 >= ATTEMPTS {
                    return Err(e);
                }
                attempt += 1;
                tracing::info!("{what}: {e}; trying again ({attempt})");
                last = Some(e);
                std::thread::sleep(Duration::from_millis(300 * attempt as u64));
            }
            Err(Fail::Final(e, reusable)) => {
                if !reusable {
                    *conn = None;
                }
                return Err(e);
            }
        }
    }
}

/// How a job failed.
enum Fail {
    /// The connection failed: worth another connection.
    Conn(TransferError),
    /// A refusal or a local error: final; whether the connection is still
    /// in a known state.
    Final(TransferError, bool),
}

impl From<FtpError> for Fail {
    fn from(e: FtpError) -> Fail {
        match e {
            e @ FtpError::Network(_) => Fail::Conn(e.into()),
            e @ FtpError::Reply { .. } => Fail::Final(e.into(), true),
            e => Fail::Final(e.into(), false),
        }
    }
}

fn local_fail(e: TransferError) -> Fail {
    Fail::Final(e, false)
}

/// Fill `buf` (up to `want` bytes) from `r`; fewer only at the end.
fn fill(r: &mut impl Read, buf: &mut Vec<u8>, want: usize) -> std::io::Result<usize> {
    buf.resize(want, 0);
    let mut n = 0;
    while n < want {
        match r.read(buf.get_mut(n..).unwrap_or_default()) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(n)
}

// ------------------------------------------------------------- download

/// One remote file to one local file.
struct GetFile {
    remote: String,
    url: String,
    dst: PathBuf,
    p: Paths,
    size: u64,
    mtime: Option<i64>,
    /// What the resume record checks: the server's MDTM and the size.
    validator: Option<String>,
    /// With --streams: the shared part file and the ranges that arrived.
    split: Option<Split>,
}

struct Split {
    file: File,
    arrived: Mutex<Vec<(u64, u64)>>,
    left: AtomicUsize,
    failed: AtomicBool,
}

enum GetJob {
    /// The whole file, from byte `from` (a resumed prefix).
    Whole(Arc<GetFile>, u64),
    Range(Arc<GetFile>, u64, u64),
}

struct GetCtx<'a> {
    pool: &'a Pool,
    stats: &'a Stats,
}

fn download(
    sources: &[FtpSpec],
    dest: &Path,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    let first = sources
        .first()
        .ok_or_else(|| TransferError::Usage("no source".into()))?;
    let dest = &crate::part::local_dest(dest)?;
    let dest_is_dir = dest.is_dir();
    let into = dest_is_dir || dest.as_os_str().as_bytes().ends_with(b"/");
    if sources.len() > 1 && !dest_is_dir {
        return Err(TransferError::Usage(format!(
            "{}: several sources need an existing directory as destination",
            dest.display()
        )));
    }
    let ep = endpoint(first, opts)?;
    let pool = Pool::new(ep.clone());
    let mut conn = pool.get()?;
    let streams = opts.streams.unwrap_or(Tuning::FTP_STREAMS).max(1);
    let mut files: Vec<(String, PathBuf, u64, Option<i64>)> = Vec::new();
    let mut dirs: Vec<(PathBuf, Option<i64>)> = Vec::new();
    for src in sources {
        let abs = absolute(&conn.home, &src.path);
        let url = conn.url(&abs);
        let name = basename(&abs).to_string();
        let named = |root: &Path| {
            if into && ferry_http::listing::safe_name(name.as_bytes()) {
                root.join(&name)
            } else {
                root.to_path_buf()
            }
        };
        // SIZE's refusal, kept for the message if it is not a directory.
        let mut refusal = None;
        let size = if src.trailing_slash() {
            None
        } else {
            match conn.size(&abs) {
                Ok(n) => Some(n),
                Err(e) if e.is_not_found() => {
                    refusal = e.code().map(|c| match &e {
                        FtpError::Reply { text, .. } => format!(" ({c} {text})"),
                        _ => String::new(),
                    });
                    None
                }
                Err(e) => return Err(e.into()),
            }
        };
        if let Some(size) = size {
            if into && !ferry_http::listing::safe_name(name.as_bytes()) {
                return Err(TransferError::Usage(format!(
                    "{url}: no file name in the URL; give the destination file name"
                )));
            }
            let mtime = opts.preserve.then(|| conn.mdtm(&abs)).flatten();
            files.push((abs, named(dest), size, mtime));
            continue;
        }
        if !conn.is_dir(&abs)? {
            return Err(TransferError::Remote(format!(
                "{url}: no such file or directory on the server{}",
                refusal.unwrap_or_default()
            )));
        }
        if !opts.recursive {
            return Err(TransferError::Usage(format!(
                "{url}: is a directory; use -r to copy it"
            )));
        }
        let root = named(dest);
        walk(&mut conn, &abs, &root, &mut files, &mut dirs)?;
    }
    for (d, _) in &dirs {
        std::fs::create_dir_all(d)
            .map_err(|e| TransferError::local(d, "cannot create directory", e))?;
    }
    stats
        .files_total
        .fetch_add(files.len() as u64, Ordering::Relaxed);
    let nfiles = files.len() as u64;
    let mut jobs = Vec::new();
    for (remote, dst, size, mtime) in files {
        plan_file(
            &mut conn, remote, dst, size, mtime, opts, streams, &stats, &mut jobs,
        )?;
    }
    pool.put(conn);
    let ctx = GetCtx {
        pool: &pool,
        stats: &stats,
    };
    let workers = opts.parallel.unwrap_or(Tuning::FTP_PARALLEL).max(streams);
    let r = run_jobs(&pool, jobs, workers, |conn, job, buf| {
        run_get(&ctx, conn, job, buf)
    });
    pool.close();
    r?;
    if opts.preserve {
        for (d, m) in dirs.iter().rev() {
            if let Some(m) = m {
                let m = (*m).clamp(0, u32::MAX as i64) as u32;
                crate::loop_util::set_local_times(d, m, m);
            }
        }
    }
    Ok(Summary {
        bytes: stats.bytes_done.load(Ordering::Relaxed),
        files: nfiles,
        seconds: started.elapsed().as_secs_f64(),
        protocol: protocol(&ep),
        streams: pool.opened.load(Ordering::Relaxed),
        chunk: 0,
        cipher: None,
    })
}

/// Walk the remote directory `dir` into `root`, depth first.
fn walk(
    conn: &mut Conn,
    dir: &str,
    root: &Path,
    files: &mut Vec<(String, PathBuf, u64, Option<i64>)>,
    dirs: &mut Vec<(PathBuf, Option<i64>)>,
) -> Result<(), TransferError> {
    dirs.push((root.to_path_buf(), None));
    let mut stack = vec![(dir.to_string(), root.to_path_buf())];
    while let Some((d, local)) = stack.pop() {
        let (entries, refused) = conn.list(&d)?;
        for r in refused {
            tracing::warn!(
                "{}: skipping the entry {r:?}: not a plain file name (it could write outside the destination)",
                conn.url(&d)
            );
        }
        for e in entries {
            let l = local.join(&e.name);
            let r = join(&d, &e.name);
            match e.kind {
                Kind::Dir => {
                    dirs.push((l.clone(), e.mtime));
                    stack.push((r, l));
                }
                Kind::File | Kind::Symlink => files.push((r, l, e.size, e.mtime)),
            }
        }
    }
    Ok(())
}

/// Decide how one file is fetched: resumed from its record, whole, or in
/// ranges; counts it in the totals and queues its jobs.
#[allow(clippy::too_many_arguments)]
fn plan_file(
    conn: &mut Conn,
    remote: String,
    dst: PathBuf,
    size: u64,
    mtime: Option<i64>,
    opts: &CopyOptions,
    streams: usize,
    stats: &Stats,
    jobs: &mut Vec<GetJob>,
) -> Result<(), TransferError> {
    if dst.is_dir() {
        return Err(TransferError::Local(format!(
            "{}: is a directory; cannot replace it with the file {}",
            dst.display(),
            conn.url(&remote)
        )));
    }
    let url = conn.url(&remote);
    let p = paths(&dst);
    let split_it = streams > 1 && size >= 2 * MIN_SEGMENT;
    // Only files worth a record get one, and only they need the MDTM.
    let worth = size >= NO_RESUME_BELOW;
    let validator = if worth {
        conn.mdtm(&remote).map(|t| format!("mdtm {t}"))
    } else {
        None
    };
    let mut done: Vec<(u64, u64)> = Vec::new();
    if opts.resume {
        let part_len = std::fs::metadata(&p.tmp).map(|m| m.len()).unwrap_or(0);
        match Partial::read(&p.journal) {
            Some(pr)
                if validator.is_some() && pr.validator == validator && pr.size == Some(size) =>
            {
                done = if pr.sequential {
                    vec![(0, part_len.min(size))]
                } else {
                    pr.done.clone()
                };
            }
            Some(_) => tracing::warn!(
                "{url}: the file changed on the server since the partial download; starting over"
            ),
            None if part_len > 0 => tracing::warn!(
                "{url}: no resume record next to {}; starting over",
                p.tmp.display()
            ),
            None => {}
        }
    }
    let done = journal::merge(done);
    let todo = journal::missing(&done, size);
    let todo_bytes: u64 = todo.iter().map(|(a, b)| b - a).sum();
    stats.bytes_total.fetch_add(todo_bytes, Ordering::Relaxed);
    let mtime = if opts.preserve { mtime } else { None };
    if split_it {
        let keep = std::fs::metadata(&p.tmp).map(|m| m.len()).unwrap_or(0);
        let file = open_part(&p.tmp, if done.is_empty() { 0 } else { keep })?;
        file.set_len(size)
            .map_err(|e| TransferError::local(&p.tmp, "cannot size", e))?;
        // Written before the first byte lands: a killed ferry leaves a
        // record that errs on the side of fetching again.
        let state = Partial {
            validator: validator.clone(),
            size: Some(size),
            sequential: false,
            done: done.clone(),
        };
        if validator.is_some() {
            state
                .write(&p.journal)
                .map_err(|e| TransferError::local(&p.journal, "cannot write", e))?;
        }
        let piece = todo_bytes.div_ceil(streams as u64).max(MIN_SEGMENT);
        let mut pieces = Vec::new();
        for (mut a, b) in todo {
            while a < b {
                let e = (a + piece).min(b);
                pieces.push((a, e));
                a = e;
            }
        }
        if pieces.is_empty() {
            // Everything arrived before: only the rename is left.
            drop(file);
            part::finish(&p, &dst, mtime.map(clamp32), validator.is_some(), stats)?;
            return Ok(());
        }
        let f = Arc::new(GetFile {
            remote,
            url,
            dst,
            p,
            size,
            mtime,
            validator,
            split: Some(Split {
                file,
                arrived: Mutex::new(done),
                left: AtomicUsize::new(pieces.len()),
                failed: AtomicBool::new(false),
            }),
        });
        for (a, b) in pieces {
            jobs.push(GetJob::Range(f.clone(), a, b));
        }
    } else {
        let from = match done.first() {
            Some(&(0, b)) => b,
            _ => 0,
        };
        let f = Arc::new(GetFile {
            remote,
            url,
            dst,
            p,
            size,
            mtime,
            validator,
            split: None,
        });
        jobs.push(GetJob::Whole(f, from));
    }
    Ok(())
}

fn clamp32(t: i64) -> u32 {
    t.clamp(0, u32::MAX as i64) as u32
}

fn run_get(
    ctx: &GetCtx,
    conn: &mut Option<Conn>,
    job: &GetJob,
    buf: &mut Vec<u8>,
) -> Result<(), TransferError> {
    match job {
        GetJob::Whole(f, from) => get_whole(ctx, conn, f, *from, buf),
        GetJob::Range(f, a, b) => {
            let Some(split) = &f.split else {
                return Err(TransferError::Local(
                    "internal: a range of an unsplit file".into(),
                ));
            };
            let r = get_range(ctx, conn, f, split, (*a, *b), buf);
            if r.is_err() {
                split.failed.store(true, Ordering::Relaxed);
            }
            // The last range to end finishes the file, or records what
            // arrived.
            if split.left.fetch_sub(1, Ordering::AcqRel) == 1 {
                let got = journal::merge(
                    split
                        .arrived
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone(),
                );
                if split.failed.load(Ordering::Relaxed) {
                    let state = Partial {
                        validator: f.validator.clone(),
                        size: Some(f.size),
                        sequential: false,
                        done: got,
                    };
                    if f.validator.is_some() {
                        if let Err(we) = state.write(&f.p.journal) {
                            tracing::warn!("cannot write {}: {we}", f.p.journal.display());
                        }
                    }
                } else if got != [(0, f.size)] {
                    return Err(TransferError::Network(format!(
                        "{}: ranges missing after the transfer; rerun with --resume",
                        f.url
                    )));
                } else {
                    part::finish(
                        &f.p,
                        &f.dst,
                        f.mtime.map(clamp32),
                        f.validator.is_some(),
                        ctx.stats,
                    )?;
                }
            }
            r
        }
    }
}

/// RETR the file from `from` into its part file, in order.
fn get_whole(
    ctx: &GetCtx,
    conn: &mut Option<Conn>,
    f: &GetFile,
    from: u64,
    buf: &mut Vec<u8>,
) -> Result<(), TransferError> {
    let record = f.validator.is_some() && f.size - from >= NO_RESUME_BELOW;
    let mut at = from;
    let mut file: Option<File> = None;
    let r = with_conn(ctx.pool, conn, &f.url, |c, _| {
        let mut t = c.retr(&f.remote, at)?;
        // Created once the server agreed to send (a refused RETR leaves no
        // part file behind).
        if file.is_none() {
            let fh = open_part(&f.p.tmp, at).map_err(local_fail)?;
            if record {
                let state = Partial {
                    validator: f.validator.clone(),
                    size: Some(f.size),
                    sequential: true,
                    done: Vec::new(),
                };
                state.write(&f.p.journal).map_err(|e| {
                    local_fail(TransferError::local(&f.p.journal, "cannot write", e))
                })?;
            }
            file = Some(fh);
        }
        let Some(fh) = file.as_ref() else {
            return Err(local_fail(TransferError::Local(
                "internal: no part file".into(),
            )));
        };
        loop {
            let n = fill(&mut t, buf, BUF).map_err(|e| {
                Fail::Conn(TransferError::Network(format!(
                    "{}: connection lost after {at} of {} bytes: {e}",
                    f.url, f.size
                )))
            })?;
            if n == 0 {
                break;
            }
            write_at(fh, buf, at, &f.p.tmp).map_err(local_fail)?;
            at += n as u64;
            ctx.stats.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
            ctx.stats.check().map_err(local_fail)?;
        }
        c.finish(t, &f.remote)?;
        if at != f.size {
            return Err(Fail::Final(
                TransferError::Network(format!(
                    "{}: the transfer ended after {at} of {} bytes (did the file change?)",
                    f.url, f.size
                )),
                true,
            ));
        }
        Ok(())
    });
    if let Err(e) = r {
        return Err(if file.is_some() { kept(e, &f.p.tmp) } else { e });
    }
    drop(file);
    part::finish(&f.p, &f.dst, f.mtime.map(clamp32), record, ctx.stats)
}

/// REST a + RETR, write bytes [a, b) in place, then close the data
/// connection (Conn::close_early says why not ABOR), or, for the last
/// range, read the end of the transfer.
fn get_range(
    ctx: &GetCtx,
    conn: &mut Option<Conn>,
    f: &GetFile,
    split: &Split,
    (a, b): (u64, u64),
    buf: &mut Vec<u8>,
) -> Result<(), TransferError> {
    let mut at = a;
    let r = with_conn(ctx.pool, conn, &f.url, |c, _| {
        let mut t = c.retr(&f.remote, at)?;
        while at < b {
            let want = (b - at).min(BUF as u64) as usize;
            let n = fill(&mut t, buf, want).map_err(|e| {
                Fail::Conn(TransferError::Network(format!(
                    "{}: connection lost at byte {at}: {e}",
                    f.url
                )))
            })?;
            if n == 0 {
                break;
            }
            write_at(&split.file, buf, at, &f.p.tmp).map_err(local_fail)?;
            split
                .arrived
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((at, at + n as u64));
            at += n as u64;
            ctx.stats.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
            ctx.stats.check().map_err(local_fail)?;
        }
        if at < b {
            // Finish reads the server's verdict: maybe the file shrank.
            c.finish(t, &f.remote)?;
            return Err(Fail::Final(
                TransferError::Network(format!(
                    "{}: the server's data ended at byte {at}, before {b} (did the file change?)",
                    f.url
                )),
                true,
            ));
        }
        if b >= f.size {
            c.finish(t, &f.remote)?;
        } else {
            c.close_early(t, &f.remote)?;
        }
        Ok(())
    });
    r.map_err(|e| kept(e, &f.p.tmp))
}

// --------------------------------------------------------------- upload

struct PutFile {
    src: PathBuf,
    remote: String,
    tmp: String,
    size: u64,
}

fn utf8_name(p: &Path) -> Result<String, TransferError> {
    let n = p.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    match std::str::from_utf8(n) {
        Ok(s) if ferry_ftp::sendable(s) => Ok(s.to_string()),
        _ => Err(TransferError::Usage(format!(
            "{}: the name is not UTF-8 or has a line break; FTP cannot send it",
            p.display()
        ))),
    }
}

fn upload(
    sources: &[PathBuf],
    dest: &FtpSpec,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    check_local_sources(sources, opts)?;
    let ep = endpoint(dest, opts)?;
    let pool = Pool::new(ep.clone());
    let mut conn = pool.get()?;
    let base = absolute(&conn.home, &dest.path);
    // Into the directory (trailing /, several sources, or an existing
    // directory, as cp does), else the URL names the file or the copy of
    // the directory.
    let into = dest.trailing_slash() || sources.len() > 1 || conn.is_dir(&base)?;
    let mut files: Vec<PutFile> = Vec::new();
    for src in sources {
        let meta =
            std::fs::metadata(src).map_err(|e| TransferError::local(src, "cannot read", e))?;
        let target = if into {
            join(&base, &utf8_name(src)?)
        } else {
            base.clone()
        };
        if meta.is_dir() {
            let mut found = Vec::new();
            let mut dirs = Vec::new();
            walk_local(src, b"", &mut found, &mut dirs)?;
            let under = |rel: &[u8]| -> Result<String, TransferError> {
                let mut r = target.clone();
                for seg in rel.split(|&c| c == b'/').filter(|s| !s.is_empty()) {
                    match std::str::from_utf8(seg) {
                        Ok(s) if ferry_ftp::sendable(s) => r = join(&r, s),
                        _ => {
                            return Err(TransferError::Usage(format!(
                                "{}: a name under it is not UTF-8 or has a line break ({}); FTP cannot send it",
                                src.display(),
                                String::from_utf8_lossy(rel)
                            )))
                        }
                    }
                }
                Ok(r)
            };
            // Parents come before their children in `dirs`.
            for (rel, _) in &dirs {
                conn.mkdir(&under(rel)?)?;
            }
            for (p, rel, m) in found {
                let remote = under(&rel)?;
                files.push(PutFile {
                    src: p,
                    tmp: remote_tmp(&remote),
                    remote,
                    size: m.len(),
                });
            }
        } else {
            files.push(PutFile {
                src: src.clone(),
                tmp: remote_tmp(&target),
                remote: target,
                size: meta.len(),
            });
        }
    }
    pool.put(conn);
    stats
        .files_total
        .fetch_add(files.len() as u64, Ordering::Relaxed);
    let total: u64 = files.iter().map(|f| f.size).sum();
    stats.bytes_total.fetch_add(total, Ordering::Relaxed);
    let nfiles = files.len() as u64;
    let resume = opts.resume;
    let r = run_jobs(
        &pool,
        files,
        opts.parallel.unwrap_or(Tuning::FTP_PARALLEL),
        |conn, f, buf| put(&pool, conn, f, resume, buf, &stats),
    );
    pool.close();
    r?;
    Ok(Summary {
        bytes: stats.bytes_done.load(Ordering::Relaxed),
        files: nfiles,
        seconds: started.elapsed().as_secs_f64(),
        protocol: protocol(&ep),
        streams: pool.opened.load(Ordering::Relaxed),
        chunk: 0,
        cipher: None,
    })
}

/// How much of the server's partial `.NAME.ferry-part` can be kept: its
/// size, if the last 64 KiB before that point equal the local file's.
fn resumable(c: &mut Conn, f: &PutFile, local: &File) -> Result<u64, Fail> {
    let have = match c.size(&f.tmp) {
        Ok(n) => n,
        Err(e) if e.is_not_found() => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    if have == 0 || have > f.size {
        return Ok(0);
    }
    let k = have.min(RESUME_CHECK);
    let theirs = c.read_at(&f.tmp, have - k, k as usize)?;
    let mut ours = vec![0u8; k as usize];
    local
        .read_exact_at(&mut ours, have - k)
        .map_err(|e| local_fail(TransferError::local(&f.src, "cannot read", e)))?;
    if theirs == ours {
        Ok(have)
    } else {
        tracing::warn!(
            "{}: the partial upload on the server does not match the local file; starting over",
            c.url(&f.tmp)
        );
        Ok(0)
    }
}

/// STOR (or, resuming, APPE) into the server's part file, check its size,
/// RNFR/RNTO it over the final name.
fn put(
    pool: &Pool,
    conn: &mut Option<Conn>,
    f: &PutFile,
    resume: bool,
    buf: &mut Vec<u8>,
    stats: &Stats,
) -> Result<(), TransferError> {
    let url = format!("{}{}", pool.ep.display, f.remote);
    let file = File::open(&f.src).map_err(|e| TransferError::local(&f.src, "cannot open", e))?;
    // Bytes of this file counted as done, so a retry does not count twice.
    let mut counted = 0u64;
    with_conn(pool, conn, &url, |c, attempt| {
        // A retry after a lost connection continues our own part file.
        let have = if resume || attempt > 0 {
            resumable(c, f, &file)?
        } else {
            0
        };
        if have > counted {
            stats
                .bytes_done
                .fetch_add(have - counted, Ordering::Relaxed);
        } else if have < counted {
            stats
                .bytes_done
                .fetch_sub(counted - have, Ordering::Relaxed);
        }
        counted = have;
        let mut t = c.stor(&f.tmp, have > 0)?;
        let mut at = have;
        loop {
            let want = (f.size - at).min(BUF as u64) as usize;
            if want == 0 {
                break;
            }
            buf.resize(want, 0);
            let n = file
                .read_at(buf, at)
                .map_err(|e| local_fail(TransferError::local(&f.src, "cannot read", e)))?;
            if n == 0 {
                break;
            }
            t.write_all(buf.get(..n).unwrap_or_default()).map_err(|e| {
                Fail::Conn(TransferError::Network(format!(
                    "{url}: connection lost after {at} of {} bytes ({e}); the partial file {} is kept on the server: rerun with --resume",
                    f.size, f.tmp
                )))
            })?;
            at += n as u64;
            counted += n as u64;
            stats.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
            stats.check().map_err(local_fail)?;
        }
        c.finish(t, &f.tmp)?;
        // The server's size must be the file's: a full disk or a quota can
        // end a STOR early with a 226 on some servers.
        match c.size(&f.tmp) {
            Ok(n) if n != f.size => {
                return Err(Fail::Final(
                    TransferError::Remote(format!(
                        "{url}: the server stored {n} of {} bytes (disk full?); the partial file {} is kept",
                        f.size, f.tmp
                    )),
                    true,
                ))
            }
            Ok(_) => {}
            Err(FtpError::Reply { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        c.rename(&f.tmp, &f.remote)?;
        Ok(())
    })?;
    stats.files_done.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths() {
        assert_eq!(absolute("/home/u", "a/b"), "/home/u/a/b");
        assert_eq!(absolute("/home/u", ""), "/home/u");
        assert_eq!(absolute("/", "d/"), "/d");
        assert_eq!(absolute("/home/u", "/srv/x"), "/srv/x");
        assert_eq!(remote_tmp("/d/f.bin"), "/d/.f.bin.ferry-part");
        assert_eq!(remote_tmp("/f"), "/.f.ferry-part");
        assert_eq!(basename("/a/b/"), "b");
        assert_eq!(parent("/a/b"), "/a");
    }
}
