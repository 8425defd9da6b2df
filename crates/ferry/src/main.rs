//! The ferry command line: flags and glue. The work lives in the library
//! crates (`ferry-engine`, `ferry-ssh`, `ferry-sftp`); this file turns
//! flags into [`ferry_engine::CopyOptions`], shows progress, and maps
//! errors to exit codes:
//! 0 ok, 1 network or other, 2 usage, 3 authentication or host key,
//! 4 remote error (the server refused, with its message and the path),
//! 5 local I/O error.
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ferry_engine::{CopyOptions, Event, Location, Stats, Transfer, TransferError};

/// A line on stderr, as `eprintln!`, but a stderr whose reader went away
/// (`ferry cp ... 2>&1 | head`) loses the line instead of panicking: the
/// copy goes on and its exit code stays its own.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod ftp_args;
mod http_args;
mod prompt;
mod s3_args;
mod serve;
mod sync_cmd;

/// Transfers allocate and free many buffers of 32 KiB - 1 MiB per second;
/// glibc's malloc maps and unmaps most of them, and the page faults cost
/// ~10% of a download's CPU (perf, docs/internals/sftp.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "ferry",
    version,
    about = "Move files fast over SFTP, HTTP(S) and FTP(S)",
    propagate_version = true
)]
struct Cli {
    /// More logging (-v info, -vv debug); also FERRY_LOG=filter.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Copy files between any two of: local paths, sftp:// URLs (or scp-style host:path), http(s):// and ftp(s):// URLs.
    #[command(arg_required_else_help = true)]
    Cp(CpArgs),
    /// Make DST a copy of the tree SRC (one way, any two locations): copy what is missing or differs, with --delete remove what SRC lacks.
    #[command(arg_required_else_help = true)]
    Sync(sync_cmd::SyncArgs),
    /// Compare two trees and print what differs; exit 0 only if they match (1 if they differ).
    #[command(arg_required_else_help = true)]
    Check(sync_cmd::CheckArgs),
    /// List a directory (or a tree, with -R) at any location.
    #[command(arg_required_else_help = true)]
    Ls(sync_cmd::LsArgs),
    /// Serve a directory over SFTP (SSH), HTTPS and, with --ftp, FTPS; authenticated, read-only by default.
    Serve(serve::ServeArgs),
    /// The scorecard: ferry and the installed peers (OpenSSH, curl, aria2,
    /// lftp, rclone; sshd, nginx, vsftpd) on the standard data sets,
    /// verified, in one table; or, with a URL, the best settings for a server.
    Bench(ferry_bench::BenchArgs),
    /// Print a shell completion script: ferry completions bash > /etc/bash_completion.d/ferry
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (ferry.1), or write one page per command into DIR.
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Args)]
struct CpArgs {
    /// Sources then the destination: local paths, sftp://[user@]host[:port]/path
    /// (sftp://host/~/path is relative to home), [user@]host:path as in scp,
    /// http(s)://[user:pass@]host[:port]/path (a directory URL ends with /),
    /// or ftp(s)://[user[:pass]@]host[:port]/path (relative to the login
    /// directory; /%2F/path is absolute; anonymous without a user).
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    paths: Vec<String>,
    /// Copy directories recursively.
    #[arg(short, long)]
    recursive: bool,
    /// Keep modification times and permission bits.
    #[arg(short, long)]
    preserve: bool,
    /// Continue partial files (checked against the source) instead of starting over.
    #[arg(long)]
    resume: bool,
    /// Print a JSON summary on stdout when done.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    show: ShowArgs,
    #[command(flatten)]
    conn: ConnArgs,
}

/// Progress display.
#[derive(Args)]
struct ShowArgs {
    /// No progress bar.
    #[arg(short, long)]
    quiet: bool,
    /// Show the progress bar even when stderr is not a terminal.
    #[arg(long, conflicts_with = "quiet")]
    progress: bool,
}

