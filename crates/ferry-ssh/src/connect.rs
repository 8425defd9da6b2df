//! Opening SSH connections the way OpenSSH's `ssh` would: `ssh_config`,
//! `known_hosts` with StrictHostKeyChecking, then public keys (agent first,
//! then identity files, passphrase-protected ones included) and passwords.
//!
//! A [`Connector`] is made once per host and opens any number of
//! connections: the engine uses several at once (`--streams`), and the user
//! must be asked for a passphrase or password at most once.
//!
//! A connection goes straight over TCP, through a `ProxyCommand`'s stdin
//! and stdout, or (`ProxyJump`) over a `direct-tcpip` channel of a
//! connection to the jump host, which is itself made by a [`Connector`]
//! with the jump host's own configuration. Every hop's host key is checked
//! under that hop's own name, and host certificates are accepted when an
//! `@cert-authority` line trusts their CA for the host.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ferry_ssh_config::config::{standard_files, HostConfig, SshConfig, StrictHostKeyChecking};
use ferry_ssh_config::known_hosts::{self, CertAuthorityStatus, HostKeyStatus};
use ferry_ssh_config::proxy::{parse_jumps, JumpHost};
use russh::client;
use russh::compression::{CompressionStats, ZstdSettings};
use russh::keys::agent::client::AgentClient;
use russh::keys::{
    Algorithm, Certificate, EcdsaCurve, HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey,
};
use russh::{cipher, Preferred};

use crate::compression::{method_name, ConnectionCompression, SshCompression};
use crate::zlib_switch::{LinkBest, LinkProbe};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::SshError;
use crate::hostcert;
use crate::proxy_command::ProxyCommand;
use crate::sftp::SftpClient;

/// Our receive window per channel by default: 670 MB/s at 100 ms for
/// one connection, where the server can send that much
/// (docs/internals/wan.md, "Windows and buffers").
pub const WINDOW: u32 = 64 * 1024 * 1024;

/// Our receive window per channel with an OpenSSH server: what a Linux
/// sshd's socket can hold by default (`tcp_wmem`'s maximum, 4 MiB). sshd
/// reads what the window allows from sftp-server at once, and what its
/// socket cannot take waits in its channel buffer, which it grows by
/// copying and moves down as it sends: with 64 MiB, sshd spent 2.6x the
/// CPU (and 3.5x the page faults) of a 4 MiB window on one connection at
/// 100 ms, at the same 16 MB/s; on loopback the two were alike
/// (BENCHMARKS.md, run sshd-window-1).
pub const OPENSSH_WINDOW: u32 = 4 * 1024 * 1024;

/// Our receive window per channel with the server that sent `server_id`
/// (its `SSH-2.0-...` line): `--window` when given, else [`WINDOW`], or
/// [`OPENSSH_WINDOW`] with OpenSSH.
fn channel_window(server_id: &[u8], chosen: Option<u32>) -> u32 {
    match chosen {
        Some(w) => w,
        None if server_id.starts_with(b"SSH-2.0-OpenSSH_") => OPENSSH_WINDOW,
        None => WINDOW,
    }
}

/// What the command line says about SSH, on top of `ssh_config`.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `-F`: use only this config file.
    pub config_file: Option<PathBuf>,
    /// `-i`: identities tried before those of the config.
    pub identity_files: Vec<PathBuf>,
    /// `-o Key=Value`, taking precedence over the files.
    pub options: Vec<String>,
    /// User and port from the URL (they beat the config, as with ssh).
    pub user: Option<String>,
    pub port: Option<u16>,
    /// Our receive window per channel (`--window`). `None`: [`WINDOW`],
    /// or [`OPENSSH_WINDOW`] with an OpenSSH server. OpenSSH's own client
    /// uses 2 MiB, which caps a download at window/RTT (about 100 MB/s at
    /// 20 ms); docs/internals/sftp.md says how the defaults were chosen.
    pub window_size: Option<u32>,
    /// Largest SSH channel packet we accept (default 255 KiB: a READ reply
    /// then fits one packet; docs/internals/sftp.md).
    pub max_packet: u32,
    /// May a person be asked (passwords, passphrases, new host keys),
    /// through `prompt`? Off by default: a library asks nothing unless
    /// the application says a person is there.
    pub interactive: bool,
    /// Where questions and notices go (see [`crate::Prompt`]).
    pub prompt: crate::PromptHandle,
    /// Compression (`-C`/`--compress`): zstd between ferry peers, zlib
    /// with OpenSSH when on (crate::compression). Default `auto`: zstd,
    /// adaptive, with ferry serve; none with OpenSSH (its zlib under
    /// `auto` was measured to cost more than it gave: crate::compression).
    pub compression: SshCompression,
    /// `-J`: jump hosts, `[user@]host[:port][,...]`; beats `ProxyJump` and
    /// `ProxyCommand` from the files, as with `ssh -J`.
    pub proxy_jump: Option<String>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            config_file: None,
            identity_files: Vec::new(),
            options: Vec::new(),
            user: None,
            port: None,
            window_size: None,
            max_packet: crate::MAX_CHANNEL_PACKET,
            interactive: false,
            prompt: crate::PromptHandle::default(),
            compression: SshCompression::Auto,
            proxy_jump: None,
        }
    }
}

/// Jump hosts a chain may pass through before ferry calls it a loop (a jump
/// host's own `ProxyJump` applies to it, so a config can point in circles).
const MAX_HOPS: usize = 16;

/// How a connection reaches the server.
enum Route {
    Direct,
    /// Over a `direct-tcpip` channel of a connection made by this connector
    /// (the last jump host, with the earlier ones as its own route).
    Jump(Box<Connector>),
    /// Through this command's stdin and stdout (tokens expanded).
    Command(String),
}

/// Identity files that loaded, in the order they are tried.
type LoadedKeys = Arc<Vec<Identity>>;

/// A private key and, if one was found for it, its user certificate.
struct Identity {
    path: PathBuf,
    key: Arc<PrivateKey>,
    /// From a `CertificateFile` that certifies this key, else
    /// `PATH-cert.pub` beside it (as ssh looks for them).
    cert: Option<(PathBuf, Certificate)>,
}

