//! Copies over HTTP(S): downloads of URLs (one stream, or `--streams N`
//! byte ranges in parallel), directory URLs with `-r` (listings), resume
//! with Range + If-Range, and uploads with PUT.
//!
//! Shape of a download:
//! 1. the plan: each source URL is a file, or with `-r` a directory whose
//!    listing (ferry serve's JSON, or an HTML index) is walked;
//! 2. up to `-P` files run at once as tasks over one [`Client`] (one HTTP/2
//!    connection per origin, or a pool of HTTP/1.1 connections);
//! 3. each file is written to `.NAME.ferry-part` next to its final name and
//!    renamed over it only when complete (and its digest, if the server sent
//!    one, matches); a failure leaves the old file untouched.
//!
//! Resume state lives next to the part file in `.NAME.ferry-resume`: the
//! server's validator (strong ETag, else Last-Modified), the size, and which
//! ranges arrived. It is written before the first byte lands, so a killed
//! ferry leaves a usable record. docs/internals/http.md has the details.
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use ferry_http::digest::{Algo, Expected, Hasher};
use ferry_http::listing::{self, Kind};
use ferry_http::{Client, HeaderMap, HeaderValue, HttpError, Method, Response, StatusCode, Url};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::error::TransferError;
use crate::journal;
use crate::location::{HttpSpec, Location};
use crate::loop_util::{check_local_sources, os, report, set_local_times, walk_local, with_more};
use crate::part::{
    self, kept, open_part, paths, write_at, Partial, Paths, NO_RESUME_BELOW, WRITE_BUF,
};
use crate::{CopyOptions, Stats, Summary};

/// Smallest byte range worth its own request with `--streams`.
const MIN_SEGMENT: u64 = 1024 * 1024;
/// Attempts per byte range before the file fails.
const RANGE_ATTEMPTS: u32 = 4;
/// Largest directory listing accepted.
const MAX_LISTING: usize = 64 * 1024 * 1024;
/// Listings fetched at once while walking a tree.
const LISTING_PARALLEL: usize = 8;

pub(crate) fn copy(
    sources: &[Location],
    dest: &Location,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    match dest {
        Location::Local(d) => {
            let mut urls = Vec::new();
            for s in sources {
                match s {
                    Location::Http(h) => urls.push(h.clone()),
                    other => {
                        return Err(TransferError::Usage(format!(
                            "{}: copy from HTTP URLs and other sources in separate commands",
                            other.describe()
                        )))
                    }
                }
            }
            download(&urls, d, opts, stats)
        }
        Location::Http(d) => {
            let mut files = Vec::new();
            for s in sources {
                match s {
                    Location::Local(p) => files.push(p.clone()),
                    other => return Err(TransferError::remote_to_remote(other)),
                }
            }
            upload(&files, d, opts, stats)
        }
        Location::Sftp(_) | Location::Ftp(_) | Location::S3(_) => {
            Err(TransferError::remote_to_remote(dest))
        }
    }
}

/// The runtime an HTTP copy runs on. One thread unless `--streams` asks
/// for several connections: every DATA frame of an HTTP/2 stream crossed
/// from the connection task's thread to the file task's with two workers,
/// and one thread moved the small set 15% faster (from nginx 234.5 ->
/// 270.5 MB/s) and the huge file no slower (996 -> 1030 MB/s; `--streams
/// 8` over h2 906 -> 972). Several HTTP/1.1 connections (`--streams N`)
/// decrypt in parallel on two workers: one thread was 12% slower there
/// (docs/internals/http.md, "Runtime").
fn runtime(opts: &CopyOptions) -> Result<tokio::runtime::Runtime, TransferError> {
    // http_threads (tuning): 0 runs everything on this thread; N > 0
    // uses N worker threads.
    let default = if opts.streams.unwrap_or(1) > 1 { 2 } else { 0 };
    let threads = opts.http_threads.unwrap_or(default);
    if threads == 0 {
        return one_thread_runtime();
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.min(16))
        .enable_all()
        .build()
        .map_err(|e| TransferError::Local(format!("cannot start a runtime: {e}")))
}

/// A runtime on the calling thread: the copy's own by default, and each
/// download shard's.
fn one_thread_runtime() -> Result<tokio::runtime::Runtime, TransferError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TransferError::Local(format!("cannot start a runtime: {e}")))
}

pub(crate) fn client(opts: &CopyOptions) -> Result<Client, TransferError> {
    let mut h = opts.http.clone();
    // -P files (or --streams ranges) at once need as many HTTP/1.1
    // connections; HTTP/2 multiplexes them over one.
    h.h1_connections = opts.files_in_flight().max(opts.streams.unwrap_or(1)).max(1);
    Ok(Client::new(h)?)
}

pub(crate) fn protocol(client: &Client, https: bool) -> &'static str {
    match (https, client.negotiated()) {
        (true, Some("h2")) => "https/h2",
        (true, _) => "https/http1.1",
        (false, Some("h2")) => "http/h2c",
        (false, _) => "http/http1.1",
    }
}

/// What every download task shares.
struct Ctx {
    client: Client,
    stats: Arc<Stats>,
    resume: bool,
    preserve: bool,
    compressed: bool,
    streams: usize,
    /// A body that delivers no byte for this long has stalled (`--timeout`).
    stall: Duration,
}

/// One URL to one local file.
#[derive(Debug, Clone)]
struct FileJob {
    url: Url,
    dst: PathBuf,
}

// ---------------------------------------------------------------- download

