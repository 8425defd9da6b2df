//! Changes, when the server is writable: PUT (atomic upload), DELETE and
//! MKCOL. The caller has checked the token and `--writable`.
//!
//! PUT streams the body into `.NAME.ferry-upload-XXXXXXXX` beside the final
//! name and renames it over the final name only once the whole body has
//! arrived (and matched `Content-Length`). A body that ends early, a
//! connection that drops, or a request future that hyper drops, all leave
//! the final name untouched and remove the temporary file ([`TempGuard`]).
//! Missing parent directories are created, like nginx's
//! `create_full_put_path`, inside the root.
//!
//! A PUT with `Content-Range: bytes START-END/TOTAL` resumes an upload:
//! its bytes are written at START into `.NAME.ferry-upload-part` (START
//! may not be past what the part file holds: no holes), and the part file
//! is renamed over NAME once it holds TOTAL bytes (`201`/`204`); until then
//! the answer is `202 Accepted` with `Range: bytes=0-LAST` (what the server
//! holds). `Content-Range: bytes */TOTAL` with no body asks for that state;
//! its answer also carries [`PART_TAIL`], the SHA-256 of the part file's
//! last [`TAIL_CHECK`] bytes, so a client can check cheaply that what the
//! server holds is the start of *its* file before it sends the rest. A
//! ranged PUT from byte 0 starts the part file afresh. What arrived before
//! a cut stays in the part file for the next attempt. `OPTIONS` answers
//! [`PUT_RANGES`] so a client knows it may send `Content-Range` at all
//! (RFC 9110 §14.5: servers that do not support it must refuse it, but some
//! write the body as the whole file).
use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use ferry_http::decode::Decoder;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE, RANGE};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use sha2::{Digest, Sha256};
use tokio::task::JoinHandle;

use super::body::RespBody;
use super::listing::UPLOAD_MARK;
use super::{io_refusal, refuse, resolve, text};
use crate::Shared;

/// Received bytes gathered before one blocking write (1 MiB).
pub const WRITE_BATCH: usize = 1024 * 1024;

/// Response header of `OPTIONS` on a writable server: `bytes` means PUT
/// takes `Content-Range` (resumable uploads, this file).
pub const PUT_RANGES: &str = "ferry-put-ranges";

/// Response header of the state query (`Content-Range: bytes */TOTAL`):
/// `bytes=A-B sha-256=:BASE64:`, the SHA-256 of the part file's bytes A to
/// B inclusive, its last [`TAIL_CHECK`] bytes (fewer if it holds fewer).
pub const PART_TAIL: &str = "ferry-part-tail";

/// How much of the end of a part file [`PART_TAIL`] covers: as much as the
/// SFTP resume checks (docs/internals/sftp.md), one read on the server.
pub const TAIL_CHECK: u64 = 64 * 1024;

/// The request codings a PUT may have, said as RFC 7694 has it in the
/// `OPTIONS` answer (`Accept-Encoding`) and in a 415.
pub const ACCEPTED_CODINGS: &str = "zstd";

/// Request header of a zstd-coded whole-file PUT: the file's size once
/// decoded. The body may decode to no more (a compression bomb is a 413
/// when it passes it, never a full disk) and no less.
pub const DECODED_LENGTH: &str = "ferry-decoded-length";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Coding {
    Identity,
    Zstd,
}

/// Removes the temporary file unless the upload was committed.
struct TempGuard {
    path: Option<PathBuf>,
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(&p);
        }
    }
}

fn join<T>(r: Result<io::Result<T>, tokio::task::JoinError>) -> io::Result<T> {
    r.map_err(io::Error::other)?
}

/// Where an upload lands, with its parents made.
#[derive(Clone)]
struct Place {
    parent: PathBuf,
    name: String,
    dest: PathBuf,
    shown: String,
    /// Something (not a directory) already has the final name.
    existed: bool,
}

