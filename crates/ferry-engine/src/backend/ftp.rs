//! FTP(S) as a backend: a pool of logged-in control connections used on
//! blocking threads (the measured choice: docs/internals/ftp.md), `REST`
//! and `RETR` for reads from any offset, `STOR` for writes, `RNFR`/`RNTO`
//! over the final name, `MLSD` (or `LIST`) for listings.
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use ferry_ftp::{Conn, Endpoint, FtpError, Security};

use super::{
    path, Backend, BackendInfo, ByteStream, Capabilities, Entry, EntryKind, Sink, WriteMode,
};
use crate::error::TransferError;
use crate::location::FtpSpec;
use crate::{CopyOptions, Tuning};

/// Bytes per piece read from a data connection.
const PIECE: usize = 256 * 1024;
/// Pieces queued between a blocking transfer and the engine.
const QUEUE: usize = 8;

pub struct Ftp {
    ep: Arc<Endpoint>,
    idle: Arc<Mutex<Vec<Conn>>>,
    home: String,
    prefix: String,
    max: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn s(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

impl Ftp {
    pub async fn open(spec: &FtpSpec, opts: &CopyOptions) -> Result<(Ftp, Vec<u8>), TransferError> {
        let ep = crate::ftp::endpoint(spec, opts)?;
        let e2 = ep.clone();
        let conn = tokio::task::spawn_blocking(move || Conn::open(&e2))
            .await
            .map_err(|e| TransferError::Network(format!("internal: {e}")))?
            .map_err(TransferError::from)?;
        let home = conn.home.clone();
        let resolved = crate::ftp::absolute(&home, &spec.path);
        let scheme = match ep.security {
            Security::Implicit => "ftps",
            _ => "ftp",
        };
        let user = spec
            .user
            .as_deref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let port = spec.port.map(|p| format!(":{p}")).unwrap_or_default();
        let max = opts.parallel.unwrap_or(Tuning::FTP_PARALLEL).max(1);
        let mut resolved = resolved.into_bytes();
        if spec.trailing_slash() && !resolved.ends_with(b"/") {
            resolved.push(b'/');
        }
        Ok((
            Ftp {
                ep,
                idle: Arc::new(Mutex::new(vec![conn])),
                home,
                prefix: format!("{scheme}://{user}{}{port}", spec.host),
                max,
            },
            resolved,
        ))
    }

    /// Run `f` on a connection from the pool (or a new one) on a blocking
    /// thread; the connection goes back unless the failure was the
    /// connection's.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, FtpError> + Send + 'static,
    ) -> Result<T, TransferError> {
        let (ep, idle) = (self.ep.clone(), self.idle.clone());
        tokio::task::spawn_blocking(move || {
            let mut c = match lock(&idle).pop() {
                Some(c) => c,
                None => Conn::open(&ep)?,
            };
            let r = f(&mut c);
            if !matches!(&r, Err(e) if e.is_network()) {
                lock(&idle).push(c);
            }
            r
        })
        .await
        .map_err(|e| TransferError::Network(format!("internal: {e}")))?
        .map_err(TransferError::from)
    }
}

#[async_trait]
impl Backend for Ftp {
    fn scheme(&self) -> &'static str {
        match self.ep.security {
            Security::Plain => "ftp",
            _ => "ftps",
        }
    }
    fn display(&self, p: &[u8]) -> String {
        let p = s(p);
        let home = self.home.trim_end_matches('/');
        match p
            .strip_prefix(home)
            .filter(|r| r.starts_with('/') || r.is_empty())
        {
            Some(rel) => format!("{}{}", self.prefix, if rel.is_empty() { "/" } else { rel }),
            None => format!("{}/%2F{}", self.prefix, p.trim_start_matches('/')),
        }
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_read: true,
            offset_write: false,
            rename_over: true,
            atomic_write: false,
            set_times: false,
            set_mode: false,
            list: true,
            server_copy: false,
            max_files: self.max,
            max_ranges: 4,
        }
    }
    fn endpoint_key(&self) -> String {
        self.prefix.clone()
    }
    fn info(&self) -> BackendInfo {
        BackendInfo {
            connections: lock(&self.idle).len().max(1),
            cipher: None,
            chunk: 0,
            protocol: Some(self.scheme().into()),
        }
    }

    async fn stat(&self, p: &[u8]) -> Result<Option<Entry>, TransferError> {
        let ps = s(p);
        let name = path::basename(p).to_vec();
        self.with(move |c| {
            let trimmed = ps.trim_end_matches('/');
            if ps.ends_with('/') || trimmed.is_empty() {
                return Ok(c
                    .is_dir(if trimmed.is_empty() { "/" } else { trimmed })?
                    .then_some(Entry {
                        name,
                        kind: EntryKind::Dir,
                        size: None,
                        mtime: None,
                        mode: None,
                    }));
            }
            match c.size(trimmed) {
                Ok(size) => {
                    let mtime = c.mdtm(trimmed);
                    Ok(Some(Entry {
                        name,
                        kind: EntryKind::File,
                        size: Some(size),
                        mtime,
                        mode: None,
                    }))
                }
                Err(e) if e.is_network() => Err(e),
                Err(_) => Ok(c.is_dir(trimmed)?.then_some(Entry {
                    name,
                    kind: EntryKind::Dir,
                    size: None,
                    mtime: None,
                    mode: None,
                })),
            }
        })
        .await
    }

    async fn list(&self, dir: &[u8]) -> Result<Vec<Entry>, TransferError> {
        let d = s(dir);
        let (entries, _refused) = self.with(move |c| c.list(d.trim_end_matches('/'))).await?;
        Ok(entries
            .into_iter()
            .map(|e| Entry {
                name: e.name.into_bytes(),
                kind: match e.kind {
                    ferry_ftp::listing::Kind::Dir => EntryKind::Dir,
                    _ => EntryKind::File,
                },
                size: Some(e.size),
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
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, TransferError>>(QUEUE);
        let ps = s(p);
        let display = self.display(p);
        let (ep, idle) = (self.ep.clone(), self.idle.clone());
        tokio::task::spawn_blocking(move || {
            let mut c = match lock(&idle).pop() {
                Some(c) => c,
                None => match Conn::open(&ep) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e.into()));
                        return;
                    }
                },
            };
            let mut t = match c.retr(&ps, offset) {
                Ok(t) => t,
                Err(e) => {
                    let net = e.is_network();
                    let _ = tx.blocking_send(Err(e.into()));
                    if !net {
                        lock(&idle).push(c);
                    }
                    return;
                }
            };
            let mut left = len.unwrap_or(u64::MAX);
            let mut ok = true;
            while left > 0 {
                let mut buf = vec![0u8; (left.min(PIECE as u64)) as usize];
                match t.read(&mut buf) {
                    Ok(0) => break,
                    Ok(k) => {
                        buf.truncate(k);
                        left = left.saturating_sub(k as u64);
                        if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                            ok = false;
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx
                            .blocking_send(Err(TransferError::Network(format!("{display}: {e}"))));
                        return;
                    }
                }
            }
            let end = if left > 0 && left != u64::MAX {
                Err(FtpError::Network(format!(
                    "{display}: the file ended {left} bytes early"
                )))
            } else if left == 0 && len.is_some() {
                c.close_early(t, &ps)
            } else {
                c.finish(t, &ps)
            };
            match end {
                Ok(()) => lock(&idle).push(c),
                Err(e) if ok => {
                    let _ = tx.blocking_send(Err(e.into()));
                }
                Err(_) => {}
            }
        });
        Ok(Box::new(FtpRead { rx }))
    }

    async fn write(
        &self,
        p: &[u8],
        mode: WriteMode,
        _size: Option<u64>,
    ) -> Result<Box<dyn Sink>, TransferError> {
        let append = match mode {
            WriteMode::Create => false,
            WriteMode::At(0) => false,
            WriteMode::At(_) => true,
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(QUEUE);
        let ps = s(p);
        let display = self.display(p);
        let (ep, idle) = (self.ep.clone(), self.idle.clone());
        let task = tokio::task::spawn_blocking(move || -> Result<(), TransferError> {
            let mut rx = rx;
            let mut c = match lock(&idle).pop() {
                Some(c) => c,
                None => Conn::open(&ep)?,
            };
            let mut t = c.stor(&ps, append)?;
            loop {
                match rx.blocking_recv() {
                    Some(Piece::Data(b)) => t
                        .write_all(&b)
                        .map_err(|e| TransferError::Network(format!("{display}: {e}")))?,
                    Some(Piece::End) => break,
                    // Abandoned: the data connection is dropped, and
                    // with it this control connection.
                    None => return Ok(()),
                }
            }
            c.finish(t, &ps)?;
            lock(&idle).push(c);
            Ok(())
        });
        Ok(Box::new(FtpWrite {
            tx,
            task: Some(task),
            display: self.display(p),
        }))
    }

    async fn mkdir_all(&self, dir: &[u8]) -> Result<(), TransferError> {
        let mut levels = Vec::new();
        let mut d = dir.to_vec();
        while d.len() > 1 {
            let t = d.strip_suffix(b"/").unwrap_or(&d).to_vec();
            levels.push(s(&t));
            d = path::parent(&t).to_vec();
        }
        levels.reverse();
        self.with(move |c| {
            for l in &levels {
                c.mkdir(l)?;
            }
            Ok(())
        })
        .await
    }

    async fn rename_over(&self, from: &[u8], to: &[u8]) -> Result<(), TransferError> {
        let (f, t) = (s(from), s(to));
        self.with(move |c| c.rename(&f, &t)).await
    }

    async fn remove(&self, p: &[u8]) -> Result<(), TransferError> {
        let ps = s(p);
        self.with(move |c| c.remove(&ps)).await
    }

    async fn remove_dir(&self, p: &[u8]) -> Result<(), TransferError> {
        let ps = s(p);
        self.with(move |c| c.rmdir(&ps)).await
    }

    async fn close(&self) {
        let conns = std::mem::take(&mut *lock(&self.idle));
        let _ = tokio::task::spawn_blocking(move || {
            for c in conns {
                c.quit();
            }
        })
        .await;
    }
}

