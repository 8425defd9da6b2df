//! Request headers ferry serve's HTTP side parses (ferry_server::http):
//! `Range` against a file size, a PUT's `Content-Range`, the conditional
//! headers (`If-Match`, `If-None-Match`, `If-Modified-Since`,
//! `If-Unmodified-Since`, `If-Range`), `Accept-Encoding` and the bearer
//! token in `Authorization`. The first 8 bytes are the file size, the rest
//! header lines. Nothing may panic; every span served lies inside the
//! file, is non-empty, and spans are sorted, disjoint and at most
//! MAX_RANGES; a PUT range never ends past its total.

use ferry_server::http::auth::{Auth, Token};
use ferry_server::http::cond::{evaluate, range_allowed, Validators};
use ferry_server::http::files::accepts_zstd;
use ferry_server::http::range::{parse, RangeRequest, MAX_RANGES};
use ferry_server::http::upload::{parse_put_range, PutRange};

use crate::headers;
use http::Method;

/// One input of the `serve_http_headers` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn serve_http_headers(data: &[u8]) {
    let Some((size, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    // Small sizes are the interesting ones; keep a few huge ones too.
    let size = match u64::from_le_bytes(*size) {
        s if s >> 63 == 1 => s,
        s => s % 100_000,
    };
    let h = headers(rest);
    for v in h.get_all("range").iter().filter_map(|v| v.to_str().ok()) {
        match parse(v, size) {
            RangeRequest::Full | RangeRequest::Unsatisfiable => {}
            RangeRequest::Partial(spans) => {
                assert!(!spans.is_empty() && spans.len() <= MAX_RANGES);
                // Served in the order asked (RFC 9110 allows it) unless
                // two overlap, then sorted and merged: never the same
                // byte twice, whatever the order.
                let mut sorted = spans.clone();
                sorted.sort_by_key(|s| s.start);
                let mut end = 0u64;
                for (i, s) in sorted.iter().enumerate() {
                    assert!(s.len > 0, "{v:?} {size}: {spans:?}");
                    assert!(i == 0 || s.start > end, "{v:?} {size}: {spans:?}");
                    assert!(s.last() < size, "{v:?} {size}: {spans:?}");
                    end = s.last();
                }
            }
        }
    }
    for v in h
        .get_all("content-range")
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        if let Some(PutRange::Write { start, end, total }) = parse_put_range(v) {
            assert!(start <= end && end < total, "{v:?}");
        }
    }
    let v = Validators {
        etag: "5f2c-1a2b3c".into(),
        alt_etags: vec!["5f2c-1a2b3c-zstd".into()],
        mtime: size,
    };
    for m in [Method::GET, Method::HEAD, Method::PUT, Method::DELETE] {
        let _ = evaluate(&m, &h, &v);
    }
    let _ = range_allowed(&h, &v);
    let _ = accepts_zstd(&h);
    // The token is the file size in decimal: a header can name it.
    let token = Token::new(&size.to_string());
    let auth = token.check(&h);
    if h.get("authorization").is_none() {
        assert!(matches!(auth, Auth::Missing));
    }
}
