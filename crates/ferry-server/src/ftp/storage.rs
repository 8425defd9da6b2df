//! The libunftp storage backend: the local file system, every path confined
//! to the served root by [`Root`].
//!
//! libunftp hands each command's path here as the session's working
//! directory joined with what the client sent (`/a/../b`, `../../etc`,
//! `/etc/passwd`). Every one goes through [`Root::resolve`]: `/` is the
//! served root, `..` may not climb above it, NUL and invalid UTF-8 are
//! refused, and symlinks are resolved by the kernel and refused when they
//! lead outside. Names about to be created, removed or renamed are resolved
//! without following their last component.
//!
//! A `STOR` is written to `.NAME.ferry-upload-XXXXXXXX` beside NAME and
//! renamed over NAME only when the data connection ended cleanly; a
//! transfer that fails (over TLS: a connection cut without `close_notify`)
//! removes the temporary file. `REST n` + `STOR` continues an existing
//! file in place from byte n (at most its length: no holes).
use std::fmt::Debug;
use std::fs::{self, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use async_trait::async_trait;
use unftp_core::storage::{self, Error, ErrorKind, Fileinfo, StorageBackend, FEATURE_RESTART};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};

use super::auth::FtpUser;
use crate::confine::{ConfineError, Resolved, Root};
use crate::http::listing::UPLOAD_MARK;

/// Read and write buffers: one `read`/`write` system call per this many bytes.
const IO_BUF: usize = 256 * 1024;

/// The local directory tree under [`Root`].
#[derive(Debug, Clone)]
pub struct ConfinedFs {
    root: Root,
}

impl ConfinedFs {
    pub fn new(root: Root) -> Self {
        ConfinedFs { root }
    }

    fn resolve(&self, path: &Path, no_follow: bool) -> storage::Result<Resolved> {
        use std::os::unix::ffi::OsStrExt;
        self.root
            .resolve(path.as_os_str().as_bytes(), no_follow)
            .map_err(confine_error)
    }
}

/// What a refused path becomes. libunftp turns the kind into the reply
/// (550 for all of these but the invalid name, 553).
fn confine_error(e: ConfineError) -> Error {
    let kind = match &e {
        ConfineError::BadName(_) => ErrorKind::FileNameNotAllowedError,
        ConfineError::Escapes(_) => ErrorKind::PermissionDenied,
        ConfineError::NotFound(_) => ErrorKind::PermanentFileNotAvailable,
        ConfineError::Io(_) => ErrorKind::LocalError,
    };
    tracing::debug!("ftp: refused: {e}");
    Error::new(kind, e)
}

fn read_only() -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "read-only: ferry serve was started without --writable (or this is an anonymous --public login)",
        ),
    )
}

fn writable(user: &FtpUser) -> storage::Result<()> {
    if user.writable {
        Ok(())
    } else {
        Err(read_only())
    }
}

/// Run blocking file-system work off the runtime thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> storage::Result<T> + Send + 'static,
) -> storage::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(ErrorKind::LocalError, e))?
}

/// What libunftp needs of a file for LIST, MLSD, SIZE and MDTM.
#[derive(Debug, Clone)]
pub struct Meta {
    len: u64,
    dir: bool,
    file: bool,
    symlink: bool,
    modified: Option<SystemTime>,
    uid: u32,
    gid: u32,
    mode: u32,
    nlink: u64,
}

impl From<&fs::Metadata> for Meta {
    fn from(m: &fs::Metadata) -> Self {
        Meta {
            len: m.len(),
            dir: m.is_dir(),
            file: m.is_file(),
            symlink: m.file_type().is_symlink(),
            modified: m.modified().ok(),
            uid: m.uid(),
            gid: m.gid(),
            mode: m.mode() & 0o777,
            nlink: m.nlink(),
        }
    }
}

impl storage::Metadata for Meta {
    fn len(&self) -> u64 {
        self.len
    }
    fn is_dir(&self) -> bool {
        self.dir
    }
    fn is_file(&self) -> bool {
        self.file
    }
    fn is_symlink(&self) -> bool {
        self.symlink
    }
    fn modified(&self) -> storage::Result<SystemTime> {
        self.modified
            .ok_or_else(|| Error::from(ErrorKind::PermanentFileNotAvailable))
    }
    fn gid(&self) -> u32 {
        self.gid
    }
    fn uid(&self) -> u32 {
        self.uid
    }
    fn links(&self) -> u64 {
        self.nlink
    }
    fn permissions(&self) -> storage::Permissions {
        storage::Permissions(self.mode)
    }
}