impl ShowArgs {
    fn visible(&self) -> bool {
        !self.quiet && (self.progress || std::io::stderr().is_terminal())
    }
}

/// How to connect and how hard to push: the flags every command that
/// talks to servers shares (cp, sync, check, ls).
#[derive(Args)]
struct ConnArgs {
    /// Files in flight at once [default: 64; FTP: 8, one control connection each].
    #[arg(short = 'P', long = "parallel", value_name = "N")]
    parallel: Option<usize>,
    /// SSH connections to use; a large file is split into ranges over them
    /// [default: 2 for downloads, 4 for uploads, 1 to a server with a large
    /// window such as ferry serve, as measured]. Over HTTP(S):
    /// byte ranges of each file fetched in parallel (h2 streams or HTTP/1.1
    /// connections) [default: 1]. Over FTP: ranges of each file, REST+RETR on
    /// one connection each [default: 1].
    #[arg(long, value_name = "N")]
    streams: Option<usize>,
    /// Without --streams, on a long path (a TCP handshake of 10 ms or
    /// more): most connections one big file (32 MiB or more) is widened
    /// over, doubling while the measured rate grows [default: 16; 1: never
    /// more than the protocol's default].
    #[arg(long, value_name = "N", default_value_t = CopyOptions::default().max_streams)]
    max_streams: usize,
    /// Bytes per SFTP request (e.g. 32k, 256k, 1M); capped by the server's limits.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    chunk: Option<u64>,
    /// Most requests in flight per file (the window adapts below this).
    #[arg(long, value_name = "N", default_value_t = CopyOptions::default().max_depth)]
    depth: usize,
    /// SSH receive window per connection (e.g. 2M, 64M; default 64M, 4M
    /// with OpenSSH servers, whose sshd buffers what its socket cannot take).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    window: Option<u64>,
    /// Most bytes in flight per SFTP stream (tuning; default 32M, the
    /// window adapts below this).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, hide = true)]
    inflight: Option<u64>,
    /// Largest SSH packet we accept from the server (tuning; default and
    /// maximum 255k).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, hide = true)]
    ssh_packet: Option<u64>,
    /// ssh config file (only this file is read, as with ssh -F).
    #[arg(short = 'F', value_name = "FILE")]
    ssh_config: Option<PathBuf>,
    /// Identity (private key) file; may be repeated.
    #[arg(short = 'i', value_name = "FILE")]
    identity: Vec<PathBuf>,
    /// ssh option, e.g. -o StrictHostKeyChecking=accept-new; may be repeated.
    #[arg(short = 'o', value_name = "KEY=VALUE")]
    ssh_option: Vec<String>,
    /// Reach the SSH server through these jump hosts, in order, as ssh -J:
    /// [user@]host[:port][,...]. Each hop uses its own Host block (User,
    /// Port, IdentityFile, known_hosts) and its host key is checked under
    /// its own name. Beats ProxyJump and ProxyCommand in ssh_config.
    #[arg(short = 'J', value_name = "[USER@]HOST[:PORT][,...]")]
    jump: Option<String>,
    /// A connection that delivers no byte for this many seconds has
    /// stalled: it is cut and the file or range is tried again. A hash
    /// command run over SSH (check -c, sync -c) gets this plus its file's
    /// size at 50 MB/s; then the file is read to hash it instead.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    timeout: u64,
    /// TCP congestion control of ferry's connections: auto (BBR when the
    /// kernel lets us, else the system's), system (the system default,
    /// net.ipv4.tcp_congestion_control), or an algorithm the kernel offers
    /// (bbr, cubic, reno, ...; if it refuses, ferry warns and uses the
    /// system default). BBR keeps its rate on links that lose packets at
    /// random, where cubic halves it on every loss.
    #[arg(
        long,
        value_name = "auto|system|NAME",
        default_value = "auto",
        env = "FERRY_CONGESTION"
    )]
    congestion: ferry_tcp::Congestion,
    /// Attempts per file or range for failures another try may cure (a
    /// lost connection, HTTP 5xx, FTP 421), with backoff and jitter.
    #[arg(long, value_name = "N", default_value_t = CopyOptions::default().retries)]
    retries: u32,
    /// Compression of what ferry sends to ferry serve: SSH, and HTTP(S)
    /// uploads (Content-Encoding: zstd, only where the server says it
    /// takes it). auto (the default: SSH with ferry serve is zstd at the
    /// level the transfer measures best, down to storing packets; none
    /// with OpenSSH; HTTP uploads go plain unless a measured plain first
    /// stretch of a file says coding pays; see
    /// docs/internals/compression.md), on (-C alone: zstd level 1 with
    /// ferry serve, zlib with OpenSSH), off, or a zstd level 1-19. The
    /// value needs `=`: --compress=off.
    #[arg(
        short = 'C',
        long,
        value_name = "auto|on|off|LEVEL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on"
    )]
    compress: Option<ferry_ssh::SshCompression>,
    #[command(flatten)]
    http: http_args::HttpArgs,
    #[command(flatten)]
    ftp: ftp_args::FtpArgs,
    #[command(flatten)]
    s3: s3_args::S3Args,
}

