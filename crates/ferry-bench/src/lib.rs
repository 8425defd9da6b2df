//! ferry's scorecard: the standard data sets moved by ferry and by every
//! peer client that is installed, against `ferry serve` and the peer
//! servers, on loopback or through the link emulator, each transfer
//! verified by blake3; one table, a JSON file and an SVG plot.
//!
//! - [`data`]: the deterministic data sets (huge, large, medium, small).
//! - [`servers`]: `ferry serve`, OpenSSH sshd, nginx and vsftpd on free
//!   loopback ports, stopped by PID (ferry's HTTP and FTP tests start nginx
//!   and vsftpd through these too).
//! - [`clients`]: the clients and the command line of each cell.
//! - [`run`]: profiles, cells, runs, medians.
//! - [`report`]: the table, machine description, ratios and the plot.
//! - [`ceiling`]: the work directory's file system and its ceiling.
//! - [`remote`]: `ferry bench sftp://host/dir` (or `https://`), the settings sweep, and
//!   [`hosts`], where `--save` keeps the result for `ferry cp`.
//! - [`proc`]: process groups, `wait4` measurements, Ctrl-C clean-up.
//!
//! The `ferry` binary exposes it as `ferry bench` ([`BenchArgs`], [`run`]).
//! docs/internals/bench.md explains what is measured and how to read it.
use std::path::PathBuf;

pub mod ceiling;
pub mod clients;
pub mod data;
pub mod hosts;
pub mod proc;
pub mod remote;
pub mod report;
pub mod run;
pub mod servers;

/// `ferry bench`: flags.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Remote mode: sweep ferry cp's settings against this server
    /// (sftp://[user@]host[:port]/dir, https://host[:port]/dir, or
    /// ftp:// / ftps://[user[:pass]@]host[:port]/dir; a scratch dir is made
    /// in dir and removed after) and print the best.
    #[arg(value_name = "URL")]
    pub url: Option<String>,
    /// Remote mode: store the best settings for the host in
    /// ~/.config/ferry/hosts.toml, where ferry cp finds them.
    #[arg(long, requires = "url")]
    pub save: bool,
    /// Remote mode: ssh config file, as for ferry cp.
    #[arg(short = 'F', value_name = "FILE", requires = "url")]
    pub ssh_config: Option<PathBuf>,
    /// Remote mode: identity file; may be repeated.
    #[arg(short = 'i', value_name = "FILE", requires = "url")]
    pub identity: Vec<PathBuf>,
    /// Remote mode: ssh option (KEY=VALUE); may be repeated.
    #[arg(short = 'o', value_name = "KEY=VALUE", requires = "url")]
    pub ssh_option: Vec<String>,
    /// Remote mode: jump hosts, [user@]host[:port][,...], as for ferry cp -J.
    #[arg(short = 'J', value_name = "[USER@]HOST[:PORT][,...]", requires = "url")]
    pub jump: Option<String>,
    /// Remote mode over HTTPS: trust the certificates in this PEM file, as for ferry cp.
    #[arg(long, value_name = "FILE", requires = "url")]
    pub cacert: Option<PathBuf>,
    /// Remote mode over HTTPS: accept only this server certificate (sha256:HEX); may be repeated.
    #[arg(long, value_name = "sha256:HEX", requires = "url")]
    pub pin: Vec<String>,
    /// Remote mode over HTTPS: do not check the certificate (dangerous).
    #[arg(long, requires = "url")]
    pub insecure: bool,
    /// Remote mode over HTTP(S): bearer token (ferry serve's), also FERRY_TOKEN.
    #[arg(
        long,
        env = "FERRY_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        requires = "url"
    )]
    pub token: Option<String>,
    /// Data sets, comma-separated: huge (1 x 1 GiB), large (10 x 12 MB),
    /// medium (100 x 1 MB), small (1000 x 20 kB); also wide (50 x 100 MB).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "huge,large,medium,small",
        value_name = "SETS"
    )]
    pub sets: Vec<String>,
    /// Smaller sets and one run per cell: a smoke run of a few minutes.
    #[arg(long)]
    pub quick: bool,
    /// Text-like files instead of random bytes (in remote mode too: SSH
    /// and HTTP compression only pay on such data).
    #[arg(long)]
    pub compressible: bool,
    /// Runs per cell; the median is reported [default: 3, with --quick 1].
    #[arg(long, value_name = "N")]
    pub runs: Option<usize>,
    /// Network profiles: loopback, lan (1 ms RTT, 10 Gbit/s), wan (20 ms,
    /// 1 Gbit/s), rtt20 (20 ms, no cap), far (100 ms), slow200 (20 ms,
    /// 200 Mbit/s: the compression cells' link), emulated by a
    /// delaying TCP proxy; and packet-level links between network
    /// namespaces (root only): wan50 (50 ms, 1 Gbit/s), loss100 (100 ms,
    /// 1 Gbit/s, 0.1% loss), lossy200 (200 ms, 100 Mbit/s, 1% loss), lan10
    /// (10 ms, no cap).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "loopback",
        value_name = "PROFILES"
    )]
    pub profiles: Vec<String>,
    /// TCP congestion control (bbr, cubic, ...) of both ends under the
    /// packet-level profiles, set in their network namespaces [default: what
    /// the kernel gives a new namespace].
    #[arg(long, value_name = "NAME")]
    pub net_cc: Option<String>,
    /// Directions, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "download,upload",
        value_name = "DIRS"
    )]
    pub directions: Vec<String>,
    /// Only these clients (ids as in the JSON: ferry, sftp, scp, rclone,
    /// lftp-mirror, lftp-get, lftp-pget, ferry-https, ferry-https-s8, curl, curl-h1,
    /// ferry-zstd and ferry-https-zstd (compression: only when named or with
    /// --compressible),
    /// curl-Z, aria2c, ferry-ftp, ferry-ftp-s8, curl-ftp, lftp-mirror-ftp, lftp-get-ftp,
    /// lftp-pget-ftp) [default: all that are installed].
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    pub clients: Vec<String>,
    /// Work directory for data sets and transfers (kept; data sets are
    /// reused) [default: a temp dir under /dev/shm, removed after].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Where the temporary work directory is made when --dir is not given
    /// [default: /dev/shm, a tmpfs]; e.g. /var/tmp for a disk file system.
    /// The report names the file system and measures its ceiling (a plain
    /// local copy of each set into it).
    #[arg(long, value_name = "DIR", conflicts_with = "dir")]
    pub tmpdir: Option<PathBuf>,
    /// Write every cell, the machine and the tool versions here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a bar chart (SVG) here.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Seconds before one transfer is killed [default: 1800, --quick 180].
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Factor on file sizes (tests).
    #[arg(long, hide = true)]
    pub scale: Option<f64>,
    /// The ferry binary to measure [default: this one].
    #[arg(long, hide = true)]
    pub ferry: Option<PathBuf>,
    /// A second ferry binary (e.g. the build before a change) measured
    /// beside this one in the same run, cell by cell, as the clients
    /// ferry-base, ferry-base-https and ferry-base-ftp: the way to show a
    /// change kept every speed (docs/internals/bench.md).
    #[arg(long, value_name = "FERRY")]
    pub baseline: Option<PathBuf>,
    /// The ferry binary that runs `ferry serve` [default: --ferry].
    #[arg(long, hide = true)]
    pub serve_bin: Option<PathBuf>,
}

