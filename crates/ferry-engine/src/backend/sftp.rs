//! SFTP as a backend: a few SSH connections to one server, each on a
//! thread of its own with a current-thread runtime (on two cores that was
//! twice as fast as one shared runtime: docs/internals/sftp.md), reads and
//! writes pipelined many requests deep, `posix-rename@openssh.com` over
//! the final name, `copy-data` when the server copies by itself.
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use ferry_sftp::{FileAttrs, OpenFlags};
use ferry_ssh::{Connector, Handle, SftpClient, SftpError, SshConnection};
use futures_util::stream::{FuturesOrdered, FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::oneshot;

use super::exec_hash;
use super::{
    path, Backend, BackendInfo, ByteStream, Capabilities, Entry, EntryKind, HashAlgo, LocalRange,
    RangeTask, Role, Sink, SmallFile, WriteMode,
};
use crate::error::TransferError;
use crate::location::{RemotePath, RemoteSpec};
use crate::window::{LinkEstimate, Window};
use crate::{CopyOptions, Tuning};

/// At most this much requested and not yet answered per read or write
/// stream (`--inflight`): 100 MB/s at 300 ms, 3 GB/s at 10 ms. Below it
/// each stream keeps about twice the bandwidth-delay product in flight
/// ([`Window`]): more would only queue in the server (sshd spends more CPU
/// per byte with many megabytes of replies queued: docs/internals/sftp.md)
/// and take the requests' buffers out of the cache.
const STREAM_INFLIGHT: u64 = 32 * 1024 * 1024;
/// Work that earns one more connection (docs/internals/sftp.md).
const PER_CONNECTION: u64 = 64 * 1024 * 1024;
/// How often a writer waiting for a connection to join looks again when
/// another writer waits on that connection ([`Sftp::conn_for_write`]).
const JOIN_POLL: std::time::Duration = std::time::Duration::from_millis(5);

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
fn chunk_sizes(info: &ferry_ssh::SftpInfo, opts: &CopyOptions) -> (u32, u32) {
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

/// Most connections a widened file opens to one server: sshd refuses
/// unauthenticated connections beyond `MaxStartups` (10 at once by
/// default), and a doubling opens at most half of these at once.
const MAX_CONNECTIONS: usize = 16;

/// Ranges a widened SFTP file starts on ([`Backend::widen_start`]): at
/// most [`MAX_CONNECTIONS`] / 2, which sshd's `MaxStartups` (10
/// unauthenticated at once) takes.
const SFTP_WIDEN_START: usize = 8;

/// A server window at least this large makes one connection enough.
const ONE_STREAM_WINDOW: u32 = 16 * 1024 * 1024;

/// A path whose SFTP round trip (the session's first request) took less
/// than this is short (loopback, a LAN): half of OpenSSH's window in
/// flight there moves 1 GB/s, more than one connection to sshd carries.
const SHORT_PATH: std::time::Duration = std::time::Duration::from_millis(1);

/// The WRITE data one connection keeps unanswered
/// ([`SftpClient::limit_writes`]): on a short path to a server with a
/// small window (OpenSSH: 2 MiB), half that window, and at least one
/// request's; otherwise no limit but the window. A full window sits
/// queued in sshd, which then spends more CPU on its buffers than on the
/// data: 10 files of 1-4 MB took 0.30 s with it and 0.19 s with half
/// (docs/internals/sftp.md, "Write room").
fn write_room(window_out: u32, rtt: Option<std::time::Duration>) -> Option<u32> {
    let small = window_out > 0 && window_out < ONE_STREAM_WINDOW;
    let short = rtt.is_some_and(|d| d < SHORT_PATH);
    // The window read at VERSION lacks INIT's few bytes: whole KiB.
    (small && short).then_some((window_out / 2).next_multiple_of(1024).max(256 * 1024))
}

type Call<T> = Pin<Box<dyn Future<Output = Result<T, SftpError>> + Send>>;
/// A READ in flight: its offset, the length asked, when it was asked, and
/// the reply.
type ReadCall =
    Pin<Box<dyn Future<Output = (u64, u32, Instant, Result<Option<Bytes>, SftpError>)> + Send>>;

pub struct Sftp {
    host: String,
    /// `sftp://user@host:port`, for messages.
    prefix: String,
    /// The connections, each with its runtime (its thread): `put_whole`
    /// runs a small file's requests there, in one trip. One at first;
    /// `prepare` adds more when the work is worth them.
    conns: RwLock<Vec<Conn>>,
    connector: Arc<Connector>,
    max_in_flight: usize,
    /// `--streams` when given.
    streams: Option<usize>,
    /// Bytes and requests in flight per stream (`--inflight`, `--depth`).
    inflight: u64,
    /// No answer for this long: the connection stalled (`--timeout`).
    stall: std::time::Duration,
    max_depth: usize,
    /// The server's window fills a link with one connection (ferry serve).
    big_window: bool,
    /// What the streams' windows learned of the link (the smallest round
    /// trip, the last depth): every new stream starts from it.
    link: Arc<LinkEstimate>,
    /// The quickest TCP handshake of the connections: the path's round
    /// trip, without the server's time (the engine's widening).
    round_trip: Arc<ferry_tcp::MinRoundTrip>,
    next: AtomicUsize,
    /// Held while a lost connection is replaced: one reconnect at a time.
    reconnecting: tokio::sync::Mutex<()>,
    read_chunk: u32,
    write_chunk: u32,
    cipher: Option<String>,
    copy_data: bool,
    /// Hashes the server computes (`check-file-name`), best first.
    check_file: Vec<HashAlgo>,
    /// Without `check-file-name`: the first connection, whose exec
    /// channels run `b3sum`/`sha256sum` on the server (exec_hash.rs).
    /// Taken out at `close`, before the connection threads end.
    exec: Mutex<Option<Arc<SshConnection>>>,
    /// What `prepare_hashes` found the server can run, best first.
    exec_hashes: std::sync::OnceLock<Vec<HashAlgo>>,
    /// Set when the server refused to run a command: no more tries.
    exec_refused: AtomicBool,
    /// Exec channels open at once: sshd allows 10 sessions per connection
    /// (`MaxSessions`), and the SFTP channel is one.
    exec_slots: tokio::sync::Semaphore,
    /// Dropping these lets the connection threads say goodbye and end.
    holds: Mutex<Vec<oneshot::Sender<()>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Connections `prepare` asked for that are still shaking hands: the
    /// work starts on those that are up, and each joins when it is.
    joining: Mutex<Vec<Joining>>,
    /// How many connections are still shaking hands, those a writer is
    /// waiting for included.
    joining_n: Arc<AtomicUsize>,
    /// Files in flight (`-P`), shared out over the connections an upload
    /// asked for ([`Sftp::conn_for_write`]).
    parallel: usize,
    /// Each connection's share of the writes while others are still
    /// joining; 0: no limit (nothing joining, or a download).
    write_share: AtomicUsize,
    /// The same for reads, set when a download is widened or split by
    /// `--streams` on a long path ([`Sftp::conn_for`]); 0: reads go round
    /// robin.
    read_share: AtomicUsize,
    /// A write ended or a connection joined: a writer waiting for room
    /// looks again.
    room: Arc<tokio::sync::Notify>,
}

/// One connection: its client, the runtime of its thread, and the weight
/// of the writes and ranged reads open on it ([`Slot`]).
#[derive(Clone)]
struct Conn {
    c: SftpClient,
    rt: tokio::runtime::Handle,
    writes: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
}

/// What [`Sftp::conn_for`] weighs a connection by.
#[derive(Clone, Copy)]
enum Load {
    Writes,
    Reads,
}

impl Conn {
    fn new((c, rt): (SftpClient, tokio::runtime::Handle)) -> Conn {
        Conn {
            c,
            rt,
            writes: Arc::default(),
            reads: Arc::default(),
        }
    }

    /// The count [`Sftp::conn_for`] weighs this connection by.
    fn load(&self, load: Load) -> &Arc<AtomicUsize> {
        match load {
            Load::Writes => &self.writes,
            Load::Reads => &self.reads,
        }
    }
}

/// A write's (or a ranged read's) place on its connection, given back
/// when it ends.
struct Slot {
    count: Arc<AtomicUsize>,
    weight: usize,
    room: Arc<tokio::sync::Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.count.fetch_sub(self.weight, Ordering::Relaxed);
        self.room.notify_waiters();
    }
}

/// A connection still shaking hands; counted in `joining_n` until its
/// outcome is taken or it is given up.
struct Joining {
    rx: Ready,
    n: Arc<AtomicUsize>,
}

impl Drop for Joining {
    fn drop(&mut self) {
        self.n.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a connection's goodbye (SSH_MSG_DISCONNECT) may take before
/// the connection is simply dropped.
const GOODBYE: std::time::Duration = std::time::Duration::from_secs(2);

/// A connection thread: the client when it is up, what keeps the thread
/// alive, and the thread.
type Spawned = (Ready, oneshot::Sender<()>, std::thread::JoinHandle<()>);

thread_local! {
    /// On a connection's thread, its client: a small file's read started
    /// there ([`Backend::home`]) goes over it, without crossing threads.
    static HERE: std::cell::RefCell<Option<SftpClient>> = const { std::cell::RefCell::new(None) };
}

/// Where a new connection's client arrives once it is up.
type Ready = oneshot::Receiver<Result<(SftpClient, tokio::runtime::Handle), TransferError>>;

/// One connection on its own thread; the client comes back through the
/// channel, and the thread lives until `hold` is dropped.
fn spawn_connection(
    connector: Arc<Connector>,
    max_in_flight: usize,
    stall: std::time::Duration,
    exec_out: Option<oneshot::Sender<Arc<SshConnection>>>,
    round_trip: Arc<ferry_tcp::MinRoundTrip>,
) -> Result<Spawned, TransferError> {
    let (ready_tx, ready_rx) = oneshot::channel();
    let (hold_tx, hold_rx) = oneshot::channel::<()>();
    let t = std::thread::Builder::new()
        .name("ferry-ssh".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(TransferError::Local(format!(
                        "cannot start a runtime: {e}"
                    ))));
                    return;
                }
            };
            rt.block_on(async move {
                // Given up (the backend closed) before it was up: the
                // handshake is dropped, not waited for.
                let mut hold_rx = hold_rx;
                let up = async {
                    let conn = Arc::new(connector.connect().await?);
                    if let Some(d) = conn.round_trip() {
                        round_trip.note(d);
                    }
                    let sftp = conn.sftp(max_in_flight).await?;
                    let info = sftp.info();
                    if let Some(room) = write_room(info.window_out, info.round_trip) {
                        tracing::debug!(
                            "{}: at most {} KiB of writes unanswered (half the server's window)",
                            connector.label(),
                            room / 1024
                        );
                        sftp.limit_writes(room);
                    }
                    Ok::<_, TransferError>((conn, sftp))
                };
                let (conn, sftp) = tokio::select! {
                    up = up => match up {
                        Ok(up) => up,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    },
                    _ = &mut hold_rx => return,
                };
                sftp.set_stall_timeout(stall);
                if let Some(tx) = exec_out {
                    let _ = tx.send(conn.clone());
                }
                let here = tokio::runtime::Handle::current();
                HERE.with(|h| *h.borrow_mut() = Some(sftp.clone()));
                let _ = ready_tx.send(Ok((sftp.clone(), here)));
                let _ = hold_rx.await;
                HERE.with(|h| h.borrow_mut().take());
                // A goodbye, not a wait: a session given up as stalled
                // takes no more bytes (its goodbye would wait for ever, and
                // the copy's end with it), so it gets none, and any other
                // gets a short while.
                // (An exec channel still running holds the connection:
                // it is then dropped without a goodbye.)
                if !sftp.is_closed() {
                    if let Ok(conn) = Arc::try_unwrap(conn) {
                        let _ = tokio::time::timeout(GOODBYE, conn.close()).await;
                    }
                }
            });
        })
        .map_err(|e| TransferError::Local(format!("cannot start a connection thread: {e}")))?;
    Ok((ready_rx, hold_tx, t))
}

