//! `ferry-linkem`: command-line front end of the link emulator.
//!
//! `ferry-linkem net up|down|cleanup ...` runs the packet-level link between
//! two network namespaces (`net.rs`; see `NET_USAGE`). Without `net`, it
//! runs a delaying TCP proxy from `--listen` to `--upstream`, prints exactly
//! one line `listening ADDR` on stdout once bound, and runs until SIGTERM,
//! SIGINT, or until its standard input is closed (so a parent that dies
//! takes it along). `--delay-ms` is the ONE-WAY delay: 10 ms gives 20 ms RTT.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use ferry_linkem::net::{self, NetConfig, NetLink};
use ferry_linkem::netem::DirConfig;
use ferry_linkem::{LinkConfig, LinkEm};
use tokio::io::AsyncReadExt;
use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "\
usage: ferry-linkem --listen ADDR --upstream ADDR [--delay-ms MS] [--rate-mbps N]
                    [--max-buffer-mb N] [--no-stdin]

Forwards every TCP connection accepted on --listen to --upstream, delaying
the data by --delay-ms in EACH direction (so RTT = 2 x delay).

  --listen ADDR        address to bind, e.g. 127.0.0.1:0 (port 0 = any free port)
  --upstream ADDR      address to forward to, e.g. 127.0.0.1:2222
  --delay-ms MS        one-way delay in milliseconds (may be fractional; default 0)
  --rate-mbps N        cap each direction at N megabits/s, shared by all
                       connections (default: uncapped)
  --max-buffer-mb N    per-direction queue bound in MiB (default 64)
  --no-stdin           do not exit when standard input is closed

Prints `listening ADDR` once bound; exits on SIGTERM, SIGINT or stdin EOF.
";

struct Args {
    listen: SocketAddr,
    upstream: SocketAddr,
    cfg: LinkConfig,
    watch_stdin: bool,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut listen = None;
    let mut upstream = None;
    let mut cfg = LinkConfig::default();
    let mut watch_stdin = true;
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{what} needs a value"))
        };
        match name.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--listen" => listen = Some(parse_addr(&value("--listen")?)?),
            "--upstream" => upstream = Some(parse_addr(&value("--upstream")?)?),
            "--delay-ms" => {
                let ms = parse_number(&value("--delay-ms")?, "--delay-ms")?;
                cfg.one_way_delay = Duration::from_secs_f64(ms / 1000.0);
            }
            "--rate-mbps" => {
                let mbps = parse_number(&value("--rate-mbps")?, "--rate-mbps")?;
                if mbps <= 0.0 {
                    return Err("--rate-mbps must be positive".into());
                }
                cfg.rate_bytes_per_sec = Some((mbps * 1e6 / 8.0).round().max(1.0) as u64);
            }
            "--max-buffer-mb" => {
                let mb = parse_number(&value("--max-buffer-mb")?, "--max-buffer-mb")?;
                cfg.max_buffer = ((mb * 1024.0 * 1024.0) as usize).max(1);
            }
            "--no-stdin" => watch_stdin = false,
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen is required")?,
        upstream: upstream.ok_or("--upstream is required")?,
        cfg,
        watch_stdin,
    })
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse()
        .map_err(|_| format!("not an IP:PORT address: {s}"))
}

fn parse_number(s: &str, what: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{what}: not a non-negative number: {s}")),
    }
}

/// True when standard input is `/dev/null` (e.g. a background job of a
/// non-interactive shell): its immediate EOF must not stop the proxy.
fn stdin_is_dev_null() -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::metadata("/proc/self/fd/0"),
        std::fs::metadata("/dev/null"),
    ) {
        (Ok(a), Ok(b)) => a.rdev() == b.rdev() && a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

async fn wait_for_stop(watch_stdin: bool) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let stdin_eof = async {
        if !watch_stdin {
            return std::future::pending::<()>().await;
        }
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = stdin_eof => {}
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    let link = LinkEm::start(args.listen, args.upstream, args.cfg)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening {}", link.local_addr())
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot write to stdout: {e}"))?;
    }
    let watch_stdin = args.watch_stdin && !stdin_is_dev_null();
    let waited = wait_for_stop(watch_stdin).await;
    link.shutdown().await;
    waited.map_err(|e| format!("cannot install signal handlers: {e}"))
}

const NET_USAGE: &str = "\
usage: ferry-linkem net up --name NAME [--delay-ms MS] [--jitter-ms MS]
                           [--loss PCT] [--loss-burst N] [--rate-mbps N]
                           [--queue-kb N] [--reorder PCT] [--reorder-ms MS]
                           [--mtu N] [--seed N] [--cc NAME] [--no-offload]
       ferry-linkem net down --name NAME
       ferry-linkem net cleanup

`net up` creates network namespaces ferry-NAME-c (client, 198.18.0.1) and
ferry-NAME-s (server, 198.19.0.1) joined by a packet forwarder, prints them,
then `ready`, and runs until SIGINT/SIGTERM/SIGHUP, when it removes them and
prints what it did. Run programs on either side with `ip netns exec NS ...`.
Settings apply to each direction:

  --delay-ms MS     one-way delay (RTT = 2 x MS; default 0)
  --jitter-ms MS    uniform jitter around the delay (packets keep order)
  --loss PCT        random loss in percent, e.g. 0.1
  --loss-burst N    mean loss burst in packets (Gilbert-Elliott; default 1 =
                    independent losses)
  --rate-mbps N     bottleneck rate, megabits/s of IP packets (default none)
  --queue-kb N      bottleneck buffer in kB (default: one bandwidth-delay
                    product, rate x RTT, at least 64 kB); beyond it packets
                    are dropped
  --reorder PCT     share of packets held back --reorder-ms (default 1) so
                    later ones overtake them
  --mtu N           MTU of the link (default 1500)
  --seed N          seed of the random draws (default 1)
  --cc NAME         TCP congestion control in both namespaces (bbr, cubic,
                    ...; default: what a new namespace inherits)
  --no-offload      move one MTU-sized packet per system call instead of
                    taking TCP super-packets (GSO) from the kernel; slower,
                    for comparison

