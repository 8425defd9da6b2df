//! `Content-Range` in responses (RFC 9110 section 14.4): which bytes of
//! the representation a 206 response (a byte range, or the rest of a
//! resumed download) carries, and of how many in all. Read strictly, as
//! the RFC writes it: a server that says something else is not trusted
//! with a resume.
//!
//! ```
//! use ferry_http::range::{parse_content_range, ContentRange};
//! let r = parse_content_range("bytes 100-199/1000").unwrap();
//! assert_eq!(r, ContentRange { first: 100, last: 199, complete: Some(1000) });
//! assert_eq!(r.len(), 100);
//! assert_eq!(parse_content_range("bytes 200-100/1000"), None); // last before first
//! assert_eq!(parse_content_range("bytes 0-1000/1000"), None);  // past the end
//! ```

use std::fmt;

/// `bytes FIRST-LAST/COMPLETE`: bytes `first..=last` of `complete` (None:
/// `*`, the server does not know). Always `first <= last`, and
/// `last < complete` when it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    pub first: u64,
    pub last: u64,
    pub complete: Option<u64>,
}

impl ContentRange {
    /// How many bytes the range holds (saturating at `u64::MAX`: the
    /// range `0-18446744073709551615` holds one more).
    pub fn len(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1)
    }

    /// Never empty: a range holds at least its first byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for ContentRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bytes {}-{}/", self.first, self.last)?;
        match self.complete {
            Some(c) => write!(f, "{c}"),
            None => f.write_str("*"),
        }
    }
}

/// A decimal number as the RFC writes it (`1*DIGIT`): no sign, no
/// spaces; `None` when it does not fit a u64.
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A `Content-Range` value of a 206 response: `None` for anything but a
/// valid byte range (another unit, `bytes */N` as sent with a 416, a last
/// byte before the first or at or past the complete length, numbers past
/// u64, signs or spaces inside).
pub fn parse_content_range(value: &str) -> Option<ContentRange> {
    let v = value.trim_matches([' ', '\t']);
    let (unit, rest) = v.split_once(' ')?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return None;
    }
    let (range, complete) = rest.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let (first, last) = (digits(first)?, digits(last)?);
    let complete = match complete {
        "*" => None,
        c => Some(digits(c)?),
    };
    if first > last || complete.is_some_and(|c| last >= c) {
        return None;
    }
    Some(ContentRange {
        first,
        last,
        complete,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn r(first: u64, last: u64, complete: Option<u64>) -> Option<ContentRange> {
        Some(ContentRange {
            first,
            last,
            complete,
        })
    }

    /// What nginx, Apache and ferry serve send, and what RFC 9110 section
    /// 14.4 calls invalid.
    #[test]
    fn reads_what_servers_send_and_refuses_invalid_ranges() {
        for (value, want) in [
            ("bytes 0-0/1", r(0, 0, Some(1))),
            ("bytes 100-199/1000", r(100, 199, Some(1000))),
            ("bytes 42-1233/*", r(42, 1233, None)),
            ("  BYTES 1-2/3\t", r(1, 2, Some(3))),
            (
                "bytes 0-18446744073709551614/18446744073709551615",
                r(0, u64::MAX - 1, Some(u64::MAX)),
            ),
            ("bytes */1000", None),
            ("bytes 5-4/10", None),
            ("bytes 0-10/10", None),
            ("bytes 0-9/0", None),
            ("bytes +1-2/3", None),
            ("bytes 1 - 2/3", None),
            ("bytes 1-2/ 3", None),
            ("bytes 1-2", None),
            ("bytes=1-2/3", None),
            ("items 1-2/3", None),
            ("bytes 0-18446744073709551616/*", None),
            ("bytes -1-2/3", None),
            ("", None),
        ] {
            assert_eq!(parse_content_range(value), want, "{value:?}");
        }
    }

    #[test]
    fn prints_back_and_counts() {
        let c = parse_content_range("bytes 0-18446744073709551615/*").unwrap();
        assert_eq!(c.len(), u64::MAX);
        assert_eq!(c.to_string(), "bytes 0-18446744073709551615/*");
        let c = parse_content_range("bytes 10-19/20").unwrap();
        assert_eq!((c.len(), c.to_string().as_str()), (10, "bytes 10-19/20"));
    }
}
