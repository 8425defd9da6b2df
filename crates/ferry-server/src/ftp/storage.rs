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
//! removes the temporary file, unless NAME is a ferry client's
//! `.X.ferry-part`, a name that already says "partial": that keeps what
//! arrived, for `APPE` to continue. `REST n` + `STOR` and `APPE` continue
//! an existing file in place (from byte n, at most its length: no holes).
use std::fmt::Debug;
use std::fs::{self, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use unftp_core::storage::{self, Error, ErrorKind, Fileinfo, StorageBackend, FEATURE_RESTART};

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

    pub(crate) fn resolve(&self, path: &Path, no_follow: bool) -> storage::Result<Resolved> {
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

/// Is this a name that already says its file is partial: a ferry client's
/// `.NAME.ferry-part`? A cut STOR to one keeps what arrived, so `ferry cp
/// --resume` can continue it with APPE; any other name gets all or nothing.
fn is_part_name(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.ends_with(".ferry-part") && n.len() > 12)
}

/// A fresh `.NAME.ferry-upload-XXXXXXXX` beside `dest` (blocking).
fn temp_file(dest: &Path) -> storage::Result<(fs::File, PathBuf)> {
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(Error::from(ErrorKind::FileNameNotAllowedError));
    };
    let name = name.to_string_lossy();
    for _ in 0..8 {
        let tmp = parent.join(format!(".{name}{UPLOAD_MARK}{:08x}", rand::random::<u32>()));
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
        let client = path.as_ref().to_path_buf();
        let (file, fresh) = match self.prepare_put(user, &client, start_pos).await {
            Ok(t) => t,
            Err(e) => {
                // libunftp has already answered 150 and the client is
                // sending. Closing now would reset the connection under
                // it (ferry cp, curl: "broken pipe", the 550 never read);
                // read to the end instead, so the client gets the 550.
                let mut input = input;
                let _ = tokio::io::copy(&mut input, &mut tokio::io::sink()).await;
                return Err(e);
            }
        };
        let received = receive(input, file).await;
        let Some((tmp, r)) = fresh else {
            return Ok(received?);
        };
        let root = self.root.clone();
        let (tmp2, dest) = (tmp.clone(), r.real.clone());
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
            let kept = is_part_name(&dest) && tokio::fs::rename(&tmp, &dest).await.is_ok();
            if kept {
                tracing::info!(
                    "ftp: upload to {} was cut; the bytes that arrived are kept there for APPE to continue",
                    path.as_ref().display()
                );
            } else {
                let _ = tokio::fs::remove_file(&tmp).await;
                tracing::info!(
                    "ftp: upload to {} did not complete; nothing was written under its name",
                    path.as_ref().display()
                );
            }
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

/// Where an upload's bytes go: the open file, and for a fresh upload the
/// temporary name and the final one.
type PutTarget = (fs::File, Option<(PathBuf, Resolved)>);

impl ConfinedFs {
    /// Every check an upload can fail before a byte is written: writable,
    /// confined, not a directory; then the file to write.
    async fn prepare_put(
        &self,
        user: &FtpUser,
        client: &Path,
        start_pos: u64,
    ) -> storage::Result<PutTarget> {
        writable(user)?;
        let r = self.resolve(client, true)?;
        let dest = r.real.clone();
        if start_pos > 0 {
            // REST n + STOR, or APPE: continue the file in place.
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
            return Ok((file, None));
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
        Ok((file, Some((tmp, r))))
    }

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn user(writable: bool) -> FtpUser {
        FtpUser {
            name: "u".into(),
            writable,
        }
    }

    /// outer/{secret, root/{f, sub/, out -> ../secret}}
    fn setup() -> (tempfile::TempDir, ConfinedFs, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::write(root.join("f"), b"hello").unwrap();
        fs::write(t.path().join("secret"), b"s").unwrap();
        symlink(t.path().join("secret"), root.join("out")).unwrap();
        let fs_ = ConfinedFs::new(Root::new(&root).unwrap());
        (t, fs_, root)
    }

    #[test]
    fn part_names() {
        assert!(is_part_name(Path::new("/x/.a.bin.ferry-part")));
        assert!(!is_part_name(Path::new("/x/a.bin.ferry-part")));
        assert!(!is_part_name(Path::new("/x/.ferry-part")));
        assert!(!is_part_name(Path::new("/x/a.bin")));
    }

    #[test]
    fn paths_out_of_the_root_are_refused() {
        let (_t, b, _) = setup();
        rt().block_on(async {
            let u = user(true);
            assert_eq!(b.metadata(&u, "/f").await.unwrap().len, 5);
            assert_eq!(b.metadata(&u, "/sub/../f").await.unwrap().len, 5);
            for p in ["/../secret", "../secret", "/sub/../../secret", "/out"] {
                let e = b.metadata(&u, p).await.expect_err(p);
                assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{p}");
                assert!(b.get(&u, p, 0).await.is_err(), "{p}");
            }
            assert!(b.metadata(&u, "/a\0b").await.is_err());
            assert!(b.cwd(&u, "/..").await.is_err());
            assert!(b.cwd(&u, "/sub").await.is_ok());
            assert!(b.cwd(&u, "/f").await.is_err());
            // SIZE of a directory: 550, not its block size.
            assert!(b.metadata(&u, "/sub").await.is_err());
        });
    }

    #[test]
    fn read_only_refuses_every_change() {
        let (_t, b, root) = setup();
        rt().block_on(async {
            let u = user(false);
            let data: &'static [u8] = b"new";
            let e = b.put(&u, data, "/g", 0).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied);
            assert!(b.del(&u, "/f").await.is_err());
            assert!(b.mkd(&u, "/d").await.is_err());
            assert!(b.rmd(&u, "/sub").await.is_err());
            assert!(b.rename(&u, "/f", "/g").await.is_err());
        });
        assert!(root.join("f").exists() && root.join("sub").exists());
        assert!(!root.join("g").exists() && !root.join("d").exists());
    }

    #[test]
    fn stor_rest_and_list() {
        let (_t, b, root) = setup();
        rt().block_on(async {
            let u = user(true);
            let data: &'static [u8] = b"0123456789";
            assert_eq!(b.put(&u, data, "/sub/n", 0).await.unwrap(), 10);
            let tail: &'static [u8] = b"ab";
            b.put(&u, tail, "/sub/n", 4).await.unwrap();
            assert_eq!(fs::read(root.join("sub/n")).unwrap(), b"0123ab");
            // No holes: REST past the end is refused.
            assert!(b.put(&u, tail, "/sub/n", 99).await.is_err());
            let names: Vec<String> = b
                .list(&u, "/")
                .await
                .unwrap()
                .iter()
                .map(|f| f.path.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            assert!(names.contains(&"f".to_string()) && names.contains(&"sub".to_string()));
            // A write through a symlink out is refused.
            assert!(b.put(&u, data, "/out", 1).await.is_err());
            assert_eq!(fs::read(root.join("../secret")).unwrap(), b"s");
        });
        let left: Vec<_> = fs::read_dir(root.join("sub")).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary left: {left:?}");
    }
}