impl ConnArgs {
    /// The copy options these flags describe (recursive, preserve and
    /// resume are the command's own).
    fn options(self) -> Result<CopyOptions, String> {
        if self.parallel == Some(0)
            || self.streams == Some(0)
            || self.max_streams == 0
            || self.depth == 0
            || self.retries == 0
        {
            return Err(
                "-P, --streams, --max-streams, --depth and --retries take a number of at least 1"
                    .into(),
            );
        }
        if self.timeout == 0 {
            return Err("--timeout takes a number of seconds of at least 1".into());
        }
        // Process-wide: every socket ferry makes from here on (SSH, HTTP,
        // FTP, in whichever crate) picks it up.
        ferry_tcp::set_congestion(self.congestion);
        let mut opts = CopyOptions {
            parallel: self.parallel,
            streams: self.streams,
            max_streams: self.max_streams,
            chunk: match self.chunk {
                Some(c) if c > 16 * 1024 * 1024 => return Err("--chunk: at most 16M".into()),
                Some(c) => Some(c as u32),
                None => None,
            },
            max_depth: self.depth,
            timeout: Duration::from_secs(self.timeout),
            retries: self.retries,
            ..CopyOptions::default()
        };
        opts.connect.config_file = self.ssh_config;
        opts.connect.identity_files = self.identity;
        opts.connect.options = self.ssh_option;
        opts.connect.proxy_jump = self.jump;
        opts.connect.compression = self.compress.unwrap_or_default();
        // A person may be asked (passwords, passphrases, new host keys) when
        // both ends of the terminal are there.
        opts.connect.interactive =
            std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        opts.connect.prompt = ferry_engine::PromptHandle::new(Arc::new(prompt::Terminal));
        // Tuning knobs of the HTTP path (docs/internals/http.md).
        opts.http_shards = std::env::var("FERRY_HTTP_SHARDS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok());
        opts.compressed = self.http.compressed;
        self.http.apply(&mut opts.http);
        self.ftp.apply(&mut opts.ftp);
        self.s3.apply(&mut opts.s3);
        if let Some(b) = self.inflight {
            opts.max_inflight = Some(b);
        }
        if let Some(p) = self.ssh_packet {
            opts.connect.max_packet = p.min(u64::from(ferry_engine::MAX_CHANNEL_PACKET)) as u32;
        }
        if let Some(w) = self.window {
            opts.connect.window_size = Some(w.min(u32::MAX as u64) as u32);
        }

        Ok(opts)
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 32768, 256k, 1M)"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use k, M or G)")),
    };
    n.checked_mul(mult)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("{s:?} is out of range"))
}

