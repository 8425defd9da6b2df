//! `ferry serve`: flags for [`ferry_server::ServeOptions`], the banner, and
//! a clean stop on Ctrl-C or SIGTERM.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

#[derive(Args)]
pub struct ServeArgs {
    /// The directory to serve; clients see it as `/`.
    #[arg(value_name = "DIR", default_value = ".")]
    dir: PathBuf,
    /// Address for SFTP over SSH.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:2222")]
    sftp: SocketAddr,
    /// Address for HTTPS (HTTP/1.1 and HTTP/2).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8443")]
    https: SocketAddr,
    /// Also serve plain, unencrypted HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Also serve FTP on this address, with explicit TLS (AUTH TLS) required
    /// for the login and every transfer. User: any name (or --user);
    /// password: the token. Implicit FTPS (port 990 style) is not offered.
    #[arg(long, value_name = "ADDR")]
    ftp: Option<SocketAddr>,
    /// Let FTP clients log in and transfer without TLS too. Passwords (the
    /// token) and data then travel in the clear.
    #[arg(long, requires = "ftp")]
    ftp_allow_plain: bool,
    /// Ports for FTP passive data connections.
    #[arg(long, value_name = "LO-HI", default_value = "49152-65535", value_parser = ferry_server::ftp::parse_port_range)]
    ftp_passive_ports: std::ops::RangeInclusive<u16>,
    /// Close an FTP session after this many seconds without a command (a
    /// running transfer keeps it open).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    ftp_idle_timeout: u64,
    /// Do not serve SFTP.
    #[arg(long)]
    no_sftp: bool,
    /// Do not serve HTTPS.
    #[arg(long)]
    no_https: bool,
    /// Allow uploads, renames and deletes (default: read-only).
    #[arg(long, conflicts_with = "read_only")]
    writable: bool,
    /// Refuse every change (the default).
    #[arg(long)]
    read_only: bool,
    /// Where the host key, TLS certificate and token are kept
    /// [default: ~/.local/share/ferry/serve].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Public keys allowed to log in over SSH [default: ~/.ssh/authorized_keys].
    #[arg(long, value_name = "FILE")]
    authorized_keys: Option<PathBuf>,
    /// Only this user name may log in over SSH and FTP (default: any, with an
    /// authorized key or, over FTP, the token).
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// HTTPS bearer token, also the FTP password [default: generated once,
    /// kept in the state directory].
    #[arg(
        long,
        value_name = "TOKEN",
        env = "FERRY_SERVE_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Let anyone read over HTTP(S) without the token, and over FTP as user
    /// `anonymous` (writes still need it).
    #[arg(long)]
    public: bool,
    /// A real TLS certificate chain (PEM) instead of the self-signed one.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TCP congestion control of the connections ferry serve accepts:
    /// auto (BBR when the kernel lets us, else the system's), system, or an
    /// algorithm the kernel offers (bbr, cubic, ...; if it refuses, ferry
    /// warns and uses the system default). FTP data connections keep the
    /// system default (libunftp opens them).
    #[arg(
        long,
        value_name = "auto|system|NAME",
        default_value = "auto",
        env = "FERRY_CONGESTION"
    )]
    congestion: ferry_tcp::Congestion,
    /// The private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Most connections at once, all protocols together (SSH, HTTP(S) and
    /// FTP control connections; FTP data connections are not counted):
    /// more are closed as they arrive.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_connections: usize,
    /// Most open files per SFTP session.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_handles: usize,
    /// Make SFTP and HTTP metadata calls (open, stat, rename, ...) on the
    /// blocking pool even on a local filesystem (tuning; network and FUSE
    /// filesystems always use it).
    #[arg(long, hide = true)]
    metadata_in_pool: bool,
    /// Most connections at once that have not logged in yet (SSH, FTP);
    /// more are closed as they arrive, like sshd's MaxStartups.
    #[arg(long, value_name = "N", default_value_t = 100)]
    max_startups: usize,
    /// Seconds an SSH connection has to authenticate, and an FTP control
    /// connection to log in, before it is closed (sshd's LoginGraceTime).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    login_grace_time: u64,
    /// Seconds an HTTP client has to send a request's header (and the
    /// first byte, and to finish TLS, at most 10 s): slowloris clients are
    /// closed after it.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    header_timeout: u64,
    /// Milliseconds before a refused SSH key or FTP password is answered
    /// [default: 300 for SSH, 1000 for FTP].
    #[arg(long, value_name = "MS")]
    auth_fail_delay: Option<u64>,
    /// SSH compression this server sends with when the client asks for
    /// zstd: auto (the default: the level follows what the transfer
    /// measures), on (zstd level 1), a zstd level 1-19, or off (offer no
    /// compression at all, like sshd's `Compression no`). OpenSSH clients
    /// asking for zlib get zlib's fastest level unless off. A value needs
    /// `=`: --compress=3.
    #[arg(long, value_name = "auto|on|off|LEVEL", default_value = "auto")]
    compress: ferry_ssh::SshCompression,
    /// Seconds running transfers get to finish after Ctrl-C or SIGTERM.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    grace: u64,
}

