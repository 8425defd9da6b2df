//! The client: connections per origin (scheme, host, port), requests with
//! redirects and credentials, responses read piece by piece.
//!
//! Connections are made with hyper's connection API rather than a pooled
//! client, so that ferry decides how many exist:
//! - HTTP/2 (negotiated by ALPN, or `--http2`): one connection per origin
//!   carries every request as its own stream. Its flow-control windows are
//!   large (64 MiB per stream and per connection) and frames up to
//!   1 MiB are accepted: with hyper's defaults (64 KiB windows) a stream
//!   stalls every 64 KiB for a WINDOW_UPDATE round trip.
//! - HTTP/1.1: a bounded pool of keep-alive connections per origin; a
//!   request takes an idle connection or opens one while fewer than the
//!   bound exist, and gives it back once its body was read to the end.
//!
//! The first connection to an origin is made alone, so its ALPN answer is
//! known before more are opened.
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, AUTHORIZATION, HOST, USER_AGENT};
use http::{Method, StatusCode};
use http_body::Body as _;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{self, NetrcEntry};
use crate::proxy::{self, ProxyConfig};
use crate::tls::{self, TlsOptions};
use crate::{HttpError, Origin, Url};

/// Request bodies: empty, or a file streamed from disk.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// Which HTTP version to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Version {
    /// ALPN decides over TLS (h2 preferred); HTTP/1.1 over plain TCP.
    #[default]
    Auto,
    Http1,
    /// Over plain TCP: HTTP/2 with prior knowledge (h2c).
    Http2,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub version: Version,
    pub tls: TlsOptions,
    /// `host:port:addr` entries, as curl's `--resolve`.
    pub resolve: Vec<String>,
    /// Sent as `Authorization: Bearer` to the origins of the URLs given.
    pub token: Option<String>,
    /// `user:password` for Basic authentication.
    pub user: Option<String>,
    /// Read credentials from `$NETRC` or `~/.netrc`.
    pub netrc: bool,
    pub max_redirs: u32,
    /// HTTP/1.1 connections per origin at most.
    pub h1_connections: usize,
    /// HTTP/2 flow control (docs/internals/http.md has the measurements).
    pub h2_stream_window: u32,
    pub h2_connection_window: u32,
    pub h2_max_frame: u32,
    pub connect_timeout: Duration,
    /// Use proxies from the environment (https_proxy, no_proxy, ...).
    pub env_proxy: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            version: Version::Auto,
            tls: TlsOptions::default(),
            resolve: Vec::new(),
            token: None,
            user: None,
            netrc: true,
            max_redirs: 10,
            h1_connections: 8,
            h2_stream_window: 64 << 20,
            h2_connection_window: 64 << 20,
            h2_max_frame: 1 << 20,
            connect_timeout: Duration::from_secs(30),
            env_proxy: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

/// One origin's connections.
struct Host {
    origin: Origin,
    proto: Mutex<Option<Proto>>,
    /// The shared HTTP/2 connection; its lock also serializes the first
    /// connection to the origin.
    h2: tokio::sync::Mutex<Option<http2::SendRequest<Body>>>,
    idle: Mutex<Vec<http1::SendRequest<Body>>>,
    /// HTTP/1.1 connections in use (one permit each).
    slots: Arc<Semaphore>,
    /// Permits given up because the server refused more connections.
    shrunk: std::sync::atomic::AtomicUsize,
    /// The pool's bound when made (`h1_connections`).
    bound: usize,
}

