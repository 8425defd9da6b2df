//! ferry's transfer engine: it plans a copy (which files, where, which
//! parts), runs it over several connections with many requests in flight,
//! and makes every file appear under its final name only when complete.
//!
//! The main entry point is [`copy`]: sources and a destination (see
//! [`Location`]), [`CopyOptions`], and a shared [`Stats`] the caller can
//! poll for progress. It returns a [`Summary`] or a [`TransferError`] whose
//! [`TransferError::exit_code`] the command line uses.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ferry_engine::{copy, CopyOptions, Location, Stats};
//!
//! let src = Location::parse("sftp://example.org/var/log/big.log").unwrap();
//! let dst = Location::parse("/tmp/").unwrap();
//! let summary = copy(&[src], &dst, &CopyOptions::default(), Arc::new(Stats::default())).unwrap();
//! println!("{} bytes in {:.1} s", summary.bytes, summary.seconds);
//! ```
//!
//! How the SFTP path works inside (pipelining, the request window, splitting
//! files over connections) is in docs/internals/sftp.md; the HTTP(S) path
//! (pooling, HTTP/2 multiplexing, byte ranges, resume) in
//! docs/internals/http.md; FTP(S) (a pool of control connections, REST
//! ranges, TLS) in docs/internals/ftp.md.
#![deny(clippy::unwrap_used, clippy::expect_used)]

/// The README's Rust examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// docs/internals/sync.md's library example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/internals/sync.md")]
pub struct SyncDoctests;

pub mod backend;
mod engine;
mod error;
pub mod filter;
pub mod hash;
mod journal;
mod location;
pub mod named;
mod retry;
pub mod s3;
pub mod sync;
mod transfer;
mod widen;
mod window;

use std::sync::atomic::{AtomicU64, Ordering};

pub use backend::ftp::FtpOptions;
pub use error::{ErrorKind, TransferError};
pub use ferry_http::{Options as HttpOptions, Version as HttpVersion};
pub use ferry_ssh::{ConnectOptions, Prompt, PromptHandle, MAX_CHANNEL_PACKET};
pub use location::{FtpSpec, HttpSpec, Location, RemotePath, RemoteSpec, S3Spec};
pub use s3::S3Options;
pub use transfer::{
    block_on, block_on_batched, run_blocking, BackendPath, Cancel, EndReport, Event, FileError,
    FileReport, Handle, Report, Transfer, TransferHandle, Verdict,
};

/// How to copy. The defaults are the measured ones (docs/internals/sftp.md).
#[derive(Debug, Clone)]
pub struct CopyOptions {
    pub recursive: bool,
    /// Keep modification times and permission bits.
    pub preserve: bool,
    /// Continue partial files instead of starting over.
    pub resume: bool,
    /// Files in flight at once, over all connections. `None`: the
    /// measured default of the protocol ([`Tuning::PARALLEL`]; FTP
    /// [`Tuning::FTP_PARALLEL`], one control connection per file, or
    /// [`Tuning::FTP_PARALLEL_LONG_PATH`] on a long path).
    pub parallel: Option<usize>,
    /// SSH connections to open; a large file is split over them. `None`:
    /// the measured default for the direction (see [`Tuning`]), and on a
    /// long path a big file widened as measured, up to `max_streams`.
    pub streams: Option<usize>,
    /// On a long path (a TCP handshake of 10 ms or more) without
    /// `streams`: most connections one big file is widened over, as
    /// measured (docs/internals/wan.md, "More connections as measured");
    /// 1: never more than the protocol's default.
    pub max_streams: usize,
    /// Bytes per READ/WRITE request wanted; capped by what the server
    /// accepts (limits@openssh.com), 32 KiB when it does not say.
    pub chunk: Option<u32>,
    /// SFTP: most requests in flight per read or write stream.
    pub max_depth: usize,
    /// Files smaller than this are never split into ranges.
    pub split_min: u64,
    /// SFTP: most bytes requested and not yet answered per read or write
    /// stream; below it each stream keeps about twice the bandwidth-delay
    /// product in flight, so that no server queues many megabytes of
    /// replies (OpenSSH's sshd then spends several times more CPU per
    /// byte: docs/internals/sftp.md). `None`: 32 MiB.
    pub max_inflight: Option<u64>,
    pub connect: ConnectOptions,
    /// HTTP(S): TLS trust, credentials, versions, redirects.
    pub http: ferry_http::Options,
    /// HTTP: ask for zstd or gzip content encoding and decode it.
    pub compressed: bool,
    /// FTP(S): explicit TLS. Trust and credentials come from `http`.
    pub ftp: FtpOptions,
    /// A stream that delivers no byte for this long has stalled: it is
    /// cut and retried (`--timeout`).
    pub timeout: std::time::Duration,
    /// Attempts per file or range for failures another try may cure (a
    /// lost connection, HTTP 5xx, FTP 421), with backoff and jitter.
    pub retries: u32,
    /// HTTP tuning: how many clients (each its own connection) downloads
    /// are spread over (docs/internals/http.md, "Shards"); `None`: one per
    /// core, at most 4, when several files move at once.
    pub http_shards: Option<usize>,
    /// S3: endpoint, region, addressing, part sizes, checksums, and the
    /// credentials (keys, a provider, or the AWS variables and ~/.aws the
    /// application hands over; none are read from the process:
    /// docs/internals/s3.md, "Credentials").
    pub s3: S3Options,
}

