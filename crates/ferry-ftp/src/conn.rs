//! One control connection: connect (plain, explicit or implicit TLS), log
//! in, TYPE I, and the commands the engine needs. Every path given here is
//! sent as is; the engine makes them absolute from [`Conn::home`] (the
//! login directory, from PWD) so that a CWD for a listing changes nothing.
use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use suppaftp::types::FileType;
use suppaftp::{Mode, RustlsConnector, RustlsFtpStream, Status};

use crate::error::{io_error, FtpError};
use crate::listing::{self, Entry};

/// How the control connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    Plain,
    /// `ftp://` with `--ssl-reqd`: `AUTH TLS` first, refused if the
    /// server cannot.
    Explicit,
    /// `ftps://`: TLS from the first byte.
    Implicit,
}

/// Where and as whom to connect.
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub security: Security,
    /// Required unless `security` is `Plain`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// `ftp://host:port` (no credentials), for messages.
    pub display: String,
    /// Connect, and each read of a reply or of data.
    pub timeout: Duration,
}

impl Endpoint {
    pub fn new(
        host: &str,
        port: u16,
        user: &str,
        password: &str,
        security: Security,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Endpoint {
        let scheme = if security == Security::Implicit {
            "ftps"
        } else {
            "ftp"
        };
        let h = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Endpoint {
            host: host.to_string(),
            port,
            user: user.to_string(),
            password: password.to_string(),
            security,
            tls,
            display: format!("{scheme}://{h}:{port}"),
            timeout: Duration::from_secs(60),
        }
    }

    fn connector(&self) -> Result<RustlsConnector, FtpError> {
        match &self.tls {
            Some(c) => Ok(RustlsConnector::from(c.clone())),
            None => Err(FtpError::Usage(format!(
                "{}: internal: TLS wanted without a TLS configuration",
                self.display
            ))),
        }
    }

    fn addrs(&self) -> Result<Vec<SocketAddr>, FtpError> {
        let a: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| {
                FtpError::Network(format!("{}: cannot resolve the host: {e}", self.display))
            })?
            .collect();
        if a.is_empty() {
            return Err(FtpError::Network(format!(
                "{}: the host has no address",
                self.display
            )));
        }
        Ok(a)
    }
}

/// A data transfer in progress (`RETR`, `STOR`, `APPE`): read or write it,
/// then [`Conn::finish`] or [`Conn::abort`] it.
pub type Transfer = suppaftp::TransferStream<<RustlsFtpStream as TlsOf>::Tls>;

/// The data connection's socket when it carries no TLS: its bytes may go
/// by `sendfile` from a local file, without passing through a buffer.
pub fn plain_socket(t: &Transfer) -> Option<&TcpStream> {
    match t.get_ref() {
        suppaftp::DataStream::Tcp(s) => Some(s),
        suppaftp::DataStream::Ssl(_) => None,
    }
}

/// suppaftp does not export its rustls stream type by name; reach it
/// through the client type.
pub trait TlsOf {
    type Tls: suppaftp::TlsStream;
}

impl<T: suppaftp::TlsStream> TlsOf for suppaftp::ImplFtpStream<T> {
    type Tls = T;
}

/// Largest directory listing accepted.
pub const MAX_LISTING: u64 = 64 * 1024 * 1024;

/// A logged-in control connection in binary and passive mode.
pub struct Conn {
    s: RustlsFtpStream,
    /// The login directory (PWD), absolute.
    pub home: String,
    ep: Arc<Endpoint>,
    /// EPSV until the server says it does not know it, then PASV.
    extended: bool,
    /// Whether the server lists with MLSD (FEAT says MLST); asked once.
    mlsd: Option<bool>,
    /// What FEAT said (empty if the server refused it); asked once.
    features: Option<suppaftp::types::Features>,
    /// The algorithm `OPTS HASH` chose on this connection.
    hash_algo: Option<String>,
    /// The TCP handshake's round trip, as the kernel measured it.
    round_trip: Option<Duration>,
}

