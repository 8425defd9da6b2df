//! ferry's HTTP(S) client: HTTP/1.1 and HTTP/2 over rustls (aws-lc-rs).
//!
//! - [`Client`]: connections per origin (one multiplexed HTTP/2 connection,
//!   or a bounded pool of HTTP/1.1 keep-alive connections), TLS trust
//!   ([`TlsOptions`]: system roots, `--cacert`, `--pin`, `--insecure`),
//!   credentials (Bearer token, Basic, netrc) and redirects.
//! - [`Url`]: the `http://` / `https://` URLs ferry accepts.
//! - [`listing`]: directory listings (ferry serve JSON, nginx/Apache HTML).
//! - [`digest`], [`decode`], [`range`]: integrity headers, content
//!   decoding, `Content-Range`.
//!
//! What runs the transfers (parallel files, byte ranges, resume, atomic
//! renames) is in ferry-engine; docs/internals/http.md explains both.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ferry_http::HttpError> {
//! use ferry_http::{Client, Options, Url};
//! let client = Client::new(Options::default())?;
//! let url = Url::parse("https://example.org/file").map_err(ferry_http::HttpError::Usage)?;
//! let mut resp = client.get(&url, &Default::default()).await?.error_for_status()?;
//! while let Some(piece) = resp.chunk().await? {
//!     println!("{} bytes", piece.len());
//! }
//! # Ok(()) }
//! ```
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod auth;
mod client;
pub mod decode;
pub mod digest;
pub mod encode;
mod error;
pub mod listing;
pub mod proxy;
pub mod range;
pub mod tls;
mod url;

pub use client::{
    channel_body, empty, file_body, file_body_checked, Body, Client, EndCheck, Options, Response,
    Version,
};
pub use error::HttpError;
pub use http::{HeaderMap, HeaderValue, Method, StatusCode};
pub use tls::TlsOptions;
pub use url::{Origin, Url};