fn main() {
    if std::env::args_os()
        .skip(1)
        .find(|a| !a.as_encoded_bytes().starts_with(b"-"))
        .is_some_and(|a| ["cp", "sync", "check", "ls"].iter().any(|c| a == *c))
    {
        no_huge_pages();
    }
    // Matches kept to tell a flag given on the command line from a default
    // (saved per-host settings apply only to flags not given).
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    init_logging(cli.verbose);
    let code = match cli.cmd {
        Cmd::Cp(args) => run_cp(args, matches.subcommand_matches("cp")),
        Cmd::Sync(args) => {
            sync_cmd::run_sync(args, matches.subcommand_matches("sync"), cli.verbose)
        }
        Cmd::Check(args) => {
            sync_cmd::run_check(args, matches.subcommand_matches("check"), cli.verbose)
        }
        Cmd::Ls(args) => sync_cmd::run_ls(args),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ferry", &mut std::io::stdout());
            0
        }
        Cmd::Man { dir } => man_pages(dir),
        Cmd::Serve(args) => serve::run(args),
        Cmd::Bench(args) => ferry_bench::run(args),
    };
    std::process::exit(code);
}

/// `ferry man`: the top page on stdout, or every page (ferry.1,
/// ferry-cp.1, ferry-sync.1, ...) into a directory.
fn man_pages(dir: Option<PathBuf>) -> i32 {
    let cmd = Cli::command();
    let Some(dir) = dir else {
        return match clap_mangen::Man::new(cmd).render(&mut std::io::stdout()) {
            Ok(()) => 0,
            Err(e) => {
                say!("ferry: cannot write the man page: {e}");
                1
            }
        };
    };
    let mut pages = vec![(String::from("ferry"), cmd.clone())];
    for sub in cmd.get_subcommands() {
        pages.push((format!("ferry-{}", sub.get_name()), sub.clone()));
    }
    for (name, c) in pages {
        let file = dir.join(format!("{name}.1"));
        // clap names are &'static str; one page each, once per process.
        let c = c.name(&*Box::leak(name.clone().into_boxed_str()));
        let mut buf = Vec::new();
        let written = clap_mangen::Man::new(c)
            .render(&mut buf)
            .and_then(|()| std::fs::write(&file, &buf));
        if let Err(e) = written {
            say!("ferry: {}: cannot write the man page: {e}", file.display());
            return 1;
        }
    }
    0
}

