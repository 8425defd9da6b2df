//! The HTTP side of `ferry serve`: HTTPS with HTTP/1.1 and HTTP/2 chosen by
//! ALPN, and plain HTTP when asked.
//!
//! A request flows: socket → TLS ([`tls`], rustls) → hyper (h1 or h2 on one
//! port, hyper-util's auto builder) → [`auth`] (the token, before anything
//! touches the disk) → the method → the path, percent-decoded and confined
//! by [`Root`](crate::Root) → [`files`] (GET, HEAD, listings) or [`upload`]
//! (PUT, DELETE, MKCOL). [`range`] and [`cond`] are the pure parts of
//! GET: byte ranges and conditional requests. docs/internals/server.md has
//! the whole picture, the JSON listing format and the limits.
pub mod auth;
pub mod body;
pub mod cond;
pub mod digest;
pub mod files;
pub mod idle;
pub mod listing;
pub mod range;
pub mod tls;
pub mod upload;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;

use crate::confine::{ConfineError, Resolved};
use crate::Shared;
use body::RespBody;

/// How long a client has to finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/1.1: how long a client has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/1.1: the most a request's head may take in the read buffer, and
/// the read buffer's size (which also bounds one read of an upload).
pub const H1_MAX_BUF: usize = 256 * 1024;
/// HTTP/1.1: the most header fields in one request.
pub const H1_MAX_HEADERS: usize = 100;
/// HTTP/2: how much a client may send on one stream before we read it.
/// 64 MiB, as much as the whole connection: h2 returns window when half
/// of it is used, so a stream keeps 32-64 MiB in flight, an upload of 1.6
/// GB/s over 20 ms of RTT. With 16 MiB an upload from ferry cp over the
/// bench's 20 ms link ran at 475 MB/s (to nginx: 1043).
pub const H2_STREAM_WINDOW: u32 = 64 * 1024 * 1024;
/// HTTP/2: the same for the whole connection (and so the most a
/// connection's unread uploads can hold).
pub const H2_CONN_WINDOW: u32 = 64 * 1024 * 1024;
/// HTTP/2: the largest DATA frame we accept (1 MiB; the peer may send less).
pub const H2_MAX_FRAME: u32 = 1024 * 1024;
/// HTTP/2: requests in progress at once on one connection. 100, as most
/// servers: each stream may hold about 1.5 MiB (a chunk read ahead, a chunk
/// waiting for the client's window), so this bounds a connection's memory
/// to about 150 MiB; `curl --parallel` and aria2 stay well below it.
pub const H2_MAX_STREAMS: u32 = 100;
/// HTTP/2: the most a request's header block may decode to.
pub const H2_MAX_HEADER_LIST: u32 = 64 * 1024;
/// HTTP/2: response data buffered per stream before hyper waits for the
/// client's window.
pub const H2_SEND_BUF: usize = 1024 * 1024;
/// HTTP/2: a PING when the connection is idle this long; no answer within
/// [`H2_KEEPALIVE_TIMEOUT`] closes it.
pub const H2_KEEPALIVE: Duration = Duration::from_secs(30);
pub const H2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The MKCOL method (RFC 4918 §9.3).
const MKCOL: &str = "MKCOL";

/// One HTTP listener's service: TLS (when configured) and the request
/// handler over the served root.
pub struct HttpService {
    shared: Arc<Shared>,
    token: auth::Token,
    tls: Option<tokio_rustls::TlsAcceptor>,
    builder: auto::Builder<TokioExecutor>,
}

impl HttpService {
    /// `tls`: certificate chain and private key, PEM. `None`: plain HTTP.
    pub fn new(shared: Arc<Shared>, tls: Option<(&[u8], &[u8])>) -> std::io::Result<HttpService> {
        let tls = match tls {
            Some((cert, key)) => Some(tokio_rustls::TlsAcceptor::from(tls::server_config(
                cert, key,
            )?)),
            None => None,
        };
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(shared.header_timeout)
            .max_buf_size(H1_MAX_BUF)
            .max_headers(H1_MAX_HEADERS)
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .initial_stream_window_size(H2_STREAM_WINDOW)
            .initial_connection_window_size(H2_CONN_WINDOW)
            .max_frame_size(H2_MAX_FRAME)
            .max_concurrent_streams(H2_MAX_STREAMS)
            .max_header_list_size(H2_MAX_HEADER_LIST)
            .max_send_buf_size(H2_SEND_BUF)
            .keep_alive_interval(H2_KEEPALIVE)
            .keep_alive_timeout(H2_KEEPALIVE_TIMEOUT);
        let token = auth::Token::new(&shared.token);
        if shared.token.is_empty() {
            tracing::warn!("the HTTP token is empty: every request that needs it is refused");
        }
        Ok(HttpService {
            shared,
            token,
            tls,
            builder,
        })
    }

