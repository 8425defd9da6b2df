//! HTTP(S) as a backend: GET with `Range` for reads (any offset, so big
//! files go in parallel ranges), HEAD for `stat`, ferry serve's JSON or an
//! HTML index for listings (a file an HTML index gives no size of is one
//! GET, its size learned from the answer: `read_unsized`), PUT for writes (streamed from the source) and
//! MKCOL for directories (WebDAV: nginx's dav module, ferry serve).
//!
//! A PUT becomes visible under its name only when complete on both
//! servers ferry is tested with (nginx writes a temporary file and
//! renames it; so does ferry serve), so the engine writes the final name
//! directly (`atomic_write`) and there is no rename.
use async_trait::async_trait;
use bytes::Bytes;
use ferry_http::encode::{Auto, Coding, Segmenter};
use ferry_http::{listing, Client, HeaderMap, HeaderValue, Method, StatusCode, Url};
use percent_encoding::{AsciiSet, CONTROLS};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use super::{
    path, Backend, BackendInfo, ByteStream, Capabilities, Entry, EntryKind, LocalRange, RangeTask,
    ReadInfo, Role, Sink, Unfinished, UnsizedRead, WriteMode,
};
use crate::error::TransferError;
use crate::location::HttpSpec;
use crate::CopyOptions;

/// Characters escaped in one path segment (RFC 3986 `pchar` keeps the rest).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'[')
    .add(b']')
    .add(b'\\')
    .add(b'^')
    .add(b'|');
/// Ranges a widened HTTP(S) download starts on ([`Backend::widen_start`]).
const HTTP_WIDEN_START: usize = 8;
/// Largest directory listing accepted.
const MAX_LISTING: usize = 64 * 1024 * 1024;
/// Response header of ferry serve's `OPTIONS`: `bytes` when PUT takes
/// `Content-Range` (ferry-server's `upload::PUT_RANGES`).
const PUT_RANGES: &str = "ferry-put-ranges";
/// Response header of ferry serve's upload state query: the SHA-256 of the
/// last bytes it holds (ferry-server's `upload::PART_TAIL`).
const PART_TAIL: &str = "ferry-part-tail";
/// What ferry serve keeps of a cut ranged PUT, beside the final name as
/// `.NAME` + this (ferry-server's `upload::Place::part`).
const UPLOAD_PART: &[u8] = b".ferry-upload-part";
/// Request header of a zstd-coded whole-file PUT to ferry serve: the
/// file's size (ferry-server's `upload::DECODED_LENGTH`).
const DECODED_LENGTH: &str = "ferry-decoded-length";
/// Smallest upload sent as a ranged PUT (which a cut leaves resumable).
const RANGED_PUT_MIN: u64 = 1024 * 1024;
/// Largest tail block hashed to check a partial upload.
const MAX_TAIL_CHECK: u64 = 1024 * 1024;
/// Pieces queued between the source and a PUT body.
const PUT_QUEUE: usize = 16;
/// A download's frames are gathered into local writes of this size.
const WRITE_GATHER: usize = 1024 * 1024;
/// A body with a digest to check is hashed (and handed on) in pieces of
/// this size.
const HASH_GATHER: usize = 1024 * 1024;

pub struct Http {
    /// This backend's number among the process's HTTP backends.
    id: usize,
    /// One client per shard: files are spread over them by path, each
    /// client with its own HTTP/2 connection (or HTTP/1.1 pool), so TLS
    /// and HTTP/2 framing of many files run on more than one core.
    clients: Vec<Client>,
    /// Each shard's thread, which makes and drives its client's
    /// connections; dropped with the backend, they end.
    _threads: Vec<super::OwnThread>,
    /// The URL as given: its query string (a signed URL) is kept for the
    /// path it names.
    root: Url,
    root_path: Vec<u8>,
    /// No answer for this long: the connection stalled (`--timeout`).
    stall: Duration,
    /// `--compressed`: whole-file reads ask for zstd or gzip.
    compressed: bool,
    /// What each file's HEAD (`stat`, `read_info`) or first GET
    /// (`read_unsized`) said: a split or a resume costs no second HEAD,
    /// and ranges carry `If-Range`.
    heads: std::sync::Mutex<std::collections::HashMap<Vec<u8>, ReadInfo>>,
    /// Shards whose connection the server refused.
    refused: Vec<AtomicBool>,
    /// What PUT takes here (ferry serve says so in its `OPTIONS`
    /// answer), asked once.
    put_caps: tokio::sync::OnceCell<PutCaps>,
    /// How uploads from local files are coded where the server takes
    /// zstd (`-C`); `None`: plain.
    upload_coding: Option<Coding>,
    /// `auto`'s figures, shared by all uploads of the copy.
    upload_auto: Arc<std::sync::Mutex<Auto>>,
    /// `--streams N`: one client (connection) per range, the ranged GETs
    /// handed to them in turn; `None`: by path.
    spread: Option<AtomicUsize>,
    /// A file the engine widened on a long path ([`Backend::widen`]): its
    /// ranged GETs go in turn to the shards' clients and these, each a
    /// client with its own connection on a thread of its own (and what
    /// keeps that thread), `wide_n` clients in all.
    wide: std::sync::RwLock<Vec<(Client, super::OwnThread)>>,
    wide_n: AtomicUsize,
    wide_next: AtomicUsize,
}

/// What a server's `OPTIONS` answer says PUT takes.
#[derive(Debug, Clone, Copy, Default)]
struct PutCaps {
    /// `Content-Range` (`ferry-put-ranges: bytes`): a cut upload's
    /// bytes are kept.
    ranges: bool,
    /// `Content-Encoding: zstd` (RFC 7694's `Accept-Encoding` in a
    /// response): the server decodes the body before storing it.
    zstd: bool,
}

/// The coding of uploads these options ask for: `-C` as it says (`on`:
/// level 1). `auto`, the default, is decided per file before its body
/// goes (`auto_put`; plain unless a measured plain stretch says coding
/// pays). `--compressed` (downloads) does not change it.
fn upload_coding(opts: &CopyOptions) -> Option<Coding> {
    use ferry_ssh::SshCompression as C;
    match opts.connect.compression {
        C::Off => None,
        C::Auto => Some(Coding::Auto),
        C::On => Some(Coding::Level(ferry_http::encode::AUTO_LEVEL)),
        C::Level(l) => Some(Coding::Level(l)),
    }
}

/// Shard `i`'s thread of the backend numbered `backend` (HTTP's, or
/// S3's when `proto` says so): a current-thread runtime that makes and
/// drives the shard's connections, and on which its downloads are
/// written into local files ([`ByteStream::write_into`]), so that a
/// body's frames are decrypted, parsed and written on one thread, as
/// the HTTP copy loop's shard threads did (SFTP's connections have
/// threads of their own for the same reason). It ends when dropped.
pub(crate) fn shard_thread(
    proto: &str,
    backend: usize,
    i: usize,
) -> Result<super::OwnThread, TransferError> {
    // Before any task, so before any request made there.
    super::OwnThread::start_with(format!("ferry-{proto}-{i}"), move || {
        HERE.set(Some((backend, i)))
    })
}

