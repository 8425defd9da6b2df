//! Conditional requests (RFC 9110 §13): `If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since` and `If-Range`, evaluated in the
//! order §13.2.2 gives. No I/O: the file's validators come in.
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE};
use http::{HeaderMap, Method};

/// What a representation is known by.
#[derive(Debug, Clone)]
pub struct Validators {
    /// The opaque part of the strong ETag, without quotes.
    pub etag: String,
    /// Other ETags the same file is sent under (the zstd-encoded one); an
    /// `If-None-Match` naming any of them is a match.
    pub alt_etags: Vec<String>,
    /// Last modification, whole seconds since the epoch (HTTP dates have no
    /// finer resolution).
    pub mtime: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Proceed,
    NotModified,
    PreconditionFailed,
}

/// One entity-tag from a list: `W/"x"` or `"x"`.
#[derive(Debug, PartialEq, Eq)]
struct Tag<'a> {
    weak: bool,
    opaque: &'a str,
}

enum TagList<'a> {
    Any,
    Tags(Vec<Tag<'a>>),
}

/// `*` or a comma-separated list of entity-tags. Anything that does not
/// parse ends the list (what came before still counts).
fn tag_list(v: &str) -> TagList<'_> {
    if v.trim() == "*" {
        return TagList::Any;
    }
    let mut out = Vec::new();
    let mut rest = v;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            break;
        }
        let weak = rest.starts_with("W/");
        if weak {
            rest = &rest[2..];
        }
        let Some(after) = rest.strip_prefix('"') else {
            break;
        };
        let Some(end) = after.find('"') else {
            break;
        };
        out.push(Tag {
            weak,
            opaque: &after[..end],
        });
        rest = &after[end + 1..];
    }
    TagList::Tags(out)
}

fn header_str(h: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn date_secs(v: &str) -> Option<u64> {
    let t = httpdate::parse_http_date(v.trim()).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// Whole seconds since the epoch of a file time (0 before 1970).
pub fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// RFC 9110 §13.2.2, steps 1 to 4.
pub fn evaluate(method: &Method, h: &HeaderMap, v: &Validators) -> Outcome {
    let get_or_head = method == Method::GET || method == Method::HEAD;
    if let Some(im) = header_str(h, IF_MATCH) {
        let ok = match tag_list(im) {
            TagList::Any => true,
            TagList::Tags(tags) => tags.iter().any(|t| !t.weak && t.opaque == v.etag),
        };
        if !ok {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(d) = header_str(h, IF_UNMODIFIED_SINCE).and_then(date_secs) {
        if v.mtime > d {
            return Outcome::PreconditionFailed;
        }
    }
    if let Some(inm) = header_str(h, IF_NONE_MATCH) {
        let hit = match tag_list(inm) {
            TagList::Any => true,
            TagList::Tags(tags) => tags
                .iter()
                .any(|t| t.opaque == v.etag || v.alt_etags.iter().any(|a| a == t.opaque)),
        };
        if hit {
            return if get_or_head {
                Outcome::NotModified
            } else {
                Outcome::PreconditionFailed
            };
        }
    } else if get_or_head {
        if let Some(d) = header_str(h, IF_MODIFIED_SINCE).and_then(date_secs) {
            if v.mtime <= d {
                return Outcome::NotModified;
            }
        }
    }
    Outcome::Proceed
}

/// Step 5: may the Range header be honoured? Yes without `If-Range`;
/// with it, only if it names this exact version (strong ETag, or the
/// exact Last-Modified date). Otherwise the whole file is sent.
pub fn range_allowed(h: &HeaderMap, v: &Validators) -> bool {
    let Some(ir) = h.get(IF_RANGE) else {
        return true;
    };
    let Ok(ir) = ir.to_str() else {
        return false;
    };
    let ir = ir.trim();
    if ir.starts_with('"') || ir.starts_with("W/") {
        return match tag_list(ir) {
            TagList::Tags(tags) => matches!(tags.as_slice(), [t] if !t.weak && t.opaque == v.etag),
            TagList::Any => false,
        };
    }
    date_secs(ir) == Some(v.mtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn v() -> Validators {
        Validators {
            etag: "abc".into(),
            alt_etags: vec!["abc-zstd".into()],
            mtime: 1_700_000_000,
        }
    }

    fn headers(pairs: &[(http::header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, val) in pairs {
            h.insert(
                k.clone(),
                HeaderValue::from_str(val).unwrap_or(HeaderValue::from_static("")),
            );
        }
        h
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(secs))
    }

    #[test]
    fn if_none_match() {
        let g = Method::GET;
        for (val, want) in [
            ("\"abc\"", Outcome::NotModified),
            ("W/\"abc\"", Outcome::NotModified),
            ("\"x\", \"abc\"", Outcome::NotModified),
            ("\"abc-zstd\"", Outcome::NotModified),
            ("*", Outcome::NotModified),
            ("\"x\"", Outcome::Proceed),
            ("garbage", Outcome::Proceed),
        ] {
            assert_eq!(
                evaluate(&g, &headers(&[(IF_NONE_MATCH, val)]), &v()),
                want,
                "{val}"
            );
        }
        assert_eq!(
            evaluate(&Method::PUT, &headers(&[(IF_NONE_MATCH, "*")]), &v()),
            Outcome::PreconditionFailed
        );
    }

    #[test]
    fn if_match_is_strong() {
        let g = Method::GET;
        assert_eq!(
            evaluate(&g, &headers(&[(IF_MATCH, "\"abc\"")]), &v()),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&g, &headers(&[(IF_MATCH, "W/\"abc\"")]), &v()),
            Outcome::PreconditionFailed
        );
        assert_eq!(
            evaluate(&g, &headers(&[(IF_MATCH, "\"zzz\"")]), &v()),
            Outcome::PreconditionFailed
        );
    }

    #[test]
    fn dates() {
        let g = Method::GET;
        let m = v().mtime;
        assert_eq!(
            evaluate(&g, &headers(&[(IF_MODIFIED_SINCE, &date(m))]), &v()),
            Outcome::NotModified
        );
        assert_eq!(
            evaluate(&g, &headers(&[(IF_MODIFIED_SINCE, &date(m - 1))]), &v()),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&g, &headers(&[(IF_UNMODIFIED_SINCE, &date(m - 1))]), &v()),
            Outcome::PreconditionFailed
        );
        assert_eq!(
            evaluate(&g, &headers(&[(IF_UNMODIFIED_SINCE, &date(m))]), &v()),
            Outcome::Proceed
        );
        // If-None-Match wins over If-Modified-Since
        assert_eq!(
            evaluate(
                &g,
                &headers(&[(IF_NONE_MATCH, "\"x\""), (IF_MODIFIED_SINCE, &date(m))]),
                &v()
            ),
            Outcome::Proceed
        );
    }

    #[test]
    fn if_range() {
        assert!(range_allowed(&headers(&[]), &v()));
        assert!(range_allowed(&headers(&[(IF_RANGE, "\"abc\"")]), &v()));
        assert!(!range_allowed(&headers(&[(IF_RANGE, "W/\"abc\"")]), &v()));
        assert!(!range_allowed(&headers(&[(IF_RANGE, "\"old\"")]), &v()));
        assert!(range_allowed(
            &headers(&[(IF_RANGE, &date(v().mtime))]),
            &v()
        ));
        assert!(!range_allowed(
            &headers(&[(IF_RANGE, &date(v().mtime - 5))]),
            &v()
        ));
        assert!(!range_allowed(&headers(&[(IF_RANGE, "nonsense")]), &v()));
    }
}