impl Host {
    fn proto(&self) -> Option<Proto> {
        *self.proto.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn set_proto(&self, p: Proto) {
        *self.proto.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
    }
    fn pop_idle(&self) -> Option<http1::SendRequest<Body>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
    /// HTTP/1.1 permits held now (leased connections and connects in
    /// progress, the caller's included).
    fn in_use(&self) -> usize {
        self.bound
            .saturating_sub(self.shrunk.load(Ordering::Relaxed))
            .saturating_sub(self.slots.available_permits())
    }
    /// HTTP/1.1 connections open now: leased (and connecting, the
    /// caller's included) plus idle ones the server has not closed.
    fn open(&self) -> usize {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        self.in_use() + idle.iter().filter(|s| !s.is_closed()).count()
    }
}

enum Conn {
    H1(http1::SendRequest<Body>, OwnedSemaphorePermit),
    H2(http2::SendRequest<Body>),
}

enum NewConn {
    H1(http1::SendRequest<Body>),
    H2(http2::SendRequest<Body>),
}

struct Inner {
    opts: Options,
    tls: Arc<rustls::ClientConfig>,
    resolve: HashMap<(String, u16), SocketAddr>,
    proxies: ProxyConfig,
    netrc: Vec<NetrcEntry>,
    hosts: Mutex<HashMap<Origin, Arc<Host>>>,
    connections: AtomicUsize,
    /// "h2" or "http/1.1" once a connection was made.
    negotiated: Mutex<Option<&'static str>>,
    /// Origins the command-line credentials may be sent to.
    trusted: Mutex<Vec<Origin>>,
    /// The runtime whose thread makes and drives this client's
    /// connections (TCP, TLS, framing); `None`: the caller's.
    driver: Option<tokio::runtime::Handle>,
    /// The quickest TCP handshake of this client's connections: the
    /// path's round trip.
    round_trip: ferry_tcp::MinRoundTrip,
}

/// A cheap handle; clones share the connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl Client {
    pub fn new(opts: Options) -> Result<Client, HttpError> {
        let alpn: &[&[u8]] = match opts.version {
            Version::Auto => &[b"h2", b"http/1.1"],
            Version::Http1 => &[b"http/1.1"],
            Version::Http2 => &[b"h2"],
        };
        let tls = tls::client_config(&opts.tls, alpn)?;
        let mut resolve = HashMap::new();
        for r in &opts.resolve {
            let mut parts = r.splitn(3, ':');
            let (Some(h), Some(p), Some(a)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(HttpError::Usage(format!(
                    "--resolve {r:?}: want host:port:address"
                )));
            };
            let port: u16 = p
                .parse()
                .map_err(|_| HttpError::Usage(format!("--resolve {r:?}: bad port {p:?}")))?;
            let a = a.trim_start_matches('[').trim_end_matches(']');
            let ip: std::net::IpAddr = a
                .parse()
                .map_err(|_| HttpError::Usage(format!("--resolve {r:?}: bad address {a:?}")))?;
            resolve.insert((h.to_ascii_lowercase(), port), SocketAddr::new(ip, port));
        }
        if opts.tls.insecure && opts.tls.pins.is_empty() {
            tracing::warn!(
                "--insecure: server certificates are NOT checked; anyone on the path can read and change this transfer"
            );
        }
        let netrc = if opts.netrc {
            auth::load_netrc(None)
        } else {
            Vec::new()
        };
        let proxies = if opts.env_proxy {
            ProxyConfig::from_env()?
        } else {
            ProxyConfig::default()
        };
        Ok(Client {
            inner: Arc::new(Inner {
                opts,
                tls,
                resolve,
                proxies,
                netrc,
                hosts: Mutex::new(HashMap::new()),
                connections: AtomicUsize::new(0),
                negotiated: Mutex::new(None),
                trusted: Mutex::new(Vec::new()),
                driver: None,
                round_trip: Default::default(),
            }),
        })
    }

    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Another client with the same settings, trust, credentials and
    /// trusted origins (the TLS configuration and CA roots are shared, not
    /// loaded again) but connections of its own, with at most
    /// `h1_connections` per host over HTTP/1.1. A client's connections are
    /// driven by the runtime that made them: this is how copies on several
    /// threads, each with its own current-thread runtime, each get their
    /// own (`ferry-engine`'s download shards).
    pub fn sibling(&self, h1_connections: usize) -> Client {
        self.sibling_on(h1_connections, None)
    }

