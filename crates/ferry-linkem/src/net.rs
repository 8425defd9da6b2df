//! The packet-level link: two network namespaces joined by a userspace
//! forwarder, so TCP's own congestion control runs across the emulated link.
//!
//! `up` creates a client-side and a server-side namespace
//! (`ferry-NAME-c`, `ferry-NAME-s`), each holding one point-to-point TUN
//! device `lk0` (client 198.18.0.1, server 198.19.0.1: the benchmarking range
//! of RFC 2544, which exists only inside those namespaces) plus its own
//! loopback. The TUN file descriptors stay with this process in the root
//! namespace: TUN devices are created here, moved into their namespace with
//! `ip link set netns` (the descriptor keeps working), and two forwarder
//! threads, one per direction, read IP packets from one TUN and write them to
//! the other after the [`netem`](crate::netem) core has decided their fate.
//! A TCP connection from the client namespace to the server namespace is
//! then a real end-to-end connection whose packets are delayed, queued at a
//! bottleneck and lost in flight, unlike the TCP proxy ([`LinkEm`](crate::LinkEm))
//! that terminates TCP on both sides.
//!
//! Clean-up: the namespaces go when [`NetLink::down`] runs or the value is
//! dropped. A process killed with SIGKILL cannot clean up, so every `up`
//! first removes leftovers: a state file `/run/ferry-linkem/NAME` records the
//! owner's PID, and namespaces whose owner is gone (or that have no state
//! file at all) are deleted, as are any of the same name.
//!
//! Needs root (CAP_NET_ADMIN), `/dev/net/tun` and iproute2's `ip`.

use std::fmt;
use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::gso::{cut_tcp4, Gso, VnetHdr, VNET_HDR_LEN};
use crate::netem::{DirConfig, Direction, Stats};

/// The client side's address (inside its namespace only).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// The server side's address (inside its namespace only).
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// Name of the TUN device inside each namespace.
pub const DEVICE: &str = "lk0";
/// Every namespace of ours starts with this.
pub const PREFIX: &str = "ferry-";
/// Where each running link records its owner's PID.
pub const STATE_DIR: &str = "/run/ferry-linkem";

/// The link in both directions.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Names the namespaces: `ferry-NAME-c` and `ferry-NAME-s`.
    pub name: String,
    /// Client to server.
    pub to_server: DirConfig,
    /// Server to client.
    pub to_client: DirConfig,
    /// MTU of both TUN devices (IP packet bytes).
    pub mtu: u32,
    /// Seed of the loss / jitter / reorder draws (each direction derives
    /// its own from it).
    pub seed: u64,
    /// TCP congestion control for both namespaces
    /// (`net.ipv4.tcp_congestion_control`, e.g. "bbr", "cubic"); `None`
    /// keeps what a new namespace inherits.
    pub congestion: Option<String>,
    /// Take TCP super-packets (GSO, up to 64 kB) from the TUN devices and
    /// hand them on whole unless the link must cut them (see [`crate::gso`]);
    /// `false` moves one 1500-byte packet per system call, as before.
    pub offload: bool,
}

impl NetConfig {
    /// The same settings both ways.
    pub fn symmetric(name: &str, dir: DirConfig) -> Self {
        NetConfig {
            name: name.to_string(),
            to_server: dir.clone(),
            to_client: dir,
            mtu: 1500,
            seed: 1,
            congestion: None,
            offload: true,
        }
    }
}

/// The client-side namespace of link `name`.
pub fn client_netns(name: &str) -> String {
    format!("{PREFIX}{name}-c")
}

/// The server-side namespace of link `name`.
pub fn server_netns(name: &str) -> String {
    format!("{PREFIX}{name}-s")
}

/// Why the packet-level link cannot run here, or `None` when it can.
pub fn unsupported() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces and TUN need CAP_NET_ADMIN)".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("no iproute2 `ip` command".into()),
    }
}

fn check_name(name: &str) -> io::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("link name {name:?}: use 1-40 of a-z, 0-9 and -"),
        ))
    }
}