struct FtpRead {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, TransferError>>,
}

#[async_trait]
impl ByteStream for FtpRead {
    async fn next(&mut self) -> Result<Option<Bytes>, TransferError> {
        match self.rx.recv().await {
            Some(r) => r.map(Some),
            None => Ok(None),
        }
    }
}

enum Piece {
    Data(Bytes),
    End,
}

struct FtpWrite {
    tx: tokio::sync::mpsc::Sender<Piece>,
    task: Option<tokio::task::JoinHandle<Result<(), TransferError>>>,
    display: String,
}

impl FtpWrite {
    async fn outcome(&mut self) -> Result<(), TransferError> {
        match self.task.take() {
            Some(t) => t.await.map_err(|e| {
                TransferError::Network(format!("{}: upload task failed: {e}", self.display))
            })?,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl Sink for FtpWrite {
    async fn write(&mut self, data: Bytes) -> Result<(), TransferError> {
        if self.tx.send(Piece::Data(data)).await.is_err() {
            self.outcome().await?;
            return Err(TransferError::Network(format!(
                "{}: the upload ended early",
                self.display
            )));
        }
        Ok(())
    }

    async fn finish(mut self: Box<Self>) -> Result<(), TransferError> {
        let _ = self.tx.send(Piece::End).await;
        self.outcome().await
    }
}
