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
//! On a long path [`apply`] also fixes the socket's send buffer where the
//! system lets a fixed buffer be larger than autotuning would make it
//! ([`fixed_send_buffer`]). One connection on a long path is held by its
//! sender's buffer: autotuning grows it up to `net.ipv4.tcp_wmem`'s maximum
//! (Linux's default 4 MiB: 18.5 MB/s measured at 100 ms RTT and 0.1% loss),
//! while `SO_SNDBUF` takes up to `net.core.wmem_max` and the kernel doubles
//! what it is given, so where an administrator raised `wmem_max` (4 MiB on
//! our machines; Linux's default is 208 KiB, where nothing changes) the
//! buffer is 8 MiB: 33 MB/s on the same link (docs/internals/wan.md). On a
//! short path (loopback, a LAN) the socket is left to autotuning. The
//! receive buffer is never set: `tcp_rmem`'s autotuning reaches further
//! (32 MiB here) than `rmem_max` allows.

use std::fmt;
use std::os::fd::AsFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

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
    let rtt = smoothed_rtt(&sock);
    apply_on_path(sock, rtt)
}

/// [`apply`] to a socket not yet connected, whose path's round trip
/// `rtt` is known from another connection to the same host (an FTP data
/// connection from its control connection): its own `TCP_INFO` says
/// nothing before the handshake.
pub fn apply_on_path<Fd: AsFd>(sock: Fd, rtt: Option<Duration>) -> Applied {
    let choice = congestion();
    if let (true, Some(rtt)) = (choice != Congestion::System, rtt) {
        fix_send_buffer(&sock, rtt);
    }
    apply_choice(&choice, sock)
}

/// Start a TCP connection to `addr` and return its socket at once, in
/// blocking mode, with [`apply_on_path`]'s settings, before the handshake
/// ends. The caller goes on (an FTP client sends its `STOR`/`RETR` on the
/// control connection meanwhile) and the socket's first blocking read or
/// write waits for the handshake (its timeouts, when set, bound that
/// wait), then fails if the connection was refused. This saves the
/// handshake's round trip each time a connection is opened right before
/// another exchange with the same server, as curl does for FTP data
/// connections.
pub fn connect_in_flight(
    addr: std::net::SocketAddr,
    rtt: Option<Duration>,
) -> std::io::Result<std::net::TcpStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    apply_on_path(&fd, rtt);
    match rustix::net::connect(&fd, &addr) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
        Err(e) => return Err(e.into()),
    }
    rustix::io::ioctl_fionbio(&fd, false)?;
    Ok(std::net::TcpStream::from(fd))
}

/// A path whose round trip is at least this long is long: one connection
/// there is held by its windows and buffers, not by a CPU, so it gets a
/// bigger send buffer here and the engine may widen a big file over more
/// connections. Loopback and a LAN stay below it.
pub const LONG_PATH: Duration = Duration::from_millis(10);

/// Is a path of round trip `rtt` long ([`LONG_PATH`])?
pub fn is_long(rtt: Duration) -> bool {
    rtt >= LONG_PATH
}

/// The send buffer to fix on a socket whose path's round trip is `rtt`,
/// where `SO_SNDBUF` may ask for at most `fixed_max` (`net.core.wmem_max`;
/// the kernel doubles it) and autotuning grows to `auto_max`
/// (`net.ipv4.tcp_wmem`'s third value): `fixed_max` on a long path when the
/// doubled buffer is larger than autotuning reaches, else `None` (leave the
/// socket to autotuning, which also grows from small on a short path).
pub fn fixed_send_buffer(rtt: Duration, fixed_max: usize, auto_max: usize) -> Option<usize> {
    (is_long(rtt) && fixed_max.saturating_mul(2) > auto_max).then_some(fixed_max)
}

/// `net.core.wmem_max` and `tcp_wmem`'s maximum of this process's network
/// namespace (a new namespace copies the root's `tcp_wmem`), read once:
/// the two limits [`fixed_send_buffer`] weighs.
pub fn send_buffer_limits() -> Option<(usize, usize)> {
    static LIMITS: OnceLock<Option<(usize, usize)>> = OnceLock::new();
    *LIMITS.get_or_init(|| {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let fixed = read("/proc/sys/net/core/wmem_max")?.trim().parse().ok()?;
        let auto = read("/proc/sys/net/ipv4/tcp_wmem")?
            .split_whitespace()
            .nth(2)?
            .parse()
            .ok()?;
        Some((fixed, auto))
    })
}

