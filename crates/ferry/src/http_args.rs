//! The HTTP(S) flags of `ferry cp`, flattened into `CpArgs`: TLS trust,
//! credentials, versions, redirects, compression. Trust and credentials
//! (--cacert, --pin, -k, -u, --no-netrc) apply to FTPS and FTP too.
use std::path::PathBuf;

use clap::Args;
use ferry_engine::HttpOptions;

#[derive(Args, Debug, Default)]
#[command(next_help_heading = "HTTP(S)")]
pub struct HttpArgs {
    /// Speak HTTP/1.1 only (no h2 in ALPN).
    #[arg(long = "http1.1", conflicts_with = "http2")]
    pub http1: bool,
    /// Speak HTTP/2 only (over plain http://: prior knowledge, h2c).
    #[arg(long)]
    pub http2: bool,
    /// Trust the CA (or self-signed) certificates in this PEM file instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Accept only the server certificate with this SHA-256 (of its DER), e.g. for ferry serve; may be repeated.
    #[arg(long, value_name = "sha256:HEX")]
    pub pin: Vec<String>,
    /// Do not check the server's certificate at all (dangerous; prints a warning).
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// Use ADDR for HOST:PORT instead of DNS, as curl's --resolve; may be repeated.
    #[arg(long, value_name = "HOST:PORT:ADDR")]
    pub resolve: Vec<String>,
    /// Bearer token for the servers named on the command line.
    #[arg(
        long,
        env = "FERRY_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Basic authentication (user:password) for the servers named on the command line; the FTP login too.
    #[arg(short = 'u', long = "user", value_name = "USER:PASS")]
    pub user: Option<String>,
    /// Do not read credentials from ~/.netrc (or $NETRC).
    #[arg(long)]
    pub no_netrc: bool,
    /// Redirects followed at most.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub max_redirs: u32,
    /// Ask for zstd or gzip content encoding and decode it (downloads;
    /// -C codes uploads to ferry serve).
    #[arg(long)]
    pub compressed: bool,
    /// HTTP/2 stream receive window in bytes (tuning; default 16 MiB).
    #[arg(long, value_name = "BYTES", hide = true)]
    pub h2_window: Option<u32>,
    /// HTTP/2 connection receive window in bytes (tuning; default 64 MiB).
    #[arg(long, value_name = "BYTES", hide = true)]
    pub h2_conn_window: Option<u32>,
    /// Largest HTTP/2 frame accepted in bytes (tuning; default 1 MiB).
    #[arg(long, value_name = "BYTES", hide = true)]
    pub h2_frame: Option<u32>,
}

impl HttpArgs {
    pub fn apply(self, o: &mut HttpOptions) {
        o.version = if self.http1 {
            ferry_engine::HttpVersion::Http1
        } else if self.http2 {
            ferry_engine::HttpVersion::Http2
        } else {
            ferry_engine::HttpVersion::Auto
        };
        o.tls.cacert = self.cacert;
        o.tls.pins = self.pin;
        o.tls.insecure = self.insecure;
        o.resolve = self.resolve;
        o.token = self.token.filter(|t| !t.is_empty());
        o.user = self.user;
        o.netrc = !self.no_netrc;
        o.max_redirs = self.max_redirs;
        if let Some(w) = self.h2_window {
            o.h2_stream_window = w;
        }
        if let Some(w) = self.h2_conn_window {
            o.h2_connection_window = w;
        }
        if let Some(f) = self.h2_frame {
            o.h2_max_frame = f.clamp(16_384, 16_777_215);
        }
    }
}
