//! One SFTP session over one SSH channel: the async glue around the
//! `ferry-sftp` codec and request table.
//!
//! Three pieces, so that many requests can be in flight from many tasks:
//! - callers encode a request, record it in the table and await a oneshot;
//! - one writer task owns the channel's write half. russh splits a large
//!   write into several channel messages with awaits in between, so two
//!   tasks writing directly could interleave halves of two SFTP packets; the
//!   writer also coalesces small requests (READs are 29 bytes) into one
//!   SSH packet;
//! - one reader task owns the read half, reassembles packets and completes
//!   the oneshot of the request each reply answers, in O(1).
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ferry_sftp::consts::{EXT_FSYNC, EXT_LIMITS, EXT_POSIX_RENAME, EXT_STATVFS, SFTP_VERSION};
use ferry_sftp::packet_ext::Extended;
use ferry_sftp::{
    FileAttrs, Framer, Limits, NameEntry, OpenFlags, Request, RequestTable, Response, StatusCode,
    Statvfs,
};
use russh::ChannelMsg;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::error::SftpError;
use crate::zlib_switch::LinkProbe;

type Reply = Result<Response, SftpError>;

/// An open file or directory on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle(pub Bytes);

/// What the server told us about itself in VERSION and limits@openssh.com.
#[derive(Debug, Clone)]
pub struct SftpInfo {
    pub version: u32,
    pub extensions: Vec<(String, String)>,
    pub limits: Option<Limits>,
    /// The largest channel packet we accept from the server (0: unknown).
    pub packet_in: u32,
    /// The largest channel packet the server accepts from us (0: unknown).
    pub packet_out: u32,
    /// The server's initial window for our data on this channel: what an
    /// upload over one connection may have in flight (OpenSSH: 2 MiB).
    pub window_out: u32,
    /// The SSH cipher of the connection, when known.
    pub cipher: Option<String>,
    /// The round trip of the session's first request (limits@openssh.com,
    /// else INIT): the whole path's, through jump hosts too, and the
    /// server's time besides.
    pub round_trip: Option<Duration>,
}

impl SftpInfo {
    pub fn has(&self, name: &str) -> bool {
        self.extensions.iter().any(|(n, _)| n == name)
    }
    /// Largest READ the server will answer in full.
    pub fn max_read(&self) -> Option<u32> {
        self.limits.and_then(|l| {
            (l.max_read_len > 0).then_some(l.max_read_len.min(u32::MAX as u64) as u32)
        })
    }
    pub fn max_write(&self) -> Option<u32> {
        self.limits.and_then(|l| {
            (l.max_write_len > 0).then_some(l.max_write_len.min(u32::MAX as u64) as u32)
        })
    }
}

/// Room taken on a session for one WRITE ([`SftpClient::room_for_write`]);
/// given back when the WRITE's reply comes in, or when dropped unused.
#[derive(Debug)]
pub struct WriteRoom(Option<OwnedSemaphorePermit>);

/// A request waiting for its reply: where the reply goes, and the room a
/// WRITE took of [`Inner::write_room`], given back as its reply comes in
/// (by the reader, whether or not the writer is polled then).
struct Waiting {
    tx: oneshot::Sender<Reply>,
    room: Option<OwnedSemaphorePermit>,
}

struct State {
    table: RequestTable<Waiting>,
    /// Why the session ended, once it has: no request may wait after that.
    closed: Option<String>,
}

struct Inner {
    state: Mutex<State>,
    permits: Semaphore,
    tx: mpsc::Sender<Outgoing>,
    info: SftpInfo,
    limits: std::sync::OnceLock<Limits>,
    /// The first request's round trip ([`SftpInfo::round_trip`]).
    round_trip: std::sync::OnceLock<Duration>,
    /// A session whose server sends no reply for this long while requests
    /// wait has stalled (milliseconds; 0: never).
    stall_ms: std::sync::atomic::AtomicU64,
    /// When the last reply came, in milliseconds since `epoch`.
    last_reply_ms: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
    /// Counts and samples for `auto`'s zlib switch (crate::zlib_switch),
    /// where the connection has one.
    probe: Option<Arc<LinkProbe>>,
    /// WRITE data allowed unanswered, in KiB, and its most
    /// ([`SftpClient::limit_writes`]); unset: only the server's window.
    write_room: std::sync::OnceLock<(Arc<Semaphore>, u32)>,
}