impl Place {
    /// The part file a ranged PUT (resume) writes into.
    fn part(&self) -> PathBuf {
        self.parent.join(format!(".{}{UPLOAD_MARK}part", self.name))
    }
}

/// Make the parents, check they are still inside the root and say whether
/// the final name exists. Blocking.
fn place(root: &crate::Root, client: &[u8]) -> Result<Place, Refused> {
    let resolved = root.resolve(client, true).map_err(Refused::Confine)?;
    let Some(parent) = resolved.real.parent().map(Path::to_path_buf) else {
        return Err(Refused::Status(
            StatusCode::FORBIDDEN,
            "cannot write the root",
        ));
    };
    let Some(name) = resolved
        .real
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
    else {
        return Err(Refused::Status(StatusCode::BAD_REQUEST, "no file name"));
    };
    fs::create_dir_all(&parent).map_err(|e| Refused::Io(e, resolved.virtual_path.clone()))?;
    // Checked again now that the parents exist: a symlink swapped in while
    // they were made must not carry the file out of the root.
    let again = root.resolve(client, true).map_err(Refused::Confine)?;
    if again.real != resolved.real {
        return Err(Refused::Status(
            StatusCode::CONFLICT,
            "the path changed during the upload",
        ));
    }
    let existed = match fs::symlink_metadata(&resolved.real) {
        Ok(m) if m.is_dir() => {
            return Err(Refused::Status(
                StatusCode::CONFLICT,
                "a directory has this name",
            ))
        }
        Ok(_) => true,
        Err(_) => false,
    };
    Ok(Place {
        parent,
        name,
        dest: resolved.real,
        shown: resolved.virtual_path,
        existed,
    })
}

/// A fresh `.NAME.ferry-upload-XXXXXXXX` beside the final name. Blocking.
fn temp_file(p: &Place) -> Result<(File, PathBuf), Refused> {
    for _ in 0..8 {
        let tmp = p.parent.join(format!(
            ".{}{UPLOAD_MARK}{:08x}",
            p.name,
            rand::random::<u32>()
        ));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Refused::Io(e, p.shown.clone())),
        }
    }
    Err(Refused::Status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "cannot create a temporary file",
    ))
}

enum Refused {
    Confine(crate::ConfineError),
    Status(StatusCode, &'static str),
    Io(io::Error, String),
}

impl Refused {
    fn response(&self) -> Response<RespBody> {
        match self {
            Refused::Confine(e) => super::refusal(e),
            Refused::Status(s, m) => text(*s, &format!("{m}\n")),
            Refused::Io(e, shown) if e.kind() == io::ErrorKind::NotADirectory => text(
                StatusCode::CONFLICT,
                &format!("{shown}: a parent is a file\n"),
            ),
            Refused::Io(e, shown) => io_refusal(e, shown),
        }
    }
}

/// `Content-Range` of a PUT: the bytes this request carries, or (with
/// `*`) a question about how much of the upload the server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutRange {
    /// `bytes */TOTAL`
    Status { total: u64 },
    /// `bytes START-END/TOTAL` (END inclusive)
    Write { start: u64, end: u64, total: u64 },
}

pub fn parse_put_range(v: &str) -> Option<PutRange> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    let (span, total) = rest.split_once('/')?;
    let total: u64 = total.trim().parse().ok()?;
    let span = span.trim();
    if span == "*" {
        return Some(PutRange::Status { total });
    }
    let (a, b) = span.split_once('-')?;
    let (start, end): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (start <= end && end < total).then_some(PutRange::Write { start, end, total })
}