/// One directory's entries (blocking). Symlinks whose target is inside the
/// root are shown as what they point to, so clients walk them like the
/// real thing; others stay symlinks without a target (clients skip them,
/// and following one is refused). Upload temporaries are hidden.
fn read_dir(root: &Root, dir: &Resolved) -> storage::Result<Vec<Fileinfo<PathBuf, Meta>>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(&dir.real)? {
        let Ok(ent) = ent else { continue };
        let Some(name) = ent.file_name().to_str().map(str::to_string) else {
            continue; // not UTF-8: no client could name it back
        };
        if name.starts_with('.') && name.contains(UPLOAD_MARK) {
            continue;
        }
        let path = ent.path();
        let Ok(lmeta) = fs::symlink_metadata(&path) else {
            continue; // gone meanwhile
        };
        let meta = if lmeta.file_type().is_symlink() && root.contains(&path) {
            fs::metadata(&path).unwrap_or(lmeta)
        } else {
            lmeta
        };
        let ft = meta.file_type();
        if !(ft.is_file() || ft.is_dir() || ft.is_symlink()) {
            continue; // sockets, fifos, devices: nothing to transfer
        }
        out.push(Fileinfo {
            path: Path::new(&dir.virtual_path).join(&name),
            metadata: Meta::from(&meta),
        });
    }
    Ok(out)
}