/// Run `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The namespaces `ip netns` knows.
fn list_netns() -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn state_file(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(name)
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

fn owner_of(name: &str) -> Option<i32> {
    std::fs::read_to_string(state_file(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Delete the namespaces of `name` and its state file; true if any existed.
fn remove_link(name: &str) -> bool {
    let existing = list_netns();
    let mut any = false;
    for ns in [client_netns(name), server_netns(name)] {
        if existing.contains(&ns) {
            any = true;
            let _ = ip(&["netns", "del", &ns]);
        }
    }
    let _ = std::fs::remove_file(state_file(name));
    any
}

/// Remove every link of ours whose owner is gone (killed with SIGKILL, or a
/// crash): namespaces `ferry-*-c` / `ferry-*-s` with a dead owner or no
/// state file. Returns the names removed.
pub fn cleanup_stale() -> Vec<String> {
    let mut names: Vec<String> = list_netns()
        .iter()
        .filter_map(|ns| {
            let rest = ns.strip_prefix(PREFIX)?;
            rest.strip_suffix("-c")
                .or_else(|| rest.strip_suffix("-s"))
                .map(str::to_string)
        })
        .collect();
    if let Ok(dir) = std::fs::read_dir(STATE_DIR) {
        names.extend(
            dir.flatten()
                .filter_map(|e| e.file_name().into_string().ok()),
        );
    }
    names.sort();
    names.dedup();
    let mut removed = Vec::new();
    for n in names {
        if !owner_of(&n).is_some_and(pid_alive) {
            remove_link(&n);
            removed.push(n);
        }
    }
    removed
}

/// Stop the link `name`: SIGTERM to its owner (when that is another
/// process), a wait of up to 5 s for it to clean up, then removal of
/// whatever is left. True if there was anything to stop.
pub fn down_by_name(name: &str) -> io::Result<bool> {
    check_name(name)?;
    let mut found = false;
    if let Some(pid) = owner_of(name) {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        if pid != me && pid_alive(pid) {
            found = true;
            // SAFETY: plain kill(2) of a PID we read from our state file.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let until = Instant::now() + Duration::from_secs(5);
            while pid_alive(pid) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    Ok(remove_link(name) || found)
}

/// Make the calling thread's network namespace `ns` (sockets it creates
/// afterwards live there, whichever thread uses them later).
pub fn enter_netns(ns: &str) -> io::Result<()> {
    let f = File::open(Path::new("/run/netns").join(ns))?;
    // SAFETY: setns on a namespace file we just opened; affects this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A TUN device (IP packets, no packet-info header), non-blocking; with
/// `offload`, each packet comes and goes behind a `virtio_net_hdr` and the
/// kernel may hand us TCP/IPv4 super-packets (checksum and TSO offloads on).
fn open_tun(offload: bool) -> io::Result<(OwnedFd, String)> {
    // SAFETY: open(2) of a fixed path; the result is checked.
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct ifreq: 16 bytes of name, then the flags (a short) in the union.
    let mut ifr = [0u8; 40];
    let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
    if offload {
        flags |= libc::IFF_VNET_HDR;
    }
    let flags = flags as i16;
    ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which ifr is as
    // large as; the kernel fills in the name it picked.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, ifr.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if offload {
        // No TSO_ECN or TSO6: the link is IPv4, and an ECN super-packet
        // would need CWR handling we leave to the kernel.
        let features = libc::TUN_F_CSUM | libc::TUN_F_TSO4;
        // SAFETY: TUNSETOFFLOAD takes the feature bits as its argument.
        if unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                features as libc::c_ulong,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    let name: Vec<u8> = ifr[..16].iter().copied().take_while(|b| *b != 0).collect();
    Ok((fd, String::from_utf8_lossy(&name).into_owned()))
}

/// Create one side: namespace `ns` with the TUN `dev` moved in as `lk0`,
/// addressed `local` with a point-to-point route to `peer`.
fn make_side(ns: &str, dev: &str, local: Ipv4Addr, peer: Ipv4Addr, mtu: u32) -> io::Result<()> {
    ip(&["netns", "add", ns])?;
    ip(&["link", "set", "dev", dev, "netns", ns])?;
    let mtu = mtu.to_string();
    // A long transmit queue: when the forwarder falls behind, the kernel's
    // drops at the TUN would be invisible in our report, so make them rare.
    ip(&[
        "-n",
        ns,
        "link",
        "set",
        "dev",
        dev,
        "name",
        DEVICE,
        "mtu",
        &mtu,
        "txqueuelen",
        "10000",
    ])?;
    ip(&[
        "-n",
        ns,
        "addr",
        "add",
        &local.to_string(),
        "peer",
        &format!("{peer}/32"),
        "dev",
        DEVICE,
    ])?;
    ip(&["-n", ns, "link", "set", "dev", DEVICE, "up"])?;
    ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
    Ok(())
}

/// A new setting for one direction, handed to its forwarder between
/// packets: `wanted` counts the settings given, `applied` the ones the
/// forwarder has taken.
#[derive(Default)]
struct Retune {
    wanted: AtomicU64,
    applied: AtomicU64,
    next: Mutex<Option<DirConfig>>,
}

/// Set the default TCP congestion control of namespace `ns`.
fn set_congestion(ns: &str, cc: &str) -> io::Result<()> {
    let ok = !cc.is_empty() && cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("congestion control {cc:?}: not a name"),
        ));
    }
    // Outside the root namespace the kernel takes only the algorithms in
    // net.ipv4.tcp_allowed_congestion_control (EPERM otherwise), whoever asks.
    ip(&[
        "netns",
        "exec",
        ns,
        "sysctl",
        "-qw",
        &format!("net.ipv4.tcp_congestion_control={cc}"),
    ])
    .map_err(|e| {
        io::Error::other(format!(
            "{e} (a namespace may only use the algorithms listed in the root \
             namespace's net.ipv4.tcp_allowed_congestion_control)"
        ))
    })
}

/// A packet buffer and how much of it is the packet.
struct Packet {
    buf: Vec<u8>,
    len: usize,
}

/// A running packet-level link; dropping it tears it down.
pub struct NetLink {
    cfg: NetConfig,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Live counters, published by each forwarder every 100 ms and at exit:
    /// [to server, to client].
    stats: [Arc<Mutex<Stats>>; 2],
    retune: [Arc<Retune>; 2],
    started: Instant,
    torn_down: bool,
}

impl NetLink {
    /// Create the namespaces and start forwarding. Removes stale links of
    /// ours first (including a leftover of the same name).
    pub fn up(cfg: NetConfig) -> io::Result<NetLink> {
        check_name(&cfg.name)?;
        if let Some(why) = unsupported() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        std::fs::create_dir_all(STATE_DIR)?;
        cleanup_stale();
        if let Some(pid) = owner_of(&cfg.name).filter(|p| pid_alive(*p)) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "link {} is running (PID {pid}); stop it with `ferry-linkem net down --name {}`",
                    cfg.name, cfg.name
                ),
            ));
        }
        remove_link(&cfg.name);
        // The state file first, so a concurrent `up` never takes our
        // half-made namespaces for stale ones.
        // SAFETY: getpid has no preconditions.
        std::fs::write(state_file(&cfg.name), unsafe { libc::getpid() }.to_string())?;
        let mut link = NetLink {
            cfg: cfg.clone(),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            stats: Default::default(),
            retune: Default::default(),
            started: Instant::now(),
            torn_down: false,
        };
        // On any error below, dropping `link` removes what was made.
        let (tun_c, dev_c) = open_tun(cfg.offload)?;
        let (tun_s, dev_s) = open_tun(cfg.offload)?;
        make_side(
            &client_netns(&cfg.name),
            &dev_c,
            CLIENT_ADDR,
            SERVER_ADDR,
            cfg.mtu,
        )?;
        make_side(
            &server_netns(&cfg.name),
            &dev_s,
            SERVER_ADDR,
            CLIENT_ADDR,
            cfg.mtu,
        )?;
        if let Some(cc) = &cfg.congestion {
            for ns in [client_netns(&cfg.name), server_netns(&cfg.name)] {
                set_congestion(&ns, cc)?;
            }
        }
        let tun_c = Arc::new(tun_c);
        let tun_s = Arc::new(tun_s);
        let buf_len = if cfg.offload {
            // A super-packet is at most an IPv4 packet's 64 kB.
            VNET_HDR_LEN + 65536
        } else {
            usize::try_from(cfg.mtu).unwrap_or(65535).clamp(576, 65535) + 64
        };
        let dirs = [
            (&tun_c, &tun_s, cfg.to_server.clone(), "to-server"),
            (&tun_s, &tun_c, cfg.to_client.clone(), "to-client"),
        ];
        for (i, (from, to, dcfg, what)) in dirs.into_iter().enumerate() {
            let (from, to) = (Arc::clone(from), Arc::clone(to));
            let stop = Arc::clone(&link.stop);
            let shared = Arc::clone(&link.stats[i]);
            let retune = Arc::clone(&link.retune[i]);
            let origin = link.started;
            let seed = cfg.seed.wrapping_mul(2).wrapping_add(i as u64);
            let t = std::thread::Builder::new()
                .name(format!("linkem-{what}"))
                .spawn(move || {
                    forward(
                        Ends {
                            input: from.as_raw_fd(),
                            output: to.as_raw_fd(),
                            buf_len,
                            offload: cfg.offload,
                        },
                        Direction::new(dcfg, seed),
                        seed,
                        &Control {
                            stop: &stop,
                            shared: &shared,
                            retune: &retune,
                            origin,
                        },
                    );
                })?;
            link.threads.push(t);
        }
        Ok(link)
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    pub fn client_netns(&self) -> String {
        client_netns(&self.cfg.name)
    }

    pub fn server_netns(&self) -> String {
        server_netns(&self.cfg.name)
    }

    /// Change the settings of both directions, for instance between two
    /// benchmark profiles sharing one pair of namespaces. Packets still in
    /// flight are dropped and the counters start again from zero; returns
    /// once both forwarders run with the new settings (or after 2 s).
    pub fn set_config(&mut self, to_server: DirConfig, to_client: DirConfig) {
        for (r, c) in self
            .retune
            .iter()
            .zip([to_server.clone(), to_client.clone()])
        {
            if let Ok(mut n) = r.next.lock() {
                *n = Some(c);
            }
            r.wanted.fetch_add(1, Ordering::Release);
        }
        self.cfg.to_server = to_server;
        self.cfg.to_client = to_client;
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until
            && self
                .retune
                .iter()
                .any(|r| r.applied.load(Ordering::Acquire) < r.wanted.load(Ordering::Acquire))
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.started = Instant::now();
    }

    /// What the link has done so far (updated every 100 ms).
    pub fn report(&self) -> Report {
        let get = |s: &Arc<Mutex<Stats>>| s.lock().map(|s| s.clone()).unwrap_or_default();
        Report {
            to_server: get(&self.stats[0]),
            to_client: get(&self.stats[1]),
            elapsed: self.started.elapsed(),
        }
    }

    fn teardown(&mut self) {
        if self.torn_down {
            return;
        }
        self.torn_down = true;
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The TUN descriptors were in the threads' Arcs: closed by now, so
        // the devices are gone; the namespaces go with their state file.
        remove_link(&self.cfg.name);
    }

    /// Stop forwarding, remove the namespaces, and say what was done.
    pub fn down(mut self) -> Report {
        self.teardown();
        self.report()
    }
}

impl Drop for NetLink {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// What both directions did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub to_server: Stats,
    pub to_client: Stats,
    pub elapsed: Duration,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        for (what, s) in [
            ("to-server", &self.to_server),
            ("to-client", &self.to_client),
        ] {
            writeln!(
                f,
                "{what}: {} packets in, {} out ({:.1} MB out, {:.1} Mbit/s avg); \
                 drops: queue {}, loss {}; reordered {}; queue peak {} B / {} packets; write errors {}",
                s.packets_in,
                s.packets_out,
                s.bytes_out as f64 / 1e6,
                s.bytes_out as f64 * 8.0 / 1e6 / secs,
                s.drops_queue,
                s.drops_loss,
                s.reordered,
                s.queue_peak_bytes,
                s.queue_peak_packets,
                s.write_errors,
            )?;
        }
        write!(f, "elapsed {:.1} s", secs)
    }
}