/// Write one batch at `at` on the blocking pool; the file comes back for
/// the next.
fn write_batch(f: File, at: u64, batch: Vec<Bytes>) -> JoinHandle<io::Result<File>> {
    tokio::task::spawn_blocking(move || {
        let mut at = at;
        for b in &batch {
            f.write_all_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(f)
    })
}

/// How a PUT's body is coded (`Content-Encoding`), and what its file
/// bytes must hash to (`Repr-Digest`).
struct Coded {
    /// `Content-Encoding: zstd`: decoded in bounded pieces
    /// (ferry_http::decode: 8 MiB window at most).
    decoder: Option<Decoder>,
    /// The most file bytes the body may decode to (a bomb is refused
    /// when it passes this, before anything more is written).
    decoded_max: u64,
    check: Option<(ferry_http::digest::Expected, ferry_http::digest::Hasher)>,
}

impl Coded {
    fn plain() -> Coded {
        Coded {
            decoder: None,
            decoded_max: u64::MAX,
            check: None,
        }
    }
}

/// Stream the request body into `file` from offset `at`, at most `limit`
/// bytes on the wire, decoding it if it is coded. Returns the file, how
/// many file bytes arrived (all written) and how many bytes the body had.
async fn receive(
    mut body: Incoming,
    file: File,
    at: u64,
    limit: Option<u64>,
    mut coded: Coded,
    shown: &str,
    peer: SocketAddr,
) -> Result<(File, u64, u64), Response<RespBody>> {
    let mut file = Some(file);
    let mut pending: Option<JoinHandle<io::Result<File>>> = None;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batch_at = at;
    let mut batched = 0u64;
    let mut received = 0u64;
    let mut decoded = 0u64;
    let mut ended = false;
    loop {
        if !ended {
            match body.frame().await {
                None => {
                    ended = true;
                    if let Some(d) = coded.decoder.take() {
                        let last = d.finish().map_err(|e| undecodable(&e, shown, peer))?;
                        if !take_decoded(&mut coded, &mut decoded, &last, &mut batch) {
                            return Err(bomb(coded.decoded_max, shown, peer));
                        }
                        batched += last.len() as u64;
                    }
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        received += data.len() as u64;
                        if limit.is_some_and(|l| received > l) {
                            return Err(text(
                                StatusCode::BAD_REQUEST,
                                "more data than Content-Length or Content-Range said\n",
                            ));
                        }
                        match coded.decoder.as_mut() {
                            None => {
                                decoded += data.len() as u64;
                                if let Some((_, h)) = coded.check.as_mut() {
                                    h.update(&data);
                                }
                                batched += data.len() as u64;
                                batch.push(data);
                            }
                            Some(d) => {
                                let mut pieces = d.pieces(&data);
                                while let Some(p) = pieces
                                    .next_piece()
                                    .map_err(|e| undecodable(&e, shown, peer))?
                                {
                                    if decoded + p.len() as u64 > coded.decoded_max {
                                        return Err(bomb(coded.decoded_max, shown, peer));
                                    }
                                    decoded += p.len() as u64;
                                    if let Some((_, h)) = coded.check.as_mut() {
                                        h.update(p);
                                    }
                                    batched += p.len() as u64;
                                    batch.push(Bytes::copy_from_slice(p));
                                }
                            }
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::info!(%peer, "upload of {shown} cut short after {received} bytes: {e}");
                    return Err(text(StatusCode::BAD_REQUEST, "the upload was cut short\n"));
                }
            }
        }
        if batched >= WRITE_BATCH as u64 || (ended && !batch.is_empty()) {
            // One write in flight while the next batch arrives.
            if let Some(p) = pending.take() {
                file = Some(join(p.await).map_err(|e| io_refusal(&e, shown))?);
            }
            if let Some(f) = file.take() {
                pending = Some(write_batch(f, batch_at, std::mem::take(&mut batch)));
            }
            batch_at += batched;
            batched = 0;
        }
        if ended && batch.is_empty() {
            break;
        }
    }
    if let Some(p) = pending.take() {
        file = Some(join(p.await).map_err(|e| io_refusal(&e, shown))?);
    }
    if let Some((want, h)) = coded.check.take() {
        if h.finalize() != want.sum {
            tracing::info!(%peer, "upload of {shown}: Repr-Digest does not match the bytes received: refused");
            return Err(text(
                StatusCode::BAD_REQUEST,
                &format!(
                    "the {decoded} bytes received do not match the request's Repr-Digest ({}); nothing was stored\n",
                    want.algo.name()
                ),
            ));
        }
    }
    match file {
        Some(f) => Ok((f, decoded, received)),
        None => Err(text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n")),
    }
}

/// The last decoded bytes (from `Decoder::finish`), under the same
/// bound; false when they pass it.
fn take_decoded(coded: &mut Coded, decoded: &mut u64, last: &[u8], batch: &mut Vec<Bytes>) -> bool {
    if last.is_empty() {
        return true;
    }
    if *decoded + last.len() as u64 > coded.decoded_max {
        return false;
    }
    *decoded += last.len() as u64;
    if let Some((_, h)) = coded.check.as_mut() {
        h.update(last);
    }
    batch.push(Bytes::copy_from_slice(last));
    true
}

/// A coded body that decodes to more than it announced: a compression
/// bomb, refused before the excess is written.
fn bomb(max: u64, shown: &str, peer: SocketAddr) -> Response<RespBody> {
    tracing::info!(%peer, "upload of {shown}: the zstd body decodes to more than {max} bytes: refused");
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "the zstd body decodes to more than the {max} bytes announced (ferry-decoded-length or Content-Range); nothing was stored\n"
        ),
    )
}

/// A coded body that does not decode (a bad frame, a wrong checksum, a
/// window over 8 MiB, a truncated frame).
fn undecodable(e: &io::Error, shown: &str, peer: SocketAddr) -> Response<RespBody> {
    tracing::info!(%peer, "upload of {shown}: the zstd body does not decode: {e}");
    text(
        StatusCode::BAD_REQUEST,
        &format!("the zstd body does not decode: {e}; nothing was stored\n"),
    )
}

fn created_or_replaced(existed: bool) -> Response<RespBody> {
    if existed {
        let mut r = Response::new(super::body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        r
    } else {
        text(StatusCode::CREATED, "created\n")
    }
}

/// `202 Accepted` with `Range: bytes=0-LAST` saying how much of a ranged
/// upload the server holds (no `Range` when it holds nothing).
fn incomplete(have: u64, total: u64) -> Response<RespBody> {
    let mut r = text(
        StatusCode::ACCEPTED,
        &format!("have {have} of {total} bytes\n"),
    );
    if have > 0 {
        r.headers_mut()
            .insert(RANGE, super::hv(&format!("bytes=0-{}", have - 1)));
    }
    r
}

pub async fn put(shared: &Shared, req: Request<Incoming>, peer: SocketAddr) -> Response<RespBody> {
    let range = match req.headers().get(CONTENT_RANGE) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(parse_put_range) {
            Some(r) => Some(r),
            None => {
                let r = text(
                    StatusCode::BAD_REQUEST,
                    "bad Content-Range: want bytes START-END/TOTAL or bytes */TOTAL\n",
                );
                return refuse(req, r).await;
            }
        },
    };
    let declared = match req.headers().get(CONTENT_LENGTH) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(n) => Some(n),
            None => {
                let r = text(StatusCode::BAD_REQUEST, "bad Content-Length\n");
                return refuse(req, r).await;
            }
        },
    };
    let coding = match req.headers().get(CONTENT_ENCODING).map(|v| v.to_str()) {
        None => Coding::Identity,
        Some(Ok(v)) if v.trim().is_empty() || v.trim().eq_ignore_ascii_case("identity") => {
            Coding::Identity
        }
        Some(Ok(v)) if v.trim().eq_ignore_ascii_case("zstd") => Coding::Zstd,
        Some(_) => {
            // RFC 7694 §3: 415 with the codings that are taken.
            let mut r = text(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "this server takes uploads plain or with Content-Encoding: zstd\n",
            );
            r.headers_mut()
                .insert(ACCEPT_ENCODING, HeaderValue::from_static(ACCEPTED_CODINGS));
            return refuse(req, r).await;
        }
    };
    let decoded_length = match req.headers().get(DECODED_LENGTH) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(n) => Some(n),
            None => {
                let r = text(StatusCode::BAD_REQUEST, "bad ferry-decoded-length\n");
                return refuse(req, r).await;
            }
        },
    };
    if coding == Coding::Zstd && range.is_none() && decoded_length.is_none() {
        let r = text(
            StatusCode::LENGTH_REQUIRED,
            "a PUT with Content-Encoding: zstd needs ferry-decoded-length: the file's size (or Content-Range)\n",
        );
        return refuse(req, r).await;
    }
    let coded = |decoded_max: u64, check: bool| -> Coded {
        Coded {
            decoder: (coding == Coding::Zstd)
                .then(|| Decoder::for_encoding(Some("zstd")).ok())
                .flatten(),
            decoded_max,
            check: check
                .then(|| ferry_http::digest::expected(req.headers()))
                .flatten()
                .map(|e| (e, ferry_http::digest::Hasher::new(e.algo))),
        }
    };
    let coded = match (range, coding) {
        (None, _) => coded(decoded_length.unwrap_or(u64::MAX), true),
        (Some(PutRange::Write { start, end, .. }), Coding::Zstd) => coded(end - start + 1, false),
        _ => Coded::plain(),
    };
    if coding == Coding::Zstd && coded.decoder.is_none() {
        let r = text(StatusCode::INTERNAL_SERVER_ERROR, "no zstd decoder\n");
        return refuse(req, r).await;
    }
    // Confine first (lexically and against the existing prefix), then
    // make the parents on the blocking pool.
    let (resolved, trailing) = match resolve(shared, req.uri(), true).await {
        Ok(r) => r,
        Err(resp) => return refuse(req, resp).await,
    };
    if trailing || resolved.virtual_path == "/" {
        let r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "PUT needs a file name, not a directory\n",
        );
        return refuse(req, r).await;
    }
    let decoded: Vec<u8> = resolved.virtual_path.as_bytes().to_vec();
    let root = shared.root.clone();
    let inline = shared.inline_metadata;
    let place = match crate::fskind::run(inline, move || place(&root, &decoded)).await {
        Ok(Ok(p)) => p,
        Ok(Err(r)) => return refuse(req, r.response()).await,
        Err(e) => {
            let r = io_refusal(&io::Error::other(e), &resolved.virtual_path);
            return refuse(req, r).await;
        }
    };
    match range {
        None => put_whole(place, req, declared, decoded_length, coded, peer, inline).await,
        Some(PutRange::Status { total }) => {
            let part = place.part();
            let state = tokio::task::spawn_blocking(move || part_state(&part))
                .await
                .unwrap_or((0, None));
            let mut r = incomplete(state.0, total);
            if let Some(tail) = state.1 {
                r.headers_mut().insert(PART_TAIL, super::hv(&tail));
            }
            refuse(req, r).await
        }
        Some(PutRange::Write { start, end, total }) => {
            put_part(place, req, declared, coded, (start, end, total), peer).await
        }
    }
}