/// `ferry cp` (and `sync`, `check`, `ls`) run without transparent huge
/// pages. mimalloc advises its arena for them, so the first touch of each
/// 2 MiB region faults in a huge page and the kernel zeroes all of it: for
/// 1000 x 20 kB over HTTPS, a ~30 MB heap, `clear_page_erms` under
/// `do_huge_pmd_anonymous_page` was 8% of ferry cp's samples, and the 1 GiB
/// downloads measured the same without them (docs/internals/http.md,
/// "Per-file costs"); for `sync -c` of 10,000 small files to ferry serve,
/// a third of the client's samples (every thread's first heap page, and
/// growing buffers; BENCHMARKS.md run sync-3). Not `bench`: the setting
/// is inherited across fork and exec, and `ferry bench` must start the
/// peers as they would run anywhere; `ferry serve` lives long enough for
/// its heap to be faulted in once. Before argument parsing, which already
/// grows the heap with 1000 URLs.
fn no_huge_pages() {
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        // suppaftp logs a failed TLS shutdown as an error; ferry reports
        // the failure itself.
        0 => "warn,suppaftp=off",
        // libunftp (ferry serve --ftp) logs every command at info, with
        // its whole session state in the span.
        1 => "info,russh=warn,libunftp=warn",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("FERRY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        // A closed stderr (`ferry cp -v ... 2>&1 | head`) loses the log,
        // not the copy: the fallback `eprintln!` would panic on it.
        .log_internal_errors(false);
    // Without -v, the library's warnings read as ferry's own messages
    // (`ferry: ...`), as they did when the engine printed them itself.
    let _ = if verbose == 0 && std::env::var_os("FERRY_LOG").is_none() {
        fmt.event_format(Plain).try_init()
    } else {
        fmt.try_init()
    };
}

/// `ferry: MESSAGE` for the warnings and errors shown without -v.
struct Plain;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        write!(w, "ferry: ")?;
        if *event.metadata().level() == tracing::Level::WARN {
            write!(w, "warning: ")?;
        }
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

fn run_cp(args: CpArgs, matches: Option<&clap::ArgMatches>) -> i32 {
    let Some((dst, srcs)) = args.paths.split_last() else {
        say!("ferry: usage: ferry cp SRC... DST");
        return 2;
    };
    let mut sources = Vec::new();
    for s in srcs {
        match Location::parse(s) {
            Ok(l) => sources.push(l),
            Err(e) => return usage(&e),
        }
    }
    let dest = match Location::parse(dst) {
        Ok(l) => l,
        Err(e) => return usage(&e),
    };
    let mut opts = match args.conn.options() {
        Ok(o) => o,
        Err(e) => return usage(&e),
    };
    opts.recursive = args.recursive;
    opts.preserve = args.preserve;
    opts.resume = args.resume;

    apply_saved_settings(&mut opts, &sources, &dest, matches);

    let stats = Arc::new(Stats::default());
    let show = args.show.visible();
    let done = Arc::new(AtomicBool::new(false));
    let bar = show.then(|| spawn_progress(stats.clone(), done.clone()));
    let interrupted = on_interrupt();
    // Each failed file is said once, as it fails; the end says how many.
    // Events come in 20 ms batches, as `ferry sync`'s: this thread is not
    // woken three times a file (a Ctrl-C acts up to 20 ms later).
    let transfer = Transfer::new(sources, dest, opts);
    let outcome = ferry_engine::block_on_batched(
        move || transfer.start(),
        std::time::Duration::from_millis(20),
        |ev| {
            stats.observe(ev);
            match ev {
                Event::FileDone(f) => {
                    if let Some(e) = &f.error {
                        if e.kind != ferry_engine::ErrorKind::Cancelled {
                            say!("ferry: {}", e.message);
                        }
                    }
                }
                Event::Warning(w) => say!("ferry: warning: {w}"),
                _ => {}
            }
            !interrupted.load(Ordering::Relaxed)
        },
    );
    done.store(true, Ordering::Relaxed);
    if let Some(c) = ferry_ssh::compression_report() {
        tracing::info!("{}", compression_line(&c));
    }
    if let Some(u) = ferry_http::encode::upload_report() {
        tracing::info!("{}", upload_compression_line(&u));
    }
    if let Some(b) = bar {
        let _ = b.join();
    }
    let per_file = !outcome.files.is_empty();
    let failed = outcome.files.iter().filter(|f| f.error.is_some()).count();
    let planned = outcome.files.len();
    let result = outcome.into_result();
    if let (true, Err(e)) = (per_file, &result) {
        if e.kind() != ferry_engine::ErrorKind::Cancelled {
            // One file's failure was said as it failed; a count adds
            // nothing to it.
            if planned > 1 {
                say!("ferry: {failed} of {planned} files failed");
            }
            return e.exit_code();
        }
    }
    match result {
        Ok(s) => {
            if args.json {
                let mbps = if s.seconds > 0.0 {
                    s.bytes as f64 / s.seconds / 1e6
                } else {
                    0.0
                };
                let mut summary = serde_json::json!({
                    "bytes": s.bytes,
                    "seconds": s.seconds,
                    "files": s.files,
                    "mbps": mbps,
                    "protocol": s.protocol,
                    "streams": s.streams,
                    "chunk": s.chunk,
                });
                if let Some(c) = &s.cipher {
                    summary["cipher"] = c.as_str().into();
                }
                if let Some(c) = ferry_ssh::compression_report() {
                    summary["compression"] = compression_json(&c);
                }
                if let Some(u) = ferry_http::encode::upload_report() {
                    summary["compression"] = upload_compression_json(&u);
                }
                println!("{summary}");
            }
            0
        }
        Err(e) => {
            report(&e);
            e.exit_code()
        }
    }
}

/// `ferry bench URL --save` keeps the best settings per host in
/// ~/.config/ferry/hosts.toml; they apply to flags not on the command line.
fn apply_saved_settings(
    opts: &mut CopyOptions,
    sources: &[Location],
    dest: &Location,
    matches: Option<&clap::ArgMatches>,
) {
    let sftp_key = |r: &ferry_engine::RemoteSpec| format!("{}:{}", r.host, r.port.unwrap_or(22));
    let http_key = |h: &ferry_engine::HttpSpec| {
        ferry_bench::hosts::http_key(h.url.https, &h.url.host, h.url.port)
    };
    let ftp_key = |f: &ferry_engine::FtpSpec| {
        let (scheme, port) = if f.implicit_tls {
            ("ftps", 990)
        } else {
            ("ftp", 21)
        };
        ferry_bench::hosts::scheme_key(scheme, &f.host, f.port.unwrap_or(port))
    };
    let (key, upload) = match (dest, sources.first()) {
        (Location::Sftp(r), _) => (sftp_key(r), true),
        (Location::Http(h), _) => (http_key(h), true),
        (Location::Ftp(f), _) => (ftp_key(f), true),
        (_, Some(Location::Sftp(r))) => (sftp_key(r), false),
        (_, Some(Location::Http(h))) => (http_key(h), false),
        (_, Some(Location::Ftp(f))) => (ftp_key(f), false),
        _ => return,
    };
    let Some(path) = ferry_bench::hosts::default_path() else {
        return;
    };
    let Some(t) = ferry_bench::hosts::lookup_key(&path, &key, upload) else {
        return;
    };
    let given = |id: &str| {
        matches.and_then(|m| m.value_source(id)) == Some(clap::parser::ValueSource::CommandLine)
    };
    if let (false, Some(v)) = (given("streams"), t.streams) {
        opts.streams = Some(v);
    }
    if let (false, Some(v)) = (given("parallel"), t.parallel) {
        opts.parallel = Some(v);
    }
    if let (false, Some(v)) = (given("chunk"), t.chunk) {
        opts.chunk = Some(v.min(16 << 20) as u32);
    }
    if let (false, Some(v)) = (given("depth"), t.depth) {
        opts.max_depth = v;
    }
    if let (false, false, Some(v)) = (given("http1"), given("http2"), t.http) {
        opts.http.version = match v {
            ferry_bench::hosts::HttpVersion::Http1 => ferry_engine::HttpVersion::Http1,
            ferry_bench::hosts::HttpVersion::Http2 => ferry_engine::HttpVersion::Http2,
        };
    }
    if let (false, Some(v)) = (given("compressed"), t.compressed) {
        opts.compressed = v;
    }
    // SSH compression, saved for SFTP hosts only (`-C` on the command line,
    // or `Compression yes` in ssh_config, still turn it on).
    // The sweep measured zlib (`-C`): a saved "on" turns compression on; a
    // saved "off" leaves the default `auto`, which stores unless
    // compressing pays.
    if let (false, Some(true)) = (given("compress"), t.compress) {
        opts.connect.compression = ferry_ssh::SshCompression::On;
    }
    tracing::info!(
        "saved settings for {key} from {}: {} (flags given on the command line win)",
        path.display(),
        t.describe()
    );
}

/// The first Ctrl-C (or SIGTERM) cancels the copy: every range stops at
/// its next piece, part files stay for --resume, exit 130. A second one
/// ends the process at once.
fn on_interrupt() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let _ = std::thread::Builder::new()
        .name("ferry-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut int), Ok(mut term)) =
                    (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
                else {
                    return;
                };
                for n in 0.. {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    if n > 0 {
                        std::process::exit(130);
                    }
                    say!("\nferry: stopping; part files are kept for --resume (again to quit at once)");
                    f.store(true, Ordering::Relaxed);
                }
            });
        });
    flag
}