impl Inner {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// A cheap-to-clone handle on one SFTP session.
#[derive(Clone)]
pub struct SftpClient {
    inner: Arc<Inner>,
}

/// Largest reply packet we accept: a 1 MiB READ plus headers, or a large
/// directory listing. Anything bigger is a protocol error, found before
/// buffering it.
const MAX_REPLY: u32 = 4 * 1024 * 1024;
/// Coalesce queued small packets up to this size into one channel write.
const COALESCE: usize = 64 * 1024;

impl SftpClient {
    /// Start SFTP on a channel whose "sftp" subsystem is already requested.
    /// `packet_in` is the largest channel packet we advertised (0 if not
    /// known); `cipher` is the connection's, for `SftpInfo`.
    pub async fn start<S>(
        channel: russh::Channel<S>,
        max_in_flight: usize,
        packet_in: u32,
        cipher: Option<String>,
        probe: Option<Arc<LinkProbe>>,
    ) -> Result<SftpClient, SftpError>
    where
        S: From<(russh::ChannelId, ChannelMsg)> + Send + Sync + 'static,
    {
        let (mut read_half, write_half) = channel.split();
        let packet_out = write_half.max_packet_size();
        let mut init = BytesMut::new();
        Request::Init {
            version: SFTP_VERSION,
            extensions: vec![],
        }
        .encode(&mut init);
        let asked = std::time::Instant::now();
        write_half
            .data_bytes(init.freeze())
            .await
            .map_err(|e| SftpError::Closed(e.to_string()))?;

        // The VERSION reply comes before any request can be outstanding.
        let mut framer = Framer::new(MAX_REPLY);
        let version = loop {
            if let Some(frame) = framer
                .next_frame()
                .map_err(|e| SftpError::Protocol(e.to_string()))?
            {
                break Response::decode(frame).map_err(|e| SftpError::Protocol(e.to_string()))?;
            }
            match read_half.wait().await {
                Some(ChannelMsg::Data { data }) => framer.push_bytes(data),
                Some(ChannelMsg::ExtendedData { data, .. }) => {
                    tracing::warn!("server: {}", String::from_utf8_lossy(&data).trim_end())
                }
                Some(ChannelMsg::Eof | ChannelMsg::Close) | None => {
                    return Err(SftpError::Closed(
                        "the server closed the SFTP channel before answering (is the sftp subsystem enabled?)".into(),
                    ))
                }
                Some(_) => {}
            }
        };
        let Response::Version {
            version,
            extensions,
        } = version
        else {
            return Err(SftpError::Protocol(format!(
                "expected VERSION, got packet type {}",
                version.packet_type()
            )));
        };
        // Read now, not at the channel's opening: sshd opens a session
        // channel with no window and gives its 2 MiB once the subsystem
        // runs.
        let window_out = write_half.window_size().await;
        let mut round_trip = asked.elapsed();
        let extensions = extensions
            .into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect();

        let (tx, rx) = mpsc::channel::<Outgoing>(256);
        let max_in_flight = max_in_flight.clamp(1, ferry_sftp::MAX_IN_FLIGHT);
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                table: RequestTable::new(max_in_flight),
                closed: None,
            }),
            permits: Semaphore::new(max_in_flight),
            tx,
            stall_ms: std::sync::atomic::AtomicU64::new(0),
            last_reply_ms: std::sync::atomic::AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            info: SftpInfo {
                version,
                extensions,
                limits: None,
                packet_in,
                packet_out,
                window_out,
                cipher,
                round_trip: None,
            },
            limits: std::sync::OnceLock::new(),
            round_trip: std::sync::OnceLock::new(),
            probe: probe.clone(),
            write_room: std::sync::OnceLock::new(),
        });
        tokio::spawn(channel_writer(write_half, rx, false));
        tokio::spawn(reader(read_half, framer, Arc::downgrade(&inner), probe));
        let client = SftpClient { inner };
        if client.inner.info.has(EXT_LIMITS) {
            let asked = std::time::Instant::now();
            let limits = client.limits().await?;
            round_trip = asked.elapsed();
            let _ = client.inner.limits.set(limits);
        }
        let _ = client.inner.round_trip.set(round_trip);
        Ok(client)
    }

    /// The server's version, extensions and limits.
    pub fn info(&self) -> SftpInfo {
        let mut info = self.inner.info.clone();
        info.limits = self.inner.limits.get().copied();
        info.round_trip = self.inner.round_trip.get().copied();
        info
    }

    /// Send one request and wait for its reply. `build` gets the id.
    pub async fn call(&self, build: impl FnOnce(u32) -> Request) -> Result<Response, SftpError> {
        self.call_bounded(build, true).await
    }

    /// `call` for a request that may take long with nothing else moving
    /// (copy-data, check-file-name hash the whole file on the server): its
    /// reply is not bound by the stall timeout.
    async fn call_long(&self, build: impl FnOnce(u32) -> Request) -> Result<Response, SftpError> {
        self.call_bounded(build, false).await
    }

    /// Send one request; wait for its reply within the stall timeout when
    /// `bounded` (sending always is).
    async fn call_bounded(
        &self,
        build: impl FnOnce(u32) -> Request,
        bounded: bool,
    ) -> Result<Response, SftpError> {
        let (_permit, id, rx) = self.register(None).await?;
        let req = build(id);
        let mut buf = BytesMut::with_capacity(64 + write_len(&req));
        req.encode(&mut buf);
        self.guarded(self.send(buf.freeze())).await??;
        let reply = if bounded {
            self.guarded(rx).await?
        } else {
            rx.await
        };
        reply.map_err(|_| SftpError::Closed("session closed".into()))?
    }

    /// Treat a session that answers nothing for `stall` while a request
    /// waits as stalled: the request fails and the session is abandoned
    /// (`abandon`), so the caller's retry takes another connection. A
    /// server that stops reading but keeps its socket open would otherwise
    /// hold every request for good.
    pub fn set_stall_timeout(&self, stall: Duration) {
        let ms = stall.as_millis().min(u64::MAX as u128) as u64;
        self.inner
            .stall_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// `fut`, unless the session stalls while it waits.
    async fn guarded<T>(&self, fut: impl std::future::Future<Output = T>) -> Result<T, SftpError> {
        use std::sync::atomic::Ordering::Relaxed;
        let stall = self.inner.stall_ms.load(Relaxed);
        if stall == 0 {
            return Ok(fut.await);
        }
        tokio::pin!(fut);
        loop {
            if let Ok(v) = tokio::time::timeout(Duration::from_millis(stall), &mut fut).await {
                return Ok(v);
            }
            let idle = self
                .inner
                .now_ms()
                .saturating_sub(self.inner.last_reply_ms.load(Relaxed));
            if idle >= stall {
                let why = format!(
                    "no answer from the server for {} s: the connection stalled (--timeout)",
                    stall / 1000
                );
                self.abandon(&why);
                return Err(SftpError::Closed(why));
            }
        }
    }

    /// Wait for room in flight, then record a request in the table: its
    /// id, where its reply will come, and the WRITE room it holds. The
    /// permit is held until the reply is in.
    async fn register(
        &self,
        room: Option<OwnedSemaphorePermit>,
    ) -> Result<
        (
            tokio::sync::SemaphorePermit<'_>,
            u32,
            oneshot::Receiver<Reply>,
        ),
        SftpError,
    > {
        let permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| SftpError::Closed("session closed".into()))?;
        let (tx, rx) = oneshot::channel();
        let mut st = lock(&self.inner.state);
        if let Some(why) = &st.closed {
            return Err(SftpError::Closed(why.clone()));
        }
        let id = st
            .table
            .insert(Waiting { tx, room })
            .map_err(|e| SftpError::Protocol(e.to_string()))?;
        Ok((permit, id, rx))
    }

    async fn send(&self, out: impl Into<Outgoing>) -> Result<(), SftpError> {
        let out = out.into();
        if let (Some(p), Outgoing::Bytes(bytes)) = (&self.inner.probe, &out) {
            p.sent(bytes);
        }
        self.inner
            .tx
            .send(out)
            .await
            .map_err(|_| SftpError::Closed(self.closed_reason()))
    }

    fn closed_reason(&self) -> String {
        lock(&self.inner.state)
            .closed
            .clone()
            .unwrap_or_else(|| "session closed".into())
    }

    /// The session ended (the connection was lost or closed): every call
    /// fails from now on.
    pub fn is_closed(&self) -> bool {
        self.inner.tx.is_closed() || lock(&self.inner.state).closed.is_some()
    }

    /// Give up on this session (it stalled: the server stopped answering
    /// but the connection is still open): every waiting request fails with
    /// `why`, and so does every new one.
    pub fn abandon(&self, why: &str) {
        close_session(&self.inner, why.to_string());
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        lock(&self.inner.state).table.len()
    }

    /// Keep at most `bytes` of WRITE data unanswered on this session (at
    /// least one request's, however large). Without this, uploads are
    /// held only by the server's channel window, and fill it: OpenSSH's
    /// sshd then keeps its whole 2 MiB window queued in its buffers, whose
    /// growing and compacting (page faults, `memmove`) took more CPU than
    /// the data itself, and a 25 MB upload ran at a third of its speed
    /// (docs/internals/sftp.md, "Write room"). Set once, before writing.
    pub fn limit_writes(&self, bytes: u32) {
        let kib = (bytes / 1024).max(1);
        let _ = self
            .inner
            .write_room
            .set((Arc::new(Semaphore::new(kib as usize)), kib));
    }

    /// Room for a WRITE of `len` bytes (header and data), when writes are
    /// limited ([`SftpClient::limit_writes`]): waited for (within the
    /// stall timeout) until enough earlier ones are answered. Taken before
    /// the data is read ([`SftpClient::write_prepared`]), a file's pieces
    /// are read only as the session can send them: read first, a 2.5 GB
    /// upload to sshd held 170 MB of pieces waiting, 53,000 fresh pages
    /// touched against 7,000 with the room taken first (2026-11-30,
    /// docs/internals/sftp.md, "Write room").
    pub async fn room_for_write(&self, len: usize) -> Result<WriteRoom, SftpError> {
        let Some((room, most)) = self.inner.write_room.get() else {
            return Ok(WriteRoom(None));
        };
        let kib = u32::try_from(len.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, *most);
        let taken = self.guarded(room.clone().acquire_many_owned(kib)).await?;
        taken
            .map(|t| WriteRoom(Some(t)))
            .map_err(|_| SftpError::Closed(self.closed_reason()))
    }

    pub async fn open(
        &self,
        path: &[u8],
        flags: OpenFlags,
        attrs: FileAttrs,
    ) -> Result<Handle, SftpError> {
        let p = Bytes::copy_from_slice(path);
        match self
            .call(|id| Request::Open {
                id,
                path: p,
                flags,
                attrs,
            })
            .await?
        {
            Response::Handle { handle, .. } => Ok(Handle(handle)),
            other => Err(unexpected(other, path)),
        }
    }

    pub async fn opendir(&self, path: &[u8]) -> Result<Handle, SftpError> {
        let p = Bytes::copy_from_slice(path);
        match self.call(|id| Request::Opendir { id, path: p }).await? {
            Response::Handle { handle, .. } => Ok(Handle(handle)),
            other => Err(unexpected(other, path)),
        }
    }

    pub async fn close(&self, handle: &Handle) -> Result<(), SftpError> {
        let h = handle.0.clone();
        status(self.call(|id| Request::Close { id, handle: h }).await?, b"")
    }

    /// Read up to `len` bytes at `offset`; `None` at end of file. The server
    /// may return fewer bytes than asked (servers cap reads), which the
    /// caller must handle by asking again for the rest.
    pub async fn read(
        &self,
        handle: &Handle,
        offset: u64,
        len: u32,
    ) -> Result<Option<Bytes>, SftpError> {
        let h = handle.0.clone();
        match self
            .call(|id| Request::Read {
                id,
                handle: h,
                offset,
                len,
            })
            .await?
        {
            Response::Data { data, .. } => Ok(Some(data)),
            Response::Status { code, .. } if code == StatusCode::EOF => Ok(None),
            other => Err(unexpected(other, b"")),
        }
    }

    /// Send one request and return at once; its reply is waited for with
    /// [`Pending::status`]. Requests sent this way go out in the order of
    /// the calls, so a WRITE, an FSETSTAT and a CLOSE of one handle cost
    /// one round trip together instead of three: servers answer a handle's
    /// requests in order (OpenSSH's sftp-server runs them one after the
    /// other; ferry serve makes every other request on a handle wait for
    /// its writes).
    async fn send_only(
        &self,
        build: impl FnOnce(u32) -> Request,
    ) -> Result<Pending<'_>, SftpError> {
        let (permit, id, rx) = self.register(None).await?;
        let req = build(id);
        let mut buf = BytesMut::with_capacity(64 + write_len(&req));
        req.encode(&mut buf);
        let len = buf.len();
        self.guarded(self.send(buf.freeze())).await??;
        Ok(Pending {
            client: self,
            _permit: permit,
            rx,
            len,
        })
    }

    /// WRITE, not waiting for its reply ([`SftpClient::send_only`]).
    pub async fn send_write(
        &self,
        handle: &Handle,
        offset: u64,
        data: &[u8],
    ) -> Result<Pending<'_>, SftpError> {
        let prefix = ferry_sftp::packet_ext::write_prefix_len(handle.0.len());
        let mut buf = BytesMut::with_capacity(prefix + data.len());
        buf.resize(prefix, 0);
        buf.extend_from_slice(data);
        self.send_prepared(handle, offset, buf).await
    }

    /// [`SftpClient::write_prepared`], not waiting for its reply.
    pub async fn send_prepared(
        &self,
        handle: &Handle,
        offset: u64,
        buf: BytesMut,
    ) -> Result<Pending<'_>, SftpError> {
        let room = self.room_for_write(buf.len()).await?;
        self.send_in_room(room, handle, offset, buf).await
    }

    async fn send_in_room(
        &self,
        room: WriteRoom,
        handle: &Handle,
        offset: u64,
        mut buf: BytesMut,
    ) -> Result<Pending<'_>, SftpError> {
        let (permit, id, rx) = self.register(room.0).await?;
        if !Request::fill_write_prefix(&mut buf, id, &handle.0, offset) {
            let _ = lock(&self.inner.state).table.take(id);
            return Err(SftpError::Protocol(
                "write buffer has no room for the header".into(),
            ));
        }
        let len = buf.len();
        self.guarded(self.send(buf.freeze())).await??;
        Ok(Pending {
            client: self,
            _permit: permit,
            rx,
            len,
        })
    }

    /// FSETSTAT, not waiting for its reply ([`SftpClient::send_only`]).
    pub async fn send_fsetstat(
        &self,
        handle: &Handle,
        a: FileAttrs,
    ) -> Result<Pending<'_>, SftpError> {
        let h = handle.0.clone();
        self.send_only(|id| Request::Fsetstat {
            id,
            handle: h,
            attrs: a,
        })
        .await
    }

    /// CLOSE, not waiting for its reply ([`SftpClient::send_only`]).
    pub async fn send_close(&self, handle: &Handle) -> Result<Pending<'_>, SftpError> {
        let h = handle.0.clone();
        self.send_only(|id| Request::Close { id, handle: h }).await
    }

    pub async fn write(&self, handle: &Handle, offset: u64, data: &[u8]) -> Result<(), SftpError> {
        self.send_write(handle, offset, data).await?.status().await
    }

    /// WRITE from a buffer whose first `write_prefix_len(handle)` bytes are
    /// room for the packet header and the rest is the data: the caller
    /// reads file data straight into it, and no byte is copied again.
    /// `room` is [`SftpClient::room_for_write`]'s for this buffer's length.
    pub async fn write_prepared(
        &self,
        room: WriteRoom,
        handle: &Handle,
        offset: u64,
        buf: BytesMut,
    ) -> Result<(), SftpError> {
        self.send_in_room(room, handle, offset, buf)
            .await?
            .status()
            .await
    }

    /// WRITE of `len` bytes that `read` appends as the SSH packets that
    /// carry them are built (`read(out, at, n)` appends the `n` bytes at
    /// `at` from the data's start, exactly `n`): a file read lands in the
    /// packet that is sealed and sent, with no buffer of its own and no
    /// copy into the packet ([`Outgoing::Read`]). `read` runs on the
    /// session's task. When `auto` compression's probe wants a sample of
    /// what is sent (once a window), the bytes are read into a buffer
    /// first instead.
    /// `room` is [`SftpClient::room_for_write`]'s for the request.
    pub async fn write_from(
        &self,
        room: WriteRoom,
        handle: &Handle,
        offset: u64,
        len: usize,
        read: ReadFn,
    ) -> Result<(), SftpError> {
        let prefix = ferry_sftp::packet_ext::write_prefix_len(handle.0.len());
        let Ok(data_len) = u32::try_from(len) else {
            return Err(SftpError::Protocol("a WRITE of 4 GiB or more".into()));
        };
        if self.inner.probe.as_ref().is_some_and(|p| p.wants_sent()) {
            let mut buf = Vec::with_capacity(prefix + len);
            buf.resize(prefix, 0);
            read(&mut buf, 0, len);
            let buf = BytesMut::from(Bytes::from(buf));
            return self.write_prepared(room, handle, offset, buf).await;
        }
        let (permit, id, rx) = self.register(room.0).await?;
        let mut head = BytesMut::with_capacity(prefix);
        Request::encode_write_prefix(&mut head, id, &handle.0, offset, data_len);
        let out = Outgoing::Read {
            head: head.freeze(),
            len,
            read,
        };
        self.guarded(self.send(out)).await??;
        Pending {
            client: self,
            _permit: permit,
            rx,
            len: prefix + len,
        }
        .status()
        .await
    }

    pub async fn stat(&self, path: &[u8]) -> Result<FileAttrs, SftpError> {
        let p = Bytes::copy_from_slice(path);
        attrs(self.call(|id| Request::Stat { id, path: p }).await?, path)
    }

    pub async fn lstat(&self, path: &[u8]) -> Result<FileAttrs, SftpError> {
        let p = Bytes::copy_from_slice(path);
        attrs(self.call(|id| Request::Lstat { id, path: p }).await?, path)
    }

    pub async fn fstat(&self, handle: &Handle) -> Result<FileAttrs, SftpError> {
        let h = handle.0.clone();
        attrs(self.call(|id| Request::Fstat { id, handle: h }).await?, b"")
    }

    pub async fn setstat(&self, path: &[u8], a: FileAttrs) -> Result<(), SftpError> {
        let p = Bytes::copy_from_slice(path);
        status(
            self.call(|id| Request::Setstat {
                id,
                path: p,
                attrs: a,
            })
            .await?,
            path,
        )
    }

    pub async fn fsetstat(&self, handle: &Handle, a: FileAttrs) -> Result<(), SftpError> {
        let h = handle.0.clone();
        status(
            self.call(|id| Request::Fsetstat {
                id,
                handle: h,
                attrs: a,
            })
            .await?,
            b"",
        )
    }

    /// One batch of directory entries; `None` when the listing is done.
    pub async fn readdir(&self, handle: &Handle) -> Result<Option<Vec<NameEntry>>, SftpError> {
        let h = handle.0.clone();
        match self.call(|id| Request::Readdir { id, handle: h }).await? {
            Response::Name { entries, .. } => Ok(Some(entries)),
            Response::Status { code, .. } if code == StatusCode::EOF => Ok(None),
            other => Err(unexpected(other, b"")),
        }
    }

    /// Every entry of a directory but `.` and `..`.
    pub async fn list_dir(&self, path: &[u8]) -> Result<Vec<NameEntry>, SftpError> {
        let h = self.opendir(path).await?;
        let mut all = Vec::new();
        let res = async {
            while let Some(batch) = self.readdir(&h).await.map_err(|e| e.with_path(path))? {
                all.extend(
                    batch
                        .into_iter()
                        .filter(|e| &e.filename[..] != b"." && &e.filename[..] != b".."),
                );
            }
            Ok::<_, SftpError>(())
        }
        .await;
        let closed = self.close(&h).await;
        res?;
        closed?;
        Ok(all)
    }

    pub async fn mkdir(&self, path: &[u8], a: FileAttrs) -> Result<(), SftpError> {
        let p = Bytes::copy_from_slice(path);
        status(
            self.call(|id| Request::Mkdir {
                id,
                path: p,
                attrs: a,
            })
            .await?,
            path,
        )
    }

    pub async fn remove(&self, path: &[u8]) -> Result<(), SftpError> {
        let p = Bytes::copy_from_slice(path);
        status(self.call(|id| Request::Remove { id, path: p }).await?, path)
    }

    pub async fn rmdir(&self, path: &[u8]) -> Result<(), SftpError> {
        let p = Bytes::copy_from_slice(path);
        status(self.call(|id| Request::Rmdir { id, path: p }).await?, path)
    }

    pub async fn realpath(&self, path: &[u8]) -> Result<Bytes, SftpError> {
        let p = Bytes::copy_from_slice(path);
        match self.call(|id| Request::Realpath { id, path: p }).await? {
            Response::Name { mut entries, .. } if !entries.is_empty() => {
                Ok(entries.swap_remove(0).filename)
            }
            other => Err(unexpected(other, path)),
        }
    }

    /// Rename `from` over `to`, replacing `to` if it exists. Uses
    /// posix-rename@openssh.com (atomic replace) where the server has it;
    /// plain SFTP v3 RENAME refuses to overwrite, so without the extension
    /// the old `to` is removed first (not atomic: said in the docs).
    pub async fn rename_over(&self, from: &[u8], to: &[u8]) -> Result<(), SftpError> {
        let (f, t) = (Bytes::copy_from_slice(from), Bytes::copy_from_slice(to));
        if self.inner.info.has(EXT_POSIX_RENAME) {
            return status(
                self.call(|id| Request::Extended {
                    id,
                    request: Extended::PosixRename { from: f, to: t },
                })
                .await?,
                to,
            );
        }
        let (f2, t2) = (f.clone(), t.clone());
        match status(
            self.call(|id| Request::Rename { id, from: f, to: t })
                .await?,
            to,
        ) {
            Ok(()) => Ok(()),
            Err(_) => {
                let _ = self.remove(to).await;
                status(
                    self.call(|id| Request::Rename {
                        id,
                        from: f2,
                        to: t2,
                    })
                    .await?,
                    to,
                )
            }
        }
    }

    /// Copy `len` bytes (0: to the end) from one open handle to another on
    /// the server (`copy-data`, OpenSSH's sftp-server since 9.0): no byte
    /// crosses the connection. The caller checks `info().has("copy-data")`.
    pub async fn copy_data(
        &self,
        read: &Handle,
        read_offset: u64,
        len: u64,
        write: &Handle,
        write_offset: u64,
    ) -> Result<(), SftpError> {
        let (r, w) = (read.0.clone(), write.0.clone());
        status(
            self.call_long(|id| Request::Extended {
                id,
                request: Extended::CopyData {
                    read_handle: r,
                    read_offset,
                    read_len: len,
                    write_handle: w,
                    write_offset,
                },
            })
            .await?,
            b"",
        )
    }

    /// A hash of a whole file computed by the server (`check-file-name`),
    /// with the first of `algorithms` (comma-separated) it knows: the
    /// algorithm used and the hash. The caller checks
    /// `info().has("check-file-name")`.
    pub async fn check_file_name(
        &self,
        path: &[u8],
        algorithms: &str,
    ) -> Result<ferry_sftp::CheckFileReply, SftpError> {
        let p = Bytes::copy_from_slice(path);
        let a = Bytes::copy_from_slice(algorithms.as_bytes());
        match self
            .call_long(|id| Request::Extended {
                id,
                request: Extended::CheckFileName {
                    path: p,
                    algorithms: a,
                    start: 0,
                    length: 0,
                    block_size: 0,
                },
            })
            .await?
        {
            Response::ExtendedReply { data, .. } => ferry_sftp::CheckFileReply::decode(data)
                .map_err(|e| SftpError::Protocol(e.to_string())),
            other => Err(unexpected(other, path)),
        }
    }

    pub async fn limits(&self) -> Result<Limits, SftpError> {
        match self
            .call(|id| Request::Extended {
                id,
                request: Extended::Limits,
            })
            .await?
        {
            Response::ExtendedReply { data, .. } => {
                Limits::decode(data).map_err(|e| SftpError::Protocol(e.to_string()))
            }
            other => Err(unexpected(other, b"")),
        }
    }

    /// Free space where `path` lives, when the server can tell.
    pub async fn statvfs(&self, path: &[u8]) -> Result<Option<Statvfs>, SftpError> {
        if !self.inner.info.has(EXT_STATVFS) {
            return Ok(None);
        }
        let p = Bytes::copy_from_slice(path);
        match self
            .call(|id| Request::Extended {
                id,
                request: Extended::Statvfs { path: p },
            })
            .await?
        {
            Response::ExtendedReply { data, .. } => Statvfs::decode(data)
                .map(Some)
                .map_err(|e| SftpError::Protocol(e.to_string())),
            other => Err(unexpected(other, path)),
        }
    }

    /// Flush a file to stable storage, when the server supports it.
    pub async fn fsync(&self, handle: &Handle) -> Result<(), SftpError> {
        if !self.inner.info.has(EXT_FSYNC) {
            return Ok(());
        }
        let h = handle.0.clone();
        status(
            self.call(|id| Request::Extended {
                id,
                request: Extended::Fsync { handle: h },
            })
            .await?,
            b"",
        )
    }
}

