//! S3 (and S3-compatible stores) as a backend: HEAD for `stat`,
//! ListObjectsV2 for listings (prefixes as directories), ranged GETs for
//! reads, and uploads as one PUT for small objects or a multipart upload
//! whose parts go up several at once, buffered in the sink in bounded
//! memory. Requests are signed here (`crate::s3::sigv4`) and sent over
//! ferry's own HTTP client (connections, h1/h2, TLS as for https://).
//!
//! An object appears only when its PUT or CompleteMultipartUpload
//! succeeds, so the engine writes the final key directly
//! (`atomic_write`); a failed, cancelled or dropped multipart upload is
//! aborted, so no parts are left behind to be paid for. Modification
//! times live in `x-amz-meta-mtime` (seconds, as rclone keeps them).
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use ferry_http::{Client, HeaderMap, HeaderValue, Method, Response, StatusCode, Url};
use futures_util::stream::{FuturesUnordered, StreamExt};
use http_body::{Frame, SizeHint};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::s3_creds::CredSource;
use super::{
    Backend, BackendInfo, ByteStream, Capabilities, Entry, EntryKind, HashAlgo, ReadInfo, Sink,
    WriteMode,
};
use crate::error::TransferError;
use crate::location::S3Spec;
use crate::s3::{self, sigv4, xml, Checksum, Config, ErrorClass};
use crate::CopyOptions;

/// Parts buffered or in flight over all files of a backend at once: with
/// the default 8 MiB parts, at most 256 MiB of upload buffers.
const PARTS_IN_FLIGHT: usize = 32;
/// Error bodies read at most.
const ERROR_BODY: usize = 64 * 1024;
/// Listing pages read at most (ListObjectsV2 pages hold 1,000 keys).
const LIST_BODY: usize = 16 << 20;

struct Inner {
    client: Client,
    /// Clients of their own threads for small files, taken from the
    /// engine's queue there ([`Backend::homes`]): a small object's GET, its
    /// body and the local file's write stay on one thread, as HTTP's
    /// shards do (docs/internals/s3.md). Big files, listings and uploads
    /// in parts go over `client`, on the engine's runtime.
    shards: Vec<Client>,
    threads: Vec<super::OwnThread>,
    /// This backend's number among the HTTP and S3 backends, for
    /// [`super::http::HERE`].
    id: usize,
    cfg: Config,
    /// What requests are signed with (`cfg.creds`, or what the provider
    /// or the chain's source gave last).
    creds: CredSource,
    bucket: String,
    parts: Arc<Semaphore>,
    /// Aborts of dropped uploads, awaited by `close`.
    aborts: Mutex<Vec<JoinHandle<()>>>,
    /// `--resume`: continue an unfinished multipart upload of the same
    /// key, and keep (not abort) one that is cut short.
    resume: bool,
}

pub struct S3 {
    inner: Arc<Inner>,
}

/// A request's parts before signing.
struct Req<'a> {
    method: Method,
    key: &'a str,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Option<PartBody>,
}

impl<'a> Req<'a> {
    fn new(method: Method, key: &'a str) -> Req<'a> {
        Req {
            method,
            key,
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
        }
    }
    fn q(mut self, k: &str, v: impl Into<String>) -> Self {
        self.query.push((k.to_string(), v.into()));
        self
    }
    fn h(mut self, k: &str, v: impl Into<String>) -> Self {
        self.headers.push((k.to_string(), v.into()));
        self
    }
}

fn key_of(path: &[u8]) -> Result<&str, TransferError> {
    let s = std::str::from_utf8(path).map_err(|_| {
        TransferError::Usage(format!(
            "{}: S3 keys are UTF-8; rename the file",
            String::from_utf8_lossy(path)
        ))
    })?;
    Ok(s.trim_start_matches('/'))
}

impl S3 {
    /// The backend's path of `spec`, and whether it names a directory.
    pub fn path_of(spec: &S3Spec) -> (Vec<u8>, bool) {
        (format!("/{}", spec.key).into_bytes(), spec.trailing_slash())
    }

    pub async fn open(
        spec: &S3Spec,
        opts: &CopyOptions,
    ) -> Result<(S3, Vec<u8>, bool), TransferError> {
        // Nothing from the process environment: what the application put
        // in the options (the binary puts the AWS variables there).
        let cfg = s3::config(&opts.s3).map_err(TransferError::Usage)?;
        let mut h = opts.http.clone();
        // Requests carry their own signature: no netrc, -u or --token.
        h.netrc = false;
        h.user = None;
        h.token = None;
        if h.tls.cacert.is_none() {
            h.tls.cacert = cfg.ca_bundle.clone();
        }
        h.h1_connections = opts
            .files_in_flight()
            .max(cfg.concurrency * 2)
            .max(opts.streams.unwrap_or(1));
        let client = Client::new(h)?;
        // STS and the container endpoint are asked over the same client:
        // the same CA bundle, pins and proxies.
        let creds = CredSource::open(&cfg, &client).await?;
        let id = super::http::BACKENDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let n = shards(opts);
        let threads = (0..n)
            .map(|i| super::http::shard_thread("s3", id, i))
            .collect::<Result<Vec<_>, _>>()?;
        let per_shard = opts.files_in_flight().div_ceil(n.max(1)).max(1);
        let shards = threads
            .iter()
            .map(|t| client.sibling_on(per_shard, Some(t.rt.clone())))
            .collect();
        let (path, dir) = Self::path_of(spec);
        Ok((
            S3 {
                inner: Arc::new(Inner {
                    client,
                    shards,
                    threads,
                    id,
                    cfg,
                    creds,
                    bucket: spec.bucket.clone(),
                    parts: Arc::new(Semaphore::new(PARTS_IN_FLIGHT)),
                    aborts: Mutex::new(Vec::new()),
                    resume: opts.resume,
                }),
            },
            path,
            dir,
        ))
    }
}

/// Threads for small files: one per core (at most 4) when several files
/// move at once, else none.
fn shards(opts: &CopyOptions) -> usize {
    if opts.files_in_flight() < 2 {
        return 0;
    }
    super::http::per_core(opts.files_in_flight())
}

impl Inner {
    /// The client for a request made here: on one of this backend's
    /// threads, that thread's own; elsewhere the engine runtime's.
    fn client_here(&self) -> &Client {
        super::http::HERE
            .get()
            .filter(|&(id, _)| id == self.id)
            .and_then(|(_, i)| self.shards.get(i))
            .unwrap_or(&self.client)
    }

