//! GET and HEAD: files (whole, ranges, multipart ranges, zstd) and
//! directories (301 to the slash form, then a JSON or HTML listing).
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, ACCEPT_RANGES, CONTENT_ENCODING, CONTENT_LENGTH,
    CONTENT_RANGE, CONTENT_TYPE, ETAG, LAST_MODIFIED, LOCATION, RANGE, VARY,
};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use percent_encoding::utf8_percent_encode;

use super::body::{self, FileBody, RespBody, Seg, ZstdBody};
use super::cond::{self, Outcome, Validators};
use super::digest::{self, Digests};
use super::listing::{self, SEGMENT};
use super::range::{self, RangeRequest, Span};
use super::{hv, io_refusal, resolve, text};
use crate::Shared;

/// Files smaller than this are never compressed: the saving is a few
/// bytes and the frame costs more.
pub const ZSTD_MIN_SIZE: u64 = 1024;
/// How much of a file's start is compressed to decide whether the whole
/// file is worth it.
pub const ZSTD_SAMPLE: usize = 64 * 1024;
/// The suffix of the ETag of a zstd-encoded response (a different
/// representation needs a different strong ETag, RFC 9110 §8.8.3).
pub const ZSTD_ETAG_SUFFIX: &str = "-zstd";

enum Opened {
    /// With its digest when known (or small enough to hash now).
    File(Arc<File>, Box<Metadata>, Option<[u8; 32]>),
    Dir,
    /// A FIFO, socket or device: never served (opening a FIFO could block).
    Other,
}

fn open(real: &PathBuf, digests: &Digests) -> io::Result<Opened> {
    let meta = std::fs::metadata(real)?;
    if meta.is_dir() {
        return Ok(Opened::Dir);
    }
    if !meta.is_file() {
        return Ok(Opened::Other);
    }
    // O_NONBLOCK: if the file was swapped for a FIFO since the stat, the
    // open does not hang; on a regular file it changes nothing.
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(real)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Ok(Opened::Other);
    }
    let f = Arc::new(f);
    // Known, or a small file hashed now; a large one is queued and its
    // later answers carry it (digest.rs).
    let digest = digests.get_or_start(&f, &meta);
    Ok(Opened::File(f, Box::new(meta), digest))
}

/// GET or HEAD of any path.
pub async fn get(shared: &Shared, req: Request<Incoming>) -> Response<RespBody> {
    let (resolved, trailing) = match resolve(shared, req.uri(), false).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let shown = resolved.virtual_path.clone();
    let real = resolved.real.clone();
    let digests = shared.digests.clone();
    // Inline on a local filesystem, as the path check was: a file of up
    // to digest::INLINE_MAX without a known digest is hashed here too.
    let opened =
        match crate::fskind::run(shared.inline_metadata, move || open(&real, &digests)).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return io_refusal(&e, &shown),
            Err(e) => return io_refusal(&io::Error::other(e), &shown),
        };
    let head = req.method() == Method::HEAD;
    match opened {
        Opened::Other => text(
            StatusCode::FORBIDDEN,
            &format!("{shown}: not a regular file\n"),
        ),
        Opened::Dir if !trailing => {
            // Relative links in the listing need the slash. Built from the
            // normalised path, so `//host` can never become a redirect
            // to another site.
            let mut loc: String = resolved
                .virtual_path
                .split('/')
                .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
                .collect::<Vec<_>>()
                .join("/");
            loc.push('/');
            if let Some(q) = req.uri().query() {
                loc.push('?');
                loc.push_str(q);
            }
            let mut r = text(StatusCode::MOVED_PERMANENTLY, &format!("see {loc}\n"));
            r.headers_mut().insert(LOCATION, hv(&loc));
            r
        }
        Opened::Dir => dir_listing(shared, &req, resolved.real, &shown, head).await,
        Opened::File(file, meta, digest) => file_response(&req, file, &meta, head, digest).await,
    }
}

fn wants_json(req: &Request<Incoming>) -> bool {
    let list_query = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "list" || kv.starts_with("list="))
    });
    let accept_json = req
        .headers()
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("application/json"));
    list_query || accept_json
}