/// Opens authenticated connections to one host.
pub struct Connector {
    host: HostConfig,
    opts: ConnectOptions,
    route: Route,
    /// Set when this connector is a jump host: its name in messages.
    hop: Option<String>,
    /// Keys loaded (and decrypted) once, then reused by every connection.
    keys: Mutex<Option<LoadedKeys>>,
    /// The password that worked, so later connections don't ask again.
    password: Mutex<Option<String>>,
    /// The authentication method that worked first.
    winner: Mutex<Option<Winner>>,
    /// What the connections' zlib switches learned of the link
    /// (crate::zlib_switch).
    link_best: Arc<LinkBest>,
}

#[derive(Debug, Clone)]
enum Winner {
    Agent,
    Key(usize),
    /// The certificate of identity `i`.
    Cert(usize),
    Password,
}

/// What a command run by [`SshConnection::exec`] gave back.
#[derive(Debug, Default, Clone)]
pub struct ExecOutput {
    /// The exit status, if the server sent one.
    pub status: Option<u32>,
    pub stdout: Vec<u8>,
    /// The first 4 KiB.
    pub stderr: Vec<u8>,
}

/// One authenticated SSH connection.
pub struct SshConnection {
    handle: client::Handle<ClientHandler>,
    label: String,
    /// The jump host connection this one runs through; open as long as
    /// this one is.
    via: Option<Box<SshConnection>>,
    /// The ProxyCommand carrying this connection: killed with it.
    proxy: Option<ProxyCommand>,
    /// The largest channel packet we told the server we accept.
    max_packet: u32,
    /// The cipher the last key exchange chose (set by `ClientHandler`).
    cipher: Arc<Mutex<Option<String>>>,
    /// The TCP handshake's time: one round trip of the path (`None`
    /// through a ProxyCommand).
    round_trip: Option<std::time::Duration>,
    /// What `auto`'s zlib switch measures, if it watches this connection.
    probe: Option<Arc<LinkProbe>>,
}

impl SshConnection {
    /// How long the TCP handshake took: one round trip of the path
    /// (through a jump host, the first hop's); `None` through a
    /// ProxyCommand.
    pub fn round_trip(&self) -> Option<std::time::Duration> {
        self.round_trip
    }

    /// The cipher the key exchange chose, e.g. `aegis-128l@ferry` with
    /// ferry serve or `aes128-gcm@openssh.com` with OpenSSH.
    pub fn cipher(&self) -> Option<String> {
        lock_any(&self.cipher).clone()
    }

    /// Open a session channel, start the sftp subsystem, and return the
    /// SFTP client with at most `max_in_flight` requests outstanding.
    pub async fn sftp(&self, max_in_flight: usize) -> Result<SftpClient, SshError> {
        let channel = self
            .handle
            .channel_open_session()
            .await
            .map_err(|e| self.protocol(e))?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|e| self.protocol(e))?;
        let client = SftpClient::start(
            channel,
            max_in_flight,
            self.max_packet,
            self.cipher(),
            self.probe.clone(),
        )
        .await
        .map_err(|e| SshError::Protocol {
            host: self.label.clone(),
            message: e.to_string(),
        })?;
        if let (Some(p), Some(rtt)) = (&self.probe, self.round_trip) {
            p.set_upload_window(client.info().window_out, rtt);
        }
        Ok(client)
    }

    /// Run `command` on an exec channel of this connection (sshd runs it
    /// with the user's shell, in the login directory) with stdin closed,
    /// and collect what it prints: at most `max_out` bytes of stdout (more
    /// is an error), the first 4 KiB of stderr, and the exit status. A
    /// server that refuses exec requests answers with an error; one that
    /// forces another command (`ForceCommand internal-sftp`) runs that
    /// instead, and its output is what comes back.
    ///
    /// The whole run may take at most `limit`. Past it the command gets a
    /// KILL signal (sshd >= 7.9 delivers it when privilege separation is
    /// on, which it is not after a root login; older ones ignore it), the
    /// channel is closed and the answer is [`SshError::ExecTimeout`].
    /// Dropping the future instead would leave the channel open on both
    /// sides for as long as the command runs.
    pub async fn exec(
        &self,
        command: &[u8],
        max_out: usize,
        limit: std::time::Duration,
    ) -> Result<ExecOutput, SshError> {
        let deadline = tokio::time::Instant::now() + limit;
        let late = || SshError::ExecTimeout {
            host: self.label.clone(),
            seconds: limit.as_secs_f64(),
        };
        let mut ch = tokio::time::timeout_at(deadline, self.handle.channel_open_session())
            .await
            .map_err(|_| late())?
            .map_err(|e| self.protocol(e))?;
        let run = async {
            ch.exec(true, command.to_vec())
                .await
                .map_err(|e| self.protocol(e))?;
            ch.eof().await.map_err(|e| self.protocol(e))?;
            let mut out = ExecOutput::default();
            while let Some(msg) = ch.wait().await {
                match msg {
                    russh::ChannelMsg::Data { data } => {
                        if out.stdout.len() + data.len() > max_out {
                            return Err(SshError::Protocol {
                                host: self.label.clone(),
                                message: format!("the command printed more than {max_out} bytes"),
                            });
                        }
                        out.stdout.extend_from_slice(&data);
                    }
                    russh::ChannelMsg::ExtendedData { data, .. } => {
                        let room = 4096usize.saturating_sub(out.stderr.len());
                        out.stderr.extend_from_slice(
                            data.get(..room.min(data.len())).unwrap_or_default(),
                        );
                    }
                    russh::ChannelMsg::ExitStatus { exit_status } => out.status = Some(exit_status),
                    russh::ChannelMsg::Failure => {
                        return Err(SshError::Protocol {
                            host: self.label.clone(),
                            message: "the server refused to run a command".into(),
                        });
                    }
                    russh::ChannelMsg::Close => break,
                    _ => {}
                }
            }
            Ok(out)
        };
        let r = tokio::time::timeout_at(deadline, run).await;
        match r {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => {
                let _ = ch.close().await;
                Err(e)
            }
            Err(_) => {
                let _ = ch.signal(russh::Sig::KILL).await;
                let _ = ch.close().await;
                Err(late())
            }
        }
    }

    fn protocol(&self, e: russh::Error) -> SshError {
        SshError::Protocol {
            host: self.label.clone(),
            message: e.to_string(),
        }
    }

    /// Say goodbye to the server, then close the jump host connection or
    /// stop the ProxyCommand under it.
    pub async fn close(mut self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
        if let Some(via) = self.via.take() {
            Box::pin(via.close()).await;
        }
        if let Some(mut p) = self.proxy.take() {
            p.stop();
        }
    }
}