/// How many bytes a part file holds, and the [`PART_TAIL`] value of its
/// end (`None` when empty or unreadable). Blocking; reads at most
/// [`TAIL_CHECK`] bytes.
fn part_state(part: &Path) -> (u64, Option<String>) {
    let Ok(f) = File::open(part) else {
        return (0, None);
    };
    let have = f.metadata().map_or(0, |m| m.len());
    if have == 0 {
        return (0, None);
    }
    let from = have.saturating_sub(TAIL_CHECK);
    let mut buf = vec![0u8; (have - from) as usize];
    if f.read_exact_at(&mut buf, from).is_err() {
        return (have, None);
    }
    let sum = Sha256::digest(&buf);
    let b64 = ferry_http::digest::to_base64(&sum);
    (
        have,
        Some(format!("bytes={from}-{} sha-256=:{b64}:", have - 1)),
    )
}

/// A whole-file PUT: temporary file, renamed when complete.
async fn put_whole(
    place: Place,
    req: Request<Incoming>,
    declared: Option<u64>,
    decoded_length: Option<u64>,
    coded: Coded,
    peer: SocketAddr,
    inline: bool,
) -> Response<RespBody> {
    let (file, tmp) = {
        let p = place.clone();
        match crate::fskind::run(inline, move || temp_file(&p)).await {
            Ok(Ok(x)) => x,
            Ok(Err(r)) => return refuse(req, r.response()).await,
            Err(e) => return refuse(req, io_refusal(&io::Error::other(e), &place.shown)).await,
        }
    };
    let mut guard = TempGuard {
        path: Some(tmp.clone()),
    };
    let shown = place.shown.clone();
    let zstd = coded.decoder.is_some();
    let (file, received, wire) =
        match receive(req.into_body(), file, 0, declared, coded, &shown, peer).await {
            Ok(x) => x,
            Err(r) => return r,
        };
    // The file's length: Content-Length of a plain body, the announced
    // decoded length of a coded one.
    let want = if zstd { decoded_length } else { declared };
    if want.is_some_and(|d| received != d) {
        tracing::info!(%peer, "upload of {shown}: {received} bytes, the request said {want:?}");
        return text(
            StatusCode::BAD_REQUEST,
            if zstd {
                "the zstd body decodes to less than ferry-decoded-length\n"
            } else {
                "less data than Content-Length\n"
            },
        );
    }
    let dest = place.dest.clone();
    let done = crate::fskind::run(inline, move || {
        drop(file);
        fs::rename(&tmp, &dest)
    })
    .await;
    if let Err(e) = join(done) {
        return io_refusal(&e, &shown);
    }
    guard.path = None; // renamed: nothing to remove
    if zstd {
        tracing::info!(%peer, "uploaded {shown} ({received} bytes, zstd: {wire} on the wire)");
    } else {
        tracing::info!(%peer, "uploaded {shown} ({received} bytes)");
    }
    created_or_replaced(place.existed)
}

