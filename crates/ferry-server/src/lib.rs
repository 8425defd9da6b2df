//! ferry's embedded server: one directory served over SFTP (SSH), HTTPS
//! (HTTP/1.1 and HTTP/2) and, when asked, FTP with explicit TLS, with real
//! authentication and every path confined to the directory.
//!
//! - [`Server::start`] binds the listeners (so address errors surface
//!   before anything is printed), loads or creates the server's
//!   [`Identity`] and runs the connections on one thread per core, each with
//!   its own single-threaded runtime: an SSH connection's crypto and its
//!   SFTP session share a thread and a cache, and connections spread over
//!   the cores (docs/internals/server.md).
//! - [`Root`] maps every client path into the served directory or refuses
//!   it; [`sftp`] is the SFTP v3 server over `ferry-sftp`'s codec; [`http`]
//!   is the HTTPS side; [`ftp`] is FTP/FTPS over libunftp.
//! - [`Server::shutdown`] stops accepting and gives running transfers a
//!   grace period.
//!
//! ```no_run
//! let opts = ferry_server::ServeOptions::new("/srv/data".into());
//! let server = ferry_server::Server::start(opts).unwrap();
//! println!("{}", server.banner());
//! // ... on SIGTERM:
//! server.shutdown(std::time::Duration::from_secs(10));
//! ```
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod confine;
pub mod fskind;
pub mod ftp;
pub mod http;
pub mod identity;
pub mod login;
mod readnow;
pub mod sftp;
pub mod ssh;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use confine::{ConfineError, Root};
pub use identity::Identity;
pub use sftp::SftpLimits;

/// How to serve. [`ServeOptions::new`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub root: PathBuf,
    /// SFTP over SSH; `None` turns it off.
    pub sftp: Option<SocketAddr>,
    /// HTTPS (h1 + h2 by ALPN); `None` turns it off.
    pub https: Option<SocketAddr>,
    /// Plain HTTP, only when asked.
    pub http: Option<SocketAddr>,
    /// FTP with explicit TLS (`AUTH TLS`), only when asked.
    pub ftp: Option<SocketAddr>,
    pub ftp_opts: ftp::FtpOptions,
    pub writable: bool,
    pub state_dir: PathBuf,
    pub authorized_keys: PathBuf,
    /// Only this SSH user name may log in.
    pub user: Option<String>,
    /// The HTTPS bearer token; `None`: the one in the state directory
    /// (made on first start).
    pub token: Option<String>,
    /// HTTP reads without a token.
    pub public: bool,
    /// A real certificate and key (PEM) instead of the self-signed one.
    pub tls_cert: Option<(PathBuf, PathBuf)>,
    /// Connections at once, all listeners together (SSH, HTTP(S), FTP
    /// control): the limit bounds the process's sockets and memory, which
    /// every protocol shares, as nginx's `worker_connections` counts every
    /// listener of a worker.
    pub max_connections: usize,
    pub sftp_limits: SftpLimits,
    /// SFTP and HTTP metadata calls on the blocking pool even on a local
    /// filesystem (`fskind`); off: decided by the filesystem.
    pub metadata_in_pool: bool,
    /// Threads serving connections; 0: one per core.
    pub threads: usize,
    /// Connections that have not logged in yet (SSH, FTP), at most; more
    /// are closed as they arrive (sshd's MaxStartups).
    pub max_startups: usize,
    /// SSH connections must authenticate, FTP control connections log in,
    /// within this (sshd's LoginGraceTime).
    pub login_grace: Duration,
    /// HTTP: the TLS handshake, the first byte and each request's header
    /// must arrive within this (against slowloris clients).
    pub header_timeout: Duration,
    /// Pause before answering a refused SSH key or FTP password; `None`:
    /// 300 ms for SSH, 1 s for FTP.
    pub auth_fail_delay: Option<Duration>,
    /// SSH compression: what is offered, and how this server sends
    /// (`auto` by default; `off` offers `none` alone).
    pub ssh_compression: ferry_ssh::SshCompression,
}