fn write_len(req: &Request) -> usize {
    match req {
        Request::Write { data, .. } => data.len(),
        _ => 0,
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A panic while holding this lock cannot leave the table inconsistent in
    // a way that matters more than the panic itself: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn status(resp: Response, path: &[u8]) -> Result<(), SftpError> {
    match resp {
        Response::Status { code, .. } if code == StatusCode::OK => Ok(()),
        other => Err(unexpected(other, path)),
    }
}

fn attrs(resp: Response, path: &[u8]) -> Result<FileAttrs, SftpError> {
    match resp {
        Response::Attrs { attrs, .. } => Ok(attrs),
        other => Err(unexpected(other, path)),
    }
}

fn unexpected(resp: Response, path: &[u8]) -> SftpError {
    match resp {
        Response::Status { code, message, .. } => SftpError::Status {
            code,
            message: String::from_utf8_lossy(&message).into_owned(),
            path: path.to_vec(),
        },
        other => SftpError::Protocol(format!(
            "unexpected reply of type {} for {}",
            other.packet_type(),
            String::from_utf8_lossy(path)
        )),
    }
}

/// What [`channel_writer`] sends: bytes, or a producer that appends at
/// most `len` bytes straight into the SSH packet when their turn comes
/// (russh's `ChannelMsg::DataWith`: a file read lands in the packet, with
/// no copy from a buffer of its own). The producer runs on the session's
/// task and must not block.
pub enum Outgoing {
    Bytes(Bytes),
    Fill {
        len: usize,
        fill: russh::FillFn,
    },
    /// `head`, then `len` bytes that `read` appends: cut into packets of
    /// the channel's size, each one's bytes read straight into it
    /// ([`SftpClient::write_from`]).
    Read {
        head: Bytes,
        len: usize,
        read: ReadFn,
    },
}

/// What [`Outgoing::Read`] reads with: `read(out, at, n)` appends exactly
/// `n` bytes, those at `at` from the start of the data (zeros where it
/// could not read them: the caller keeps the error and fails the
/// request's file). It runs on the session's task.
pub type ReadFn = Arc<dyn Fn(&mut Vec<u8>, u64, usize) + Send + Sync>;

/// A request sent by [`SftpClient::send_only`] whose reply is still to
/// come; it holds its place in flight until then.
pub struct Pending<'a> {
    client: &'a SftpClient,
    _permit: tokio::sync::SemaphorePermit<'a>,
    rx: oneshot::Receiver<Reply>,
    /// The request's size on the channel: a WRITE's is its data's.
    len: usize,
}