impl Sftp {
    /// Connect to the server of `spec`; returns the backend and the path
    /// resolved (home-relative paths made absolute).
    pub async fn open(
        spec: &RemoteSpec,
        opts: &CopyOptions,
    ) -> Result<(Sftp, Vec<u8>), TransferError> {
        let mut copts = opts.connect.clone();
        if spec.user.is_some() {
            copts.user = spec.user.clone();
        }
        if spec.port.is_some() {
            copts.port = spec.port;
        }
        let connector = Arc::new(Connector::new(&spec.host, copts)?);
        let max_in_flight =
            (opts.files_in_flight().max(1) * opts.max_depth.max(4)).clamp(64, 16384);
        // The first connection alone: a password or host-key question is
        // asked once.
        let (exec_tx, exec_rx) = oneshot::channel();
        let round_trip = Arc::<ferry_tcp::MinRoundTrip>::default();
        let (rx, hold, thread) = spawn_connection(
            connector.clone(),
            max_in_flight,
            opts.timeout,
            Some(exec_tx),
            round_trip.clone(),
        )?;
        let (first, first_rt) = rx.await.map_err(|_| {
            TransferError::Network(format!("{}: the connection thread died", spec.host))
        })??;
        // Sent before the client: here already.
        let exec = exec_rx.await.ok();
        let info = first.info();
        let (read_chunk, write_chunk) = chunk_sizes(&info, opts);
        let resolved = match &spec.path {
            RemotePath::Absolute(a) => a.clone(),
            RemotePath::HomeRelative(rel) => {
                let h = first
                    .realpath(b".")
                    .await
                    .map_err(|e| TransferError::sftp(&spec.host, b"~", e))?
                    .to_vec();
                if rel.is_empty() {
                    h
                } else {
                    path::join(&h, rel)
                }
            }
        };
        let user = spec
            .user
            .as_deref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let port = spec.port.map(|p| format!(":{p}")).unwrap_or_default();
        Ok((
            Sftp {
                host: spec.host.clone(),
                prefix: format!("sftp://{user}{}{port}", spec.host),
                copy_data: info.has(ferry_sftp::consts::EXT_COPY_DATA),
                check_file: check_file_algos(&info),
                exec: Mutex::new(exec),
                exec_hashes: std::sync::OnceLock::new(),
                exec_refused: AtomicBool::new(false),
                exec_slots: tokio::sync::Semaphore::new(EXEC_SLOTS),
                cipher: info.cipher.clone(),
                conns: RwLock::new(vec![Conn::new((first, first_rt))]),
                connector,
                max_in_flight,
                streams: opts.streams,
                inflight: opts.max_inflight.unwrap_or(STREAM_INFLIGHT),
                stall: opts.timeout,
                max_depth: opts.max_depth,
                big_window: info.window_out >= ONE_STREAM_WINDOW,
                link: Arc::default(),
                round_trip,
                next: AtomicUsize::new(0),
                reconnecting: tokio::sync::Mutex::new(()),
                read_chunk,
                write_chunk,
                holds: Mutex::new(vec![hold]),
                threads: Mutex::new(vec![thread]),
                joining: Mutex::new(Vec::new()),
                joining_n: Arc::default(),
                parallel: opts.files_in_flight(),
                write_share: AtomicUsize::new(0),
                read_share: AtomicUsize::new(0),
                room: Arc::default(),
            },
            resolved,
        ))
    }