thread_local! {
    /// On a shard's thread: which backend (numbered by [`BACKENDS`]) and
    /// which of its shards. A request made there goes over that shard's
    /// own client ([`Backend::homes`]), without crossing threads.
    pub(crate) static HERE: std::cell::Cell<Option<(usize, usize)>> = const { std::cell::Cell::new(None) };
}

/// Numbers the HTTP and S3 backends of this process, for [`HERE`].
pub(crate) static BACKENDS: AtomicUsize = AtomicUsize::new(0);

/// Most clients (connections to one server) files are spread over.
const MAX_SHARDS: usize = 4;

/// Most connections `--streams N` opens, one per range (aria2c's `-x`
/// allows 16). Ranges that shared one HTTP/2 connection were held to
/// that one connection's rate: on a lossy link (loss100) 16.9 MB/s with
/// `--streams 8`, as with one stream, where aria2c's 8 connections moved
/// 37.6 (docs/internals/http.md, "Segmented downloads").
const MAX_RANGE_CONNECTIONS: usize = 16;

/// How many clients: one per core (at most [`MAX_SHARDS`]) when several
/// files move at once, else one. A second HTTP/2 connection on the second
/// core moved 1,000 x 20 kB from nginx 18% faster on this 2-core machine
/// (docs/internals/http.md, "Shards"). `CopyOptions::http_shards` sets
/// the count (tuning; the CLI reads `FERRY_HTTP_SHARDS`).
fn shards(opts: &CopyOptions) -> usize {
    if let Some(n) = opts.http_shards {
        return n.clamp(1, MAX_SHARDS);
    }
    if let Some(n) = opts.streams.filter(|&n| n > 1) {
        return n.min(MAX_RANGE_CONNECTIONS);
    }
    if opts.files_in_flight() < 2 {
        return 1;
    }
    per_core(opts.files_in_flight())
}

/// One shard per core, at most [`MAX_SHARDS`] and no more than `files`
/// moving at once (HTTP's clients, S3's threads for small files).
pub(crate) fn per_core(files: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, MAX_SHARDS)
        .min(files)
}

impl Http {
    pub fn open(
        spec: &HttpSpec,
        opts: &CopyOptions,
    ) -> Result<(Http, Vec<u8>, bool), TransferError> {
        let n = shards(opts);
        // -P files (or --streams ranges) at once need as many HTTP/1.1
        // connections, shared out among the shards; HTTP/2 multiplexes
        // them over one each.
        let h1 = opts
            .files_in_flight()
            .max(opts.streams.unwrap_or(1))
            .div_ceil(n)
            .max(1);
        let mut h = opts.http.clone();
        h.h1_connections = h1;
        let first = Client::new(h)?;
        // The command line's credentials go to the origins it names.
        first.trust(&spec.url);
        let id = BACKENDS.fetch_add(1, Ordering::Relaxed);
        let threads = (0..n)
            .map(|i| shard_thread("http", id, i))
            .collect::<Result<Vec<_>, _>>()?;
        let clients = threads
            .iter()
            .map(|t| first.sibling_on(h1, Some(t.rt.clone())))
            .collect();
        let (root_path, dir) = Http::path_of(spec);
        Ok((
            Http {
                id,
                clients,
                _threads: threads,
                root: spec.url.clone(),
                root_path: root_path.clone(),
                stall: opts.timeout,
                compressed: opts.compressed,
                heads: Default::default(),
                refused: (0..n).map(|_| AtomicBool::new(false)).collect(),
                put_caps: tokio::sync::OnceCell::new(),
                upload_coding: upload_coding(opts),
                upload_auto: Default::default(),
                spread: (opts.http_shards.is_none() && opts.streams.is_some_and(|n| n > 1))
                    .then(AtomicUsize::default),
                wide: Default::default(),
                wide_n: AtomicUsize::new(0),
                wide_next: AtomicUsize::new(0),
            },
            root_path,
            dir,
        ))
    }

    /// The location's path in a backend for its server, and whether it
    /// names a directory (ends with `/`).
    pub fn path_of(spec: &HttpSpec) -> (Vec<u8>, bool) {
        (spec.url.decoded_path(), spec.url.is_dir())
    }

    /// Which client serves `p`: the same one for every request about a
    /// file, the first when that one's server refused it.
    fn shard(&self, p: &[u8]) -> usize {
        // FNV-1a: cheap, and spreads similar names.
        let h = p.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        self.taken_from((h % self.clients.len() as u64) as usize)
    }

    /// Shard `i`, or when the server refused its connection the next one
    /// it took (`i` itself when it took none).
    fn taken_from(&self, i: usize) -> usize {
        let n = self.clients.len();
        (0..n)
            .map(|k| (i + k) % n)
            .find(|&j| !self.refused[j].load(Ordering::Relaxed))
            .unwrap_or(i)
    }

    /// On one of this backend's shard threads (a small file's copy run
    /// there, [`Backend::homes`]), that shard, unless its connection was
    /// refused.
    fn here(&self) -> Option<usize> {
        HERE.get()
            .filter(|&(id, i)| id == self.id && !self.refused[i].load(Ordering::Relaxed))
            .map(|(_, i)| i)
    }

    /// Another shard with a connection the server took, to use instead of
    /// `i` when `i`'s connection was refused.
    fn instead_of(&self, i: usize) -> Option<usize> {
        let j = (0..self.clients.len()).find(|&j| {
            j != i && !self.refused[j].load(Ordering::Relaxed) && self.clients[j].connections() > 0
        })?;
        self.refused[i].store(true, Ordering::Relaxed);
        Some(j)
    }

    /// A GET or HEAD of `p` within `--timeout`. A server that takes fewer
    /// connections than there are shards (ferry serve's
    /// `--max-connections`) refuses some shard's: that shard is given up
    /// and its files go over a connection the server took.
    async fn request(
        &self,
        method: Method,
        p: &[u8],
        headers: &HeaderMap,
    ) -> Result<ferry_http::Response, TransferError> {
        Ok(self.request_on(method, p, headers).await?.0)
    }