fn download(
    sources: &[HttpSpec],
    dest: &Path,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    let client = client(opts)?;
    tracing::debug!(
        "client ready in {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    for s in sources {
        client.trust(&s.url);
    }
    let ctx = |client: Client| {
        Arc::new(Ctx {
            client,
            stats: stats.clone(),
            resume: opts.resume,
            preserve: opts.preserve,
            compressed: opts.compressed,
            streams: opts.streams.unwrap_or(1).max(1),
            stall: opts.timeout,
        })
    };
    let dest = &crate::part::local_dest(dest)?;
    let dest_is_dir = dest.is_dir();
    let dest_wants_dir = dest.as_os_str().as_bytes().ends_with(b"/");
    if sources.len() > 1 && !dest_is_dir {
        return Err(TransferError::Usage(format!(
            "{}: several sources need an existing directory as destination",
            dest.display()
        )));
    }
    let https = sources.first().is_some_and(|s| s.url.https);
    let into = dest_is_dir || dest_wants_dir;
    // The plan (listings with -r) is made by one task that hands each file
    // over as soon as its directory is listed, so downloads start while the
    // rest of the tree is still being walked. Every shard takes the next
    // file from the one queue, so a shard that is ahead takes more.
    let (tx, rx) = async_channel::bounded::<FileJob>(PLAN_QUEUE);
    let rt = runtime(opts)?;
    let mut shards = shards(sources, opts);
    let first = sources.first().map(|s| s.url.clone());
    if shards > 1 {
        // This thread's connection is made first, so that against a
        // server that takes one connection per client (limit_conn, ferry
        // serve's --max-connections) it is ours and the other shards are
        // the ones refused. When it cannot be made, one shard reports why
        // file by file.
        let up = first.as_ref().map(|u| rt.block_on(client.warm(u)));
        if !matches!(up, Some(Ok(_))) {
            shards = 1;
        }
    }
    let per_shard = opts.files_in_flight().max(1).div_ceil(shards);
    let mut extra = Vec::new();
    if shards > 1 {
        for n in 1..shards {
            let (client, rx, first) = (client.sibling(per_shard), rx.clone(), first.clone());
            let ctx = ctx(client.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("ferry-http-{n}"))
                .spawn(move || {
                    let Ok(rt) = one_thread_runtime() else {
                        return (Shard::default(), client);
                    };
                    let done = rt.block_on(async {
                        // Connect before taking a file: refused here (a
                        // server's connection limit), this shard takes
                        // none and the others take them all.
                        if let Some(u) = &first {
                            if let Err(e) = ctx.client.warm(u).await {
                                tracing::info!("{e}: no second connection, one shard less");
                                return Shard::default();
                            }
                        }
                        shard(&ctx, &rx, per_shard).await
                    });
                    (done, client)
                });
            match spawned {
                Ok(t) => extra.push(t),
                Err(e) => tracing::info!("cannot start a download thread: {e}"),
            }
        }
    }
    let ctx0 = ctx(client.clone());
    let (mine, dirs) = rt.block_on(async {
        let plan = {
            let (client, sources, dest) = (client.clone(), sources.to_vec(), dest.to_path_buf());
            let (stats, recursive, stall) = (stats.clone(), opts.recursive, opts.timeout);
            tokio::spawn(async move {
                plan(
                    &client, stall, &sources, &dest, into, recursive, &stats, &tx,
                )
                .await
            })
        };
        let mine = shard(&ctx0, &rx, per_shard).await;
        drop(rx);
        tracing::debug!(
            "transfers done at {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        let dirs = match plan.await {
            Ok(r) => r,
            Err(e) => Err(TransferError::Local(format!(
                "internal: the plan failed: {e}"
            ))),
        };
        (mine, dirs)
    });
    // The plan's error comes first (what was planned before it has run),
    // then the shards' in order; the rest are printed.
    let mut first_err = None;
    let mut errors = 0usize;
    let mut nfiles = mine.files;
    let mut connections = client.connections();
    let mut negotiated = protocol(&client, https);
    let dirs = match dirs {
        Ok(d) => d,
        Err(e) => {
            errors += 1;
            first_err = Some(e);
            Vec::new()
        }
    };
    let mut results = vec![mine];
    for t in extra {
        match t.join() {
            Ok((r, c)) => {
                nfiles += r.files;
                connections += c.connections();
                if client.negotiated().is_none() && c.negotiated().is_some() {
                    negotiated = protocol(&c, https);
                }
                results.push(r);
            }
            Err(_) => {
                errors += 1;
                report(
                    &mut first_err,
                    TransferError::Local("internal: a download thread failed".into()),
                );
            }
        }
    }
    for r in results {
        errors += r.errors;
        if let Some(e) = r.first {
            report(&mut first_err, e);
        }
    }
    if let Some(e) = first_err {
        return Err(if errors > 1 {
            with_more(e, errors - 1)
        } else {
            e
        });
    }
    if opts.preserve {
        for (d, m) in dirs.iter().rev() {
            if let Some(m) = m {
                let m = (*m).clamp(0, u32::MAX as i64) as u32;
                set_local_times(d, m, m);
            }
        }
    }
    Ok(Summary {
        bytes: stats.bytes_done.load(Ordering::Relaxed),
        files: nfiles,
        seconds: started.elapsed().as_secs_f64(),
        protocol: negotiated,
        streams: connections,
        chunk: 0,
        cipher: None,
    })
}

/// Most download shards (threads, each with its own runtime and
/// connection).
const MAX_SHARDS: usize = 4;

/// How many shards download several files: one per core (at most
/// [`MAX_SHARDS`]), each a thread with a current-thread runtime and its own
/// connection. One thread is busy with TLS, h2 and the file system calls
/// for every file; a second connection on the second core moved 1000 x 20
/// kB from nginx 18% faster on this 2-core machine (51.9 -> 42.6 ms;
/// docs/internals/http.md, "Shards"). One shard for a single file, for `--streams`
/// (ranges run on a multi-thread runtime), with `-P 1`, and when
/// `CopyOptions::http_threads` picks the runtime; `http_shards` sets the
/// count (tuning; the CLI reads them from `FERRY_HTTP_THREADS` and
/// `FERRY_HTTP_SHARDS`).
fn shards(sources: &[HttpSpec], opts: &CopyOptions) -> usize {
    if let Some(n) = opts.http_shards {
        return n.clamp(1, MAX_SHARDS);
    }
    let several = sources.len() > 1 || opts.recursive;
    if !several
        || opts.streams.unwrap_or(1) > 1
        || opts.files_in_flight() < 2
        || opts.http_threads.is_some()
    {
        return 1;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, MAX_SHARDS)
        .min(opts.files_in_flight())
}

/// What one shard did: files it took, how many failed and the first
/// error (the others are printed as they happen).
#[derive(Default)]
struct Shard {
    files: u64,
    errors: usize,
    first: Option<TransferError>,
}

/// Download files from `rx` until the plan is done, `parallel` at once.
async fn shard(ctx: &Arc<Ctx>, rx: &async_channel::Receiver<FileJob>, parallel: usize) -> Shard {
    let slots = Arc::new(Semaphore::new(parallel.max(1)));
    let mut set = tokio::task::JoinSet::new();
    let mut out = Shard::default();
    let note = |out: &mut Shard, r: Result<Result<u64, TransferError>, tokio::task::JoinError>| {
        let e = match r {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => e,
            Err(e) => TransferError::Local(format!("internal: a transfer task failed: {e}")),
        };
        out.errors += 1;
        report(&mut out.first, e);
    };
    loop {
        // A slot first, then a file: a shard that is busy leaves the next
        // file to one that is not.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let Ok(job) = rx.recv().await else {
            break;
        };
        out.files += 1;
        let ctx = ctx.clone();
        set.spawn(async move {
            let r = fetch(&ctx, &job).await;
            drop(permit);
            r
        });
        // Collect finished tasks as we go (the set stays small).
        while let Some(r) = set.try_join_next() {
            note(&mut out, r);
        }
    }
    while let Some(r) = set.join_next().await {
        note(&mut out, r);
    }
    out
}

/// Files planned ahead of the downloads (a bound on memory for huge trees;
/// the walk waits when the downloads are this far behind).
const PLAN_QUEUE: usize = 4096;

/// Directories to create: path and mtime (for -p).
type Dirs = Vec<(PathBuf, Option<i64>)>;

