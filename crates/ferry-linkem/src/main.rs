//! `ferry-linkem`: command-line front end of the link emulator.
//!
//! Runs a delaying TCP proxy from `--listen` to `--upstream`, prints exactly
//! one line `listening ADDR` on stdout once bound, and runs until SIGTERM,
//! SIGINT, or until its standard input is closed (so a parent that dies
//! takes it along). `--delay-ms` is the ONE-WAY delay: 10 ms gives 20 ms RTT.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

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

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
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