    /// [`Client::sibling`] whose connections are made and driven on
    /// `driver`'s thread (a current-thread runtime of the caller's): TLS
    /// and framing of every response run there, and a body read on that
    /// thread too crosses no thread a frame (`ferry-engine`'s download
    /// shards, as its copy loop had them).
    pub fn sibling_on(
        &self,
        h1_connections: usize,
        driver: Option<tokio::runtime::Handle>,
    ) -> Client {
        let i = &self.inner;
        let mut opts = i.opts.clone();
        opts.h1_connections = h1_connections.max(1);
        let trusted = i.trusted.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Client {
            inner: Arc::new(Inner {
                opts,
                tls: i.tls.clone(),
                resolve: i.resolve.clone(),
                proxies: i.proxies.clone(),
                netrc: i.netrc.clone(),
                hosts: Mutex::new(HashMap::new()),
                connections: AtomicUsize::new(0),
                negotiated: Mutex::new(None),
                trusted: Mutex::new(trusted),
                driver,
                round_trip: Default::default(),
            }),
        }
    }

    /// Open a connection to `url`'s origin now (or find one open) and keep
    /// it for the requests to come; the protocol it speaks. For a caller
    /// that wants to know a connection can be had before it takes on work.
    pub async fn warm(&self, url: &Url) -> Result<&'static str, HttpError> {
        let host = self.host(&url.origin());
        let (conn, _) = self.checkout(&host).await?;
        Ok(match conn {
            Conn::H2(_) => "h2",
            Conn::H1(s, _permit) => {
                // Back to the idle list for the first request; the permit
                // goes with this scope.
                host.idle.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                "http/1.1"
            }
        })
    }

    /// Allow the command-line credentials (`--token`, `-u`) for this
    /// URL's origin. Redirects to other origins do not get them.
    pub fn trust(&self, url: &Url) {
        let mut t = self.inner.trusted.lock().unwrap_or_else(|e| e.into_inner());
        let o = url.origin();
        if !t.contains(&o) {
            t.push(o);
        }
    }

    /// The quickest TCP handshake of this client's connections so far
    /// (one round trip of the path); `None` before the first.
    pub fn round_trip(&self) -> Option<std::time::Duration> {
        self.inner.round_trip.get()
    }

    /// TCP connections opened so far.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::Relaxed)
    }

    /// "h2" or "http/1.1": what the last new connection speaks.
    pub fn negotiated(&self) -> Option<&'static str> {
        *self
            .inner
            .negotiated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn host(&self, origin: &Origin) -> Arc<Host> {
        let mut hosts = self.inner.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts
            .entry(origin.clone())
            .or_insert_with(|| {
                Arc::new(Host {
                    origin: origin.clone(),
                    proto: Mutex::new(None),
                    h2: tokio::sync::Mutex::new(None),
                    idle: Mutex::new(Vec::new()),
                    slots: Arc::new(Semaphore::new(self.inner.opts.h1_connections.max(1))),
                    shrunk: std::sync::atomic::AtomicUsize::new(0),
                    bound: self.inner.opts.h1_connections.max(1),
                })
            })
            .clone()
    }

    /// GET with the given extra headers, following redirects.
    pub async fn get(&self, url: &Url, headers: &HeaderMap) -> Result<Response, HttpError> {
        self.send(Method::GET, url, headers, None).await
    }

    /// Send a request, following redirects (GET and HEAD always, others on
    /// 307/308) up to `max_redirs`. `body` makes a fresh body for each
    /// attempt (a redirect or a retry on a stale keep-alive connection).
    pub async fn send(
        &self,
        method: Method,
        url: &Url,
        headers: &HeaderMap,
        body: Option<&(dyn Fn() -> Body + Send + Sync)>,
    ) -> Result<Response, HttpError> {
        let mut current = url.clone();
        let mut chain: Vec<String> = vec![url.to_string()];
        let max = self.inner.opts.max_redirs;
        loop {
            let resp = self.send_once(&method, &current, headers, body).await?;
            let follow = matches!(
                resp.status,
                StatusCode::MOVED_PERMANENTLY
                    | StatusCode::FOUND
                    | StatusCode::SEE_OTHER
                    | StatusCode::TEMPORARY_REDIRECT
                    | StatusCode::PERMANENT_REDIRECT
            ) && (method == Method::GET
                || method == Method::HEAD
                || resp.status == StatusCode::TEMPORARY_REDIRECT
                || resp.status == StatusCode::PERMANENT_REDIRECT);
            if !follow {
                return Ok(resp);
            }
            let Some(loc) = resp.header("location") else {
                return Ok(resp);
            };
            let next = current.join(loc).ok_or_else(|| {
                HttpError::Remote(format!(
                    "{current}: redirected to an unusable location {loc:?}"
                ))
            })?;
            let next_s = next.to_string();
            if chain.contains(&next_s) {
                chain.push(next_s);
                return Err(HttpError::Remote(format!(
                    "{url}: redirect loop ({}); the server is misconfigured",
                    chain.join(" -> ")
                )));
            }
            chain.push(next_s);
            if chain.len() > max as usize + 1 {
                return Err(HttpError::Remote(format!(
                    "{url}: more than {max} redirects (last to {next}); raise --max-redirs if this is expected"
                )));
            }
            drop(resp);
            current = next;
        }
    }

    async fn send_once(
        &self,
        method: &Method,
        url: &Url,
        headers: &HeaderMap,
        body: Option<&(dyn Fn() -> Body + Send + Sync)>,
    ) -> Result<Response, HttpError> {
        let host = self.host(&url.origin());
        let mut retried = false;
        loop {
            let (conn, reused) = self.checkout(&host).await?;
            let make_body = || body.map(|f| f()).unwrap_or_else(empty);
            let h2 = matches!(conn, Conn::H2(_));
            let req = self.build(method, url, headers, make_body(), h2)?;
            let sent = match conn {
                Conn::H2(mut s) => s.send_request(req).await.map(|r| (r, None, "h2")),
                Conn::H1(mut s, permit) => match s.send_request(req).await {
                    Ok(r) => Ok((
                        r,
                        Some(Lease {
                            sender: Some(s),
                            host: host.clone(),
                            _permit: permit,
                            reusable: false,
                        }),
                        "http/1.1",
                    )),
                    Err(e) => Err(e),
                },
            };
            match sent {
                Ok((r, lease, version)) => {
                    let (parts, incoming) = r.into_parts();
                    let mut resp = Response {
                        status: parts.status,
                        headers: parts.headers,
                        url: url.clone(),
                        version,
                        body: incoming,
                        lease,
                        ended: false,
                    };
                    if resp.body.is_end_stream() {
                        resp.mark_ended();
                    }
                    return Ok(resp);
                }
                // A keep-alive connection the server closed while idle:
                // try once more on a new one.
                Err(e)
                    if reused
                        && !retried
                        && (e.is_canceled() || e.is_closed() || e.is_incomplete_message()) =>
                {
                    tracing::debug!("{url}: reused connection failed ({e}); retrying");
                    retried = true;
                }
                Err(e) => {
                    return Err(HttpError::Network(format!(
                        "{url}: request failed: {}",
                        error_chain(&e)
                    )))
                }
            }
        }
    }

    fn build(
        &self,
        method: &Method,
        url: &Url,
        headers: &HeaderMap,
        body: Body,
        h2: bool,
    ) -> Result<http::Request<Body>, HttpError> {
        let uri = if h2 {
            format!("{}://{}{}", url.scheme(), url.authority(), url.path)
        } else {
            url.path.clone()
        };
        let mut b = http::Request::builder().method(method.clone()).uri(uri);
        if h2 {
            b = b.version(http::Version::HTTP_2);
        } else {
            b = b.header(HOST, url.authority());
        }
        b = b.header(
            USER_AGENT,
            HeaderValue::from_static(concat!("ferry/", env!("CARGO_PKG_VERSION"))),
        );
        if let Some(a) = self.authorization(url) {
            let mut v = HeaderValue::from_str(&a).map_err(|_| {
                HttpError::Usage(format!("{url}: credentials contain bad characters"))
            })?;
            v.set_sensitive(true);
            b = b.header(AUTHORIZATION, v);
        }
        let mut req = b
            .body(body)
            .map_err(|e| HttpError::Usage(format!("{url}: cannot make a request: {e}")))?;
        for (k, v) in headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        Ok(req)
    }

    /// Credentials for a request: user:pass in the URL, then `-u` and
    /// `--token` (only for the origins given on the command line), then
    /// netrc for the host.
    fn authorization(&self, url: &Url) -> Option<String> {
        if let Some(u) = &url.user {
            return Some(auth::basic(u, url.password.as_deref().unwrap_or("")));
        }
        let trusted = self
            .inner
            .trusted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&url.origin());
        if trusted {
            if let Some(up) = &self.inner.opts.user {
                let (u, p) = up.split_once(':').unwrap_or((up.as_str(), ""));
                return Some(auth::basic(u, p));
            }
            if let Some(t) = &self.inner.opts.token {
                return Some(auth::bearer(t));
            }
        }
        auth::netrc_lookup(&self.inner.netrc, &url.host).map(|e| auth::basic(&e.login, &e.password))
    }

    /// A connection for one request: the origin's HTTP/2 connection, an
    /// idle HTTP/1.1 one, or a new one. The bool says it was reused.
    async fn checkout(&self, host: &Arc<Host>) -> Result<(Conn, bool), HttpError> {
        loop {
            match host.proto() {
                Some(Proto::H2) => {
                    let mut g = host.h2.lock().await;
                    if let Some(s) = g.as_ref() {
                        if !s.is_closed() {
                            return Ok((Conn::H2(s.clone()), true));
                        }
                    }
                    *g = None;
                    match self.connect(&host.origin).await? {
                        NewConn::H2(s) => {
                            *g = Some(s.clone());
                            return Ok((Conn::H2(s), false));
                        }
                        NewConn::H1(s) => {
                            host.set_proto(Proto::H1);
                            host.idle.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                        }
                    }
                }
                Some(Proto::H1) => {
                    let permit = host
                        .slots
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|_| HttpError::Network("connection pool closed".into()))?;
                    while let Some(mut s) = host.pop_idle() {
                        if s.is_closed() {
                            continue;
                        }
                        if s.ready().await.is_ok() {
                            return Ok((Conn::H1(s, permit), true));
                        }
                    }
                    match self.connect(&host.origin).await {
                        Ok(NewConn::H1(s)) => return Ok((Conn::H1(s, permit), false)),
                        Ok(NewConn::H2(s)) => {
                            host.set_proto(Proto::H2);
                            *host.h2.lock().await = Some(s.clone());
                            return Ok((Conn::H2(s), false));
                        }
                        Err(HttpError::Network(m)) if host.open() > 1 => {
                            // Servers with a connection limit (ferry serve's
                            // --max-connections, nginx's limit_conn) close
                            // the ones past it during the handshake. Others
                            // of ours are open, leased or idle (counting
                            // only leased ones failed the copy when the
                            // others had just gone back to the pool): give
                            // this slot up for good and wait for one of
                            // theirs. A server that is down fails them too,
                            // so this ends with the last one's error.
                            let open = host.open() - 1;
                            permit.forget();
                            host.shrunk.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(
                                "{m}: the server took no more connections; at most {open} from now on"
                            );
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    let mut g = host.h2.lock().await;
                    if host.proto().is_some() {
                        continue;
                    }
                    let permit = host
                        .slots
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|_| HttpError::Network("connection pool closed".into()))?;
                    match self.connect(&host.origin).await? {
                        NewConn::H2(s) => {
                            host.set_proto(Proto::H2);
                            *g = Some(s.clone());
                            return Ok((Conn::H2(s), false));
                        }
                        NewConn::H1(s) => {
                            host.set_proto(Proto::H1);
                            return Ok((Conn::H1(s, permit), false));
                        }
                    }
                }
            }
        }
    }

    /// A new connection to `origin`, made on the driver's thread when the
    /// client has one (its task is then spawned there).
    async fn connect(&self, origin: &Origin) -> Result<NewConn, HttpError> {
        let Some(driver) = &self.inner.driver else {
            return self.connect_here(origin).await;
        };
        let (me, to) = (self.clone(), origin.clone());
        driver
            .spawn(async move { me.connect_here(&to).await })
            .await
            .map_err(|e| HttpError::Network(format!("the connection's thread ended: {e}")))?
    }

    /// The runtime that drives this client's connections, if not the
    /// caller's ([`Client::sibling_on`]).
    pub fn driver(&self) -> Option<&tokio::runtime::Handle> {
        self.inner.driver.as_ref()
    }

    async fn connect_here(&self, origin: &Origin) -> Result<NewConn, HttpError> {
        let label = format!(
            "{}://{}:{}",
            if origin.https { "https" } else { "http" },
            origin.host,
            origin.port
        );
        let via = self.inner.proxies.for_origin(origin).cloned();
        let (dial_host, dial_port) = match &via {
            Some(p) => (p.host.clone(), p.port),
            None => (origin.host.clone(), origin.port),
        };
        let pinned = match via {
            Some(_) => None,
            None => self.inner.resolve.get(&(origin.host.clone(), origin.port)),
        };
        let addrs: Vec<SocketAddr> = match pinned {
            Some(a) => vec![*a],
            None => tokio::net::lookup_host((dial_host.as_str(), dial_port))
                .await
                .map_err(|e| {
                    HttpError::Network(format!("{label}: cannot resolve {dial_host}: {e}"))
                })?
                .collect(),
        };
        let mut last = String::from("no address");
        let mut tcp = None;
        for a in addrs {
            let began = std::time::Instant::now();
            match tokio::time::timeout(
                self.inner.opts.connect_timeout,
                tokio::net::TcpStream::connect(a),
            )
            .await
            {
                Ok(Ok(s)) => {
                    // Through a proxy this is the proxy's round trip.
                    self.inner.round_trip.note(began.elapsed());
                    tcp = Some(s);
                    break;
                }
                Ok(Err(e)) => last = format!("{a}: {e}"),
                Err(_) => {
                    last = format!(
                        "{a}: no answer within {} s",
                        self.inner.opts.connect_timeout.as_secs()
                    )
                }
            }
        }
        let mut tcp =
            tcp.ok_or_else(|| HttpError::Network(format!("{label}: cannot connect ({last})")))?;
        let _ = tcp.set_nodelay(true);
        ferry_tcp::apply(&tcp);
        if let Some(p) = &via {
            proxy::tunnel(&mut tcp, p, origin).await?;
        }
        self.inner.connections.fetch_add(1, Ordering::Relaxed);
        let version = self.inner.opts.version;
        let conn = if origin.https {
            let name = ServerName::try_from(origin.host.clone()).map_err(|_| {
                HttpError::Usage(format!(
                    "{label}: {:?} is not a valid host name",
                    origin.host
                ))
            })?;
            let tls = tokio_rustls::TlsConnector::from(self.inner.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| tls::handshake_error(&label, e))?;
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
            if version == Version::Http2 && !h2 {
                return Err(HttpError::Network(format!(
                    "{label}: the server does not offer HTTP/2 (ALPN); drop --http2"
                )));
            }
            if h2 {
                self.h2(TokioIo::new(tls), &label).await?
            } else {
                self.h1(TokioIo::new(tls), &label).await?
            }
        } else if version == Version::Http2 {
            self.h2(TokioIo::new(tcp), &label).await?
        } else {
            self.h1(TokioIo::new(tcp), &label).await?
        };
        *self
            .inner
            .negotiated
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(match conn {
            NewConn::H1(_) => "http/1.1",
            NewConn::H2(_) => "h2",
        });
        Ok(conn)
    }

    async fn h2<T>(&self, io: T, label: &str) -> Result<NewConn, HttpError>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let o = &self.inner.opts;
        let (s, conn) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(o.h2_stream_window)
            .initial_connection_window_size(o.h2_connection_window)
            .max_frame_size(o.h2_max_frame)
            .adaptive_window(false)
            // What one stream may queue beyond what was written: each
            // upload stream runs that far ahead of the socket. 1 MiB let
            // every one of `-P 64` PUTs read its whole 1 MB file at once
            // (ferry cp's RSS 107 MB for 100 x 1 MB, against 64 MB now);
            // 256 KiB still keeps a single upload's pipe full
            // (docs/internals/http.md, "Uploads").
            .max_send_buf_size(256 << 10)
            .handshake::<_, Body>(io)
            .await
            .map_err(|e| {
                HttpError::Network(format!("{label}: HTTP/2 handshake: {}", error_chain(&e)))
            })?;
        let label = label.to_string();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("{label}: HTTP/2 connection ended: {e}");
            }
        });
        Ok(NewConn::H2(s))
    }

    async fn h1<T>(&self, io: T, label: &str) -> Result<NewConn, HttpError>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (s, conn) = http1::Builder::new()
            .max_buf_size(1 << 20)
            .handshake::<_, Body>(io)
            .await
            .map_err(|e| HttpError::Network(format!("{label}: {}", error_chain(&e))))?;
        let label = label.to_string();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("{label}: HTTP/1.1 connection ended: {e}");
            }
        });
        Ok(NewConn::H1(s))
    }
}