impl Pending<'_> {
    /// Wait (within the stall timeout) for a reply that is a status: OK,
    /// or the server's error.
    pub async fn status(self) -> Result<(), SftpError> {
        let reply = self
            .client
            .guarded(self.rx)
            .await?
            .map_err(|_| SftpError::Closed("session closed".into()))??;
        if let Some(p) = &self.client.inner.probe {
            p.answered(self.len);
        }
        status(reply, b"")
    }
}

impl From<Bytes> for Outgoing {
    fn from(b: Bytes) -> Self {
        Outgoing::Bytes(b)
    }
}

/// [`Outgoing::Read`]: one `data_with` a packet of the channel's size, so
/// each packet's bytes are read into it when it is built.
async fn send_read<S>(
    w: &russh::ChannelWriteHalf<S>,
    head: Bytes,
    len: usize,
    read: ReadFn,
) -> Result<(), russh::Error>
where
    S: From<(russh::ChannelId, russh::ChannelMsg)> + Send + Sync + 'static,
{
    let packet = (w.max_packet_size() as usize).max(1);
    let total = head.len() + len;
    let mut at = 0;
    while at < total {
        let n = (total - at).min(packet);
        w.data_with(n, packet_fill(&head, &read, at, n)).await?;
        at += n;
    }
    Ok(())
}