impl ServeOptions {
    pub fn new(root: PathBuf) -> Self {
        let home = dirs::home_dir().unwrap_or_else(|| PathBuf::from("."));
        ServeOptions {
            root,
            sftp: Some(SocketAddr::from(([127, 0, 0, 1], 2222))),
            https: Some(SocketAddr::from(([127, 0, 0, 1], 8443))),
            http: None,
            ftp: None,
            ftp_opts: ftp::FtpOptions::default(),
            writable: false,
            state_dir: identity::default_state_dir(),
            authorized_keys: home.join(".ssh").join("authorized_keys"),
            user: None,
            token: None,
            public: false,
            tls_cert: None,
            max_connections: 64,
            sftp_limits: SftpLimits::default(),
            metadata_in_pool: false,
            threads: 0,
            max_startups: 100,
            login_grace: Duration::from_secs(60),
            header_timeout: http::HEADER_READ_TIMEOUT,
            auth_fail_delay: None,
            ssh_compression: ferry_ssh::SshCompression::Auto,
        }
    }
}

/// What every HTTP connection needs; built by [`Server::start`].
pub struct Shared {
    pub root: Root,
    pub writable: bool,
    pub token: String,
    pub public: bool,
    /// Turns true when the server stops: HTTP connections then finish the
    /// requests in progress and close (idle keep-alive ones at once).
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Content digests of served files (`Repr-Digest`), when known.
    pub digests: Arc<http::digest::Digests>,
    /// Metadata calls on the connection's thread (a local filesystem:
    /// `fskind`), not the blocking pool.
    pub inline_metadata: bool,
    /// [`ServeOptions::header_timeout`].
    pub header_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Setup(String),
}

enum Job {
    Ssh(std::net::TcpStream, SocketAddr),
    Http(std::net::TcpStream, SocketAddr, Proto),
    Ftp(std::net::TcpStream, SocketAddr),
}

/// Which listener a connection came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ssh,
    Http(Proto),
    Ftp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Https,
    Http,
}

/// Counts a live connection; the count drops with it.
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running server.
pub struct Server {
    identity: Identity,
    pub sftp_addr: Option<SocketAddr>,
    pub https_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub ftp_addr: Option<SocketAddr>,
    ftp_allow_plain: bool,
    root: PathBuf,
    writable: bool,
    public: bool,
    /// The certificate clients should trust (for the banner's curl line).
    cert_path: PathBuf,
    stop: Arc<AtomicBool>,
    stop_tx: tokio::sync::watch::Sender<bool>,
    live: Arc<AtomicUsize>,
    acceptor: Option<JoinHandle<()>>,
}

fn bind(addr: SocketAddr, what: &str) -> Result<std::net::TcpListener, ServeError> {
    let l = std::net::TcpListener::bind(addr).map_err(|e| {
        ServeError::Setup(format!(
            "cannot listen for {what} on {addr}: {e} (pick another address with --{})",
            what.to_ascii_lowercase()
        ))
    })?;
    l.set_nonblocking(true)
        .map_err(|e| ServeError::Setup(format!("{addr}: {e}")))?;
    Ok(l)
}

