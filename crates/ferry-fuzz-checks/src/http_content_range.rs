//! `Content-Range` of a 206 response as the HTTP client may read it
//! (`ferry_http::range::parse_content_range`): each line of the input as a
//! header value, and the first 24 bytes as three numbers printed as a
//! range. Nothing may panic; every range accepted is one RFC 9110 allows
//! (first <= last, last < complete when known), prints back to a value
//! that parses to the same range, and holds `last - first + 1` bytes;
//! printed numbers parse back exactly when they make a valid range.

use ferry_http::range::{parse_content_range, ContentRange};

fn check_valid(r: &ContentRange, from: &str) {
    assert!(r.first <= r.last, "{from:?} -> {r:?}");
    if let Some(c) = r.complete {
        assert!(r.last < c, "{from:?} -> {r:?}");
    }
    assert_eq!(
        r.len(),
        (r.last - r.first).saturating_add(1),
        "{from:?} -> {r:?}"
    );
    let printed = r.to_string();
    assert_eq!(
        parse_content_range(&printed).as_ref(),
        Some(r),
        "{printed:?}"
    );
}

/// One input of the `http_content_range` fuzz target: returns when it
/// holds, panics with what broke (the module documentation says what is
/// checked).
pub fn http_content_range(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        if let Some(r) = parse_content_range(line) {
            check_valid(&r, line);
        }
    }
    if let Some((nums, _)) = data.split_first_chunk::<24>() {
        let n = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&nums[i * 8..i * 8 + 8]);
            // Small numbers are the interesting ones; keep a few huge.
            match u64::from_le_bytes(b) {
                x if x >> 63 == 1 => x,
                x => x % 1000,
            }
        };
        let (first, last, complete) = (n(0), n(1), n(2));
        let complete = (complete != 0).then_some(complete);
        let r = ContentRange {
            first,
            last,
            complete,
        };
        let valid = first <= last && complete.is_none_or(|c| last < c);
        let printed = r.to_string();
        let back = parse_content_range(&printed);
        assert_eq!(back.is_some(), valid, "{printed:?}");
        if let Some(b) = back {
            assert_eq!(b, r, "{printed:?}");
            check_valid(&b, &printed);
        }
    }
}