/// Most packets read in one go before due packets are released again, so a
/// flood in one direction cannot delay releases by more than this many reads.
const READ_BATCH: usize = 64;
/// Longest sleep, so `stop` is seen within this.
const MAX_SLEEP: Duration = Duration::from_millis(50);

/// The descriptors one forwarder moves packets between.
struct Ends {
    input: RawFd,
    output: RawFd,
    buf_len: usize,
    /// Packets carry a `virtio_net_hdr` and may be super-packets.
    offload: bool,
}

/// What a forwarder shares with its [`NetLink`].
struct Control<'a> {
    stop: &'a AtomicBool,
    shared: &'a Mutex<Stats>,
    retune: &'a Retune,
    origin: Instant,
}

/// Hand one packet read from an offloading TUN (virtio header first) to
/// the link. A TCP super-packet goes on whole when the wire loses none of
/// its segments, else it is cut and each segment meets its own fate; with
/// reordering on, it is always cut (a held-back super-packet would reorder
/// 44 segments at once).
fn arrive_offloaded(dir: &mut Direction<Packet>, now: Duration, data: &[u8]) {
    let len = data.len();
    let (Some(h), Some(ip)) = (VnetHdr::parse(data), data.get(VNET_HDR_LEN..)) else {
        return;
    };
    let Some(g) = Gso::of(&h, ip) else {
        let _ = dir.arrive(
            now,
            ip.len(),
            Packet {
                buf: data.to_vec(),
                len,
            },
        );
        return;
    };
    let must_cut = dir.config().reorder > 0.0;
    let fates = if must_cut {
        None
    } else {
        dir.draw_losses(g.segments())
    };
    if !must_cut && fates.is_none() {
        let whole = Packet {
            buf: data.to_vec(),
            len,
        };
        let _ = dir.arrive_fated(now, g.wire_bytes(), g.segments(), whole, Some(false));
        return;
    }
    cut_tcp4(&g, ip, |i, buf| {
        let lost = fates.as_ref().and_then(|f| f.get(i).copied());
        let len = buf.len();
        let seg = Packet { buf, len };
        let _ = dir.arrive_fated(now, len - VNET_HDR_LEN, 1, seg, lost);
    });
}