impl Connector {
    /// Resolve the configuration for `host` (an alias or a name), and for
    /// each jump host on the way to it.
    pub fn new(host: &str, opts: ConnectOptions) -> Result<Connector, SshError> {
        Connector::build(host, opts, None, 0)
    }

    fn build(
        host: &str,
        opts: ConnectOptions,
        hop: Option<String>,
        depth: usize,
    ) -> Result<Connector, SshError> {
        let at_hop = |e: SshError| match &hop {
            Some(h) => SshError::Jump {
                hop: h.clone(),
                source: Box::new(e),
            },
            None => e,
        };
        let files = standard_files(opts.config_file.as_deref())
            .map_err(|e| at_hop(SshError::Config(e.to_string())))?;
        let mut overrides = Vec::new();
        // -J first: it beats the files and any -o ProxyCommand, as in ssh.
        if let Some(j) = &opts.proxy_jump {
            overrides.push(format!("ProxyJump={j}"));
        }
        // URL user and port beat the config files, like ssh's -l and -p.
        if let Some(u) = &opts.user {
            overrides.push(format!("User={u}"));
        }
        if let Some(p) = opts.port {
            overrides.push(format!("Port={p}"));
        }
        overrides.extend(opts.options.iter().cloned());
        let host_cfg = SshConfig::resolve(host, &overrides, &files)
            .map_err(|e| at_hop(SshError::Config(e.to_string())))?;
        let route = if let Some(jumps) = &host_cfg.proxy_jump {
            let hops = parse_jumps(jumps).map_err(|m| at_hop(SshError::Config(m)))?;
            if depth + hops.len() > MAX_HOPS {
                return Err(at_hop(SshError::Config(format!(
                    "more than {MAX_HOPS} jump hosts on the way to {host}: is there a ProxyJump loop in the configuration?"
                ))));
            }
            Route::Jump(Box::new(Connector::jump(&hops, &opts, depth)?))
        } else if let Some(cmd) = host_cfg
            .proxy_command_line()
            .map_err(|m| at_hop(SshError::Config(m)))?
        {
            Route::Command(cmd)
        } else {
            Route::Direct
        };
        Ok(Connector {
            host: host_cfg,
            opts,
            route,
            hop,
            keys: Mutex::new(None),
            password: Mutex::new(None),
            winner: Mutex::new(None),
            link_best: Arc::default(),
        })
    }

    /// The connector for the last of `hops` (the one that reaches the
    /// target), with the earlier hops as its own `ProxyJump`. Like the
    /// `ssh -W` that `ssh -J` runs, a jump host gets the `-F` file and its
    /// own config block, but not `-i` or `-o` (they are for the target).
    fn jump(hops: &[JumpHost], opts: &ConnectOptions, depth: usize) -> Result<Connector, SshError> {
        let Some((last, before)) = hops.split_last() else {
            return Err(SshError::Config("ProxyJump: no hosts".into()));
        };
        let jopts = ConnectOptions {
            config_file: opts.config_file.clone(),
            identity_files: Vec::new(),
            options: Vec::new(),
            user: last.user.clone(),
            port: last.port,
            // Everything the target sends crosses this connection.
            window_size: opts.window_size,
            max_packet: opts.max_packet,
            interactive: opts.interactive,
            prompt: opts.prompt.clone(),
            // The target's own connection compresses, end to end.
            compression: SshCompression::Off,
            proxy_jump: (!before.is_empty())
                .then(|| before.iter().map(hop_spec).collect::<Vec<_>>().join(",")),
        };
        Connector::build(&last.host, jopts, Some(last.label()), depth + 1).map(|mut c| {
            c.hop = Some(c.hop_label());
            c
        })
    }

    /// `alias (hostname:port)` or `hostname:port`, for jump-host messages.
    fn hop_label(&self) -> String {
        let hp = format!("{}:{}", self.host.hostname, self.host.port);
        if self.host.host_alias == self.host.hostname {
            hp
        } else {
            format!("{} ({hp})", self.host.host_alias)
        }
    }

    /// Wrap an error of this connector's own hop (not of the hops before
    /// it, which wrap their own) with the jump host's name.
    fn at_hop(&self, e: SshError) -> SshError {
        match &self.hop {
            Some(h) => SshError::Jump {
                hop: h.clone(),
                source: Box::new(e),
            },
            None => e,
        }
    }

    pub fn host_config(&self) -> &HostConfig {
        &self.host
    }

    /// `user@host:port`, for messages.
    pub fn label(&self) -> String {
        format!(
            "{}@{}:{}",
            self.host.user, self.host.hostname, self.host.port
        )
    }

