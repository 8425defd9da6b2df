//! FTP(S) as a backend: a pool of logged-in control connections used on
//! blocking threads (the measured choice: docs/internals/ftp.md), `REST`
//! and `RETR` for reads from any offset, `STOR` for writes and `APPE` to
//! continue one (resume of uploads), `SIZE` after each upload (a server
//! may end a cut-short `STOR` with `226`), `RNFR`/`RNTO` over the final name,
//! `MLSD` (or `LIST`) for listings. FTP moves one file per control
//! connection at a time, so parallelism is connections: `-P` files, and
//! `--streams N` ranges of one download.
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use ferry_ftp::{Conn, Endpoint, FtpError, Security, Transfer};

use super::{
    path, Backend, BackendInfo, ByteStream, Capabilities, Entry, EntryKind, HashAlgo, LocalRange,
    LocalSource, LocalTarget, RangeProgress, RangeTask, Role, Sink, SmallFile, WriteMode,
};
use crate::engine::ONE_JOB_MAX;
use crate::error::TransferError;
use crate::location::FtpSpec;
use crate::{CopyOptions, Tuning};

/// FTP(S) options of `ferry cp`.
#[derive(Debug, Clone, Default)]
pub struct FtpOptions {
    /// `ftp://` with AUTH TLS, refused if the server cannot (curl's
    /// `--ssl-reqd`).
    pub ssl_reqd: bool,
}

/// Bytes per piece read from a data connection: the local writer's batch
/// (1 MiB), so a piece is written as it comes.
const PIECE: usize = 1024 * 1024;
/// Pieces queued between a blocking transfer and the engine.
const QUEUE: usize = 4;
/// Ranges a download widened on a long path starts on: eight, as HTTP(S)
/// and SFTP start (runs wan-start-1, sftp-start-1) and as `lftp pget -n 8`
/// runs. Before, FTP did not tell the engine its round trip and never
/// widened: at `wan50` one connection moved 128 MiB from vsftpd at
/// 34.9 MB/s against `lftp pget -n 8`'s 50.9 (BENCHMARKS.md, run wan-full-1).
const WIDEN_START: usize = 8;

pub struct Ftp {
    pool: Arc<Pool>,
    names: Arc<Names>,
    max: usize,
    /// The server's refusal of the last path `stat` found missing (its
    /// SIZE reply, `550 ...`), for the "no such file" message.
    refusal: Mutex<Option<(Vec<u8>, String)>>,
    /// The hashes the server computes with `HASH` (FEAT's HASH line, read
    /// once at open), best first, with the server's names for them.
    hashes: Vec<(HashAlgo, String)>,
    /// Threads of this backend's own, one per file at once (-P), started
    /// as the engine's queue needs them ([`Backend::homes_for`]).
    lanes: Mutex<Vec<super::OwnThread>>,
    /// Connections a big download on a long path will want: `--streams`,
    /// or the ranges a widened file starts on ([`Backend::prepare`]).
    ahead: usize,
}