    /// [`HANDSHAKE_TIMEOUT`], or the header timeout when that is shorter.
    fn handshake_timeout(&self) -> Duration {
        HANDSHAKE_TIMEOUT.min(self.shared.header_timeout)
    }

    /// Serve one accepted connection until it closes.
    pub async fn serve(self: Arc<Self>, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let socket = idle::keep_socket(&stream);
        self.serve_stream(stream, peer).await;
        if let Some(s) = socket {
            idle::lingering_close(s).await;
        }
    }

    async fn serve_stream(self: Arc<Self>, stream: tokio::net::TcpStream, peer: SocketAddr) {
        match &self.tls {
            Some(acceptor) => {
                let tls =
                    match tokio::time::timeout(self.handshake_timeout(), acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, "TLS handshake failed: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                self.clone().serve_io(tls, peer).await;
            }
            None => self.clone().serve_io(stream, peer).await,
        }
    }

    async fn serve_io<S>(self: Arc<Self>, stream: S, peer: SocketAddr)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let this = self.clone();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let this = this.clone();
            async move { Ok::<_, Infallible>(this.handle(req, peer).await) }
        });
        let (stream, seen) = idle::FirstByte::new(stream);
        let conn = self.builder.serve_connection(TokioIo::new(stream), svc);
        // hyper-util's auto builder waits for the first bytes (to tell h1
        // from h2) without a timeout, and h1's header timeout only starts
        // after that: a client that connects and says nothing would hold a
        // connection slot forever.
        let header_timeout = self.shared.header_timeout;
        let first = tokio::time::sleep(header_timeout);
        tokio::pin!(conn, first);
        let mut waiting = true;
        let mut stopping = self.shared.stopping.clone();
        let mut closing = *stopping.borrow_and_update();
        if closing {
            conn.as_mut().graceful_shutdown();
        }
        loop {
            tokio::select! {
                _ = stopping.changed(), if !closing => {
                    // Server shutdown: finish what is in progress, take no
                    // new requests, close idle keep-alive connections now.
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                r = &mut conn => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, "HTTP connection ended: {e}");
                    }
                    return;
                }
                _ = &mut first, if waiting => {
                    if !seen.load(std::sync::atomic::Ordering::Acquire) {
                        tracing::debug!(%peer, "HTTP: nothing sent within {header_timeout:?}; closing");
                        return;
                    }
                    waiting = false;
                }
            }
        }
    }

    /// One request: authentication, then the method, then the path.
    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<RespBody> {
        let method = req.method().clone();
        let read = method == Method::GET || method == Method::HEAD || method == Method::OPTIONS;
        let auth = self.token.check(req.headers());
        if auth != auth::Auth::Ok && !(read && self.shared.public) {
            // Said before the path is even decoded: a refused client learns
            // nothing about what exists.
            tracing::warn!(%peer, %method, "HTTP request refused: {}", auth.describe());
            return refuse(req, unauthorized()).await;
        }
        let resp = match method.as_str() {
            "GET" | "HEAD" => files::get(&self.shared, req).await,
            "OPTIONS" => refuse(req, self.options()).await,
            "PUT" | "DELETE" | MKCOL => {
                if auth != auth::Auth::Ok {
                    refuse(req, unauthorized()).await
                } else if !self.shared.writable {
                    let r = text(
                        StatusCode::FORBIDDEN,
                        "read-only: this server was started without --writable\n",
                    );
                    refuse(req, r).await
                } else if method == Method::PUT {
                    upload::put(&self.shared, req, peer).await
                } else if method == Method::DELETE {
                    let r = upload::delete(&self.shared, &req).await;
                    refuse(req, r).await
                } else {
                    let r = upload::mkcol(&self.shared, &req).await;
                    refuse(req, r).await
                }
            }
            _ => {
                let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
                r.headers_mut().insert(ALLOW, self.allow());
                refuse(req, r).await
            }
        };
        tracing::debug!(%peer, %method, status = resp.status().as_u16(), "HTTP request");
        resp
    }

    fn allow(&self) -> HeaderValue {
        HeaderValue::from_static(if self.shared.writable {
            "GET, HEAD, OPTIONS, PUT, DELETE, MKCOL"
        } else {
            "GET, HEAD, OPTIONS"
        })
    }

    fn options(&self) -> Response<RespBody> {
        let mut r = Response::new(body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        r.headers_mut().insert(ALLOW, self.allow());
        if self.shared.writable {
            r.headers_mut()
                .insert(upload::PUT_RANGES, HeaderValue::from_static("bytes"));
            // RFC 7694: the codings a request body may have.
            r.headers_mut().insert(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_static(upload::ACCEPTED_CODINGS),
            );
        }
        r
    }
}