    /// [`Http::request`], and the thread that drives the connection it
    /// went over.
    async fn request_on(
        &self,
        method: Method,
        p: &[u8],
        headers: &HeaderMap,
    ) -> Result<(ferry_http::Response, Option<tokio::runtime::Handle>), TransferError> {
        let url = self.url(p);
        let ranged = headers.contains_key("range");
        let widened = self.wide_n.load(Ordering::Relaxed);
        let mut i = match &self.spread {
            // A range of a split file: the next connection, so that the
            // ranges add connections, not streams of one.
            Some(next) if ranged => {
                self.taken_from(next.fetch_add(1, Ordering::Relaxed) % self.clients.len())
            }
            // A range of a widened file: the next of the shards' and the
            // extra clients.
            None if ranged && widened > 1 => {
                let k = self.wide_next.fetch_add(1, Ordering::Relaxed) % widened;
                match k.checked_sub(self.clients.len()) {
                    None => self.taken_from(k),
                    Some(x) => {
                        let c = self.wide.read().unwrap_or_else(|e| e.into_inner())[x]
                            .0
                            .clone();
                        let sent = self.send_on(&c, method, &url, headers, p).await?;
                        return Ok((sent?, c.driver().cloned()));
                    }
                }
            }
            _ => self.here().unwrap_or_else(|| self.shard(p)),
        };
        loop {
            let sent = self
                .send_on(&self.clients[i], method.clone(), &url, headers, p)
                .await?;
            match sent {
                Err(ferry_http::HttpError::Network(m)) => match self.instead_of(i) {
                    Some(j) => {
                        tracing::debug!("{}: shard {i} given up: {m}", self.display(p));
                        i = j;
                    }
                    None => return Err(TransferError::Network(m)),
                },
                other => return Ok((other?, self.clients[i].driver().cloned())),
            }
        }
    }

    /// One request on client `c`, its answer's head awaited at most the
    /// stall timeout.
    async fn send_on(
        &self,
        c: &Client,
        method: Method,
        url: &ferry_http::Url,
        headers: &HeaderMap,
        p: &[u8],
    ) -> Result<Result<ferry_http::Response, ferry_http::HttpError>, TransferError> {
        tokio::time::timeout(self.stall, c.send(method, url, headers, None))
            .await
            .map_err(|_| TransferError::stalled(&self.display(p), "no answer", self.stall))
    }

    /// Does this server take ranged PUTs (and keep a cut one's bytes)?
    /// Any failure means no: whole-file PUTs work everywhere.
    async fn takes_ranges(&self) -> bool {
        self.put_caps().await.ranges
    }

    /// What PUT takes here, from the `OPTIONS` answer of the root, asked
    /// once. Any failure means plain whole files, which work everywhere.
    async fn put_caps(&self) -> PutCaps {
        *self
            .put_caps
            .get_or_init(|| async {
                let url = self.url(&self.root_path);
                let Ok(resp) = self.clients[0]
                    .send(Method::OPTIONS, &url, &HeaderMap::new(), None)
                    .await
                else {
                    return PutCaps::default();
                };
                let says = |name: &str, what: &str| {
                    resp.status.is_success()
                        && resp.headers.get_all(name).iter().any(|v| {
                            v.to_str().is_ok_and(|v| {
                                v.split(',').any(|u| {
                                    let u = u.split(';').next().unwrap_or_default();
                                    u.trim().eq_ignore_ascii_case(what)
                                })
                            })
                        })
                };
                let caps = PutCaps {
                    ranges: says(PUT_RANGES, "bytes"),
                    zstd: says("accept-encoding", "zstd"),
                };
                let _ = resp.bytes(64 * 1024).await;
                caps
            })
            .await
    }

    async fn head(&self, p: &[u8]) -> Result<ferry_http::Response, TransferError> {
        self.request(Method::HEAD, p, &HeaderMap::new()).await
    }

    /// What a HEAD (or a whole GET) of `p` says for `read_info`, kept
    /// for the copy.
    fn note_head(&self, p: &[u8], resp: &ferry_http::Response) -> ReadInfo {
        let ranges = resp
            .header("accept-ranges")
            .is_some_and(|v| v.to_ascii_lowercase().contains("bytes"))
            && resp.header("content-encoding").is_none()
            && !self.compressed;
        let digest = ferry_http::digest::expected(&resp.headers).map(|e| {
            let algo = match e.algo {
                ferry_http::digest::Algo::Blake3 => super::HashAlgo::Blake3,
                ferry_http::digest::Algo::Sha256 => super::HashAlgo::Sha256,
            };
            (algo, e.sum.to_vec())
        });
        let info = ReadInfo {
            ranges,
            version: validator(&resp.headers),
            digest,
            digest_parts: Vec::new(),
        };
        if let Ok(mut heads) = self.heads.lock() {
            heads.insert(p.to_vec(), info.clone());
        }
        info
    }

    /// The URL of a decoded path.
    fn url(&self, p: &[u8]) -> Url {
        if p == self.root_path.as_slice() {
            return self.root.clone();
        }
        let mut u = self.root.clone();
        let mut s = String::new();
        for seg in p.split(|&c| c == b'/').filter(|s| !s.is_empty()) {
            s.push('/');
            s.push_str(&percent_encoding::percent_encode(seg, SEGMENT).to_string());
        }
        if p.ends_with(b"/") || s.is_empty() {
            s.push('/');
        }
        u.path = s;
        u
    }

    /// A GET of `len` bytes of `p` from `offset` (`None`: to the end).
    async fn get(
        &self,
        p: &[u8],
        offset: u64,
        len: Option<u64>,
    ) -> Result<HttpRead, TransferError> {
        let display = self.display(p);
        // What the plan's HEAD said of this file, if it made one.
        let known = self.heads.lock().ok().and_then(|h| h.get(p).cloned());
        let no_ranges = known.as_ref().is_some_and(|i| !i.ranges);
        // From the start of a file whose server ignores ranges: a plain
        // GET, read as far as asked.
        let ranged = offset > 0 || (len.is_some() && !no_ranges);
        // Content coding only for a whole file: ranges count the file's
        // own bytes.
        let whole_asked = offset == 0;
        let coded = self.compressed && whole_asked;
        let mut h = HeaderMap::new();
        h.insert(
            "accept-encoding",
            HeaderValue::from_static(if coded { "zstd, gzip" } else { "identity" }),
        );
        if ranged && !coded {
            let range = match len {
                Some(0) => return Ok(HttpRead::empty(display)),
                Some(l) => format!("bytes={offset}-{}", offset + l - 1),
                None => format!("bytes={offset}-"),
            };
            h.insert(
                "range",
                HeaderValue::from_str(&range)
                    .map_err(|e| TransferError::Local(format!("internal: {e}")))?,
            );
            // The version the plan saw: a server whose file changed since
            // answers with all of it (200) instead of mixing versions.
            let version = known.and_then(|i| i.version).filter(|_| !no_ranges);
            if let Some(v) = version.and_then(|v| HeaderValue::from_str(&v).ok()) {
                h.insert("if-range", v);
            }
        }
        let stall = self.stall;
        let (resp, driver) = self.request_on(Method::GET, p, &h).await?;
        if resp.status == StatusCode::NOT_FOUND {
            return Err(self.missing(p));
        }
        let resp = resp.error_for_status()?;
        let decoder = ferry_http::decode::Decoder::for_encoding(resp.header("content-encoding"))
            .map_err(|e| TransferError::Remote(format!("{display}: {e}")))?;
        let coded = !decoder.is_identity();
        let total = if coded { None } else { resp.content_length() };
        let partial = resp.status == StatusCode::PARTIAL_CONTENT;
        let got = resp
            .header("content-range")
            .and_then(ferry_http::range::parse_content_range)
            .filter(|_| partial);
        if partial {
            // The range answered must be the one asked for.
            let end_ok = |last: u64| len.is_none_or(|l| last + 1 == offset + l);
            if !got.is_some_and(|r| r.first == offset && end_ok(r.last)) {
                return Err(TransferError::Remote(format!(
                    "{display}: the server answered another byte range than asked for ({:?})",
                    resp.header("content-range").unwrap_or("none")
                )));
            }
        } else if ranged && h.contains_key("if-range") {
            return Err(TransferError::Remote(format!(
                "{display}: the file changed on the server during the copy (its validator no longer matches); run the copy again"
            )));
        } else if offset > 0 {
            return Err(TransferError::Remote(format!(
                "{display}: the server ignored the byte range asked for (HTTP {}); copy with --streams 1",
                resp.status.as_u16()
            )));
        }
        let left = len
            .or(if partial { total } else { total.or(len) })
            .unwrap_or(u64::MAX);
        // The whole file in one response: check it against the digest
        // the server announced (ferry serve's Repr-Digest), if any.
        let whole = if partial {
            offset == 0 && got.is_some_and(|r| r.complete.is_some() && r.complete == len)
        } else {
            offset == 0 && !coded
        };
        let check = ferry_http::digest::expected(&resp.headers)
            .filter(|_| whole)
            .map(|e| (e, ferry_http::digest::Hasher::new(e.algo)));
        Ok(HttpRead {
            resp: Some(resp),
            left,
            display,
            check,
            decoder: coded.then_some(decoder),
            pending: Bytes::new(),
            stall,
            driver,
        })
    }