thread_local! {
    /// Set on a lane's thread ([`Backend::homes`]): a thread of the
    /// backend's own on which the engine copies whole files one after
    /// the other, each file's blocking job run right there (the copy
    /// loop's worker): no hand-off between threads a file. The lane's
    /// number: it takes back the control connection it last used.
    static LANE: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// A file's blocking job: run where the engine's task is when that is a
/// lane (it has the thread to itself), else on the blocking pool.
fn run_job<F>(progress: &RangeProgress, job: F) -> RangeTask
where
    F: FnOnce() -> Result<(), (TransferError, bool)> + Send + 'static,
{
    if LANE.with(|l| l.get()).is_some() {
        progress.set_inline();
        tokio::spawn(async move { job() })
    } else {
        tokio::task::spawn_blocking(job)
    }
}

/// Logged-in control connections to one server: at most `max` live
/// (FTP servers limit connections per client; vsftpd's `max_per_ip`),
/// handed out as [`Lease`]s.
struct Pool {
    ep: Arc<Endpoint>,
    state: Mutex<PoolState>,
    /// Signalled when a connection comes back or is lost.
    ready: Condvar,
    /// -P files at once, or --streams ranges of one; raised for a file
    /// the engine widens on a long path ([`Backend::widen`]).
    max: AtomicUsize,
    /// Connections opened in all (the report's `streams`).
    opened: AtomicUsize,
    /// The shortest TCP handshake of its connections: the path's round
    /// trip, which tells the engine whether to widen a big download.
    round_trip: ferry_tcp::MinRoundTrip,
    /// The login directory, as the first connection's `PWD` said: the
    /// others do not ask again.
    home: String,
    /// The server refused a login for its connection limit: `max` holds
    /// what it accepted ([`Pool::hold_at_limit`]).
    limited: AtomicBool,
}

struct PoolState {
    /// Logged-in connections not in use, each with the lane that gave it
    /// back (`None`: another thread).
    idle: Vec<(Option<usize>, Conn)>,
    /// Connections open: idle or leased.
    live: usize,
    /// Takers waiting on `ready`: a connection given back wakes one only
    /// when there is one (std's `notify_one` makes a futex call either
    /// way, once a file).
    waiting: usize,
}

/// How long `take` waits for a connection at the bound before opening
/// one more anyway: a soft bound, so that an operation that needs a
/// second connection while every other is busy (a tail check of both
/// ends on one server) never waits for good.
const POOL_WAIT: Duration = Duration::from_secs(2);
/// Logins refused for the server's connection limit that one `take`
/// waits out before it fails: a connection comes back each file, so
/// this is met only when every open one is held for good.
const LIMIT_REFUSALS: u32 = 8;
/// [`POOL_WAIT`] once the server refused a login for its limit.
const LIMITED_WAIT: Duration = Duration::from_secs(30);

impl Pool {
    /// An idle connection, a new one while fewer than `max` are open, or
    /// (after waiting up to [`POOL_WAIT`] for one to come back) a new one.
    /// A new one the server refuses for its connection limit lowers `max`
    /// to the connections open ([`Pool::hold_at_limit`]), and the taker
    /// waits for one of those instead.
    fn take(self: &Arc<Self>) -> Result<Lease, FtpError> {
        let mut refused = 0;
        let conn = loop {
            if let Some(c) = self.idle_or_room() {
                break c;
            }
            match self.connect() {
                Ok(c) => break c,
                Err(e) if refused < LIMIT_REFUSALS && self.hold_at_limit(&e) => refused += 1,
                Err(e) => return Err(e),
            }
        };
        Ok(Lease {
            conn: Some(conn),
            pool: self.clone(),
        })
    }

    /// An idle connection, or `None` once a new one may be opened (it is
    /// counted in `live` already).
    fn idle_or_room(&self) -> Option<Conn> {
        // At the server's limit, files wait their turn for a connection:
        // a taker that has not waited yet queues behind those waiting
        // while they outnumber the idle connections (else a lane would
        // take back its own connection file after file while others
        // starve), and waits longer before trying one more login.
        let limited = self.limited.load(Ordering::Relaxed);
        let deadline = Instant::now() + if limited { LIMITED_WAIT } else { POOL_WAIT };
        let mut st = lock(&self.state);
        let lane = LANE.with(|l| l.get());
        let mut queue = limited && st.waiting > st.idle.len();
        loop {
            if !queue {
                // A lane's own connection first: each lane talks to the
                // same server process file after file, as the copy loop's
                // workers did. Handed round the lanes (the last one given
                // back), 1000 x 20 kB to vsftpd ran 0.87x the loop's speed
                // up and 0.94x down, against 0.95x and 1.05x with its own,
                // and the client's threads moved between CPUs three times
                // as often (BENCHMARKS.md run ftp-affinity-1).
                let mine = lane.and_then(|_| st.idle.iter().rposition(|(l, _)| *l == lane));
                let idle = match mine {
                    Some(i) => Some(st.idle.swap_remove(i).1),
                    None => st.idle.pop().map(|(_, c)| c),
                };
                if idle.is_some() {
                    return idle;
                }
            }
            let now = Instant::now();
            if st.live < self.max.load(Ordering::Relaxed) || now >= deadline {
                st.live += 1;
                return None;
            }
            st.waiting += 1;
            st = match self.ready.wait_timeout(st, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
            st.waiting -= 1;
            queue = false;
        }
    }

    /// After `e`, a refused login: when it is the server's connection
    /// limit and other connections are open, hold the pool at those (the
    /// refused one is uncounted already) and say so once; true if the
    /// taker should wait for one of them.
    fn hold_at_limit(&self, e: &FtpError) -> bool {
        if !e.is_connection_limit() {
            return false;
        }
        let live = lock(&self.state).live;
        if live == 0 {
            return false;
        }
        self.max.fetch_min(live, Ordering::Relaxed);
        if !self.limited.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "{}: the server allows no more connections ({e}); going on with those it accepted",
                self.ep.display,
            );
        }
        true
    }

    /// A new logged-in connection, counted in `live` already; a failure
    /// uncounts it.
    fn connect(&self) -> Result<Conn, FtpError> {
        match Conn::open_at(&self.ep, Some(&self.home)) {
            Ok(c) => {
                self.opened.fetch_add(1, Ordering::Relaxed);
                if let Some(d) = c.round_trip() {
                    self.round_trip.note(d);
                }
                Ok(c)
            }
            Err(e) => {
                self.lost();
                Err(e)
            }
        }
    }

    /// Open connections in the background until `want` are live, each
    /// joining the idle ones when logged in (a failure is only logged:
    /// the work opens its own as before).
    fn open_ahead(self: &Arc<Self>, want: usize) {
        self.max.fetch_max(want, Ordering::Relaxed);
        let more = {
            let mut st = lock(&self.state);
            let more = want.saturating_sub(st.live);
            st.live += more;
            more
        };
        for _ in 0..more {
            let pool = self.clone();
            tokio::task::spawn_blocking(move || match pool.connect() {
                Ok(c) => {
                    let mut st = lock(&pool.state);
                    st.idle.push((None, c));
                    pool.wake_one(st);
                }
                Err(e) => tracing::debug!("opening an FTP connection ahead: {e}"),
            });
        }
    }

    fn give_back(&self, mut lease: Lease) {
        if let Some(c) = lease.conn.take() {
            let mut st = lock(&self.state);
            st.idle.push((LANE.with(|l| l.get()), c));
            self.wake_one(st);
        }
    }

    fn lost(&self) {
        let mut st = lock(&self.state);
        st.live = st.live.saturating_sub(1);
        self.wake_one(st);
    }

    fn wake_one(&self, st: std::sync::MutexGuard<'_, PoolState>) {
        let waiting = st.waiting > 0;
        drop(st);
        if waiting {
            self.ready.notify_one();
        }
    }
}

/// A connection taken from the pool: given back with
/// [`Pool::give_back`]; dropped, it is closed and counted as lost (a
/// connection that failed, or an abandoned transfer's).
struct Lease {
    conn: Option<Conn>,
    pool: Arc<Pool>,
}

impl std::ops::Deref for Lease {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        match &self.conn {
            Some(c) => c,
            None => unreachable!("a lease holds its connection until given back"),
        }
    }
}