    /// The next live connection and its runtime, round robin: reads and
    /// single requests spread over all (writes go to the least busy one:
    /// [`Sftp::conn_for_write`]). When every connection was lost (a reset, a
    /// restarted server), one new connection is made, so the engine's
    /// retry of a range or file has somewhere to go.
    async fn conn(&self) -> Result<(SftpClient, tokio::runtime::Handle), TransferError> {
        let k = self.live_conn().await?;
        Ok((k.c, k.rt))
    }

    /// [`Sftp::conn`], as the connection itself.
    async fn live_conn(&self) -> Result<Conn, TransferError> {
        if let Some(k) = self.live() {
            return Ok(k);
        }
        let _one = self.reconnecting.lock().await;
        if let Some(k) = self.live() {
            return Ok(k);
        }
        tracing::info!("{}: every connection was lost; connecting again", self.host);
        let rx = self.spawn_one()?;
        // Bounded by --timeout: a server that takes the connection and
        // never answers (an sshd child left behind as its listener was
        // killed) hung a retried upload until the test harness killed it.
        let c = tokio::time::timeout(self.stall, rx)
            .await
            .map_err(|_| {
                TransferError::Network(format!(
                    "{}: no answer from the server within {} s while connecting again (--timeout)",
                    self.host,
                    self.stall.as_secs_f64()
                ))
            })?
            .map_err(|_| {
                TransferError::Network(format!("{}: the connection thread died", self.host))
            })??;
        let k = Conn::new(c);
        let mut conns = self.conns.write().unwrap_or_else(|p| p.into_inner());
        conns.retain(|k| !k.c.is_closed());
        conns.push(k.clone());
        Ok(k)
    }

    /// A connection for a write of `weight` (a file 1, a range of a split
    /// file a connection's whole share), and its slot there. The least
    /// busy connection takes it; while extra connections are still
    /// shaking hands, each one up takes only its share of `-P` (as the
    /// copy loop's workers did), so the files do not all pile on the
    /// first connection: a file stays on the connection it was opened on,
    /// and sshd's 2 MiB window caps each.
    async fn conn_for_write(&self, weight: usize) -> Result<(Conn, Slot), TransferError> {
        self.conn_for(Load::Writes, weight).await
    }

    /// [`Sftp::conn_for_write`] for writes or for the ranged reads of a
    /// widened download, each weighed and shared out by its own count.
    async fn conn_for(&self, load: Load, weight: usize) -> Result<(Conn, Slot), TransferError> {
        loop {
            // Registered before looking, so a slot freed meanwhile wakes it.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            self.adopt_joined();
            let least = {
                let conns = self.conns.read().unwrap_or_else(|p| p.into_inner());
                conns
                    .iter()
                    .filter(|k| !k.c.is_closed())
                    .min_by_key(|k| k.load(load).load(Ordering::Relaxed))
                    .cloned()
            };
            let k = match least {
                Some(k) => k,
                None => self.live_conn().await?,
            };
            let share = match load {
                Load::Writes => &self.write_share,
                Load::Reads => &self.read_share,
            }
            .load(Ordering::Relaxed);
            let busy = k.load(load).load(Ordering::Relaxed);
            let waiting = self.joining_n.load(Ordering::Relaxed) > 0;
            if !waiting || share == 0 || busy + weight <= share.max(weight) {
                k.load(load).fetch_add(weight, Ordering::Relaxed);
                let slot = Slot {
                    count: k.load(load).clone(),
                    weight,
                    room: self.room.clone(),
                };
                return Ok((k, slot));
            }
            // Every connection up has its share: wait for one still
            // joining (or for a write to end, when another writer is
            // already waiting for the next connection).
            let next = self.joining.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match next {
                Some(mut j) => {
                    // At most --timeout: one that never comes up is
                    // dropped here (fewer connections), not waited for.
                    if let Ok(Ok(up)) = tokio::time::timeout(self.stall, &mut j.rx).await {
                        self.join(up);
                    }
                }
                None => {
                    let _ = tokio::time::timeout(JOIN_POLL, room).await;
                }
            }
        }
    }

    /// For an upload over `connections`: each connection up takes its
    /// share of `-P` while others still join, and a range of a split file
    /// fills a share alone ([`Sftp::conn_for_write`]).
    fn share_writes(&self, role: Role, connections: usize) {
        if role == Role::Destination {
            let share = self.parallel.div_ceil(connections).max(1);
            self.write_share.store(share, Ordering::Relaxed);
        }
    }

    /// The weight of a write on its connection ([`Sftp::conn_for_write`]).
    fn write_weight(&self, mode: WriteMode) -> usize {
        match mode {
            WriteMode::Create { .. } => 1,
            // A range of a split file fills a connection's window alone:
            // a second one there would only share it, while a connection
            // still joining could take it.
            WriteMode::At(_) => self.write_share.load(Ordering::Relaxed).max(1),
        }
    }