impl CopyOptions {
    /// `-P`, or the SFTP/HTTP default.
    pub(crate) fn files_in_flight(&self) -> usize {
        self.parallel.unwrap_or(Tuning::PARALLEL).max(1)
    }
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            recursive: false,
            preserve: false,
            resume: false,
            parallel: None,
            streams: None,
            max_streams: Tuning::MAX_STREAMS,
            chunk: None,
            max_depth: 128,
            split_min: 32 * 1024 * 1024,
            max_inflight: None,
            connect: ConnectOptions::default(),
            http: ferry_http::Options::default(),
            compressed: false,
            ftp: FtpOptions::default(),
            timeout: engine::DEFAULT_TIMEOUT,
            retries: retry::DEFAULT_ATTEMPTS,
            http_shards: None,
            s3: S3Options::default(),
        }
    }
}

/// Defaults measured on loopback and at 20 ms RTT against OpenSSH 9.2 on a
/// 2-core machine (docs/internals/sftp.md, BENCHMARKS.md).
pub struct Tuning;

impl Tuning {
    /// Downloads: our 64 MiB window lets one connection fill a 20 ms link,
    /// but one sshd process (and its sftp-server behind a 64 KiB pipe)
    /// encrypts every byte of it: a second connection puts a second sshd
    /// on another core (1 GiB on loopback, Zen 1 host: 2.51 -> 2.32 s, the
    /// machine's CPU the same; docs/internals/sftp.md). Only one per 64 MiB
    /// of work is opened, and a server with a large window (ferry serve)
    /// gets one. More than 16 MiB requested at once only made sshd burn CPU
    /// on queued replies: each stream asks for 8 MiB at most.
    pub const DOWNLOAD_STREAMS: usize = 2;
    /// Most connections a big file is widened over on a long path when
    /// `--streams` is not given: aria2c's `-x` default ceiling is 16;
    /// at 100 ms with Linux's 4 MiB send buffers 8 connections fill a
    /// 1 Gbit/s link (docs/internals/wan.md).
    pub const MAX_STREAMS: usize = 16;
    /// Uploads: sshd's own 2 MiB window caps each connection at
    /// 2 MiB / RTT, so uploads spread over four.
    pub const UPLOAD_STREAMS: usize = 4;
    /// FTP: files at once (one control connection each) when -P is not
    /// given, and ranges per file (docs/internals/ftp.md).
    pub const FTP_PARALLEL: usize = 8;
    /// FTP files at once on a long path (a round trip of
    /// [`ferry_tcp::LONG_PATH`] or more) when -P is not given. A small
    /// file there costs its connection seven to nine round trips (EPSV,
    /// STOR, the data, SIZE, RNFR, RNTO), whatever the link's rate: at
    /// `wan50`, 200 x 20 kB up to vsftpd took 12.1 s on 8 connections
    /// and 6.7 s on 16 (`lftp mirror -R --parallel=8`: 11.5 s;
    /// docs/internals/ftp.md). A server that allows fewer connections is
    /// met at its limit ([`FtpError::is_connection_limit`]).
    ///
    /// [`FtpError::is_connection_limit`]: ferry_ftp::FtpError::is_connection_limit
    pub const FTP_PARALLEL_LONG_PATH: usize = 16;
    /// Files in flight over SFTP and HTTP(S) when -P is not given.
    pub const PARALLEL: usize = 64;
    pub const FTP_STREAMS: usize = 1;
}

/// Counters the engine updates as it goes; poll them for a progress bar.
#[derive(Debug, Default)]
pub struct Stats {
    pub bytes_done: AtomicU64,
    pub bytes_total: AtomicU64,
    pub files_done: AtomicU64,
    pub files_total: AtomicU64,
    /// Set to stop the copy (`copy` watches it and cancels the transfer).
    pub cancel: std::sync::atomic::AtomicBool,
}

impl Stats {
    pub fn snapshot(&self) -> (u64, u64, u64, u64) {
        (
            self.bytes_done.load(Ordering::Relaxed),
            self.bytes_total.load(Ordering::Relaxed),
            self.files_done.load(Ordering::Relaxed),
            self.files_total.load(Ordering::Relaxed),
        )
    }

    /// Take the counts of a [`Event::Progress`] (a progress bar polling
    /// these counters while a [`Transfer`] sends events); other events
    /// change nothing.
    pub fn observe(&self, ev: &Event) {
        if let Event::Progress {
            bytes_done,
            bytes_total,
            files_done,
            files_total,
        } = ev
        {
            self.bytes_done.store(*bytes_done, Ordering::Relaxed);
            self.bytes_total.store(*bytes_total, Ordering::Relaxed);
            self.files_done.store(*files_done, Ordering::Relaxed);
            self.files_total.store(*files_total, Ordering::Relaxed);
        }
    }
}

/// What a finished copy did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Bytes moved in this run (resumed bytes not counted).
    pub bytes: u64,
    pub files: u64,
    pub seconds: f64,
    pub protocol: &'static str,
    /// Connections used.
    pub streams: usize,
    /// Request size used, after the server's limits.
    pub chunk: u32,
    /// The SSH cipher (SFTP), when known.
    pub cipher: Option<String>,
}

/// Copy `sources` to `dest`, blocking the calling thread (not from inside
/// a tokio runtime: use [`Transfer`] there). `stats` can be polled for
/// progress, and its `cancel` flag stops the copy. Any two locations:
/// local, SFTP, HTTP(S), FTP(S), remote to remote included.
pub fn copy(
    sources: &[Location],
    dest: &Location,
    opts: &CopyOptions,
    stats: std::sync::Arc<Stats>,
) -> Result<Summary, TransferError> {
    if sources.is_empty() {
        return Err(TransferError::Usage("no source given".into()));
    }
    let t = Transfer::new(sources.to_vec(), dest.clone(), opts.clone());
    let report = run_blocking(t, |ev| {
        stats.observe(ev);
        !stats.cancel.load(Ordering::Relaxed)
    });
    report.into_result()
}