`net down` stops the link NAME (its process, then its namespaces, even when
that process was killed); `net cleanup` removes every link whose process is
gone. Needs root and /dev/net/tun.
";

fn net_config(mut it: impl Iterator<Item = String>) -> Result<NetConfig, String> {
    let mut name = None;
    let mut dir = DirConfig::default();
    let mut queue_kb = None;
    let mut mtu = 1500u32;
    let mut seed = 1u64;
    let mut congestion = None;
    let mut offload = true;
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        match flag.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--name" => name = Some(value()?),
            "--delay-ms" => dir.delay = ms(parse_number(&value()?, "--delay-ms")?),
            "--jitter-ms" => dir.jitter = ms(parse_number(&value()?, "--jitter-ms")?),
            "--reorder-ms" => dir.reorder_extra = ms(parse_number(&value()?, "--reorder-ms")?),
            "--loss" => dir.loss = percent(&value()?, "--loss")?,
            "--reorder" => dir.reorder = percent(&value()?, "--reorder")?,
            "--loss-burst" => dir.loss_burst = parse_number(&value()?, "--loss-burst")?,
            "--rate-mbps" => {
                let mbps = parse_number(&value()?, "--rate-mbps")?;
                if mbps <= 0.0 {
                    return Err("--rate-mbps must be positive".into());
                }
                dir.rate = Some((mbps * 1e6 / 8.0).round().max(1.0) as u64);
            }
            "--queue-kb" => queue_kb = Some(parse_number(&value()?, "--queue-kb")?),
            "--mtu" => {
                mtu = value()?
                    .parse()
                    .ok()
                    .filter(|m| (576..=65535).contains(m))
                    .ok_or("--mtu: a number from 576 to 65535")?
            }
            "--seed" => seed = value()?.parse().map_err(|_| "--seed: a number")?,
            "--cc" => congestion = Some(value()?),
            "--no-offload" => offload = false,
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    dir.queue_bytes = match (queue_kb, dir.rate) {
        (Some(kb), _) => ((kb * 1000.0) as usize).max(1),
        (None, Some(rate)) => DirConfig::bdp_queue(rate, dir.delay),
        (None, None) => DirConfig::default().queue_bytes,
    };
    let mut cfg = NetConfig::symmetric(&name.ok_or("--name is required")?, dir);
    cfg.mtu = mtu;
    cfg.seed = seed;
    cfg.congestion = congestion;
    cfg.offload = offload;
    Ok(cfg)
}

fn percent(s: &str, what: &str) -> Result<f64, String> {
    let p = parse_number(s, what)?;
    if p > 100.0 {
        return Err(format!("{what}: a percentage from 0 to 100"));
    }
    Ok(p / 100.0)
}

/// Block the stop signals in every thread (the forwarders inherit the
/// mask) so that only `sigwait` in the main thread receives them.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it,
    // and pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn net_main(mut it: impl Iterator<Item = String>) -> ExitCode {
    let fail = |msg: String| {
        if msg.is_empty() {
            print!("{NET_USAGE}");
            return ExitCode::SUCCESS;
        }
        eprintln!("ferry-linkem net: {msg}");
        ExitCode::FAILURE
    };
    match it.next().as_deref() {
        Some("up") => {
            let cfg = match net_config(it) {
                Ok(c) => c,
                Err(msg) if msg.is_empty() => return fail(msg),
                Err(msg) => {
                    eprintln!("ferry-linkem net: {msg}\n\n{NET_USAGE}");
                    return ExitCode::from(2);
                }
            };
            let set = block_stop_signals();
            let link = match NetLink::up(cfg) {
                Ok(l) => l,
                Err(e) => return fail(format!("cannot set up the link: {e}")),
            };
            println!("client {} {}", link.client_netns(), net::CLIENT_ADDR);
            println!("server {} {}", link.server_netns(), net::SERVER_ADDR);
            println!("ready");
            let _ = std::io::stdout().flush();
            let mut sig = 0;
            // SAFETY: set holds the blocked stop signals; sig is written.
            unsafe { libc::sigwait(&set, &mut sig) };
            let report = link.down();
            println!("{report}");
            ExitCode::SUCCESS
        }
        Some("down") => {
            let name = match (it.next().as_deref(), it.next()) {
                (Some("--name"), Some(n)) => n,
                _ => return fail("down: --name NAME is required".into()),
            };
            match net::down_by_name(&name) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => {
                    eprintln!("ferry-linkem net: no link named {name}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!("down {name}: {e}")),
            }
        }
        Some("cleanup") => {
            for n in net::cleanup_stale() {
                println!("removed {n}");
            }
            ExitCode::SUCCESS
        }
        Some("-h" | "--help") | None => fail(String::new()),
        Some(other) => fail(format!("unknown command {other:?}: up, down or cleanup")),
    }
}

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("net") {
        argv.next();
        return net_main(argv);
    }
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(msg) if msg.is_empty() => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("ferry-linkem: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ferry-linkem: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    // A blocking read of stdin may still be in flight; do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("ferry-linkem: {msg}");
            ExitCode::FAILURE
        }
    }
}
