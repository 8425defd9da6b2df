//! Local part files of downloads, shared by the HTTP and FTP paths: data
//! goes to `.NAME.ferry-part` next to the final name, a resume record
//! `.NAME.ferry-resume` says which bytes of it are good, and the finished
//! part file is renamed over NAME (never a truncated final file, and the
//! old NAME stays until then). docs/internals/http.md, "Resume".
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::error::TransferError;
use crate::journal;
use crate::loop_util::{os, set_local_times, side_name, tmp_name};
use crate::Stats;

/// Files smaller than this get no resume record (they start over).
pub(crate) const NO_RESUME_BELOW: u64 = 1024 * 1024;
/// Bytes gathered before one write to the file.
pub(crate) const WRITE_BUF: usize = 1024 * 1024;

/// Resume state of one part file (`.NAME.ferry-resume`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Partial {
    /// Strong ETag, else Last-Modified: what If-Range sends.
    pub validator: Option<String>,
    pub size: Option<u64>,
    /// Written in order by one stream: every byte below the part file's
    /// length arrived.
    pub sequential: bool,
    /// With ranges: which arrived.
    pub done: Vec<(u64, u64)>,
}

const PARTIAL_MAGIC: &str = "ferry-resume-http 1";

impl Partial {
    pub(crate) fn read(path: &Path) -> Option<Partial> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut lines = text.lines();
        if lines.next()? != PARTIAL_MAGIC {
            return None;
        }
        let mut p = Partial::default();
        for line in lines {
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            match k {
                "validator" => p.validator = Some(v.to_string()),
                "size" => p.size = Some(v.parse().ok()?),
                "sequential" => p.sequential = true,
                "done" => {
                    let (a, b) = v.split_once(' ')?;
                    p.done.push((a.parse().ok()?, b.parse().ok()?));
                }
                _ => return None,
            }
        }
        p.done = journal::merge(p.done);
        Some(p)
    }

    /// Atomically, like journal.rs.
    pub(crate) fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut t = format!("{PARTIAL_MAGIC}\n");
        if let Some(v) = &self.validator {
            t.push_str(&format!("validator {}\n", v.replace(['\n', '\r'], "")));
        }
        if let Some(s) = self.size {
            t.push_str(&format!("size {s}\n"));
        }
        if self.sequential {
            t.push_str("sequential\n");
        }
        for (a, b) in &self.done {
            t.push_str(&format!("done {a} {b}\n"));
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        std::fs::write(&tmp, t)?;
        std::fs::rename(&tmp, path)
    }

    /// Bytes known good from the start of the part file.
    pub(crate) fn prefix(&self, part_len: u64) -> u64 {
        if self.sequential {
            return part_len;
        }
        match self.done.first() {
            Some(&(0, b)) => b.min(part_len),
            _ => 0,
        }
    }
}

/// The local destination a download names on the command line, checked
/// before anything is written: every file goes to a temporary name and is
/// renamed over its final name, which would replace a device, a pipe or a
/// socket (`ferry cp URL /dev/null` once turned /dev/null into a regular
/// file) and would put a file where a symbolic link was. So a link to a
/// file is followed (the file it points to is replaced, the link stays, as
/// `cp` and `curl -o` do), and anything but a file or a directory is
/// refused with a usage error.
pub(crate) fn local_dest(dest: &Path) -> Result<PathBuf, TransferError> {
    let Ok(l) = std::fs::symlink_metadata(dest) else {
        return Ok(dest.to_path_buf());
    };
    let followed = if l.file_type().is_symlink() {
        match std::fs::metadata(dest) {
            Ok(m) => m,
            // A dangling link: the copy takes its place, nothing is lost.
            Err(_) => return Ok(dest.to_path_buf()),
        }
    } else {
        l.clone()
    };
    if followed.is_dir() {
        return Ok(dest.to_path_buf());
    }
    if !followed.is_file() {
        return Err(TransferError::Usage(format!(
            "{}: not a regular file (a device, pipe or socket); ferry writes each download to a \
             temporary file and renames it into place, which would replace it. Copy to a file or a directory",
            dest.display()
        )));
    }
    if l.file_type().is_symlink() {
        return std::fs::canonicalize(dest)
            .map_err(|e| TransferError::local(dest, "cannot follow the symbolic link", e));
    }
    Ok(dest.to_path_buf())
}

pub(crate) struct Paths {
    pub tmp: PathBuf,
    pub journal: PathBuf,
}

pub(crate) fn paths(dst: &Path) -> Paths {
    let b = dst.as_os_str().as_bytes();
    Paths {
        tmp: os(&tmp_name(b)),
        journal: os(&side_name(b, b".ferry-resume")),
    }
}

