//! `Range: bytes=...` (RFC 9110 §14.1.2, §14.2) read against a file of
//! known size. No I/O: the caller turns the answer into 200, 206 or 416.
//!
//! A header that does not parse, names another unit or asks for more than
//! [`MAX_RANGES`] spans is ignored (the whole file is served), as RFC 9110
//! §14.2 allows. Overlapping spans are coalesced (sorted and merged) so a
//! request cannot make the server send the same bytes many times over.

/// Most spans served as `multipart/byteranges`; more and the Range header
/// is ignored.
pub const MAX_RANGES: usize = 64;

/// `len` bytes from `start`; never empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub len: u64,
}

impl Span {
    /// The last byte, inclusive, as `Content-Range` writes it.
    pub fn last(&self) -> u64 {
        self.start + self.len - 1
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// Serve the whole file (no usable Range header).
    Full,
    /// The satisfiable spans, at least one.
    Partial(Vec<Span>),
    /// Well formed, but no span overlaps the file: 416.
    Unsatisfiable,
}

/// Read a `Range` header value against a file of `size` bytes.
pub fn parse(header: &str, size: u64) -> RangeRequest {
    let header = header.trim();
    let Some((unit, set)) = header.split_once('=') else {
        return RangeRequest::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return RangeRequest::Full;
    }
    let mut spans = Vec::new();
    let mut count = 0usize;
    for spec in set.split(',') {
        let spec = spec.trim();
        if spec.is_empty() {
            continue; // empty list elements are allowed (RFC 9110 §5.6.1)
        }
        count += 1;
        if count > MAX_RANGES {
            return RangeRequest::Full;
        }
        let Some((first, last)) = spec.split_once('-') else {
            return RangeRequest::Full;
        };
        let (first, last) = (first.trim(), last.trim());
        if first.is_empty() {
            // suffix: the last N bytes
            let Some(n) = digits(last) else {
                return RangeRequest::Full;
            };
            if n > 0 && size > 0 {
                let len = n.min(size);
                spans.push(Span {
                    start: size - len,
                    len,
                });
            }
            continue;
        }
        let Some(start) = digits(first) else {
            return RangeRequest::Full;
        };
        let end = if last.is_empty() {
            None
        } else {
            match digits(last) {
                Some(e) if e >= start => Some(e),
                _ => return RangeRequest::Full,
            }
        };
        if start >= size {
            continue; // unsatisfiable on its own
        }
        let end = end.map_or(size - 1, |e| e.min(size - 1));
        spans.push(Span {
            start,
            len: end - start + 1,
        });
    }
    if count == 0 {
        return RangeRequest::Full;
    }
    if spans.is_empty() {
        return RangeRequest::Unsatisfiable;
    }
    RangeRequest::Partial(coalesce(spans))
}

/// A non-empty run of ASCII digits that fits a u64.
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Keep the client's order unless two spans overlap; then sort and merge
/// overlapping or touching spans.
fn coalesce(mut spans: Vec<Span>) -> Vec<Span> {
    if spans.len() < 2 {
        return spans;
    }
    let mut sorted = spans.clone();
    sorted.sort_by_key(|s| s.start);
    let overlaps = sorted
        .windows(2)
        .any(|w| matches!(w, [a, b] if b.start <= a.last()));
    if !overlaps {
        return spans;
    }
    spans.clear();
    for s in sorted {
        match spans.last_mut() {
            Some(prev) if s.start <= prev.start + prev.len => {
                let end = (prev.start + prev.len).max(s.start + s.len);
                prev.len = end - prev.start;
            }
            _ => spans.push(s),
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: u64, len: u64) -> Span {
        Span { start, len }
    }

    #[test]
    fn single_ranges() {
        assert_eq!(
            parse("bytes=0-99", 1000),
            RangeRequest::Partial(vec![span(0, 100)])
        );
        assert_eq!(
            parse("bytes=900-", 1000),
            RangeRequest::Partial(vec![span(900, 100)])
        );
        assert_eq!(
            parse("bytes=-10", 1000),
            RangeRequest::Partial(vec![span(990, 10)])
        );
        // past the end is clipped
        assert_eq!(
            parse("bytes=990-5000", 1000),
            RangeRequest::Partial(vec![span(990, 10)])
        );
        assert_eq!(
            parse("bytes=-5000", 1000),
            RangeRequest::Partial(vec![span(0, 1000)])
        );
        assert_eq!(
            parse(" Bytes = 1-1 ", 10),
            RangeRequest::Partial(vec![span(1, 1)])
        );
    }

    #[test]
    fn several_ranges_keep_order_unless_they_overlap() {
        assert_eq!(
            parse("bytes=500-599, 0-9", 1000),
            RangeRequest::Partial(vec![span(500, 100), span(0, 10)])
        );
        assert_eq!(
            parse("bytes=0-99,50-149,,-1", 1000),
            RangeRequest::Partial(vec![span(0, 150), span(999, 1)])
        );
        // a satisfiable one among unsatisfiable ones
        assert_eq!(
            parse("bytes=2000-3000,5-5", 1000),
            RangeRequest::Partial(vec![span(5, 1)])
        );
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(parse("bytes=1000-", 1000), RangeRequest::Unsatisfiable);
        assert_eq!(parse("bytes=-0", 1000), RangeRequest::Unsatisfiable);
        assert_eq!(parse("bytes=0-", 0), RangeRequest::Unsatisfiable);
        assert_eq!(parse("bytes=-5", 0), RangeRequest::Unsatisfiable);
    }

    #[test]
    fn malformed_is_ignored() {
        for h in [
            "bytes=",
            "bytes=abc",
            "bytes=5-1",
            "bytes=1-2-3",
            "items=0-1",
            "bytes 0-1",
            "bytes=0x1-2",
            "bytes=99999999999999999999999-",
            "bytes=+1-2",
            "",
        ] {
            assert_eq!(parse(h, 1000), RangeRequest::Full, "{h:?}");
        }
        let many: Vec<String> = (0..=MAX_RANGES).map(|i| format!("{i}-{i}")).collect();
        assert_eq!(
            parse(&format!("bytes={}", many.join(",")), 1000),
            RangeRequest::Full
        );
    }

    #[test]
    fn overlapping_spans_cannot_amplify() {
        let many: Vec<String> = (0..MAX_RANGES).map(|_| "0-999".to_string()).collect();
        assert_eq!(
            parse(&format!("bytes={}", many.join(",")), 1000),
            RangeRequest::Partial(vec![span(0, 1000)])
        );
    }
}