/// The kernel's smoothed round trip of a connected socket (`TCP_INFO`):
/// right after connect or accept, the handshake's.
pub fn smoothed_rtt<Fd: AsFd>(sock: Fd) -> Option<Duration> {
    use std::os::fd::AsRawFd;
    let fd = sock.as_fd().as_raw_fd();
    // SAFETY: `tcp_info` is plain integers, for which all-zero is valid.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which
    // lives across the call; `fd` is borrowed from `sock` for it.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0 && info.tcpi_rtt > 0).then(|| Duration::from_micros(u64::from(info.tcpi_rtt)))
}

/// Fix the send buffer of `sock`, on a path of round trip `rtt`, where
/// [`fixed_send_buffer`] says so; the size set, if any.
fn fix_send_buffer<Fd: AsFd>(sock: Fd, rtt: Duration) -> Option<usize> {
    let (fixed_max, auto_max) = send_buffer_limits()?;
    let size = fixed_send_buffer(rtt, fixed_max, auto_max)?;
    match rustix::net::sockopt::set_socket_send_buffer_size(&sock, size) {
        Ok(()) => {
            tracing::debug!(
                "send buffer fixed at {} KiB (x2 by the kernel): path round trip {rtt:?}, \
                 autotuning stops at {} KiB",
                size >> 10,
                auto_max >> 10
            );
            Some(size)
        }
        Err(e) => {
            tracing::debug!("send buffer left to autotuning: {e}");
            None
        }
    }
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod path_tests {
    use super::{fixed_send_buffer, smoothed_rtt, MinRoundTrip};
    use std::time::Duration;

    #[test]
    fn send_buffer_fixed_only_on_a_long_path_where_it_is_larger() {
        const MIB: usize = 1 << 20;
        let ms = Duration::from_millis;
        // Our machines: wmem_max 4 MiB, tcp_wmem max 4 MiB.
        assert_eq!(fixed_send_buffer(ms(100), 4 * MIB, 4 * MIB), Some(4 * MIB));
        assert_eq!(fixed_send_buffer(ms(10), 4 * MIB, 4 * MIB), Some(4 * MIB));
        // Loopback and a LAN: autotuning.
        assert_eq!(fixed_send_buffer(ms(9), 4 * MIB, 4 * MIB), None);
        assert_eq!(
            fixed_send_buffer(Duration::from_micros(50), 4 * MIB, 4 * MIB),
            None
        );
        // Linux's defaults (wmem_max 208 KiB): a fixed buffer would be smaller.
        assert_eq!(fixed_send_buffer(ms(100), 212_992, 4 * MIB), None);
        // Autotuning raised as far: nothing to gain.
        assert_eq!(fixed_send_buffer(ms(100), 4 * MIB, 8 * MIB), None);
    }

    #[test]
    fn loopback_round_trip_is_short() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (a, _) = l.accept().unwrap();
        for s in [&c, &a] {
            let rtt = smoothed_rtt(s).expect("TCP_INFO on a connected socket");
            assert!(!super::is_long(rtt), "{rtt:?}");
        }
    }

    /// The socket comes back before the handshake ends, blocking: its
    /// first write and read wait for it, both ways, over IPv4 and IPv6
    /// (where the host has it); a refused connection fails there.
    #[test]
    fn a_connection_in_flight_waits_for_its_handshake_then_carries_bytes() {
        use std::io::{Read, Write};
        for host in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = std::net::TcpListener::bind(host) else {
                continue;
            };
            let mut c = super::connect_in_flight(l.local_addr().unwrap(), None).unwrap();
            c.write_all(b"STOR").unwrap();
            let (mut a, _) = l.accept().unwrap();
            let mut got = [0u8; 4];
            a.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"STOR");
            a.write_all(b"226").unwrap();
            let mut back = [0u8; 3];
            c.read_exact(&mut back).unwrap();
            assert_eq!(&back, b"226");
            // The listener gone: its port refuses.
            let gone = l.local_addr().unwrap();
            drop((l, a));
            let refused = super::connect_in_flight(gone, Some(Duration::from_millis(50)))
                .and_then(|mut s| s.write_all(b"x").and_then(|()| s.flush()));
            let e = refused.expect_err("a closed port refuses");
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        }
    }

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
