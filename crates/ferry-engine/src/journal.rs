//! Resume records: which byte ranges of a part file are known good.
//!
//! Ranges of a big file are moved at once, so after an interruption a
//! `.NAME.ferry-part` can have the file's length and holes inside it: its
//! length alone says nothing. The engine writes `.NAME.ferry-resume` beside
//! the final name on the destination (any backend) before the first byte
//! of a split file moves, and again as each range is in, so even a hard
//! kill leaves a record that errs on the side of sending again; `--resume`
//! then sends only what is missing (engine.rs, `resume_missing`). A file
//! copied in one stream from a source with a version (an HTTP ETag) gets a
//! record too (`in-order`, with the `version`): its part's length says
//! what is in, and another version on resume means starting over.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Journal {
    /// Size and mtime of the source when the copy started: a changed source
    /// voids the journal.
    pub size: u64,
    pub mtime: u32,
    /// Sorted, merged, non-overlapping [start, end) ranges already written.
    pub done: Vec<(u64, u64)>,
    /// The source's validator (an HTTP ETag or Last-Modified), when it
    /// has one: another one on resume means the file changed.
    pub version: Option<String>,
    /// Written in order from 0, one stream: the part's length says how
    /// much is in (`done` is not kept up to date).
    pub in_order: bool,
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
    let mut version = None;
    let mut in_order = false;
    for line in lines {
        if let Some(v) = line.strip_prefix("version ") {
            version = Some(v.to_string());
            continue;
        }
        if line == "in-order" {
            in_order = true;
            continue;
        }
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
        version,
        in_order,
    })
}

/// The text form `decode` reads.
pub(crate) fn encode(j: &Journal) -> String {
    let mut text = format!("{MAGIC}\nsize {}\nmtime {}\n", j.size, j.mtime);
    if let Some(v) = &j.version {
        // One line: a validator never holds a line break (a header
        // value cannot), but make sure.
        text.push_str(&format!("version {}\n", v.replace(['\r', '\n'], " ")));
    }
    if j.in_order {
        text.push_str("in-order\n");
    }
    for (a, b) in &j.done {
        text.push_str(&format!("done {a} {b}\n"));
    }
    text
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
            version: Some("Wed, 21 Oct 2015 07:28:00 GMT".into()),
            in_order: false,
        };
        assert_eq!(decode(&encode(&j)), Some(j.clone()));
        let seq = Journal {
            version: Some("\"5f3a-600000\"".into()),
            in_order: true,
            done: Vec::new(),
            ..j
        };
        assert_eq!(decode(&encode(&seq)), Some(seq));
        let past = "ferry-resume 1\nsize 10\nmtime 1\ndone 5 20\n";
        assert_eq!(decode(past), None, "a range past the size is not trusted");
        assert_eq!(decode("something else"), None);
    }
}