    fn client_config(&self, stats: &Arc<CompressionStats>) -> Result<client::Config, SshError> {
        let cipher: std::borrow::Cow<'static, [cipher::Name]> = match &self.host.ciphers {
            Some(list) => {
                let mut v = Vec::new();
                for name in list.split(',') {
                    let name = name.trim();
                    match cipher_by_name(name) {
                        Some(c) => v.push(c),
                        None => {
                            return Err(SshError::Config(format!(
                                "cipher {name:?} is not supported; use one of {}",
                                CIPHERS
                                    .iter()
                                    .map(|c| c.as_ref())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )))
                        }
                    }
                }
                v.into()
            }
            None => CIPHERS.into(),
        };
        // `Compression yes` in ssh_config turns compression on where the
        // command line left it at its default (auto); `-C=off` given
        // there wins, as ssh's command line does over its files.
        let wanted = match self.opts.compression {
            SshCompression::Auto if self.host.compression => SshCompression::On,
            c => c,
        };
        let offer = wanted.offer();
        let preferred = Preferred {
            cipher,
            compression: offer.client_to_server.into(),
            compression_server_to_client: Some(offer.server_to_client.into()),
            zstd: ZstdSettings {
                level: offer.zstd_level,
                stats: Some(stats.clone()),
                zlib_auto: offer.zlib_auto,
            },
            // Ask for host certificates first, as ssh does; a certificate
            // whose CA is not trusted falls back to a plain key check of the
            // key inside it (ClientHandler::check_certificate).
            host_key_certificates: HOST_CERT_ALGORITHMS.into(),
            ..Preferred::default()
        };
        Ok(client::Config {
            window_size: self.opts.window_size.unwrap_or(WINDOW),
            maximum_packet_size: self.opts.max_packet,
            channel_buffer_size: 1024,
            preferred,
            nodelay: true,
            keepalive_interval: self.host.server_alive_interval,
            limits: rekey_limits(self.host.rekey_limit, self.host.rekey_time),
            ..Default::default()
        })
    }

    /// Open and authenticate one connection (through the jump hosts or
    /// the ProxyCommand, if any).
    pub async fn connect(&self) -> Result<SshConnection, SshError> {
        // A jump host's connection is not the transfer's: not reported.
        let compress = crate::compression::register(self.hop.is_none());
        let config = Arc::new(
            self.client_config(&compress.stats)
                .map_err(|e| self.at_hop(e))?,
        );
        let base_preferred = config.preferred.clone();
        let host = self.host.hostname.clone();
        let port = self.host.port;
        let cipher = Arc::default();
        // Known where we made the TCP connection ourselves; through a
        // jump host, at least that hop's.
        let mut round_trip = None;
        let (handle, via, mut proxy) = match &self.route {
            Route::Direct => {
                // No BufReader: ferry's russh reads ahead into its own
                // buffer and takes packets out of it without a copy
                // (vendor/russh/FERRY-PATCH.md).
                let (stream, took) = self.tcp(&host, port).await.map_err(|e| self.at_hop(e))?;
                round_trip = Some(took);
                (
                    self.handshake(config, stream, &cipher, &compress).await,
                    None,
                    None,
                )
            }
            Route::Jump(jump) => {
                let via = Box::pin(jump.connect()).await?;
                round_trip = via.round_trip;
                let open = via.handle.channel_open_direct_tcpip(
                    host.clone(),
                    u32::from(port),
                    "127.0.0.1",
                    0,
                );
                // ConnectTimeout bounds this hop's "connect": the jump
                // host's connection to it.
                let opened = match self.host.connect_timeout {
                    Some(t) => match tokio::time::timeout(t, open).await {
                        Ok(r) => r,
                        Err(_) => {
                            via.close().await;
                            return Err(self.at_hop(SshError::Connect {
                                host: host.clone(),
                                port,
                                source: std::io::Error::new(
                                    std::io::ErrorKind::TimedOut,
                                    format!(
                                        "the jump host {} did not connect to it within ConnectTimeout ({} s)",
                                        jump.hop_label(),
                                        t.as_secs_f64()
                                    ),
                                ),
                            }));
                        }
                    },
                    None => open.await,
                };
                let channel = opened
                    .map_err(|e| SshError::Jump {
                        hop: jump.hop_label(),
                        source: Box::new(SshError::Protocol {
                            host: format!("{host}:{port}"),
                            message: format!(
                                "the jump host did not open a connection to it ({e}); check that it can reach {host}:{port} and that its sshd allows TCP forwarding (AllowTcpForwarding)"
                            ),
                        }),
                    })?;
                let stream = channel.into_stream();
                (
                    self.handshake(config, stream, &cipher, &compress).await,
                    Some(Box::new(via)),
                    None,
                )
            }
            Route::Command(cmd) => {
                let (proc, stream) = ProxyCommand::spawn(cmd).map_err(|e| {
                    self.at_hop(SshError::Protocol {
                        host: format!("{host}:{port}"),
                        message: format!("cannot run ProxyCommand {cmd:?}: {e}"),
                    })
                })?;
                (
                    self.handshake(config, stream, &cipher, &compress).await,
                    None,
                    Some(proc),
                )
            }
        };
        let mut handle = match handle {
            Ok(h) => h,
            Err(e) => {
                let e = match (e, proxy.as_mut()) {
                    // A command that died explains the failed handshake better
                    // than "connection closed".
                    (SshError::Protocol { host, message }, Some(p)) => {
                        let message = match p.exited(std::time::Duration::from_millis(500)) {
                            Some(st) => format!(
                                "ProxyCommand {:?} exited ({st}) before the SSH handshake was done ({message})",
                                p.command()
                            ),
                            None => format!("{message} (over ProxyCommand {:?})", p.command()),
                        };
                        SshError::Protocol { host, message }
                    }
                    (e, _) => e,
                };
                if let Some(via) = via {
                    via.close().await;
                }
                return Err(self.at_hop(e));
            }
        };
        if let Err(e) = self.authenticate(&mut handle).await {
            if let Some(via) = via {
                via.close().await;
            }
            return Err(self.at_hop(e));
        }
        let probe = self.watch_for_zlib(&handle, &compress, base_preferred);
        Ok(SshConnection {
            handle,
            label: self.label(),
            via,
            proxy,
            max_packet: self.opts.max_packet,
            cipher,
            round_trip,
            probe,
        })
    }

    /// Under `auto`, with a server that took `none` (it has no zstd:
    /// OpenSSH), start the task that turns zlib on by a rekey where it
    /// pays (crate::zlib_switch); its probe goes to the SFTP session.
    fn watch_for_zlib(
        &self,
        handle: &client::Handle<ClientHandler>,
        compress: &Arc<ConnectionCompression>,
        base: Preferred,
    ) -> Option<Arc<LinkProbe>> {
        let auto = self.opts.compression == SshCompression::Auto && !self.host.compression;
        let took_none = lock_any(&compress.methods)
            .as_ref()
            .is_some_and(|(out, inn)| out == "none" && inn == "none");
        if !auto || !took_none || self.hop.is_some() {
            return None;
        }
        let probe = Arc::new(LinkProbe::default());
        tokio::spawn(crate::zlib_switch::run(
            handle.rekeyer(),
            probe.clone(),
            self.link_best.clone(),
            compress.clone(),
            base,
            self.label(),
        ));
        Some(probe)
    }

    /// A TCP connection to `host`, and how long its handshake took (one
    /// round trip of the path: name resolution is not in it).
    async fn tcp(
        &self,
        host: &str,
        port: u16,
    ) -> Result<(tokio::net::TcpStream, std::time::Duration), SshError> {
        let connect = async {
            let mut last = None;
            for a in tokio::net::lookup_host((host, port)).await? {
                let began = std::time::Instant::now();
                match tokio::net::TcpStream::connect(a).await {
                    Ok(s) => return Ok((s, began.elapsed())),
                    Err(e) => last = Some(e),
                }
            }
            Err(last
                .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))
        };
        let stream = match self.host.connect_timeout {
            Some(t) => tokio::time::timeout(t, connect)
                .await
                .map_err(|_| SshError::Connect {
                    host: host.to_string(),
                    port,
                    source: std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
                })?,
            None => connect.await,
        }
        .map_err(|source| SshError::Connect {
            host: host.to_string(),
            port,
            source,
        })?;
        let (stream, took) = stream;
        let _ = stream.set_nodelay(true);
        ferry_tcp::apply(&stream);
        Ok((stream, took))
    }

    /// Key exchange and host key (or certificate) check over `stream`.
    async fn handshake<R>(
        &self,
        config: Arc<client::Config>,
        stream: R,
        cipher: &Arc<Mutex<Option<String>>>,
        compress: &Arc<ConnectionCompression>,
    ) -> Result<client::Handle<ClientHandler>, SshError>
    where
        R: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let verdict = Arc::new(Mutex::new(None));
        // HostKeyAlias, when set, is the name known_hosts is searched under.
        let (kh_host, kh_port) = self.host.known_hosts_lookup();
        let prompted = Arc::new(AtomicBool::new(false));
        let handler = ClientHandler {
            host: kh_host,
            port: kh_port,
            strict: self.host.strict_host_key_checking,
            user_files: self.host.user_known_hosts_files.clone(),
            global_files: self.host.global_known_hosts_files.clone(),
            revoked: self.host.revoked_host_keys.clone(),
            interactive: self.opts.interactive && !self.host.batch_mode,
            prompt: self.opts.prompt.clone(),
            verdict: verdict.clone(),
            prompted: prompted.clone(),
            cipher: cipher.clone(),
            compress: compress.clone(),
            window: self.opts.window_size,
        };
        let handshake = client::connect_stream(config, stream, handler);
        // ConnectTimeout also bounds the handshake, as ssh bounds its
        // banner exchange: a server (or a jump's target) that accepts the
        // connection and never speaks is an error, not a hang. Time spent
        // at a host-key prompt does not count: once the user was asked,
        // the limit is off.
        let result = match self.host.connect_timeout {
            None => handshake.await,
            Some(t) => {
                tokio::pin!(handshake);
                let mut deadline = tokio::time::Instant::now() + t;
                loop {
                    tokio::select! {
                        r = &mut handshake => break r,
                        _ = tokio::time::sleep_until(deadline) => {
                            if prompted.load(Ordering::Relaxed) {
                                deadline += std::time::Duration::from_secs(86_400);
                                continue;
                            }
                            return Err(SshError::Connect {
                                host: self.host.hostname.clone(),
                                port: self.host.port,
                                source: std::io::Error::new(
                                    std::io::ErrorKind::TimedOut,
                                    format!(
                                        "no SSH handshake within ConnectTimeout ({} s): the server accepted the connection but did not answer as an SSH server",
                                        t.as_secs_f64()
                                    ),
                                ),
                            });
                        }
                    }
                }
            }
        };
        match result {
            Ok(h) => Ok(h),
            Err(e) => {
                if let Some(why) = lock_any(&verdict).take() {
                    return Err(SshError::HostKey(why));
                }
                Err(SshError::Protocol {
                    host: format!("{}:{}", self.host.hostname, self.host.port),
                    message: e.to_string(),
                })
            }
        }
    }

    async fn authenticate(
        &self,
        handle: &mut client::Handle<ClientHandler>,
    ) -> Result<(), SshError> {
        let user = self.host.user.clone();
        let proto = |e: russh::Error| SshError::Protocol {
            host: self.label(),
            message: e.to_string(),
        };
        let mut tried = Vec::new();
        // A later connection goes straight to what worked the first time.
        let winner = lock_any(&self.winner).clone();
        let rsa_hash = handle
            .best_supported_rsa_hash()
            .await
            .map_err(proto)?
            .flatten();

        if self.host.pubkey_authentication {
            if matches!(winner, None | Some(Winner::Agent)) && self.agent_allowed() {
                if self.try_agent(handle, &user, rsa_hash).await {
                    *lock_any(&self.winner) = Some(Winner::Agent);
                    return Ok(());
                }
                tried.push("agent keys".to_string());
            }
            let keys = self.load_keys()?;
            for (i, id) in keys.iter().enumerate() {
                let (path, key) = (&id.path, &id.key);
                if let Some(Winner::Key(w) | Winner::Cert(w)) = winner {
                    if w != i {
                        continue;
                    }
                }
                if matches!(winner, Some(Winner::Agent | Winner::Password)) {
                    break;
                }
                // The certificate first, as ssh offers it before the key.
                if let Some((cert_path, cert)) = &id.cert {
                    if matches!(winner, None | Some(Winner::Cert(_))) {
                        let res = handle
                            .authenticate_openssh_cert(user.clone(), key.clone(), cert.clone())
                            .await
                            .map_err(proto)?;
                        if res.success() {
                            *lock_any(&self.winner) = Some(Winner::Cert(i));
                            return Ok(());
                        }
                        tried.push(format!("certificate {}", cert_path.display()));
                    }
                }
                if matches!(winner, Some(Winner::Cert(_))) {
                    continue;
                }
                let hash = if key.algorithm().is_rsa() {
                    rsa_hash
                } else {
                    None
                };
                let res = handle
                    .authenticate_publickey(
                        user.clone(),
                        PrivateKeyWithHashAlg::new(key.clone(), hash),
                    )
                    .await
                    .map_err(proto)?;
                if res.success() {
                    *lock_any(&self.winner) = Some(Winner::Key(i));
                    return Ok(());
                }
                tried.push(format!("key {}", path.display()));
            }
        }

        if self.host.password_authentication {
            let mut attempts = 0;
            while let Some(pw) = self.password(attempts)? {
                let res = handle
                    .authenticate_password(user.clone(), pw.clone())
                    .await
                    .map_err(proto)?;
                if res.success() {
                    *lock_any(&self.password) = Some(pw);
                    *lock_any(&self.winner) = Some(Winner::Password);
                    return Ok(());
                }
                attempts += 1;
                if !tried.contains(&"password".to_string()) {
                    tried.push("password".into());
                }
                // Only a person at a terminal gets to try again.
                if !self.opts.interactive || !self.opts.prompt.retry_password() || attempts >= 3 {
                    break;
                }
            }
        }
        // A server that went away mid-authentication is not a refusal.
        if handle.is_closed() {
            return Err(SshError::Protocol {
                host: self.label(),
                message: "the server closed the connection during authentication".into(),
            });
        }
        let tried = if tried.is_empty() {
            "no method was available".to_string()
        } else {
            format!("tried {}", tried.join(", "))
        };
        // -i is for the target only (as with ssh -J): a jump host's key
        // comes from its own Host block.
        let advice = if self.hop.is_some() {
            "give it a key with IdentityFile in its Host block of ssh_config, load one into ssh-agent, or set FERRY_PASSWORD"
        } else {
            "give a key with -i KEY, load it into ssh-agent, or set FERRY_PASSWORD"
        };
        Err(SshError::Auth(format!(
            "permission denied for {} ({tried}); {advice}",
            self.label()
        )))
    }

    fn agent_allowed(&self) -> bool {
        if self.host.identities_only {
            return false;
        }
        match self.host.identity_agent.as_deref() {
            Some("none") => false,
            _ => std::env::var_os("SSH_AUTH_SOCK").is_some(),
        }
    }

    async fn try_agent(
        &self,
        handle: &mut client::Handle<ClientHandler>,
        user: &str,
        rsa_hash: Option<HashAlg>,
    ) -> bool {
        let agent = match self.host.identity_agent.as_deref() {
            Some(path) if path != "SSH_AUTH_SOCK" => AgentClient::connect_uds(expand_home(path))
                .await
                .map(|a| a.dynamic()),
            _ => AgentClient::connect_env().await.map(|a| a.dynamic()),
        };
        let Ok(mut agent) = agent else {
            return false;
        };
        let Ok(ids) = agent.request_identities().await else {
            return false;
        };
        // In the agent's order, as ssh offers them: `ssh-add KEY` loads
        // KEY-cert.pub too, and the agent signs for the certificate with
        // the key it certifies.
        for id in ids {
            let res = match id {
                russh::keys::agent::AgentIdentity::PublicKey { key, .. } => {
                    let hash = key.algorithm().is_rsa().then_some(rsa_hash).flatten();
                    handle
                        .authenticate_publickey_with(user.to_string(), key, hash, &mut agent)
                        .await
                }
                russh::keys::agent::AgentIdentity::Certificate { certificate, .. } => {
                    let hash = certificate
                        .algorithm()
                        .is_rsa()
                        .then_some(rsa_hash)
                        .flatten();
                    handle
                        .authenticate_certificate_with(
                            user.to_string(),
                            certificate,
                            hash,
                            &mut agent,
                        )
                        .await
                }
            };
            if res.is_ok_and(|r| r.success()) {
                return true;
            }
        }
        false
    }

    /// Load every identity file that exists, asking for passphrases once.
    fn load_keys(&self) -> Result<LoadedKeys, SshError> {
        let mut guard = lock_any(&self.keys);
        if let Some(k) = &*guard {
            return Ok(k.clone());
        }
        let mut paths: Vec<PathBuf> = self.opts.identity_files.clone();
        for p in &self.host.identity_files {
            if !paths.contains(p) {
                paths.push(p.clone());
            }
        }
        let mut keys = Vec::new();
        for path in paths {
            if !path.exists() {
                // Explicit -i that does not exist is the user's mistake: say so.
                if self.opts.identity_files.contains(&path) {
                    return Err(SshError::Config(format!(
                        "identity file {} does not exist",
                        path.display()
                    )));
                }
                continue;
            }
            match russh::keys::load_secret_key(&path, None) {
                Ok(k) => keys.push(self.identity(path, k)),
                Err(russh::keys::Error::KeyIsEncrypted) => match self.passphrase_for(&path)? {
                    Some(pass) => match russh::keys::load_secret_key(&path, Some(&pass)) {
                        Ok(k) => keys.push(self.identity(path, k)),
                        Err(e) => {
                            return Err(SshError::Auth(format!(
                                "cannot decrypt {}: {e} (wrong passphrase?)",
                                path.display()
                            )))
                        }
                    },
                    None => {
                        tracing::info!("skipping encrypted key {}: no passphrase (set FERRY_PASSPHRASE or run on a terminal)", path.display());
                    }
                },
                Err(e) => {
                    tracing::warn!("cannot read key {}: {e}", path.display());
                }
            }
        }
        let keys = Arc::new(keys);
        *guard = Some(keys.clone());
        Ok(keys)
    }

    /// `key` from `path`, with the user certificate that certifies it:
    /// the first `CertificateFile` for this key, else `PATH-cert.pub`.
    fn identity(&self, path: PathBuf, key: PrivateKey) -> Identity {
        let mut beside = path.clone().into_os_string();
        beside.push("-cert.pub");
        let beside = PathBuf::from(beside);
        let explicit = self.host.certificate_files.iter();
        let cert = explicit
            .chain(std::iter::once(&beside))
            .filter(|p| p.exists())
            .find_map(|p| match Certificate::read_file(p) {
                Ok(c) if c.public_key() == key.public_key().key_data() => Some((p.clone(), c)),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!("cannot read certificate {}: {e}", p.display());
                    None
                }
            });
        if let Some((p, _)) = &cert {
            tracing::info!(
                "identity {} has certificate {}",
                path.display(),
                p.display()
            );
        }
        Identity {
            path,
            key: Arc::new(key),
            cert,
        }
    }

    fn passphrase_for(&self, path: &std::path::Path) -> Result<Option<String>, SshError> {
        let ask = self.opts.interactive && !self.host.batch_mode;
        Ok(self.opts.prompt.passphrase(path, ask))
    }

    fn password(&self, attempt: usize) -> Result<Option<String>, SshError> {
        if attempt == 0 {
            if let Some(p) = lock_any(&self.password).clone() {
                return Ok(Some(p));
            }
        }
        let ask = self.opts.interactive && !self.host.batch_mode;
        Ok(self.opts.prompt.password(&self.label(), ask))
    }
}

