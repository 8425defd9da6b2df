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
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_RANGE};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::task::JoinHandle;

use super::body::RespBody;
use super::listing::UPLOAD_MARK;
use super::{io_refusal, refuse, resolve, text};
use crate::Shared;

/// Received bytes gathered before one blocking write (1 MiB).
pub const WRITE_BATCH: usize = 1024 * 1024;

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

/// Make the parents, check they are still inside the root, say whether the
/// final name exists, and create the temporary file. Blocking.
fn prepare(shared_root: &crate::Root, client: &[u8]) -> Result<Prepared, Refused> {
    let resolved = shared_root
        .resolve(client, true)
        .map_err(Refused::Confine)?;
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
    let again = shared_root
        .resolve(client, true)
        .map_err(Refused::Confine)?;
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
    for _ in 0..8 {
        let tmp = parent.join(format!(".{name}{UPLOAD_MARK}{:08x}", rand::random::<u32>()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => {
                return Ok(Prepared {
                    file: f,
                    tmp,
                    dest: resolved.real,
                    shown: resolved.virtual_path,
                    existed,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Refused::Io(e, resolved.virtual_path)),
        }
    }
    Err(Refused::Status(
        StatusCode::INTERNAL_SERVER_ERROR,
        "cannot create a temporary file",
    ))
}

struct Prepared {
    file: File,
    tmp: PathBuf,
    dest: PathBuf,
    shown: String,
    existed: bool,
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
            Refused::Io(e, shown) if e.raw_os_error() == Some(20) => text(
                StatusCode::CONFLICT,
                &format!("{shown}: a parent is a file\n"),
            ),
            Refused::Io(e, shown) => io_refusal(e, shown),
        }
    }
}

/// Write one batch on the blocking pool; the file comes back for the next.
fn write_batch(mut f: File, batch: Vec<Bytes>) -> JoinHandle<io::Result<File>> {
    tokio::task::spawn_blocking(move || {
        for b in &batch {
            f.write_all(b)?;
        }
        Ok(f)
    })
}

pub async fn put(shared: &Shared, req: Request<Incoming>, peer: SocketAddr) -> Response<RespBody> {
    if req.headers().contains_key(CONTENT_RANGE) {
        // RFC 9110 §14.5: a server that does not apply partial PUTs must
        // refuse them, not write the part as if it were the whole file.
        let r = text(
            StatusCode::BAD_REQUEST,
            "Content-Range in PUT is not supported: send the whole file\n",
        );
        return refuse(req, r).await;
    }
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
    let prep = match tokio::task::spawn_blocking(move || prepare(&root, &decoded)).await {
        Ok(Ok(p)) => p,
        Ok(Err(r)) => return refuse(req, r.response()).await,
        Err(e) => {
            let r = io_refusal(&io::Error::other(e), &resolved.virtual_path);
            return refuse(req, r).await;
        }
    };
    let mut guard = TempGuard {
        path: Some(prep.tmp.clone()),
    };
    let shown = prep.shown.clone();

    let mut body = req.into_body();
    let mut file = Some(prep.file);
    let mut pending: Option<JoinHandle<io::Result<File>>> = None;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batched = 0usize;
    let mut received = 0u64;
    loop {
        let frame = match body.frame().await {
            None => break,
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                tracing::info!(%peer, "upload of {shown} cut short after {received} bytes: {e}");
                return text(StatusCode::BAD_REQUEST, "the upload was cut short\n");
            }
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        received += data.len() as u64;
        if declared.is_some_and(|d| received > d) {
            return text(StatusCode::BAD_REQUEST, "more data than Content-Length\n");
        }
        batched += data.len();
        batch.push(data);
        if batched >= WRITE_BATCH {
            // One write in flight while the next batch arrives.
            if let Some(p) = pending.take() {
                match join(p.await) {
                    Ok(f) => file = Some(f),
                    Err(e) => return io_refusal(&e, &shown),
                }
            }
            if let Some(f) = file.take() {
                pending = Some(write_batch(f, std::mem::take(&mut batch)));
            }
            batched = 0;
        }
    }
    if let Some(p) = pending.take() {
        match join(p.await) {
            Ok(f) => file = Some(f),
            Err(e) => return io_refusal(&e, &shown),
        }
    }
    if declared.is_some_and(|d| received != d) {
        tracing::info!(%peer, "upload of {shown}: {received} bytes, Content-Length said {declared:?}");
        return text(StatusCode::BAD_REQUEST, "less data than Content-Length\n");
    }
    let Some(f) = file.take() else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "internal error\n");
    };
    let (tmp, dest) = (prep.tmp.clone(), prep.dest.clone());
    let done = tokio::task::spawn_blocking(move || -> io::Result<()> {
        let mut f = f;
        for b in &batch {
            f.write_all(b)?;
        }
        drop(f);
        fs::rename(&tmp, &dest)
    })
    .await;
    if let Err(e) = join(done) {
        return io_refusal(&e, &shown);
    }
    guard.path = None; // renamed: nothing to remove
    tracing::info!(%peer, "uploaded {shown} ({received} bytes)");
    if prep.existed {
        let mut r = Response::new(super::body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        r
    } else {
        text(StatusCode::CREATED, "created\n")
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
    let r = tokio::task::spawn_blocking(move || -> io::Result<()> {
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
    let r = tokio::task::spawn_blocking(move || fs::create_dir(&resolved.real)).await;
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
