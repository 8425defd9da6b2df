//! A userspace link emulator, in two modes:
//!
//! - [`net`]: a packet-level link between two network namespaces (one-way
//!   delay, jitter, random or bursty loss, a bottleneck with a bounded
//!   queue, reordering; the arithmetic in [`netem`]), for end-to-end TCP
//!   whose congestion control sees the link. Needs root.
//! - [`LinkEm`] (below): a TCP proxy that adds a fixed one-way delay (and
//!   optionally a bandwidth cap) to every connection it forwards. Needs
//!   nothing, but TCP ends at the proxy.
//!
//! The kernel on our benchmark machines has no `netem`, so to measure how
//! ferry behaves on a link with real round-trip time we put this proxy between
//! the client and the SSH server. Each accepted connection gets two
//! independent directions; in each one a reader task reads chunks as fast as
//! they arrive, stamps them with `Instant::now() + one_way_delay` and queues
//! them, and a writer task writes every chunk no earlier than its stamp
//! (pacing by `rate_bytes_per_sec` when one is set). The queue is bounded by
//! [`LinkConfig::max_buffer`] bytes per direction, so a fast sender is slowed
//! by ordinary TCP backpressure instead of growing memory without limit.
//!
//! The bandwidth cap belongs to the link, not to a connection: one pacer per
//! direction (client to server, server to client) is shared by every
//! connection the proxy forwards, so a client that opens eight connections
//! gets the same capacity as one that opens one, split between its
//! connections as a real bottleneck would. The arithmetic is in [`pace`]
//! (pure, tested on a virtual clock); without a cap there is no shared state
//! and no lock on the data path.
//!
//! What it emulates is the *application-level* round trip: every request that
//! waits for a reply (SSH key exchange, channel window adjustments, SFTP
//! request/response windows) pays `2 * one_way_delay`. Both TCP legs are
//! loopback connections, so TCP's own congestion and receive windows are not
//! stretched by the delay the way they are on a real long link.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

pub mod gso;
pub mod net;
pub mod netem;
pub mod pace;

use pace::Schedule;

/// Largest chunk a reader hands to its writer in one piece.
pub const MAX_CHUNK: usize = 256 * 1024;

/// Default per-direction queue bound: 64 MiB.
pub const DEFAULT_MAX_BUFFER: usize = 64 * 1024 * 1024;

/// Most bytes an unpaced writer gathers into one vectored write.
const MAX_BATCH: usize = 1024 * 1024;

/// When the read buffer has less spare room than this, a fresh one is
/// allocated (so reads stay large and small reads share one allocation).
const MIN_READ_ROOM: usize = 64 * 1024;

/// Parameters of the emulated link; they apply to both directions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConfig {
    /// Delay added to every byte in each direction (RTT is twice this).
    pub one_way_delay: Duration,
    /// Bandwidth cap per direction in bytes per second; `None` = uncapped.
    /// The cap is shared by every connection forwarded through the emulator
    /// (the sum over connections is capped, like a real link). With a cap, the queue in front of it is `max_buffer` deep, so a bulk
    /// sender fills it before it feels backpressure: lower `max_buffer` to
    /// something near the bandwidth-delay product to avoid a bloated buffer.
    pub rate_bytes_per_sec: Option<u64>,
    /// Most bytes queued (read but not yet written) per direction. When the
    /// queue is full the reader stops reading, which pushes back on the
    /// sender through TCP flow control.
    pub max_buffer: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            one_way_delay: Duration::ZERO,
            rate_bytes_per_sec: None,
            max_buffer: DEFAULT_MAX_BUFFER,
        }
    }
}

impl LinkConfig {
    /// A link with the given one-way delay, no bandwidth cap and the default
    /// buffer.
    pub fn with_delay(one_way_delay: Duration) -> Self {
        LinkConfig {
            one_way_delay,
            ..LinkConfig::default()
        }
    }
}

/// A running link emulator. Dropping it stops accepting and closes every
/// forwarded connection (without waiting); [`LinkEm::shutdown`] does the same
/// and waits until everything is closed.
#[derive(Debug)]
pub struct LinkEm {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    acceptor: Option<JoinHandle<()>>,
}