/// Turn the sources into file jobs, sent to `tx` as they are found: each
/// URL, or with -r each file of a directory URL's tree. Local directories
/// are made before any file in them is sent. Returns the directories (for
/// -p's mtimes).
#[allow(clippy::too_many_arguments)]
async fn plan(
    client: &Client,
    stall: Duration,
    sources: &[HttpSpec],
    dest: &Path,
    into: bool,
    recursive: bool,
    stats: &Stats,
    tx: &async_channel::Sender<FileJob>,
) -> Result<Dirs, TransferError> {
    let mut dirs = Vec::new();
    for src in sources {
        let url = &src.url;
        if recursive {
            if let Some(found) = walk(client, stall, url, dest, into, stats, tx).await? {
                dirs.extend(found);
                continue;
            }
        } else if url.is_dir() {
            return Err(TransferError::Usage(format!(
                "{url}: is a directory URL; use -r to copy the directory"
            )));
        }
        let name = url.file_name();
        let dst = if into {
            if !listing::safe_name(&name) {
                return Err(TransferError::Usage(format!(
                    "{url}: no file name in the URL; give the destination file name"
                )));
            }
            dest.join(os(&name))
        } else {
            dest.to_path_buf()
        };
        send(
            tx,
            stats,
            FileJob {
                url: url.clone(),
                dst,
            },
        )
        .await?;
    }
    Ok(dirs)
}

async fn send(
    tx: &async_channel::Sender<FileJob>,
    stats: &Stats,
    job: FileJob,
) -> Result<(), TransferError> {
    stats.files_total.fetch_add(1, Ordering::Relaxed);
    tx.send(job)
        .await
        .map_err(|_| TransferError::Local("internal: the downloads stopped".into()))
}

fn mkdir(d: &Path) -> Result<(), TransferError> {
    std::fs::create_dir_all(d).map_err(|e| TransferError::local(d, "cannot create directory", e))
}

/// With -r: list `url` as a directory and walk it, sending each file to
/// `tx` once its local directory exists. `None` when the URL turned out to
/// be a file (nothing was sent).
async fn walk(
    client: &Client,
    stall: Duration,
    url: &Url,
    dest: &Path,
    into: bool,
    stats: &Stats,
    tx: &async_channel::Sender<FileJob>,
) -> Result<Option<Dirs>, TransferError> {
    let Some((base, entries)) = list(client, url, stall).await? else {
        return Ok(None);
    };
    let name = base.last_segment();
    let root = if into && listing::safe_name(&name) {
        dest.join(os(&name))
    } else {
        dest.to_path_buf()
    };
    let mut dirs = vec![(root.clone(), None)];
    let mut pending = vec![(base, root, entries)];
    let mut running = futures_util::stream::FuturesUnordered::new();
    use futures_util::StreamExt;
    loop {
        while let Some((base, local, entries)) = pending.pop() {
            mkdir(&local)?;
            for e in entries {
                // listing.rs only returns single, safe path segments.
                let lpath = local.join(os(&e.name));
                match e.kind {
                    Kind::Dir => {
                        dirs.push((lpath.clone(), e.mtime));
                        if running.len() >= LISTING_PARALLEL {
                            // Drain one before starting more.
                            if let Some(r) = running.next().await {
                                let (u, l, res): (Url, PathBuf, _) = r;
                                match res? {
                                    Some((b, es)) => pending.push((b, l, es)),
                                    None => send(tx, stats, FileJob { url: u, dst: l }).await?,
                                }
                            }
                        }
                        let u = base.child(&e.name).as_dir();
                        let c = client.clone();
                        running.push(async move {
                            let r = list(&c, &u, stall).await;
                            (u, lpath, r)
                        });
                    }
                    Kind::File | Kind::Symlink => {
                        send(
                            tx,
                            stats,
                            FileJob {
                                url: base.child(&e.name),
                                dst: lpath,
                            },
                        )
                        .await?
                    }
                }
            }
        }
        let Some((u, l, res)) = running.next().await else {
            break;
        };
        match res? {
            Some((b, es)) => pending.push((b, l, es)),
            None => send(tx, stats, FileJob { url: u, dst: l }).await?,
        }
    }
    Ok(Some(dirs))
}

/// GET a directory listing: ferry serve's JSON when the server has it,
/// else an HTML index. `None` when the URL is a file.
pub(crate) async fn list(
    client: &Client,
    url: &Url,
    stall: Duration,
) -> Result<Option<(Url, Vec<listing::Entry>)>, TransferError> {
    tokio::time::timeout(stall, list_once(client, url))
        .await
        .map_err(|_| stalled(url, "no answer", stall))?
}