async fn dir_listing(
    shared: &Shared,
    req: &Request<Incoming>,
    real: PathBuf,
    shown: &str,
    head: bool,
) -> Response<RespBody> {
    let root = shared.root.clone();
    let entries = match tokio::task::spawn_blocking(move || listing::read(&root, &real)).await {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => return io_refusal(&e, shown),
        Err(e) => return io_refusal(&io::Error::other(e), shown),
    };
    let json = wants_json(req);
    let (bytes, ctype) = if json {
        (listing::json(&entries), "application/json")
    } else {
        let mut dir = shown.to_string();
        if !dir.ends_with('/') {
            dir.push('/');
        }
        (listing::html(&dir, &entries), "text/html; charset=utf-8")
    };
    let len = bytes.len();
    let mut r = Response::new(if head {
        body::empty()
    } else {
        body::full(bytes)
    });
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(VARY, HeaderValue::from_static("Accept"));
    r
}

/// Does the client take zstd (`Accept-Encoding: zstd`, not with `q=0`)?
pub fn accepts_zstd(h: &HeaderMap) -> bool {
    h.get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim();
            if !name.eq_ignore_ascii_case("zstd") {
                return false;
            }
            !parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .or_else(|| p.strip_prefix("Q="))
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            })
        })
}

/// A content type from the extension; the rest is octet-stream.
pub fn content_type(name: &str) -> &'static str {
    let base = name.rsplit('/').next().unwrap_or(name);
    let ext = base
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "md" | "log" | "csv" => "text/plain; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "json" => "application/json",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "zst" => "application/zstd",
        "tar" => "application/x-tar",
        "wasm" => "application/wasm",
        "mp4" => "video/mp4",
        "mp3" => "audio/mpeg",
        _ => "application/octet-stream",
    }
}

/// `Repr-Digest: blake3=:...:` when the file's digest is known.
fn repr_digest(h: &mut HeaderMap, digest: Option<&[u8; 32]>) {
    if let Some(d) = digest {
        h.insert(REPR_DIGEST, hv(&digest::header_value(d)));
    }
}

/// RFC 9530 §2.
const REPR_DIGEST: &str = "repr-digest";

fn validator_headers(h: &mut HeaderMap, etag: &str, meta: &Metadata) {
    h.insert(ETAG, hv(etag));
    if let Ok(t) = meta.modified() {
        h.insert(LAST_MODIFIED, hv(&httpdate::fmt_http_date(t)));
    }
    h.insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
}

async fn file_response(
    req: &Request<Incoming>,
    file: Arc<File>,
    meta: &Metadata,
    head: bool,
    digest: Option<[u8; 32]>,
) -> Response<RespBody> {
    let size = meta.size();
    let opaque = listing::etag_opaque(meta);
    let etag = format!("\"{opaque}\"");
    let v = Validators {
        etag: opaque.clone(),
        alt_etags: vec![format!("{opaque}{ZSTD_ETAG_SUFFIX}")],
        mtime: meta.modified().map_or(0, cond::secs),
    };
    let ctype = content_type(req.uri().path());
    match cond::evaluate(req.method(), req.headers(), &v) {
        Outcome::Proceed => {}
        Outcome::NotModified => {
            let mut r = Response::new(body::empty());
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            validator_headers(r.headers_mut(), &etag, meta);
            return r;
        }
        Outcome::PreconditionFailed => {
            let mut r = text(StatusCode::PRECONDITION_FAILED, "precondition failed\n");
            validator_headers(r.headers_mut(), &etag, meta);
            return r;
        }
    }
    let ranges = match req.headers().get(RANGE).and_then(|v| v.to_str().ok()) {
        Some(rh) if cond::range_allowed(req.headers(), &v) => range::parse(rh, size),
        _ => RangeRequest::Full,
    };
    match ranges {
        RangeRequest::Unsatisfiable => {
            let mut r = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable\n");
            let h = r.headers_mut();
            h.insert(CONTENT_RANGE, hv(&format!("bytes */{size}")));
            validator_headers(h, &etag, meta);
            r
        }
        RangeRequest::Partial(spans) => match spans.as_slice() {
            [one] => {
                let mut r = Response::new(if head {
                    body::empty()
                } else {
                    FileBody::new(
                        file,
                        vec![Seg::File {
                            off: one.start,
                            len: one.len,
                        }],
                    )
                    .for_version(req.version())
                    .boxed()
                });
                *r.status_mut() = StatusCode::PARTIAL_CONTENT;
                let h = r.headers_mut();
                validator_headers(h, &etag, meta);
                repr_digest(h, digest.as_ref());
                h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
                h.insert(CONTENT_LENGTH, HeaderValue::from(one.len));
                h.insert(
                    CONTENT_RANGE,
                    hv(&format!("bytes {}-{}/{size}", one.start, one.last())),
                );
                r
            }
            many => multipart(file, many, size, ctype, &etag, meta, head),
        },
        RangeRequest::Full => {
            // HEAD decides as GET would, so both send the same headers.
            let use_zstd = size >= ZSTD_MIN_SIZE
                && accepts_zstd(req.headers())
                && sample_compresses(file.clone(), size).await;
            let mut r = if use_zstd {
                match ZstdBody::new(file.clone(), size) {
                    Ok(b) if !head => Response::new(b.boxed()),
                    Ok(_) => Response::new(body::empty()),
                    Err(e) => {
                        tracing::warn!("zstd: {e}");
                        return text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n");
                    }
                }
            } else if head {
                Response::new(body::empty())
            } else {
                Response::new(
                    FileBody::new(file, vec![Seg::File { off: 0, len: size }])
                        .for_version(req.version())
                        .boxed(),
                )
            };
            let h = r.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
            h.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
            if use_zstd {
                validator_headers(h, &format!("\"{opaque}{ZSTD_ETAG_SUFFIX}\""), meta);
                h.insert(CONTENT_ENCODING, HeaderValue::from_static("zstd"));
            } else {
                validator_headers(h, &etag, meta);
                // Of the identity representation only: a zstd body is
                // another representation, with another digest.
                repr_digest(h, digest.as_ref());
                h.insert(CONTENT_LENGTH, HeaderValue::from(size));
            }
            r
        }
    }
}