impl std::ops::DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut Conn {
        match &mut self.conn {
            Some(c) => c,
            None => unreachable!("a lease holds its connection until given back"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.conn.take().is_some() {
            self.pool.lost();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a server's paths are shown: as URLs under `prefix`
/// (`ftp://user@host:port`), relative to the login's `home`.
struct Names {
    home: String,
    prefix: String,
}

impl Names {
    fn show(&self, p: &[u8]) -> String {
        let p = path::text_ref(p);
        let home = self.home.trim_end_matches('/');
        let (sep, rel) = match p
            .strip_prefix(home)
            .filter(|r| r.starts_with('/') || r.is_empty())
        {
            Some("") => ("", "/"),
            Some(rel) => ("", rel),
            None => ("/%2F", p.trim_start_matches('/')),
        };
        let mut shown = String::with_capacity(self.prefix.len() + sep.len() + rel.len());
        shown.push_str(&self.prefix);
        shown.push_str(sep);
        shown.push_str(rel);
        shown
    }
}

fn s(p: &[u8]) -> String {
    path::text(p)
}

impl Ftp {
    pub async fn open(spec: &FtpSpec, opts: &CopyOptions) -> Result<(Ftp, Vec<u8>), TransferError> {
        let ep = endpoint(spec, opts)?;
        let e2 = ep.clone();
        let (conn, hash_names) = tokio::task::spawn_blocking(move || {
            let mut c = Conn::open(&e2)?;
            let names = c.hash_algorithms();
            Ok::<_, FtpError>((c, names))
        })
        .await
        .map_err(|e| TransferError::Network(format!("internal: {e}")))?
        .map_err(TransferError::from)?;
        let home = conn.home.clone();
        let round_trip = ferry_tcp::MinRoundTrip::default();
        if let Some(d) = conn.round_trip() {
            round_trip.note(d);
        }
        let resolved = absolute(&home, &spec.path);
        let scheme = match ep.security {
            Security::Implicit => "ftps",
            _ => "ftp",
        };
        let user = spec
            .user
            .as_deref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let port = spec.port.map(|p| format!(":{p}")).unwrap_or_default();
        let long = conn.round_trip().is_some_and(ferry_tcp::is_long);
        let max = match opts.parallel {
            Some(n) => n,
            None if long => Tuning::FTP_PARALLEL_LONG_PATH,
            None => Tuning::FTP_PARALLEL,
        }
        .max(1);
        let mut resolved = resolved.into_bytes();
        if spec.trailing_slash() && !resolved.ends_with(b"/") {
            resolved.push(b'/');
        }
        Ok((
            Ftp {
                pool: Arc::new(Pool {
                    ep,
                    state: Mutex::new(PoolState {
                        idle: vec![(None, conn)],
                        live: 1,
                        waiting: 0,
                    }),
                    ready: Condvar::new(),
                    // -P files at once, or --streams ranges of one.
                    max: AtomicUsize::new(max.max(opts.streams.unwrap_or(Tuning::FTP_STREAMS))),
                    opened: AtomicUsize::new(1),
                    round_trip,
                    home: home.clone(),
                    limited: AtomicBool::new(false),
                }),
                ahead: match opts.streams {
                    Some(n) => n,
                    None if opts.max_streams > 1 => WIDEN_START.min(opts.max_streams),
                    None => 1,
                },
                names: Arc::new(Names {
                    home,
                    prefix: format!("{scheme}://{user}{}{port}", spec.host),
                }),
                max,
                refusal: Mutex::new(None),
                hashes: known_hashes(&hash_names),
                lanes: Mutex::new(Vec::new()),
            },
            resolved,
        ))
    }

    /// A small file: STOR, its bytes and RNFR/RNTO in one trip to a
    /// blocking thread, a local file read there too. The ordinary calls
    /// took five thread switches a file, most of the client's CPU for 1000
    /// x 20 kB (perf: `finish_task_switch`), and 2.4x the copy loop's. FTP
    /// sets no times or modes.
    async fn put_small(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        from: SmallFile,
    ) -> Result<(), TransferError> {
        let (up, rename) = self.whole_upload(part, to);
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || -> Result<(), TransferError> {
            // Read before a connection is taken from the pool.
            let data = from.into_bytes()?;
            let send = |t: &mut Transfer, end: &mut u64| {
                t.write_all(&data).map_err(Sent::Network)?;
                *end += data.len() as u64;
                Ok(())
            };
            // The SIZE check in the same job: one more round trip, no
            // thread switch.
            put_in_one_job(&pool, &up, rename.as_deref(), send, |_| Ok(()))
        })
        .await
        .map_err(|e| TransferError::Network(format!("internal: {e}")))?
    }

    /// The upload of a whole file to `to` in one job, written under
    /// `part` when given: its [`Upload`], and the name the part is renamed
    /// to.
    fn whole_upload(&self, part: Option<&[u8]>, to: &[u8]) -> (Upload, Option<String>) {
        let written = part.unwrap_or(to);
        let up = Upload {
            path: s(written),
            shown: self.display(written),
            fin: part.map(|_| to.to_vec()),
            names: self.names.clone(),
        };
        (up, part.map(|_| s(to)))
    }

    /// Run `f` on a connection from the pool (or a new one) on a blocking
    /// thread; the connection goes back unless the failure was the
    /// connection's.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, FtpError> + Send + 'static,
    ) -> Result<T, TransferError> {
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = pool.take()?;
            let r = f(&mut c);
            if !matches!(&r, Err(e) if e.is_network()) {
                pool.give_back(c);
            }
            r
        })
        .await
        .map_err(|e| TransferError::Network(format!("internal: {e}")))?
        .map_err(TransferError::from)
    }
}