/// How much of an unwanted request body is read and thrown away after an
/// early answer...
pub const DRAIN_MAX: usize = 16 * 1024 * 1024;
/// ...and for how long at most.
pub const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Answer `resp` to a request whose body we do not want, and read that
/// body away (bounded) in the background instead of dropping it.
///
/// Dropping it goes wrong in practice: over HTTP/1.1 the server closes
/// with unread data, the kernel sends a TCP reset, and the client loses
/// the answer (curl: "Empty reply from server"); over h2 the stream is
/// reset while curl 7.88 is still sending, and it reports a framing error
/// instead of the 401 or 403. nginx reads the body away for the same
/// reason (`lingering_close`). A client that sent `Expect: 100-continue`
/// has not sent the body and never will: it is answered at once.
pub(crate) async fn refuse(req: Request<Incoming>, resp: Response<RespBody>) -> Response<RespBody> {
    use http_body_util::BodyExt;
    let expects = req
        .headers()
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let mut body = req.into_body();
    if expects || http_body::Body::is_end_stream(&body) {
        return resp;
    }
    tokio::spawn(async move {
        let drain = async {
            let mut n = 0usize;
            while let Some(Ok(f)) = body.frame().await {
                if let Some(d) = f.data_ref() {
                    n += d.len();
                    if n > DRAIN_MAX {
                        break;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
    });
    resp
}

/// A short plain-text answer.
pub(crate) fn text(status: StatusCode, msg: &str) -> Response<RespBody> {
    let mut r = Response::new(body::full(msg.to_string()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CONTENT_LENGTH, HeaderValue::from(msg.len()));
    r
}

fn unauthorized() -> Response<RespBody> {
    let mut r = text(
        StatusCode::UNAUTHORIZED,
        "401 unauthorized: send the server's token (Authorization: Bearer TOKEN)\n",
    );
    let h = r.headers_mut();
    h.append(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"ferry\""),
    );
    h.append(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"ferry\", charset=\"UTF-8\""),
    );
    r
}

/// A header value from text we made (ASCII); never panics.
pub(crate) fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The request's path, percent-decoded and confined. Also says whether it
/// ended in `/`. Resolving touches the disk, so it runs on the blocking
/// pool.
pub(crate) async fn resolve(
    shared: &Shared,
    uri: &Uri,
    no_follow: bool,
) -> Result<(Resolved, bool), Response<RespBody>> {
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(uri.path()).collect();
    if !decoded.starts_with(b"/") {
        // `*` (OPTIONS) or an authority-form target: no file.
        return Err(text(StatusCode::BAD_REQUEST, "bad request target\n"));
    }
    let trailing = decoded.ends_with(b"/");
    let root = shared.root.clone();
    let r = crate::fskind::run(shared.inline_metadata, move || {
        root.resolve(&decoded, no_follow)
    })
    .await;
    match r {
        Ok(Ok(res)) => Ok((res, trailing)),
        Ok(Err(e)) => Err(refusal(&e)),
        Err(e) => Err(text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("internal error: {e}\n"),
        )),
    }
}

/// A confinement refusal as an HTTP answer. Messages name only the
/// client's own path, never the real one.
pub(crate) fn refusal(e: &ConfineError) -> Response<RespBody> {
    match e {
        ConfineError::BadName(_) => text(
            StatusCode::BAD_REQUEST,
            &format!("{e} (NUL or not UTF-8)\n"),
        ),
        ConfineError::Escapes(_) => text(StatusCode::FORBIDDEN, &format!("{e}\n")),
        ConfineError::NotFound(_) => text(StatusCode::NOT_FOUND, &format!("{e}\n")),
        ConfineError::Io(_) => {
            tracing::warn!("HTTP path resolution: {e}");
            text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")
        }
    }
}

/// An I/O error on `shown` (the client's path) as an HTTP answer.
pub(crate) fn io_refusal(e: &std::io::Error, shown: &str) -> Response<RespBody> {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound | K::NotADirectory => text(
            StatusCode::NOT_FOUND,
            &format!("{shown}: no such file or directory\n"),
        ),
        K::PermissionDenied => text(
            StatusCode::FORBIDDEN,
            &format!("{shown}: permission denied\n"),
        ),
        // A full disk is the operator's to fix, not a server fault a retry
        // cures: 507 (RFC 4918) says which.
        K::StorageFull | K::QuotaExceeded => text(
            StatusCode::INSUFFICIENT_STORAGE,
            &format!("{shown}: no space left on the server's disk\n"),
        ),
        K::ReadOnlyFilesystem => text(
            StatusCode::FORBIDDEN,
            &format!("{shown}: read-only file system\n"),
        ),
        _ => {
            tracing::warn!("HTTP {shown}: {e}");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("{shown}: {}\n", e.kind()),
            )
        }
    }
}