/// Host certificate types offered, best first: the plain key types russh
/// signs with, less `ssh-rsa` (SHA-1), which OpenSSH no longer accepts.
const HOST_CERT_ALGORITHMS: &[Algorithm] = &[
    Algorithm::Ed25519,
    Algorithm::Ecdsa {
        curve: EcdsaCurve::NistP256,
    },
    Algorithm::Ecdsa {
        curve: EcdsaCurve::NistP384,
    },
    Algorithm::Ecdsa {
        curve: EcdsaCurve::NistP521,
    },
    Algorithm::Rsa {
        hash: Some(HashAlg::Sha512),
    },
    Algorithm::Rsa {
        hash: Some(HashAlg::Sha256),
    },
];

/// A jump host as a `ProxyJump` hop again (`[user@]host[:port]`).
fn hop_spec(h: &JumpHost) -> String {
    let host = if h.host.contains(':') {
        format!("[{}]", h.host)
    } else {
        h.host.clone()
    };
    let mut s = match &h.user {
        Some(u) => format!("{u}@{host}"),
        None => host,
    };
    if let Some(p) = h.port {
        s.push_str(&format!(":{p}"));
    }
    s
}

fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(p),
    }
}

/// The ciphers ferry speaks, in the order it prefers them, as a client
/// and as `ferry serve`. AEGIS-128L first: only ferry offers it, so it is
/// chosen between two ferry peers, and with AES-NI it costs a quarter of
/// AES-128-GCM per byte (docs/internals/sftp.md, "Crypto backend for SSH").
/// Then AES-GCM, which with AES-NI costs half of chacha20-poly1305 per byte
/// on this class of machine (docs/internals/baseline.md): what OpenSSH gets.
pub const CIPHERS: &[cipher::Name] = &[
    cipher::AEGIS_128L,
    cipher::AES_128_GCM,
    cipher::AES_256_GCM,
    cipher::CHACHA20_POLY1305,
    cipher::AES_128_CTR,
    cipher::AES_192_CTR,
    cipher::AES_256_CTR,
];