async fn list_once(
    client: &Client,
    url: &Url,
) -> Result<Option<(Url, Vec<listing::Entry>)>, TransferError> {
    let mut h = HeaderMap::new();
    h.insert(
        "accept",
        HeaderValue::from_static("application/json, text/html;q=0.9, */*;q=0.1"),
    );
    let resp = client.get(url, &h).await?.error_for_status()?;
    let ctype = resp
        .header("content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    let base = resp.url.clone();
    let (entries, refused) = if ctype.starts_with("application/json") {
        let body = resp.bytes(MAX_LISTING).await?;
        listing::parse_json(&body).map_err(|e| TransferError::Remote(format!("{base}: {e}")))?
    } else if ctype.starts_with("text/html") && base.is_dir() {
        let body = resp.bytes(MAX_LISTING).await?;
        listing::parse_html(&String::from_utf8_lossy(&body), &base)
    } else {
        return Ok(None);
    };
    for r in refused {
        tracing::warn!("{base}: skipping the entry {r:?}: not a plain file name (it could write outside the destination)");
    }
    Ok(Some((base.as_dir(), entries)))
}

/// The validator If-Range may carry: a strong ETag, else Last-Modified.
fn validator(headers: &HeaderMap) -> Option<String> {
    let etag = headers.get("etag").and_then(|v| v.to_str().ok());
    if let Some(e) = etag {
        if !e.starts_with("W/") {
            return Some(e.to_string());
        }
    }
    headers
        .get("last-modified")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

pub(crate) fn last_modified(headers: &HeaderMap) -> Option<u32> {
    let v = headers.get("last-modified")?.to_str().ok()?;
    let t = httpdate::parse_http_date(v).ok()?;
    Some(
        t.duration_since(UNIX_EPOCH)
            .ok()?
            .as_secs()
            .min(u32::MAX as u64) as u32,
    )
}

/// A GET whose answer (status and headers) must come within `stall`.
async fn get_within(
    client: &Client,
    url: &Url,
    h: &HeaderMap,
    stall: Duration,
) -> Result<Response, TransferError> {
    match tokio::time::timeout(stall, client.get(url, h)).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(stalled(url, "no answer", stall)),
    }
}

/// `what` (no answer, no data) for `stall`: the connection stalled.
fn stalled(url: &Url, what: &str, stall: Duration) -> TransferError {
    TransferError::Network(format!(
        "{url}: {what} for {} s: the connection stalled (--timeout)",
        stall.as_secs()
    ))
}

/// The next piece of a body, or a network error once `stall` passed
/// without one (`--timeout`).
async fn next_chunk(
    resp: &mut Response,
    stall: Duration,
    url: &Url,
) -> Result<Option<bytes::Bytes>, TransferError> {
    match tokio::time::timeout(stall, resp.chunk()).await {
        Ok(r) => r.map_err(TransferError::from),
        Err(_) => Err(stalled(url, "no data", stall)),
    }
}

/// `Content-Range: bytes A-B/TOTAL` -> (A, B, TOTAL), strictly as RFC
/// 9110 14.4 has it (ferry_http::range, fuzzed).
fn content_range(resp: &Response) -> Option<(u64, u64, Option<u64>)> {
    let r = ferry_http::range::parse_content_range(resp.header("content-range")?)?;
    Some((r.first, r.last, r.complete))
}

/// Download one file. Returns the bytes moved.
///
/// A destination that is a directory is refused by the final rename
/// (`part::finish`), not by a stat of every destination first.
async fn fetch(ctx: &Ctx, job: &FileJob) -> Result<u64, TransferError> {
    let p = paths(&job.dst);
    let prior = if ctx.resume {
        Partial::read(&p.journal)
    } else {
        None
    };
    if ctx.streams > 1 && !ctx.compressed {
        match segmented(ctx, job, &p, prior.as_ref()).await? {
            Segmented::Done(n) => return Ok(n),
            Segmented::NotSplit => {}
            Segmented::RangesIgnored => {
                tracing::info!("{}: the server ignores Range; one stream", job.url);
                return single(ctx, job, &p, None).await;
            }
        }
    }
    single(ctx, job, &p, prior).await
}

/// One GET for the whole file (or the rest of it, when resuming).
async fn single(
    ctx: &Ctx,
    job: &FileJob,
    p: &Paths,
    prior: Option<Partial>,
) -> Result<u64, TransferError> {
    // Only a resume looks at a part file left by an earlier run (one stat
    // per file less for the rest; open_part truncates it anyway).
    let part_len = if ctx.resume {
        std::fs::metadata(&p.tmp).map(|m| m.len()).unwrap_or(0)
    } else {
        0
    };
    let mut have = 0;
    let mut if_range = None;
    if let Some(pr) = &prior {
        match &pr.validator {
            Some(v) if pr.prefix(part_len) > 0 => {
                have = pr.prefix(part_len);
                if_range = Some(v.clone());
            }
            Some(_) => {}
            None => tracing::warn!(
                "{}: the server gave no ETag or Last-Modified for the partial download, so it cannot be checked; starting over",
                job.url
            ),
        }
    } else if ctx.resume && part_len > 0 {
        tracing::warn!(
            "{}: no resume record next to {}; starting over",
            job.url,
            p.tmp.display()
        );
    }
    let mut h = HeaderMap::new();
    // Only plain (identity) downloads are resumed: byte offsets into a
    // decoded file mean nothing in an encoded one.
    if ctx.compressed && if_range.is_none() {
        h.insert("accept-encoding", HeaderValue::from_static("zstd, gzip"));
    }
    if let Some(v) = &if_range {
        h.insert("range", header(&format!("bytes={have}-"))?);
        h.insert("if-range", header(v)?);
    }
    let mut resp = get_within(&ctx.client, &job.url, &h, ctx.stall).await?;
    if resp.status == StatusCode::RANGE_NOT_SATISFIABLE && have > 0 {
        // The file shrank (or the part file is already whole): start over.
        tracing::warn!(
            "{}: the server refused to continue at byte {have}; starting over",
            job.url
        );
        drop(resp);
        have = 0;
        h.remove("range");
        h.remove("if-range");
        resp = get_within(&ctx.client, &job.url, &h, ctx.stall).await?;
    }
    let mut resp = resp.error_for_status()?;
    if resp.url.is_dir() && !job.url.is_dir() {
        // nginx and Apache redirect a directory to DIR/: never save its
        // index page as if it were the file.
        return Err(TransferError::Usage(format!(
            "{}: is a directory (the server redirected to {}); use -r to copy it",
            job.url, resp.url
        )));
    }
    let total = match resp.status {
        StatusCode::PARTIAL_CONTENT if have > 0 => match content_range(&resp) {
            Some((a, _, total)) if a == have => total,
            _ => {
                return Err(TransferError::Remote(format!(
                    "{}: asked for bytes from {have}, the server sent {:?}; rerun without --resume",
                    job.url,
                    resp.header("content-range")
                )))
            }
        },
        StatusCode::PARTIAL_CONTENT => {
            return Err(TransferError::Remote(format!(
                "{}: the server sent part of the file (206) unasked",
                job.url
            )))
        }
        _ => {
            if have > 0 {
                if validator(&resp.headers) == if_range {
                    tracing::warn!(
                        "{}: the server does not continue downloads (no Range support); starting over",
                        job.url
                    );
                } else {
                    tracing::warn!(
                        "{}: the file changed on the server since the partial download; starting over",
                        job.url
                    );
                }
                have = 0;
            }
            resp.content_length()
        }
    };
    let encoding = resp.header("content-encoding").map(str::to_string);
    let mut decoder = ferry_http::decode::Decoder::for_encoding(encoding.as_deref())
        .map_err(|e| TransferError::Remote(format!("{}: {e}", job.url)))?;
    let identity = decoder.is_identity();
    let file = open_part(&p.tmp, have)?;
    let state = Partial {
        validator: validator(&resp.headers),
        size: if identity { total } else { None },
        sequential: true,
        done: Vec::new(),
    };
    // A small file is fetched again faster than a resume record is kept
    // (three more file operations per file, a third of the time for
    // 1000 x 20 kB on tmpfs).
    let worth_resuming =
        identity && total.is_none_or(|t| t.saturating_sub(have) >= NO_RESUME_BELOW);
    if worth_resuming {
        state
            .write(&p.journal)
            .map_err(|e| TransferError::local(&p.journal, "cannot write", e))?;
    } else if prior.is_some() {
        journal::remove(&p.journal);
    }
    let expect_digest = ferry_http::digest::expected(&resp.headers);
    // Hash as the bytes arrive when they are the whole representation.
    let mut hasher = expect_digest
        .filter(|_| have == 0)
        .map(|e| Hasher::new(e.algo));
    let stats = &ctx.stats;
    if identity {
        if let Some(t) = total {
            stats
                .bytes_total
                .fetch_add(t.saturating_sub(have), Ordering::Relaxed);
        }
    }
    let mut at = have;
    let moved_before = have;
    // HTTP/2 DATA frames are small (nginx sends 8 KiB): gather them so a
    // write call moves WRITE_BUF, not one frame. A body of known size gets
    // no more than it needs (1000 small files in flight took a fresh 1 MiB
    // each).
    let left = total.map(|t| t.saturating_sub(have));
    let mut buf: Vec<u8> = Vec::with_capacity(match left {
        Some(l) if identity => (l as usize).min(WRITE_BUF),
        _ => WRITE_BUF,
    });
    loop {
        let piece = match next_chunk(&mut resp, ctx.stall, &job.url).await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                write_at(&file, &buf, at, &p.tmp)?;
                return Err(kept(e, &p.tmp));
            }
        };
        // A whole (small) body in one frame is written as it came, without
        // the copy into `buf`.
        if identity && buf.is_empty() && total == Some(at + piece.len() as u64) {
            if let Some(hs) = hasher.as_mut() {
                hs.update(&piece);
            }
            write_at(&file, &piece, at, &p.tmp)?;
            at += piece.len() as u64;
            stats
                .bytes_done
                .fetch_add(piece.len() as u64, Ordering::Relaxed);
            stats.check()?;
            continue;
        }
        let n = if identity {
            buf.extend_from_slice(&piece);
            piece.len()
        } else {
            if let Some(hs) = hasher.as_mut() {
                hs.update(&piece);
            }
            // Decoded a bounded piece at a time, written out at each
            // WRITE_BUF: a small body that inflates hugely (a zstd or
            // gzip bomb) never sits in memory whole.
            let bad =
                |e| TransferError::Remote(format!("{}: bad {:?} data: {e}", job.url, encoding));
            let mut pieces = decoder.pieces(&piece);
            let mut n = 0;
            while let Some(data) = pieces.next_piece().map_err(bad)? {
                buf.extend_from_slice(data);
                n += data.len();
                if buf.len() >= WRITE_BUF {
                    write_at(&file, &buf, at, &p.tmp)?;
                    at += buf.len() as u64;
                    buf.clear();
                }
            }
            stats.bytes_total.fetch_add(n as u64, Ordering::Relaxed);
            n
        };
        stats.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
        stats.check()?;
        if buf.len() >= WRITE_BUF {
            // Identity bodies are hashed here, 1 MiB at a time, not per
            // frame: BLAKE3 hashes whole 8 KiB groups with AVX2, and a
            // frame's ragged ends went through its one-block path (perf:
            // 26% of the client's CPU for 1 GiB from ferry serve, a third
            // of it in that path).
            if let Some(hs) = hasher.as_mut().filter(|_| identity) {
                hs.update(&buf);
            }
            write_at(&file, &buf, at, &p.tmp)?;
            at += buf.len() as u64;
            buf.clear();
        }
    }
    if let Some(hs) = hasher.as_mut().filter(|_| identity) {
        hs.update(&buf);
    }
    write_at(&file, &buf, at, &p.tmp)?;
    at += buf.len() as u64;
    if !identity {
        let rest = decoder.finish().map_err(|e| {
            TransferError::Remote(format!("{}: truncated {:?} data: {e}", job.url, encoding))
        })?;
        write_at(&file, &rest, at, &p.tmp)?;
        at += rest.len() as u64;
    }
    if identity {
        if let Some(t) = total {
            if at != t {
                return Err(kept(
                    TransferError::Network(format!(
                        "{}: the connection ended after {at} of {t} bytes",
                        job.url
                    )),
                    &p.tmp,
                ));
            }
        }
    }
    if let Some(want) = expect_digest {
        let got: [u8; 32] = match hasher {
            Some(h) => h.finalize(),
            None if identity => hash_file(&p.tmp, want.algo).await?,
            None => want.sum,
        };
        check_digest(&job.url, p, want, got)?;
    }
    drop(file);
    finish(ctx, job, p, last_modified(&resp.headers), worth_resuming)?;
    Ok(at - moved_before)
}

