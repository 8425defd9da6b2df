//! The checks behind ferry's fuzz targets, one function per target: each
//! takes one input, drives a parser of data a peer or a user controls,
//! and panics (an assertion, or the parser's own panic) when something
//! is wrong. The module of each says what it asserts.
//!
//! Two drivers call them. `fuzz/` (its own workspace, cargo-fuzz on
//! nightly with AddressSanitizer) wraps each in a one-line libFuzzer
//! target; `tests/seeds.rs` here replays every committed seed
//! (`fuzz/seeds/TARGET/`) and the local corpus (`fuzz/corpus/TARGET/`,
//! when present) on stable, in `cargo test --workspace`, so CI checks
//! every target's assertions without a nightly build.
//! docs/internals/reliability.md has the list, the commands and the
//! findings.
//!
//! ```
//! ferry_fuzz_checks::sftp_decode(b"\0\0\0\x05\x01\0\0\0\x03");
//! ```

// A panic is how a check reports a finding, to libFuzzer and to the seed
// tests alike: here `unwrap`/`expect` are assertions, not shortcuts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod exec_hash;
pub mod ftp_control;
pub mod ftp_listing;
pub mod http_content_range;
pub mod http_decode;
pub mod http_headers;
pub mod http_listing;
pub mod known_hosts;
pub mod location_url;
pub mod s3_xml;
pub mod serve_confine;
pub mod serve_http_headers;
pub mod sftp_decode;
pub mod ssh_config;
pub mod ssh_zstd;
pub mod sync_filter;

pub use exec_hash::exec_hash;
pub use ftp_control::ftp_control;
pub use ftp_listing::ftp_listing;
pub use http_content_range::http_content_range;
pub use http_decode::http_decode;
pub use http_headers::http_headers;
pub use http_listing::http_listing;
pub use known_hosts::known_hosts;
pub use location_url::location_url;
pub use s3_xml::s3_xml;
pub use serve_confine::serve_confine;
pub use serve_http_headers::serve_http_headers;
pub use sftp_decode::sftp_decode;
pub use ssh_config::ssh_config;
pub use ssh_zstd::ssh_zstd;
pub use sync_filter::sync_filter;

/// A check: one input, a panic when something is wrong.
pub type Check = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/NAME.rs` and
/// `fuzz/seeds/NAME/` are named.
pub const TARGETS: [(&str, Check); 16] = [
    ("exec_hash", exec_hash),
    ("ftp_control", ftp_control),
    ("ftp_listing", ftp_listing),
    ("http_content_range", http_content_range),
    ("http_decode", http_decode),
    ("http_headers", http_headers),
    ("http_listing", http_listing),
    ("known_hosts", known_hosts),
    ("location_url", location_url),
    ("s3_xml", s3_xml),
    ("serve_confine", serve_confine),
    ("serve_http_headers", serve_http_headers),
    ("sftp_decode", sftp_decode),
    ("ssh_config", ssh_config),
    ("ssh_zstd", ssh_zstd),
    ("sync_filter", sync_filter),
];

/// `Name: value` lines into a header map; lines that are not valid header
/// syntax are skipped, as hyper would have refused them.
pub(crate) fn headers(text: &[u8]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_suffix(b"\r").unwrap_or(value).trim_ascii();
        if let (Ok(n), Ok(v)) = (
            http::header::HeaderName::from_bytes(name),
            http::header::HeaderValue::from_bytes(value),
        ) {
            h.append(n, v);
        }
    }
    h
}