/// `RekeyLimit`: russh rekeys after this many bytes either way (at most
/// its own default and ceiling, 1 GiB) or this much time (default 1 h).
fn rekey_limits(bytes: Option<u64>, time: Option<std::time::Duration>) -> russh::Limits {
    let default = russh::Limits::default();
    let bytes = bytes.map_or(default.rekey_write_limit, |b| {
        b.min(default.rekey_write_limit as u64) as usize
    });
    russh::Limits::new(bytes, bytes, time.unwrap_or(default.rekey_time_limit))
}

fn cipher_by_name(name: &str) -> Option<cipher::Name> {
    CIPHERS.iter().copied().find(|c| c.as_ref() == name)
}

fn lock_any<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Checks the server's host key; leaves the reason for a refusal in
/// `verdict`, since russh only reports "rejected".
pub(crate) struct ClientHandler {
    host: String,
    port: u16,
    strict: StrictHostKeyChecking,
    user_files: Vec<PathBuf>,
    global_files: Vec<PathBuf>,
    /// `RevokedHostKeys`.
    revoked: Option<PathBuf>,
    interactive: bool,
    prompt: crate::PromptHandle,
    verdict: Arc<Mutex<Option<String>>>,
    /// Set once the user is asked about the host key: ConnectTimeout no
    /// longer applies then.
    prompted: Arc<AtomicBool>,
    /// The negotiated cipher, from each finished key exchange.
    cipher: Arc<Mutex<Option<String>>>,
    /// The negotiated compression, likewise.
    compress: Arc<ConnectionCompression>,
    /// `--window`, when given: it holds with every server.
    window: Option<u32>,
}

