//! Resume journals: which byte ranges of a temporary file are known good.
//!
//! Requests complete out of order and big files are split over several
//! connections, so after an interruption a `.NAME.ferry-part` can have the
//! right size and holes inside it: its size alone says nothing. When a copy
//! fails while ferry is still running, it writes down the ranges that
//! really arrived; a split file gets a journal before its first byte moves,
//! so even a hard kill leaves a record that errs on the side of re-sending.
//! `--resume` then sends only what is missing.
//!
//! Downloads keep the journal next to the part file (`.NAME.ferry-resume`);
//! uploads keep it locally under `$XDG_STATE_HOME/ferry/resume/`, keyed by
//! server and remote path, since the server may be the thing that died.
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Journal {
    /// Size and mtime of the source when the copy started: a changed source
    /// voids the journal.
    pub size: u64,
    pub mtime: u32,
    /// Sorted, merged, non-overlapping [start, end) ranges already written.
    pub done: Vec<(u64, u64)>,
}

const MAGIC: &str = "ferry-resume 1";

pub(crate) fn read(path: &Path) -> Option<Journal> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next()? != MAGIC {
        return None;
    }
    let mut size = None;
    let mut mtime = None;
    let mut done = Vec::new();
    for line in lines {
        let mut w = line.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("size"), Some(v), None) => size = v.parse().ok(),
            (Some("mtime"), Some(v), None) => mtime = v.parse().ok(),
            (Some("done"), Some(a), Some(b)) => done.push((a.parse().ok()?, b.parse().ok()?)),
            _ => return None,
        }
    }
    let size = size?;
    let done = merge(done);
    if done.iter().any(|&(a, b)| a >= b || b > size) {
        return None;
    }
    Some(Journal {
        size,
        mtime: mtime?,
        done,
    })
}

/// Write atomically (temporary name, then rename), so a crash while writing
/// leaves the old journal or none, never half of one.
pub(crate) fn write(path: &Path, j: &Journal) -> std::io::Result<()> {
    let mut text = format!("{MAGIC}\nsize {}\nmtime {}\n", j.size, j.mtime);
    for (a, b) in &j.done {
        text.push_str(&format!("done {a} {b}\n"));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

pub(crate) fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// Sort and coalesce ranges.
pub(crate) fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|&(a, b)| a < b);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The ranges of [0, size) not in `done` (which must be merged).
pub(crate) fn missing(done: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    for &(a, b) in done {
        if a > at {
            out.push((at, a.min(size)));
        }
        at = at.max(b);
    }
    if at < size {
        out.push((at, size));
    }
    out
}

/// Where an upload's journal lives: local state, keyed by server and path.
pub(crate) fn upload_path(server: &str, remote_tmp: &[u8]) -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    // FNV-1a: stable across runs and versions, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in server
        .as_bytes()
        .iter()
        .chain([0u8].iter())
        .chain(remote_tmp)
    {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    base.join("ferry").join("resume").join(format!("{h:016x}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_missing() {
        let d = merge(vec![(10, 20), (0, 5), (5, 10), (30, 40), (35, 38)]);
        assert_eq!(d, vec![(0, 20), (30, 40)]);
        assert_eq!(missing(&d, 50), vec![(20, 30), (40, 50)]);
        assert_eq!(missing(&[], 7), vec![(0, 7)]);
        assert_eq!(missing(&[(0, 7)], 7), vec![]);
    }

    #[test]
    fn round_trip_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j");
        let j = Journal {
            size: 100,
            mtime: 7,
            done: vec![(0, 10), (50, 60)],
        };
        write(&p, &j).unwrap();
        assert_eq!(read(&p), Some(j));
        std::fs::write(&p, "ferry-resume 1\nsize 10\nmtime 1\ndone 5 20\n").unwrap();
        assert_eq!(read(&p), None, "a range past the size is not trusted");
        std::fs::write(&p, "something else").unwrap();
        assert_eq!(read(&p), None);
    }
}