#[async_trait]
impl Backend for Ftp {
    fn scheme(&self) -> &'static str {
        match self.pool.ep.security {
            Security::Plain => "ftp",
            _ => "ftps",
        }
    }
    fn display(&self, p: &[u8]) -> String {
        self.names.show(p)
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_read: true,
            offset_write: false,
            append: true,
            rename_over: true,
            atomic_write: false,
            set_times: false,
            set_mode: false,
            list: true,
            server_copy: false,
            max_files: self.max,
            // Measured: one data connection per file unless --streams
            // asks for more, or a long path widens a big download
            // (docs/internals/ftp.md).
            max_ranges: Tuning::FTP_STREAMS,
        }
    }
    fn endpoint_key(&self) -> String {
        self.names.prefix.clone()
    }

    fn homes(&self) -> Vec<tokio::runtime::Handle> {
        lock(&self.lanes).iter().map(|l| l.rt.clone()).collect()
    }

    /// Lanes started as the files need them, up to -P: a lane is a thread
    /// with a runtime of its own, and all 8 for one 20 kB file made its
    /// upload 9.1 ms against the copy loop's 8.5 ms, one lane 8.1 ms
    /// (BENCHMARKS.md run ftp-affinity-1).
    fn homes_for(&self, files: usize) -> Vec<tokio::runtime::Handle> {
        let want = files.min(self.max);
        let mut lanes = lock(&self.lanes);
        while lanes.len() < want {
            let i = lanes.len();
            let on_lane = move || LANE.with(|l| l.set(Some(i)));
            match super::OwnThread::start_with(format!("ferry-ftp-{i}"), on_lane) {
                Ok(lane) => lanes.push(lane),
                Err(_) => break,
            }
        }
        lanes.iter().take(want).map(|l| l.rt.clone()).collect()
    }

    fn home_file_max(&self) -> u64 {
        ONE_JOB_MAX
    }

    fn round_trip(&self) -> Option<Duration> {
        self.pool.round_trip.get()
    }

    /// Downloads of at least a widened file's size on a long path: the
    /// connections its ranges will take are opened now, in the
    /// background, before the first range starts; each is a login (five
    /// round trips, `PWD` left out). Opened as the ranges started, 128
    /// MiB from vsftpd at loss100 took 4.11 s; opened ahead and without
    /// `PWD`, 3.88 s (`lftp pget -n 8`: 3.75 s; run ftp-wide-1).
    async fn prepare(&self, role: Role, bytes: Option<u64>) {
        let long = self.round_trip().is_some_and(ferry_tcp::is_long);
        if role == Role::Source
            && long
            && self.ahead > 1
            && bytes.is_some_and(|b| b >= crate::widen::WIDEN_MIN)
        {
            self.pool.open_ahead(self.ahead);
        }
    }

    /// A range is `REST` and `RETR` on a data connection of its own.
    fn range_opens_connection(&self) -> bool {
        true
    }

    /// A widened download starts on eight ranges ([`WIDEN_START`]).
    fn widen_start(&self) -> usize {
        WIDEN_START
    }

    /// A widened download's ranges each take a control connection of the
    /// pool, opened as they start (a login each): the pool may hold that
    /// many from now on. Uploads are one stream (`STOR` has no offset).
    async fn widen(&self, role: Role, ranges: usize) -> usize {
        match role {
            Role::Source => {
                self.pool.max.fetch_max(ranges, Ordering::Relaxed);
                ranges
            }
            Role::Destination => self.capabilities().max_ranges.min(ranges),
        }
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            connections: self.pool.opened.load(Ordering::Relaxed),
            cipher: None,
            chunk: 0,
            protocol: Some(self.scheme().into()),
        }
    }

    async fn stat(&self, p: &[u8]) -> Result<Option<Entry>, TransferError> {
        let ps = s(p);
        let name = path::basename(p).to_vec();
        let (found, refusal) = self
            .with(move |c| {
                let mut refusal = None;
                let found = stat_on(c, &ps, name, &mut refusal)?;
                Ok((found, refusal))
            })
            .await?;
        if found.is_none() {
            *lock(&self.refusal) = refusal.map(|r| (p.to_vec(), r));
        }
        Ok(found)
    }

    fn missing(&self, p: &[u8]) -> TransferError {
        let why = match &*lock(&self.refusal) {
            Some((at, r)) if at == p => format!(" ({r})"),
            _ => String::new(),
        };
        TransferError::Remote(format!(
            "{}: no such file or directory on the server{why}",
            self.display(p)
        ))
    }

    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        let d = s(dir);
        let (entries, _refused) = self.with(move |c| c.list(d.trim_end_matches('/'))).await?;
        Ok(entries
            .into_iter()
            .map(|e| Entry {
                name: e.name.into_bytes(),
                kind: match e.kind {
                    ferry_ftp::listing::Kind::Dir => EntryKind::Dir,
                    _ => EntryKind::File,
                },
                size: Some(e.size),
                mtime: e.mtime,
                mode: None,
            })
            .collect())
    }

    async fn read(
        &self,
        p: &[u8],
        offset: u64,
        len: Option<u64>,
    ) -> Result<Box<dyn ByteStream>, TransferError> {
        // Started by the first `next` (pieces through a channel) or by
        // `write_into` (written from the data connection's thread).
        Ok(Box::new(FtpRead {
            retr: Some(Retr {
                pool: self.pool.clone(),
                path: s(p),
                display: self.display(p),
                offset,
                len,
            }),
            rx: None,
        }))
    }

    async fn write(
        &self,
        p: &[u8],
        mode: WriteMode,
        _size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        // Where the file ends when this write is done: `from` and the
        // bytes sent (APPE continues a part of `from` bytes).
        let from = match mode {
            WriteMode::Create { .. } => 0,
            WriteMode::At(n) => n,
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(QUEUE);
        let up = Upload {
            path: s(p),
            shown: self.display(p),
            fin: final_of(p),
            names: self.names.clone(),
        };
        let pool = self.pool.clone();
        let task = tokio::task::spawn_blocking(move || -> Result<(), TransferError> {
            let mut rx = rx;
            let begun = pool
                .take()
                .and_then(|mut c| Ok((up.stor(&mut c, from)?, c)));
            let (stor, mut c) = match begun {
                Ok(v) => v,
                Err(e) => {
                    let e = TransferError::from(e);
                    // A range handed over (`read_from`) waits to be told.
                    return match rx.blocking_recv() {
                        Some(Piece::File(_, done)) => {
                            let _ = done.send(Err((e, false)));
                            Ok(())
                        }
                        _ => Err(e),
                    };
                }
            };
            // A range whose data connection failed: told why once the
            // server's reply is read.
            let mut cut = None;
            let send = |t: &mut Transfer, end: &mut u64| loop {
                match rx.blocking_recv() {
                    Some(Piece::Data(b)) => {
                        t.write_all(&b).map_err(Sent::Network)?;
                        *end += b.len() as u64;
                    }
                    Some(Piece::File(range, done)) => match send_file(t, &range, end) {
                        Ok(()) => {
                            let _ = done.send(Ok(()));
                        }
                        // What was sent is good: the engine may keep it
                        // (finish), or drop the upload.
                        Err(Sent::Source(e)) => {
                            let _ = done.send(Err((e, true)));
                        }
                        Err(Sent::Stopped) => return Err(Sent::Stopped),
                        Err(Sent::Network(e)) => {
                            cut = Some(done);
                            return Err(Sent::Network(e));
                        }
                    },
                    Some(Piece::End) => return Ok(()),
                    // Abandoned: the data connection is dropped, and
                    // with it this control connection.
                    None => return Err(Sent::Stopped),
                }
            };
            // The connection goes back only after the server took the
            // whole upload (a SIZE that does not match included): a
            // refused or cut one closes it.
            match stor.send(&mut c, send) {
                Ok(()) => {
                    pool.give_back(c);
                    Ok(())
                }
                Err(Stop::Kept(e)) => {
                    pool.give_back(c);
                    Err(e)
                }
                Err(Stop::Ftp(e)) => match cut {
                    Some(done) => {
                        let _ = done.send(Err((e.into(), false)));
                        Ok(())
                    }
                    None => Err(e.into()),
                },
                // Stopped or abandoned by the engine: nothing to report.
                Err(Stop::Dropped(_)) => Ok(()),
            }
        });
        Ok(Box::new(FtpWrite {
            tx,
            task: Some(task),
            display: self.display(p),
        }))
    }

    async fn mkdir_all(&self, dir: &[u8]) -> Result<(), TransferError> {
        let mut levels = Vec::new();
        let mut d = dir.to_vec();
        while d.len() > 1 {
            let t = d.strip_suffix(b"/").unwrap_or(&d).to_vec();
            levels.push(s(&t));
            d = path::parent(&t).to_vec();
        }
        levels.reverse();
        // Deepest first: most often the directory's parent is there (one
        // MKD) or the directory itself is. Level by level from the root
        // took three round trips for each existing level (MKD refused,
        // CWD there and back), 18 for a directory six deep, before the
        // first file could start.
        self.with(move |c| {
            let mut made = levels.len();
            while made > 0 {
                match c.mkdir(&levels[made - 1]) {
                    Ok(()) => break,
                    // Its parent may be missing.
                    Err(FtpError::Reply { .. }) if made > 1 => made -= 1,
                    Err(e) => return Err(e),
                }
            }
            for l in levels.iter().skip(made) {
                c.mkdir(l)?;
            }
            Ok(())
        })
        .await
    }

    async fn rename_over(&self, from: &[u8], to: &[u8]) -> Result<(), TransferError> {
        let (f, t) = (s(from), s(to));
        self.with(move |c| c.rename(&f, &t)).await
    }

    async fn put_whole(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        data: Bytes,
        _perm: Option<u32>,
        _mtime: Option<i64>,
        _mode: Option<u32>,
    ) -> Result<(), TransferError> {
        self.put_small(part, to, SmallFile::Bytes(data)).await
    }

    async fn put_local(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        from: &std::path::Path,
        len: u64,
        _perm: Option<u32>,
        _mtime: Option<i64>,
        _mode: Option<u32>,
    ) -> Option<Result<(), TransferError>> {
        let from = SmallFile::Local(from.to_path_buf(), len);
        Some(self.put_small(part, to, from).await)
    }

    /// One blocking job a file (read by `RETR` into the new file, put in
    /// place: [`LocalTarget::make`]),
    /// as the copy loop's worker did (BENCHMARKS.md run ftp-one-job-1).
    fn get_local(&self, p: &[u8], to: LocalTarget) -> Option<RangeTask> {
        let retr = Retr {
            pool: self.pool.clone(),
            path: s(p),
            display: self.display(p),
            offset: 0,
            len: Some(to.len),
        };
        let progress = to.progress.clone();
        Some(run_job(&progress, move || {
            to.make(|range| retr.run(&mut Out::File(range)))
        }))
    }

    /// One blocking job a file: `STOR` by sendfile, `SIZE`, the source's
    /// `fstat`, `RNFR`/`RNTO`, as the copy loop's worker did.
    fn put_from_local(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        from: LocalSource,
    ) -> Option<RangeTask> {
        let (up, rename) = self.whole_upload(part, to);
        let pool = self.pool.clone();
        let progress = from.progress.clone();
        Some(run_job(&progress, move || {
            let (range, check) = from.open(&up.shown).map_err(|e| (e, true))?;
            let send = |t: &mut Transfer, end: &mut u64| send_file(t, &range, end);
            let unchanged = |c: &mut Conn| {
                if check.check().is_err() {
                    // Both versions' bytes: not kept for a --resume.
                    from.changed.store(true, Ordering::Relaxed);
                    let _ = c.remove(&up.path);
                    return Err(Stop::Kept(TransferError::Remote(format!(
                        "{}: the file changed during the copy",
                        from.path.display()
                    ))));
                }
                Ok(())
            };
            put_in_one_job(&pool, &up, rename.as_deref(), send, unchanged).map_err(|e| (e, false))
        }))
    }

    async fn remove(&self, p: &[u8]) -> Result<(), TransferError> {
        let ps = s(p);
        self.with(move |c| c.remove(&ps)).await
    }

    async fn remove_dir(&self, p: &[u8]) -> Result<(), TransferError> {
        let ps = s(p);
        self.with(move |c| c.rmdir(&ps)).await
    }

    fn hashes(&self) -> Vec<HashAlgo> {
        self.hashes.iter().map(|(a, _)| *a).collect()
    }

    /// `HASH` on the server (draft-bryan-ftpext-hash): the file is read
    /// there, not through the link. `Ok(None)` for an algorithm FEAT did
    /// not list (the caller then reads the file).
    async fn hash(&self, p: &[u8], algo: HashAlgo) -> Result<Option<Vec<u8>>, TransferError> {
        let Some((_, name)) = self.hashes.iter().find(|(a, _)| *a == algo) else {
            return Ok(None);
        };
        let (ps, name) = (s(p), name.clone());
        let h = self.with(move |c| c.hash(&ps, &name)).await?;
        if h.len() != 32 {
            return Err(TransferError::Remote(format!(
                "{}: HASH: a {}-byte {} hash; it has 32 bytes",
                self.display(p),
                h.len(),
                algo.name()
            )));
        }
        Ok(Some(h))
    }

    async fn close(&self) {
        let conns = std::mem::take(&mut lock(&self.pool.state).idle);
        // All QUITs at once: each waits a round trip for the server's
        // 221, and one after the other they added 8 x 50 ms to an 8-range
        // download at wan50 (run ftp-wide-1).
        let _ = tokio::task::spawn_blocking(move || {
            std::thread::scope(|scope| {
                let mut conns = conns.into_iter().map(|(_, c)| c);
                let first = conns.next();
                for c in conns {
                    let quit = move || c.quit();
                    // A thread that cannot start: its connection is
                    // dropped unsaid.
                    let _ = std::thread::Builder::new()
                        .name("ftp-quit".into())
                        .spawn_scoped(scope, quit);
                }
                if let Some(c) = first {
                    c.quit();
                }
            });
        })
        .await;
    }
}

