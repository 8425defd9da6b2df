//! Response headers and user text the HTTP client parses (ferry_http):
//! `Repr-Digest` / `Digest` (which digest to check a download against),
//! `~/.netrc`, `--proxy` / `$https_proxy` and `--pin` values. The input is
//! read as header lines (`Name: value`), the same text as a netrc file,
//! and each line as a proxy and a pin. Nothing may panic; a digest ferry
//! serve announces must be read back as that digest whatever else the
//! headers hold.

use ferry_http::digest::{expected, expected_sha256, Algo};
use ferry_http::{auth, proxy, tls, HeaderMap};
use http::header::HeaderValue;

use crate::headers;

/// One input of the `http_headers` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn http_headers(data: &[u8]) {
    let h = headers(data);
    let _ = expected(&h);
    let _ = expected_sha256(&h);

    // What ferry serve sends, put first: it must win over anything else.
    let mut sum = [0u8; 32];
    for (d, s) in sum.iter_mut().zip(data) {
        *d = *s;
    }
    let ours = ferry_server::http::digest::header_value(&sum);
    if let Ok(v) = HeaderValue::from_str(&ours) {
        let mut first = HeaderMap::new();
        first.append("repr-digest", v);
        for (name, value) in &h {
            first.append(name.clone(), value.clone());
        }
        let got = expected(&first);
        assert_eq!(got.map(|e| (e.algo, e.sum)), Some((Algo::Blake3, sum)));
    }

    let text = String::from_utf8_lossy(data);
    let entries = auth::parse_netrc(&text);
    for host in ["example.test", "127.0.0.1", ""] {
        let _ = auth::netrc_lookup(&entries, host);
    }
    for line in text.lines() {
        let _ = proxy::parse_proxy(line);
        let _ = tls::parse_pin(line);
    }
}
