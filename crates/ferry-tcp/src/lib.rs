//! The TCP settings ferry applies to every socket of its own: the client's
//! connections (SSH, HTTP(S), FTP control and data) and the ones `ferry
//! serve` accepts. One place, so every protocol behaves alike on a long or
//! lossy link.
//!
//! Today that is the congestion control (`TCP_CONGESTION`). On a path that
//! loses packets at random, loss-based algorithms (cubic, reno) halve their
//! window on every loss and stay far below the link's rate; BBR paces at the
//! bandwidth it measures and does not read a random loss as congestion
//! (docs/internals/wan.md has the numbers). So ferry asks for BBR on each
//! socket unless the user says otherwise ([`Congestion`]):
//!
//! - `auto` (the default): BBR when the kernel lets this process use it,
//!   else the system default, silently (a kernel without BBR, or one that
//!   keeps it for CAP_NET_ADMIN, is a normal system, not an error);
//! - `system`: leave the system default (`net.ipv4.tcp_congestion_control`);
//! - a name (`bbr`, `cubic`, `reno`, ...): that algorithm; when the kernel
//!   refuses it (not built, not loaded and we may not load it, or not in
//!   `net.ipv4.tcp_allowed_congestion_control` for an unprivileged
//!   process), ferry warns once and goes on with the system default.
//!
//! The choice is process-wide ([`set_congestion`]): the binary sets it from
//! its flag before it connects or listens, and every socket picks it up
//! through [`apply`], whichever crate made the socket.
//!
//! What ferry does not touch: `SO_SNDBUF`/`SO_RCVBUF`. Setting them turns
//! off the kernel's buffer autotuning and caps them at `net.core.wmem_max`
//! / `rmem_max` (4 MiB on our machines), below what `tcp_rmem`'s autotuning
//! reaches (32 MiB here): a fixed buffer would make long links slower, not
//! faster.

use std::fmt;
use std::os::fd::AsFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// Longest algorithm name the kernel takes (`TCP_CA_NAME_MAX` minus the NUL).
const NAME_MAX: usize = 15;
/// What `auto` asks for.
pub const PREFERRED: &str = "bbr";

/// Which congestion control ferry's sockets use.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Congestion {
    /// BBR when the kernel lets us, else the system default, silently.
    #[default]
    Auto,
    /// The system default: ferry does not set it.
    System,
    /// This algorithm, or (with a warning) the system default.
    Named(String),
}

impl FromStr for Congestion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Congestion::Auto),
            "system" | "default" => Ok(Congestion::System),
            n if !n.is_empty()
                && n.len() <= NAME_MAX
                && n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
            {
                Ok(Congestion::Named(n.to_string()))
            }
            _ => Err(format!(
                "{s:?}: not a congestion control; use auto, system, or an algorithm the \
                 kernel offers ({})",
                offered().join(", ")
            )),
        }
    }
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Congestion::Auto => f.write_str("auto"),
            Congestion::System => f.write_str("system"),
            Congestion::Named(n) => f.write_str(n),
        }
    }
}

static CHOICE: RwLock<Congestion> = RwLock::new(Congestion::Auto);
/// A named algorithm was refused: warned once, not again.
static WARNED: AtomicBool = AtomicBool::new(false);
/// `auto` found BBR refused: stop asking on every socket.
static AUTO_REFUSED: AtomicBool = AtomicBool::new(false);

/// Set the process-wide choice (before the first connection).
pub fn set_congestion(c: Congestion) {
    if let Ok(mut g) = CHOICE.write() {
        *g = c;
    }
    WARNED.store(false, Ordering::Relaxed);
    AUTO_REFUSED.store(false, Ordering::Relaxed);
}

/// The process-wide choice.
pub fn congestion() -> Congestion {
    CHOICE.read().map(|g| g.clone()).unwrap_or_default()
}

/// What [`apply`] did to a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Left at the system default (by choice, or `auto` without BBR).
    Kept,
    /// Set to this algorithm.
    Set(String),
    /// The kernel refused this algorithm; the socket keeps the default.
    Refused { wanted: String, error: String },
}

