//! Resume records: which byte ranges of a part file are known good.
//!
//! Ranges of a big file are moved at once, so after an interruption a
//! `.NAME.ferry-part` can have the file's length and holes inside it: its
//! length alone says nothing. The engine writes `.NAME.ferry-resume` beside
//! the final name on the destination (any backend) before the first byte
//! of a split file moves, and again as each range is in, so even a hard
//! kill leaves a record that errs on the side of sending again; `--resume`
//! then sends only what is missing (engine.rs, `resume_missing`). The
//! HTTP(S) and FTP(S) loops keep their own record beside local part files
//! (part.rs) until they move onto the engine.
use std::path::Path;

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

/// A journal from its text; `None` for anything else.
pub(crate) fn decode(text: &str) -> Option<Journal> {
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

/// The text form `decode` reads.
pub(crate) fn encode(j: &Journal) -> String {
    let mut text = format!("{MAGIC}\nsize {}\nmtime {}\n", j.size, j.mtime);
    for (a, b) in &j.done {
        text.push_str(&format!("done {a} {b}\n"));
    }
    text
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
        let j = Journal {
            size: 100,
            mtime: 7,
            done: vec![(0, 10), (50, 60)],
        };
        assert_eq!(decode(&encode(&j)), Some(j));
        let past = "ferry-resume 1\nsize 10\nmtime 1\ndone 5 20\n";
        assert_eq!(decode(past), None, "a range past the size is not trusted");
        assert_eq!(decode("something else"), None);
    }
}