impl ClientHandler {
    fn host_port(&self) -> String {
        if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        }
    }

    fn refuse(&self, why: String) -> Result<bool, russh::Error> {
        *lock_any(&self.verdict) = Some(why);
        Ok(false)
    }

    /// Why `RevokedHostKeys` refuses one of `blobs` (`what` names them),
    /// or `None`. A file that cannot be read refuses every key, as in ssh.
    fn revoked(&self, blobs: &[&[u8]], what: &str) -> Option<String> {
        let path = self.revoked.as_ref()?;
        match known_hosts::revoked_in(path, blobs) {
            Ok(None) => None,
            Ok(Some(line)) => Some(format!(
                "{what} of {} is listed as revoked in {}:{line} (RevokedHostKeys); refusing to connect",
                self.host_port(),
                path.display()
            )),
            Err(e) => Some(format!(
                "cannot check the host key of {} against RevokedHostKeys: {e}; refusing every host key until it can be read (or set RevokedHostKeys none)",
                self.host_port()
            )),
        }
    }

    fn check(&self, key: &PublicKey) -> Result<bool, russh::Error> {
        let blob = match key.to_bytes() {
            Ok(b) => b,
            Err(e) => {
                return self.refuse(format!(
                    "cannot encode the host key of {}: {e}",
                    self.host_port()
                ))
            }
        };
        let alg = key.algorithm().as_str().to_string();
        let fp = known_hosts::fingerprint_sha256(&blob);
        if let Some(why) = self.revoked(&[&blob], &format!("the host key ({alg} {fp})")) {
            return self.refuse(why);
        }
        let mut files = self.user_files.clone();
        files.extend(self.global_files.iter().cloned());
        let status = match known_hosts::check(&files, &self.host, self.port, &alg, &blob) {
            Ok(s) => s,
            Err(e) => return self.refuse(format!("cannot read known_hosts: {e}")),
        };
        let learn_to = self.user_files.first().cloned();
        match status {
            HostKeyStatus::Match { .. } => Ok(true),
            HostKeyStatus::Revoked { path, line } => self.refuse(format!(
                "the host key of {} ({alg} {fp}) is marked as revoked in {}:{line}; refusing to connect",
                self.host_port(),
                path.display()
            )),
            HostKeyStatus::Mismatch { path, line, .. } => self.refuse(format!(
                "WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED for {hp}!\n\
                 The {alg} host key it sent now has fingerprint {fp}, which does not match the key recorded in {}:{line}.\n\
                 Someone could be eavesdropping on you (man-in-the-middle), or the host key has just been changed.\n\
                 If you know the change is legitimate, remove the old key with: ssh-keygen -R '{hp}' -f {}",
                path.display(),
                path.display(),
                hp = self.host_port(),
            )),
            HostKeyStatus::NotFound | HostKeyStatus::OtherTypesKnown { .. } => {
                let accept = match self.strict {
                    StrictHostKeyChecking::No | StrictHostKeyChecking::AcceptNew => true,
                    StrictHostKeyChecking::Yes => false,
                    StrictHostKeyChecking::Ask if self.interactive => {
                        self.prompted.store(true, Ordering::Relaxed);
                        self.prompt.confirm(&format!(
                            "The authenticity of host '{}' can't be established.\n{alg} key fingerprint is {fp}.\nAre you sure you want to continue connecting (yes/no)? ",
                            self.host_port()
                        ))
                    }
                    StrictHostKeyChecking::Ask => false,
                };
                if !accept {
                    return self.refuse(format!(
                        "host key verification failed: no {alg} key for {} is known ({fp}). \
                         Add it to {} (e.g. ssh-keyscan -p {} {} >> FILE after checking the fingerprint), \
                         or accept it on first use with -o StrictHostKeyChecking=accept-new",
                        self.host_port(),
                        learn_to.as_deref().map(|p| p.display().to_string()).unwrap_or_else(|| "~/.ssh/known_hosts".into()),
                        self.port,
                        self.host
                    ));
                }
                if let Some(path) = learn_to {
                    match known_hosts::learn(&path, &self.host, self.port, &alg, &blob, false) {
                        Ok(()) => self.prompt.notice(&format!(
                            "permanently added '{}' ({alg} {fp}) to {}",
                            self.host_port(),
                            path.display()
                        )),
                        Err(e) => self.prompt.notice(&format!(
                            "could not record the host key in {}: {e}",
                            path.display()
                        )),
                    }
                }
                Ok(true)
            }
        }
    }
}