/// SSH compression for `--json`: methods, the levels our side sent at
/// (zstd's or zlib's; 0: stored), payload bytes before ("plain") and after
/// ("wire") compression, zstd and zlib alike.
fn compression_json(c: &ferry_ssh::CompressionReport) -> serde_json::Value {
    serde_json::json!({
        "method_out": c.method_out,
        "method_in": c.method_in,
        "levels_sent": c.levels_sent,
        "sent_plain": c.sent_plain,
        "sent_wire": c.sent_wire,
        "received_plain": c.received_plain,
        "received_wire": c.received_wire,
        "key_exchanges": c.key_exchanges,
        "zlib_switches": c.zlib_switches,
    })
}

/// HTTP uploads coded with zstd (`Content-Encoding: zstd` to ferry serve)
/// for `--json`: the same names as SSH's where they mean the same.
/// `sent_uncoded`: file bytes `auto` sent plain (no coding at all) to a
/// server that takes zstd.
fn upload_compression_json(u: &ferry_http::encode::UploadReport) -> serde_json::Value {
    serde_json::json!({
        "method_out": upload_method(u),
        "sent_plain": u.plain,
        "sent_wire": u.wire,
        "segments_compressed": u.compressed,
        "segments_stored": u.stored,
        "sent_uncoded": u.uncoded,
    })
}