/// A STOR whose data connection failed with `e`: the server may have
/// said why it stopped reading (452/552: its disk is full), and then that
/// reply is the error, not the lost connection.
fn stor_failed(c: &mut Conn, t: Transfer, path: &str, shown: &str, e: std::io::Error) -> FtpError {
    match c.finish(t, path) {
        Err(r @ FtpError::Reply { .. }) => r,
        _ => FtpError::Network(format!("{shown}: {e}")),
    }
}

/// After a `STOR` (or `APPE`) and its `226`: the file's `SIZE` must be
/// `want`, the bytes it holds now that all were sent. Some servers end a
/// `STOR` with `226` although a full disk or a quota cut the file short;
/// unchecked, that short part file would be renamed into place. A server
/// that refuses `SIZE` (500/502: not implemented; any refusal) goes
/// unchecked, as ferry's FTP copy loop did before the engine. A mismatch
/// is final (not a lost connection: [`Stop::Kept`]), and the part file
/// stays where it is (as after a `452`/`552`): `--resume` continues it
/// after its tail is compared. The message names the file written and,
/// for a part, its final name.
fn check_stored(c: &mut Conn, to: &Upload, want: u64) -> Result<(), Stop> {
    let got = match c.size(&to.path) {
        Ok(n) => n,
        Err(FtpError::Reply { .. }) => return Ok(()),
        Err(e) => return Err(Stop::Ftp(e)),
    };
    if got == want {
        return Ok(());
    }
    // The sizes are written "SIZE n," and "expected n:", never " n ": a
    // bare " 421 " in a message reads as a transient reply (retry.rs).
    let what = format!("after the upload the server reports SIZE {got}, expected {want}");
    let why = if got < want {
        "the server did not store all of it (its disk or the account's quota is probably full): free space on the server, then run the copy again"
    } else {
        "the file holds more than was sent (something else wrote to it during the upload?): run the copy again"
    };
    let shown = &to.shown;
    Err(Stop::Kept(TransferError::Remote(match &to.fin {
        Some(fin) => format!(
            "{}: {what}: {why} (--resume continues the part file {shown}); the final name was left alone",
            to.names.show(fin)
        ),
        None => format!("{shown}: {what}: {why}"),
    })))
}

