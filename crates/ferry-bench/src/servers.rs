//! The servers of the scorecard, each on 127.0.0.1 on a free port with its
//! own configuration in the work directory, stopped by PID when dropped:
//! `ferry serve` (SFTP + HTTPS), OpenSSH sshd, nginx (TLS 1.3, h2,
//! sendfile, WebDAV PUT).
//!
//! The served tree is the work directory's `srv/`: data sets under
//! `srv/data/<variant>/<set>/`, uploads into `srv/up/`. `ferry serve` and
//! nginx serve `srv/` as `/`; sshd serves the real filesystem, so its paths
//! carry the absolute prefix.
//!
//! Under a packet-level profile (`net.rs`) the same servers start inside the
//! link's server namespace: `run.rs` calls the start functions on a thread
//! that has entered that namespace (their children inherit it) after
//! [`set_listen_host`] on that thread, so they listen on the namespace's
//! address instead of 127.0.0.1 and their certificates name it.
use std::cell::RefCell;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::proc::{which_server, Guard};

thread_local! {
    /// The address servers started on this thread listen on.
    static LISTEN_HOST: RefCell<String> = RefCell::new("127.0.0.1".into());
}

/// Servers started on this thread from now on listen on `host` (an IPv4
/// address) instead of 127.0.0.1.
pub fn set_listen_host(host: &str) {
    LISTEN_HOST.with(|h| *h.borrow_mut() = host.to_string());
}

/// The address servers started on this thread listen on.
pub fn listen_host() -> String {
    LISTEN_HOST.with(|h| h.borrow().clone())
}

/// The bench's SSH client identity.
#[derive(Debug, Clone)]
pub struct ClientKey {
    pub key: PathBuf,
    pub public: String,
    /// The local user name sshd will log in.
    pub user: String,
}

/// `ssh-keygen -t ed25519` into `path` (no passphrase); the public line.
pub fn keygen(path: &Path, comment: &str) -> Result<String> {
    let _ = fs::remove_file(path);
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .context("cannot run ssh-keygen (install openssh-client)")?;
    if !st.success() {
        bail!("ssh-keygen failed for {}", path.display());
    }
    let public = fs::read_to_string(path.with_extension("pub"))
        .with_context(|| format!("reading {}.pub", path.display()))?;
    Ok(public.trim().to_string())
}

pub fn client_key(dir: &Path) -> Result<ClientKey> {
    let key = dir.join("client_ed25519");
    let public = keygen(&key, "ferry-bench")?;
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            Command::new("id")
                .arg("-un")
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "root".into());
    Ok(ClientKey { key, public, user })
}

