//! Directory listings from an HTTP server (ferry_http::listing): ferry
//! serve's and nginx's JSON index, and nginx/Apache HTML index pages. The
//! first byte picks the base URL the page is read against. Nothing may
//! panic, and every entry kept must be one safe path segment.

use ferry_http::listing::{parse_html, parse_json, safe_name};
use ferry_http::Url;

const BASES: [&str; 4] = [
    "http://127.0.0.1:8080/",
    "https://example.test/pub/dir/",
    "http://[::1]/a%20b/c/",
    "https://u:p@host.test:8443/x/?q",
];

/// One input of the `http_listing` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn http_listing(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    if let Ok((entries, _refused)) = parse_json(body) {
        for e in &entries {
            assert!(safe_name(&e.name), "{e:?}");
        }
    }
    let Ok(base) = Url::parse(BASES[usize::from(pick) % BASES.len()]) else {
        return;
    };
    let text = String::from_utf8_lossy(body);
    let (entries, _refused) = parse_html(&text, &base);
    for e in &entries {
        assert!(safe_name(&e.name), "{e:?}");
        // The entry's URL must stay under the directory listed.
        let child = base.as_dir().child(&e.name);
        assert_eq!(child.origin(), base.origin());
    }
}
