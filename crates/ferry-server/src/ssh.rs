//! The SSH side of `ferry serve`: a `russh` server that accepts public keys
//! from an authorized_keys file and runs [`crate::sftp::run`] on every
//! "sftp" subsystem channel. Nothing else is offered: no shell, no exec, no
//! forwarding.
//!
//! Tuned for throughput the way the client is (docs/internals/server.md):
//! AES-GCM first, 32 MiB channel windows so an upload is never held back
//! by the server's window, 256 KiB packets accepted from clients that send
//! them, TCP_NODELAY.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use russh::keys::ssh_key::AuthorizedKeys;
use russh::keys::PublicKey;
use russh::server::{Auth, Msg, Session};
use russh::{Channel, ChannelId, MethodKind, MethodSet, Preferred};

use crate::sftp::SessionConfig;

/// Who may log in.
#[derive(Debug, Clone)]
pub struct AuthPolicy {
    /// Read on every attempt, so edits apply without a restart.
    pub authorized_keys: PathBuf,
    /// Only this user name, when set.
    pub user: Option<String>,
}

/// The russh configuration `ferry serve` uses.
/// The pause before a refused key is answered, by default.
pub const AUTH_FAIL_DELAY: Duration = Duration::from_millis(300);

/// `auth_fail_delay`: the pause before a refused key is answered;
/// `compress`: what is offered and how the server sends
/// (`ferry_ssh::compression::server_offer`, `server_zstd_settings`).
pub fn config(
    host_key: russh::keys::PrivateKey,
    auth_fail_delay: Duration,
    compress: ferry_ssh::SshCompression,
) -> russh::server::Config {
    let preferred = Preferred {
        // The client's order decides; ferry cp puts AEGIS-128L first.
        cipher: std::borrow::Cow::Borrowed(ferry_ssh::CIPHERS),
        // zstd for ferry cp, zlib for OpenSSH's `-C`, none; again the
        // client's order decides (docs/internals/compression.md).
        compression: std::borrow::Cow::Borrowed(ferry_ssh::compression::server_offer(compress)),
        zstd: ferry_ssh::compression::server_zstd_settings(compress),
        ..Preferred::default()
    };
    russh::server::Config {
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        auth_rejection_time: auth_fail_delay,
        auth_rejection_time_initial: Some(Duration::from_millis(0)),
        keys: vec![host_key],
        window_size: 32 * 1024 * 1024,
        maximum_packet_size: ferry_ssh::MAX_CHANNEL_PACKET,
        preferred,
        max_auth_attempts: 10,
        inactivity_timeout: Some(Duration::from_secs(3600)),
        keepalive_interval: Some(Duration::from_secs(60)),
        nodelay: true,
        ..Default::default()
    }
}

/// Keys from an authorized_keys file. Entries with options that ferry does
/// not enforce (`command=`, `from=`, `expiry-time=`, ...) are skipped, so a
/// key restricted for sshd never gets more here.
pub fn load_authorized_keys(path: &std::path::Path) -> Vec<PublicKey> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("{}: cannot read authorized keys: {e}", path.display());
            return Vec::new();
        }
    };
    // Options that only take away things ferry serve never offers.
    const HARMLESS: &[&str] = &[
        "no-port-forwarding",
        "no-agent-forwarding",
        "no-X11-forwarding",
        "no-pty",
        "no-user-rc",
        "restrict",
    ];
    let mut keys = Vec::new();
    for (n, entry) in AuthorizedKeys::new(&text).enumerate() {
        match entry {
            Ok(e) => {
                let opts = e.config_opts();
                if opts.iter().all(|o| HARMLESS.contains(&o)) {
                    keys.push(e.public_key().clone());
                } else {
                    tracing::warn!(
                        "{}: entry {}: skipped, its options ({}) are not enforced by ferry serve",
                        path.display(),
                        n + 1,
                        opts.as_str()
                    );
                }
            }
            Err(e) => tracing::warn!("{}: entry {}: {e}", path.display(), n + 1),
        }
    }
    keys
}

