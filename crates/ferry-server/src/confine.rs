//! Path confinement: every path a client names is mapped into the served
//! root, or refused.
//!
//! A client path is a byte string (SFTP) or a percent-decoded URL path
//! (HTTP). Both are read the same way: `/` is the served root, a relative
//! path starts at the root too (the root is every client's home), `.` is
//! dropped, `..` pops one component and is refused when it would climb
//! above the root. Names with NUL or invalid UTF-8 are refused outright:
//! they are either attacks or names no other client could show.
//!
//! Lexical checks are not enough once symlinks exist, so [`Root::resolve`]
//! also resolves the longest existing prefix with the kernel
//! (`canonicalize`) and refuses any result outside the canonical root. The
//! caller then opens the canonical path it got back, which has no symlinks
//! left in it.
use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused. Each maps to an SFTP status and an HTTP code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfineError {
    /// NUL, invalid UTF-8, or a name that is not a plain component.
    BadName(String),
    /// `..` above the root, or a symlink pointing outside it.
    Escapes(String),
    /// A path component that should be a directory does not exist.
    NotFound(String),
    /// Some other I/O failure while resolving.
    Io(String),
}

impl std::fmt::Display for ConfineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfineError::BadName(p) => write!(f, "{p}: invalid file name"),
            ConfineError::Escapes(p) => {
                write!(f, "{p}: outside the served directory")
            }
            ConfineError::NotFound(p) => write!(f, "{p}: no such file or directory"),
            ConfineError::Io(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for ConfineError {}

/// The served directory.
#[derive(Debug, Clone)]
pub struct Root {
    canonical: PathBuf,
    /// The root opened (`O_PATH`), for [`Root::open_beneath`]; `None`
    /// where it could not be opened so.
    dir: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

/// A client path that passed the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Where it is on disk. For an existing entry this is the canonical
    /// path (symlinks resolved), unless `no_follow` was asked.
    pub real: PathBuf,
    /// The path as clients see it, normalised: `/`, `/a/b`.
    pub virtual_path: String,
}

impl Root {
    pub fn new(dir: &Path) -> io::Result<Root> {
        let canonical = dir.canonicalize()?;
        if !canonical.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{}: not a directory", dir.display()),
            ));
        }
        use rustix::fs::{Mode, OFlags};
        let dir = rustix::fs::open(
            &canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .map(std::sync::Arc::new);
        Ok(Root { canonical, dir })
    }

    /// Open an existing entry below the root by the client's path, the
    /// kernel confining the walk (`openat2` with `RESOLVE_BENEATH`: no
    /// component, `..` or symlink may leave the root; absolute symlinks
    /// are refused): one path walk where [`Root::resolve`] makes one
    /// `lstat` per component and the caller's open another (a quarter of
    /// ferry serve's session thread in `sync -c` of 10,000 small files).
    /// The final symlink is followed, as by `resolve(.., false)`. `None`
    /// for anything it does not open (missing, refused, a kernel without
    /// `openat2`, the root itself): the caller then takes the way of
    /// [`Root::resolve`], which says why.
    pub fn open_beneath(&self, client: &[u8], flags: rustix::fs::OFlags) -> Option<std::fs::File> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let dir = self.dir.as_ref()?;
        let parts = Self::normalize(client).ok()?;
        if parts.is_empty() {
            return None;
        }
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        let flags = (flags | OFlags::CLOEXEC) - OFlags::CREATE - OFlags::TRUNC;
        rustix::fs::openat2(dir.as_ref(), parts.join("/"), flags, Mode::empty(), how)
            .ok()
            .map(std::fs::File::from)
    }

    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Normalise a client path into root-relative components, without
    /// touching the disk.
    pub fn normalize(client: &[u8]) -> Result<Vec<String>, ConfineError> {
        let shown = String::from_utf8_lossy(client).into_owned();
        if client.contains(&0) {
            return Err(ConfineError::BadName(shown));
        }
        let text = std::str::from_utf8(client).map_err(|_| ConfineError::BadName(shown.clone()))?;
        let mut parts: Vec<String> = Vec::new();
        for c in text.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(ConfineError::Escapes(shown));
                    }
                }
                name => parts.push(name.to_string()),
            }
        }
        Ok(parts)
    }

    /// Like [`Root::normalize`], but `..` at the root stays at the root,
    /// as in a chroot. Only for answering REALPATH, never for opening.
    pub fn normalize_clamped(client: &[u8]) -> Result<Vec<String>, ConfineError> {
        let mut parts: Vec<String> = Vec::new();
        let text = std::str::from_utf8(client)
            .ok()
            .filter(|_| !client.contains(&0))
            .ok_or_else(|| ConfineError::BadName(String::from_utf8_lossy(client).into_owned()))?;
        for c in text.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                name => parts.push(name.to_string()),
            }
        }
        Ok(parts)
    }

    /// Map a client path to a real path inside the root. With `no_follow`,
    /// a final symlink is not followed (for LSTAT, REMOVE, RENAME, and
    /// names about to be created); every directory above it still is.
    pub fn resolve(&self, client: &[u8], no_follow: bool) -> Result<Resolved, ConfineError> {
        let parts = Self::normalize(client)?;
        let virtual_path = format!("/{}", parts.join("/"));
        let mut lexical = self.canonical.clone();
        for p in &parts {
            lexical.push(p);
        }
        let real = if no_follow {
            match parts.split_last() {
                None => self.canonical.clone(),
                Some((last, dirs)) => {
                    let mut parent = self.canonical.clone();
                    for d in dirs {
                        parent.push(d);
                    }
                    let parent = self.check_existing_prefix(&parent, &virtual_path)?;
                    parent.join(last)
                }
            }
        } else {
            self.check_existing_prefix(&lexical, &virtual_path)?
        };
        Ok(Resolved { real, virtual_path })
    }

    /// Resolve the longest prefix of `path` that exists, refuse it if it
    /// lands outside the root, and re-append the missing tail.
    ///
    /// The root is canonical already, so only the components below it are
    /// looked at: one `lstat` each. Where one is a symlink the kernel
    /// resolves the whole path (`canonicalize`). `canonicalize` alone
    /// (glibc's `realpath`) calls `readlink` on every component from `/`:
    /// 17 calls per file of a small-file upload to ferry serve, 15% of its
    /// CPU (docs/internals/server.md).
    fn check_existing_prefix(&self, path: &Path, shown: &str) -> Result<PathBuf, ConfineError> {
        let Ok(rel) = path.strip_prefix(&self.canonical) else {
            return self.canonicalize_prefix(path, shown);
        };
        let mut out = self.canonical.clone();
        let mut parts = rel.components();
        while let Some(part) = parts.next() {
            let Component::Normal(name) = part else {
                return self.canonicalize_prefix(path, shown);
            };
            out.push(name);
            match out.symlink_metadata() {
                Ok(m) if m.file_type().is_symlink() => {
                    return self.canonicalize_prefix(path, shown);
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // The rest does not exist: nothing below can be a
                    // symlink.
                    for rest in parts {
                        out.push(rest);
                    }
                    return Ok(out);
                }
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                    // ENOTDIR: a file used as a directory.
                    return Err(ConfineError::NotFound(shown.to_string()));
                }
                Err(e) => return Err(ConfineError::Io(format!("{shown}: {e}"))),
            }
        }
        Ok(out)
    }

    /// [`Root::check_existing_prefix`] by the kernel's resolution: for
    /// paths with symlinks in them.
    fn canonicalize_prefix(&self, path: &Path, shown: &str) -> Result<PathBuf, ConfineError> {
        let mut existing = path.to_path_buf();
        let mut tail: Vec<std::ffi::OsString> = Vec::new();
        let canonical = loop {
            match existing.canonicalize() {
                Ok(c) => break c,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A dangling symlink is "not found" for canonicalize
                    // but exists: never walk past one, its target is
                    // unchecked.
                    if existing.symlink_metadata().is_ok() {
                        return Err(ConfineError::NotFound(shown.to_string()));
                    }
                    let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
                        return Err(ConfineError::NotFound(shown.to_string()));
                    };
                    tail.push(name);
                    if !existing.pop() {
                        return Err(ConfineError::NotFound(shown.to_string()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                    // ENOTDIR: a file used as a directory.
                    return Err(ConfineError::NotFound(shown.to_string()));
                }
                Err(e) => return Err(ConfineError::Io(format!("{shown}: {e}"))),
            }
        };
        if !canonical.starts_with(&self.canonical) {
            return Err(ConfineError::Escapes(shown.to_string()));
        }
        let mut out = canonical;
        for name in tail.into_iter().rev() {
            out.push(name);
        }
        debug_assert!(out.components().all(|c| !matches!(c, Component::ParentDir)));
        Ok(out)
    }

    /// Is this real path (an existing entry) inside the root, after
    /// following every symlink? For checks on symlink targets.
    pub fn contains(&self, real: &Path) -> bool {
        real.canonicalize()
            .map(|c| c.starts_with(&self.canonical))
            .unwrap_or(false)
    }

    /// The client's view of a real path inside the root.
    pub fn virtual_of(&self, real: &Path) -> Option<String> {
        let rel = real.strip_prefix(&self.canonical).ok()?;
        let mut out = String::from("/");
        let mut first = true;
        for c in rel.components() {
            let Component::Normal(n) = c else {
                return None;
            };
            if !first {
                out.push('/');
            }
            out.push_str(n.to_str()?);
            first = false;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Root, PathBuf) {
        let outer = tempfile::tempdir().unwrap();
        let root_dir = outer.path().join("root");
        std::fs::create_dir_all(root_dir.join("sub")).unwrap();
        std::fs::write(root_dir.join("sub/f"), b"x").unwrap();
        std::fs::write(outer.path().join("secret"), b"s").unwrap();
        let root = Root::new(&root_dir).unwrap();
        let canon = root.path().to_path_buf();
        (outer, root, canon)
    }

    #[test]
    fn plain_paths_map_inside() {
        let (_t, root, c) = setup();
        let r = root.resolve(b"/sub/f", false).unwrap();
        assert_eq!(r.real, c.join("sub/f"));
        assert_eq!(r.virtual_path, "/sub/f");
        assert_eq!(
            root.resolve(b"sub/./f", false).unwrap().real,
            c.join("sub/f")
        );
        assert_eq!(root.resolve(b"/", false).unwrap().real, c);
        assert_eq!(root.resolve(b"", false).unwrap().virtual_path, "/");
        assert_eq!(
            root.resolve(b"sub/../sub/f", false).unwrap().real,
            c.join("sub/f")
        );
        // Not existing yet: allowed, for creation.
        assert_eq!(
            root.resolve(b"/sub/new", false).unwrap().real,
            c.join("sub/new")
        );
    }

    #[test]
    fn dotdot_above_root_is_refused() {
        let (_t, root, _) = setup();
        for p in [&b"/.."[..], b"..", b"/sub/../../secret", b"../root/sub"] {
            assert!(
                matches!(root.resolve(p, false), Err(ConfineError::Escapes(_))),
                "{p:?}"
            );
        }
    }

    #[test]
    fn nul_and_bad_utf8_are_refused() {
        let (_t, root, _) = setup();
        assert!(matches!(
            root.resolve(b"/a\0b", false),
            Err(ConfineError::BadName(_))
        ));
        assert!(matches!(
            root.resolve(b"/a\xffb", false),
            Err(ConfineError::BadName(_))
        ));
    }

    #[test]
    fn symlinks_out_are_refused_and_in_are_followed() {
        let (t, root, c) = setup();
        symlink(t.path().join("secret"), c.join("out")).unwrap();
        symlink(t.path(), c.join("outdir")).unwrap();
        symlink(c.join("sub"), c.join("indir")).unwrap();
        symlink(t.path().join("nothing"), c.join("dangling")).unwrap();
        assert!(matches!(
            root.resolve(b"/out", false),
            Err(ConfineError::Escapes(_))
        ));
        assert!(matches!(
            root.resolve(b"/outdir/secret", false),
            Err(ConfineError::Escapes(_))
        ));
        assert!(matches!(
            root.resolve(b"/outdir/new", false),
            Err(ConfineError::Escapes(_))
        ));
        assert!(matches!(
            root.resolve(b"/outdir/new", true),
            Err(ConfineError::Escapes(_))
        ));
        assert_eq!(
            root.resolve(b"/indir/f", false).unwrap().real,
            c.join("sub/f")
        );
        // lstat of the link itself is fine; following it is not.
        assert_eq!(root.resolve(b"/out", true).unwrap().real, c.join("out"));
        assert!(root.resolve(b"/dangling", false).is_err());
        assert!(root.resolve(b"/dangling/x", false).is_err());
    }

    #[test]
    fn deep_paths_walk_below_the_root() {
        let (t, root, c) = setup();
        // A symlink deeper down still sends the path through the kernel.
        symlink(t.path(), c.join("sub/up")).unwrap();
        assert!(matches!(
            root.resolve(b"/sub/up/secret", false),
            Err(ConfineError::Escapes(_))
        ));
        assert!(matches!(
            root.resolve(b"/sub/up/new", true),
            Err(ConfineError::Escapes(_))
        ));
        // A missing tail is kept as it was asked for.
        assert_eq!(
            root.resolve(b"/sub/new/deeper", false).unwrap().real,
            c.join("sub/new/deeper")
        );
        assert_eq!(root.resolve(b"/", false).unwrap().real, c);
    }

    #[test]
    fn opened_beneath_or_left_to_resolve() {
        use rustix::fs::OFlags;
        let (t, root, c) = setup();
        std::fs::create_dir_all(c.join("a/b")).unwrap();
        std::fs::write(c.join("a/b/f"), b"inside").unwrap();
        symlink("b/f", c.join("a/rel")).unwrap();
        symlink(t.path().join("secret"), c.join("out")).unwrap();
        symlink(c.join("sub/f"), c.join("absolute_in")).unwrap();
        symlink("../../../secret", c.join("a/b/up")).unwrap();
        let read = |p: &[u8]| {
            root.open_beneath(p, OFlags::RDONLY)
                .map(|f| std::io::read_to_string(f).unwrap())
        };
        assert_eq!(read(b"/a/b/f").as_deref(), Some("inside"));
        assert_eq!(read(b"a/./b/../b/f").as_deref(), Some("inside"));
        assert_eq!(read(b"/a/rel").as_deref(), Some("inside"));
        // Out of the root by a symlink or `..`: not opened here, and
        // `resolve` refuses them.
        for p in [&b"/out"[..], b"/a/b/up", b"/../secret"] {
            assert_eq!(read(p), None, "{}", String::from_utf8_lossy(p));
            assert!(root.resolve(p, false).is_err());
        }
        // An absolute symlink, even one that stays inside: left to
        // `resolve`, which follows it.
        assert_eq!(read(b"/absolute_in"), None);
        assert_eq!(
            root.resolve(b"/absolute_in", false).unwrap().real,
            c.join("sub/f")
        );
        assert_eq!(read(b"/"), None);
        assert_eq!(read(b"/missing"), None);
    }

    #[test]
    fn file_as_directory_is_not_found() {
        let (_t, root, _) = setup();
        assert!(matches!(
            root.resolve(b"/sub/f/x", false),
            Err(ConfineError::NotFound(_))
        ));
    }

    #[test]
    fn virtual_of_round_trips() {
        let (_t, root, c) = setup();
        assert_eq!(root.virtual_of(&c.join("sub/f")).as_deref(), Some("/sub/f"));
        assert_eq!(root.virtual_of(&c).as_deref(), Some("/"));
        assert_eq!(root.virtual_of(Path::new("/etc")), None);
    }
}