    fn origin(&self) -> String {
        let scheme = if self.root.https { "https" } else { "http" };
        format!("{scheme}://{}", self.root.authority())
    }
}

#[async_trait]
impl Backend for Http {
    fn scheme(&self) -> &'static str {
        if self.root.https {
            "https"
        } else {
            "http"
        }
    }
    fn display(&self, p: &[u8]) -> String {
        let u = self.url(p);
        format!("{}{}", self.origin(), u.path)
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_read: true,
            offset_write: false,
            append: false,
            rename_over: false,
            atomic_write: true,
            set_times: false,
            set_mode: false,
            list: true,
            server_copy: false,
            max_files: 64,
            // Over HTTP/2 the ranges of a file would be streams of its one
            // connection: no more of the link, and a file split with a
            // digest announced is read back to be checked (1 GiB from
            // ferry serve: 1.61 CPU-s split, against the copy loop's 1.30
            // in one stream, which never split unasked). Over HTTP/1.1
            // each range is a connection of its own.
            max_ranges: if self.clients[0].negotiated() == Some("h2") {
                1
            } else {
                4
            },
        }
    }
    fn home(&self, p: &[u8]) -> Option<tokio::runtime::Handle> {
        self.clients[self.shard(p)].driver().cloned()
    }
    fn homes(&self) -> Vec<tokio::runtime::Handle> {
        self.clients
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.refused[*i].load(Ordering::Relaxed))
            .filter_map(|(_, c)| c.driver().cloned())
            .collect()
    }

    fn endpoint_key(&self) -> String {
        self.origin()
    }
    fn round_trip(&self) -> Option<Duration> {
        self.clients.iter().filter_map(Client::round_trip).min()
    }

    /// A widened download starts on 8 connections, as aria2c `-x8` does:
    /// an HTTPS connection costs one TLS handshake, and on `loss100`
    /// (100 ms, 0.1% loss) the ramp from 4 left ferry at 0.84-0.88x
    /// aria2c where a start on 8 moved 1.14-1.19x more (BENCHMARKS.md,
    /// run wan-start-1; SFTP starts on 8 too since run sftp-start-1).
    fn widen_start(&self) -> usize {
        HTTP_WIDEN_START
    }

    /// A widened download's ranges each get a connection: the shards'
    /// first, then new clients, each on a thread of its own (at most
    /// [`MAX_RANGE_CONNECTIONS`]). Over HTTP/2 ranges on one connection
    /// would be streams sharing its one window and its losses.
    async fn widen(&self, role: Role, ranges: usize) -> usize {
        if role != Role::Source || self.spread.is_some() {
            return self.capabilities().max_ranges.min(ranges);
        }
        let want = ranges.clamp(1, MAX_RANGE_CONNECTIONS);
        let shards = self.clients.len();
        let mut wide = self.wide.write().unwrap_or_else(|e| e.into_inner());
        while shards + wide.len() < want {
            match super::OwnThread::start(format!("ferry-http-w{}", wide.len())) {
                Ok(t) => wide.push((self.clients[0].sibling_on(1, Some(t.rt.clone())), t)),
                Err(e) => {
                    tracing::debug!("{}: no extra connection: {e}", self.origin());
                    break;
                }
            }
        }
        let n = want.min(shards + wide.len());
        self.wide_n.fetch_max(n, Ordering::Relaxed);
        n
    }
    fn info(&self) -> BackendInfo {
        // The protocol a connection spoke: any shard's that made one.
        let spoke = self
            .clients
            .iter()
            .find(|c| c.negotiated().is_some())
            .unwrap_or(&self.clients[0]);
        BackendInfo {
            connections: (self.clients.iter().map(Client::connections).sum::<usize>()
                + self
                    .wide
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|(c, _)| c.connections())
                    .sum::<usize>())
            .max(1),
            cipher: None,
            chunk: 0,
            protocol: Some(protocol(spoke, self.root.https).into()),
        }
    }

    async fn resume_refusal(&self) -> Option<String> {
        if self.takes_ranges().await {
            return None;
        }
        Some(format!(
            "{}: uploads to this server cannot be resumed (an HTTP PUT takes a whole file); --resume sends each file whole",
            self.origin()
        ))
    }

    fn missing(&self, p: &[u8]) -> TransferError {
        TransferError::Remote(format!(
            "{}: no such file on the server (HTTP 404 Not Found)",
            self.display(p)
        ))
    }

    async fn stat(&self, p: &[u8]) -> Result<Option<Entry>, TransferError> {
        let url = self.url(p);
        let name = path::basename(p).to_vec();
        if url.is_dir() {
            return Ok(Some(Entry::dir(name)));
        }
        let resp = self.head(p).await?;
        if resp.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let resp = resp.error_for_status()?;
        if resp.url.is_dir() {
            return Ok(Some(Entry::dir(name)));
        }
        self.note_head(p, &resp);
        Ok(Some(Entry {
            name,
            kind: EntryKind::File,
            size: resp.content_length(),
            mtime: last_modified(&resp.headers).map(i64::from),
            mode: None,
        }))
    }

    async fn read_info(&self, p: &[u8]) -> Result<ReadInfo, TransferError> {
        let known = self.heads.lock().ok().and_then(|h| h.get(p).cloned());
        if let Some(info) = known {
            return Ok(info);
        }
        let resp = self.head(p).await?;
        // A server without HEAD: nothing known, a plain GET works.
        if resp.status == StatusCode::METHOD_NOT_ALLOWED
            || resp.status == StatusCode::NOT_IMPLEMENTED
        {
            return Ok(ReadInfo::default());
        }
        let resp = resp.error_for_status()?;
        Ok(self.note_head(p, &resp))
    }

    /// The digest a server announces on HEAD (`Repr-Digest`; ferry serve
    /// sends BLAKE3 once it has hashed the file), when it is the hash
    /// asked for; else the caller reads the file.
    async fn hash(
        &self,
        p: &[u8],
        algo: super::HashAlgo,
    ) -> Result<Option<Vec<u8>>, TransferError> {
        let want = match algo {
            super::HashAlgo::Blake3 => ferry_http::digest::Algo::Blake3,
            super::HashAlgo::Sha256 => ferry_http::digest::Algo::Sha256,
            // `Repr-Digest` carries neither.
            super::HashAlgo::Xxh128 | super::HashAlgo::Crc32 => return Ok(None),
        };
        let resp = self.head(p).await?.error_for_status()?;
        Ok(ferry_http::digest::expected(&resp.headers)
            .filter(|e| e.algo == want)
            .map(|e| e.sum.to_vec()))
    }

    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        let url = self.url(dir).as_dir();
        let Some((_, entries)) = list(&self.clients[0], &url, self.stall).await? else {
            return Err(TransferError::Remote(format!(
                "{}: not a directory listing (neither ferry serve's JSON nor an HTML index)",
                self.display(dir)
            )));
        };
        Ok(entries
            .into_iter()
            .map(|e| Entry {
                name: e.name,
                kind: match e.kind {
                    listing::Kind::Dir => EntryKind::Dir,
                    listing::Kind::File | listing::Kind::Symlink => EntryKind::File,
                },
                size: e.size,
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
        Ok(Box::new(self.get(p, offset, len).await?))
    }

    fn sizes_by_reading(&self) -> bool {
        true
    }

    /// One GET, no HEAD before it: the size (`Content-Length`), the time
    /// (`Last-Modified`) and what a later range or resume needs (strong
    /// ETag or Last-Modified for `If-Range`, `Accept-Ranges`, a digest)
    /// come with the body, and are kept as a HEAD's would be. A compressed
    /// body (`--compressed`) says no file size: it streams to its end.
    async fn read_unsized(&self, p: &[u8]) -> Result<Option<UnsizedRead>, TransferError> {
        let stream = self.get(p, 0, None).await?;
        let Some(resp) = stream.resp.as_ref() else {
            return Ok(None);
        };
        if resp.url.is_dir() {
            return Err(TransferError::Remote(format!(
                "{}: is a directory (the server answered with {})",
                self.display(p),
                resp.url
            )));
        }
        let info = self.note_head(p, resp);
        let mtime = last_modified(&resp.headers).map(i64::from);
        let size = (stream.decoder.is_none() && stream.left != u64::MAX).then_some(stream.left);
        Ok(Some(UnsizedRead {
            stream: Box::new(stream),
            size,
            mtime,
            info,
        }))
    }

    async fn write(
        &self,
        p: &[u8],
        mode: WriteMode,
        size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        let url = self.url(p);
        let display = self.display(p);
        let from = match mode {
            WriteMode::Create { .. } => 0,
            WriteMode::At(o) => o,
        };
        // ferry serve keeps what a cut ranged PUT sent, so --resume sends
        // only the rest; every upload to it says its range for that.
        // Files under 1 MiB are sent whole again: not worth an OPTIONS
        // for a list of small files.
        let ranged = match size {
            Some(s) if s >= RANGED_PUT_MIN || from > 0 => self.takes_ranges().await,
            _ => false,
        };
        // Coded only where the server said it decodes zstd (nginx and
        // others would store the coded bytes as the file).
        let coded = match self.upload_coding {
            Some(c) if self.put_caps().await.zstd => Some((c, self.upload_auto.clone())),
            _ => None,
        };
        let mut h = HeaderMap::new();
        if ranged {
            let total = size.unwrap_or(0);
            h.insert(
                "content-range",
                HeaderValue::from_str(&format!("bytes {from}-{}/{total}", total - 1))
                    .map_err(|e| TransferError::Local(format!("internal: {e}")))?,
            );
        } else if from > 0 {
            return Err(TransferError::Usage(format!(
                "internal: {display}: this server takes whole files only, not a write from byte {from}"
            )));
        }
        // Uploads go over the first client (shards serve downloads).
        // The request starts with the first piece, or with a local
        // file's range (`Sink::read_from`), whichever comes.
        Ok(Box::new(HttpPut {
            start: Some(PutStart {
                client: self.clients[0].clone(),
                url,
                headers: h,
                body_len: size.map(|s| s - from.min(s)),
                ranged,
                size,
                coded,
            }),
            tx: None,
            task: None,
            segmenter: None,
            display,
            stall: self.stall,
        }))
    }

    async fn unfinished(&self, p: &[u8], size: u64) -> Result<Option<Unfinished>, TransferError> {
        if size < RANGED_PUT_MIN || !self.takes_ranges().await {
            return Ok(None);
        }
        // `Content-Range: bytes */SIZE` asks ferry serve what it holds.
        let url = self.url(p);
        let mut h = HeaderMap::new();
        h.insert(
            "content-range",
            HeaderValue::from_str(&format!("bytes */{size}"))
                .map_err(|e| TransferError::Local(format!("internal: {e}")))?,
        );
        let make = ferry_http::empty;
        let resp = self.clients[0]
            .send(Method::PUT, &url, &h, Some(&make))
            .await?;
        let status = resp.status;
        let have = resp.header("range").and_then(held).unwrap_or(0);
        let tail = resp.header(PART_TAIL).and_then(part_tail);
        let _ = resp.bytes(64 * 1024).await;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(ferry_http::HttpError::status(&url.to_string(), status).into());
        }
        if status != StatusCode::ACCEPTED || have == 0 {
            return Ok(None);
        }
        Ok(Some(Unfinished {
            have,
            tail: tail
                .filter(|&(a, b, _)| b + 1 == have && b - a < MAX_TAIL_CHECK)
                .map(|(a, _, sum)| (a, sum)),
        }))
    }

    /// ferry serve keeps a cut ranged PUT's bytes in
    /// `.NAME.ferry-upload-part` (ferry-server's `upload::put_part`):
    /// DELETE it. Servers that take no ranges keep nothing.
    async fn discard_unfinished(&self, p: &[u8]) -> Result<(), TransferError> {
        if !self.takes_ranges().await {
            return Ok(());
        }
        let url = self.url(&path::side_name(p, UPLOAD_PART));
        let resp = self.clients[0]
            .send(Method::DELETE, &url, &HeaderMap::new(), None)
            .await?;
        let status = resp.status;
        let _ = resp.bytes(64 * 1024).await;
        if status.is_success() || status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(ferry_http::HttpError::status(&url.to_string(), status).into())
    }

    async fn mkdir_all(&self, dir: &[u8]) -> Result<(), TransferError> {
        let mkcol = Method::from_bytes(b"MKCOL")
            .map_err(|e| TransferError::Local(format!("internal: MKCOL: {e}")))?;
        // MKCOL needs the parent (409 otherwise, RFC 4918 9.3.1): from the
        // top, whatever the answers (405: it exists).
        let mut levels = Vec::new();
        let mut d = dir.to_vec();
        while !d.is_empty() && d != b"/" {
            levels.push(d.clone());
            d = path::parent(&d).to_vec();
        }
        for (i, d) in levels.iter().rev().enumerate() {
            let mut p = d.clone();
            p.push(b'/');
            let url = self.url(&p);
            let resp = self.clients[0]
                .send(mkcol.clone(), &url, &HeaderMap::new(), None)
                .await?;
            let last = i + 1 == levels.len();
            match resp.status {
                s if s.is_success() || s == StatusCode::METHOD_NOT_ALLOWED => {}
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    return Err(ferry_http::HttpError::status(&url.to_string(), resp.status).into())
                }
                s if last => {
                    return Err(TransferError::Remote(format!(
                        "{}: the server refused to create the directory (HTTP {})",
                        self.display(&p),
                        s.as_u16()
                    )))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

struct HttpRead {
    resp: Option<ferry_http::Response>,
    /// File bytes still to hand out (`u64::MAX`: to the end of the body).
    left: u64,
    display: String,
    /// The digest announced for the whole file, and the bytes' hash so far.
    check: Option<(ferry_http::digest::Expected, ferry_http::digest::Hasher)>,
    /// `--compressed` and the server did: the body's decoder, and body
    /// bytes not yet decoded.
    decoder: Option<ferry_http::decode::Decoder>,
    pending: Bytes,
    stall: Duration,
    /// The thread of the connection the body arrives on.
    driver: Option<tokio::runtime::Handle>,
}

impl HttpRead {
    fn empty(display: String) -> HttpRead {
        HttpRead {
            resp: None,
            left: 0,
            display,
            check: None,
            decoder: None,
            pending: Bytes::new(),
            stall: Duration::from_secs(60),
            driver: None,
        }
    }

    /// At the end of the body: the bytes against the announced digest.
    fn verify(&mut self) -> Result<(), TransferError> {
        let Some((want, h)) = self.check.take() else {
            return Ok(());
        };
        let got = h.finalize();
        if got == want.sum {
            return Ok(());
        }
        // The server's bytes are not what it says they are: sending them
        // again would not help. The final name is left alone.
        Err(TransferError::Remote(format!(
            "{}: the data does not match the server's digest ({} announced {}, received {}); nothing was kept",
            self.display,
            want.algo.name(),
            ferry_http::digest::to_base64(&want.sum),
            ferry_http::digest::to_base64(&got)
        )))
    }

    /// The next piece of the file, cut at the range's end; `None` at
    /// its end (a body that ends before it is an error).
    async fn body_piece(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.left == 0 {
            return Ok(None);
        }
        match self.file_piece().await? {
            Some(mut b) => {
                if b.len() as u64 > self.left {
                    b.truncate(self.left as usize);
                }
                if self.left != u64::MAX {
                    self.left -= b.len() as u64;
                }
                Ok(Some(b))
            }
            None if self.left == u64::MAX => Ok(None),
            None => Err(TransferError::Network(format!(
                "{}: the response ended {} bytes early",
                self.display, self.left
            ))),
        }
    }

    /// The next piece of the body as it came, within `--timeout`.
    async fn body_chunk(&mut self) -> Result<Option<Bytes>, TransferError> {
        let Some(resp) = self.resp.as_mut() else {
            return Ok(None);
        };
        let stall = self.stall;
        Ok(tokio::time::timeout(stall, resp.chunk())
            .await
            .map_err(|_| TransferError::stalled(&self.display, "no data", stall))??)
    }

    /// The next piece of the file: the body's, decoded when it was
    /// coded (at most 256 KiB at a time, however well it compressed).
    async fn file_piece(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.decoder.is_none() {
            return self.body_chunk().await;
        }
        loop {
            let Some(dec) = self.decoder.as_mut() else {
                return Ok(None);
            };
            let mut pieces = dec.pieces(&self.pending);
            let piece = pieces
                .next_piece()
                .map_err(|e| TransferError::Remote(format!("{}: {e}", self.display)))?
                .map(Bytes::copy_from_slice);
            let used = self.pending.len() - pieces.rest().len();
            bytes::Buf::advance(&mut self.pending, used);
            if piece.is_some() {
                return Ok(piece);
            }
            match self.body_chunk().await? {
                Some(c) => self.pending = c,
                None => {
                    let Some(dec) = self.decoder.take() else {
                        return Ok(None);
                    };
                    let last = dec
                        .finish()
                        .map_err(|e| TransferError::Remote(format!("{}: {e}", self.display)))?;
                    self.resp = None;
                    return Ok((!last.is_empty()).then(|| Bytes::from(last)));
                }
            }
        }
    }
}

#[async_trait]
impl ByteStream for HttpRead {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        let piece = if self.check.is_none() {
            self.body_piece().await?
        } else {
            // With a digest to check, the body goes on in pieces of
            // 1 MiB: BLAKE3 hashes chunks side by side only within one
            // update, and frame-sized updates (16 KiB) sent every 16th
            // chunk through its one-block path (10% of the client's CPU
            // for 1 GiB from ferry serve). A local file takes the pieces
            // whole, so the bytes are still copied once, as the copy
            // loop's write buffer did.
            let mut buf = bytes::BytesMut::new();
            loop {
                match self.body_piece().await? {
                    Some(b) if buf.is_empty() && b.len() >= HASH_GATHER => {
                        buf = b.into();
                        break;
                    }
                    Some(b) => {
                        if buf.capacity() == 0 {
                            buf.reserve(HASH_GATHER);
                        }
                        buf.extend_from_slice(&b);
                        if buf.len() >= HASH_GATHER || self.left == 0 {
                            break;
                        }
                    }
                    None => break,
                }
            }
            (!buf.is_empty()).then(|| buf.freeze())
        };
        if let (Some(b), Some((_, h))) = (&piece, self.check.as_mut()) {
            h.update(b);
        }
        if piece.is_none() || self.left == 0 {
            // The end, or the last piece: checked, and the response
            // dropped (its connection goes back to the pool when the
            // body ended with it: `Response::chunk`), before it is
            // handed out: a caller that stops at the size it asked for
            // never calls again.
            self.resp = None;
            self.verify()?;
        }
        Ok(piece)
    }

    fn write_into(&mut self, to: LocalRange) -> Option<RangeTask> {
        // The body's frames arrive on the shard's thread (its
        // connection's task): written from there, gathered into 1 MiB
        // writes, as the copy loop did, not handed to the engine's task
        // and on to a blocking thread a frame at a time (two thread
        // switches a frame).
        let driver = self.driver.take();
        let me = std::mem::replace(self, HttpRead::empty(self.display.clone()));
        let drain = crate::engine::drain_into(Box::new(me), to, WRITE_GATHER);
        Some(match driver {
            Some(rt) => rt.spawn(drain),
            None => tokio::spawn(drain),
        })
    }
}

/// A PUT not sent yet: what its request needs.
struct PutStart {
    client: Client,
    url: Url,
    headers: HeaderMap,
    body_len: Option<u64>,
    /// Sent with `Content-Range` (ferry serve keeps a cut one's bytes).
    ranged: bool,
    size: Option<u64>,
    /// A body read from a local file is zstd-coded so (the server said
    /// it takes that); a body fed piece by piece goes plain.
    coded: Option<(Coding, Arc<std::sync::Mutex<Auto>>)>,
}

impl PutStart {
    /// The request with the body `make` makes; its end is the answer.
    fn send(
        self,
        display: &str,
        make: Box<dyn Fn() -> ferry_http::Body + Send + Sync>,
    ) -> impl std::future::Future<Output = Result<(), TransferError>> + Send + 'static {
        let PutStart {
            client,
            url,
            headers,
            ranged,
            size,
            ..
        } = self;
        let d2 = display.to_string();
        let again = if ranged {
            "rerun with --resume to send only the rest"
        } else {
            "run the copy again"
        };
        async move {
            let resp = client
                .send(Method::PUT, &url, &headers, Some(&*make))
                .await
                .map_err(|e| match e {
                    ferry_http::HttpError::Network(m) => {
                        TransferError::Network(format!("{m} (uploading {d2}); {again}"))
                    }
                    e => e.into(),
                })?;
            if ranged && resp.status == StatusCode::ACCEPTED {
                // The server holds a part, not the file: it did not get
                // it all.
                let have = resp.header("range").and_then(held).unwrap_or(0);
                return Err(TransferError::Network(format!(
                    "{d2}: the server holds {have} of {} bytes after the upload; {again}",
                    size.unwrap_or(0)
                )));
            }
            if !resp.status.is_success() {
                return Err(TransferError::Remote(refused(&d2, resp).await));
            }
            let _ = resp.bytes(64 * 1024).await;
            Ok(())
        }
    }
}

/// A body that can be made once: a second attempt (a redirect, a stale
/// connection) gets one that fails at once instead of an empty file.
fn once_body(body: ferry_http::Body) -> Box<dyn Fn() -> ferry_http::Body + Send + Sync> {
    let body = std::sync::Mutex::new(Some(body));
    Box::new(move || match body.lock().ok().and_then(|mut b| b.take()) {
        Some(b) => b,
        None => ferry_http::channel_body(tokio::sync::mpsc::channel(1).1, Some(1)),
    })
}

struct HttpPut {
    /// The request, until the first piece or range starts it.
    start: Option<PutStart>,
    tx: Option<tokio::sync::mpsc::Sender<Bytes>>,
    task: Option<tokio::task::JoinHandle<Result<(), TransferError>>>,
    /// Codes the pieces of a zstd body fed through `tx`.
    segmenter: Option<Segmenter>,
    display: String,
    /// The server takes nothing (a full body queue) or does not answer
    /// for this long: the upload stalled (`--timeout`).
    stall: Duration,
}

impl HttpPut {
    /// The request with its coding headers when it is coded (a
    /// [`Segmenter`] made for the pieces), and the body's length on the
    /// wire when known.
    fn coded(&mut self, mut start: PutStart) -> (PutStart, Option<u64>) {
        let Some((mut coding, auto)) = start.coded.take() else {
            let len = start.body_len;
            return (start, len);
        };
        if coding == Coding::Auto {
            // A body handed over in pieces is not sampled: it follows the
            // last file that was.
            let coded = auto.lock().unwrap_or_else(|e| e.into_inner()).last_coded();
            if !coded {
                ferry_http::encode::count_uncoded(start.body_len.unwrap_or(0));
                let len = start.body_len;
                return (start, len);
            }
            coding = Coding::Level(ferry_http::encode::AUTO_LEVEL);
        }
        start
            .headers
            .insert("content-encoding", HeaderValue::from_static("zstd"));
        if let (false, Some(n)) = (start.ranged, start.body_len) {
            start.headers.insert(DECODED_LENGTH, HeaderValue::from(n));
        }
        self.segmenter = Some(Segmenter::new(coding, auto));
        (start, None)
    }

    fn coding_failed(&self, e: &std::io::Error) -> TransferError {
        TransferError::Local(format!("{}: zstd: {e}", self.display))
    }

    /// One piece (or frame) into the body.
    async fn send(&mut self, data: Bytes) -> Result<(), TransferError> {
        let sent = match &self.tx {
            Some(tx) => tokio::time::timeout(self.stall, tx.send(data))
                .await
                .map_err(|_| TransferError::stalled(&self.display, "no progress", self.stall))?
                .is_ok(),
            None => false,
        };
        if !sent {
            // The request ended: its error says why.
            self.tx = None;
            self.outcome().await?;
            return Err(TransferError::Network(format!(
                "{}: the server closed the upload early",
                self.display
            )));
        }
        Ok(())
    }

    async fn outcome(&mut self) -> Result<(), TransferError> {
        let Some(t) = self.task.as_mut() else {
            return Ok(());
        };
        let done = tokio::time::timeout(self.stall, t).await.map_err(|_| {
            TransferError::stalled(&self.display, "no answer to the upload", self.stall)
        })?;
        self.task = None;
        done.map_err(|e| {
            TransferError::Network(format!("{}: the upload task failed: {e}", self.display))
        })?
    }
}

#[async_trait]
impl Sink for HttpPut {
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError> {
        if let Some(start) = self.start.take() {
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(PUT_QUEUE);
            let (start, len) = self.coded(start);
            let body = ferry_http::channel_body(rx, len);
            self.task = Some(tokio::spawn(start.send(&self.display, once_body(body))));
            self.tx = Some(tx);
        }
        let frames = match self.segmenter.as_mut() {
            None => vec![data],
            Some(seg) => seg.push(&data).map_err(|e| self.coding_failed(&e))?,
        };
        for f in frames {
            self.send(f).await?;
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        if let Some(start) = self.start.take() {
            // Nothing was written: an empty file.
            let (start, len) = self.coded(start);
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
            let body = ferry_http::channel_body(rx, len);
            self.task = Some(tokio::spawn(start.send(&self.display, once_body(body))));
            self.tx = Some(tx);
        }
        if let Some(seg) = self.segmenter.take() {
            if let Some(f) = seg.finish().map_err(|e| self.coding_failed(&e))? {
                self.send(f).await?;
            }
        }
        self.tx = None;
        self.outcome().await
    }

    fn read_from(&mut self, from: LocalRange) -> Option<RangeTask> {
        // The body read from the file by the connection's thread, a piece
        // at a time as the connection takes it (`file_body`), as the copy
        // loop sent it: no piece crosses a thread on its way to TLS.
        if from.len != self.start.as_ref()?.body_len? {
            return None;
        }
        let mut start = self.start.take()?;
        let driver = start.client.driver().cloned();
        let progress = from.progress.clone();
        let progress: Option<Arc<dyn Fn(u64) + Send + Sync>> =
            Some(Arc::new(move |n| progress.add(n)));
        // The request that completes the file sends its last piece only
        // if the source did not change while it was read.
        let check = from.end_check();
        let body = match start.coded.take() {
            Some((Coding::Auto, auto)) => {
                let display = self.display.clone();
                let file = from.file.file.clone();
                let (at, len) = (from.file.at, from.len);
                let put = auto_put(start, display, file, (at, len), progress, check, auto);
                let put = async move { put.await.map_err(|e| (e, false)) };
                return Some(match driver {
                    Some(rt) => rt.spawn(put),
                    None => tokio::spawn(put),
                });
            }
            Some((coding, auto)) => {
                start
                    .headers
                    .insert("content-encoding", HeaderValue::from_static("zstd"));
                if !start.ranged {
                    // A ranged PUT's Content-Range says the file bytes.
                    start
                        .headers
                        .insert(DECODED_LENGTH, HeaderValue::from(from.len));
                }
                ferry_http::encode::zstd_file_body(
                    from.file.file.clone(),
                    from.file.at,
                    from.len,
                    coding,
                    auto,
                    progress,
                    check,
                )
            }
            None => ferry_http::file_body_checked(
                from.file.file.clone(),
                from.file.at,
                from.len,
                progress,
                check,
            ),
        };
        let put = start.send(&self.display, once_body(body));
        let put = async move { put.await.map_err(|e| (e, false)) };
        Some(match driver {
            Some(rt) => rt.spawn(put),
            None => tokio::spawn(put),
        })
    }
}

/// `auto` (the default) for a local file's upload to a server that
/// takes zstd: plain unless coding pays, decided before each body goes
/// (ferry_http::encode's per-file rule). When the link's rate is not yet
/// known and the file is big enough, its first `PROBE` bytes go as a
/// plain ranged PUT of their own, timed from start to the server's answer
/// (which comes only when the server has them all, whatever buffers lie
/// between), while a MiB of it is compressed aside; the rest follows as
/// a second ranged PUT, coded at level 1 or plain. Stored frames are
/// never sent: on a fast link the body is the plain file, as with
/// `-C=off`.
async fn auto_put(
    mut start: PutStart,
    display: String,
    file: Arc<std::fs::File>,
    (at, len): (u64, u64),
    progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    check: Option<ferry_http::EndCheck>,
    auto: Arc<std::sync::Mutex<Auto>>,
) -> Result<(), TransferError> {
    use ferry_http::encode::{self, FilePlan};
    let plan = auto
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .code_file(len, start.ranged);
    let total = start.size.unwrap_or(len);
    // File bytes before this body (a resumed upload starts later).
    let first = total - len;
    let sample_of = |at: u64, n: u64| {
        let f = file.clone();
        let n = (n as usize).min(encode::SAMPLE);
        tokio::task::spawn_blocking(move || encode::sample(&f, at, n))
    };
    let range = |a: u64, b: u64| {
        HeaderValue::from_str(&format!("bytes {a}-{b}/{total}"))
            .map_err(|e| TransferError::Local(format!("internal: {e}")))
    };
    let (mut start, at, len, code) = match plan {
        FilePlan::Plain => (start, at, len, false),
        FilePlan::Sample => {
            let s = sample_of(at, len).await;
            let code = match s {
                Ok(Ok((ratio, rate))) => auto
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .sampled(ratio, rate),
                _ => false,
            };
            (start, at, len, code)
        }
        FilePlan::Probe => {
            let p = encode::PROBE.min(len);
            let sample = sample_of(at, p);
            let mut h = start.headers.clone();
            h.insert("content-range", range(first, first + p - 1)?);
            let body = ferry_http::file_body(file.clone(), at, p, progress.clone());
            let make = once_body(body);
            let t0 = std::time::Instant::now();
            let resp = start
                .client
                .send(Method::PUT, &start.url, &h, Some(&*make))
                .await
                .map_err(|e| match e {
                    ferry_http::HttpError::Network(m) => TransferError::Network(format!(
                        "{m} (uploading {display}); rerun with --resume to send only the rest"
                    )),
                    e => e.into(),
                })?;
            let took = t0.elapsed();
            let have = resp.header("range").and_then(held).unwrap_or(0);
            if resp.status != StatusCode::ACCEPTED || have != first + p {
                if !resp.status.is_success() {
                    return Err(TransferError::Remote(refused(&display, resp).await));
                }
                return Err(TransferError::Network(format!(
                    "{display}: the server holds {have} bytes after the first {} of the upload; \
                     rerun with --resume to send only the rest",
                    first + p
                )));
            }
            let _ = resp.bytes(64 * 1024).await;
            encode::count_uncoded(p);
            let code = {
                let s = sample.await;
                let mut a = auto.lock().unwrap_or_else(|e| e.into_inner());
                a.measured_link(p, took);
                match s {
                    Ok(Ok((ratio, rate))) => a.sampled(ratio, rate),
                    _ => false,
                }
            };
            let (shown, secs) = (&display, took.as_secs_f64());
            tracing::debug!(
                "{shown}: auto: first {p} bytes plain in {secs:.3} s; coding the rest: {code}"
            );
            start
                .headers
                .insert("content-range", range(first + p, total - 1)?);
            start.body_len = Some(len - p);
            (start, at + p, len - p, code)
        }
    };
    let body = if code {
        start
            .headers
            .insert("content-encoding", HeaderValue::from_static("zstd"));
        if !start.ranged {
            start.headers.insert(DECODED_LENGTH, HeaderValue::from(len));
        }
        encode::zstd_file_body(
            file,
            at,
            len,
            Coding::Level(encode::AUTO_LEVEL),
            auto,
            progress,
            check,
        )
    } else {
        encode::count_uncoded(len);
        ferry_http::file_body_checked(file, at, len, progress, check)
    };
    start.send(&display, once_body(body)).await
}

impl Drop for HttpPut {
    fn drop(&mut self) {
        // Abandoned: cut the request, so the server never completes it.
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

pub(crate) fn protocol(client: &Client, https: bool) -> &'static str {
    match (https, client.negotiated()) {
        (true, Some("h2")) => "https/h2",
        (true, _) => "https/http1.1",
        (false, Some("h2")) => "http/h2c",
        (false, _) => "http/http1.1",
    }
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
        .map_err(|_| TransferError::stalled(&url.to_string(), "no answer", stall))?
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
pub(crate) fn validator(headers: &HeaderMap) -> Option<String> {
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

/// "the server refused the upload (HTTP 507 Insufficient Storage: what its
/// answer says)": the status, its reason and the first line of the body
/// (ferry serve names the cause there).
async fn refused(display: &str, resp: ferry_http::Response) -> String {
    let status = resp.status;
    let reason = status.canonical_reason().unwrap_or("");
    let body = resp.bytes(4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let line: String = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('<'))
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    let said = if line.is_empty() {
        String::new()
    } else {
        format!(": {line}")
    };
    format!(
        "{display}: the server refused the upload (HTTP {} {reason}{said})",
        status.as_u16()
    )
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