fn header(v: &str) -> Result<HeaderValue, TransferError> {
    HeaderValue::from_str(v)
        .map_err(|_| TransferError::Remote(format!("bad characters in a header value: {v:?}")))
}

async fn hash_file(path: &Path, algo: Algo) -> Result<[u8; 32], TransferError> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let f = std::fs::File::open(&path)
            .map_err(|e| TransferError::local(&path, "cannot read", e))?;
        let mut h = Hasher::new(algo);
        let mut buf = vec![0u8; WRITE_BUF];
        let mut at = 0u64;
        loop {
            let n = f
                .read_at(&mut buf, at)
                .map_err(|e| TransferError::local(&path, "cannot read", e))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            at += n as u64;
        }
        Ok(h.finalize())
    })
    .await
    .map_err(|e| TransferError::Local(format!("internal: {e}")))?
}

fn check_digest(url: &Url, p: &Paths, want: Expected, got: [u8; 32]) -> Result<(), TransferError> {
    if want.sum == got {
        return Ok(());
    }
    let _ = std::fs::remove_file(&p.tmp);
    journal::remove(&p.journal);
    Err(TransferError::Remote(format!(
        "{url}: the data does not match the server's digest ({} announced {}, received {}); nothing was written, try again",
        want.algo.name(),
        ferry_http::digest::to_base64(&want.sum),
        ferry_http::digest::to_base64(&got)
    )))
}

/// Move the finished part file over the final name.
fn finish(
    ctx: &Ctx,
    job: &FileJob,
    p: &Paths,
    mtime: Option<u32>,
    journal_written: bool,
) -> Result<(), TransferError> {
    part::finish(
        p,
        &job.dst,
        ctx.preserve.then_some(mtime).flatten(),
        journal_written,
        &ctx.stats,
    )
}

enum Segmented {
    Done(u64),
    /// Too small, size unknown, or no ranges: fetch in one stream.
    NotSplit,
    /// A range request came back 200: the server ignores Range.
    RangesIgnored,
}

enum RangeErr {
    Ignored,
    /// Worth another attempt (connection lost).
    Retry(TransferError),
    Fatal(TransferError),
}