pub(crate) fn open_part(tmp: &Path, keep: u64) -> Result<std::fs::File, TransferError> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .create(true)
        .truncate(keep == 0)
        .open(tmp)
        .map_err(|e| TransferError::local(tmp, "cannot create", e))?;
    if keep > 0 {
        f.set_len(keep)
            .map_err(|e| TransferError::local(tmp, "cannot truncate", e))?;
    }
    Ok(f)
}

pub(crate) fn kept(e: TransferError, tmp: &Path) -> TransferError {
    match e {
        TransferError::Network(m) => TransferError::Network(format!(
            "{m}; the partial file {} is kept: rerun with --resume",
            tmp.display()
        )),
        other => other,
    }
}

pub(crate) fn write_at(
    f: &std::fs::File,
    data: &[u8],
    at: u64,
    tmp: &Path,
) -> Result<(), TransferError> {
    f.write_all_at(data, at)
        .map_err(|e| TransferError::local(tmp, "cannot write", e))
}

/// Move the finished part file over `dst` (with `mtime` set first, for
/// -p), drop its resume record, count the file.
pub(crate) fn finish(
    p: &Paths,
    dst: &Path,
    mtime: Option<u32>,
    journal_written: bool,
    stats: &Stats,
) -> Result<(), TransferError> {
    if let Some(m) = mtime {
        set_local_times(&p.tmp, m, m);
    }
    if let Err(e) = std::fs::rename(&p.tmp, dst) {
        // rename(2) refuses to put a file over a directory (EISDIR): the
        // rename is the check, so a download needs no stat of its
        // destination first (one statx per file, 2.5% of ferry cp's samples
        // for 1000 x 20 kB). The finished part is removed: it cannot go
        // anywhere, and a resume would only meet the same directory.
        if e.kind() == std::io::ErrorKind::IsADirectory {
            let _ = std::fs::remove_file(&p.tmp);
            if journal_written {
                journal::remove(&p.journal);
            }
            return Err(TransferError::Local(format!(
                "{}: is a directory; cannot replace it with a file (remove it, or copy into it with a trailing /)",
                dst.display()
            )));
        }
        return Err(TransferError::local(
            dst,
            "cannot rename the finished file into place",
            e,
        ));
    }
    if journal_written {
        journal::remove(&p.journal);
    }
    stats.files_done.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn local_dest_follows_links_and_refuses_what_a_rename_would_replace() {
        let d = tempfile::tempdir().unwrap();
        let p = |n: &str| d.path().join(n);
        // Not there yet, a file, a directory: as given.
        assert_eq!(local_dest(&p("new")).unwrap(), p("new"));
        std::fs::write(p("file"), b"x").unwrap();
        assert_eq!(local_dest(&p("file")).unwrap(), p("file"));
        std::fs::create_dir(p("dir")).unwrap();
        assert_eq!(local_dest(&p("dir")).unwrap(), p("dir"));
        // A link to a file: the file. To a directory, or dangling: as given.
        std::os::unix::fs::symlink("file", p("to-file")).unwrap();
        let real = std::fs::canonicalize(p("file")).unwrap();
        assert_eq!(local_dest(&p("to-file")).unwrap(), real);
        std::os::unix::fs::symlink("dir", p("to-dir")).unwrap();
        assert_eq!(local_dest(&p("to-dir")).unwrap(), p("to-dir"));
        std::os::unix::fs::symlink("nothing", p("dangling")).unwrap();
        assert_eq!(local_dest(&p("dangling")).unwrap(), p("dangling"));
        // A device (directly or through a link): refused, named.
        for dev in [Path::new("/dev/null"), &p("to-null")] {
            if dev != Path::new("/dev/null") {
                std::os::unix::fs::symlink("/dev/null", dev).unwrap();
            }
            match local_dest(dev) {
                Err(TransferError::Usage(m)) => {
                    assert!(m.contains("not a regular file"), "{m}");
                    assert!(m.contains(&dev.display().to_string()), "{m}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn partial_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("j");
        let p = Partial {
            validator: Some("\"abc-123\"".into()),
            size: Some(100),
            sequential: false,
            done: vec![(0, 10), (20, 30)],
        };
        p.write(&path).unwrap();
        assert_eq!(Partial::read(&path), Some(p.clone()));
        assert_eq!(p.prefix(50), 10);
        let s = Partial {
            sequential: true,
            ..p
        };
        assert_eq!(s.prefix(50), 50);
        std::fs::write(&path, "ferry-resume-http 1\nsize x\n").unwrap();
        assert_eq!(Partial::read(&path), None);
    }
}