/// A ranged PUT: the bytes go into `.NAME.ferry-upload-part` at their
/// offset; when the part file holds TOTAL bytes it is renamed over the
/// final name. What arrived before a cut stays, for the next attempt.
async fn put_part(
    place: Place,
    req: Request<Incoming>,
    declared: Option<u64>,
    coded: Coded,
    (start, end, total): (u64, u64, u64),
    peer: SocketAddr,
) -> Response<RespBody> {
    let len = end - start + 1;
    // Content-Range names file bytes; a coded body's Content-Length is
    // its length on the wire.
    let zstd = coded.decoder.is_some();
    if !zstd && declared.is_some_and(|d| d != len) {
        let r = text(
            StatusCode::BAD_REQUEST,
            "Content-Length does not match Content-Range\n",
        );
        return refuse(req, r).await;
    }
    let part = place.part();
    let p2 = part.clone();
    let opened = tokio::task::spawn_blocking(move || -> io::Result<(File, u64)> {
        // From byte 0 the client starts afresh: whatever an earlier
        // attempt (perhaps of another file) left goes.
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(start == 0)
            .open(&p2)?;
        let have = f.metadata()?.len();
        Ok((f, have))
    })
    .await;
    let (file, have) = match join(opened) {
        Ok(x) => x,
        Err(e) => return refuse(req, io_refusal(&e, &place.shown)).await,
    };
    if start > have {
        // A gap would leave a hole of zeros in the file: the client must
        // go on from what the server has.
        let mut r = incomplete(have, total);
        *r.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
        return refuse(req, r).await;
    }
    let shown = place.shown.clone();
    let wire_limit = if zstd { declared } else { Some(len) };
    let (file, received, wire) = match receive(
        req.into_body(),
        file,
        start,
        wire_limit,
        coded,
        &shown,
        peer,
    )
    .await
    {
        Ok(x) => x,
        Err(r) => {
            if zstd {
                // What a coded body wrote before it failed may be
                // wrong (a bad frame decodes to something before its
                // checksum fails): the part goes back to `start`.
                let part = place.part();
                let _ = tokio::task::spawn_blocking(move || {
                    OpenOptions::new()
                        .write(true)
                        .open(&part)
                        .and_then(|f| f.set_len(start))
                })
                .await;
            }
            return r;
        }
    };
    if received != len {
        return text(
            StatusCode::BAD_REQUEST,
            "less data than Content-Range said\n",
        );
    }
    let dest = place.dest.clone();
    enum Done {
        Complete,
        Have(u64),
        TooLong,
    }
    let done = tokio::task::spawn_blocking(move || -> io::Result<Done> {
        let have = file.metadata()?.len();
        drop(file);
        if have == total {
            fs::rename(&part, &dest)?;
            return Ok(Done::Complete);
        }
        if have > total {
            // Written under another TOTAL: unusable, start again.
            let _ = fs::remove_file(&part);
            return Ok(Done::TooLong);
        }
        Ok(Done::Have(have))
    })
    .await;
    match join(done) {
        Ok(Done::Complete) => {
            let coded = if zstd {
                format!(", zstd: {wire} on the wire")
            } else {
                String::new()
            };
            tracing::info!(%peer, "uploaded {shown} ({total} bytes, the last part from byte {start}{coded})");
            created_or_replaced(place.existed)
        }
        Ok(Done::Have(have)) => incomplete(have, total),
        Ok(Done::TooLong) => text(
            StatusCode::CONFLICT,
            "the partial upload is longer than TOTAL; it was removed, start again from 0\n",
        ),
        Err(e) => io_refusal(&e, &shown),
    }
}