impl Server {
    pub fn start(opts: ServeOptions) -> Result<Server, ServeError> {
        let root = Root::new(&opts.root).map_err(|e| {
            ServeError::Setup(format!(
                "{}: cannot serve this directory: {e}",
                opts.root.display()
            ))
        })?;
        let tls = opts
            .tls_cert
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()));
        let identity = Identity::load_or_create(&opts.state_dir, tls, opts.token.as_deref())
            .map_err(|e| ServeError::Setup(e.to_string()))?;
        let ssh_l = opts.sftp.map(|a| bind(a, "SFTP")).transpose()?;
        let https_l = opts.https.map(|a| bind(a, "HTTPS")).transpose()?;
        let http_l = opts.http.map(|a| bind(a, "HTTP")).transpose()?;
        let ftp_l = opts.ftp.map(|a| bind(a, "FTP")).transpose()?;
        let local =
            |l: &Option<std::net::TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
        let (sftp_addr, https_addr, http_addr) = (local(&ssh_l), local(&https_l), local(&http_l));
        let ftp_addr = local(&ftp_l);
        let (cert_path, key_path) = match &opts.tls_cert {
            Some((c, k)) => (c.clone(), k.clone()),
            None => (
                opts.state_dir.join("tls-cert.pem"),
                opts.state_dir.join("tls-key.pem"),
            ),
        };
        let cert_path = std::path::absolute(&cert_path).unwrap_or(cert_path);

        // SFTP and HTTP make their metadata calls on the connection's
        // thread on a local filesystem (fskind.rs).
        let inline_metadata = !opts.metadata_in_pool && fskind::is_local(root.path());
        tracing::info!(inline_metadata, "metadata calls on the connection's thread");
        let (stop_tx, stopping) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            root: root.clone(),
            writable: opts.writable,
            token: identity.token.clone(),
            public: opts.public,
            stopping,
            digests: Arc::new(http::digest::Digests::new()),
            inline_metadata,
            header_timeout: opts.header_timeout,
        });
        let ftp = if ftp_l.is_some() {
            Some(Arc::new(
                ftp::FtpService::new(
                    root.clone(),
                    ftp::auth::TokenAuth {
                        token: identity.token.clone(),
                        user: opts.user.clone(),
                        writable: opts.writable,
                        public: opts.public,
                        fail_delay: opts
                            .auth_fail_delay
                            .unwrap_or(ftp::auth::FAILED_LOGIN_PAUSE),
                    },
                    cert_path.clone(),
                    key_path,
                    opts.ftp_opts.clone(),
                )
                .map_err(ServeError::Setup)?,
            ))
        } else {
            None
        };
        let sftp_cfg = Arc::new(sftp::SessionConfig::new(
            root,
            opts.writable,
            opts.sftp_limits.clone(),
            inline_metadata,
        ));
        let ssh_cfg = Arc::new(ssh::config(
            identity.host_key.clone(),
            opts.auth_fail_delay.unwrap_or(ssh::AUTH_FAIL_DELAY),
            opts.ssh_compression,
        ));
        let startups = login::Startups::new(opts.max_startups);
        let login_grace = opts.login_grace;
        let policy = Arc::new(ssh::AuthPolicy {
            authorized_keys: opts.authorized_keys.clone(),
            user: opts.user.clone(),
        });
        let https = if https_l.is_some() {
            Some(Arc::new(
                http::HttpService::new(
                    shared.clone(),
                    Some((&identity.tls_cert_pem, &identity.tls_key_pem)),
                )
                .map_err(|e| ServeError::Setup(format!("TLS: {e}")))?,
            ))
        } else {
            None
        };
        let plain = if http_l.is_some() {
            Some(Arc::new(
                http::HttpService::new(shared.clone(), None)
                    .map_err(|e| ServeError::Setup(format!("HTTP: {e}")))?,
            ))
        } else {
            None
        };

        let threads = if opts.threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            opts.threads
        };
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for i in 0..threads {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Job, Live)>();
            let ssh_cfg = ssh_cfg.clone();
            let policy = policy.clone();
            let sftp_cfg = sftp_cfg.clone();
            let https = https.clone();
            let plain = plain.clone();
            let ftp = ftp.clone();
            let worker_live = live.clone();
            let startups = startups.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| ServeError::Setup(format!("runtime: {e}")))?;
            std::thread::Builder::new()
                .name(format!("ferry-serve-{i}"))
                .spawn(move || {
                    rt.block_on(async move {
                        while let Some((job, live)) = rx.recv().await {
                            match job {
                                Job::Ssh(s, peer) => {
                                    let Some(login) = startups.try_begin() else {
                                        tracing::warn!(%peer, "refused: {} connections not logged in yet (--max-startups)", startups.max());
                                        continue;
                                    };
                                    let handler = ssh::Conn {
                                        policy: policy.clone(),
                                        sftp: sftp_cfg.clone(),
                                        peer: peer.to_string(),
                                        channels: Default::default(),
                                        login: Some(login.clone()),
                                    };
                                    let cfg = ssh_cfg.clone();
                                    tokio::spawn(async move {
                                        let _live = live;
                                        let Ok(s) = tokio::net::TcpStream::from_std(s) else {
                                            return;
                                        };
                                        let _ = s.set_nodelay(true);
                                        ferry_tcp::apply(&s);
                                        login::enforce_grace(&s, &login, login_grace, peer, "ssh");
                                        drop(login);
                                        match russh::server::run_stream(cfg, s, handler).await {
                                            Ok(session) => {
                                                if let Err(e) = session.await {
                                                    tracing::debug!(%peer, "ssh session ended: {e}");
                                                }
                                            }
                                            Err(e) => tracing::debug!(%peer, "ssh handshake: {e}"),
                                        }
                                    });
                                }
                                Job::Http(s, peer, proto) => {
                                    let svc = match proto {
                                        Proto::Https => https.clone(),
                                        Proto::Http => plain.clone(),
                                    };
                                    let Some(svc) = svc else { continue };
                                    tokio::spawn(async move {
                                        let _live = live;
                                        let Ok(s) = tokio::net::TcpStream::from_std(s) else {
                                            return;
                                        };
                                        let _ = s.set_nodelay(true);
                                        ferry_tcp::apply(&s);
                                        svc.serve(s, peer).await;
                                    });
                                }
                                Job::Ftp(s, peer) => {
                                    let Some(svc) = ftp.clone() else { continue };
                                    let Some(login) = startups.try_begin() else {
                                        tracing::warn!(%peer, "refused: {} connections not logged in yet (--max-startups)", startups.max());
                                        continue;
                                    };
                                    tokio::spawn(async move {
                                        let _live = live;
                                        let Ok(s) = tokio::net::TcpStream::from_std(s) else {
                                            return;
                                        };
                                        let _ = s.set_nodelay(true);
                                        ferry_tcp::apply(&s);
                                        login::enforce_grace(&s, &login, login_grace, peer, "ftp");
                                        svc.serve(s, peer, login).await;
                                    });
                                }
                            }
                        }
                        // The acceptor has stopped (shutdown). Returning
                        // now would drop this runtime and cut every
                        // connection on it at once, grace period or not:
                        // keep serving them until none is left anywhere
                        // (or the process exits after the grace period).
                        while worker_live.load(Ordering::Acquire) > 0 {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    })
                })
                .map_err(|e| ServeError::Setup(format!("thread: {e}")))?;
            workers.push(tx);
        }

        let max = opts.max_connections;
        let acceptor = {
            let stop = stop.clone();
            let live = live.clone();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| ServeError::Setup(format!("runtime: {e}")))?;
            std::thread::Builder::new()
                .name("ferry-accept".into())
                .spawn(move || {
                    rt.block_on(accept_loop(
                        [ssh_l, https_l, http_l, ftp_l],
                        workers,
                        stop,
                        live,
                        max,
                    ))
                })
                .map_err(|e| ServeError::Setup(format!("thread: {e}")))?
        };
        Ok(Server {
            identity,
            sftp_addr,
            https_addr,
            http_addr,
            ftp_addr,
            ftp_allow_plain: opts.ftp_opts.allow_plain,
            root: opts.root,
            writable: opts.writable,
            public: opts.public,
            cert_path,
            stop,
            stop_tx,
            live,
            acceptor: Some(acceptor),
        })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The start-up banner: machine-readable lines first (one `key value`
    /// per line, ending with `ready`), then what a person needs.
    pub fn banner(&self) -> String {
        let mut b = String::new();
        if let Some(a) = self.sftp_addr {
            b.push_str(&format!("sftp {a}\n"));
        }
        if let Some(a) = self.https_addr {
            b.push_str(&format!("https {a}\n"));
        }
        if let Some(a) = self.http_addr {
            b.push_str(&format!("http {a}\n"));
        }
        if let Some(a) = self.ftp_addr {
            b.push_str(&format!("ftp {a}\n"));
        }
        b.push_str(&format!(
            "hostkey {}\n",
            self.identity.host_key_fingerprint()
        ));
        b.push_str(&format!("hostkey-line {}\n", self.identity.host_key_line()));
        b.push_str(&format!("cert sha256:{}\n", self.identity.cert_sha256));
        b.push_str(&format!("token {}\n", self.identity.token));
        b.push_str("ready\n");
        b.push_str(&format!(
            "\nferry serve: {} ({})\n",
            self.root.display(),
            if self.writable {
                "writable"
            } else {
                "read-only"
            }
        ));
        if let Some(a) = self.sftp_addr {
            b.push_str(&format!(
                "  SFTP   sftp://{}/   host key {}\n         ferry cp sftp://{}/FILE .\n",
                host_port(a),
                self.identity.host_key_fingerprint(),
                host_port(a),
            ));
        }
        if let Some(a) = self.https_addr {
            b.push_str(&format!(
                "  HTTPS  https://{}/   certificate sha256:{}\n         ferry cp --pin sha256:{} --token {} https://{}/FILE .\n",
                host_port(a),
                self.identity.cert_sha256,
                self.identity.cert_sha256,
                self.identity.token,
                host_port(a),
            ));
            b.push_str(&format!(
                "         curl --cacert {} -H 'Authorization: Bearer {}' -O https://{}/FILE\n",
                self.cert_path.display(),
                self.identity.token,
                host_port(a),
            ));
            if self.public {
                b.push_str("         (--public: reads need no token; writes do)\n");
            }
        }
        if let Some(a) = self.http_addr {
            b.push_str(&format!(
                "  HTTP   http://{}/ (plain, unencrypted)\n         curl -H 'Authorization: Bearer {}' -O http://{}/FILE\n",
                host_port(a),
                self.identity.token,
                host_port(a),
            ));
        }
        if let Some(a) = self.ftp_addr {
            let hp = host_port(a);
            let (cert, token) = (&self.identity.cert_sha256, &self.identity.token);
            if self.ftp_allow_plain {
                b.push_str(&format!(
                    "  FTP    ftp://{hp}/   TLS offered (AUTH TLS), plain FTP allowed: without TLS the password travels in the clear\n"
                ));
            } else {
                b.push_str(&format!(
                    "  FTP    ftp://{hp}/   TLS required (AUTH TLS), certificate sha256:{cert}\n"
                ));
            }
            b.push_str(&format!(
                "         user: any name, password: the token\n         ferry cp --ssl-reqd --pin sha256:{cert} -u ferry:{token} ftp://{hp}/FILE .\n         curl --ssl-reqd --cacert {} -u ferry:{token} -O ftp://{hp}/FILE\n",
                self.cert_path.display(),
            ));
            if self.public {
                b.push_str("         (--public: user anonymous may read, never write)\n");
            }
        }
        b
    }

    /// Connections open now.
    pub fn live_connections(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    /// Stop accepting, wait up to `grace` for open connections to finish,
    /// then return; connections still open are cut when the process exits.
    /// Returns how many were still open.
    pub fn shutdown(mut self, grace: Duration) -> usize {
        self.stop.store(true, Ordering::Release);
        let _ = self.stop_tx.send(true);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let deadline = Instant::now() + grace;
        while self.live_connections() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.live_connections()
    }
}

fn host_port(a: SocketAddr) -> String {
    match a {
        SocketAddr::V4(v) => format!("{}:{}", v.ip(), v.port()),
        SocketAddr::V6(v) => format!("[{}]:{}", v.ip(), v.port()),
    }
}

async fn accept_loop(
    listeners: [Option<std::net::TcpListener>; 4],
    workers: Vec<tokio::sync::mpsc::UnboundedSender<(Job, Live)>>,
    stop: Arc<AtomicBool>,
    live: Arc<AtomicUsize>,
    max: usize,
) {
    let [ssh_l, https_l, http_l, ftp_l] = listeners;
    let to_tokio = |l: Option<std::net::TcpListener>| {
        l.and_then(|l| tokio::net::TcpListener::from_std(l).ok())
    };
    let (ssh_l, https_l, http_l) = (to_tokio(ssh_l), to_tokio(https_l), to_tokio(http_l));
    let ftp_l = to_tokio(ftp_l);
    async fn accept(
        l: &Option<tokio::net::TcpListener>,
    ) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
        match l {
            Some(l) => l.accept().await,
            None => std::future::pending().await,
        }
    }
    let mut next = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        let (res, kind) = tokio::select! {
            r = accept(&ssh_l) => (r, Kind::Ssh),
            r = accept(&https_l) => (r, Kind::Http(Proto::Https)),
            r = accept(&http_l) => (r, Kind::Http(Proto::Http)),
            r = accept(&ftp_l) => (r, Kind::Ftp),
            _ = tick.tick() => {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                continue;
            }
        };
        let (stream, peer) = match res {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if stop.load(Ordering::Acquire) {
            return;
        }
        if live.load(Ordering::Acquire) >= max {
            tracing::warn!(%peer, "refused: {max} connections already open (--max-connections)");
            continue;
        }
        let Ok(std_stream) = stream.into_std() else {
            continue;
        };
        live.fetch_add(1, Ordering::AcqRel);
        let guard = Live(live.clone());
        let job = match kind {
            Kind::Ssh => Job::Ssh(std_stream, peer),
            Kind::Http(p) => Job::Http(std_stream, peer, p),
            Kind::Ftp => Job::Ftp(std_stream, peer),
        };
        if workers.is_empty() {
            return;
        }
        let w = next % workers.len();
        next = next.wrapping_add(1);
        if let Some(tx) = workers.get(w) {
            let _ = tx.send((job, guard));
        }
    }
}