impl ClientHandler {
    /// A host certificate: accepted when an `@cert-authority` line trusts
    /// its CA for this host and it passes [`hostcert::validate`]. Otherwise,
    /// as `ssh` does, the key inside it is checked as a plain host key, and
    /// a refusal says both why the certificate and why the key were not
    /// accepted. `@revoked` (CA, key or certificate) refuses outright.
    fn check_certificate(&self, cert: &Certificate) -> Result<bool, russh::Error> {
        let hp = self.host_port();
        let inner = PublicKey::new(cert.public_key().clone(), "");
        let ca = PublicKey::new(cert.signature_key().clone(), "");
        let (Ok(ca_blob), Ok(key_blob), Ok(cert_blob)) =
            (ca.to_bytes(), inner.to_bytes(), cert.to_bytes())
        else {
            return self.refuse(format!("cannot encode the host certificate of {hp}"));
        };
        let ca_desc = format!(
            "CA {} {}",
            ca.algorithm().as_str(),
            known_hosts::fingerprint_sha256(&ca_blob)
        );
        if let Some(why) = self.revoked(
            &[&ca_blob, &key_blob, &cert_blob],
            &format!("the host certificate (signed by {ca_desc}), its key or its CA,"),
        ) {
            return self.refuse(why);
        }
        let mut files = self.user_files.clone();
        files.extend(self.global_files.iter().cloned());
        let status = match known_hosts::check_cert_authority(
            &files,
            &self.host,
            self.port,
            &ca_blob,
            &[&key_blob, &cert_blob],
        ) {
            Ok(s) => s,
            Err(e) => return self.refuse(format!("cannot read known_hosts: {e}")),
        };
        // Why the certificate itself did not do, and whether its CA was
        // trusted (then the certificate is wrong, which deserves a warning
        // even if the plain key is known).
        let (why, ca_trusted) = match status {
            CertAuthorityStatus::Revoked {
                path,
                line,
                revoked_index,
            } => {
                let what = match revoked_index {
                    None => "its CA",
                    Some(0) => "the host key it certifies",
                    Some(_) => "the certificate itself",
                };
                return self.refuse(format!(
                    "the host certificate of {hp} (signed by {ca_desc}) is refused: {what} is marked as revoked at {}:{line}; refusing to connect",
                    path.display()
                ));
            }
            CertAuthorityStatus::Trusted { path, line } => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                match hostcert::validate(cert, &self.host, now) {
                    Ok(()) => return Ok(true),
                    Err(why) => (
                        format!(
                            "the host certificate of {hp} is signed by {ca_desc}, trusted at {}:{line}, but {why}",
                            path.display()
                        ),
                        true,
                    ),
                }
            }
            CertAuthorityStatus::NotTrusted { other_authorities } => (
                format!(
                    "the host certificate of {hp} is signed by {ca_desc}, which no @cert-authority line for {hp} lists{}",
                    if other_authorities > 0 {
                        format!(" ({other_authorities} such line(s) name other CAs)")
                    } else {
                        String::new()
                    }
                ),
                false,
            ),
        };
        let accepted = self.check(&inner)?;
        if accepted && ca_trusted {
            // ssh prints this too: the certificate is wrong even though the
            // key inside it is known.
            self.prompt
                .notice(&format!("{why}; accepted its key, which known_hosts lists"));
        }
        if !accepted {
            let mut v = lock_any(&self.verdict);
            let plain = v.take().unwrap_or_default();
            *v = Some(format!(
                "{why};\nits key, checked as a plain host key, is not accepted either: {plain}"
            ));
        }
        Ok(accepted)
    }
}

impl client::Handler for ClientHandler {
    type Error = russh::Error;

    fn channel_window(&mut self, server_id: &[u8], _configured: u32) -> u32 {
        let w = channel_window(server_id, self.window);
        tracing::debug!("{}: a channel window of {} KiB", self.host, w / 1024);
        w
    }

    async fn check_server_key(
        &mut self,
        key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        match key {
            russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } => self.check(key),
            russh::keys::PublicKeyOrCertificate::Certificate(cert) => self.check_certificate(cert),
        }
    }

    async fn kex_done(
        &mut self,
        _shared_secret: Option<&[u8]>,
        names: &russh::Names,
        _session: &mut client::Session,
    ) -> Result<(), Self::Error> {
        *lock_any(&self.cipher) = Some(names.cipher.as_ref().to_string());
        self.compress
            .key_exchanges
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *lock_any(&self.compress.methods) = Some((
            method_name(&names.client_compression).to_string(),
            method_name(&names.server_compression).to_string(),
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssh_gets_the_window_its_socket_holds_unless_one_was_asked() {
        let openssh = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3";
        assert_eq!(channel_window(openssh, None), OPENSSH_WINDOW);
        assert_eq!(channel_window(b"SSH-2.0-russh_0.65.1", None), WINDOW);
        assert_eq!(channel_window(b"SSH-2.0-dropbear_2022.83", None), WINDOW);
        assert_eq!(channel_window(openssh, Some(64 << 20)), 64 << 20);
        assert_eq!(
            channel_window(b"SSH-2.0-russh_0.65.1", Some(1 << 20)),
            1 << 20
        );
    }
}