/// The final name of a part file (`.NAME.ferry-part` beside it), for
/// messages.
fn final_of(part: &[u8]) -> Option<Vec<u8>> {
    let name = path::basename(part)
        .strip_prefix(b".")?
        .strip_suffix(b".ferry-part")?;
    (!name.is_empty()).then(|| path::join(path::parent(part), name))
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

/// The algorithms of FEAT's HASH line that ferry computes too (SHA-256,
/// BLAKE3; others are left out), BLAKE3 first (the cheaper to compute),
/// each with the name the server gave it.
fn known_hashes(names: &[String]) -> Vec<(HashAlgo, String)> {
    let mut v: Vec<(HashAlgo, String)> = names
        .iter()
        .filter_map(|n| match n.to_ascii_uppercase().as_str() {
            "BLAKE3" => Some((HashAlgo::Blake3, n.clone())),
            "SHA-256" | "SHA256" => Some((HashAlgo::Sha256, n.clone())),
            _ => None,
        })
        .collect();
    v.sort_by_key(|(a, _)| a.preference());
    v.dedup_by_key(|(a, _)| *a);
    v
}

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

fn endpoint(spec: &FtpSpec, opts: &CopyOptions) -> Result<Arc<Endpoint>, TransferError> {
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

/// `path` from the URL made absolute: relative ones are under the login
/// directory (curl's reading of ftp:// paths).
fn absolute(home: &str, path: &str) -> String {
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

/// Read until `buf` is full or the data ends: the bytes read, and the
/// failure that stopped it early (after those bytes, which are good).
fn fill(r: &mut impl Read, buf: &mut [u8]) -> (usize, Option<std::io::Error>) {
    let mut got = 0;
    while let Some(rest) = buf.get_mut(got..).filter(|b| !b.is_empty()) {
        match r.read(rest) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (got, Some(e)),
        }
    }
    (got, None)
}

/// `stat` on a connection: SIZE (and MDTM) for a file, else a directory
/// check. A refusal of SIZE for a path that is no directory is kept in
/// `refusal` (`550 Could not get file size.`).
fn stat_on(
    c: &mut Conn,
    ps: &str,
    name: Vec<u8>,
    refusal: &mut Option<String>,
) -> Result<Option<Entry>, FtpError> {
    let trimmed = ps.trim_end_matches('/');
    if ps.ends_with('/') || trimmed.is_empty() {
        let d = if trimmed.is_empty() { "/" } else { trimmed };
        return Ok(c.is_dir(d)?.then(|| Entry::dir(name)));
    }
    match c.size(trimmed) {
        Ok(size) => {
            let mtime = c.mdtm(trimmed);
            Ok(Some(Entry {
                name,
                kind: EntryKind::File,
                size: Some(size),
                mtime,
                mode: None,
            }))
        }
        Err(e) if e.is_network() => Err(e),
        Err(e) => {
            if let FtpError::Reply { code, text, .. } = &e {
                *refusal = Some(format!("{code} {text}"));
            }
            Ok(c.is_dir(trimmed)?.then(|| Entry::dir(name)))
        }
    }
}

/// One RETR, not started yet.
struct Retr {
    pool: Arc<Pool>,
    path: String,
    display: String,
    offset: u64,
    len: Option<u64>,
}

/// Where a RETR's bytes go.
enum Out {
    /// Whole pieces to the engine's task.
    Pieces(tokio::sync::mpsc::Sender<Result<Bytes, TransferError>>),
    /// Straight into a local file, from the data connection's thread.
    File(LocalRange),
}

impl Out {
    /// Hand on `piece`; `false` when nobody takes it any more.
    fn put(&mut self, piece: &mut Vec<u8>) -> Result<bool, TransferError> {
        match self {
            Out::Pieces(tx) => Ok(tx
                .blocking_send(Ok(Bytes::from(std::mem::take(piece))))
                .is_ok()),
            Out::File(into) => {
                if into.progress.stopped() {
                    return Ok(false);
                }
                into.file.write(piece)?;
                into.progress.add(piece.len() as u64);
                Ok(true)
            }
        }
    }
}

impl Retr {
    /// Run the RETR on this (blocking) thread into `out`. `Err`'s flag:
    /// the source failed (what was handed on before is good).
    fn run(self, out: &mut Out) -> Result<(), (TransferError, bool)> {
        let Retr {
            pool,
            path: ps,
            display,
            offset,
            len,
        } = self;
        let mut c = pool.take().map_err(|e| (e.into(), true))?;
        // A REST past the end of a file that shrank is not refused by
        // every server: vsftpd then sends the file from its start, and a
        // retry wrote those bytes at the offset asked (the fault matrix's
        // truncated source ended with exit 0 and a file of the old size
        // matching neither version). The file's size now says whether the
        // range is still there; a server without SIZE goes unchecked.
        if offset > 0 {
            let need = offset.saturating_add(len.unwrap_or(0));
            if let Some(e) = shrank(&mut c, &ps, &display, need, "the copy needs") {
                pool.give_back(c);
                return Err((e, true));
            }
        }
        let mut t = match c.retr(&ps, offset) {
            Ok(t) => t,
            Err(e) => {
                if !e.is_network() {
                    pool.give_back(c);
                }
                return Err((e.into(), true));
            }
        };
        let mut left = len.unwrap_or(u64::MAX);
        let mut taken = true;
        // Into a file: a buffer kept between files, zeroed and faulted in
        // once, not once a file (1 MiB for each 1 MB file was a tenth of
        // the client's CPU from vsftpd). Pieces handed on take theirs
        // along.
        let mut kept = matches!(out, Out::File(_)).then(FileBuf::take);
        let mut own = Vec::new();
        let buf = match kept.as_mut() {
            Some(k) => &mut k.0,
            None => &mut own,
        };
        while left > 0 {
            // Whole pieces: a data connection (a TLS one in 16 KiB
            // records) gives a read what it has, and each piece costs a
            // hand-off to the engine and a write. Written into a file, the
            // one buffer is used again.
            buf.resize((left.min(PIECE as u64)) as usize, 0);
            let (k, failed) = fill(&mut t, buf);
            if k > 0 {
                buf.truncate(k);
                if len.is_some() {
                    left = left.saturating_sub(k as u64);
                }
                if !out.put(buf).map_err(|e| (e, false))? {
                    taken = false;
                    break;
                }
            }
            if let Some(e) = failed {
                return Err((TransferError::Network(format!("{display}: {e}")), true));
            }
            if k == 0 {
                break;
            }
        }
        let end = if left > 0 && len.is_some() {
            Err(FtpError::Network(format!(
                "{display}: the file ended {left} bytes early"
            )))
        } else if left == 0 && len.is_some() {
            c.close_early(t, &ps)
        } else {
            c.finish(t, &ps)
        };
        match end {
            Ok(()) => {
                // Read from the start: the file must still hold what was
                // read (a range of a split file, less). A file cut short while it was being sent can
                // arrive at its old length with other bytes (vsftpd's
                // sendfile of a page zeroed by the truncation: the fault
                // matrix's truncated source, exit 0 with a file of neither
                // version); only SIZE says it changed.
                if let Some(want) = len.filter(|_| offset == 0 && taken) {
                    if let Some(e) = shrank(&mut c, &ps, &display, want, "read") {
                        pool.give_back(c);
                        return Err((e, false));
                    }
                }
                pool.give_back(c);
                Ok(())
            }
            Err(e) if taken => Err((e.into(), true)),
            Err(_) => Ok(()),
        }
    }
}

/// [`FileBuf`]s between files: as many as transfers between a local file
/// and a data connection ran at once (RETRs into one, uploads of more
/// than [`SENDFILE_MAX`] from one). Kept per
/// blocking thread they were one per thread the pool ever used (15 for
/// `-P 8`), and each new one costs its pages' first touch (2.7 ms of
/// system time per MiB on this VM).
static FILE_BUFS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A buffer between a local file and a data connection, given back to
/// [`FILE_BUFS`] when dropped.
struct FileBuf(Vec<u8>);

impl FileBuf {
    fn take() -> FileBuf {
        FileBuf(lock(&FILE_BUFS).pop().unwrap_or_default())
    }
}

impl Drop for FileBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        let mut kept = lock(&FILE_BUFS);
        // Bounded: a run with --streams 64 does not keep 64 MiB for good.
        if kept.len() < 16 {
            kept.push(buf);
        }
    }
}