/// One SSH connection.
pub struct Conn {
    pub(crate) policy: Arc<AuthPolicy>,
    pub(crate) sftp: Arc<SessionConfig>,
    pub(crate) peer: String,
    /// Session channels no subsystem has claimed yet, each read (and what
    /// it sends dropped) by [`unclaimed`] until claimed here.
    pub(crate) channels: HashMap<ChannelId, Claim>,
    /// This connection's slot among those not logged in yet; released on
    /// success (`crate::login`).
    pub(crate) login: Option<Arc<crate::login::Login>>,
}

/// How a subsystem takes its channel from [`unclaimed`]: the channel
/// comes back on the sender given.
pub(crate) type Claim = tokio::sync::oneshot::Sender<tokio::sync::oneshot::Sender<Channel<Msg>>>;

/// A session channel that no subsystem has claimed yet. russh hands each
/// CHANNEL_DATA to its channel before it reads the next packet, and a
/// channel nobody reads holds 100 of them: a client that sent more on a
/// channel with no subsystem stopped its whole connection, its other
/// channels too. So the channel is read until it is claimed (and handed
/// over) or ends; what it sends before a subsystem runs is dropped, as a
/// client must wait for the subsystem's answer before it speaks.
async fn unclaimed(
    mut ch: Channel<Msg>,
    mut claim: tokio::sync::oneshot::Receiver<tokio::sync::oneshot::Sender<Channel<Msg>>>,
) {
    loop {
        tokio::select! {
            biased;
            to = &mut claim => {
                if let Ok(to) = to {
                    let _ = to.send(ch);
                }
                return;
            }
            msg = ch.wait() => {
                if msg.is_none() {
                    return;
                }
            }
        }
    }
}

impl Conn {
    fn allowed(&self, user: &str, key: &PublicKey) -> bool {
        if let Some(u) = &self.policy.user {
            if u != user {
                return false;
            }
        }
        load_authorized_keys(&self.policy.authorized_keys)
            .iter()
            .any(|k| k.key_data() == key.key_data())
    }
}

impl russh::server::Handler for Conn {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: russh::server::PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        if self.allowed(user, offer.public_key) {
            Ok(Auth::Accept)
        } else {
            Ok(Auth::reject())
        }
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: russh::server::VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        if self.allowed(user, key.public_key) {
            tracing::info!(peer = %self.peer, user, "authenticated ({})", key.public_key.fingerprint(Default::default()));
            if let Some(l) = self.login.take() {
                l.succeeded();
            }
            Ok(Auth::Accept)
        } else {
            tracing::warn!(peer = %self.peer, user, "refused key {}", key.public_key.fingerprint(Default::default()));
            Ok(Auth::reject())
        }
    }

    async fn auth_none(&mut self, _user: &str) -> Result<Auth, Self::Error> {
        Ok(Auth::Reject {
            proceed_with_methods: Some(MethodSet::from(&[MethodKind::PublicKey][..])),
            partial_success: false,
        })
    }

    async fn auth_password(&mut self, user: &str, _password: &str) -> Result<Auth, Self::Error> {
        tracing::warn!(peer = %self.peer, user, "refused a password login (ferry serve takes public keys only)");
        Ok(Auth::Reject {
            proceed_with_methods: Some(MethodSet::from(&[MethodKind::PublicKey][..])),
            partial_success: false,
        })
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if self.channels.len() >= 16 {
            return Ok(()); // dropping `reply` refuses the channel
        }
        let (claim, claimed) = tokio::sync::oneshot::channel();
        self.channels.insert(channel.id(), claim);
        tokio::spawn(unclaimed(channel, claimed));
        reply.accept().await;
        Ok(())
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let ch = match (name, self.channels.remove(&channel)) {
            ("sftp", Some(claim)) => {
                let (to, back) = tokio::sync::oneshot::channel();
                let _ = claim.send(to);
                back.await.ok()
            }
            _ => None,
        };
        match ch {
            Some(ch) => {
                session.channel_success(channel)?;
                let cfg = self.sftp.clone();
                let peer = self.peer.clone();
                tokio::spawn(crate::sftp::run(ch, cfg, peer));
            }
            _ => {
                tracing::info!(peer = %self.peer, "refused subsystem {name:?}");
                session.channel_failure(channel)?;
            }
        }
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        tracing::info!(peer = %self.peer, "refused exec {:?} (ferry serve offers SFTP only; scp works in its default SFTP mode)", String::from_utf8_lossy(data));
        session.channel_failure(channel)?;
        Ok(())
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(channel)?;
        Ok(())
    }
}