/// An error and its causes on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// An HTTP/1.1 connection lent to one response; back to the idle list
/// when the body was read to the end, closed otherwise.
struct Lease {
    sender: Option<http1::SendRequest<Body>>,
    host: Arc<Host>,
    _permit: OwnedSemaphorePermit,
    reusable: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.reusable {
            return;
        }
        if let Some(s) = self.sender.take() {
            if !s.is_closed() {
                self.host
                    .idle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(s);
            }
        }
    }
}

/// A response whose body is read with [`Response::chunk`].
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The URL that answered (after redirects).
    pub url: Url,
    /// "h2" or "http/1.1".
    pub version: &'static str,
    body: Incoming,
    lease: Option<Lease>,
    ended: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")
            .and_then(|v| v.trim().parse().ok())
    }

    fn mark_ended(&mut self) {
        self.ended = true;
        if let Some(l) = self.lease.as_mut() {
            l.reusable = true;
        }
    }

    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        if self.ended {
            return Ok(None);
        }
        loop {
            match self.body.frame().await {
                None => {
                    self.mark_ended();
                    return Ok(None);
                }
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        if !d.is_empty() {
                            // The last bytes of a body of known length:
                            // its connection can serve the next request
                            // even if the caller, having all it asked
                            // for, never asks again.
                            if self.body.is_end_stream() {
                                self.mark_ended();
                            }
                            return Ok(Some(d));
                        }
                    }
                }
                Some(Err(e)) => {
                    return Err(HttpError::Network(format!(
                        "{}: connection lost while receiving: {}",
                        self.url,
                        error_chain(&e)
                    )))
                }
            }
        }
    }

    /// The whole body, refusing more than `limit` bytes.
    pub async fn bytes(mut self, limit: usize) -> Result<Vec<u8>, HttpError> {
        let mut out = Vec::new();
        while let Some(c) = self.chunk().await? {
            if out.len() + c.len() > limit {
                return Err(HttpError::Remote(format!(
                    "{}: the response is larger than {limit} bytes",
                    self.url
                )));
            }
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    /// Turn an error status into an error naming the URL.
    pub fn error_for_status(self) -> Result<Response, HttpError> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(HttpError::status(&self.url.to_string(), self.status))
        }
    }
}