fn upload_method(u: &ferry_http::encode::UploadReport) -> &'static str {
    if u.compressed + u.stored > 0 {
        "zstd (HTTP Content-Encoding)"
    } else {
        "none"
    }
}

/// HTTP upload compression for `-v`.
fn upload_compression_line(u: &ferry_http::encode::UploadReport) -> String {
    format!(
        "compression: uploads {}, {} -> {} bytes ({:.2}x), {} MiB segments compressed, {} stored; {} bytes sent plain by auto",
        upload_method(u),
        u.plain,
        u.wire,
        u.plain as f64 / u.wire.max(1) as f64,
        u.compressed,
        u.stored,
        u.uncoded,
    )
}

/// SSH compression for `-v`.
fn compression_line(c: &ferry_ssh::CompressionReport) -> String {
    let ratio = |wire: u64, plain: u64| {
        if plain > 0 {
            format!(" ({:.2}x)", plain as f64 / wire.max(1) as f64)
        } else {
            String::new()
        }
    };
    format!(
        "compression: out {} levels {:?} (0 = stored), {} -> {} bytes{}; in {}, {} -> {} bytes{}",
        c.method_out,
        c.levels_sent,
        c.sent_plain,
        c.sent_wire,
        ratio(c.sent_wire, c.sent_plain),
        c.method_in,
        c.received_wire,
        c.received_plain,
        ratio(c.received_wire, c.received_plain),
    )
}

fn usage(msg: &str) -> i32 {
    say!("ferry: {msg}");
    say!("usage: ferry cp [OPTIONS] SRC... DST   (ferry cp --help for more)");
    2
}

fn report(e: &TransferError) {
    say!("ferry: {e}");
}

fn spawn_progress(stats: Arc<Stats>, done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(10));
        let style = indicatif::ProgressStyle::with_template(
            "{bar:30.cyan/blue} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        loop {
            let (b, bt, f, ft) = stats.snapshot();
            bar.set_length(bt);
            bar.set_position(b);
            bar.set_message(format!("files {f}/{ft}"));
            if done.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bar.finish_and_clear();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand's flags are unique and well formed (clap checks
    /// this only when a subcommand is used).
    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