    fn display_key(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    fn url(&self, key: &str, query: &[(String, String)]) -> (Url, String) {
        let (host, base) = self.cfg.bucket_base(&self.bucket);
        let path = format!("{base}/{}", sigv4::encode_key_path(key));
        let q = sigv4::canonical_query(query);
        let full = if q.is_empty() {
            path.clone()
        } else {
            format!("{path}?{q}")
        };
        (
            Url {
                https: self.cfg.https,
                host,
                port: self.cfg.port,
                path: full,
                user: None,
                password: None,
            },
            path,
        )
    }

    /// Sign and send one request. When the credentials can be fetched
    /// again (a provider, `credential_process`) and the store answers
    /// 400 or 403 `ExpiredToken` (or `TokenRefreshRequired`), they are
    /// fetched once more at once and the request is sent again, once; any
    /// other 400 or 403 of such a source comes back as the error (its
    /// body was read to tell). A HEAD's answer has no body to tell by.
    async fn send(&self, r: Req<'_>) -> Result<Response, TransferError> {
        let mut creds = self.creds.get().await?;
        let mut renewed = false;
        loop {
            let resp = self.send_signed(&r, creds.as_ref()).await?;
            let refused =
                resp.status == StatusCode::BAD_REQUEST || resp.status == StatusCode::FORBIDDEN;
            if !refused || r.method == Method::HEAD || !self.creds.refreshable() {
                return Ok(resp);
            }
            let status = resp.status.as_u16();
            let retry_after = resp.header("retry-after").map(str::to_string);
            let body = resp.bytes(ERROR_BODY).await.unwrap_or_default();
            let code = xml::error(&body).map(|e| e.code).unwrap_or_default();
            match &creds {
                Some(stale) if !renewed && s3::expired_credentials(&code) => {
                    creds = self.creds.renew(stale).await?;
                    renewed = true;
                }
                _ => {
                    let e = self.error(status, &body, r.key, retry_after);
                    if renewed && s3::expired_credentials(&code) {
                        return Err(TransferError::from_kind(
                            e.kind(),
                            format!("{e}; new credentials were fetched once, and were refused as expired too"),
                        ));
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Sign `r` with `creds` (none: unsigned) and send it.
    async fn send_signed(
        &self,
        r: &Req<'_>,
        creds: Option<&Arc<sigv4::Credentials>>,
    ) -> Result<Response, TransferError> {
        let (url, path) = self.url(r.key, &r.query);
        let when = sigv4::AmzDate::now();
        let mut signed: Vec<(String, String)> = r.headers.clone();
        signed.push(("host".into(), url.authority()));
        signed.push(("x-amz-date".into(), when.datetime.clone()));
        signed.push((
            "x-amz-content-sha256".into(),
            sigv4::UNSIGNED_PAYLOAD.into(),
        ));
        if let Some(t) = creds.and_then(|c| c.session_token.clone()) {
            signed.push(("x-amz-security-token".into(), t));
        }
        let mut headers = HeaderMap::new();
        if let Some(c) = creds {
            let auth = sigv4::authorization(
                &sigv4::Request {
                    method: r.method.as_str(),
                    path: &path,
                    query: &r.query,
                    headers: &signed,
                    payload_hash: sigv4::UNSIGNED_PAYLOAD,
                },
                c,
                &self.cfg.region,
                &when,
            );
            let mut v = HeaderValue::from_str(&auth)
                .map_err(|e| TransferError::Usage(format!("S3 credentials: {e}")))?;
            v.set_sensitive(true);
            headers.insert("authorization", v);
        }
        for (k, v) in &signed {
            if k == "host" {
                continue;
            }
            let hn = http_name(k)?;
            let hv = HeaderValue::from_str(v).map_err(|_| {
                TransferError::Usage(format!(
                    "{}: a header value S3 cannot carry ({k})",
                    self.display_key(r.key)
                ))
            })?;
            headers.insert(hn, hv);
        }
        match &r.body {
            Some(b) => {
                let make = || b.clone().boxed();
                Ok(self
                    .client_here()
                    .send(r.method.clone(), &url, &headers, Some(&make))
                    .await?)
            }
            None => Ok(self
                .client_here()
                .send(r.method.clone(), &url, &headers, None)
                .await?),
        }
    }

    /// A response that is not a success, as an error that says what to do.
    async fn fail(&self, resp: Response, key: &str) -> TransferError {
        let status = resp.status.as_u16();
        let retry_after = resp.header("retry-after").map(str::to_string);
        let body = resp.bytes(ERROR_BODY).await.unwrap_or_default();
        self.error(status, &body, key, retry_after)
    }

    fn error(
        &self,
        status: u16,
        body: &[u8],
        key: &str,
        retry_after: Option<String>,
    ) -> TransferError {
        let parsed = xml::error(body);
        let (code, message) = parsed.map(|e| (e.code, e.message)).unwrap_or_default();
        let (class, hint) = s3::explain(status, &code, &self.cfg.endpoint(), &self.bucket);
        // Fixed keys from the AWS variables or files, not the
        // application's nor a role's, a process's or a container's.
        let from_env = self.cfg.aws_config
            && self.cfg.creds_from != s3::FROM_OPTIONS
            && self.cfg.provider.is_none()
            && self.cfg.creds_source.is_none();
        let hint = match (code.as_str(), from_env) {
            // Where the keys came from, when not from the AWS variables.
            ("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken", false) => format!(
                "the store at {} refused the credentials ({}); check them",
                self.cfg.endpoint(),
                self.cfg.creds_from
            ),
            _ if s3::expired_credentials(&code) => format!(
                "the credentials ({}) have expired; {}",
                self.cfg.creds_from,
                if self.creds.refreshable() {
                    "their source gave no new ones in time"
                } else {
                    "fixed keys are not renewed: give new ones (or a provider or credential_process that fetches them)"
                }
            ),
            _ => hint,
        };
        let what = self.display_key(key);
        let mut msg = format!("{what}: HTTP {status}");
        if !code.is_empty() {
            msg.push_str(&format!(" {code}"));
        }
        if !message.is_empty() {
            msg.push_str(&format!(" ({message})"));
        }
        if !hint.is_empty() {
            msg.push_str(&format!("; {hint}"));
        }
        if let Some(r) = retry_after {
            msg.push_str(&format!(" (Retry-After: {r})"));
        }
        if class == ErrorClass::Auth && self.creds.is_none() {
            msg.push_str(if self.cfg.no_sign_request {
                "; the requests were sent unsigned, as asked (no_sign_request): the bucket is not public"
            } else if self.cfg.aws_config {
                "; no credentials were found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
            } else {
                "; the requests were sent unsigned (S3Options::anonymous): give S3Options::credentials or a provider"
            });
            if let Some(why) = self.creds.imds_note() {
                msg.push_str(&format!(" ({why})"));
            }
        }
        match class {
            ErrorClass::Auth => TransferError::Auth(msg),
            ErrorClass::Usage => TransferError::Usage(msg),
            // "HTTP 5xx" and "SlowDown" in the message make retry.rs retry.
            ErrorClass::Transient | ErrorClass::Remote => TransferError::Remote(msg),
        }
    }

    /// Send, retrying what another try may cure (5xx, SlowDown, a lost
    /// connection) with the engine's backoff; for requests the engine does
    /// not retry itself (parts, listings, completes).
    async fn send_ok<'k>(
        &self,
        make: &(dyn Fn() -> Req<'k> + Send + Sync),
        key: &str,
    ) -> Result<Response, TransferError> {
        let mut attempt = 0u32;
        loop {
            let res = match self.send(make()).await {
                Ok(resp) if resp.status.is_success() => return Ok(resp),
                Ok(resp) => Err(self.fail(resp, key).await),
                Err(e) => Err(e),
            };
            let e = match res {
                Err(e) => e,
                Ok(r) => return Ok(r),
            };
            if !crate::retry::transient(&e) || attempt + 1 >= crate::retry::DEFAULT_ATTEMPTS {
                return Err(e);
            }
            let wait = crate::retry::backoff(attempt);
            tracing::warn!("{e}; retrying in {:.1} s", wait.as_secs_f64());
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// Send, retrying a 5xx answer or a lost connection with backoff, and
    /// return any other answer as it is (a HEAD's 404 is not an error).
    async fn send_retrying<'k>(
        &self,
        make: &(dyn Fn() -> Req<'k> + Send + Sync),
    ) -> Result<Response, TransferError> {
        let mut attempt = 0u32;
        loop {
            let last = attempt + 1 >= crate::retry::DEFAULT_ATTEMPTS;
            match self.send(make()).await {
                Ok(r) if r.status.is_server_error() && !last => {
                    tracing::warn!(
                        "{}: HTTP {} (the store is busy); retrying",
                        r.url,
                        r.status.as_u16()
                    );
                }
                Ok(r) => return Ok(r),
                Err(e) if crate::retry::transient(&e) && !last => {
                    tracing::warn!("{e}; retrying");
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(crate::retry::backoff(attempt)).await;
            attempt += 1;
        }
    }

    /// A HEAD asking for the stored checksums (`x-amz-checksum-mode`).
    async fn head_with_checksums(&self, key: &str) -> Result<Response, TransferError> {
        self.send_retrying(&|| Req::new(Method::HEAD, key).h(s3::CHECKSUM_MODE, "ENABLED"))
            .await
    }

    /// What a COMPOSITE multipart object keeps, from `resp` (its HEAD):
    /// the CRC32 of its parts' CRC32s and the part sizes.
    async fn composite_parts(&self, key: &str, resp: &Response) -> Option<(Vec<u8>, Vec<u64>)> {
        let (want, n) = s3::composite_crc32(resp.header(s3::CHECKSUM_CRC32))?;
        self.part_sizes(key, n, resp.content_length())
            .await
            .map(|parts| (want.to_vec(), parts))
    }

    /// The sizes of a multipart object's `n` parts, in order: a HEAD of
    /// each part (`?partNumber=K` answers with that part's length).
    /// GetObjectAttributes would list them in one request on AWS, but
    /// versitygw's leaves out `ObjectParts`. `None` when the store
    /// does not say, or the sizes do not add up to `total`: the object is
    /// then not checked, as before.
    async fn part_sizes(&self, key: &str, n: u64, total: Option<u64>) -> Option<Vec<u64>> {
        let heads = futures_util::stream::iter(1..=n)
            .map(|k| async move {
                let make = || Req::new(Method::HEAD, key).q("partNumber", k.to_string());
                let resp = self.send_retrying(&make).await.ok()?;
                if !resp.status.is_success() {
                    return None;
                }
                resp.content_length()
            })
            .buffered(8);
        let sizes: Vec<Option<u64>> = heads.collect().await;
        let sizes: Vec<u64> = sizes.into_iter().collect::<Option<_>>()?;
        if total.is_some_and(|t| sizes.iter().sum::<u64>() != t) {
            tracing::debug!("{}: part sizes do not add up", self.display_key(key));
            return None;
        }
        Some(sizes)
    }

    /// One page of ListObjectsV2 under `prefix`.
    async fn list_page(
        &self,
        prefix: &str,
        delimiter: bool,
        token: Option<&str>,
        max: Option<u32>,
    ) -> Result<xml::ListPage, TransferError> {
        let make = || {
            let mut r = Req::new(Method::GET, "").q("list-type", "2");
            if !prefix.is_empty() {
                r = r.q("prefix", prefix);
            }
            if delimiter {
                r = r.q("delimiter", "/");
            }
            if let Some(t) = token {
                r = r.q("continuation-token", t);
            }
            if let Some(m) = max {
                r = r.q("max-keys", m.to_string());
            }
            r
        };
        let resp = self.send_ok(&make, prefix).await?;
        let body = resp.bytes(LIST_BODY).await?;
        xml::list_objects_v2(&body).map_err(|e| {
            TransferError::Remote(format!(
                "{}: the store's listing is not understood: {e}",
                self.display_key(prefix)
            ))
        })
    }

    /// Is anything stored under `prefix` (a "directory")?
    async fn any_under(&self, prefix: &str) -> Result<bool, TransferError> {
        let page = self.list_page(prefix, false, None, Some(1)).await?;
        Ok(!page.objects.is_empty() || !page.prefixes.is_empty())
    }

    /// Abort a multipart upload until no part of it is left: a part still
    /// arriving when the abort does can be stored after it, so S3 asks
    /// callers to check with ListParts and abort again
    /// (AbortMultipartUpload's documentation).
    async fn abort(&self, key: &str, upload_id: &str) -> Result<(), TransferError> {
        let gone = |e: &TransferError| e.to_string().contains("NoSuchUpload");
        for round in 0..5u64 {
            let make = || Req::new(Method::DELETE, key).q("uploadId", upload_id);
            match self.send_ok(&make, key).await {
                Ok(_) => {}
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(e),
            }
            tokio::time::sleep(std::time::Duration::from_millis(100 * (round + 1))).await;
            let list = || Req::new(Method::GET, key).q("uploadId", upload_id);
            match self.send_ok(&list, key).await {
                Ok(resp) => {
                    let body = resp.bytes(LIST_BODY).await.unwrap_or_default();
                    match xml::list_parts(&body) {
                        Ok((parts, _)) if parts.is_empty() => return Ok(()),
                        _ => {}
                    }
                }
                Err(e) if gone(&e) || e.to_string().contains("HTTP 404") => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Err(TransferError::Remote(format!(
            "{}: the multipart upload {upload_id} still has parts after 5 aborts",
            self.display_key(key)
        )))
    }

    /// Copy `from` to `to` on the store (CopyObject), with new metadata
    /// when `meta` is given.
    async fn copy_object(
        &self,
        from: &str,
        to: &str,
        meta: Option<&[(String, String)]>,
    ) -> Result<(), TransferError> {
        let source = format!(
            "/{}/{}",
            sigv4::uri_encode(self.bucket.as_bytes()),
            sigv4::encode_key_path(from)
        );
        let make = || {
            let mut r = Req::new(Method::PUT, to).h("x-amz-copy-source", source.clone());
            if let Some(m) = meta {
                r = r.h("x-amz-metadata-directive", "REPLACE");
                for (k, v) in m {
                    r = r.h(k, v.clone());
                }
            }
            r
        };
        let resp = self.send_ok(&make, to).await?;
        // S3 may answer 200 and still fail the copy in the body.
        let body = resp.bytes(ERROR_BODY).await?;
        if let Some(e) = xml::error(&body) {
            let _ = e;
            return Err(self.error(500, &body, to, None));
        }
        Ok(())
    }

    /// A big object copied on the store in parts (UploadPartCopy).
    async fn copy_in_parts(
        self: &Arc<Self>,
        from: &str,
        to: &str,
        len: u64,
    ) -> Result<(), TransferError> {
        let upload_id = self.create_upload(to, false).await?;
        let part = s3::part_size_for(len, 512 << 20);
        let source = format!(
            "/{}/{}",
            sigv4::uri_encode(self.bucket.as_bytes()),
            sigv4::encode_key_path(from)
        );
        let n = len.div_ceil(part);
        let mut running = futures_util::stream::iter(0..n)
            .map(|i| {
                let (source, upload_id) = (source.clone(), upload_id.clone());
                async move {
                    let at = i * part;
                    let end = (at + part).min(len) - 1;
                    let number = (i + 1) as u32;
                    let make = || {
                        Req::new(Method::PUT, to)
                            .q("partNumber", number.to_string())
                            .q("uploadId", upload_id.clone())
                            .h("x-amz-copy-source", source.clone())
                            .h("x-amz-copy-source-range", format!("bytes={at}-{end}"))
                    };
                    let resp = self.send_ok(&make, to).await?;
                    let body = resp.bytes(ERROR_BODY).await?;
                    let node = xml::parse(&body).map_err(|e| {
                        TransferError::Remote(format!(
                            "{}: UploadPartCopy: {e}",
                            self.display_key(to)
                        ))
                    })?;
                    let etag = node.text_of("ETag").unwrap_or_default().to_string();
                    Ok::<_, TransferError>(Done {
                        number,
                        etag,
                        checksum: None,
                        len: end + 1 - at,
                    })
                }
            })
            .buffer_unordered(4);
        let mut done = Vec::new();
        while let Some(r) = running.next().await {
            match r {
                Ok(d) => done.push(d),
                Err(e) => {
                    let _ = self.abort(to, &upload_id).await;
                    return Err(e);
                }
            }
        }
        drop(running);
        if let Err(e) = self.complete(to, &upload_id, done, false).await {
            let _ = self.abort(to, &upload_id).await;
            return Err(e);
        }
        Ok(())
    }

    /// The newest unfinished multipart upload of exactly `key`, with the
    /// parts it holds (number -> ETag, size, CRC32).
    async fn find_upload(
        &self,
        key: &str,
    ) -> Result<Option<(String, Vec<xml::Part>)>, TransferError> {
        let make = || Req::new(Method::GET, "").q("uploads", "").q("prefix", key);
        let resp = self.send_ok(&make, key).await?;
        let body = resp.bytes(LIST_BODY).await?;
        let uploads = xml::multipart_uploads(&body).map_err(|e| {
            TransferError::Remote(format!(
                "{}: ListMultipartUploads: {e}",
                self.display_key(key)
            ))
        })?;
        let Some((_, id)) = uploads.into_iter().rev().find(|(k, _)| k == key) else {
            return Ok(None);
        };
        let mut parts = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let make = || {
                let r = Req::new(Method::GET, key).q("uploadId", id.clone());
                match &marker {
                    Some(m) => r.q("part-number-marker", m.clone()),
                    None => r,
                }
            };
            let resp = self.send_ok(&make, key).await?;
            let body = resp.bytes(LIST_BODY).await?;
            let (page, next) = xml::list_parts(&body).map_err(|e| {
                TransferError::Remote(format!("{}: ListParts: {e}", self.display_key(key)))
            })?;
            parts.extend(page);
            match next {
                Some(n) if Some(&n) != marker.as_ref() => marker = Some(n),
                _ => break,
            }
        }
        Ok(Some((id, parts)))
    }

    /// CreateMultipartUpload. `full_object`: the parts are sent with
    /// their CRC32 and the store keeps the whole object's CRC32
    /// (`x-amz-checksum-type: FULL_OBJECT`), which `hash` and downloads
    /// compare with later; copies on the store (UploadPartCopy) send no
    /// checksums and keep the old COMPOSITE form.
    async fn create_upload(&self, key: &str, full_object: bool) -> Result<String, TransferError> {
        let make = || {
            let r = Req::new(Method::POST, key).q("uploads", "");
            match self.cfg.checksum {
                Checksum::Crc32 if full_object => r
                    .h("x-amz-checksum-algorithm", "CRC32")
                    .h(s3::CHECKSUM_TYPE, "FULL_OBJECT"),
                Checksum::Crc32 => r.h("x-amz-checksum-algorithm", "CRC32"),
                _ => r,
            }
        };
        let resp = self.send_ok(&make, key).await?;
        let body = resp.bytes(ERROR_BODY).await?;
        xml::upload_id(&body)
            .map_err(|e| TransferError::Remote(format!("{}: {e}", self.display_key(key))))
    }

    /// CompleteMultipartUpload; with `full_object`, the whole object's
    /// CRC32 (combined from the parts') goes along, so the store checks
    /// the object it assembled against what ferry sent.
    async fn complete(
        &self,
        key: &str,
        upload_id: &str,
        mut parts: Vec<Done>,
        full_object: bool,
    ) -> Result<(), TransferError> {
        parts.sort_by_key(|d| d.number);
        let whole = if full_object {
            combined_crc32(&parts)
        } else {
            None
        };
        let list: Vec<xml::CompletePart<'_>> = parts
            .iter()
            .map(|d| {
                (
                    d.number,
                    d.etag.clone(),
                    d.checksum.clone().map(|c| ("ChecksumCRC32", c)),
                )
            })
            .collect();
        let doc = Bytes::from(xml::complete_body(&list));
        let make = || {
            let mut r = Req::new(Method::POST, key).q("uploadId", upload_id);
            r.body = Some(PartBody::new(vec![doc.clone()]));
            if let Some(w) = &whole {
                r = r
                    .h(s3::CHECKSUM_CRC32, w.clone())
                    .h(s3::CHECKSUM_TYPE, "FULL_OBJECT");
            }
            r.h("content-type", "application/xml")
        };
        let resp = self.send_ok(&make, key).await?;
        let body = resp.bytes(ERROR_BODY).await?;
        if xml::error(&body).is_some() {
            return Err(self.error(500, &body, key, None));
        }
        Ok(())
    }
}

fn http_name(k: &str) -> Result<http::HeaderName, TransferError> {
    http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes())
        .map_err(|e| TransferError::Usage(format!("internal: header {k}: {e}")))
}

#[async_trait]
impl Backend for S3 {
    fn scheme(&self) -> &'static str {
        "s3"
    }
    fn display(&self, p: &[u8]) -> String {
        format!(
            "s3://{}/{}",
            self.inner.bucket,
            String::from_utf8_lossy(p).trim_start_matches('/')
        )
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_read: true,
            offset_write: false,
            append: false,
            rename_over: false,
            atomic_write: true,
            set_times: true,
            set_mode: false,
            list: true,
            server_copy: true,
            max_files: 64,
            max_ranges: 8,
        }
    }
    fn endpoint_key(&self) -> String {
        format!("s3 {} {}", self.inner.cfg.endpoint(), self.inner.bucket)
    }
    fn homes(&self) -> Vec<tokio::runtime::Handle> {
        self.inner.threads.iter().map(|t| t.rt.clone()).collect()
    }
    fn info(&self) -> BackendInfo {
        let c = &self.inner.client;
        let on_shards: usize = self.inner.shards.iter().map(Client::connections).sum();
        BackendInfo {
            connections: (c.connections() + on_shards).max(1),
            cipher: None,
            chunk: 0,
            protocol: Some(format!(
                "s3 ({})",
                crate::backend::http::protocol(c, self.inner.cfg.https)
            )),
        }
    }

    async fn stat(&self, p: &[u8]) -> Result<Option<Entry>, TransferError> {
        let i = &self.inner;
        let key = key_of(p)?;
        let name = super::path::basename(p).to_vec();
        let dir = |name| Some(Entry::dir(name));
        if key.is_empty() {
            // The bucket itself: it must exist.
            let resp = i.send_retrying(&|| Req::new(Method::HEAD, "")).await?;
            if resp.status.is_success() {
                return Ok(dir(name));
            }
            if resp.status == StatusCode::NOT_FOUND {
                return Err(i.error(404, b"<Error><Code>NoSuchBucket</Code></Error>", "", None));
            }
            return Err(i.fail(resp, "").await);
        }
        if key.ends_with('/') {
            return Ok(if i.any_under(key).await? {
                dir(name)
            } else {
                None
            });
        }
        let mut resp = i.send_retrying(&|| Req::new(Method::HEAD, key)).await?;
        if (resp.status == StatusCode::FORBIDDEN || resp.status == StatusCode::BAD_REQUEST)
            && i.creds.refreshable()
        {
            // A HEAD answer has no body to say why: a listing does, and
            // when it says the credentials expired they are fetched again
            // (`send`); with the listing allowed, the HEAD is tried again.
            drop(resp);
            i.any_under(key).await?;
            resp = i.send_retrying(&|| Req::new(Method::HEAD, key)).await?;
        }
        if resp.status.is_success() {
            let mtime = resp
                .header("x-amz-meta-mtime")
                .and_then(|v| v.split('.').next().and_then(|s| s.trim().parse().ok()))
                .or_else(|| crate::backend::http::last_modified(&resp.headers).map(i64::from));
            return Ok(Some(Entry {
                name,
                kind: EntryKind::File,
                size: resp.content_length(),
                mtime,
                mode: None,
            }));
        }
        if resp.status == StatusCode::FORBIDDEN || resp.status == StatusCode::BAD_REQUEST {
            // A HEAD answer has no body to say why: a listing does
            // (SignatureDoesNotMatch, InvalidAccessKeyId, clock skew...).
            drop(resp);
            i.any_under(key).await?;
            return Err(i.error(403, b"", key, None));
        }
        if resp.status != StatusCode::NOT_FOUND {
            return Err(i.fail(resp, key).await);
        }
        drop(resp);
        // No object: a "directory" if keys start with key/ (the listing
        // also says when the bucket itself is missing).
        let prefix = format!("{key}/");
        Ok(if i.any_under(&prefix).await? {
            dir(name)
        } else {
            None
        })
    }

    async fn list(&self, d: &[u8]) -> Result<Vec<Entry>, TransferError> {
        let i = &self.inner;
        let key = key_of(d)?;
        let prefix = if key.is_empty() || key.ends_with('/') {
            key.to_string()
        } else {
            format!("{key}/")
        };
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = i.list_page(&prefix, true, token.as_deref(), None).await?;
            for o in page.objects {
                let Some(name) = o.key.strip_prefix(&prefix) else {
                    continue;
                };
                // "dir/" marker objects some tools create: not a file.
                if name.is_empty() {
                    continue;
                }
                out.push(Entry {
                    name: name.as_bytes().to_vec(),
                    kind: EntryKind::File,
                    size: Some(o.size),
                    mtime: o.modified,
                    mode: None,
                });
            }
            for p in page.prefixes {
                let Some(name) = p.strip_prefix(&prefix) else {
                    continue;
                };
                let name = name.trim_end_matches('/');
                if name.is_empty() {
                    continue;
                }
                out.push(Entry {
                    name: name.as_bytes().to_vec(),
                    kind: EntryKind::Dir,
                    size: None,
                    mtime: None,
                    mode: None,
                });
            }
            match page.next_token {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        Ok(out)
    }

    async fn read(
        &self,
        p: &[u8],
        offset: u64,
        len: Option<u64>,
    ) -> Result<Box<dyn ByteStream>, TransferError> {
        let i = &self.inner;
        let key = key_of(p)?;
        if len == Some(0) {
            return Ok(Box::new(S3Read {
                resp: None,
                left: 0,
                display: i.display_key(key),
                verify: None,
            }));
        }
        let mut r = Req::new(Method::GET, key);
        if offset > 0 || len.is_some() {
            let range = match len {
                Some(l) => format!("bytes={offset}-{}", offset + l - 1),
                None => format!("bytes={offset}-"),
            };
            r = r.h("range", range);
        }
        let check = offset == 0 && i.cfg.checksum != Checksum::None;
        if check {
            // The stored CRC32 comes back when the answer is the whole
            // object, and is checked as the bytes stream through
            // (`--s3-checksum none` turns this off too).
            r = r.h(s3::CHECKSUM_MODE, "ENABLED");
        }
        let resp = i.send(r).await?;
        if !resp.status.is_success() {
            return Err(i.fail(resp, key).await);
        }
        let left = match (resp.status, len) {
            (StatusCode::PARTIAL_CONTENT, Some(l)) => l,
            (_, Some(l)) if offset == 0 => l,
            (StatusCode::PARTIAL_CONTENT, None) | (StatusCode::OK, None)
                if offset == 0 || resp.status == StatusCode::PARTIAL_CONTENT =>
            {
                resp.content_length().unwrap_or(u64::MAX)
            }
            _ => {
                return Err(TransferError::Remote(format!(
                "{}: the store ignored the byte range asked for (HTTP {}); copy with --streams 1",
                i.display_key(key),
                resp.status.as_u16()
            )))
            }
        };
        let whole = check
            && match resp.status {
                StatusCode::OK => len.is_none() || resp.content_length() == len,
                StatusCode::PARTIAL_CONTENT => {
                    resp.header("content-range").is_some_and(range_is_whole)
                }
                _ => false,
            };
        let mut verify = stored_crc32(&resp)
            .filter(|_| whole)
            .map(|c| Verify::new(c, Vec::new()));
        if whole && verify.is_none() {
            if let Some((want, n)) = s3::composite_crc32(resp.header(s3::CHECKSUM_CRC32)) {
                let total = match resp.status {
                    StatusCode::OK => resp.content_length(),
                    _ => None,
                };
                if let Some(parts) = i.part_sizes(key, n, total).await {
                    verify = Some(Verify::new(want, parts));
                }
            }
        }
        Ok(Box::new(S3Read {
            resp: Some(resp),
            left,
            display: i.display_key(key),
            verify,
        }))
    }

    async fn write(
        &self,
        p: &[u8],
        _mode: WriteMode,
        size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        let i = &self.inner;
        let key = key_of(p)?.to_string();
        if key.is_empty() || key.ends_with('/') {
            return Err(TransferError::Usage(format!(
                "{}: an object needs a name after the bucket (s3://bucket/name)",
                i.display_key(&key)
            )));
        }
        let multipart = size.is_none_or(|s| s >= i.cfg.threshold);
        let part = match size {
            Some(s) => s3::part_size_for(s, i.cfg.part_size),
            // Unknown size: big enough parts for 640 GB.
            None => s3::part_size_for(0, i.cfg.part_size.max(64 << 20)),
        };
        Ok(Box::new(Upload {
            inner: i.clone(),
            key,
            size,
            part,
            multipart,
            pending: VecDeque::new(),
            pending_len: 0,
            upload_id: None,
            next_part: 1,
            running: FuturesUnordered::new(),
            done: Vec::new(),
            finished: false,
            stored: std::collections::HashMap::new(),
            full_object: false,
        }))
    }

    async fn mkdir_all(&self, _dir: &[u8]) -> Result<(), TransferError> {
        // Keys have no directories: "a/b" exists once an object under it does.
        Ok(())
    }

    async fn remove(&self, p: &[u8]) -> Result<(), TransferError> {
        let i = &self.inner;
        let key = key_of(p)?;
        let make = || Req::new(Method::DELETE, key);
        i.send_ok(&make, key).await?;
        Ok(())
    }

    async fn set_attrs(
        &self,
        p: &[u8],
        mtime: Option<i64>,
        _mode: Option<u32>,
    ) -> Result<(), TransferError> {
        let Some(t) = mtime else { return Ok(()) };
        let i = &self.inner;
        let key = key_of(p)?;
        let Some(e) = self.stat(p).await? else {
            return Ok(());
        };
        if e.size.unwrap_or(0) > s3::MAX_COPY {
            tracing::warn!(
                "{}: larger than 5 GiB, its modification time is not stored",
                i.display_key(key)
            );
            return Ok(());
        }
        // S3 metadata cannot change in place: the object is copied onto
        // itself with new metadata (on the store; no byte through us).
        let meta = vec![("x-amz-meta-mtime".to_string(), t.to_string())];
        i.copy_object(key, key, Some(&meta)).await
    }

    async fn copy_within(&self, from: &[u8], to: &[u8], len: u64) -> Result<bool, TransferError> {
        let i = &self.inner;
        let (f, t) = (key_of(from)?, key_of(to)?);
        if len <= s3::MAX_COPY {
            i.copy_object(f, t, None).await?;
        } else {
            i.copy_in_parts(f, t, len).await?;
        }
        Ok(true)
    }

    /// CRC32 only: the one checksum ferry stores with every object it
    /// uploads (FULL_OBJECT, for multipart ones too).
    fn hashes(&self) -> Vec<HashAlgo> {
        vec![HashAlgo::Crc32]
    }

    /// The CRC32 the store keeps for the whole object (HEAD with
    /// `x-amz-checksum-mode: ENABLED`); `None` when it keeps none, or only
    /// a checksum of part checksums: the caller then reads the object.
    async fn hash(&self, p: &[u8], algo: HashAlgo) -> Result<Option<Vec<u8>>, TransferError> {
        if algo != HashAlgo::Crc32 {
            return Ok(None);
        }
        let i = &self.inner;
        let key = key_of(p)?;
        let resp = i.head_with_checksums(key).await?;
        if resp.status == StatusCode::NOT_FOUND {
            return Err(TransferError::Remote(format!(
                "{}: no such object",
                i.display_key(key)
            )));
        }
        if !resp.status.is_success() {
            return Err(i.error(resp.status.as_u16(), b"", key, None));
        }
        Ok(stored_crc32(&resp).map(|c| c.to_vec()))
    }

    /// A COMPOSITE multipart object's CRC32 and its part sizes (a HEAD,
    /// then one per part), for `sync -c` and `check -c`.
    async fn composite_crc32(
        &self,
        p: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u64>)>, TransferError> {
        let i = &self.inner;
        let key = key_of(p)?;
        let resp = i.head_with_checksums(key).await?;
        if !resp.status.is_success() {
            return Ok(None);
        }
        Ok(i.composite_parts(key, &resp).await)
    }

    /// Before a split or resumed download: the ETag as the version (a
    /// resume record of another upload is void) and the stored CRC32, so
    /// the engine checks the assembled file against it.
    async fn read_info(&self, p: &[u8]) -> Result<ReadInfo, TransferError> {
        let i = &self.inner;
        let key = key_of(p)?;
        let resp = i.head_with_checksums(key).await?;
        if !resp.status.is_success() {
            // The GET that follows says what is wrong, with its body.
            return Ok(ReadInfo {
                ranges: true,
                ..ReadInfo::default()
            });
        }
        let version = resp.header("etag").map(str::to_string);
        let check = i.cfg.checksum != Checksum::None;
        if check && stored_crc32(&resp).is_none() {
            // A COMPOSITE multipart object: checked part by part once the
            // part sizes are known.
            if let Some((want, parts)) = i.composite_parts(key, &resp).await {
                return Ok(ReadInfo {
                    ranges: true,
                    version,
                    digest: Some((HashAlgo::Crc32, want)),
                    digest_parts: parts,
                });
            }
        }
        Ok(ReadInfo {
            ranges: true,
            version,
            digest: stored_crc32(&resp)
                .filter(|_| check)
                .map(|c| (HashAlgo::Crc32, c.to_vec())),
            digest_parts: Vec::new(),
        })
    }

    async fn close(&self) {
        let aborts: Vec<_> =
            std::mem::take(&mut *self.inner.aborts.lock().unwrap_or_else(|e| e.into_inner()));
        for a in aborts {
            let _ = a.await;
        }
    }
}

struct S3Read {
    resp: Option<Response>,
    left: u64,
    display: String,
    /// A response with the whole object and the store's CRC32 of it.
    verify: Option<Verify>,
}

/// The running CRC32 of a download and the value it must end at: of the
/// content, or (COMPOSITE multipart objects) of each part's CRC32.
struct Verify {
    want: [u8; 4],
    /// Part sizes; empty: a full-object CRC32.
    parts: Vec<u64>,
    /// The part being hashed and its bytes so far.
    part: usize,
    in_part: u64,
    h: crc32fast::Hasher,
    crcs: Vec<u32>,
}

impl Verify {
    fn new(want: [u8; 4], parts: Vec<u64>) -> Verify {
        Verify {
            want,
            parts,
            part: 0,
            in_part: 0,
            h: crc32fast::Hasher::new(),
            crcs: Vec::new(),
        }
    }

    fn update(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            // Past the last part (more bytes than the parts hold) the
            // bytes go into one more "part", which makes a mismatch.
            let room = match self.parts.get(self.part) {
                Some(&len) => (len - self.in_part).min(b.len() as u64) as usize,
                None => b.len(),
            };
            self.h.update(&b[..room]);
            self.in_part += room as u64;
            b = &b[room..];
            if self.parts.get(self.part) == Some(&self.in_part) {
                let h = std::mem::replace(&mut self.h, crc32fast::Hasher::new());
                self.crcs.push(h.finalize());
                self.part += 1;
                self.in_part = 0;
            }
        }
    }

    /// (wanted, got).
    fn finish(mut self) -> (u32, u32) {
        let got = if self.parts.is_empty() {
            self.h.finalize()
        } else {
            if self.in_part > 0 || self.crcs.len() < self.parts.len() {
                self.crcs.push(self.h.finalize());
            }
            u32::from_be_bytes(s3::composite_of(&self.crcs))
        };
        (u32::from_be_bytes(self.want), got)
    }
}

/// The whole-object CRC32 a HEAD or GET answer carries.
fn stored_crc32(resp: &Response) -> Option<[u8; 4]> {
    s3::full_object_crc32(
        resp.header(s3::CHECKSUM_CRC32),
        resp.header(s3::CHECKSUM_TYPE),
    )
}

/// Does a `Content-Range: bytes A-B/N` cover the whole object?
fn range_is_whole(cr: &str) -> bool {
    let Some(rest) = cr.trim().strip_prefix("bytes 0-") else {
        return false;
    };
    let Some((end, total)) = rest.split_once('/') else {
        return false;
    };
    match (end.parse::<u64>(), total.parse::<u64>()) {
        (Ok(e), Ok(t)) => e.checked_add(1) == Some(t),
        _ => false,
    }
}

impl S3Read {
    /// At the end of the body: the bytes against the stored CRC32.
    fn check(&mut self) -> Result<(), TransferError> {
        let Some(v) = self.verify.take() else {
            return Ok(());
        };
        let (want, got) = v.finish();
        if got == want {
            return Ok(());
        }
        Err(TransferError::Remote(format!(
            "{}: the data does not match the CRC32 the store keeps for the object \
             (x-amz-checksum-crc32 {want:08x}, received {got:08x}); nothing was kept",
            self.display
        )))
    }
}

#[async_trait]
impl ByteStream for S3Read {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        if self.left == 0 {
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
                if let Some(v) = self.verify.as_mut() {
                    v.update(&b);
                }
                // Checked before the last bytes are handed on: a reader
                // that stops at the size it expects still sees a mismatch.
                if self.left == 0 {
                    self.check()?;
                }
                Ok(Some(b))
            }
            None if self.left == u64::MAX => {
                self.check()?;
                Ok(None)
            }
            None => Err(TransferError::Network(format!(
                "{}: the response ended {} bytes early",
                self.display, self.left
            ))),
        }
    }
}

/// A request body of buffered pieces, with its exact length (S3 wants a
/// Content-Length); cloned cheaply for another attempt.
#[derive(Clone)]
struct PartBody {
    pieces: VecDeque<Bytes>,
    left: u64,
}

impl PartBody {
    fn new(pieces: Vec<Bytes>) -> PartBody {
        let left = pieces.iter().map(|b| b.len() as u64).sum();
        PartBody {
            pieces: pieces.into(),
            left,
        }
    }
    fn boxed(self) -> ferry_http::Body {
        use http_body_util::BodyExt;
        self.boxed_unsync()
    }
}

impl http_body::Body for PartBody {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.pieces.pop_front() {
            Some(b) => {
                self.left -= b.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            None => Poll::Ready(None),
        }
    }
    fn is_end_stream(&self) -> bool {
        self.left == 0
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

/// An uploaded part.
struct Done {
    number: u32,
    etag: String,
    /// Base64 CRC32, when sent.
    checksum: Option<String>,
    len: u64,
}

/// The whole object's CRC32 (base64) from its parts' CRC32s and lengths,
/// in part order; `None` when a part was sent without one.
fn combined_crc32(parts: &[Done]) -> Option<String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut all = crc32fast::Hasher::new();
    for p in parts {
        let raw = b64.decode(p.checksum.as_deref()?).ok()?;
        let v = u32::from_be_bytes(raw.try_into().ok()?);
        all.combine(&crc32fast::Hasher::new_with_initial_len(v, p.len));
    }
    Some(b64.encode(all.finalize().to_be_bytes()))
}

type PartFuture = Pin<Box<dyn std::future::Future<Output = Result<Done, TransferError>> + Send>>;

/// The sink of one object: one PUT when small, else a multipart upload
/// with up to `concurrency` parts in flight (and at most
/// `PARTS_IN_FLIGHT` over the backend).
struct Upload {
    inner: Arc<Inner>,
    key: String,
    size: Option<u64>,
    part: u64,
    multipart: bool,
    pending: VecDeque<Bytes>,
    pending_len: u64,
    upload_id: Option<String>,
    next_part: u32,
    running: FuturesUnordered<JoinHandle<Result<Done, TransferError>>>,
    done: Vec<Done>,
    finished: bool,
    /// Parts an earlier run stored (`--resume`), by number.
    stored: std::collections::HashMap<u32, xml::Part>,
    /// The upload was created here as FULL_OBJECT.
    full_object: bool,
}

/// The integrity header of a body, and the CRC32 for CompleteMultipartUpload.
fn checksum_header(
    kind: Checksum,
    pieces: &[Bytes],
) -> (Option<(&'static str, String)>, Option<String>) {
    let b64 = base64::engine::general_purpose::STANDARD;
    match kind {
        Checksum::Crc32 => {
            let mut h = crc32fast::Hasher::new();
            for p in pieces {
                h.update(p);
            }
            let v = b64.encode(h.finalize().to_be_bytes());
            (Some(("x-amz-checksum-crc32", v.clone())), Some(v))
        }
        Checksum::Md5 => {
            use md5::Digest;
            let mut h = md5::Md5::new();
            for p in pieces {
                h.update(p);
            }
            (Some(("content-md5", b64.encode(h.finalize()))), None)
        }
        Checksum::None => (None, None),
    }
}

impl Upload {
    /// Take `n` bytes from the front of the buffer, as pieces.
    fn take(&mut self, n: u64) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut want = n;
        while want > 0 {
            let Some(mut b) = self.pending.pop_front() else {
                break;
            };
            if b.len() as u64 > want {
                let rest = b.split_off(want as usize);
                self.pending.push_front(rest);
            }
            want -= b.len() as u64;
            self.pending_len -= b.len() as u64;
            out.push(b);
        }
        out
    }

    async fn reap_one(&mut self) -> Result<(), TransferError> {
        if let Some(r) = self.running.next().await {
            let d = r.map_err(|e| {
                TransferError::Network(format!(
                    "{}: a part upload failed: {e}",
                    self.inner.display_key(&self.key)
                ))
            })??;
            self.done.push(d);
        }
        Ok(())
    }

    /// Start uploading one part of `pieces` (waits while too many are out).
    async fn send_part(&mut self, pieces: Vec<Bytes>) -> Result<(), TransferError> {
        if self.upload_id.is_none() {
            let found = if self.inner.resume {
                self.inner.find_upload(&self.key).await?
            } else {
                None
            };
            match found {
                Some((id, parts)) => {
                    let bytes: u64 = parts.iter().map(|p| p.size).sum();
                    tracing::warn!(
                        "{}: resuming multipart upload {id}: {} parts ({bytes} bytes) are on the store; each is checked before it is skipped",
                        self.inner.display_key(&self.key),
                        parts.len()
                    );
                    self.stored = parts.into_iter().map(|p| (p.number, p)).collect();
                    self.upload_id = Some(id);
                    // Made by another run, maybe as COMPOSITE: the
                    // whole object's CRC32 is not sent with the complete.
                    self.full_object = false;
                }
                None => {
                    self.upload_id = Some(self.inner.create_upload(&self.key, true).await?);
                    self.full_object = true;
                }
            }
        }
        if let Some(done) = self.already_stored(&pieces) {
            self.next_part += 1;
            self.done.push(done);
            return Ok(());
        }
        while self.running.len() >= self.inner.cfg.concurrency {
            self.reap_one().await?;
        }
        let permit = loop {
            if let Ok(p) = self.inner.parts.clone().try_acquire_owned() {
                break p;
            }
            if self.running.is_empty() {
                // Other files hold every slot: wait for one.
                break self
                    .inner
                    .parts
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| TransferError::Local("internal: the part gate closed".into()))?;
            }
            self.reap_one().await?;
        };
        let number = self.next_part;
        self.next_part += 1;
        let inner = self.inner.clone();
        let key = self.key.clone();
        let upload_id = self.upload_id.clone().unwrap_or_default();
        let fut: PartFuture = Box::pin(async move {
            let _permit = permit;
            let (header, crc) = checksum_header(inner.cfg.checksum, &pieces);
            let len: u64 = pieces.iter().map(|b| b.len() as u64).sum();
            let body = PartBody::new(pieces);
            let make = || {
                let mut r = Req::new(Method::PUT, &key)
                    .q("partNumber", number.to_string())
                    .q("uploadId", upload_id.clone());
                if let Some((k, v)) = &header {
                    r = r.h(k, v.clone());
                }
                r.body = Some(body.clone());
                r
            };
            let resp = inner.send_ok(&make, &key).await?;
            let etag = resp.header("etag").unwrap_or_default().to_string();
            let _ = resp.bytes(ERROR_BODY).await;
            Ok(Done {
                number,
                etag,
                checksum: crc,
                len,
            })
        });
        self.running.push(tokio::spawn(fut));
        Ok(())
    }

    /// The part about to be sent, if an earlier run stored the same bytes
    /// under its number: same size and the ETag is their MD5 (S3's ETag of
    /// a part without KMS) or the stored CRC32 is theirs.
    fn already_stored(&self, pieces: &[Bytes]) -> Option<Done> {
        use md5::Digest;
        let p = self.stored.get(&self.next_part)?;
        let len: u64 = pieces.iter().map(|b| b.len() as u64).sum();
        if p.size != len || len == 0 {
            return None;
        }
        let mut h = md5::Md5::new();
        for b in pieces {
            h.update(b);
        }
        let md5: String = h.finalize().iter().map(|x| format!("{x:02x}")).collect();
        let (_, crc) = checksum_header(self.inner.cfg.checksum, pieces);
        let same = p.etag.trim_matches('"').eq_ignore_ascii_case(&md5)
            || (crc.is_some() && p.crc32.is_some() && crc == p.crc32);
        same.then(|| Done {
            number: self.next_part,
            etag: p.etag.clone(),
            checksum: crc,
            len,
        })
    }

    async fn put_whole(&mut self) -> Result<(), TransferError> {
        let n = self.pending_len;
        let pieces = self.take(n);
        let (header, _) = checksum_header(self.inner.cfg.checksum, &pieces);
        let body = PartBody::new(pieces);
        let key = self.key.clone();
        let make = || {
            let mut r = Req::new(Method::PUT, &key);
            if let Some((k, v)) = &header {
                r = r.h(k, v.clone());
            }
            r.body = Some(body.clone());
            r
        };
        let resp = self.inner.send_ok(&make, &key).await?;
        let _ = resp.bytes(ERROR_BODY).await;
        Ok(())
    }
}

#[async_trait]
impl Sink for Upload {
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError> {
        if data.is_empty() {
            return Ok(());
        }
        self.pending_len += data.len() as u64;
        self.pending.push_back(data);
        if !self.multipart && self.size.is_none() && self.pending_len >= self.inner.cfg.threshold {
            self.multipart = true;
        }
        while self.multipart && self.pending_len >= self.part {
            let pieces = self.take(self.part);
            self.send_part(pieces).await?;
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        if !self.multipart {
            self.put_whole().await?;
            self.finished = true;
            return Ok(());
        }
        if self.pending_len > 0 || self.next_part == 1 {
            let n = self.pending_len;
            let pieces = self.take(n);
            self.send_part(pieces).await?;
        }
        while !self.running.is_empty() {
            self.reap_one().await?;
        }
        let id = self.upload_id.clone().unwrap_or_default();
        let done = std::mem::take(&mut self.done);
        self.inner
            .complete(&self.key, &id, done, self.full_object)
            .await?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        for t in self.running.iter() {
            t.abort();
        }
        if self.finished {
            return;
        }
        let Some(id) = self.upload_id.take() else {
            return;
        };
        if self.inner.resume {
            // As part files are kept for --resume: the next run with
            // --resume sends only the parts that are missing.
            tracing::warn!(
                "{}: multipart upload {id} kept for --resume (abort it with: aws s3api abort-multipart-upload --bucket {} --key {:?} --upload-id {id})",
                self.inner.display_key(&self.key),
                self.inner.bucket,
                self.key
            );
            return;
        }
        // Abandoned (an error, a cancel): abort the upload so its parts
        // are not kept (and billed); `close` waits for this.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "{}: multipart upload {id} left unfinished; abort it with: aws s3api abort-multipart-upload --bucket {} --key {:?} --upload-id {id}",
                self.inner.display_key(&self.key),
                self.inner.bucket,
                self.key
            );
            return;
        };
        let inner = self.inner.clone();
        let key = self.key.clone();
        let h = rt.spawn(async move {
            if let Err(e) = inner.abort(&key, &id).await {
                tracing::warn!(
                    "{e}: the multipart upload {id} of {} was not aborted; abort it with: aws s3api abort-multipart-upload --bucket {} --key {key:?} --upload-id {id}",
                    inner.display_key(&key),
                    inner.bucket
                );
            }
        });
        self.inner
            .aborts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_whole_or_not() {
        assert!(range_is_whole("bytes 0-99/100"));
        assert!(!range_is_whole("bytes 0-98/100"));
        assert!(!range_is_whole("bytes 1-99/100"));
        assert!(!range_is_whole("bytes 0-99/*"));
        assert!(!range_is_whole("bytes 0-18446744073709551615/0"));
    }

    #[test]
    fn composite_checked_part_by_part() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let parts = vec![400u64, 400, 200];
        let crcs: Vec<u32> = [&data[..400], &data[400..800], &data[800..]]
            .iter()
            .map(|p| crc32fast::hash(p))
            .collect();
        let want = s3::composite_of(&crcs);
        // Chunks that straddle part edges.
        let mut v = Verify::new(want, parts.clone());
        for c in data.chunks(333) {
            v.update(c);
        }
        let (w, g) = v.finish();
        assert_eq!(w, g);
        // One byte changed, or one byte more: a mismatch.
        let mut bad = data.clone();
        bad[555] ^= 1;
        let mut v = Verify::new(want, parts.clone());
        v.update(&bad);
        let (w, g) = v.finish();
        assert_ne!(w, g);
        let mut v = Verify::new(want, parts);
        v.update(&data);
        v.update(b"x");
        let (w, g) = v.finish();
        assert_ne!(w, g);
        // A full-object CRC32 as before.
        let mut v = Verify::new(crc32fast::hash(&data).to_be_bytes(), Vec::new());
        v.update(&data[..10]);
        v.update(&data[10..]);
        let (w, g) = v.finish();
        assert_eq!(w, g);
    }

    #[test]
    fn whole_object_crc32_from_parts() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let data = b"hello, multipart world";
        let part = |n: u32, d: &[u8]| Done {
            number: n,
            etag: String::new(),
            checksum: Some(b64.encode(crc32fast::hash(d).to_be_bytes())),
            len: d.len() as u64,
        };
        let parts = [
            part(1, &data[..5]),
            part(2, &data[5..9]),
            part(3, &data[9..]),
        ];
        assert_eq!(
            combined_crc32(&parts),
            Some(b64.encode(crc32fast::hash(data).to_be_bytes()))
        );
        let mut no_sum = parts;
        no_sum[1].checksum = None;
        assert_eq!(combined_crc32(&no_sum), None);
    }
}