/// The error for a file whose `SIZE` is now below `need` (the bytes
/// `what`): it changed during the copy. A server without SIZE goes
/// unchecked.
fn shrank(c: &mut Lease, ps: &str, display: &str, need: u64, what: &str) -> Option<TransferError> {
    let now = c.size(ps).ok()?;
    (now < need).then(|| {
        TransferError::Remote(format!(
            "{display}: the file is now {now} bytes, shorter than the {need} {what} (it changed during the copy); run again"
        ))
    })
}

struct FtpRead {
    retr: Option<Retr>,
    rx: Option<tokio::sync::mpsc::Receiver<Result<Bytes, TransferError>>>,
}

#[async_trait]
impl ByteStream for FtpRead {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if let Some(retr) = self.retr.take() {
            let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
            self.rx = Some(rx);
            tokio::task::spawn_blocking(move || {
                let mut out = Out::Pieces(tx);
                if let Err((e, _)) = retr.run(&mut out) {
                    if let Out::Pieces(tx) = out {
                        let _ = tx.blocking_send(Err(e));
                    }
                }
            });
        }
        let Some(rx) = self.rx.as_mut() else {
            return Ok(None);
        };
        match rx.recv().await {
            Some(r) => r.map(Some),
            None => Ok(None),
        }
    }

    fn write_into(&mut self, to: LocalRange) -> Option<RangeTask> {
        let retr = self.retr.take()?;
        // The RETR reads at most the range's length and fails a file that
        // ends before it, so what it wrote is the range when it succeeds.
        Some(tokio::task::spawn_blocking(move || {
            retr.run(&mut Out::File(to))
        }))
    }
}

enum Piece {
    Data(Bytes),
    /// A local file's range, read and sent by the upload's own thread
    /// ([`Sink::read_from`]); its end is told on the sender.
    File(
        LocalRange,
        tokio::sync::oneshot::Sender<Result<(), (TransferError, bool)>>,
    ),
    End,
}

/// Why an upload stopped, and whether its control connection is still
/// in step.
enum Stop {
    Ftp(FtpError),
    /// A transfer left in the middle: the connection is closed.
    Dropped(TransferError),
    /// Failed, the connection in step.
    Kept(TransferError),
}

impl From<FtpError> for Stop {
    fn from(e: FtpError) -> Self {
        Stop::Ftp(e)
    }
}

/// Where an upload goes: the file written on the server (a part, or the
/// final name), its URL for messages, and the final name where it is a
/// part (shown only in a message that needs it).
struct Upload {
    path: String,
    shown: String,
    fin: Option<Vec<u8>>,
    names: Arc<Names>,
}

/// An upload begun ([`Upload::stor`]): its data connection open.
struct Stor<'a> {
    to: &'a Upload,
    t: Transfer,
    /// Where the file ends: the bytes it held before (`APPE`) and those
    /// sent.
    end: u64,
}

impl Upload {
    /// `STOR` on `c`, or `APPE` to continue after the `from` bytes the
    /// file holds.
    fn stor(&self, c: &mut Conn, from: u64) -> Result<Stor<'_>, FtpError> {
        Ok(Stor {
            to: self,
            t: c.stor(&self.path, from > 0)?,
            end: from,
        })
    }
}

impl Stor<'_> {
    /// The bytes `send` puts on the data connection (adding them to its
    /// `end`), the server's reply, and the file's `SIZE`
    /// ([`check_stored`]). Where the bytes come from is the caller's: a
    /// buffer, a local file by sendfile, the engine's pieces.
    fn send(
        self,
        c: &mut Conn,
        send: impl FnOnce(&mut Transfer, &mut u64) -> Result<(), Sent>,
    ) -> Result<(), Stop> {
        let Stor { to, mut t, mut end } = self;
        match send(&mut t, &mut end) {
            Ok(()) => {}
            Err(Sent::Network(e)) => return Err(stor_failed(c, t, &to.path, &to.shown, e).into()),
            // The data connection left in the middle.
            Err(Sent::Source(e)) => return Err(Stop::Dropped(e)),
            Err(Sent::Stopped) => return Err(Stop::Dropped(TransferError::cancelled())),
        }
        c.finish(t, &to.path)?;
        check_stored(c, to, end)
    }
}