/// The producer of bytes `at..at + n` of `head` followed by what `read`
/// reads.
fn packet_fill(head: &Bytes, read: &ReadFn, at: usize, n: usize) -> russh::FillFn {
    let (head, read) = (head.clone(), read.clone());
    Box::new(move |out: &mut Vec<u8>| {
        let end = at + n;
        let mut from = at;
        if let Some(h) = head.get(from..end.min(head.len())) {
            out.extend_from_slice(h);
            from += h.len();
        }
        if from < end {
            read(out, (from - head.len()) as u64, end - from);
        }
    })
}

/// Own the write half of a channel and send what arrives on `rx`, small
/// packets coalesced into writes of up to 64 KiB so that many small
/// requests or replies cost few SSH packets. Sends EOF when `rx` closes,
/// and with `close` also exit status 0 and CLOSE, as a server ends a
/// subsystem. Used by the SFTP client here and by ferry's SFTP server.
pub async fn channel_writer<S, T>(
    write_half: russh::ChannelWriteHalf<S>,
    mut rx: mpsc::Receiver<T>,
    close: bool,
) where
    S: From<(russh::ChannelId, ChannelMsg)> + Send + Sync + 'static,
    T: Into<Outgoing>,
{
    let send = |out: Outgoing| {
        let w = &write_half;
        async move {
            match out {
                Outgoing::Bytes(b) if b.is_empty() => Ok(()),
                Outgoing::Bytes(b) => w.data_bytes(b).await,
                Outgoing::Fill { len, fill } => w.data_with(len, fill).await,
                Outgoing::Read { head, len, read } => send_read(w, head, len, read).await,
            }
        }
    };
    let mut batch = BytesMut::new();
    'recv: while let Some(first) = rx.recv().await {
        let first = match first.into() {
            Outgoing::Bytes(b) if b.len() < COALESCE => b,
            big => {
                if send(big).await.is_err() {
                    return;
                }
                continue;
            }
        };
        batch.extend_from_slice(&first);
        while batch.len() < COALESCE {
            match rx.try_recv().map(Into::into) {
                Ok(Outgoing::Bytes(next)) if next.len() < COALESCE => {
                    batch.extend_from_slice(&next)
                }
                Ok(next) => {
                    // A big one: flush the small ones, then it, in order.
                    let small = Outgoing::Bytes(batch.split().freeze());
                    if send(small).await.is_err() || send(next).await.is_err() {
                        return;
                    }
                    continue 'recv;
                }
                Err(_) => break,
            }
        }
        if send(Outgoing::Bytes(batch.split().freeze())).await.is_err() {
            return;
        }
    }
    let _ = write_half.eof().await;
    if close {
        let _ = write_half.exit_status(0).await;
        let _ = write_half.close().await;
    }
}