/// One direction's loop: read packets from `input`, pass them through
/// `dir`, write them to `output` when due.
fn forward(ends: Ends, mut dir: Direction<Packet>, seed: u64, ctl: &Control<'_>) {
    let Ends {
        input,
        output,
        buf_len,
        offload,
    } = ends;
    let Control {
        stop,
        shared,
        retune,
        origin,
    } = *ctl;
    // Sleep to the microsecond, not the default 50 us of timer slack: at
    // 1 Gbit/s a 1500-byte packet is 12 us of link time.
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain number.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64) };
    // One read buffer of a super-packet's size; each packet is copied out
    // at its own size, so the ACKs of a fast transfer do not each pin 64 kB.
    let mut scratch = vec![0u8; buf_len];
    let mut write_errors = 0u64;
    let mut last_publish = Duration::ZERO;
    let publish = |dir: &Direction<Packet>, write_errors: u64| {
        if let Ok(mut s) = shared.lock() {
            *s = dir.stats().clone();
            s.write_errors = write_errors;
        }
    };
    let mut applied = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let wanted = retune.wanted.load(Ordering::Acquire);
        if wanted != applied {
            if let Some(c) = retune.next.lock().ok().and_then(|mut n| n.take()) {
                dir = Direction::new(c, seed.wrapping_add(wanted));
                write_errors = 0;
            }
            applied = wanted;
            publish(&dir, write_errors);
            retune.applied.store(applied, Ordering::Release);
        }
        let now = origin.elapsed();
        while let Some(p) = dir.pop_due(now) {
            // SAFETY: writing p.len initialised bytes of p.buf to our fd.
            let n = unsafe { libc::write(output, p.buf.as_ptr().cast(), p.len) };
            if n < 0 {
                write_errors += 1;
            }
        }
        let mut read = 0;
        while read < READ_BATCH {
            // SAFETY: reading at most scratch.len() bytes into scratch.
            let n = unsafe { libc::read(input, scratch.as_mut_ptr().cast(), scratch.len()) };
            // EAGAIN (nothing more now), an error, or nothing.
            let Some(data) = usize::try_from(n)
                .ok()
                .filter(|l| *l > 0)
                .and_then(|l| scratch.get(..l))
            else {
                break;
            };
            read += 1;
            let now = origin.elapsed();
            if offload {
                arrive_offloaded(&mut dir, now, data);
            } else {
                let len = data.len();
                let _ = dir.arrive(
                    now,
                    len,
                    Packet {
                        buf: data.to_vec(),
                        len,
                    },
                );
            }
        }
        let now = origin.elapsed();
        if now.saturating_sub(last_publish) >= Duration::from_millis(100) {
            publish(&dir, write_errors);
            last_publish = now;
        }
        if read == READ_BATCH {
            continue;
        }
        let wait = dir
            .next_release()
            .map_or(MAX_SLEEP, |t| t.saturating_sub(origin.elapsed()))
            .min(MAX_SLEEP);
        if wait.is_zero() {
            continue;
        }
        let mut pfd = libc::pollfd {
            fd: input,
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one pollfd, a valid timespec, no signal mask change.
        unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    }
    publish(&dir, write_errors);
}