pub async fn delete(shared: &Shared, req: &Request<Incoming>) -> Response<RespBody> {
    let (resolved, _) = match resolve(shared, req.uri(), true).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    if resolved.virtual_path == "/" {
        return text(StatusCode::FORBIDDEN, "cannot delete the root\n");
    }
    let shown = resolved.virtual_path.clone();
    let r = crate::fskind::run(shared.inline_metadata, move || -> io::Result<()> {
        let m = fs::symlink_metadata(&resolved.real)?;
        if m.is_dir() {
            fs::remove_dir(&resolved.real)
        } else {
            fs::remove_file(&resolved.real)
        }
    })
    .await;
    match join(r) {
        Ok(()) => {
            let mut r = Response::new(super::body::empty());
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty || e.raw_os_error() == Some(39) => {
            text(
                StatusCode::CONFLICT,
                &format!("{shown}: directory not empty\n"),
            )
        }
        Err(e) => io_refusal(&e, &shown),
    }
}

pub async fn mkcol(shared: &Shared, req: &Request<Incoming>) -> Response<RespBody> {
    let (resolved, _) = match resolve(shared, req.uri(), true).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let shown = resolved.virtual_path.clone();
    let r = crate::fskind::run(shared.inline_metadata, move || {
        fs::create_dir(&resolved.real)
    })
    .await;
    match join(r) {
        Ok(()) => text(StatusCode::CREATED, "created\n"),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => text(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("{shown}: already exists\n"),
        ),
        // RFC 4918 §9.3.1: a missing parent is a conflict.
        Err(e) if e.kind() == io::ErrorKind::NotFound => text(
            StatusCode::CONFLICT,
            &format!("{shown}: the parent directory does not exist\n"),
        ),
        Err(e) => io_refusal(&e, &shown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_ranges() {
        assert_eq!(
            parse_put_range("bytes 0-9/100"),
            Some(PutRange::Write {
                start: 0,
                end: 9,
                total: 100
            })
        );
        assert_eq!(
            parse_put_range("bytes */100"),
            Some(PutRange::Status { total: 100 })
        );
        for bad in [
            "bytes 9-0/100",
            "bytes 0-100/100",
            "bytes 0-9/*",
            "bytes=0-9/100",
            "0-9/100",
            "bytes 0-9",
            "bytes a-b/100",
            "",
        ] {
            assert_eq!(parse_put_range(bad), None, "{bad}");
        }
    }
}