/// An empty request body.
pub fn empty() -> Body {
    http_body_util::Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A request body that streams `len` bytes of `file` from `offset`,
/// calling `progress` with each piece's size as it is handed to the
/// connection.
pub fn file_body(
    file: Arc<std::fs::File>,
    offset: u64,
    len: u64,
    progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
) -> Body {
    file_body_checked(file, offset, len, progress, None)
}

/// Asked once, after a body's last bytes were read from its file and
/// before they are handed to the connection: an error ends the body with
/// that error instead of them, so the request is cut short (HTTP/1.1:
/// the connection is closed before `Content-Length` is reached; h2:
/// `RST_STREAM`) and a server that takes files whole never completes it.
/// ferry checks there that the file did not change while it was read
/// (issue #24: a source rewritten in place during an upload).
pub type EndCheck = Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

/// [`file_body`] whose last piece is handed out only if `check` (when
/// given) says so ([`EndCheck`]).
pub fn file_body_checked(
    file: Arc<std::fs::File>,
    offset: u64,
    len: u64,
    progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    check: Option<EndCheck>,
) -> Body {
    FileBody {
        file,
        at: offset,
        left: len,
        progress,
        piece: if len < SMALL_BODY {
            SMALL_PIECE
        } else {
            UPLOAD_PIECE
        },
        check,
    }
    .boxed_unsync()
}

/// A request body fed piece by piece through a channel (a copy from
/// another server streaming into a PUT). `len`, when known, is sent as
/// Content-Length. The channel closing early ends the body short, which
/// the server sees as a cut upload.
pub fn channel_body(rx: tokio::sync::mpsc::Receiver<Bytes>, len: Option<u64>) -> Body {
    ChannelBody { rx, left: len }.boxed_unsync()
}

struct ChannelBody {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    left: Option<u64>,
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => {
                if let Some(l) = self.left.as_mut() {
                    *l = l.saturating_sub(b.len() as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Poll::Ready(None) if self.left.is_some_and(|l| l > 0) => Poll::Ready(Some(Err(
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the source ended early"),
            ))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(l) => SizeHint::with_exact(l),
            None => SizeHint::default(),
        }
    }
}

struct FileBody {
    file: Arc<std::fs::File>,
    at: u64,
    left: u64,
    progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    /// Bytes read per body frame.
    piece: u64,
    /// Asked before the last piece goes ([`EndCheck`]).
    check: Option<EndCheck>,
}

/// Bytes read from the file per body frame.
const UPLOAD_PIECE: u64 = 256 * 1024;
/// Bodies under `SMALL_BODY` are read `SMALL_PIECE` at a time: many of
/// them are in flight at once (`-P`), each with up to a send buffer and a
/// piece read ahead of the server's window (ferry cp's RSS for 100 x 1 MB
/// to nginx: 86-111 MB with 256 KiB pieces, 61-65 MB with 64 KiB).
const SMALL_BODY: u64 = 4 << 20;
const SMALL_PIECE: u64 = 64 * 1024;

impl http_body::Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(self.piece) as usize;
        // The piece starts half a page off the page offset rustls copies
        // it to (crate::tls::PLAINTEXT_PAGE_OFFSET).
        let mut buf: Vec<u8> = Vec::with_capacity(n + 4096);
        let skew = crate::tls::skew_to(&buf, 0, crate::tls::PLAINTEXT_PAGE_OFFSET);
        buf.resize(skew, 0);
        // A local read from the page cache: cheap enough to do in place,
        // into the spare capacity (zeroing the piece first costs a pass
        // over it; ferry-engine's `local::append_at` measured 6% of an SFTP
        // upload's client for that).
        let read = loop {
            let Some(spare) = buf.spare_capacity_mut().get_mut(..n) else {
                break Err(std::io::Error::other("internal: upload buffer"));
            };
            match rustix::io::pread(&*self.file, spare, self.at) {
                Ok((init, _)) => break Ok(init.len()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => break Err(std::io::Error::from(e)),
            }
        };
        match read {
            Ok(0) => Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file shrank during the upload",
            )))),
            Ok(k) => {
                // SAFETY: pread initialised the first `k <= n` bytes of the
                // spare capacity, which holds `n`.
                unsafe { buf.set_len(skew + k) };
                // The last bytes are read before the file is asked: a
                // write that could have changed any byte read so far
                // shows in its time by now.
                if k as u64 == self.left {
                    if let Some(check) = &self.check {
                        if let Err(e) = check() {
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
                self.at += k as u64;
                self.left -= k as u64;
                if let Some(p) = &self.progress {
                    p(k as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf).slice(skew..)))))
            }
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}