/// A whole file uploaded in one job on this (blocking) thread: [`Stor`]
/// on a connection from `pool` with the bytes `send` puts on the data
/// connection, then `ready` (the source's last word before the rename)
/// and `RNFR`/`RNTO` over `rename`.
fn put_in_one_job(
    pool: &Arc<Pool>,
    to: &Upload,
    rename: Option<&str>,
    send: impl FnOnce(&mut Transfer, &mut u64) -> Result<(), Sent>,
    ready: impl FnOnce(&mut Conn) -> Result<(), Stop>,
) -> Result<(), TransferError> {
    let mut c = pool.take()?;
    let res = (|| {
        to.stor(&mut c, 0)?.send(&mut c, send)?;
        ready(&mut c)?;
        if let Some(r) = rename {
            c.rename(&to.path, r)?;
        }
        Ok(())
    })();
    // The control connection is closed, not given back, after a lost
    // connection or a transfer left in the middle.
    let (lost, res) = match res {
        Ok(()) => (false, Ok(())),
        Err(Stop::Ftp(e)) => (e.is_network(), Err(e.into())),
        Err(Stop::Dropped(e)) => (true, Err(e)),
        Err(Stop::Kept(e)) => (false, Err(e)),
    };
    if !lost {
        pool.give_back(c);
    }
    res
}

/// Why an upload's bytes stopped before their end ([`send_file`], or the
/// sender given to [`Stor::send`]).
enum Sent {
    Source(TransferError),
    Network(std::io::Error),
    Stopped,
}

/// Send `from`'s range on the data connection, 1 MiB at a time: no piece
/// crosses a thread. `end` grows by each piece sent.
fn send_file(t: &mut Transfer, from: &LocalRange, end: &mut u64) -> Result<(), Sent> {
    let mut done = 0u64;
    // A data connection without TLS takes a file of up to 4 MiB by
    // `sendfile`: no read into a buffer (100 x 1 MB to vsftpd spent 9%
    // of the client's CPU zeroing and faulting in a fresh buffer per
    // file, beside 17% in the read's copy). Bigger ones go by reads into
    // a buffer kept between files and writes: 10 x 12 MB by `sendfile`
    // took 0.083 s against 0.081 (vsftpd) and 0.108 against 0.095 (ferry
    // serve), the receiver spending more CPU on loopback (BENCHMARKS.md
    // run ftp-lanes-1b).
    if from.len <= SENDFILE_MAX {
        if let Some(sock) = ferry_ftp::plain_socket(t) {
            match sendfile_range(sock, from, &mut done, end) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let mut kept = FileBuf::take();
    let buf = &mut kept.0;
    while done < from.len {
        if from.progress.stopped() {
            return Err(Sent::Stopped);
        }
        let n = (from.len - done).min(PIECE as u64);
        buf.clear();
        *buf = from
            .file
            .append(from.file.at + done, n, std::mem::take(buf))
            .map_err(Sent::Source)?;
        t.write_all(buf).map_err(Sent::Network)?;
        *end += n;
        done += n;
        from.progress.add(n);
    }
    Ok(())
}

/// The largest upload (a file, or a range) sent by `sendfile(2)`.
const SENDFILE_MAX: u64 = 4 * 1024 * 1024;

/// [`send_file`] by `sendfile(2)` from `done` on: `Ok(false)` where the
/// kernel cannot (the caller goes on with reads and writes from `done`).
fn sendfile_range(
    sock: &std::net::TcpStream,
    from: &LocalRange,
    done: &mut u64,
    end: &mut u64,
) -> Result<bool, Sent> {
    use rustix::io::Errno;
    while *done < from.len {
        if from.progress.stopped() {
            return Err(Sent::Stopped);
        }
        let want = (from.len - *done).min(PIECE as u64) as usize;
        let mut at = from.file.at + *done;
        let n = match rustix::fs::sendfile(sock, &*from.file.file, Some(&mut at), want) {
            Ok(n) => n as u64,
            Err(Errno::INTR) => continue,
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) if *done == 0 => return Ok(false),
            Err(
                e @ (Errno::PIPE
                | Errno::CONNRESET
                | Errno::CONNABORTED
                | Errno::NOTCONN
                | Errno::TIMEDOUT
                | Errno::AGAIN
                | Errno::HOSTUNREACH
                | Errno::NETUNREACH),
            ) => return Err(Sent::Network(e.into())),
            Err(e) => {
                let e = TransferError::local(&from.file.path, "cannot read", e.into());
                return Err(Sent::Source(e));
            }
        };
        if n == 0 {
            return Err(Sent::Source(TransferError::Local(format!(
                "{}: the file shrank while it was being copied",
                from.file.path.display()
            ))));
        }
        *end += n;
        *done += n;
        from.progress.add(n);
    }
    Ok(true)
}

struct FtpWrite {
    tx: tokio::sync::mpsc::Sender<Piece>,
    task: Option<tokio::task::JoinHandle<Result<(), TransferError>>>,
    display: String,
}

impl FtpWrite {
    async fn outcome(&mut self) -> Result<(), TransferError> {
        match self.task.take() {
            Some(t) => t.await.map_err(|e| {
                TransferError::Network(format!("{}: upload task failed: {e}", self.display))
            })?,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Sink for FtpWrite {
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError> {
        if self.tx.send(Piece::Data(data)).await.is_err() {
            self.outcome().await?;
            return Err(TransferError::Network(format!(
                "{}: the upload ended early",
                self.display
            )));
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        let _ = self.tx.send(Piece::End).await;
        self.outcome().await
    }

    fn read_from(&mut self, from: LocalRange) -> Option<RangeTask> {
        // The upload's blocking thread waits for its first piece: the
        // range goes there whole, as the copy loop sent it.
        let (done, ended) = tokio::sync::oneshot::channel();
        let display = self.display.clone();
        self.tx.try_send(Piece::File(from, done)).ok()?;
        Some(tokio::spawn(async move {
            ended.await.unwrap_or_else(|_| {
                let lost = format!("{display}: the upload's thread ended");
                Err((TransferError::Network(lost), false))
            })
        }))
    }
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
    }

    #[test]
    fn final_names_of_parts() {
        assert_eq!(
            final_of(b"/d/.f.bin.ferry-part"),
            Some(b"/d/f.bin".to_vec())
        );
        assert_eq!(final_of(b"/.f.ferry-part"), Some(b"/f".to_vec()));
        assert_eq!(final_of(b"/d/f.bin"), None);
        assert_eq!(final_of(b"/d/.f.bin.ferry-resume"), None);
        assert_eq!(final_of(b"/d/..ferry-part"), None);
    }

    #[test]
    fn hashes_from_feat() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            known_hashes(&names(&["SHA-1", "SHA-256", "BLAKE3", "MD5"])),
            vec![
                (HashAlgo::Blake3, "BLAKE3".to_string()),
                (HashAlgo::Sha256, "SHA-256".to_string())
            ]
        );
        assert_eq!(
            known_hashes(&names(&["sha-256", "SHA-256"])),
            vec![(HashAlgo::Sha256, "sha-256".to_string())]
        );
        assert!(known_hashes(&names(&["MD5", "CRC32"])).is_empty());
    }
}