async fn reader(
    mut read_half: russh::ChannelReadHalf,
    mut framer: Framer,
    inner: std::sync::Weak<Inner>,
    probe: Option<Arc<LinkProbe>>,
) {
    let why = loop {
        match read_half.wait().await {
            Some(ChannelMsg::Data { data }) => {
                if let Some(p) = &probe {
                    p.received(&data);
                }
                framer.push_bytes(data);
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                if let Err(e) = dispatch(&mut framer, &inner) {
                    break e;
                }
            }
            Some(ChannelMsg::ExtendedData { data, .. }) => {
                tracing::warn!("server: {}", String::from_utf8_lossy(&data).trim_end());
            }
            Some(ChannelMsg::Eof) | Some(ChannelMsg::Close) | None => {
                break "the server closed the connection".to_string()
            }
            Some(ChannelMsg::ExitStatus { exit_status }) => {
                break format!("the server's SFTP process exited with status {exit_status}")
            }
            Some(_) => {}
        }
    };
    if let Some(inner) = inner.upgrade() {
        close_session(&inner, why);
    }
}

/// Mark the session closed: every request waiting gets `why`, new ones
/// fail at once.
fn close_session(inner: &Inner, why: String) {
    let waiting = {
        let mut st = lock(&inner.state);
        if st.closed.is_none() {
            st.closed = Some(why.clone());
        }
        st.table.drain()
    };
    for w in waiting {
        let _ = w.tx.send(Err(SftpError::Closed(why.clone())));
    }
    inner.permits.close();
    if let Some((room, _)) = inner.write_room.get() {
        room.close();
    }
}