/// `--streams N`: HEAD for the size and validator, then N byte ranges in
/// parallel, each written in place; a failed range is retried alone.
async fn segmented(
    ctx: &Ctx,
    job: &FileJob,
    p: &Paths,
    prior: Option<&Partial>,
) -> Result<Segmented, TransferError> {
    let head = ctx
        .client
        .send(Method::HEAD, &job.url, &HeaderMap::new(), None)
        .await?;
    if head.status == StatusCode::METHOD_NOT_ALLOWED || head.status == StatusCode::NOT_IMPLEMENTED {
        return Ok(Segmented::NotSplit);
    }
    let head = head.error_for_status()?;
    let ranges = head
        .header("accept-ranges")
        .is_some_and(|v| v.to_ascii_lowercase().contains("bytes"));
    let Some(size) = head.content_length() else {
        return Ok(Segmented::NotSplit);
    };
    if !ranges || size < 2 * MIN_SEGMENT || head.header("content-encoding").is_some() {
        return Ok(Segmented::NotSplit);
    }
    let url = head.url.clone();
    let val = validator(&head.headers);
    let mtime = last_modified(&head.headers);
    let expect_digest = ferry_http::digest::expected(&head.headers);
    drop(head);
    // Only a resume looks at a part file left by an earlier run (one stat
    // per file less for the rest; open_part truncates it anyway).
    let part_len = if ctx.resume {
        std::fs::metadata(&p.tmp).map(|m| m.len()).unwrap_or(0)
    } else {
        0
    };
    let mut done = Vec::new();
    if let Some(pr) = prior {
        if pr.validator.is_some() && pr.validator == val && pr.size == Some(size) {
            done = if pr.sequential {
                vec![(0, part_len.min(size))]
            } else {
                pr.done.clone()
            };
        } else {
            tracing::warn!(
                "{}: the file changed on the server since the partial download; starting over",
                job.url
            );
        }
    }
    let file = open_part(&p.tmp, if done.is_empty() { 0 } else { part_len })?;
    file.set_len(size)
        .map_err(|e| TransferError::local(&p.tmp, "cannot size", e))?;
    let file = Arc::new(file);
    let todo = journal::missing(&journal::merge(done.clone()), size);
    let state = Partial {
        validator: val.clone(),
        size: Some(size),
        sequential: false,
        done: journal::merge(done.clone()),
    };
    state
        .write(&p.journal)
        .map_err(|e| TransferError::local(&p.journal, "cannot write", e))?;
    let todo_bytes: u64 = todo.iter().map(|(a, b)| b - a).sum();
    ctx.stats
        .bytes_total
        .fetch_add(todo_bytes, Ordering::Relaxed);
    // N pieces of about equal size, from the missing ranges.
    let piece = todo_bytes.div_ceil(ctx.streams as u64).max(MIN_SEGMENT);
    let mut pieces = Vec::new();
    for (mut a, b) in todo {
        while a < b {
            let e = (a + piece).min(b);
            pieces.push((a, e));
            a = e;
        }
    }
    let arrived = Arc::new(Mutex::new(done));
    let mut set = tokio::task::JoinSet::new();
    for (a, b) in pieces {
        let (client, url, val, file, arrived, stats) = (
            ctx.client.clone(),
            url.clone(),
            val.clone(),
            file.clone(),
            arrived.clone(),
            ctx.stats.clone(),
        );
        let tmp = p.tmp.clone();
        let stall = ctx.stall;
        set.spawn(async move {
            fetch_range(
                &client,
                &url,
                val.as_deref(),
                &file,
                &tmp,
                (a, b),
                &arrived,
                &stats,
                stall,
            )
            .await
        });
    }
    let mut first_err = None;
    let mut ignored = false;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(RangeErr::Ignored)) => {
                ignored = true;
                set.abort_all();
            }
            Ok(Err(RangeErr::Retry(e) | RangeErr::Fatal(e))) => {
                if first_err.is_none() {
                    first_err = Some(e);
                }
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => {
                first_err.get_or_insert(TransferError::Local(format!("internal: {e}")));
            }
        }
    }
    if ignored {
        ctx.stats.bytes_total.fetch_sub(
            todo_bytes.min(ctx.stats.bytes_total.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        journal::remove(&p.journal);
        return Ok(Segmented::RangesIgnored);
    }
    let got = journal::merge(arrived.lock().unwrap_or_else(|e| e.into_inner()).clone());
    if let Some(e) = first_err {
        let state = Partial { done: got, ..state };
        if let Err(we) = state.write(&p.journal) {
            tracing::warn!("cannot write {}: {we}", p.journal.display());
        }
        return Err(kept(e, &p.tmp));
    }
    if got != [(0, size)] {
        return Err(TransferError::Network(format!(
            "{}: ranges missing after the transfer; rerun with --resume",
            job.url
        )));
    }
    if let Some(want) = expect_digest {
        let got = hash_file(&p.tmp, want.algo).await?;
        check_digest(&job.url, p, want, got)?;
    }
    drop(file);
    finish(ctx, job, p, mtime, true)?;
    Ok(Segmented::Done(todo_bytes))
}

#[allow(clippy::too_many_arguments)]
async fn fetch_range(
    client: &Client,
    url: &Url,
    val: Option<&str>,
    file: &std::fs::File,
    tmp: &Path,
    (a, b): (u64, u64),
    arrived: &Mutex<Vec<(u64, u64)>>,
    stats: &Stats,
    stall: Duration,
) -> Result<(), RangeErr> {
    let mut at = a;
    let mut attempt = 0;
    loop {
        match range_once(
            client,
            url,
            val,
            file,
            tmp,
            (&mut at, b),
            arrived,
            stats,
            stall,
        )
        .await
        {
            Ok(()) => return Ok(()),
            Err(RangeErr::Retry(e)) if attempt + 1 < RANGE_ATTEMPTS => {
                attempt += 1;
                tracing::info!("{url}: bytes {at}-{b}: {e}; retrying ({attempt})");
                tokio::time::sleep(Duration::from_millis(200 * attempt as u64)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn range_once(
    client: &Client,
    url: &Url,
    val: Option<&str>,
    file: &std::fs::File,
    tmp: &Path,
    (at, b): (&mut u64, u64),
    arrived: &Mutex<Vec<(u64, u64)>>,
    stats: &Stats,
    stall: Duration,
) -> Result<(), RangeErr> {
    let mut h = HeaderMap::new();
    h.insert(
        "range",
        header(&format!("bytes={}-{}", *at, b - 1)).map_err(RangeErr::Fatal)?,
    );
    if let Some(v) = val {
        h.insert("if-range", header(v).map_err(RangeErr::Fatal)?);
    }
    let answer = match tokio::time::timeout(stall, client.get(url, &h)).await {
        Ok(a) => a,
        Err(_) => return Err(RangeErr::Retry(stalled(url, "no answer", stall))),
    };
    let mut resp = match answer {
        Ok(r) => r,
        Err(e @ HttpError::Network(_)) => return Err(RangeErr::Retry(e.into())),
        Err(e) => return Err(RangeErr::Fatal(e.into())),
    };
    match resp.status {
        StatusCode::PARTIAL_CONTENT => {}
        StatusCode::OK => return Err(RangeErr::Ignored),
        s if s.is_server_error() => {
            return Err(RangeErr::Retry(
                HttpError::status(&url.to_string(), s).into(),
            ))
        }
        s => {
            return Err(RangeErr::Fatal(
                HttpError::status(&url.to_string(), s).into(),
            ))
        }
    }
    match content_range(&resp) {
        Some((s, e, _)) if s == *at && e < b => {}
        other => {
            return Err(RangeErr::Fatal(TransferError::Remote(format!(
                "{url}: asked for bytes {}-{}, the server sent {other:?}",
                *at,
                b - 1
            ))))
        }
    }
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BUF);
    // Write what was gathered and record it as arrived.
    let flush = |buf: &mut Vec<u8>, at: &mut u64| -> Result<(), RangeErr> {
        write_at(file, buf, *at, tmp).map_err(RangeErr::Fatal)?;
        let n = buf.len() as u64;
        arrived
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((*at, *at + n));
        *at += n;
        buf.clear();
        Ok(())
    };
    loop {
        let piece = match next_chunk(&mut resp, stall, url).await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => {
                flush(&mut buf, at)?;
                return Err(RangeErr::Retry(e));
            }
        };
        let room = b - *at - buf.len() as u64;
        let n = (piece.len() as u64).min(room) as usize;
        buf.extend_from_slice(piece.get(..n).unwrap_or(&piece));
        stats.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
        stats.check().map_err(RangeErr::Fatal)?;
        if buf.len() >= WRITE_BUF {
            flush(&mut buf, at)?;
        }
        if *at + buf.len() as u64 >= b {
            break;
        }
    }
    flush(&mut buf, at)?;
    if *at < b {
        return Err(RangeErr::Retry(TransferError::Network(format!(
            "{url}: the range ended at {} before {b}",
            *at
        ))));
    }
    Ok(())
}

// ------------------------------------------------------------------ upload

fn upload(
    sources: &[PathBuf],
    dest: &HttpSpec,
    opts: &CopyOptions,
    stats: Arc<Stats>,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    check_local_sources(sources, opts)?;
    // Into the directory URL (trailing /, or several sources), else the
    // URL names the file (or, with -r, the directory) itself.
    let into = dest.url.is_dir() || sources.len() > 1;
    let mut files: Vec<(PathBuf, Url, u64)> = Vec::new();
    // Directories of -r sources, created with MKCOL before the files (PUT
    // creates the parents of a file on ferry serve and nginx, but an empty
    // directory needs its own request).
    let mut collections: Vec<Url> = Vec::new();
    for src in sources {
        let meta =
            std::fs::metadata(src).map_err(|e| TransferError::local(src, "cannot read", e))?;
        let name = src
            .file_name()
            .map(|n| n.as_bytes().to_vec())
            .unwrap_or_default();
        if meta.is_dir() {
            let base = if into {
                dest.url.child(&name)
            } else {
                dest.url.clone()
            };
            let mut found = Vec::new();
            let mut dirs = Vec::new();
            walk_local(src, b"", &mut found, &mut dirs)?;
            let under = |rel: &[u8]| {
                let mut u = base.clone();
                for seg in rel.split(|&c| c == b'/').filter(|s| !s.is_empty()) {
                    u = u.child(seg);
                }
                u
            };
            // Parents come before their children in `dirs`.
            collections.extend(dirs.iter().map(|(rel, _)| under(rel).as_dir()));
            for (p, rel, m) in found {
                files.push((p, under(&rel), m.len()));
            }
        } else {
            let u = if into {
                dest.url.child(&name)
            } else {
                dest.url.clone()
            };
            files.push((src.clone(), u, meta.len()));
        }
    }
    let client = client(opts)?;
    client.trust(&dest.url);
    stats
        .files_total
        .fetch_add(files.len() as u64, Ordering::Relaxed);
    stats
        .bytes_total
        .fetch_add(files.iter().map(|f| f.2).sum::<u64>(), Ordering::Relaxed);
    let nfiles = files.len() as u64;
    let total: u64 = files.iter().map(|f| f.2).sum();
    let big = files.iter().any(|f| f.2 >= NO_RESUME_BELOW);
    let resume = opts.resume;
    runtime(opts)?.block_on(async {
        mkcol_all(&client, &collections).await?;
        // Ranged PUTs only to a server that says it takes them: one that
        // ignored Content-Range would store the rest as the whole file.
        let ranged = big && put_ranges(&client, &dest.url).await;
        if resume && big && !ranged {
            tracing::warn!(
                "{}: the server does not take ranged PUTs (Content-Range), so uploads \
                 cannot be resumed there; sending every file from the start",
                dest.url
            );
        }
        let parallel = Arc::new(Semaphore::new(opts.files_in_flight().max(1)));
        let mut set = tokio::task::JoinSet::new();
        for (src, url, size) in files {
            let permit = parallel
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| TransferError::Local("internal: semaphore closed".into()))?;
            let (client, stats) = (client.clone(), stats.clone());
            set.spawn(async move {
                let how = if ranged && size >= NO_RESUME_BELOW {
                    Put::Ranged { resume }
                } else {
                    Put::Whole
                };
                let r = put(&client, &src, &url, size, &stats, how).await;
                drop(permit);
                r
            });
        }
        let mut first_err = None;
        let mut errors = 0usize;
        while let Some(r) = set.join_next().await {
            let r = r.map_err(|e| TransferError::Local(format!("internal: {e}")));
            if let Err(e) = r.and_then(|x| x) {
                errors += 1;
                report(&mut first_err, e);
            }
        }
        tracing::debug!(
            "transfers done at {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        if let Some(e) = first_err {
            return Err(if errors > 1 {
                with_more(e, errors - 1)
            } else {
                e
            });
        }
        Ok(Summary {
            bytes: total,
            files: nfiles,
            seconds: started.elapsed().as_secs_f64(),
            protocol: protocol(&client, dest.url.https),
            streams: client.connections(),
            chunk: 0,
            cipher: None,
        })
    })
}

/// MKCOL each directory in order (parents first). One that exists already
/// (405, as RFC 4918 says) is fine. A server without MKCOL still gets the
/// files, whose PUTs create their parents, and one warning that empty
/// directories were left out; a refusal for lack of credentials is an error.
async fn mkcol_all(client: &Client, dirs: &[Url]) -> Result<(), TransferError> {
    let mkcol = Method::from_bytes(b"MKCOL")
        .map_err(|e| TransferError::Local(format!("internal: MKCOL: {e}")))?;
    // MKCOL needs the parent to exist (409 otherwise, RFC 4918 §9.3.1): the
    // destination directory and its parents may not exist yet, so they are
    // made first, from the top, whatever the answers (405: it exists).
    let mut above = Vec::new();
    if let Some(first) = dirs.first() {
        let mut d = first.join("../");
        while let Some(u) = d {
            if u.path == "/" || above.len() >= 64 {
                break;
            }
            d = u.join("../");
            above.push(u);
        }
    }
    for url in above.iter().rev() {
        let resp = client
            .send(mkcol.clone(), url, &HeaderMap::new(), None)
            .await?;
        if resp.status == StatusCode::UNAUTHORIZED {
            return Err(HttpError::status(&url.to_string(), resp.status).into());
        }
        let _ = resp.bytes(64 * 1024).await;
    }
    for url in dirs {
        let resp = client
            .send(mkcol.clone(), url, &HeaderMap::new(), None)
            .await?;
        match resp.status {
            s if s.is_success() || s == StatusCode::METHOD_NOT_ALLOWED => {}
            StatusCode::UNAUTHORIZED => {
                return Err(HttpError::status(&url.to_string(), resp.status).into())
            }
            s => {
                tracing::warn!(
                    "{url}: the server refused to create the directory (HTTP {s}); \
                     directories without files are left out"
                );
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Response header of ferry serve's `OPTIONS`: `bytes` when PUT takes
/// `Content-Range` (ferry-server's `upload::PUT_RANGES`).
const PUT_RANGES: &str = "ferry-put-ranges";
/// Response header of ferry serve's upload state query: the SHA-256 of the
/// last bytes it holds (ferry-server's `upload::PART_TAIL`).
const PART_TAIL: &str = "ferry-part-tail";
/// Largest tail block we hash to check a partial upload.
const MAX_TAIL_CHECK: u64 = 1024 * 1024;

/// Whether the server at `url` takes ranged PUTs (ferry serve says so in
/// its `OPTIONS` answer). Any failure means no: whole-file PUTs work
/// everywhere.
async fn put_ranges(client: &Client, url: &Url) -> bool {
    let Ok(resp) = client
        .send(Method::OPTIONS, url, &HeaderMap::new(), None)
        .await
    else {
        return false;
    };
    let yes = resp.status.is_success()
        && resp
            .header(PUT_RANGES)
            .is_some_and(|v| v.split(',').any(|u| u.trim().eq_ignore_ascii_case("bytes")));
    let _ = resp.bytes(64 * 1024).await;
    yes
}

/// How one file is PUT.
#[derive(Debug, Clone, Copy)]
enum Put {
    /// One PUT of the whole body (nginx dav, small files).
    Whole,
    /// `Content-Range: bytes START-END/TOTAL` to ferry serve, which keeps
    /// what arrived in a part file if the upload is cut; with `resume`,
    /// first ask what it holds and go on from there.
    Ranged { resume: bool },
}

/// PUT one file, its body streamed from disk with its Content-Length.
async fn put(
    client: &Client,
    src: &Path,
    url: &Url,
    size: u64,
    stats: &Arc<Stats>,
    how: Put,
) -> Result<(), TransferError> {
    let file = Arc::new(
        std::fs::File::open(src).map_err(|e| TransferError::local(src, "cannot open", e))?,
    );
    let s = stats.clone();
    let progress: Arc<dyn Fn(u64) + Send + Sync> = Arc::new(move |n| {
        s.bytes_done.fetch_add(n, Ordering::Relaxed);
    });
    let mut h = HeaderMap::new();
    h.insert(
        "content-type",
        HeaderValue::from_static("application/octet-stream"),
    );
    let mut start = 0;
    if let Put::Ranged { resume } = how {
        if resume {
            start = resume_point(client, &file, src, url, size).await?;
            progress(start);
        }
        h.insert(
            "content-range",
            header(&format!("bytes {start}-{}/{size}", size.saturating_sub(1)))?,
        );
    }
    let f = file.clone();
    let make =
        move || ferry_http::file_body(f.clone(), start, size - start, Some(progress.clone()));
    let again = match how {
        Put::Whole => "run the copy again",
        Put::Ranged { .. } => "rerun with --resume to send only the rest",
    };
    let resp = client
        .send(Method::PUT, url, &h, Some(&make))
        .await
        .map_err(|e| match e {
            HttpError::Network(m) => {
                TransferError::Network(format!("{m} (uploading {}); {again}", src.display()))
            }
            e => e.into(),
        })?;
    if resp.status == StatusCode::ACCEPTED && matches!(how, Put::Ranged { .. }) {
        // The server holds a part, not the file: it did not get it all.
        let have = resp.header("range").and_then(held).unwrap_or(0);
        return Err(TransferError::Network(format!(
            "{url}: the server holds {have} of {size} bytes of {} after the upload; {again}",
            src.display()
        )));
    }
    let resp = resp.error_for_status()?;
    // Read the (small) answer so the connection can be reused.
    let _ = resp.bytes(1 << 20).await;
    stats.files_done.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// `Range: bytes=0-LAST` of ferry serve's upload state: how many bytes it
/// holds.
fn held(v: &str) -> Option<u64> {
    let (a, b) = v.trim().strip_prefix("bytes=")?.split_once('-')?;
    (a.trim() == "0").then_some(())?;
    b.trim().parse::<u64>().ok()?.checked_add(1)
}

/// `bytes=A-B sha-256=:BASE64:` of ferry serve's upload state.
fn part_tail(v: &str) -> Option<(u64, u64, [u8; 32])> {
    let (span, alg) = v.trim().split_once(' ')?;
    let (a, b) = span.strip_prefix("bytes=")?.split_once('-')?;
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    let mut h = HeaderMap::new();
    h.insert("repr-digest", HeaderValue::from_str(alg.trim()).ok()?);
    let sum = ferry_http::digest::expected_sha256(&h)?;
    (a <= b).then_some((a, b, sum))
}

/// Where a resumed ranged upload goes on: ask the server what it holds
/// (`Content-Range: bytes */SIZE`), and trust it only if the SHA-256 of its
/// last block equals the same bytes of `src` (the check SFTP resume makes,
/// docs/internals/sftp.md). Otherwise say so and start from 0.
async fn resume_point(
    client: &Client,
    file: &Arc<std::fs::File>,
    src: &Path,
    url: &Url,
    size: u64,
) -> Result<u64, TransferError> {
    let mut h = HeaderMap::new();
    h.insert("content-range", header(&format!("bytes */{size}"))?);
    let make = ferry_http::empty;
    let resp = client.send(Method::PUT, url, &h, Some(&make)).await?;
    let status = resp.status;
    let have = resp.header("range").and_then(held).unwrap_or(0);
    let tail = resp.header(PART_TAIL).and_then(part_tail);
    let _ = resp.bytes(64 * 1024).await;
    if status != StatusCode::ACCEPTED {
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(HttpError::status(&url.to_string(), status).into());
        }
        tracing::warn!(
            "{url}: the server did not say how much of the upload it holds \
             (HTTP {status}); sending {} from the start",
            src.display()
        );
        return Ok(0);
    }
    if have == 0 {
        return Ok(0);
    }
    let matches = match tail {
        Some((a, b, want)) if b + 1 == have && have <= size && b - a < MAX_TAIL_CHECK => {
            let f = file.clone();
            let got = tokio::task::spawn_blocking(move || -> std::io::Result<[u8; 32]> {
                let mut buf = vec![0u8; (b - a + 1) as usize];
                f.read_exact_at(&mut buf, a)?;
                Ok(Sha256::digest(&buf).into())
            })
            .await
            .map_err(|e| TransferError::Local(format!("internal: {e}")))?
            .map_err(|e| TransferError::local(src, "cannot read", e))?;
            got == want
        }
        _ => false,
    };
    if !matches {
        tracing::warn!(
            "{url}: the partial upload on the server ({have} bytes) is not the start \
             of {}; starting over",
            src.display()
        );
        return Ok(0);
    }
    // All there but not renamed (cut between the two): send the last byte
    // again so the server completes it.
    Ok(have.min(size.saturating_sub(1)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn upload_state_headers() {
        assert_eq!(held("bytes=0-99"), Some(100));
        assert_eq!(held("bytes=5-99"), None);
        assert_eq!(held("bytes=0-x"), None);
        let b = ferry_http::digest::to_base64(&[3u8; 32]);
        assert_eq!(
            part_tail(&format!("bytes=10-99 sha-256=:{b}:")),
            Some((10, 99, [3u8; 32]))
        );
        assert_eq!(part_tail(&format!("bytes=99-10 sha-256=:{b}:")), None);
        assert_eq!(part_tail("bytes=0-9 md5=:AAAA:"), None);
        assert_eq!(part_tail("garbage"), None);
    }

    #[test]
    fn validators() {
        let mut h = HeaderMap::new();
        h.insert("etag", HeaderValue::from_static("W/\"weak\""));
        h.insert(
            "last-modified",
            HeaderValue::from_static("Thu, 23 Nov 2023 10:00:00 GMT"),
        );
        assert_eq!(
            validator(&h).as_deref(),
            Some("Thu, 23 Nov 2023 10:00:00 GMT")
        );
        assert_eq!(last_modified(&h), Some(1_700_733_600));
        h.insert("etag", HeaderValue::from_static("\"strong\""));
        assert_eq!(validator(&h).as_deref(), Some("\"strong\""));
    }
}