/// Apply the process-wide choice to a fresh TCP socket (right after
/// connect or accept). Never fails: a refusal is logged and the socket
/// keeps the system default.
pub fn apply<Fd: AsFd>(sock: Fd) -> Applied {
    apply_choice(&congestion(), sock)
}

/// Apply `choice` to `sock`; see [`apply`].
pub fn apply_choice<Fd: AsFd>(choice: &Congestion, sock: Fd) -> Applied {
    match choice {
        Congestion::System => Applied::Kept,
        Congestion::Auto => {
            if AUTO_REFUSED.load(Ordering::Relaxed) {
                return Applied::Kept;
            }
            match rustix::net::sockopt::set_tcp_congestion(sock, PREFERRED) {
                Ok(()) => Applied::Set(PREFERRED.to_string()),
                Err(e) => {
                    if !AUTO_REFUSED.swap(true, Ordering::Relaxed) {
                        tracing::debug!(
                            "TCP congestion control {PREFERRED} not available ({e}); \
                             using the system default ({})",
                            system_default()
                        );
                    }
                    Applied::Kept
                }
            }
        }
        Congestion::Named(name) => match rustix::net::sockopt::set_tcp_congestion(sock, name) {
            Ok(()) => Applied::Set(name.clone()),
            Err(e) => {
                let error = e.to_string();
                if !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "cannot use TCP congestion control {name} ({error}): the kernel offers \
                         {}, and lets unprivileged programs use {}; going on with the system \
                         default ({})",
                        offered().join(" "),
                        allowed().join(" "),
                        system_default()
                    );
                }
                Applied::Refused {
                    wanted: name.clone(),
                    error,
                }
            }
        },
    }
}

/// The algorithm a socket runs, as the kernel reports it.
pub fn current<Fd: AsFd>(sock: Fd) -> Option<String> {
    rustix::net::sockopt::tcp_congestion(sock).ok()
}

fn proc_list(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Algorithms loaded in the kernel (more may load on demand for a
/// privileged process).
pub fn offered() -> Vec<String> {
    proc_list("/proc/sys/net/ipv4/tcp_available_congestion_control")
}

/// Algorithms any process may pick.
pub fn allowed() -> Vec<String> {
    proc_list("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
}

/// The system default of this network namespace.
pub fn system_default() -> String {
    proc_list("/proc/sys/net/ipv4/tcp_congestion_control")
        .into_iter()
        .next()
        .unwrap_or_else(|| "unknown".into())
}

/// The smallest TCP handshake time seen on a path: the time from `connect`
/// to its answer is one round trip (SYN to SYN-ACK) measured before any
/// data queues, so it is the link's, not a busy server's. The engine reads
/// it to tell a long link (where one connection's rate is held by its
/// window or its losses, and more connections help) from a short one.
#[derive(Debug)]
pub struct MinRoundTrip(std::sync::atomic::AtomicU64);

impl Default for MinRoundTrip {
    fn default() -> Self {
        MinRoundTrip(std::sync::atomic::AtomicU64::new(u64::MAX))
    }
}

impl MinRoundTrip {
    /// A handshake took `d`.
    pub fn note(&self, d: std::time::Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1);
        self.0.fetch_min(n, Ordering::Relaxed);
    }

    /// The smallest seen; `None` before the first connection.
    pub fn get(&self) -> Option<std::time::Duration> {
        match self.0.load(Ordering::Relaxed) {
            u64::MAX => None,
            n => Some(std::time::Duration::from_nanos(n)),
        }
    }
}

#[cfg(test)]
mod round_trip_tests {
    use super::MinRoundTrip;
    use std::time::Duration;

    #[test]
    fn keeps_the_smallest_handshake() {
        let m = MinRoundTrip::default();
        assert_eq!(m.get(), None);
        m.note(Duration::from_millis(100));
        m.note(Duration::from_millis(120));
        assert_eq!(m.get(), Some(Duration::from_millis(100)));
        m.note(Duration::from_millis(99));
        assert_eq!(m.get(), Some(Duration::from_millis(99)));
    }
}