fn wait_port(port: u16, guard: &Guard, timeout: Duration, ssh: bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if !guard.running() {
            bail!("{} exited during start-up", guard.name());
        }
        if let Ok(mut s) = TcpStream::connect((listen_host().as_str(), port)) {
            if !ssh {
                return Ok(());
            }
            let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
            let mut b = [0u8; 4];
            if s.read_exact(&mut b).is_ok() && &b == b"SSH-" {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    bail!(
        "{} is not answering on {}:{port}",
        guard.name(),
        listen_host()
    )
}

fn free_port() -> Result<u16> {
    Ok(free_ports(1)?[0])
}

/// `n` distinct free ports, each held until all are picked: one
/// `free_port` after another could return the same port (nginx then
/// refused its configuration: "a duplicate listen", a test failure in CI).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let held = (0..n)
        .map(|_| std::net::TcpListener::bind((listen_host().as_str(), 0)))
        .collect::<std::io::Result<Vec<_>>>()
        .context("binding a free port")?;
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

fn log_tail(path: &Path) -> String {
    let s = fs::read_to_string(path).unwrap_or_default();
    let start = s.len().saturating_sub(1500);
    s.get(start..).unwrap_or("").trim().to_string()
}

/// A fresh self-signed P-256 certificate for 127.0.0.1, localhost and the
/// listen host (`openssl req -x509`), valid two days: `cert.pem` and `key.pem` in
/// `dir`.
pub fn self_signed_cert(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    // A server restarted in the same directory keeps its certificate, as
    // a real one does: a client's retry then meets the same identity.
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    if crate::proc::which("openssl").is_none() {
        bail!("openssl not installed (needed for a test certificate)");
    }
    let host = listen_host();
    let san = if host == "127.0.0.1" {
        "subjectAltName=IP:127.0.0.1,DNS:localhost".to_string()
    } else {
        format!("subjectAltName=IP:127.0.0.1,DNS:localhost,IP:{host}")
    };
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            &san,
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running openssl")?;
    if !st.success() {
        bail!("openssl could not make a certificate in {}", dir.display());
    }
    Ok((cert, key))
}

/// `ferry serve srv/ --sftp 127.0.0.1:0 --https 127.0.0.1:0 --ftp 127.0.0.1:0
/// --writable`.
#[derive(Debug)]
pub struct FerryServe {
    pub guard: Guard,
    pub sftp_port: u16,
    pub https_port: Option<u16>,
    /// FTP with TLS required; the password is `token`.
    pub ftp_port: Option<u16>,
    pub hostkey_line: String,
    pub cert_sha256: String,
    pub cert_pem: PathBuf,
    pub token: String,
    pub log: PathBuf,
}

impl FerryServe {
    pub fn start(ferry: &Path, root: &Path, dir: &Path, key: &ClientKey) -> Result<FerryServe> {
        fs::create_dir_all(dir)?;
        let state = dir.join("state");
        let ak = dir.join("authorized_keys");
        fs::write(&ak, format!("{}\n", key.public))?;
        let log = dir.join("serve.log");
        let host = listen_host();
        if host != "127.0.0.1" {
            // ferry serve's own certificate names 127.0.0.1 and localhost;
            // elsewhere it takes one from its state directory.
            fs::create_dir_all(&state)?;
            let (c, k) = self_signed_cert(dir)?;
            fs::rename(c, state.join("tls-cert.pem"))?;
            fs::rename(k, state.join("tls-key.pem"))?;
        }
        let any_port = format!("{host}:0");
        let mut cmd = Command::new(ferry);
        cmd.arg("serve")
            .arg(root)
            .args([
                "--sftp",
                &any_port,
                "--https",
                &any_port,
                "--ftp",
                &any_port,
                "--writable",
            ])
            .args(["--max-connections", "512"])
            .arg("--state-dir")
            .arg(&state)
            .arg("--authorized-keys")
            .arg(&ak)
            .env_remove("FERRY_SERVE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&log)?);
        let (guard, mut child) = Guard::spawn("ferry serve", cmd)?;
        let out = child.stdout.take().context("ferry serve: no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        // Reads the banner, then keeps draining stdout so it never blocks.
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let mut s = FerryServe {
            guard,
            sftp_port: 0,
            https_port: None,
            ftp_port: None,
            hostkey_line: String::new(),
            cert_sha256: String::new(),
            cert_pem: state.join("tls-cert.pem"),
            token: String::new(),
            log: log.clone(),
        };
        loop {
            let line = rx.recv_timeout(Duration::from_secs(30)).map_err(|_| {
                anyhow::anyhow!(
                    "ferry serve did not print `ready`; its log says:\n{}",
                    log_tail(&log)
                )
            })?;
            let (k, v) = line.split_once(' ').unwrap_or((line.as_str(), ""));
            let port = || v.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
            match k {
                "sftp" => s.sftp_port = port().unwrap_or(0),
                "https" => s.https_port = port(),
                "ftp" => s.ftp_port = port(),
                "hostkey-line" => s.hostkey_line = v.to_string(),
                "cert" => s.cert_sha256 = v.trim_start_matches("sha256:").to_string(),
                "token" => s.token = v.to_string(),
                "ready" => break,
                _ => {}
            }
        }
        if s.sftp_port == 0 || s.hostkey_line.is_empty() {
            bail!("ferry serve's banner has no sftp address or host key");
        }
        Ok(s)
    }
}

/// A private OpenSSH sshd as the current user.
#[derive(Debug)]
pub struct Sshd {
    pub guard: Guard,
    pub port: u16,
    pub hostkey_line: String,
    pub log: PathBuf,
}

impl Sshd {
    pub fn start(dir: &Path, key: &ClientKey) -> Result<Sshd> {
        let Some(sshd) = which_server("sshd") else {
            bail!("sshd not installed (apt-get install openssh-server)");
        };
        fs::create_dir_all(dir)?;
        let host_key = dir.join("host_ed25519");
        let hostkey_line = keygen(&host_key, "ferry-bench-host")?;
        // The host key line is "type base64 comment": known_hosts wants
        // the first two fields.
        let hostkey_line = hostkey_line
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        let ak = dir.join("authorized_keys");
        fs::write(&ak, format!("{}\n", key.public))?;
        // Privilege separation directory, needed even for a private sshd.
        let _ = fs::create_dir_all("/run/sshd");
        let sftp_server = ["/usr/lib/openssh/sftp-server", "/usr/libexec/sftp-server"]
            .iter()
            .find(|p| Path::new(p).exists())
            .map(|p| p.to_string())
            .unwrap_or_else(|| "internal-sftp".into());
        let port = free_port()?;
        let cfg = dir.join("sshd_config");
        fs::write(
            &cfg,
            format!(
                "Port {port}\nListenAddress {host}\nHostKey {hk}\nAuthorizedKeysFile {ak}\n\
                 PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nPidFile {pid}\n\
                 Subsystem sftp {sftp_server}\nLogLevel ERROR\n\
                 # sshd runs sessions through the user's shell; bash reads ~/.bashrc\n\
                 # for sshd-started shells unless SHLVL >= 2 (a heavy .bashrc would\n\
                 # add a constant to every connection of every tool).\n\
                 SetEnv SHLVL=1\nMaxStartups 200\nMaxSessions 200\n",
                host = listen_host(),
                hk = host_key.display(),
                ak = ak.display(),
                pid = dir.join("sshd.pid").display(),
            ),
        )?;
        let log = dir.join("sshd.log");
        let mut cmd = Command::new(&sshd);
        cmd.args(["-D", "-e", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log)?)
            .stderr(fs::File::create(dir.join("sshd.err"))?);
        let (guard, _child) = Guard::spawn("sshd", cmd)?;
        if let Err(e) = wait_port(port, &guard, Duration::from_secs(10), true) {
            bail!("{e}; sshd says:\n{}", log_tail(&dir.join("sshd.err")));
        }
        Ok(Sshd {
            guard,
            port,
            hostkey_line,
            log,
        })
    }

    /// Wait until the sessions of the last client have ended.
    pub fn wait_idle(&self) {
        wait_no_children(self.guard.pid());
    }
}

/// nginx with a fair configuration: TLS 1.3, HTTP/2, sendfile, WebDAV PUT.
///
/// The bench starts it with [`Nginx::start`] (WebDAV on `/`); ferry's HTTP
/// tests start it with [`Nginx::start_with`] and the edge cases they need
/// ([`NginxLocation`]: a server that ignores Range, redirects, errors,
/// authentication, ...). It runs as a master and workers in its own
/// session, stopped by PID (SIGTERM, then SIGKILL to the group) when the
/// guard drops. In `dir`: `nginx.conf`, `cert.pem`/`key.pem`,
/// `logs/error.log` (and `logs/access.log` with
/// [`NginxOptions::access_log`]), request bodies under `tmp/body`.
#[derive(Debug)]
pub struct Nginx {
    pub guard: Guard,
    /// HTTPS (TLS 1.3, h2 and HTTP/1.1).
    pub port: u16,
    /// Plain HTTP/1.1, with [`NginxOptions::plain`].
    pub http_port: Option<u16>,
    /// Plain HTTP/2 with prior knowledge (h2c), with [`NginxOptions::plain`].
    pub h2c_port: Option<u16>,
    pub cert: PathBuf,
}

/// What a test wants from nginx beyond the bench's server.
#[derive(Debug, Clone, Default)]
pub struct NginxOptions {
    /// Listen for HTTPS here (to restart on the same port); default a free one.
    pub port: Option<u16>,
    /// Also listen for plain HTTP/1.1 and for h2c on two more ports.
    pub plain: bool,
    /// The plain ports (to restart on the same ones); default free ones.
    pub http_port: Option<u16>,
    pub h2c_port: Option<u16>,
    /// Log every request to `logs/access.log` (the bench does not: it costs).
    pub access_log: bool,
    /// Most concurrent h2 streams per connection (nginx's default: 128).
    pub h2_streams: Option<u32>,
    /// Locations under the served root, besides static files with
    /// autoindex everywhere; two on the same match share one block.
    pub locations: Vec<NginxLocation>,
}

/// One `location` of the test server, by what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NginxLocation {
    /// WebDAV PUT, DELETE and MKCOL (with `create_full_put_path`, any body
    /// size) under the prefix.
    Dav(String),
    /// Ignores Range: always 200 with the whole file (`max_ranges 0`).
    NoRanges(String),
    /// This exact path answers 302 to `to`.
    Redirect { from: String, to: String },
    /// This exact path answers `code` with nginx's own body.
    Status { path: String, code: u16 },
    /// Everything under the prefix is refused (403).
    Forbidden(String),
    /// Sends at most this many bytes per second per request.
    RateLimit { prefix: String, bytes_per_sec: u64 },
    /// gzip for any client that accepts it, text and octet-stream alike.
    Gzip(String),
    /// A directory answers with this file of it instead of its autoindex.
    Index { prefix: String, file: String },
    /// Adds this header to every answer.
    Header {
        prefix: String,
        name: String,
        value: String,
    },
    /// Wants Basic credentials.
    Basic {
        prefix: String,
        user: String,
        pass: String,
    },
    /// Wants `Authorization: Bearer <token>`, else 401.
    Bearer { prefix: String, token: String },
}

/// `s` as a word of nginx's configuration: no quotes, braces, semicolons,
/// `$` or white space that would change the configuration's meaning.
fn conf_word(s: &str) -> Result<&str> {
    if s.is_empty()
        || s.chars()
            .any(|c| c.is_whitespace() || c.is_control() || "\"'{};$\\#".contains(c))
    {
        bail!("{s:?} cannot go into nginx.conf as it is");
    }
    Ok(s)
}

impl NginxLocation {
    /// The location's match (`/p/` or `= /p`) and its directives; `dir`
    /// holds any file it needs (Basic's password file).
    fn render(&self, dir: &Path, n: usize) -> Result<(String, String)> {
        let prefix = |p: &str| conf_word(p).map(str::to_string);
        let exact = |p: &str| conf_word(p).map(|p| format!("= {p}"));
        Ok(match self {
            NginxLocation::Dav(p) => (
                prefix(p)?,
                // Any body size and autoindex come from the server block.
                "dav_methods PUT DELETE MKCOL; create_full_put_path on; \
                 dav_access user:rw group:r all:r;"
                    .into(),
            ),
            NginxLocation::NoRanges(p) => (prefix(p)?, "max_ranges 0;".into()),
            NginxLocation::Redirect { from, to } => {
                (exact(from)?, format!("return 302 {};", conf_word(to)?))
            }
            NginxLocation::Status { path, code } => {
                if !(200..=599).contains(code) {
                    bail!("nginx cannot answer status {code}");
                }
                (exact(path)?, format!("return {code};"))
            }
            NginxLocation::Forbidden(p) => (prefix(p)?, "deny all;".into()),
            NginxLocation::RateLimit {
                prefix: p,
                bytes_per_sec,
            } => (prefix(p)?, format!("limit_rate {};", bytes_per_sec.max(&1))),
            NginxLocation::Gzip(p) => (
                prefix(p)?,
                "gzip on; gzip_types text/plain application/octet-stream; gzip_min_length 0;"
                    .into(),
            ),
            NginxLocation::Index { prefix: p, file } => {
                (prefix(p)?, format!("index {};", conf_word(file)?))
            }
            NginxLocation::Header {
                prefix: p,
                name,
                value,
            } => {
                if value.chars().any(|c| c.is_control() || "\"\\$".contains(c)) {
                    bail!("header value {value:?} cannot go into nginx.conf as it is");
                }
                (
                    prefix(p)?,
                    format!("add_header {} \"{value}\" always;", conf_word(name)?),
                )
            }
            NginxLocation::Basic {
                prefix: p,
                user,
                pass,
            } => {
                if user.contains(':') || user.chars().any(char::is_control) {
                    bail!("{user:?} cannot be a Basic user name");
                }
                let o = Command::new("openssl")
                    .args(["passwd", "-apr1", "-stdin"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .and_then(|mut c| {
                        if let Some(mut i) = c.stdin.take() {
                            std::io::Write::write_all(&mut i, format!("{pass}\n").as_bytes())?;
                        }
                        c.wait_with_output()
                    })
                    .context("running openssl passwd")?;
                if !o.status.success() {
                    bail!("openssl passwd failed");
                }
                let file = dir.join(format!("htpasswd{n}"));
                let hash = String::from_utf8_lossy(&o.stdout).trim().to_string();
                fs::write(&file, format!("{user}:{hash}\n"))?;
                (
                    prefix(p)?,
                    format!(
                        "auth_basic \"ferry\"; auth_basic_user_file {};",
                        file.display()
                    ),
                )
            }
            NginxLocation::Bearer { prefix: p, token } => (
                prefix(p)?,
                format!(
                    "if ($http_authorization != \"Bearer {}\") {{ return 401; }}",
                    conf_word(token)?
                ),
            ),
        })
    }
}

/// `location` blocks, one per match: directives for the same match (two
/// options on `/`, say) share a block, since nginx refuses a duplicate.
fn location_blocks(rendered: Vec<(String, String)>) -> String {
    let mut blocks: Vec<(String, String)> = Vec::new();
    for (at, body) in rendered {
        match blocks.iter_mut().find(|(m, _)| *m == at) {
            Some((_, b)) => {
                b.push(' ');
                b.push_str(&body);
            }
            None => blocks.push((at, body)),
        }
    }
    blocks
        .iter()
        .map(|(at, body)| format!("    location {at} {{ {body} }}\n"))
        .collect()
}

impl Nginx {
    /// The bench's server: `root` as `/`, WebDAV PUT everywhere.
    pub fn start(dir: &Path, root: &Path) -> Result<Nginx> {
        let opts = NginxOptions {
            locations: vec![NginxLocation::Dav("/".into())],
            ..NginxOptions::default()
        };
        Nginx::start_with(dir, root, &opts)
    }

    pub fn start_with(dir: &Path, root: &Path, o: &NginxOptions) -> Result<Nginx> {
        let Some(nginx) = which_server("nginx") else {
            bail!("nginx not installed (apt-get install nginx-light)");
        };
        if crate::proc::which("openssl").is_none() {
            bail!("openssl not installed (needed for nginx's certificate)");
        }
        fs::create_dir_all(dir)?;
        for sub in ["tmp", "logs"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let (cert, key) = self_signed_cert(dir)?;
        // Three distinct ports, whichever are not given.
        let free = free_ports(3)?;
        let port = o.port.unwrap_or(free[0]);
        let (http_port, h2c_port) = if o.plain {
            (
                Some(o.http_port.unwrap_or(free[1])),
                Some(o.h2c_port.unwrap_or(free[2])),
            )
        } else {
            (None, None)
        };
        // The dav module ships as a dynamic module on Debian; PUT itself is
        // in the core http_dav module.
        let mut modules = String::new();
        for m in [
            "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so",
            "/usr/share/nginx/modules/ngx_http_dav_ext_module.so",
        ] {
            if Path::new(m).exists() {
                modules = format!("load_module {m};\n");
                break;
            }
        }
        // Workers must be able to write uploads: as root, run them as root.
        // SAFETY: geteuid only reads the process's credentials.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root;\n"
        } else {
            ""
        };
        let d = dir.display();
        let host = listen_host();
        let mut listen = format!("    listen {host}:{port} ssl http2;\n");
        if let (Some(h), Some(c)) = (http_port, h2c_port) {
            listen.push_str(&format!(
                "    listen {host}:{h};\n    listen {host}:{c} http2;\n"
            ));
        }
        let access_log = if o.access_log {
            format!("{d}/logs/access.log")
        } else {
            "off".into()
        };
        let streams = o
            .h2_streams
            .map(|n| format!("    http2_max_concurrent_streams {n};\n"))
            .unwrap_or_default();
        let rendered = o
            .locations
            .iter()
            .enumerate()
            .map(|(n, loc)| loc.render(dir, n))
            .collect::<Result<Vec<_>>>()?;
        let locations = location_blocks(rendered);
        let conf = format!(
            "{modules}{user}daemon off;\nmaster_process on;\nworker_processes auto;\npid {d}/nginx.pid;\n\
             error_log {d}/logs/error.log warn;\nevents {{ worker_connections 1024; }}\n\
             http {{\n  access_log {access_log};\n  sendfile on;\n  tcp_nopush on;\n  keepalive_requests 100000;\n\
             client_body_temp_path {d}/tmp/body;\n  proxy_temp_path {d}/tmp/proxy;\n\
             fastcgi_temp_path {d}/tmp/fastcgi;\n  uwsgi_temp_path {d}/tmp/uwsgi;\n  scgi_temp_path {d}/tmp/scgi;\n\
             types {{ application/octet-stream bin; text/plain txt; text/html html; application/json json; }}\n\
             default_type application/octet-stream;\n\
             server {{\n{listen}    server_name localhost;\n\
             ssl_certificate {cert};\n    ssl_certificate_key {key};\n    ssl_protocols TLSv1.3;\n\
             http2_chunk_size 256k;\n{streams}    root {root};\n    client_max_body_size 0;\n    autoindex on;\n\
             {locations}  }}\n}}\n",
            cert = cert.display(),
            key = key.display(),
            root = root.display(),
        );
        let conf_path = dir.join("nginx.conf");
        fs::write(&conf_path, conf)?;
        let mut cmd = Command::new(&nginx);
        cmd.arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .args(["-e", "stderr"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("nginx.err"))?);
        let (guard, _child) = Guard::spawn("nginx", cmd)?;
        for p in [Some(port), http_port, h2c_port].into_iter().flatten() {
            if let Err(e) = wait_port(p, &guard, Duration::from_secs(10), false) {
                let mut why = log_tail(&dir.join("nginx.err"));
                why.push_str(&log_tail(&dir.join("logs/error.log")));
                bail!("{e}; nginx says:\n{why}");
            }
        }
        Ok(Nginx {
            guard,
            port,
            http_port,
            h2c_port,
            cert,
        })
    }
}

#[cfg(test)]
mod nginx_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn render(loc: NginxLocation) -> Result<(String, String)> {
        loc.render(Path::new("/nonexistent"), 0)
    }

    #[test]
    fn nginx_locations_render_as_directives() {
        let r = |l| render(l).unwrap();
        assert_eq!(
            r(NginxLocation::NoRanges("/nr/".into())),
            ("/nr/".into(), "max_ranges 0;".into())
        );
        assert_eq!(
            r(NginxLocation::Redirect {
                from: "/a".into(),
                to: "/b".into()
            }),
            ("= /a".into(), "return 302 /b;".into())
        );
        assert_eq!(
            r(NginxLocation::Status {
                path: "/e".into(),
                code: 500
            })
            .1,
            "return 500;"
        );
        assert_eq!(
            r(NginxLocation::RateLimit {
                prefix: "/slow/".into(),
                bytes_per_sec: 1 << 20
            })
            .1,
            "limit_rate 1048576;"
        );
        assert_eq!(
            r(NginxLocation::Header {
                prefix: "/d/".into(),
                name: "Repr-Digest".into(),
                value: "sha-256=:AA+/=:".into()
            })
            .1,
            "add_header Repr-Digest \"sha-256=:AA+/=:\" always;"
        );
        assert!(r(NginxLocation::Dav("/".into()))
            .1
            .contains("dav_methods PUT DELETE MKCOL;"));
    }

    #[test]
    fn nginx_refuses_words_that_would_change_the_config() {
        for bad in ["/a b/", "/a;", "/{x}", "", "/$uri", "/\"q\""] {
            assert!(
                render(NginxLocation::Forbidden(bad.into())).is_err(),
                "{bad:?}"
            );
        }
        assert!(render(NginxLocation::Bearer {
            prefix: "/b/".into(),
            token: "x\"; return 200; #".into()
        })
        .is_err());
        assert!(render(NginxLocation::Status {
            path: "/s".into(),
            code: 99
        })
        .is_err());
    }

    #[test]
    fn nginx_locations_on_one_match_share_a_block() {
        let text = location_blocks(vec![
            ("/".into(), "a;".into()),
            ("/x/".into(), "b;".into()),
            ("/".into(), "c;".into()),
        ]);
        assert_eq!(text, "    location / { a; c; }\n    location /x/ { b; }\n");
    }
}

/// vsftpd as the current user (`run_as_launching_user`: no chroot, so its
/// paths are absolute like sshd's), anonymous login with uploads allowed,
/// passive mode on 127.0.0.1.
///
/// vsftpd refuses local-user logins under `run_as_launching_user`, so a
/// password is checked the one way it can be: anonymous logins must give
/// a password from `email_password_file` ([`VsftpdOptions::password`]).
#[derive(Debug)]
pub struct Vsftpd {
    pub guard: Guard,
    pub port: u16,
    /// With TLS: the server's certificate (PEM).
    pub cert: Option<PathBuf>,
}

/// What a test or the bench wants from vsftpd beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct VsftpdOptions {
    /// Listen here (to restart on the same port); default a free one.
    pub port: Option<u16>,
    /// Offer AUTH TLS (explicit FTPS) with a fresh self-signed certificate.
    pub tls: bool,
    /// TLS from the first byte (implicit FTPS) instead.
    pub implicit_tls: bool,
    /// Anonymous logins must give this password.
    pub password: Option<String>,
    /// Bytes per second per transfer (0: unlimited).
    pub max_rate: u64,
    /// Sessions at once from one address (0: the bench's 500).
    pub max_per_ip: u32,
}

impl Vsftpd {
    pub fn start(dir: &Path, root: &Path) -> Result<Vsftpd> {
        Vsftpd::start_with(dir, root, &VsftpdOptions::default())
    }

    pub fn start_with(dir: &Path, root: &Path, o: &VsftpdOptions) -> Result<Vsftpd> {
        let Some(vsftpd) = which_server("vsftpd") else {
            bail!("vsftpd not installed (apt-get install vsftpd)");
        };
        fs::create_dir_all(dir)?;
        let port = match o.port {
            Some(p) => p,
            None => free_port()?,
        };
        let mut extra = String::new();
        let mut cert = None;
        if o.tls || o.implicit_tls {
            let (c, k) = self_signed_cert(dir)?;
            // vsftpd's default require_ssl_reuse=YES stays: data
            // connections must resume the control connection's TLS
            // session, which rustls does.
            extra.push_str(&format!(
                "ssl_enable=YES\nallow_anon_ssl=YES\nforce_anon_logins_ssl=YES\nforce_anon_data_ssl=YES\n\
                 rsa_cert_file={c}\nrsa_private_key_file={k}\n\
                 ssl_ciphers=HIGH\nimplicit_ssl={implicit}\n",
                c = c.display(),
                k = k.display(),
                implicit = if o.implicit_tls { "YES" } else { "NO" },
            ));
            cert = Some(c);
        }
        match &o.password {
            Some(pw) => {
                let f = dir.join("email_passwords");
                fs::write(&f, format!("{pw}\n"))?;
                extra.push_str(&format!(
                    "no_anon_password=NO\nsecure_email_list_enable=YES\nemail_password_file={}\n",
                    f.display()
                ));
            }
            None => extra.push_str("no_anon_password=YES\n"),
        }
        if o.max_rate > 0 {
            extra.push_str(&format!("anon_max_rate={}\n", o.max_rate));
        }
        let conf = dir.join("vsftpd.conf");
        fs::write(
            &conf,
            format!(
                "listen=YES\nlisten_address={host}\nlisten_port={port}\nbackground=NO\n\
                 run_as_launching_user=YES\nanonymous_enable=YES\n\
                 anon_root={root}\nlocal_enable=NO\nwrite_enable=YES\nanon_upload_enable=YES\n\
                 anon_mkdir_write_enable=YES\nanon_other_write_enable=YES\nanon_umask=022\n\
                 pasv_enable=YES\npasv_address={host}\nseccomp_sandbox=NO\nxferlog_enable=NO\n\
                 max_clients=500\nmax_per_ip={per_ip}\ndirmessage_enable=NO\nconnect_from_port_20=NO\n\
                 vsftpd_log_file={log}\n{extra}",
                host = listen_host(),
                root = root.display(),
                log = dir.join("vsftpd.log").display(),
                per_ip = if o.max_per_ip == 0 { 500 } else { o.max_per_ip },
            ),
        )?;
        let mut cmd = Command::new(&vsftpd);
        cmd.arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("vsftpd.err"))?);
        let (guard, _child) = Guard::spawn("vsftpd", cmd)?;
        if let Err(e) = wait_port(port, &guard, Duration::from_secs(10), false) {
            bail!("{e}; vsftpd says:\n{}", log_tail(&dir.join("vsftpd.err")));
        }
        Ok(Vsftpd { guard, port, cert })
    }
}

/// Wait (at most 3 s) until a forking server (sshd, vsftpd) has no session
/// children left, so that its CPU count includes the last client's.
pub fn wait_no_children(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while !crate::proc::children(pid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}