pub fn run(args: ServeArgs) -> i32 {
    // Process-wide: every connection ferry serve accepts picks it up.
    ferry_tcp::set_congestion(args.congestion.clone());
    let mut opts = ferry_server::ServeOptions::new(args.dir.clone());
    opts.sftp = (!args.no_sftp).then_some(args.sftp);
    opts.https = (!args.no_https).then_some(args.https);
    opts.http = args.http;
    opts.ftp = args.ftp;
    opts.ftp_opts.allow_plain = args.ftp_allow_plain;
    opts.ftp_opts.passive_ports = args.ftp_passive_ports;
    opts.ftp_opts.idle_timeout = Duration::from_secs(args.ftp_idle_timeout.max(1));
    opts.writable = args.writable;
    if let Some(d) = args.state_dir {
        opts.state_dir = d;
    }
    if let Some(k) = args.authorized_keys {
        opts.authorized_keys = k;
    }
    opts.user = args.user;
    if args.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        say!(
            "ferry serve: --token is empty; give a real token or leave it out to use the generated one"
        );
        return 2;
    }
    opts.token = args.token;
    opts.public = args.public;
    opts.tls_cert = args.tls_cert.zip(args.tls_key);
    opts.max_connections = args.max_connections.max(1);
    opts.sftp_limits.max_handles = args.max_handles.max(1);
    opts.metadata_in_pool = args.metadata_in_pool;
    opts.max_startups = args.max_startups.max(1);
    opts.login_grace = Duration::from_secs(args.login_grace_time.max(1));
    opts.header_timeout = Duration::from_secs(args.header_timeout.max(1));
    opts.auth_fail_delay = args.auth_fail_delay.map(Duration::from_millis);
    opts.ssh_compression = args.compress;
    if opts.sftp.is_none() && opts.https.is_none() && opts.http.is_none() && opts.ftp.is_none() {
        say!("ferry serve: nothing to serve (--no-sftp and --no-https without --http or --ftp)");
        return 2;
    }
    if opts.sftp.is_some() && !opts.authorized_keys.exists() {
        say!(
            "ferry serve: warning: {} does not exist, so no one can log in over SFTP (use --authorized-keys FILE)",
            opts.authorized_keys.display()
        );
    }
    let server = match ferry_server::Server::start(opts) {
        Ok(s) => s,
        Err(e) => {
            say!("ferry serve: {e}");
            return 2;
        }
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(server.banner().as_bytes());
        let _ = out.flush();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say!("ferry serve: {e}");
            return 1;
        }
    };
    let sig = rt.block_on(async {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(e) => return format!("cannot watch SIGTERM: {e}"),
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "interrupt".to_string(),
            _ = term.recv() => "SIGTERM".to_string(),
        }
    });
    let open = server.live_connections();
    say!(
        "ferry serve: {sig}: no new connections; waiting up to {} s for {open} open connection(s)",
        args.grace
    );
    let left = server.shutdown(Duration::from_secs(args.grace));
    if left > 0 {
        say!("ferry serve: closing {left} connection(s) still open");
    }
    0
}