/// A fresh `.NAME.ferry-upload-XXXXXXXX` beside `dest` (blocking).
fn temp_file(dest: &Path) -> storage::Result<(fs::File, PathBuf)> {
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(Error::from(ErrorKind::FileNameNotAllowedError));
    };
    let name = name.to_string_lossy();
    for _ in 0..8 {
        let tmp = parent.join(format!(
            ".{name}{UPLOAD_MARK}{:08x}",
            rand::random::<u32>()
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::from(ErrorKind::LocalError))
}

/// Copy the data connection into `file`; the byte count, or the error that
/// cut it (a TLS data connection closed without `close_notify` is one).
async fn receive<R: AsyncRead + Unpin>(input: R, file: fs::File) -> io::Result<u64> {
    let mut input = input;
    let mut out = BufWriter::with_capacity(IO_BUF, tokio::fs::File::from_std(file));
    let n = tokio::io::copy(&mut input, &mut out).await?;
    out.flush().await?;
    let mut file = out.into_inner();
    file.flush().await?;
    Ok(n)
}

#[async_trait]
impl StorageBackend<FtpUser> for ConfinedFs {
    type Metadata = Meta;

    fn name(&self) -> &str {
        "ferry-confined-fs"
    }

    fn supported_features(&self) -> u32 {
        FEATURE_RESTART
    }

    async fn metadata<P: AsRef<Path> + Send + Debug>(
        &self,
        _user: &FtpUser,
        path: P,
    ) -> storage::Result<Meta> {
        // libunftp answers SIZE, MDTM, MLST and RNFR from this one call.
        // A directory is refused: a 213 to `SIZE dir` makes clients (ours
        // among them) take it for a file, as vsftpd's 550 does not. The
        // cost: MLST and RNFR of a directory are refused too.
        let r = self.resolve(path.as_ref(), false)?;
        blocking(move || {
            let m = fs::metadata(&r.real)?;
            if m.is_dir() {
                return Err(Error::new(
                    ErrorKind::PermanentFileNotAvailable,
                    io::Error::other("a directory, not a file"),
                ));
            }
            Ok(Meta::from(&m))
        })
        .await
    }

    async fn list<P: AsRef<Path> + Send + Debug>(
        &self,
        _user: &FtpUser,
        path: P,
    ) -> storage::Result<Vec<Fileinfo<PathBuf, Meta>>> {
        let r = self.resolve(path.as_ref(), false)?;
        let root = self.root.clone();
        blocking(move || read_dir(&root, &r)).await
    }

    async fn get_into<'a, P, W: ?Sized>(
        &self,
        user: &FtpUser,
        path: P,
        start_pos: u64,
        output: &'a mut W,
    ) -> storage::Result<u64>
    where
        W: AsyncWrite + Unpin + Sync + Send,
        P: AsRef<Path> + Send + Debug,
    {
        // Large reads from the file, large writes to the data connection
        // (the default copies 8 KiB at a time).
        let mut reader = self.open_read(user, path.as_ref(), start_pos).await?;
        Ok(tokio::io::copy_buf(&mut reader, output).await?)
    }

    async fn get<P: AsRef<Path> + Send + Debug>(
        &self,
        user: &FtpUser,
        path: P,
        start_pos: u64,
    ) -> storage::Result<Box<dyn AsyncRead + Send + Sync + Unpin>> {
        Ok(Box::new(
            self.open_read(user, path.as_ref(), start_pos).await?,
        ))
    }

    async fn put<P: AsRef<Path> + Send + Debug, R: AsyncRead + Send + Sync + Unpin + 'static>(
        &self,
        user: &FtpUser,
        input: R,
        path: P,
        start_pos: u64,
    ) -> storage::Result<u64> {
        writable(user)?;
        let client = path.as_ref().to_path_buf();
        let r = self.resolve(&client, true)?;
        let dest = r.real.clone();
        if start_pos > 0 {
            // REST n + STOR: continue the file in place.
            let file = blocking(move || {
                let mut f = OpenOptions::new()
                    .write(true)
                    .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                    .open(&dest)?;
                let m = f.metadata()?;
                if !m.is_file() || start_pos > m.len() {
                    return Err(Error::new(
                        ErrorKind::PermanentFileNotAvailable,
                        io::Error::other("REST offset past the end of the file"),
                    ));
                }
                f.set_len(start_pos)?;
                f.seek(SeekFrom::Start(start_pos))?;
                Ok(f)
            })
            .await?;
            return Ok(receive(input, file).await?);
        }
        let (file, tmp) = blocking(move || {
            if fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir()) {
                return Err(Error::new(
                    ErrorKind::PermanentFileNotAvailable,
                    io::Error::other("a directory has this name"),
                ));
            }
            temp_file(&dest)
        })
        .await?;
        let received = receive(input, file).await;
        let root = self.root.clone();
        let tmp2 = tmp.clone();
        let done = blocking(move || {
            let n = received?;
            // Checked again: a symlink swapped in above the name meanwhile
            // must not carry the file out of the root.
            use std::os::unix::ffi::OsStrExt;
            let again = root
                .resolve(client.as_os_str().as_bytes(), true)
                .map_err(confine_error)?;
            if again.real != r.real {
                return Err(Error::from(ErrorKind::PermissionDenied));
            }
            fs::rename(&tmp2, &r.real)?;
            Ok(n)
        })
        .await;
        if done.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
            tracing::info!(
                "ftp: upload to {} did not complete; nothing was written under its name",
                path.as_ref().display()
            );
        }
        done
    }

    async fn del<P: AsRef<Path> + Send + Debug>(
        &self,
        user: &FtpUser,
        path: P,
    ) -> storage::Result<()> {
        writable(user)?;
        let r = self.resolve(path.as_ref(), true)?;
        blocking(move || {
            if fs::symlink_metadata(&r.real)?.is_dir() {
                return Err(Error::from(ErrorKind::PermanentFileNotAvailable));
            }
            Ok(fs::remove_file(&r.real)?)
        })
        .await
    }

    async fn mkd<P: AsRef<Path> + Send + Debug>(
        &self,
        user: &FtpUser,
        path: P,
    ) -> storage::Result<()> {
        writable(user)?;
        let r = self.resolve(path.as_ref(), true)?;
        blocking(move || Ok(fs::create_dir(&r.real)?)).await
    }

    async fn rename<P: AsRef<Path> + Send + Debug>(
        &self,
        user: &FtpUser,
        from: P,
        to: P,
    ) -> storage::Result<()> {
        writable(user)?;
        let from = self.resolve(from.as_ref(), true)?;
        let to = self.resolve(to.as_ref(), true)?;
        if from.virtual_path == "/" || to.virtual_path == "/" {
            return Err(Error::from(ErrorKind::PermissionDenied));
        }
        blocking(move || Ok(fs::rename(&from.real, &to.real)?)).await
    }

    async fn rmd<P: AsRef<Path> + Send + Debug>(
        &self,
        user: &FtpUser,
        path: P,
    ) -> storage::Result<()> {
        writable(user)?;
        let r = self.resolve(path.as_ref(), true)?;
        if r.virtual_path == "/" {
            return Err(Error::from(ErrorKind::PermissionDenied));
        }
        blocking(move || Ok(fs::remove_dir(&r.real)?)).await
    }

    async fn cwd<P: AsRef<Path> + Send + Debug>(
        &self,
        _user: &FtpUser,
        path: P,
    ) -> storage::Result<()> {
        let r = self.resolve(path.as_ref(), false)?;
        blocking(move || {
            if fs::metadata(&r.real)?.is_dir() {
                Ok(())
            } else {
                Err(Error::from(ErrorKind::PermanentDirectoryNotAvailable))
            }
        })
        .await
    }
}

impl ConfinedFs {
    /// Open a regular file for RETR at `start_pos`, behind a large buffer.
    async fn open_read(
        &self,
        _user: &FtpUser,
        path: &Path,
        start_pos: u64,
    ) -> storage::Result<BufReader<tokio::fs::File>> {
        let r = self.resolve(path, false)?;
        let f = blocking(move || {
            let mut f = fs::File::open(&r.real)?;
            if !f.metadata()?.is_file() {
                return Err(Error::new(
                    ErrorKind::PermanentFileNotAvailable,
                    io::Error::other("not a file"),
                ));
            }
            if start_pos > 0 {
                f.seek(SeekFrom::Start(start_pos))?;
            }
            Ok(f)
        })
        .await?;
        let mut f = tokio::fs::File::from_std(f);
        f.set_max_buf_size(IO_BUF);
        Ok(BufReader::with_capacity(IO_BUF, f))
    }
}