    /// One more connection on a thread of its own, kept until `close`;
    /// the client comes through the receiver once it is up.
    fn spawn_one(&self) -> Result<Ready, TransferError> {
        let (rx, hold, thread) = spawn_connection(
            self.connector.clone(),
            self.max_in_flight,
            self.stall,
            None,
            self.round_trip.clone(),
        )?;
        self.holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hold);
        self.threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(thread);
        Ok(rx)
    }

    /// Start connections until `want` are up or joining; each joins the
    /// work when it is up (`live`, `adopt_joined`).
    fn open_more(&self, want: usize) {
        for _ in self.connections() + self.joining_count()..want {
            match self.spawn_one() {
                Ok(rx) => {
                    self.joining_n.fetch_add(1, Ordering::Relaxed);
                    let j = Joining {
                        rx,
                        n: self.joining_n.clone(),
                    };
                    self.joining
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(j);
                }
                Err(e) => tracing::debug!("{}: no extra connection: {e}", self.host),
            }
        }
    }

    /// A connection that is still up, round robin.
    fn live(&self) -> Option<Conn> {
        self.adopt_joined();
        let conns = self.conns.read().unwrap_or_else(|p| p.into_inner());
        let n = conns.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .filter_map(|k| conns.get((start + k) % n.max(1)))
            .find(|k| !k.c.is_closed())
            .cloned()
    }

    fn joining_count(&self) -> usize {
        self.joining_n.load(Ordering::Relaxed)
    }

    /// Move the connections that came up since the last look from
    /// `joining` into `conns`.
    fn adopt_joined(&self) {
        let mut joining = self.joining.lock().unwrap_or_else(|p| p.into_inner());
        if joining.is_empty() {
            return;
        }
        joining.retain_mut(|j| match j.rx.try_recv() {
            Err(oneshot::error::TryRecvError::Empty) => true,
            Ok(up) => {
                self.join(up);
                false
            }
            Err(oneshot::error::TryRecvError::Closed) => false,
        });
    }

    /// An extra connection's outcome: up, it takes work; failed, it is
    /// not fatal (fewer streams).
    fn join(&self, up: Result<(SftpClient, tokio::runtime::Handle), TransferError>) {
        match up {
            Ok(c) => self
                .conns
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .push(Conn::new(c)),
            Err(e) => tracing::debug!("{}: no extra connection: {e}", self.host),
        }
        self.room.notify_waiters();
    }

    async fn client(&self) -> Result<SftpClient, TransferError> {
        Ok(self.conn().await?.0)
    }

    /// Most requests in flight per stream: `--inflight` bytes' worth
    /// (32 MiB by default), at least 4, at most `--depth`.
    fn depth(&self, chunk: u32) -> usize {
        let n = (self.inflight / u64::from(chunk.max(1))) as usize;
        n.clamp(4, self.max_depth.max(4))
    }

    fn connections(&self) -> usize {
        let conns = self.conns.read().unwrap_or_else(|p| p.into_inner());
        conns.iter().filter(|k| !k.c.is_closed()).count().max(1)
    }

    /// A small file's whole write, run on the connection's own thread:
    /// its bytes (read there first, for a local file), then OPEN, WRITEs,
    /// FSETSTAT, CLOSE, RENAME. One hand-off for the file instead of one
    /// per request (or two, the blocking pool's read and this), which was
    /// most of a small-file sync's CPU (perf). The WRITEs, FSETSTAT and
    /// CLOSE go out together (the server answers a handle's requests in
    /// order), so a file costs three round trips, not five; the RENAME
    /// waits for every reply, so a file whose write or close failed never
    /// gets the final name.
    async fn put_small(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        data: SmallFile,
        perm: Option<u32>,
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Result<(), TransferError> {
        let (Conn { c, rt, .. }, slot) = self
            .conn_for_write(self.write_weight(WriteMode::Create { perm }))
            .await?;
        let w = part.unwrap_or(to).to_vec();
        let to_shown = to.to_vec();
        let (part, to) = (part.map(<[u8]>::to_vec), to.to_vec());
        let chunk = self.write_chunk.max(1) as usize;
        let host = self.host.clone();
        let job = rt.spawn(async move {
            let sftp = |p: &[u8], e| TransferError::sftp(&host, p, e);
            // Read before OPEN: a source that cannot be read leaves no
            // part file behind.
            let data = data.into_bytes()?;
            let h = c
                .open(
                    &w,
                    OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE,
                    created_with(perm),
                )
                .await
                .map_err(|e| sftp(&w, e))?;
            let mut at = 0u64;
            let mut sent = Vec::new();
            let mut res = Ok(());
            for piece in data.chunks(chunk) {
                match c.send_write(&h, at, piece).await {
                    Ok(p) => sent.push(p),
                    Err(e) => {
                        res = Err(e);
                        break;
                    }
                }
                at += piece.len() as u64;
            }
            if res.is_ok() && (mtime.is_some() || mode.is_some()) {
                match c.send_fsetstat(&h, attrs_of(mtime, mode)).await {
                    Ok(p) => sent.push(p),
                    Err(e) => res = Err(e),
                }
            }
            let closed = c.send_close(&h).await;
            for p in sent {
                let r = p.status().await;
                res = res.and(r);
            }
            let closed = match closed {
                Ok(p) => p.status().await,
                Err(e) => Err(e),
            };
            res.and(closed).map_err(|e| sftp(&w, e))?;
            if let Some(p) = part {
                c.rename_over(&p, &to).await.map_err(|e| sftp(&to, e))?;
            }
            drop(slot);
            Ok::<(), TransferError>(())
        });
        match job.await {
            Ok(r) => r,
            Err(e) => Err(TransferError::Network(format!(
                "{}: the connection ended: {e}",
                self.display(&to_shown)
            ))),
        }
    }

    fn err(&self, p: &[u8], e: SftpError) -> TransferError {
        TransferError::sftp(&self.host, p, e)
    }

    /// `b3sum`/`sha256sum -- 'PATH'` on an exec channel, its output
    /// checked strictly (exec_hash.rs). Any failure is a reason to read the
    /// file instead, returned as text; so is a command that takes longer
    /// than [`exec_hash::limit`] for the file's size (a stalled disk, a
    /// FIFO), whose channel is then closed.
    async fn exec_hash(&self, p: &[u8], algo: HashAlgo) -> Result<Vec<u8>, String> {
        let tool = exec_hash::tool(algo).unwrap_or("?");
        let cmd = exec_hash::command(algo, p)
            .ok_or("a name with a new line or NUL is not given to a shell")?;
        let conn = self
            .exec
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or("the connection is closed")?;
        // The size sets how long the tool may take; a name that is not
        // there, or not a file, is not hashed by a command.
        let size = match self.stat(p).await {
            Ok(Some(e)) if e.kind == EntryKind::File => e.size,
            Ok(Some(_)) => return Err("not a regular file".into()),
            Ok(None) => return Err("no such file".into()),
            Err(e) => return Err(e.to_string()),
        };
        let limit = exec_hash::limit(size, self.stall);
        let _slot = self.exec_slots.acquire().await.map_err(|e| e.to_string())?;
        let out = conn.exec(&cmd, 4096, limit).await.map_err(|e| {
            if let ferry_ssh::SshError::ExecTimeout { .. } = e {
                return format!(
                    "{tool} did not finish within {} s, --timeout plus its size at {} MB/s; \
                     its channel is closed",
                    limit.as_secs(),
                    exec_hash::SLOW_RATE / 1_000_000
                );
            }
            let e = e.to_string();
            if e.contains("refused to run") {
                self.exec_refused.store(true, Ordering::Relaxed);
            }
            e
        })?;
        if out.status != Some(0) {
            return Err(format!(
                "{tool} exited with {}: {}",
                out.status.map_or("no status".into(), |s| s.to_string()),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        exec_hash::parse(&out.stdout, p).map_err(|e| format!("{tool}: {e}"))
    }
}

/// Exec channels open at once per backend (under sshd's `MaxSessions` 10).
const EXEC_SLOTS: usize = 8;
/// How long the probe (`command -v b3sum sha256sum`) may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The hashes a server offers through `check-file-name`: its extension
/// data lists them (ferry serve: "xxh128,blake3,sha256"); a server that
/// names none is asked for sha256 only. Best first.
fn check_file_algos(info: &ferry_ssh::SftpInfo) -> Vec<HashAlgo> {
    let Some((_, v)) = info
        .extensions
        .iter()
        .find(|(n, _)| n == ferry_sftp::consts::EXT_CHECK_FILE_NAME)
    else {
        return Vec::new();
    };
    let mut out: Vec<HashAlgo> = v.split(',').filter_map(HashAlgo::from_name).collect();
    if out.is_empty() {
        out.push(HashAlgo::Sha256);
    }
    out.sort_by_key(|a| a.preference());
    out
}

/// SETSTAT attributes: permission bits and both times (SFTP v3 times are
/// 32-bit).
/// The attributes an OPEN that creates a file sends: the permission bits
/// it is created with (the server's umask applies), as OpenSSH's `sftp
/// put` sends the local file's.
fn created_with(perm: Option<u32>) -> FileAttrs {
    FileAttrs {
        permissions: perm.map(|p| p & 0o777),
        ..FileAttrs::default()
    }
}

fn attrs_of(mtime: Option<i64>, mode: Option<u32>) -> FileAttrs {
    FileAttrs {
        permissions: mode,
        atime_mtime: mtime.map(|t| {
            let t = t.clamp(0, u32::MAX as i64) as u32;
            (t, t)
        }),
        ..FileAttrs::default()
    }
}

fn entry_of(name: &[u8], a: &FileAttrs) -> Entry {
    let kind = if a.is_dir() {
        EntryKind::Dir
    } else if a.is_regular() || a.permissions.is_none() {
        EntryKind::File
    } else {
        EntryKind::Other
    };
    Entry {
        name: name.to_vec(),
        kind,
        size: a.size,
        mtime: a.mtime().map(i64::from),
        mode: a.permissions.map(|m| m & 0o7777),
    }
}

#[async_trait]
impl Backend for Sftp {
    fn scheme(&self) -> &'static str {
        "sftp"
    }
    fn stat_as_listed(&self) -> bool {
        true
    }
    fn display(&self, p: &[u8]) -> String {
        let mut shown = self.prefix.clone();
        shown.push_str(&super::path::text_ref(p));
        shown
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_read: true,
            offset_write: true,
            append: true,
            rename_over: true,
            atomic_write: false,
            set_times: true,
            set_mode: true,
            list: true,
            server_copy: self.copy_data,
            max_files: 64,
            // Counting those still joining: a range started before its
            // connection is up goes to one that is, and later ones spread.
            max_ranges: (self.connections() + self.joining_count()).max(2),
        }
    }
    fn home(&self, _p: &[u8]) -> Option<tokio::runtime::Handle> {
        self.live().map(|k| k.rt)
    }
    fn homes(&self) -> Vec<tokio::runtime::Handle> {
        self.adopt_joined();
        let conns = self.conns.read().unwrap_or_else(|p| p.into_inner());
        conns
            .iter()
            .filter(|k| !k.c.is_closed())
            .map(|k| k.rt.clone())
            .collect()
    }

    fn endpoint_key(&self) -> String {
        self.prefix.clone()
    }
    fn info(&self) -> BackendInfo {
        BackendInfo {
            // Opened for this copy, those still shaking hands included.
            connections: {
                self.adopt_joined();
                self.connections() + self.joining_count()
            },
            cipher: self.cipher.clone(),
            chunk: self.read_chunk,
            protocol: Some("sftp".into()),
        }
    }

    async fn stat(&self, p: &[u8]) -> Result<Option<Entry>, TransferError> {
        match self.client().await?.stat(p).await {
            Ok(a) => Ok(Some(entry_of(path::basename(p), &a))),
            Err(e) if e.is_no_such_file() => Ok(None),
            Err(e) => Err(self.err(p, e)),
        }
    }

    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        // OPENDIR, READDIRs, CLOSE (and a STAT per link) from the
        // connection's own thread, as `put_whole` does: one hand-off for
        // the directory instead of one per round trip (a sync that finds
        // nothing to do is mostly listings).
        let (c, rt) = self.conn().await?;
        let d = dir.to_vec();
        let job = rt.spawn(async move {
            let names = c.list_dir(&d).await?;
            let mut out = Vec::with_capacity(names.len());
            for n in names {
                if n.filename.as_ref() == b"." || n.filename.as_ref() == b".." {
                    continue;
                }
                let mut e = entry_of(&n.filename, &n.attrs);
                // A link: what it points to decides (as cp -r follows the
                // files it is given).
                if n.attrs.is_symlink() {
                    match c.stat(&path::join(&d, &n.filename)).await {
                        Ok(a) => e = entry_of(&n.filename, &a),
                        Err(_) => e.kind = EntryKind::Other,
                    }
                }
                out.push(e);
            }
            Ok::<_, SftpError>(out)
        });
        match job.await {
            Ok(r) => r.map_err(|e| self.err(dir, e)),
            Err(e) => Err(TransferError::Network(format!(
                "{}: the connection ended: {e}",
                self.display(dir)
            ))),
        }
    }

    async fn read(
        &self,
        p: &[u8],
        offset: u64,
        len: Option<u64>,
    ) -> Result<Box<dyn ByteStream>, TransferError> {
        // A read of a widened download (or of `--streams` on a long path)
        // takes a connection of its own while others still join, as an
        // upload's range does: a read stays on the connection it started
        // on, and round robin put the first ranges all on the one
        // connection up.
        let (Conn { c, rt, .. }, slot) = match len {
            Some(_) if self.read_share.load(Ordering::Relaxed) > 0 => {
                let (k, slot) = self.conn_for(Load::Reads, 1).await?;
                (k, Some(slot))
            }
            _ => (self.live_conn().await?, None),
        };
        let h = c
            .open(p, OpenFlags::READ, FileAttrs::default())
            .await
            .map_err(|e| self.err(p, e))?;
        let end = match len {
            Some(l) => offset + l,
            None => {
                let a = c.fstat(&h).await.map_err(|e| self.err(p, e))?;
                a.size.unwrap_or(0)
            }
        };
        Ok(Box::new(SftpRead {
            c,
            rt,
            h: Some(h),
            host: self.host.clone(),
            path: p.to_vec(),
            next: offset,
            end,
            chunk: self.read_chunk,
            window: Window::sharing(
                self.depth(self.read_chunk),
                self.read_chunk,
                self.link.clone(),
            ),
            queue: FuturesOrdered::new(),
            _slot: slot,
        }))
    }

    async fn write(
        &self,
        p: &[u8],
        mode: WriteMode,
        _size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        let (Conn { c, rt, .. }, slot) = self.conn_for_write(self.write_weight(mode)).await?;
        let (flags, attrs) = match mode {
            WriteMode::Create { perm } => (
                OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE,
                created_with(perm),
            ),
            WriteMode::At(_) => (OpenFlags::WRITE | OpenFlags::CREATE, FileAttrs::default()),
        };
        let h = c.open(p, flags, attrs).await.map_err(|e| self.err(p, e))?;
        let at = match mode {
            WriteMode::Create { .. } => 0,
            WriteMode::At(a) => a,
        };
        Ok(Box::new(SftpWrite {
            c,
            rt,
            h: Some(h),
            host: self.host.clone(),
            path: p.to_vec(),
            at,
            chunk: self.write_chunk as usize,
            depth: self.depth(self.write_chunk),
            link: self.link.clone(),
            pending: BytesMut::new(),
            held: None,
            running: FuturesUnordered::new(),
            _slot: slot,
        }))
    }

    async fn mkdir_all(&self, dir: &[u8]) -> Result<(), TransferError> {
        let c = self.client().await?;
        let mut missing = Vec::new();
        let mut d = dir.to_vec();
        while !d.is_empty() && d != b"/" {
            match c.stat(&d).await {
                Ok(a) if a.is_dir() => break,
                Ok(_) => {
                    return Err(TransferError::Remote(format!(
                        "{}: not a directory",
                        self.display(&d)
                    )))
                }
                Err(_) => {
                    missing.push(d.clone());
                    d = path::parent(&d).to_vec();
                }
            }
        }
        for d in missing.iter().rev() {
            if let Err(e) = c.mkdir(d, FileAttrs::default()).await {
                // Made meanwhile by another listing of ours: fine.
                if !c.stat(d).await.is_ok_and(|a| a.is_dir()) {
                    return Err(self.err(d, e));
                }
            }
        }
        Ok(())
    }

    async fn rename_over(&self, from: &[u8], to: &[u8]) -> Result<(), TransferError> {
        self.client()
            .await?
            .rename_over(from, to)
            .await
            .map_err(|e| self.err(to, e))
    }

    async fn remove(&self, p: &[u8]) -> Result<(), TransferError> {
        self.client()
            .await?
            .remove(p)
            .await
            .map_err(|e| self.err(p, e))
    }

    async fn remove_dir(&self, p: &[u8]) -> Result<(), TransferError> {
        self.client()
            .await?
            .rmdir(p)
            .await
            .map_err(|e| self.err(p, e))
    }

    async fn put_whole(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        data: Bytes,
        perm: Option<u32>,
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Result<(), TransferError> {
        self.put_small(part, to, SmallFile::Bytes(data), perm, mtime, mode)
            .await
    }

    async fn put_local(
        &self,
        part: Option<&[u8]>,
        to: &[u8],
        from: &std::path::Path,
        len: u64,
        perm: Option<u32>,
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Option<Result<(), TransferError>> {
        let from = SmallFile::Local(from.to_path_buf(), len);
        Some(self.put_small(part, to, from, perm, mtime, mode).await)
    }

    async fn get_whole(&self, p: &[u8], len: u64) -> Result<Bytes, TransferError> {
        // OPEN, READs, CLOSE from the connection's own thread, as
        // `put_whole` does: one hand-off for a small file, none when
        // called there ([`Backend::home`]).
        let here = HERE.with(|h| h.borrow().clone()).filter(|c| !c.is_closed());
        let (c, rt) = match here {
            Some(c) => (c, tokio::runtime::Handle::current()),
            None => self.conn().await?,
        };
        let path = p.to_vec();
        let chunk = self.read_chunk.max(1);
        let job = rt.spawn(async move {
            let h = c.open(&path, OpenFlags::READ, FileAttrs::default()).await?;
            let mut out = BytesMut::with_capacity(len as usize);
            let mut reads = FuturesOrdered::new();
            let mut at = 0u64;
            while at < len {
                let n = (len - at).min(u64::from(chunk)) as u32;
                let c = c.clone();
                let h = h.clone();
                reads.push_back(async move { (n, c.read(&h, at, n).await) });
                at += u64::from(n);
            }
            let mut res = Ok(());
            while let Some((asked, r)) = reads.next().await {
                match r {
                    Ok(Some(d)) => {
                        let short = d.len() < asked as usize;
                        out.extend_from_slice(&d);
                        // A short read: later replies would not follow on;
                        // the rest is read below, in order.
                        if short {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        res = Err(e);
                        break;
                    }
                }
            }
            drop(reads);
            // Short reads (servers may answer less than asked) and a file
            // that grew: read on from where the bytes stop.
            while res.is_ok() && (out.len() as u64) < len {
                let at = out.len() as u64;
                let n = (len - at).min(u64::from(chunk)) as u32;
                match c.read(&h, at, n).await {
                    Ok(Some(d)) if !d.is_empty() => out.extend_from_slice(&d),
                    Ok(_) => break,
                    Err(e) => res = Err(e),
                }
            }
            close_unanswered(&tokio::runtime::Handle::current(), &c, &h);
            res.map(|()| out.freeze())
        });
        match job.await {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(e)) => Err(self.err(p, e)),
            Err(e) => Err(TransferError::Network(format!(
                "{}: the connection ended: {e}",
                self.display(p)
            ))),
        }
    }

    fn hashes(&self) -> Vec<HashAlgo> {
        if !self.check_file.is_empty() {
            return self.check_file.clone();
        }
        self.exec_hashes.get().cloned().unwrap_or_default()
    }

    /// Without `check-file-name` (OpenSSH), ask once whether an exec
    /// channel can run `b3sum` or `sha256sum`; `-v` says what was found.
    async fn prepare_hashes(&self) {
        if !self.check_file.is_empty() || self.exec_hashes.get().is_some() {
            return;
        }
        let conn = self.exec.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let found = match conn {
            None => Vec::new(),
            Some(c) => match c.exec(exec_hash::PROBE, 4096, PROBE_TIMEOUT).await {
                Ok(out) => exec_hash::found(&out.stdout),
                Err(ferry_ssh::SshError::ExecTimeout { .. }) => {
                    tracing::info!(
                        "{}: no answer to `command -v b3sum sha256sum` over SSH",
                        self.host
                    );
                    Vec::new()
                }
                Err(e) => {
                    tracing::info!("{}: cannot run commands over SSH: {e}", self.host);
                    Vec::new()
                }
            },
        };
        if found.is_empty() {
            tracing::info!(
                "{}: no b3sum or sha256sum to run over SSH: files are read through the \
                 connection to hash them",
                self.host
            );
        } else {
            let tools: Vec<&str> = found.iter().filter_map(|a| exec_hash::tool(*a)).collect();
            tracing::info!(
                "{}: files are hashed on the server by {} over SSH exec channels",
                self.host,
                tools.join(" or ")
            );
        }
        let _ = self.exec_hashes.set(found);
    }

    async fn hash(&self, p: &[u8], algo: HashAlgo) -> Result<Option<Vec<u8>>, TransferError> {
        if !self.check_file.contains(&algo) {
            let by_exec = self.exec_hashes.get().is_some_and(|v| v.contains(&algo))
                && !self.exec_refused.load(Ordering::Relaxed);
            if !by_exec {
                return Ok(None);
            }
            return match self.exec_hash(p, algo).await {
                Ok(h) => Ok(Some(h)),
                Err(why) => {
                    tracing::info!(
                        "{}: not hashed on the server ({why}); reading it to hash it",
                        self.display(p)
                    );
                    Ok(None)
                }
            };
        }
        let r = self
            .client()
            .await?
            .check_file_name(p, algo.name())
            .await
            .map_err(|e| self.err(p, e))?;
        if r.algorithm.as_ref() != algo.name().as_bytes() {
            return Err(TransferError::Remote(format!(
                "{}: asked the server for a {} hash, it answered {}",
                self.display(p),
                algo.name(),
                String::from_utf8_lossy(&r.algorithm)
            )));
        }
        Ok(Some(r.hash.to_vec()))
    }

    async fn set_attrs(
        &self,
        p: &[u8],
        mtime: Option<i64>,
        mode: Option<u32>,
    ) -> Result<(), TransferError> {
        self.client()
            .await?
            .setstat(p, attrs_of(mtime, mode))
            .await
            .map_err(|e| self.err(p, e))
    }

    async fn copy_within(&self, from: &[u8], to: &[u8], len: u64) -> Result<bool, TransferError> {
        if !self.copy_data {
            return Ok(false);
        }
        let c = self.client().await?;
        let r = c
            .open(from, OpenFlags::READ, FileAttrs::default())
            .await
            .map_err(|e| self.err(from, e))?;
        let w = c
            .open(
                to,
                OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE,
                FileAttrs::default(),
            )
            .await
            .map_err(|e| self.err(to, e))?;
        let res = c.copy_data(&r, 0, len, &w, 0).await;
        let _ = c.close(&r).await;
        let closed = c.close(&w).await;
        res.map_err(|e| self.err(to, e))?;
        closed.map_err(|e| self.err(to, e))?;
        Ok(true)
    }

    /// More connections when the work is worth them, as measured: a
    /// download spreads over two sshd processes (two cores), an upload
    /// over four (sshd's 2 MiB window caps each), one per 64 MiB of work;
    /// a server whose window fills the link alone (ferry serve) gets one;
    /// `--streams N` asks for N.
    async fn prepare(&self, role: Role, bytes: Option<u64>) {
        let want = match (self.streams, role) {
            (Some(n), _) => n.max(1),
            (None, _) if self.big_window => 1,
            (None, Role::Source) => Tuning::DOWNLOAD_STREAMS,
            (None, Role::Destination) => Tuning::UPLOAD_STREAMS,
        };
        let want = match (self.streams, bytes) {
            (None, Some(b)) => want.min(1 + (b / PER_CONNECTION) as usize),
            _ => want,
        };
        if want <= self.connections() {
            return;
        }
        self.open_more(want);
        // The work starts on the first connection and each other one
        // joins as it comes up: a second sshd session took ~190 ms to
        // reach SFTP on the measuring host, longer than 100 x 1 MB then
        // took to move. An upload's file stays on the connection it was
        // opened on and sshd's 2 MiB window caps each, so while others
        // join, each connection up takes only its share of the files
        // (`conn_for_write`): files all piled on the first one made
        // 100 x 1 MB 1.2x slower than waiting for every connection, and
        // waiting 0.88x the copy loop, which shared them out this way
        // (2026-11-27/28).
        self.share_writes(role, want);
        // `--streams N` read from a server on a long path: its ranges
        // share the connections out as a widened file's do (`widen`).
        let long = self.round_trip().is_some_and(ferry_tcp::is_long);
        if role == Role::Source && self.streams.is_some() && long {
            self.read_share.store(1, Ordering::Relaxed);
        }
    }

    fn round_trip(&self) -> Option<std::time::Duration> {
        self.round_trip.get()
    }

    /// A widened file starts on eight connections, as HTTP(S) does. The
    /// start on four was kept while eight sshd sessions cost more CPU than
    /// they gave (run wan-start-1: 0.84x); with OpenSSH's smaller window
    /// (ferry_ssh::connect::OPENSSH_WINDOW) eight moved 512 MiB at loss100
    /// 1.09x faster from sshd, 1.11x from ferry serve and 1.15x to sshd
    /// (BENCHMARKS.md, run sftp-start-1).
    fn widen_start(&self) -> usize {
        SFTP_WIDEN_START
    }

    /// More connections for a widened file: each joins as it comes up,
    /// as `prepare`'s do, and the file's ranges share them out (an
    /// upload's writes and a download's reads alike).
    async fn widen(&self, role: Role, ranges: usize) -> usize {
        let want = ranges.min(MAX_CONNECTIONS);
        self.open_more(want);
        // An upload's range fills a connection alone, as after `prepare`:
        // without a share (ferry serve's one connection needs no
        // `prepare`), each range went to a connection already up and
        // stayed there, so the first ranges of a widened upload all ran
        // on the first connection (loss100, 512 MiB: 14.1 s against 9.7 s
        // with --streams 4, run streams-long-1).
        self.share_writes(role, want);
        if role == Role::Source {
            self.read_share
                .store(ranges.div_ceil(want.max(1)).max(1), Ordering::Relaxed);
        }
        (self.connections() + self.joining_count()).max(1)
    }

    async fn close(&self) {
        self.exec.lock().unwrap_or_else(|p| p.into_inner()).take();
        let holds = std::mem::take(&mut *self.holds.lock().unwrap_or_else(|p| p.into_inner()));
        drop(holds);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

/// Close a read handle without waiting for the answer, as the copy loop
/// did: closing it cannot lose data, and a round trip per file is a
/// large share of a 1 MB file's time on loopback. `rt` is the
/// connection's runtime, where the answer arrives.
fn close_unanswered(rt: &tokio::runtime::Handle, c: &SftpClient, h: &Handle) {
    let (c, h) = (c.clone(), h.clone());
    rt.spawn(async move {
        let _ = c.close(&h).await;
    });
}

/// A pipelined read: up to `depth` READs in flight, handed on in order.
/// A request is sent when its future is first polled: `FuturesOrdered`
/// polls every one of them whenever the oldest is awaited, so all of
/// them are on the wire at once.
struct SftpRead {
    c: SftpClient,
    /// The connection's runtime: its replies arrive on that thread.
    rt: tokio::runtime::Handle,
    h: Option<Handle>,
    host: String,
    path: Vec<u8>,
    /// Next offset to ask for, and where to stop.
    next: u64,
    end: u64,
    chunk: u32,
    /// How many READs to keep in flight.
    window: Window,
    /// Replies, oldest first.
    queue: FuturesOrdered<ReadCall>,
    /// A widened download's range: its place on the connection.
    _slot: Option<Slot>,
}

impl SftpRead {
    fn request(&self, at: u64, len: u32) -> ReadCall {
        let (c, h) = (
            self.c.clone(),
            self.h.clone().unwrap_or(Handle(Bytes::new())),
        );
        let asked = Instant::now();
        Box::pin(async move { (at, len, asked, c.read(&h, at, len).await) })
    }
    fn fill(&mut self) {
        while self.queue.len() < self.window.depth() && self.next < self.end {
            let len = (self.end - self.next).min(u64::from(self.chunk)) as u32;
            let call = self.request(self.next, len);
            self.queue.push_back(call);
            self.next += u64::from(len);
        }
    }
}

#[async_trait]
impl ByteStream for SftpRead {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        self.fill();
        let Some((at, len, asked, reply)) = self.queue.next().await else {
            if let Some(h) = self.h.take() {
                close_unanswered(&self.rt, &self.c, &h);
            }
            return Ok(None);
        };
        match reply {
            Ok(Some(data)) if !data.is_empty() => {
                let got = data.len() as u32;
                let now = Instant::now();
                self.window.on_reply(u64::from(got), now - asked, now);
                if got < len {
                    // The server answered short (its read limit): ask for
                    // the rest before anything after it.
                    let rest = self.request(at + u64::from(got), len - got);
                    self.queue.push_front(rest);
                }
                Ok(Some(data))
            }
            Ok(_) => Err(TransferError::Remote(format!(
                "{}:{}: the file ended at byte {at}, before the {} bytes its size promised (it changed during the copy?)",
                self.host,
                String::from_utf8_lossy(&self.path),
                self.end
            ))),
            Err(e) => Err(TransferError::sftp(&self.host, &self.path, e)),
        }
    }

    fn write_into(&mut self, to: LocalRange) -> Option<RangeTask> {
        // The replies arrive on the connection's thread: the whole range
        // runs there (the reads are sent when first polled, so nothing is
        // on the wire yet to move).
        let spent = SftpRead {
            c: self.c.clone(),
            rt: self.rt.clone(),
            h: None,
            host: self.host.clone(),
            path: self.path.clone(),
            next: self.end,
            end: self.end,
            chunk: self.chunk,
            window: Window::new(0, self.chunk),
            queue: FuturesOrdered::new(),
            _slot: None,
        };
        let me = std::mem::replace(self, spent);
        Some(
            self.rt
                .spawn(crate::engine::drain_into(Box::new(me), to, 0)),
        )
    }
}

/// A pipelined write: full-size WRITEs, up to `depth` unanswered.
struct SftpWrite {
    c: SftpClient,
    /// The connection's runtime: a local file's range is sent from there.
    rt: tokio::runtime::Handle,
    h: Option<Handle>,
    host: String,
    path: Vec<u8>,
    at: u64,
    chunk: usize,
    depth: usize,
    /// The backend's link estimate, for `read_from`'s window.
    link: Arc<LinkEstimate>,
    pending: BytesMut,
    /// A first small piece, kept as it came: a small file is one piece,
    /// and goes out as one WRITE without a copy.
    held: Option<Bytes>,
    running: FuturesUnordered<Call<()>>,
    /// Its place on the connection, until the write ends.
    _slot: Slot,
}

impl SftpWrite {
    async fn send(&mut self, data: Bytes) -> Result<(), TransferError> {
        let n = data.len() as u64;
        self.enqueue(n, move |c, h, at| {
            Box::pin(async move { c.write(&h, at, &data).await })
        })
        .await
    }

    /// Queue one WRITE of `n` bytes at the current offset, once there is
    /// room for it (`make` builds the request from the client, the handle
    /// and the offset).
    async fn enqueue(
        &mut self,
        n: u64,
        make: impl FnOnce(SftpClient, Handle, u64) -> Call<()>,
    ) -> Result<(), TransferError> {
        while self.running.len() >= self.depth {
            if let Some(r) = self.running.next().await {
                r.map_err(|e| TransferError::sftp(&self.host, &self.path, e))?;
            }
        }
        let h = self.h.clone().unwrap_or(Handle(Bytes::new()));
        self.running.push(make(self.c.clone(), h, self.at));
        self.at += n;
        // A request goes out when first polled: poll now, without
        // waiting, and take whatever replies are already in.
        while let Some(Some(r)) = self.running.next().now_or_never() {
            r.map_err(|e| TransferError::sftp(&self.host, &self.path, e))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Sink for SftpWrite {
    async fn write(&mut self, mut data: Bytes) -> Result<(), TransferError> {
        // Pieces of at least half a request go out as they are, cut into
        // requests without a copy (an SFTP source's pieces are its request
        // size, a local file's 1 MiB: copying those together first was a
        // third of an upload's memmove). Small pieces (HTTP/2 frames of
        // 8-16 KiB) are gathered into full requests, or a 1 MB file would
        // take a hundred WRITEs.
        if self.pending.is_empty() && self.held.is_none() {
            if data.len() >= self.chunk / 2 {
                while data.len() > self.chunk {
                    let piece = data.split_to(self.chunk);
                    self.send(piece).await?;
                }
                return self.send(data).await;
            }
            self.held = Some(data);
            return Ok(());
        }
        if let Some(h) = self.held.take() {
            self.pending.extend_from_slice(&h);
        }
        self.pending.extend_from_slice(&data);
        while self.pending.len() >= self.chunk {
            let piece = self.pending.split_to(self.chunk).freeze();
            self.send(piece).await?;
        }
        Ok(())
    }

    fn read_from(&mut self, from: LocalRange) -> Option<RangeTask> {
        // Only between whole requests, with none unanswered.
        if !self.pending.is_empty() || self.held.is_some() || !self.running.is_empty() {
            return None;
        }
        let send = SendFile {
            c: self.c.clone(),
            h: self.h.clone()?,
            host: self.host.clone(),
            path: self.path.clone(),
            at: self.at,
            chunk: self.chunk,
            window: Window::sharing(self.depth, self.chunk as u32, self.link.clone()),
        };
        Some(self.rt.spawn(send.run(from)))
    }

    fn wrote(&mut self, n: u64) {
        self.at += n;
    }

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        if let Some(h) = self.held.take() {
            self.send(h).await?;
        }
        if !self.pending.is_empty() {
            let piece = self.pending.split().freeze();
            self.send(piece).await?;
        }
        while let Some(r) = self.running.next().await {
            r.map_err(|e| TransferError::sftp(&self.host, &self.path, e))?;
        }
        if let Some(h) = self.h.take() {
            self.c
                .close(&h)
                .await
                .map_err(|e| TransferError::sftp(&self.host, &self.path, e))?;
        }
        Ok(())
    }
}

/// A local file's range sent as pipelined WRITEs from the connection's
/// thread: each piece is read into its WRITE's buffer after the header's
/// room, sealed and sent while it is still in this core's cache (the copy
/// loops' way; [`Sink::read_from`]).
struct SendFile {
    c: SftpClient,
    h: Handle,
    host: String,
    path: Vec<u8>,
    at: u64,
    chunk: usize,
    /// How many WRITEs to keep in flight.
    window: Window,
}

impl SendFile {
    async fn run(mut self, from: LocalRange) -> Result<(), (TransferError, bool)> {
        let LocalRange {
            file,
            len,
            progress,
            ..
        } = from;
        let prefix = ferry_sftp::packet_ext::write_prefix_len(self.h.0.len());
        let file = Arc::new(file);
        let mut running = FuturesUnordered::new();
        let (mut next, mut failed) = (0u64, None);
        loop {
            while running.len() < self.window.depth() && next < len && failed.is_none() {
                if progress.stopped() {
                    return Err((TransferError::cancelled(), false));
                }
                let n = (len - next).min(self.chunk as u64);
                let (c, h, at, from) = (
                    self.c.clone(),
                    self.h.clone(),
                    self.at + next,
                    file.at + next,
                );
                // Each piece is read once the session has room to send it
                // (`SftpClient::room_for_write`), not before, and then
                // straight into the SSH packets that carry it, as they
                // are built (`SftpClient::write_from`): no buffer of its
                // own, and no copy from one into the packet.
                let unread = Arc::new(Mutex::new(None));
                let read: ferry_ssh::ReadFn = {
                    let (file, unread) = (file.clone(), unread.clone());
                    Arc::new(move |out: &mut Vec<u8>, at: u64, n: usize| {
                        let start = out.len();
                        if let Err(e) = file.append_into(from + at, n as u64, out) {
                            // The request's length is sent: zeros stand in,
                            // and the error fails the file before its
                            // rename.
                            out.resize(start + n, 0);
                            unread
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(e);
                        }
                    })
                };
                running.push(async move {
                    let asked = Instant::now();
                    let room = match c.room_for_write(prefix + n as usize).await {
                        Ok(room) => room,
                        Err(e) => return (n, asked, Piece::Sent(Err(e))),
                    };
                    let sent = c.write_from(room, &h, at, n as usize, read).await;
                    let failed = unread.lock().unwrap_or_else(|e| e.into_inner()).take();
                    match failed {
                        Some(e) => (n, asked, Piece::Unread(e)),
                        None => (n, asked, Piece::Sent(sent)),
                    }
                });
                next += n;
            }
            let Some((n, asked, piece)) = running.next().await else {
                break;
            };
            match piece {
                Piece::Sent(res) => {
                    res.map_err(|e| (TransferError::sftp(&self.host, &self.path, e), false))?
                }
                // What is in flight still lands: then it is good.
                Piece::Unread(e) => {
                    failed.get_or_insert(e);
                    continue;
                }
            }
            progress.add(n);
            let now = Instant::now();
            self.window.on_reply(n, now - asked, now);
        }
        match failed {
            Some(e) => Err((e, true)),
            None => Ok(()),
        }
    }
}

/// What became of one WRITE's piece of the file.
enum Piece {
    Sent(Result<(), ferry_ssh::SftpError>),
    /// The local file could not be read.
    Unread(TransferError),
}

#[cfg(test)]
mod fit_tests {
    use super::*;

    #[test]
    fn write_room_is_half_a_small_window_on_a_short_path() {
        let us = std::time::Duration::from_micros;
        assert_eq!(write_room(2 << 20, Some(us(150))), Some(1 << 20));
        assert_eq!(write_room((2 << 20) - 9, Some(us(150))), Some(1 << 20));
        // A long path: data in flight is on the wire, not queued in sshd.
        assert_eq!(write_room(2 << 20, Some(us(5_000))), None);
        // ferry serve's window carries a link on one connection.
        assert_eq!(write_room(64 << 20, Some(us(150))), None);
        // Nothing known: no limit.
        assert_eq!(write_room(2 << 20, None), None);
        assert_eq!(write_room(0, Some(us(150))), None);
        // At least one 255 KiB request, however small the window.
        assert_eq!(write_room(64 << 10, Some(us(150))), Some(256 << 10));
    }

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

    /// The hashes a server lists are taken best first whatever its order
    /// (XXH3-128, BLAKE3, SHA-256); an older ferry serve without xxh128
    /// is asked for BLAKE3; a server that names none, for SHA-256.
    #[test]
    fn check_file_hashes_best_first() {
        let info = |v: Option<&str>| ferry_ssh::SftpInfo {
            version: 3,
            extensions: v
                .map(|v| {
                    (
                        ferry_sftp::consts::EXT_CHECK_FILE_NAME.to_string(),
                        v.into(),
                    )
                })
                .into_iter()
                .collect(),
            limits: None,
            packet_in: 0,
            packet_out: 0,
            window_out: 0,
            cipher: None,
            round_trip: None,
        };
        use HashAlgo::*;
        let algos = |v| check_file_algos(&info(v));
        assert_eq!(
            algos(Some("sha256,blake3,xxh128")),
            [Xxh128, Blake3, Sha256]
        );
        assert_eq!(algos(Some("blake3,sha256")), [Blake3, Sha256]);
        assert_eq!(algos(Some("md5,sha1")), [Sha256]);
        assert_eq!(algos(None), []);
    }
}