/// Run `ferry bench`; the process exit code.
pub fn run(args: BenchArgs) -> i32 {
    proc::install_signal_handler();
    if let Some(url) = &args.url {
        return match remote::run_remote(&args, url) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("ferry bench: {e:#}");
                1
            }
        };
    }
    let report = match run::run_local(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ferry bench: {e:#}");
            return 1;
        }
    };
    print!("{}", report::table(&report));
    // A ferry transfer that failed or delivered wrong bytes fails the run
    // (CI runs --quick); a peer's failure is reported in its cell only.
    let ferry_failed = report
        .cells
        .iter()
        .filter(|c| c.ferry && c.status == "failed")
        .count();
    let mut code = 0;
    if ferry_failed > 0 {
        eprintln!("ferry bench: {ferry_failed} of ferry's cells FAILED (see the table)");
        code = 1;
    }
    if let Some(path) = &args.json {
        match serde_json::to_vec_pretty(&report) {
            Ok(b) => {
                if let Err(e) = std::fs::write(path, b) {
                    eprintln!("ferry bench: cannot write {}: {e}", path.display());
                    code = 1;
                } else {
                    eprintln!("ferry bench: results written to {}", path.display());
                }
            }
            Err(e) => {
                eprintln!("ferry bench: {e}");
                code = 1;
            }
        }
    }
    if let Some(path) = &args.plot {
        if let Err(e) = std::fs::write(path, report::svg(&report)) {
            eprintln!("ferry bench: cannot write {}: {e}", path.display());
            code = 1;
        } else {
            eprintln!("ferry bench: plot written to {}", path.display());
        }
    }
    code
}
