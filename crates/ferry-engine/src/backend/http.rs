//! HTTP(S) as a backend: GET with `Range` for reads (any offset, so big
//! files go in parallel ranges), HEAD for `stat`, ferry serve's JSON or an
//! HTML index for listings, PUT for writes (streamed from the source) and
//! MKCOL for directories (WebDAV: nginx's dav module, ferry serve).
//!
//! A PUT becomes visible under its name only when complete on both
//! servers ferry is tested with (nginx writes a temporary file and
//! renames it; so does ferry serve), so the engine writes the final name
//! directly (`atomic_write`) and there is no rename.
use async_trait::async_trait;
use bytes::Bytes;
use ferry_http::{listing, Client, HeaderMap, HeaderValue, Method, StatusCode, Url};
use percent_encoding::{AsciiSet, CONTROLS};

use super::{
    path, Backend, BackendInfo, ByteStream, Capabilities, Entry, EntryKind, Sink, WriteMode,
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
/// Pieces queued between the source and a PUT body.
const PUT_QUEUE: usize = 16;

pub struct Http {
    client: Client,
    /// The URL as given: its query string (a signed URL) is kept for the
    /// path it names.
    root: Url,
    root_path: Vec<u8>,
    /// No answer for this long: the connection stalled (`--timeout`).
    stall: std::time::Duration,
}

impl Http {
    pub fn open(
        spec: &HttpSpec,
        opts: &CopyOptions,
    ) -> Result<(Http, Vec<u8>, bool), TransferError> {
        let client = crate::http::client(opts)?;
        // The command line's credentials go to the origins it names.
        client.trust(&spec.url);
        let root_path = spec.url.decoded_path();
        let dir = spec.url.is_dir();
        Ok((
            Http {
                client,
                root: spec.url.clone(),
                root_path: root_path.clone(),
                stall: opts.timeout,
            },
            root_path,
            dir,
        ))
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
            max_ranges: 4,
        }
    }
    fn endpoint_key(&self) -> String {
        self.origin()
    }
    fn info(&self) -> BackendInfo {
        BackendInfo {
            connections: self.client.connections().max(1),
            cipher: None,
            chunk: 0,
            protocol: Some(crate::http::protocol(&self.client, self.root.https).into()),
        }
    }

    async fn stat(&self, p: &[u8]) -> Result<Option<Entry>, TransferError> {
        let url = self.url(p);
        let name = path::basename(p).to_vec();
        if url.is_dir() {
            return Ok(Some(Entry::dir(name)));
        }
        let resp = self
            .client
            .send(Method::HEAD, &url, &HeaderMap::new(), None)
            .await?;
        if resp.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let resp = resp.error_for_status()?;
        if resp.url.is_dir() {
            return Ok(Some(Entry::dir(name)));
        }
        Ok(Some(Entry {
            name,
            kind: EntryKind::File,
            size: resp.content_length(),
            mtime: crate::http::last_modified(&resp.headers).map(i64::from),
            mode: None,
        }))
    }

    /// The digest a server announces on HEAD (`Repr-Digest`; ferry serve
    /// sends BLAKE3 once it has hashed the file), when it is the hash
    /// asked for; else the caller reads the file.
    async fn hash(
        &self,
        p: &[u8],
        algo: super::HashAlgo,
    ) -> Result<Option<Vec<u8>>, TransferError> {
        let url = self.url(p);
        let resp = self
            .client
            .send(Method::HEAD, &url, &HeaderMap::new(), None)
            .await?
            .error_for_status()?;
        let want = ferry_http::digest::Algo::from(algo);
        Ok(ferry_http::digest::expected(&resp.headers)
            .filter(|e| e.algo == want)
            .map(|e| e.sum.to_vec()))
    }

    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        let url = self.url(dir).as_dir();
        let Some((_, entries)) = crate::http::list(&self.client, &url, self.stall).await? else {
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
        let url = self.url(p);
        let mut h = HeaderMap::new();
        // No content coding: the bytes are the file's, ranges count them.
        h.insert("accept-encoding", HeaderValue::from_static("identity"));
        let ranged = offset > 0 || len.is_some();
        if ranged {
            let range = match len {
                Some(0) => {
                    return Ok(Box::new(HttpRead {
                        resp: None,
                        left: 0,
                        display: self.display(p),
                        check: None,
                    }))
                }
                Some(l) => format!("bytes={offset}-{}", offset + l - 1),
                None => format!("bytes={offset}-"),
            };
            h.insert(
                "range",
                HeaderValue::from_str(&range)
                    .map_err(|e| TransferError::Local(format!("internal: {e}")))?,
            );
        }
        let resp = self.client.get(&url, &h).await?.error_for_status()?;
        let total = resp.content_length();
        let left = match (resp.status, len) {
            (StatusCode::PARTIAL_CONTENT, Some(l)) => l,
            (StatusCode::PARTIAL_CONTENT, None) => total.unwrap_or(u64::MAX),
            (_, _) if offset > 0 => {
                return Err(TransferError::Remote(format!(
                "{}: the server ignored the byte range asked for (HTTP {}); copy with --streams 1",
                self.display(p),
                resp.status.as_u16()
            )))
            }
            (_, Some(l)) => l,
            (_, None) => total.unwrap_or(u64::MAX),
        };
        // The whole file in one response: check it against the digest
        // the server announced (ferry serve's Repr-Digest), if any.
        let whole = match resp.status {
            StatusCode::PARTIAL_CONTENT => {
                offset == 0 && content_range_total(&resp).is_some_and(|t| Some(t) == len)
            }
            _ => offset == 0,
        };
        let check = ferry_http::digest::expected(&resp.headers)
            .filter(|_| whole)
            .map(|e| (e, ferry_http::digest::Hasher::new(e.algo)));
        Ok(Box::new(HttpRead {
            resp: Some(resp),
            left,
            display: self.display(p),
            check,
        }))
    }

    async fn write(
        &self,
        p: &[u8],
        _mode: WriteMode,
        size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        let url = self.url(p);
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(PUT_QUEUE);
        let body = std::sync::Mutex::new(Some(rx));
        let client = self.client.clone();
        let display = self.display(p);
        let d2 = display.clone();
        let task = tokio::spawn(async move {
            // The body can be made once: a second attempt (a redirect, a
            // stale connection) gets a body that fails at once instead of
            // an empty file.
            let make = move || match body.lock().ok().and_then(|mut b| b.take()) {
                Some(rx) => ferry_http::channel_body(rx, size),
                None => ferry_http::channel_body(tokio::sync::mpsc::channel(1).1, Some(1)),
            };
            let resp = client
                .send(Method::PUT, &url, &HeaderMap::new(), Some(&make))
                .await?;
            if !resp.status.is_success() {
                return Err(TransferError::Remote(format!(
                    "{d2}: the server refused the upload (HTTP {})",
                    resp.status.as_u16()
                )));
            }
            let _ = resp.bytes(64 * 1024).await;
            Ok(())
        });
        Ok(Box::new(HttpPut {
            tx: Some(tx),
            task: Some(task),
            display,
        }))
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
            let resp = self
                .client
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

/// `Content-Range: bytes A-B/TOTAL` -> TOTAL.
fn content_range_total(resp: &ferry_http::Response) -> Option<u64> {
    let v = resp.header("content-range")?.trim();
    v.strip_prefix("bytes ")?
        .split_once('/')?
        .1
        .trim()
        .parse()
        .ok()
}

struct HttpRead {
    resp: Option<ferry_http::Response>,
    left: u64,
    display: String,
    /// The digest announced for the whole file, and the bytes' hash so far.
    check: Option<(ferry_http::digest::Expected, ferry_http::digest::Hasher)>,
}

impl HttpRead {
    /// At the end of the body: the bytes against the announced digest.
    fn verify(&mut self) -> Result<(), TransferError> {
        let Some((want, h)) = self.check.take() else {
            return Ok(());
        };
        let got = h.finalize();
        if got == want.sum {
            return Ok(());
        }
        // A network error: the range is sent again (a few times), and the
        // final name is left alone.
        Err(TransferError::Network(format!(
            "{}: the data does not match the server's digest ({} announced {}, received {})",
            self.display,
            want.algo.name(),
            ferry_http::digest::to_base64(&want.sum),
            ferry_http::digest::to_base64(&got)
        )))
    }
}

#[async_trait]
impl ByteStream for HttpRead {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.left == 0 {
            self.verify()?;
            return Ok(None);
        }
        let Some(resp) = self.resp.as_mut() else {
            return Ok(None);
        };
        match resp.chunk().await? {
            Some(mut b) => {
                if b.len() as u64 > self.left {
                    b.truncate(self.left as usize);
                }
                if self.left != u64::MAX {
                    self.left -= b.len() as u64;
                }
                if let Some((_, h)) = self.check.as_mut() {
                    h.update(&b);
                }
                Ok(Some(b))
            }
            None if self.left == u64::MAX => {
                self.verify()?;
                Ok(None)
            }
            None => Err(TransferError::Network(format!(
                "{}: the response ended {} bytes early",
                self.display, self.left
            ))),
        }
    }
}

struct HttpPut {
    tx: Option<tokio::sync::mpsc::Sender<Bytes>>,
    task: Option<tokio::task::JoinHandle<Result<(), TransferError>>>,
    display: String,
}

impl HttpPut {
    async fn outcome(&mut self) -> Result<(), TransferError> {
        match self.task.take() {
            Some(t) => t.await.map_err(|e| {
                TransferError::Network(format!("{}: the upload task failed: {e}", self.display))
            })?,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Sink for HttpPut {
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError> {
        let sent = match &self.tx {
            Some(tx) => tx.send(data).await.is_ok(),
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

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        self.tx = None;
        self.outcome().await
    }
}

impl Drop for HttpPut {
    fn drop(&mut self) {
        // Abandoned: cut the request, so the server never completes it.
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