/// Compress the start of the file and see whether it is worth it.
async fn sample_compresses(file: Arc<File>, size: u64) -> bool {
    let n = (size as usize).min(ZSTD_SAMPLE);
    tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; n];
        file.read_exact_at(&mut buf, 0).is_ok() && body::compressible(&buf)
    })
    .await
    .unwrap_or(false)
}

/// `multipart/byteranges` (RFC 9110 §14.6): each span with its own
/// Content-Type and Content-Range, between boundary lines.
fn multipart(
    file: Arc<File>,
    spans: &[Span],
    size: u64,
    ctype: &str,
    etag: &str,
    meta: &Metadata,
    head: bool,
) -> Response<RespBody> {
    let boundary = crate::identity::hex(&rand::random::<[u8; 12]>());
    let mut segs = Vec::with_capacity(spans.len() * 2 + 1);
    let mut total = 0u64;
    for s in spans {
        let part = format!(
            "\r\n--{boundary}\r\nContent-Type: {ctype}\r\nContent-Range: bytes {}-{}/{size}\r\n\r\n",
            s.start,
            s.last()
        );
        total += part.len() as u64 + s.len;
        segs.push(Seg::Mem(Bytes::from(part)));
        segs.push(Seg::File {
            off: s.start,
            len: s.len,
        });
    }
    let end = format!("\r\n--{boundary}--\r\n");
    total += end.len() as u64;
    segs.push(Seg::Mem(Bytes::from(end)));
    let mut r = Response::new(if head {
        body::empty()
    } else {
        FileBody::new(file, segs).boxed()
    });
    *r.status_mut() = StatusCode::PARTIAL_CONTENT;
    let h = r.headers_mut();
    validator_headers(h, etag, meta);
    h.insert(
        CONTENT_TYPE,
        hv(&format!("multipart/byteranges; boundary={boundary}")),
    );
    h.insert(CONTENT_LENGTH, HeaderValue::from(total));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ae(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, hv(v));
        h
    }

    #[test]
    fn accept_encoding() {
        assert!(accepts_zstd(&ae("zstd")));
        assert!(accepts_zstd(&ae("gzip, deflate, br, zstd")));
        assert!(accepts_zstd(&ae("ZSTD;q=0.5")));
        assert!(!accepts_zstd(&ae("zstd;q=0")));
        assert!(!accepts_zstd(&ae("gzip, br")));
        assert!(!accepts_zstd(&ae("zstdx")));
        assert!(!accepts_zstd(&HeaderMap::new()));
    }

    #[test]
    fn types() {
        assert_eq!(content_type("/a/b.TXT"), "text/plain; charset=utf-8");
        assert_eq!(content_type("/a/b"), "application/octet-stream");
        assert_eq!(content_type("/a.b/c"), "application/octet-stream");
    }
}