impl LinkEm {
    /// Bind `listen` (e.g. `127.0.0.1:0`), forward every accepted connection
    /// to `upstream`, delaying each chunk by `one_way_delay` in each direction.
    pub async fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        cfg: LinkConfig,
    ) -> std::io::Result<LinkEm> {
        let listener = TcpListener::bind(listen).await?;
        let local_addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let cfg = Arc::new(cfg);
        let pacers = Pacers::new(&cfg);
        let acceptor = tokio::spawn(accept_loop(listener, upstream, cfg, pacers, stop_rx));
        Ok(LinkEm {
            local_addr,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// The address the emulator listens on (with the real port when bound to
    /// port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop accepting and close all connections, waiting until every
    /// connection task has finished.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.await;
        }
    }
}

impl Drop for LinkEm {
    fn drop(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            // Aborting the acceptor drops its JoinSet, which aborts every
            // connection task and so closes their sockets.
            acceptor.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    cfg: Arc<LinkConfig>,
    pacers: Pacers,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns: JoinSet<()> = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                match accepted {
                    Ok((inbound, _peer)) => {
                        conns.spawn(forward(inbound, upstream, Arc::clone(&cfg), pacers.clone()));
                    }
                    Err(_) => {
                        // Typically EMFILE or a connection reset before
                        // accept; back off briefly instead of spinning.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }
    }
    drop(listener);
    conns.shutdown().await;
}

/// Forward one accepted connection until both directions have finished.
async fn forward(inbound: TcpStream, upstream: SocketAddr, cfg: Arc<LinkConfig>, pacers: Pacers) {
    let Ok(outbound) = TcpStream::connect(upstream).await else {
        // Dropping `inbound` closes the client's connection.
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    tokio::join!(
        direction(in_read, out_write, &cfg, pacers.to_server),
        direction(out_read, in_write, &cfg, pacers.to_client),
    );
}

/// What a reader hands its writer.
enum Item {
    /// Bytes to write no earlier than the stamp.
    Data(Instant, Bytes),
    /// The source sent EOF (or failed): shut down writing at the stamp.
    Eof(Instant),
}

/// One direction of a connection: a reader and a writer joined by a queue
/// bounded to `cfg.max_buffer` bytes.
async fn direction(
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    cfg: &LinkConfig,
    pacer: Option<Arc<Pacer>>,
) {
    let budget = cfg.max_buffer.clamp(1, Semaphore::MAX_PERMITS);
    let credit = Arc::new(Semaphore::new(budget));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::join!(
        read_side(reader, tx, Arc::clone(&credit), cfg.one_way_delay, budget),
        write_side(writer, rx, credit, pacer),
    );
}

async fn read_side(
    mut reader: OwnedReadHalf,
    tx: mpsc::UnboundedSender<Item>,
    credit: Arc<Semaphore>,
    delay: Duration,
    budget: usize,
) {
    let chunk = MAX_CHUNK.min(budget);
    let min_room = MIN_READ_ROOM.min(chunk);
    let mut buf = BytesMut::new();
    loop {
        if buf.capacity() < min_room {
            buf = BytesMut::with_capacity(chunk);
        }
        let room = buf.capacity().min(chunk);
        let mut limited = (&mut reader).take(room as u64);
        let read = tokio::select! {
            r = limited.read_buf(&mut buf) => r,
            // The writer gave up (its peer is gone): stop reading too.
            _ = tx.closed() => return,
        };
        let n = match read {
            Ok(0) | Err(_) => {
                let _ = tx.send(Item::Eof(Instant::now() + delay));
                return;
            }
            Ok(n) => n,
        };
        let stamp = Instant::now() + delay;
        let data = buf.split_to(n).freeze();
        // `n <= MAX_CHUNK`, which fits in u32.
        let permits = u32::try_from(n).unwrap_or(u32::MAX);
        let acquired = tokio::select! {
            p = credit.acquire_many(permits) => p,
            _ = tx.closed() => return,
        };
        match acquired {
            Ok(p) => p.forget(),
            Err(_) => return,
        }
        if tx.send(Item::Data(stamp, data)).is_err() {
            return;
        }
    }
}

async fn write_side(
    mut writer: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Item>,
    credit: Arc<Semaphore>,
    pacer: Option<Arc<Pacer>>,
) {
    let mut pending: Option<Item> = None;
    let mut batch: VecDeque<Bytes> = VecDeque::new();
    loop {
        let item = match pending.take() {
            Some(item) => item,
            None => match rx.recv().await {
                Some(item) => item,
                None => return,
            },
        };
        match item {
            Item::Data(stamp, data) => {
                wait_until(stamp).await;
                let mut total = data.len();
                let ok = match pacer.as_deref() {
                    Some(p) => p.write_paced(&mut writer, data, stamp).await,
                    None => {
                        // Unpaced: also take every queued chunk that is
                        // already due, and write them with one writev.
                        batch.push_back(data);
                        let now = Instant::now();
                        while total < MAX_BATCH {
                            match rx.try_recv() {
                                Ok(Item::Data(s, d)) if s <= now => {
                                    total += d.len();
                                    batch.push_back(d);
                                }
                                Ok(other) => {
                                    pending = Some(other);
                                    break;
                                }
                                Err(_) => break,
                            }
                        }
                        write_batch(&mut writer, &mut batch).await.is_ok()
                    }
                };
                credit.add_permits(total);
                if !ok {
                    // Dropping `rx` tells the reader to stop.
                    return;
                }
            }
            Item::Eof(stamp) => {
                wait_until(stamp).await;
                let _ = writer.shutdown().await;
                return;
            }
        }
    }
}

/// Write every buffer of `batch` (emptying it), using vectored writes.
async fn write_batch(
    writer: &mut OwnedWriteHalf,
    batch: &mut VecDeque<Bytes>,
) -> std::io::Result<()> {
    while !batch.is_empty() {
        let slices: Vec<IoSlice<'_>> = batch.iter().take(64).map(|b| IoSlice::new(b)).collect();
        let mut written = writer.write_vectored(&slices).await?;
        drop(slices);
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let Some(front) = batch.front_mut() else {
                break;
            };
            if written >= front.len() {
                written -= front.len();
                batch.pop_front();
            } else {
                front.advance(written);
                written = 0;
            }
        }
    }
    Ok(())
}

async fn wait_until(stamp: Instant) {
    if stamp > Instant::now() {
        tokio::time::sleep_until(stamp).await;
    }
}

/// The link's two pacers, one per direction, shared by every connection;
/// both `None` when the link is uncapped.
#[derive(Clone, Default)]
struct Pacers {
    to_server: Option<Arc<Pacer>>,
    to_client: Option<Arc<Pacer>>,
}

impl Pacers {
    fn new(cfg: &LinkConfig) -> Self {
        match cfg.rate_bytes_per_sec.filter(|r| *r > 0) {
            Some(rate) => Pacers {
                to_server: Some(Arc::new(Pacer::new(rate))),
                to_client: Some(Arc::new(Pacer::new(rate))),
            },
            None => Pacers::default(),
        }
    }
}

/// Paces writes to a byte rate shared by every connection in one direction:
/// each piece of a chunk is written once the emulated link would have
/// finished serialising it, after the pieces other connections reserved
/// before it.
struct Pacer {
    /// Largest piece reserved and written at once (about 2 ms of link time).
    quantum: usize,
    /// Time zero of the schedule's clock.
    origin: Instant,
    /// Held only for the arithmetic of one reservation, never across an
    /// await.
    schedule: std::sync::Mutex<Schedule>,
}

impl Pacer {
    fn new(rate: u64) -> Self {
        Pacer {
            quantum: pace::quantum(rate, MAX_CHUNK),
            origin: Instant::now(),
            schedule: std::sync::Mutex::new(Schedule::new(rate, pace::DEFAULT_BURST)),
        }
    }

    /// Reserve the link for `bytes` ready at `ready`; when to write them.
    fn reserve(&self, ready: Instant, bytes: usize) -> Instant {
        let since = |t: Instant| t.saturating_duration_since(self.origin);
        let now = since(Instant::now());
        let done = {
            // A poisoned lock only means another writer panicked between
            // two plain assignments; the schedule is still usable.
            let mut schedule = self
                .schedule
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            schedule.reserve(now, since(ready), bytes)
        };
        // A reservation beyond what Instant can hold (absurdly low rates)
        // becomes "in a year": still never.
        self.origin
            .checked_add(done)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 86_400))
    }

    async fn write_paced(&self, writer: &mut OwnedWriteHalf, data: Bytes, stamp: Instant) -> bool {
        let mut offset = 0;
        while offset < data.len() {
            let end = (offset + self.quantum).min(data.len());
            wait_until(self.reserve(stamp, end - offset)).await;
            if writer.write_all(&data[offset..end]).await.is_err() {
                return false;
            }
            offset = end;
        }
        true
    }
}
