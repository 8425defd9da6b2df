//! What the HTTP(S) and FTP(S) copy loops share (errors said once, local
//! trees walked, part-file names, local times) until local <-> those
//! servers runs on the engine as SFTP does (docs/internals/engine.md,
//! "Migration").
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use crate::error::TransferError;
use crate::CopyOptions;

/// Keep the first error to return (the command line prints it); print
/// the others as they come.
pub(crate) fn report(first: &mut Option<TransferError>, e: TransferError) {
    let Some(f) = first.as_ref() else {
        *first = Some(e);
        return;
    };
    // A lost connection fails every transfer in flight on it: say it once.
    if !matches!(
        (&e, f),
        (TransferError::Network(_), TransferError::Network(_))
    ) {
        tracing::warn!("{e}");
    }
}

pub(crate) fn with_more(e: TransferError, more: usize) -> TransferError {
    let suffix = format!(
        " (and {more} more error{})",
        if more == 1 { "" } else { "s" }
    );
    match e {
        TransferError::Usage(m) => TransferError::Usage(m + &suffix),
        TransferError::Auth(m) => TransferError::Auth(m + &suffix),
        TransferError::Remote(m) => TransferError::Remote(m + &suffix),
        TransferError::Local(m) => TransferError::Local(m + &suffix),
        TransferError::Network(m) => TransferError::Network(m + &suffix),
        TransferError::Cancelled(m) => TransferError::Cancelled(m),
    }
}

pub(crate) fn os(p: &[u8]) -> PathBuf {
    PathBuf::from(std::ffi::OsString::from_vec(p.to_vec()))
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut v = dir.to_vec();
    if !v.ends_with(b"/") {
        v.push(b'/');
    }
    v.extend_from_slice(name);
    v
}

fn basename(p: &[u8]) -> &[u8] {
    let trimmed = {
        let mut end = p.len();
        while end > 1 && p.get(end - 1) == Some(&b'/') {
            end -= 1;
        }
        p.get(..end).unwrap_or(p)
    };
    match trimmed.iter().rposition(|&c| c == b'/') {
        Some(i) => trimmed.get(i + 1..).unwrap_or(trimmed),
        None => trimmed,
    }
}

fn parent(p: &[u8]) -> &[u8] {
    match p.iter().rposition(|&c| c == b'/') {
        Some(0) => b"/",
        Some(i) => p.get(..i).unwrap_or(b"."),
        None => b".",
    }
}

/// `.NAME.ferry-part` next to NAME: same directory, so the final rename is
/// atomic and never crosses file systems.
pub(crate) fn tmp_name(dst: &[u8]) -> Vec<u8> {
    side_name(dst, b".ferry-part")
}

/// `.NAME<suffix>` in NAME's directory.
pub(crate) fn side_name(dst: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut name = b".".to_vec();
    name.extend_from_slice(basename(dst));
    name.extend_from_slice(suffix);
    join(parent(dst), &name)
}

pub(crate) fn set_local_times(p: &Path, atime: u32, mtime: u32) {
    let t = |s: u32| UNIX_EPOCH + Duration::from_secs(s as u64);
    if let Ok(f) = std::fs::File::options()
        .read(true)
        .open(p)
        .or_else(|_| std::fs::File::open(p))
    {
        let _ = f.set_times(
            std::fs::FileTimes::new()
                .set_accessed(t(atime))
                .set_modified(t(mtime)),
        );
    }
}

pub(crate) type LocalFiles = Vec<(PathBuf, Vec<u8>, std::fs::Metadata)>;

/// Check local sources before connecting (a typo should not cost a
/// login): each must exist, and a directory needs `-r`.
pub(crate) fn check_local_sources(
    sources: &[PathBuf],
    opts: &CopyOptions,
) -> Result<(), TransferError> {
    for s in sources {
        let m = std::fs::metadata(s).map_err(|e| TransferError::local(s, "cannot read", e))?;
        if m.is_dir() && !opts.recursive {
            return Err(TransferError::Usage(format!(
                "{}: is a directory; use -r to copy it",
                s.display()
            )));
        }
    }
    Ok(())
}

pub(crate) fn walk_local(
    root: &Path,
    target: &[u8],
    files: &mut LocalFiles,
    dirs: &mut Vec<(Vec<u8>, std::fs::Metadata)>,
) -> Result<(), TransferError> {
    let meta = std::fs::metadata(root).map_err(|e| TransferError::local(root, "cannot read", e))?;
    dirs.push((target.to_vec(), meta));
    let mut stack = vec![(root.to_path_buf(), target.to_vec())];
    while let Some((dir, rdir)) = stack.pop() {
        let rd =
            std::fs::read_dir(&dir).map_err(|e| TransferError::local(&dir, "cannot list", e))?;
        let mut entries: Vec<_> = rd.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rp = join(&rdir, e.file_name().as_bytes());
            // Follow symlinks to files, as scp does; skip links to directories.
            let m = match std::fs::metadata(&p) {
                Ok(m) => m,
                Err(_) => {
                    tracing::warn!("skipping {}: dangling symbolic link", p.display());
                    continue;
                }
            };
            if m.is_dir() {
                if e.file_type().map(|t| t.is_symlink()).unwrap_or(false) {
                    tracing::warn!("skipping {}: symbolic link to a directory", p.display());
                    continue;
                }
                dirs.push((rp.clone(), m));
                stack.push((p, rp));
            } else if m.is_file() {
                files.push((p, rp, m));
            } else {
                tracing::warn!("skipping {}: not a regular file", p.display());
            }
        }
    }
    Ok(())
}