fn dispatch(framer: &mut Framer, inner: &Inner) -> Result<(), String> {
    while let Some(frame) = framer.next_frame().map_err(|e| e.to_string())? {
        let resp = Response::decode(frame).map_err(|e| format!("bad SFTP reply: {e}"))?;
        let Some(id) = resp.id() else {
            return Err("unexpected VERSION packet".into());
        };
        let waiting = lock(&inner.state).table.take(id);
        inner
            .last_reply_ms
            .store(inner.now_ms(), std::sync::atomic::Ordering::Relaxed);
        match waiting {
            Some(Waiting { tx, room }) => {
                drop(room);
                let _ = tx.send(Ok(resp));
            }
            None => return Err(format!("reply to unknown request id {id}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packets' producers, run in order, give the header and then the
    /// data, whatever the packet size, the header's split included.
    #[test]
    fn packet_fills_make_the_header_and_then_the_data() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let head = Bytes::from_static(b"WRITE header, 29 bytes long..");
        let src = Arc::new(data.clone());
        let read: ReadFn = Arc::new(move |out: &mut Vec<u8>, at: u64, n: usize| {
            let piece = src.get(at as usize..at as usize + n);
            out.extend_from_slice(piece.unwrap_or_else(|| panic!("read past the data at {at}")));
        });
        let mut want = head.to_vec();
        want.extend_from_slice(&data);
        for packet in [1, 7, 29, 30, 4096, 32 * 1024] {
            let mut out = Vec::new();
            let mut at = 0;
            while at < want.len() {
                let n = (want.len() - at).min(packet);
                let before = out.len();
                packet_fill(&head, &read, at, n)(&mut out);
                assert_eq!(out.len() - before, n, "packet {packet} at {at}");
                at += n;
            }
            assert!(out == want, "packet size {packet}");
        }
    }
}