impl Conn {
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// Connect, log in, TYPE I, PWD.
    pub fn open(ep: &Arc<Endpoint>) -> Result<Conn, FtpError> {
        Conn::open_at(ep, None)
    }

    /// [`Conn::open`], without the `PWD` when the login directory is
    /// known (another connection of the same login asked): a round trip
    /// less before a new connection's first transfer.
    pub fn open_at(ep: &Arc<Endpoint>, home: Option<&str>) -> Result<Conn, FtpError> {
        let what = ep.display.as_str();
        let f = |e| FtpError::from_ftp(what, e);
        let mut last = None;
        let mut tcp = None;
        for a in ep.addrs()? {
            match TcpStream::connect_timeout(&a, ep.timeout) {
                Ok(t) => {
                    tcp = Some(t);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (tcp, last) {
            (Some(t), _) => t,
            (None, Some(e)) => return Err(io_error(what, e)),
            (None, None) => return Err(FtpError::Network(format!("{what}: no address"))),
        };
        let _ = tcp.set_nodelay(true);
        let mut round_trip = ferry_tcp::smoothed_rtt(&tcp);
        ferry_tcp::apply(&tcp);
        let _ = tcp.set_read_timeout(Some(ep.timeout));
        let _ = tcp.set_write_timeout(Some(ep.timeout));
        let mut s = match ep.security {
            Security::Implicit => {
                let addr = tcp.peer_addr().map_err(|e| io_error(what, e))?;
                drop(tcp);
                let s = RustlsFtpStream::connect_secure_implicit(addr, ep.connector()?, &ep.host)
                    .map_err(f)?;
                // suppaftp opened this socket itself: the same timeouts.
                {
                    let sock = s.get_ref();
                    let _ = sock.set_nodelay(true);
                    round_trip = ferry_tcp::smoothed_rtt(&*sock);
                    ferry_tcp::apply(&*sock);
                    let _ = sock.set_read_timeout(Some(ep.timeout));
                    let _ = sock.set_write_timeout(Some(ep.timeout));
                }
                s
            }
            _ => RustlsFtpStream::connect_with_stream(tcp).map_err(f)?,
        };
        match ep.security {
            Security::Plain => {}
            Security::Explicit => {
                s = s.into_secure(ep.connector()?, &ep.host).map_err(|e| match e {
                    suppaftp::FtpError::UnexpectedResponse(r) => FtpError::Network(format!(
                        "{what}: the server refused AUTH TLS ({} {}); it does not offer FTPS, and --ssl-reqd will not fall back to plain FTP",
                        r.status.code(),
                        crate::error::reply_text(&r.body, r.status.code())
                    )),
                    e => f(e),
                })?;
            }
            Security::Implicit => {
                // connect_secure_implicit encrypts the control connection
                // only: ask for encrypted data connections too.
                s.custom_command("PBSZ 0", &[Status::CommandOk])
                    .map_err(f)?;
                s.custom_command("PROT P", &[Status::CommandOk])
                    .map_err(f)?;
            }
        }
        let timeout = ep.timeout;
        // The data connection's handshake runs while the `REST`/`STOR`/
        // `RETR` goes out on the control connection and the server
        // answers: a round trip less per file than connecting first (curl
        // overlaps them too). Its first read or write waits for the
        // handshake, bounded by the timeouts set here; a refused
        // connection fails there, or the server gives up waiting for it
        // (425).
        let path_rtt = round_trip;
        s = s.passive_stream_builder(move |addr| {
            let t = ferry_tcp::connect_in_flight(addr, path_rtt)
                .map_err(suppaftp::FtpError::ConnectionError)?;
            let _ = t.set_read_timeout(Some(timeout));
            let _ = t.set_write_timeout(Some(timeout));
            Ok(t)
        });
        // Use the control connection's address for PASV replies, as curl
        // does (servers behind NAT announce private addresses).
        s.set_passive_nat_workaround(true);
        s.set_mode(Mode::ExtendedPassive);
        s.login(ep.user.as_str(), ep.password.as_str())
            .map_err(|e| match FtpError::from_ftp(what, e) {
                e if e.is_connection_limit() => e,
                FtpError::Auth(m) | FtpError::Reply { text: m, .. } => FtpError::Auth(format!(
                    "{m} (logging in as {}); check the user and password (-u USER:PASS, the URL, ~/.netrc or FERRY_PASSWORD){}",
                    ep.user,
                    if ep.security == Security::Plain {
                        ", or add --ssl-reqd if the server wants TLS"
                    } else {
                        ""
                    }
                )),
                other => other,
            })?;
        s.transfer_type(FileType::Binary).map_err(f)?;
        let home = match home {
            Some(h) => h.to_string(),
            None => s.pwd().map_err(f)?,
        };
        Ok(Conn {
            s,
            home,
            ep: ep.clone(),
            extended: true,
            mlsd: None,
            features: None,
            hash_algo: None,
            round_trip,
        })
    }

    /// The round trip of the path to the server, as the kernel measured
    /// the control connection's TCP handshake; `None` if it would not say.
    pub fn round_trip(&self) -> Option<Duration> {
        self.round_trip
    }

    fn err(&self, path: &str, e: suppaftp::FtpError) -> FtpError {
        FtpError::from_ftp(&self.url(path), e)
    }

    /// The URL of `path` on this server, for messages, written as curl
    /// reads ftp:// URLs: relative to the login directory when under it,
    /// else absolute with `%2F`.
    pub fn url(&self, path: &str) -> String {
        let home = self.home.trim_end_matches('/');
        if path == self.home || path == home {
            return format!("{}/", self.ep.display);
        }
        match path.strip_prefix(home).and_then(|r| r.strip_prefix('/')) {
            Some(rel) => format!("{}/{rel}", self.ep.display),
            None => format!("{}/%2F{}", self.ep.display, path.trim_start_matches('/')),
        }
    }

    /// Run a data command; when EPSV is refused as unknown (500/502),
    /// switch to PASV and run it again once.
    fn data<T>(
        &mut self,
        offset: u64,
        mut cmd: impl FnMut(&mut RustlsFtpStream) -> suppaftp::FtpResult<T>,
    ) -> suppaftp::FtpResult<T> {
        let mut go = |s: &mut RustlsFtpStream| {
            s.resume_transfer(usize::try_from(offset).unwrap_or(usize::MAX))?;
            cmd(s)
        };
        match go(&mut self.s) {
            Err(suppaftp::FtpError::UnexpectedResponse(r))
                if self.extended && matches!(r.status.code(), 500 | 502) =>
            {
                tracing::info!("{}: EPSV refused; using PASV", self.ep.display);
                self.extended = false;
                self.s.set_mode(Mode::Passive);
                go(&mut self.s)
            }
            other => other,
        }
    }

    /// `SIZE path` (in TYPE I: the exact size). A 550 means no such file,
    /// or a directory ([`FtpError::is_not_found`]).
    pub fn size(&mut self, path: &str) -> Result<u64, FtpError> {
        self.s
            .size(path)
            .map(|n| n as u64)
            .map_err(|e| self.err(path, e))
    }

    /// `MDTM path` as seconds since the epoch (UTC), if the server says.
    pub fn mdtm(&mut self, path: &str) -> Option<i64> {
        self.s.mdtm(path).ok().map(|t| t.and_utc().timestamp())
    }

    /// Is `path` a directory? (`CWD path`, then back to the login
    /// directory.)
    pub fn is_dir(&mut self, path: &str) -> Result<bool, FtpError> {
        match self.s.cwd(path) {
            Ok(()) => {
                let home = self.home.clone();
                self.s.cwd(&home).map_err(|e| self.err(&home, e))?;
                Ok(true)
            }
            Err(e) => {
                let e = self.err(path, e);
                match e {
                    FtpError::Reply { .. } => Ok(false),
                    e => Err(e),
                }
            }
        }
    }

    /// The entries of directory `dir`: MLSD where the server has it (exact
    /// sizes and UTC times), else `LIST -a` inside it (vsftpd has no
    /// MLSD). Unsafe names are left out and returned second.
    pub fn list(&mut self, dir: &str) -> Result<(Vec<Entry>, Vec<String>), FtpError> {
        if self.mlsd.is_none() {
            let has = self
                .features()
                .keys()
                .any(|k| k.eq_ignore_ascii_case("MLST"));
            self.mlsd = Some(has);
        }
        if self.mlsd == Some(true) {
            match self.listing_lines(&format!("MLSD {dir}"), dir) {
                Ok(lines) => return Ok(listing::parse(&lines, listing::Format::Mlsd)),
                Err(FtpError::Reply {
                    code: 500..=502, ..
                }) => self.mlsd = Some(false),
                Err(e) => return Err(e),
            }
        }
        // LIST takes no quoting: names with spaces are safe only from
        // inside the directory.
        self.s.cwd(dir).map_err(|e| self.err(dir, e))?;
        let r = self.listing_lines("LIST -a", dir);
        let home = self.home.clone();
        let back = self.s.cwd(&home);
        let lines = r?;
        back.map_err(|e| self.err(&home, e))?;
        Ok(listing::parse(&lines, listing::Format::List))
    }

    /// What FEAT lists, asked once per connection (nothing when the
    /// server refuses FEAT).
    fn features(&mut self) -> &suppaftp::types::Features {
        let s = &mut self.s;
        self.features
            .get_or_insert_with(|| s.feat().unwrap_or_default())
    }

    /// The hash algorithms of FEAT's `HASH` line (draft-bryan-ftpext-hash),
    /// as the server names them; empty when it has no HASH.
    pub fn hash_algorithms(&mut self) -> Vec<String> {
        let line = self
            .features()
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("HASH"))
            .and_then(|(_, v)| v.clone())
            .unwrap_or_default();
        crate::hash::feat_algorithms(&line)
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    /// The hash of the whole file `path`, computed by the server: `OPTS
    /// HASH algo` (once per connection and algorithm), then `HASH path`.
    /// The reply must name `algo` and start at byte 0. The server reads
    /// the whole file before it answers, so the reply may take longer than
    /// the usual timeout: up to 10 minutes per command.
    pub fn hash(&mut self, path: &str, algo: &str) -> Result<Vec<u8>, FtpError> {
        let what = self.url(path);
        let bad = |why: String| FtpError::Remote(format!("{what}: HASH: {why}"));
        if self.hash_algo.as_deref() != Some(algo) {
            self.s
                .custom_command(format!("OPTS HASH {algo}"), &[Status::CommandOk])
                .map_err(|e| self.err(path, e))?;
            self.hash_algo = Some(algo.to_string());
        }
        let slow = self.ep.timeout.max(Duration::from_secs(600));
        let _ = self.s.get_ref().set_read_timeout(Some(slow));
        let r = self
            .s
            .custom_command(format!("HASH {path}"), &[Status::File]);
        let _ = self.s.get_ref().set_read_timeout(Some(self.ep.timeout));
        let r = r.map_err(|e| self.err(path, e))?;
        let reply =
            crate::hash::parse_hash_reply(&String::from_utf8_lossy(&r.body)).map_err(&bad)?;
        if !reply.algorithm.eq_ignore_ascii_case(algo) {
            return Err(bad(format!(
                "asked for {algo}, the server answered with {}",
                reply.algorithm
            )));
        }
        if reply.start != 0 {
            return Err(bad(format!(
                "the server hashed from byte {}, not the whole file",
                reply.start
            )));
        }
        Ok(reply.hash)
    }

    /// The lines of a listing command, at most [`MAX_LISTING`] bytes (a
    /// server could send one without end; suppaftp's own listing calls
    /// keep everything).
    fn listing_lines(&mut self, cmd: &str, dir: &str) -> Result<Vec<String>, FtpError> {
        let c = cmd.to_string();
        let (_, mut t) = self
            .data(0, |s| {
                s.custom_data_command(&c, &[Status::AboutToSend, Status::AlreadyOpen])
            })
            .map_err(|e| self.err(dir, e))?;
        let mut body = Vec::new();
        if let Err(e) = (&mut t).take(MAX_LISTING + 1).read_to_end(&mut body) {
            return Err(io_error(&self.url(dir), e));
        }
        if body.len() as u64 > MAX_LISTING {
            self.close_early(t, dir)?;
            return Err(FtpError::Remote(format!(
                "{}: the listing is larger than {} MiB; refused",
                self.url(dir),
                MAX_LISTING >> 20
            )));
        }
        self.finish(t, dir)?;
        Ok(body
            .split(|&b| b == b'\n')
            .map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)).into_owned())
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// `REST offset` (when not 0) and `RETR path`.
    pub fn retr(&mut self, path: &str, offset: u64) -> Result<Transfer, FtpError> {
        let p = path.to_string();
        self.data(offset, |s| s.retr_as_stream(&p))
            .map_err(|e| self.err(path, e))
    }

    /// `STOR path`, or `APPE path` to continue a partial upload.
    pub fn stor(&mut self, path: &str, append: bool) -> Result<Transfer, FtpError> {
        let p = path.to_string();
        self.data(0, |s| {
            if append {
                s.append_with_stream(&p)
            } else {
                s.put_with_stream(&p)
            }
        })
        .map_err(|e| self.err(path, e))
    }

    /// Close the data connection and read the server's verdict (226).
    pub fn finish(&mut self, t: Transfer, path: &str) -> Result<(), FtpError> {
        t.finish().map_err(|e| self.err(path, e))
    }

    /// Stop a transfer before its end (a byte range is done) by closing
    /// the data connection: the server's next write fails and it answers
    /// `426` (or `226` when it had already sent everything), one reply
    /// either way, so the control connection stays in step. `ABOR` is not
    /// used: when the server finished sending just before it, vsftpd
    /// answers both `226` and `225`, and which comes first is a race.
    pub fn close_early(&mut self, t: Transfer, path: &str) -> Result<(), FtpError> {
        match t.finish() {
            Ok(()) => Ok(()),
            Err(suppaftp::FtpError::UnexpectedResponse(r))
                if matches!(r.status.code(), 426 | 450 | 451) =>
            {
                Ok(())
            }
            Err(e) => Err(self.err(path, e)),
        }
    }

    /// Read `n` bytes at `offset` (fewer at the end of the file), e.g. to
    /// check a partial upload before continuing it.
    pub fn read_at(&mut self, path: &str, offset: u64, n: usize) -> Result<Vec<u8>, FtpError> {
        let mut t = self.retr(path, offset)?;
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match t.read(buf.get_mut(got..).unwrap_or_default()) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) => return Err(io_error(&self.url(path), e)),
            }
        }
        buf.truncate(got);
        self.close_early(t, path)?;
        Ok(buf)
    }

    /// `RNFR from` / `RNTO to` (replaces `to` on Unix servers).
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), FtpError> {
        self.s.rename(from, to).map_err(|e| self.err(to, e))
    }

    /// `MKD path`; an existing directory is fine.
    pub fn mkdir(&mut self, path: &str) -> Result<(), FtpError> {
        match self.s.mkdir(path) {
            Ok(()) => Ok(()),
            Err(e) => {
                let e = self.err(path, e);
                if matches!(e, FtpError::Reply { .. }) && self.is_dir(path)? {
                    return Ok(());
                }
                Err(e)
            }
        }
    }

    /// `DELE path`.
    pub fn remove(&mut self, path: &str) -> Result<(), FtpError> {
        self.s.rm(path).map_err(|e| self.err(path, e))
    }

    /// `RMD path` (an empty directory).
    pub fn rmdir(&mut self, path: &str) -> Result<(), FtpError> {
        self.s.rmdir(path).map_err(|e| self.err(path, e))
    }

    /// `QUIT`, best effort.
    pub fn quit(mut self) {
        let _ = self.s.quit();
    }
}
