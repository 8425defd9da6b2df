//! The local scorecard: data sets, servers, profiles, and every cell run
//! `--runs` times, interleaved run by run so that a slow minute of the
//! machine hurts every tool alike.
use std::collections::BTreeMap;
use std::fs;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::ceiling;
use crate::clients::{self, Client, Direction, Endpoint, Paths, Proto, ServerKind, CLIENTS};
use crate::data::{self, DataSet};
use crate::proc::{self, which};
use crate::servers::{self, ClientKey, FerryServe, Nginx, Sshd, Vsftpd};
use crate::BenchArgs;

/// How a profile's link is emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkMode {
    /// Loopback, nothing in between.
    None,
    /// `ferry_linkem::LinkEm`: a TCP proxy per server port that delays
    /// (and caps) the byte stream; TCP ends at the proxy, so loss and the
    /// sender's congestion control are not part of it.
    TcpProxy,
    /// `ferry_linkem::net`: servers in one network namespace, clients in
    /// another, IP packets delayed, queued at a bottleneck and lost between
    /// them, end-to-end TCP.
    Packet,
}

impl LinkMode {
    pub fn name(self) -> &'static str {
        match self {
            LinkMode::None => "loopback",
            LinkMode::TcpProxy => "TCP proxy",
            LinkMode::Packet => "packet-level",
        }
    }
}

/// A network profile: the link emulator's settings in front of every
/// server port (none for loopback).
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    pub name: String,
    pub rtt_ms: f64,
    /// Bandwidth cap per direction, megabits per second.
    pub rate_mbps: Option<u64>,
    /// Random loss per direction, percent (packet-level profiles only).
    pub loss_pct: f64,
    pub mode: LinkMode,
}

/// Every profile: name, RTT ms, cap Mbit/s, loss %, mode.
pub const PROFILES: &[(&str, f64, Option<u64>, f64, LinkMode)] = &[
    ("loopback", 0.0, None, 0.0, LinkMode::None),
    ("lan", 1.0, Some(10_000), 0.0, LinkMode::TcpProxy),
    ("wan", 20.0, Some(1_000), 0.0, LinkMode::TcpProxy),
    // The SFTP issue's long link: the delay alone, so that what limits a
    // client is its windows, not a bandwidth cap.
    ("rtt20", 20.0, None, 0.0, LinkMode::TcpProxy),
    ("far", 100.0, None, 0.0, LinkMode::TcpProxy),
    // Issue 21's slow link, where compression must multiply throughput.
    ("slow200", 20.0, Some(200), 0.0, LinkMode::TcpProxy),
    // Issue 26's WAN profiles, packet-level (docs/internals/wan.md).
    ("wan50", 50.0, Some(1_000), 0.0, LinkMode::Packet),
    ("loss100", 100.0, Some(1_000), 0.1, LinkMode::Packet),
    ("lossy200", 200.0, Some(100), 1.0, LinkMode::Packet),
    // No cap: the forwarder's own top rate is the limit.
    ("lan10", 10.0, None, 0.0, LinkMode::Packet),
];

impl Profile {
    pub fn parse(name: &str) -> Result<Profile> {
        let Some(&(_, rtt_ms, rate_mbps, loss_pct, mode)) = PROFILES.iter().find(|p| p.0 == name)
        else {
            bail!(
                "unknown profile {name:?}: choose from {}",
                PROFILES.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
            );
        };
        Ok(Profile {
            name: name.to_string(),
            rtt_ms,
            rate_mbps,
            loss_pct,
            mode,
        })
    }

    /// One direction of the packet-level link (packet-level profiles):
    /// half the RTT, the cap with a one-BDP bottleneck buffer, the loss.
    pub fn net_dir(&self) -> Option<ferry_linkem::netem::DirConfig> {
        if self.mode != LinkMode::Packet {
            return None;
        }
        let delay = Duration::from_secs_f64(self.rtt_ms / 2000.0);
        let rate = self.rate_mbps.map(|m| m * 1_000_000 / 8);
        let mut d = ferry_linkem::netem::DirConfig {
            delay,
            rate,
            loss: self.loss_pct / 100.0,
            ..Default::default()
        };
        if let Some(r) = rate {
            d.queue_bytes = ferry_linkem::netem::DirConfig::bdp_queue(r, delay);
        }
        Some(d)
    }

    /// What the report says about this profile's link.
    pub fn describe(&self) -> String {
        let cap = self
            .rate_mbps
            .map_or("no cap".to_string(), |m| format!("{m} Mbit/s"));
        match self.mode {
            LinkMode::None => format!("{}: loopback, no emulation", self.name),
            LinkMode::TcpProxy => format!(
                "{}: TCP proxy (ferry-linkem), {} ms RTT, {cap}; TCP ends at the proxy, so no loss reaches the sender",
                self.name, self.rtt_ms
            ),
            LinkMode::Packet => format!(
                "{}: packet-level link (ferry-linkem net: client and server in their own network namespaces), {} ms RTT, {cap}, {} % loss per direction, {}",
                self.name,
                self.rtt_ms,
                self.loss_pct,
                if self.rate_mbps.is_some() {
                    "one-BDP bottleneck buffer"
                } else {
                    "no bottleneck: the forwarder's top rate is the limit"
                }
            ),
        }
    }

    fn link(&self) -> Option<ferry_linkem::LinkConfig> {
        if self.mode != LinkMode::TcpProxy {
            return None;
        }
        let one_way = Duration::from_secs_f64(self.rtt_ms / 2000.0);
        let rate = self.rate_mbps.map(|m| m * 1_000_000 / 8);
        // With a cap, keep the queue in front of it near two
        // bandwidth-delay products (at least 1 MiB), not a bloated 64 MiB.
        let max_buffer = match rate {
            Some(r) => ((r as f64 * self.rtt_ms / 1000.0 * 2.0) as usize).max(1 << 20),
            None => ferry_linkem::DEFAULT_MAX_BUFFER,
        };
        Some(ferry_linkem::LinkConfig {
            one_way_delay: one_way,
            rate_bytes_per_sec: rate,
            max_buffer,
        })
    }
}

/// One measured run of a cell.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub seconds: f64,
    pub mb_per_s: Option<f64>,
    pub cpu_s: f64,
    pub rss_mb: f64,
    pub server_cpu_s: Option<f64>,
    pub ok: bool,
    pub error: Option<String>,
    /// 1-minute load average just before the run: other work on the
    /// machine skews the numbers.
    pub loadavg: Option<f64>,
}

/// One cell of the scorecard: a client against a server, for one set,
/// direction and profile.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub profile: String,
    pub set: String,
    pub direction: Direction,
    pub client: String,
    pub client_label: String,
    pub ferry: bool,
    pub server: ServerKind,
    pub protocol: Proto,
    /// "ok", "failed", "n/a" (a side that is not there yet) or "skipped"
    /// (a peer that is not installed).
    pub status: String,
    pub reason: Option<String>,
    /// Every run's result was hashed and matched the source.
    pub verified: bool,
    pub files: usize,
    pub bytes: u64,
    /// Median over the runs.
    pub mb_per_s: Option<f64>,
    /// Median client CPU seconds (user + system, with its children).
    pub cpu_s: Option<f64>,
    /// Largest peak RSS of the client over the runs, MB.
    pub rss_mb: Option<f64>,
    /// Median CPU seconds of the server's processes.
    pub server_cpu_s: Option<f64>,
    /// The client's and the server's CPU seconds per GB (10^9 bytes) moved.
    pub cpu_s_per_gb: Option<f64>,
    pub server_cpu_s_per_gb: Option<f64>,
    /// ferry's MB/s over the best peer's for the same profile, set,
    /// direction and protocol (ferry cells only).
    pub ratio: Option<f64>,
    /// The limit this cell ran at, if any: "disk" (at least
    /// [`crate::report::NEAR_LIMIT`] of a plain local copy into the work
    /// directory) or "cpu" (client and server together kept that share of
    /// every core busy).
    pub limit: Option<String>,
    /// Set on a ferry cell when it and the best peer ran within a few % of
    /// each other at a measured limit: "disk" (the work directory's file
    /// system, as fast as a plain local copy) or "cpu" (both ends together
    /// used every core). The ratio then says nothing about the tools.
    pub ceiling: Option<String>,
    pub runs: Vec<RunResult>,
}

/// Everything a run produced: what the report and JSON show.
#[derive(Debug, Serialize)]
pub struct Report {
    pub machine: serde_json::Value,
    pub parameters: serde_json::Value,
    pub sets: Vec<serde_json::Value>,
    pub notes: Vec<String>,
    pub cells: Vec<Cell>,
    /// The issues' speed goals this run can answer.
    pub goals: Vec<crate::report::GoalResult>,
}

struct Servers {
    ferry: std::result::Result<FerryServe, String>,
    sshd: std::result::Result<Sshd, String>,
    nginx: std::result::Result<Nginx, String>,
    vsftpd: std::result::Result<Vsftpd, String>,
    /// Why ferry serve's HTTPS side cannot be benchmarked, if it cannot.
    ferry_https_na: Option<String>,
}

impl Servers {
    fn pid(&self, kind: ServerKind) -> Option<i32> {
        match kind {
            ServerKind::FerryServe => self.ferry.as_ref().ok().map(|s| s.guard.pid()),
            ServerKind::Sshd => self.sshd.as_ref().ok().map(|s| s.guard.pid()),
            ServerKind::Nginx => self.nginx.as_ref().ok().map(|s| s.guard.pid()),
            ServerKind::Vsftpd => self.vsftpd.as_ref().ok().map(|s| s.guard.pid()),
        }
    }
    fn cpu(&self, kind: ServerKind) -> Option<f64> {
        if let (ServerKind::Sshd, Ok(s)) = (kind, &self.sshd) {
            s.wait_idle();
        }
        if let (ServerKind::Vsftpd, Ok(s)) = (kind, &self.vsftpd) {
            servers::wait_no_children(s.guard.pid());
        }
        proc::tree_cpu_seconds(self.pid(kind)?)
    }
}

fn status_line(s: &str) {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K{s}");
    } else {
        eprintln!("{s}");
    }
}

fn empty_dir(d: &Path) -> Result<()> {
    if d.exists() {
        fs::remove_dir_all(d).with_context(|| format!("emptying {}", d.display()))?;
    }
    fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    write_back(d);
    Ok(())
}

/// Write `d`'s file system back (`syncfs`) before a run, outside its
/// time. ext4 without a journal (this project's VMs) skips, when it
/// makes a file, the free inodes deleted in the last minutes (longer
/// while their inode-table block is not written back: `recently_deleted`
/// in fs/ext4/ialloc.c). That walk was about 30% of a small download's
/// samples after the run before it was emptied, each run slower than
/// the last (BENCHMARKS.md, run tmpfile-1). Written back, 10,000 files
/// still cost 25 times their system time 70 s after 10,000 were
/// deleted, so many small files are measured on a journaled ext4
/// (docs/internals/bench.md). tmpfs has nothing to write.
fn write_back(d: &Path) {
    use std::os::fd::AsRawFd;
    if let Ok(f) = fs::File::open(d) {
        // SAFETY: `f` is an open descriptor for the whole call.
        unsafe { libc::syncfs(f.as_raw_fd()) };
    }
}

fn tail(path: &Path, n: usize) -> String {
    let s = fs::read(path).unwrap_or_default();
    let s = String::from_utf8_lossy(&s);
    let s = s.trim();
    let start = s.len().saturating_sub(n);
    let mut i = start;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    s.get(i..).unwrap_or("").replace('\n', " | ")
}

pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v.get(m).copied()
    } else {
        Some((v.get(m - 1)? + v.get(m)?) / 2.0)
    }
}

/// The local scorecard.
pub fn run_local(args: &BenchArgs) -> Result<Report> {
    let quick = args.quick;
    let runs = args.runs.unwrap_or(if quick { 1 } else { 3 }).max(1);
    let timeout = Duration::from_secs(args.timeout.unwrap_or(if quick { 180 } else { 1800 }));
    let scale = args.scale.unwrap_or(1.0);
    let profiles: Vec<Profile> = args
        .profiles
        .iter()
        .map(|p| Profile::parse(p))
        .collect::<Result<_>>()?;
    let directions: Vec<Direction> = args
        .directions
        .iter()
        .map(|d| match d.as_str() {
            "download" => Ok(Direction::Download),
            "upload" => Ok(Direction::Upload),
            o => bail!("unknown direction {o:?}: download or upload"),
        })
        .collect::<Result<_>>()?;
    let specs: Vec<data::SetSpec> = args
        .sets
        .iter()
        .map(|s| data::spec(s, quick, scale))
        .collect::<Result<_>>()?;
    for c in &args.clients {
        if !CLIENTS.iter().any(|k| k.id == c) {
            bail!(
                "unknown client {c:?}: choose from {}",
                CLIENTS.iter().map(|k| k.id).collect::<Vec<_>>().join(", ")
            );
        }
    }
    let ferry_bin = match &args.ferry {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("cannot find the ferry binary")?,
    };

    // The work directory: given, or a temp dir removed at the end.
    let _temp;
    let work: PathBuf = match &args.dir {
        Some(d) => {
            fs::create_dir_all(d)?;
            d.canonicalize()?
        }
        None => {
            let base = match &args.tmpdir {
                Some(b) => {
                    fs::create_dir_all(b)?;
                    b.clone()
                }
                None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
                None => std::env::temp_dir(),
            };
            let t = tempfile::Builder::new()
                .prefix("ferry-bench-")
                .tempdir_in(base)?;
            let p = t.path().to_path_buf();
            proc::remove_on_interrupt(Some(p.clone()));
            _temp = t;
            p
        }
    };
    let variant = if args.compressible {
        "compressible"
    } else {
        "incompressible"
    };
    let variant_dir = format!("{variant}{}", if quick { "-quick" } else { "" });
    let variant_dir = if scale != 1.0 {
        format!("{variant_dir}-x{scale}")
    } else {
        variant_dir
    };
    let srv = work.join("srv");
    let data_parent = srv.join("data").join(&variant_dir);
    let up = srv.join("up");
    let local = work.join("local");
    let run_dir = work.join(format!("run-{}", std::process::id()));
    for d in [&data_parent, &up, &local, &run_dir] {
        fs::create_dir_all(d)?;
    }
    let scratch = run_dir.join("scratch");
    let logs = run_dir.join("logs");
    fs::create_dir_all(&scratch)?;
    fs::create_dir_all(&logs)?;

    if let Some(l) = fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
    {
        if l > 0.5 {
            eprintln!(
                "ferry bench: warning: 1-minute load average is {l:.2}; other work on this machine skews the numbers"
            );
        }
    }
    // Data sets.
    let mut sets: Vec<DataSet> = Vec::new();
    for s in &specs {
        status_line(&format!(
            "ferry bench: data set {} ({} x {} bytes, {variant})",
            s.name, s.count, s.size
        ));
        sets.push(data::prepare(&data_parent, s, args.compressible)?);
    }

    // The file system's own ceiling per set: what a plain local copy into
    // the work directory reaches, so the report can tell "every tool hit the
    // disk" from a win or a loss.
    let mut notes = Vec::new();
    let work_fs = ceiling::fs_type(&work);
    let mut fs_ceiling: BTreeMap<String, f64> = BTreeMap::new();
    for ds in &sets {
        status_line(&format!(
            "ferry bench: local copy of {} into the work directory ({work_fs})",
            ds.name
        ));
        if let Ok(v) = ceiling::local_copy_mb_per_s(ds, &scratch) {
            fs_ceiling.insert(ds.name.clone(), v);
        }
    }
    if ceiling::ext4_without_journal(&work) {
        notes.push(
            "the work directory is on an ext4 without a journal: making a file there skips the \
             inodes freed in the last minutes, so many-file cells pay for the runs before them; \
             use a journaled ext4 (docs/internals/bench.md)"
                .into(),
        );
    }
    notes.push(format!(
        "work directory {} on {work_fs}; a plain local copy into it (the file system's ceiling, \
         best of 2): {}",
        work.display(),
        fs_ceiling
            .iter()
            .map(|(s, v)| format!("{s} {v:.0} MB/s"))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    // Which clients run, which are skipped.
    let base = |c: &Client| clients::baseline_twin(c.id).is_some();
    let wanted: Vec<&Client> = CLIENTS
        .iter()
        .filter(|c| {
            if args.clients.is_empty() {
                !clients::compression_cell(c.id) || args.compressible
            } else {
                args.clients.iter().any(|x| x == c.id)
            }
        })
        .filter(|c| !base(c) || args.baseline.is_some())
        .collect();
    let installed = |c: &Client| c.ferry || base(c) || which(c.program).is_some();
    let mut missing: Vec<&str> = wanted
        .iter()
        .filter(|c| !installed(c))
        .map(|c| c.program)
        .collect();
    missing.dedup();
    if !missing.is_empty() {
        notes.push(format!(
            "not installed, cells skipped: {}",
            missing.join(", ")
        ));
    }

    // Servers.
    status_line("ferry bench: starting servers");
    let key = servers::client_key(&run_dir)?;
    let need = Needs {
        sftp: wanted.iter().any(|c| c.proto == Proto::Sftp),
        https: wanted.iter().any(|c| c.proto == Proto::Https),
        ftp: wanted.iter().any(|c| c.proto == Proto::Ftp),
    };
    let need_https = need.https;
    let need_ftp = need.ftp;
    let serve_bin = args.serve_bin.clone().unwrap_or_else(|| ferry_bin.clone());
    let Servers {
        ferry,
        sshd,
        nginx,
        vsftpd,
        ..
    } = start_servers(&serve_bin, &srv, &run_dir, &key, need, &mut notes);
    let ferry_https_na = match &ferry {
        Ok(f) if need_https => probe_https(f),
        _ => None,
    };
    if let Some(r) = &ferry_https_na {
        notes.push(r.clone());
    }
    let ferry_cp_https_na = if need_https {
        ferry_cp_https_missing(&ferry_bin)
    } else {
        None
    };
    if let Some(r) = &ferry_cp_https_na {
        notes.push(r.clone());
    }
    let ferry_cp_ftp_na = if need_ftp {
        ferry_cp_scheme_missing(&ferry_bin, "ftp", &scratch)
    } else {
        None
    };
    if let Some(r) = &ferry_cp_ftp_na {
        notes.push(r.clone());
    }
    let servers = Servers {
        ferry,
        sshd,
        nginx,
        vsftpd,
        ferry_https_na: ferry_https_na.clone(),
    };
    for p in &profiles {
        notes.push(format!("profile {}", p.describe()));
    }
    // Packet-level profiles: one link, servers inside its server namespace.
    let mut net_side = match profiles.iter().find(|p| p.mode == LinkMode::Packet) {
        Some(first) => {
            status_line("ferry bench: packet-level link and its servers");
            let mut n = start_net_side(
                first,
                &serve_bin,
                &srv,
                &run_dir,
                &key,
                need,
                args.net_cc.clone(),
            )?;
            n.servers.ferry_https_na = ferry_https_na;
            Some(n)
        }
        None => None,
    };

    let machine = crate::report::machine_info(&ferry_bin);
    let parameters = serde_json::json!({
        "quick": quick,
        "scale": scale,
        "runs": runs,
        "variant": variant,
        "profiles": profiles,
        "net_cc": args.net_cc,
        "directions": directions,
        "clients": wanted.iter().map(|c| c.id).collect::<Vec<_>>(),
        "timeout_s": timeout.as_secs(),
        "work_dir": work,
        "work_fs": work_fs,
        "fs_ceiling_mb_per_s": fs_ceiling,
        "argv": std::env::args().collect::<Vec<_>>(),
    });
    let set_info: Vec<serde_json::Value> = sets
        .iter()
        .map(|s| {
            serde_json::json!({"name": s.name, "files": s.files.len(), "file_bytes": s.file_size,
                "total_bytes": s.total_bytes, "variant": s.variant})
        })
        .collect();

    // The link emulator runs in this process, on its own runtime.
    let link_rt = if profiles.iter().any(|p| p.link().is_some()) {
        Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("linkem")
                .enable_all()
                .build()?,
        )
    } else {
        None
    };

    let paths = Paths {
        local: local.clone(),
        scratch: scratch.clone(),
        ferry: ferry_bin.clone(),
        baseline: args.baseline.clone(),
    };
    let mut cells: Vec<Cell> = Vec::new();
    // Count runs for the progress line.
    let per_profile: usize = sets
        .iter()
        .flat_map(|ds| directions.iter().map(move |d| (ds, *d)))
        .map(|(ds, d)| wanted.iter().filter(|c| c.takes(ds, d)).count() * 2)
        .sum();
    let total = per_profile * runs * profiles.len();
    let mut done = 0usize;

    for profile in &profiles {
        let mut proxies: Vec<ferry_linkem::LinkEm> = Vec::new();
        let (servers, place) = match (profile.net_dir(), net_side.as_mut()) {
            (Some(d), Some(n)) => {
                n.link.set_config(d.clone(), d);
                let place = Place {
                    host: ferry_linkem::net::SERVER_ADDR.to_string(),
                    netns: Some(n.link.client_netns()),
                };
                (&n.servers, place)
            }
            _ => (
                &servers,
                Place {
                    host: "127.0.0.1".into(),
                    netns: None,
                },
            ),
        };
        let endpoints = endpoints(
            profile,
            servers,
            &place,
            &key,
            &srv,
            &run_dir,
            link_rt.as_ref(),
            &mut proxies,
        )?;
        for ds in &sets {
            for &dir in &directions {
                let mut group: Vec<(Cell, &Client, Option<&Endpoint>)> = Vec::new();
                for client in wanted.iter().filter(|c| c.takes(ds, dir)) {
                    for (kind, _, ep) in endpoints.iter().filter(|(_, p, _)| *p == client.proto) {
                        let mut cell = Cell {
                            profile: profile.name.clone(),
                            set: ds.name.clone(),
                            direction: dir,
                            client: client.id.to_string(),
                            client_label: client.label.to_string(),
                            ferry: client.ferry,
                            server: *kind,
                            protocol: client.proto,
                            status: "ok".into(),
                            reason: None,
                            verified: false,
                            files: ds.files.len(),
                            bytes: ds.total_bytes,
                            mb_per_s: None,
                            cpu_s: None,
                            rss_mb: None,
                            server_cpu_s: None,
                            cpu_s_per_gb: None,
                            server_cpu_s_per_gb: None,
                            ratio: None,
                            limit: None,
                            ceiling: None,
                            runs: Vec::new(),
                        };
                        let ep = match ep {
                            Ok(e) => e,
                            Err(why) => {
                                cell.status = if why.contains("not installed") {
                                    "skipped".into()
                                } else {
                                    "failed".into()
                                };
                                cell.reason = Some(format!("{}: {why}", kind.name()));
                                group.push((cell, client, None));
                                continue;
                            }
                        };
                        if !installed(client) {
                            cell.status = "skipped".into();
                            cell.reason = Some(format!("{} not installed", client.program));
                        } else if let Some(why) = &ep.unavailable {
                            cell.status = "n/a".into();
                            cell.reason = Some(why.clone());
                        } else if let (true, Proto::Https, Some(why)) =
                            (client.ferry, client.proto, &ferry_cp_https_na)
                        {
                            cell.status = "n/a".into();
                            cell.reason = Some(why.clone());
                        } else if let (true, Proto::Ftp, Some(why)) =
                            (client.ferry, client.proto, &ferry_cp_ftp_na)
                        {
                            cell.status = "n/a".into();
                            cell.reason = Some(why.clone());
                        } else if quick && client.id == "curl-ftp" && !ds.single_file() {
                            // A smoke run has no minutes to spare for
                            // curl's own waits (see CURL_FTP_MANY_FILES_TIMEOUT).
                            cell.status = "skipped".into();
                            cell.reason = Some(
                                "--quick: curl 7.88 waits on its own timers between FTP files \
                                 (1 s per ~10 files plain, ~0.4 s per file over TLS)"
                                    .into(),
                            );
                        }
                        group.push((cell, client, Some(ep)));
                    }
                }
                let attempt = |client: &Client, ep: &Endpoint, what: &str, done: usize| {
                    status_line(&format!(
                        "[{done}/{total}] {} {} {}: {} -> {} ({}) {what}",
                        profile.name,
                        ds.name,
                        dir.name(),
                        client.label,
                        ep.server.name(),
                        ep.proto.name(),
                    ));
                    one_run(
                        client,
                        ep,
                        ds,
                        dir,
                        &variant_dir,
                        &paths,
                        &up,
                        &logs,
                        timeout,
                        servers,
                    )
                };
                // One untimed transfer first (the first cell's), so that no
                // client's first timed run pays for the VM's first touch of
                // the destination's memory: in runs 10 and 11 the first run
                // of 1 GiB took 2.7-3.2 s against 0.6-0.8 s after.
                if runs > 1 {
                    let first = group
                        .iter()
                        .find(|(c, _, ep)| c.status == "ok" && ep.is_some());
                    if let Some((_, client, Some(ep))) = first {
                        let _ = attempt(client, ep, "warm-up, not timed", done);
                    }
                }
                for r in 0..runs {
                    for (cell, client, ep) in group.iter_mut() {
                        let Some(ep) = ep else { continue };
                        if cell.status != "ok" {
                            continue;
                        }
                        done += 1;
                        let res = attempt(client, ep, &format!("run {}/{runs}", r + 1), done);
                        match res {
                            Ok(run) => {
                                if !run.ok {
                                    let why = run.error.clone().unwrap_or_default();
                                    cell.status = if is_not_there_yet(&why) {
                                        "n/a".into()
                                    } else {
                                        "failed".into()
                                    };
                                    cell.reason = Some(why);
                                }
                                cell.runs.push(run);
                            }
                            Err(e) => {
                                cell.status = "failed".into();
                                cell.reason = Some(format!("{e:#}"));
                            }
                        }
                    }
                }
                for (mut cell, _, _) in group {
                    summarize(&mut cell);
                    cells.push(cell);
                }
                let _ = empty_dir(&up);
                let _ = empty_dir(&local);
            }
        }
        // Proxies close with their runtime's tasks when dropped.
        drop(proxies);
        if let (Some(_), Some(n)) = (profile.net_dir(), net_side.as_ref()) {
            let r = n.link.report();
            let line = |s: &ferry_linkem::netem::Stats| {
                format!(
                    "{} packets, {:.0} MB, drops queue {} loss {}, queue peak {} kB",
                    s.packets_out,
                    s.bytes_out as f64 / 1e6,
                    s.drops_queue,
                    s.drops_loss,
                    s.queue_peak_bytes / 1000
                )
            };
            notes.push(format!(
                "link {}: to server {}; to client {}",
                profile.name,
                line(&r.to_server),
                line(&r.to_client)
            ));
        }
    }
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    crate::report::ratios(&mut cells);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    crate::report::ceilings(&mut cells, &fs_ceiling, cores);
    // Stop the servers before reporting (Drop does it too on error paths).
    drop(servers);
    if let Some(n) = net_side {
        drop(n.servers);
        n.link.down();
        proc::remove_netlink_on_interrupt(None);
    }
    drop(link_rt);
    if args.dir.is_none() {
        // The temp dir goes with `_temp`.
    } else {
        let _ = fs::remove_dir_all(&run_dir);
    }
    Ok(Report {
        machine,
        parameters,
        sets: set_info,
        notes,
        goals: crate::report::goals(&cells, args.compressible),
        cells,
    })
}

/// Which servers the wanted clients need.
#[derive(Debug, Clone, Copy)]
struct Needs {
    sftp: bool,
    https: bool,
    ftp: bool,
}

/// Start the servers the clients need, with their state under `base`, on
/// this thread's listen host (`servers::set_listen_host`) and in this
/// thread's network namespace.
fn start_servers(
    serve_bin: &Path,
    srv: &Path,
    base: &Path,
    key: &ClientKey,
    need: Needs,
    notes: &mut Vec<String>,
) -> Servers {
    let ferry = FerryServe::start(serve_bin, srv, &base.join("ferry-serve"), key)
        .map_err(|e| format!("ferry serve did not start: {e:#}"));
    let sshd = if !need.sftp {
        Err("not needed".to_string())
    } else if proc::which_server("sshd").is_none() {
        notes.push("sshd not installed: its cells are skipped".into());
        Err("not installed".into())
    } else {
        Sshd::start(&base.join("sshd"), key).map_err(|e| format!("sshd did not start: {e:#}"))
    };
    let nginx = if !need.https {
        Err("not needed".to_string())
    } else if proc::which_server("nginx").is_none() {
        notes.push("nginx not installed: its cells are skipped".into());
        Err("not installed".into())
    } else {
        Nginx::start(&base.join("nginx"), srv).map_err(|e| format!("nginx did not start: {e:#}"))
    };
    let vsftpd = if !need.ftp {
        Err("not needed".to_string())
    } else if proc::which_server("vsftpd").is_none() {
        notes.push("vsftpd not installed: FTP cells are skipped".into());
        Err("not installed".into())
    } else {
        Vsftpd::start(&base.join("vsftpd"), srv).map_err(|e| format!("vsftpd did not start: {e:#}"))
    };
    Servers {
        ferry,
        sshd,
        nginx,
        vsftpd,
        ferry_https_na: None,
    }
}

/// The packet-level link the bench's packet-level profiles share, and the
/// servers inside its server namespace. The link is set up once and
/// retuned per profile ([`ferry_linkem::net::NetLink::set_config`]).
struct NetSide {
    link: ferry_linkem::net::NetLink,
    servers: Servers,
}

/// Bring up the packet-level link (set to `first`) and start the servers in
/// its server namespace, listening on its address.
fn start_net_side(
    first: &Profile,
    serve_bin: &Path,
    srv: &Path,
    run_dir: &Path,
    key: &ClientKey,
    need: Needs,
    congestion: Option<String>,
) -> Result<NetSide> {
    use ferry_linkem::net::{self, NetConfig, NetLink};
    if let Some(why) = net::unsupported() {
        bail!(
            "profile {} needs a packet-level link, which cannot run here: {why}",
            first.name
        );
    }
    let name = format!("bench-{}", std::process::id());
    let dir = first.net_dir().unwrap_or_default();
    proc::remove_netlink_on_interrupt(Some(name.clone()));
    let mut cfg = NetConfig::symmetric(&name, dir);
    cfg.congestion = congestion;
    let link =
        NetLink::up(cfg).with_context(|| format!("setting up the packet-level link {name}"))?;
    let server_ns = link.server_netns();
    let mut notes = Vec::new();
    let servers = std::thread::scope(|s| {
        s.spawn(|| -> Result<Servers> {
            net::enter_netns(&server_ns)
                .with_context(|| format!("entering network namespace {server_ns}"))?;
            servers::set_listen_host(&net::SERVER_ADDR.to_string());
            Ok(start_servers(
                serve_bin,
                srv,
                &run_dir.join("net"),
                key,
                need,
                &mut notes,
            ))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the server thread panicked"))?
    })?;
    Ok(NetSide { link, servers })
}

/// A failure that means "this side is not written yet", not "broken".
fn is_not_there_yet(why: &str) -> bool {
    why.contains("is not supported yet")
        || why.contains("unexpected argument")
        || why.contains("not implemented")
}

/// `Some(reason)` when this ferry's `cp` has no HTTPS client yet (no
/// `--cacert` flag in its help).
fn ferry_cp_https_missing(ferry: &Path) -> Option<String> {
    let out = std::process::Command::new(ferry)
        .args(["cp", "--help"])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let help = String::from_utf8_lossy(&out.stdout);
    (!help.contains("--cacert")).then(|| {
        "this ferry cp has no HTTPS client yet (no --cacert in `ferry cp --help`): its HTTPS cells are n/a".to_string()
    })
}

/// `Some(reason)` when `ferry cp` refuses `scheme://` URLs as not
/// supported yet (asked with a URL to a closed port, so a client that has
/// the scheme fails fast for another reason).
fn ferry_cp_scheme_missing(ferry: &Path, scheme: &str, scratch: &Path) -> Option<String> {
    let out = std::process::Command::new(ferry)
        .args(["cp", "-q"])
        .arg(format!("{scheme}://127.0.0.1:9/probe"))
        .arg(scratch.join("probe"))
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let err = String::from_utf8_lossy(&out.stderr);
    err.contains("not supported yet").then(|| {
        format!("this ferry cp has no {} client yet ({scheme}:// is not supported): its {} cells are n/a",
            scheme.to_uppercase(), scheme.to_uppercase())
    })
}

/// Ask ferry serve's HTTPS port for `/` with curl: `Some(reason)` when it
/// does not answer (its HTTPS side not written yet, say).
fn probe_https(f: &FerryServe) -> Option<String> {
    let Some(port) = f.https_port else {
        return Some("ferry serve printed no HTTPS address".into());
    };
    which("curl")?;
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-m", "10", "--cacert"])
        .arg(&f.cert_pem)
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", f.token))
        .arg(format!("https://127.0.0.1:{port}/"))
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if out.status.success() {
        None
    } else {
        Some(format!(
            "ferry serve's HTTPS does not answer yet (curl: {}): its HTTPS cells are n/a",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

type Endpoints = Vec<(ServerKind, Proto, std::result::Result<Endpoint, String>)>;

/// One PEM file holding ferry serve's and nginx's certificates, when both
/// run, so that HTTPS clients load the same trust file for either server.
fn https_trust(servers: &Servers, dir: &Path) -> Result<Option<PathBuf>> {
    let (Ok(f), Ok(n)) = (&servers.ferry, &servers.nginx) else {
        return Ok(None);
    };
    let mut pem =
        fs::read(&f.cert_pem).with_context(|| format!("reading {}", f.cert_pem.display()))?;
    pem.extend(fs::read(&n.cert).with_context(|| format!("reading {}", n.cert.display()))?);
    let path = dir.join("https-trust.pem");
    fs::write(&path, pem).with_context(|| format!("writing {}", path.display()))?;
    Ok(Some(path))
}

/// The endpoints of one profile, with a link emulator in front of each
/// server when the profile has one.
/// Where clients reach the servers of one profile from.
struct Place {
    /// The servers' address.
    host: String,
    /// The network namespace the clients run in.
    netns: Option<String>,
}

#[allow(clippy::too_many_arguments)]
fn endpoints(
    profile: &Profile,
    servers: &Servers,
    place: &Place,
    key: &ClientKey,
    srv: &Path,
    run_dir: &Path,
    rt: Option<&tokio::runtime::Runtime>,
    proxies: &mut Vec<ferry_linkem::LinkEm>,
) -> Result<Endpoints> {
    let cfg_dir = run_dir.join("cfg");
    fs::create_dir_all(&cfg_dir)?;
    let mut via = |port: u16| -> Result<u16> {
        match (profile.link(), rt) {
            (Some(link), Some(rt)) => {
                let upstream: SocketAddr = ([127, 0, 0, 1], port).into();
                let listen: SocketAddr = ([127, 0, 0, 1], 0).into();
                let lk = rt
                    .block_on(ferry_linkem::LinkEm::start(listen, upstream, link))
                    .context("starting the link emulator")?;
                let p = lk.local_addr().port();
                proxies.push(lk);
                Ok(p)
            }
            _ => Ok(port),
        }
    };
    let base = |server: ServerKind, proto: Proto, port: u16, prefix: String| Endpoint {
        server,
        proto,
        host: place.host.clone(),
        netns: place.netns.clone(),
        port,
        prefix,
        user: key.user.clone(),
        key: key.key.clone(),
        ssh_config: PathBuf::new(),
        known_hosts: PathBuf::new(),
        cacert: PathBuf::new(),
        token: None,
        unavailable: None,
    };
    let mut out: Endpoints = Vec::new();
    let srv_prefix = srv.display().to_string();
    // SFTP: ferry serve, sshd.
    match &servers.ferry {
        Ok(f) => {
            let port = via(f.sftp_port)?;
            let mut e = base(ServerKind::FerryServe, Proto::Sftp, port, String::new());
            let name = format!("{}-ferry", profile.name);
            (e.ssh_config, e.known_hosts) = clients::write_ssh_files(
                &cfg_dir,
                &name,
                &place.host,
                port,
                &key.user,
                &key.key,
                &f.hostkey_line,
            )?;
            out.push((ServerKind::FerryServe, Proto::Sftp, Ok(e)));
        }
        Err(why) => out.push((ServerKind::FerryServe, Proto::Sftp, Err(why.clone()))),
    }
    match &servers.sshd {
        Ok(s) => {
            let port = via(s.port)?;
            let mut e = base(ServerKind::Sshd, Proto::Sftp, port, srv_prefix.clone());
            let name = format!("{}-sshd", profile.name);
            (e.ssh_config, e.known_hosts) = clients::write_ssh_files(
                &cfg_dir,
                &name,
                &place.host,
                port,
                &key.user,
                &key.key,
                &s.hostkey_line,
            )?;
            out.push((ServerKind::Sshd, Proto::Sftp, Ok(e)));
        }
        Err(why) if why != "not needed" => {
            out.push((ServerKind::Sshd, Proto::Sftp, Err(why.clone())))
        }
        Err(_) => {}
    }
    // HTTPS: ferry serve, nginx. Every client gets byte-identical options
    // for both servers: one CA file that holds both certificates, and ferry
    // serve's token in the request to nginx too (nginx ignores it). curl's
    // speed depends on its own heap layout, which the size of its CA file and
    // of its headers move: with ferry serve's certificate alone as --cacert,
    // curl spent 0.4 s more per GiB in memcpy inside SSL_read than with a
    // bundle (docs/internals/bench.md, "Fair inputs for the peers").
    let https_trust = https_trust(servers, &cfg_dir)?;
    if let Ok(f) = &servers.ferry {
        if let Some(hp) = f.https_port {
            let port = via(hp)?;
            let mut e = base(ServerKind::FerryServe, Proto::Https, port, String::new());
            e.cacert = https_trust.clone().unwrap_or_else(|| f.cert_pem.clone());
            e.token = Some(f.token.clone());
            e.unavailable = servers.ferry_https_na.clone();
            out.push((ServerKind::FerryServe, Proto::Https, Ok(e)));
        }
    }
    match &servers.nginx {
        Ok(n) => {
            let port = via(n.port)?;
            let mut e = base(ServerKind::Nginx, Proto::Https, port, String::new());
            e.cacert = https_trust.clone().unwrap_or_else(|| n.cert.clone());
            e.token = servers.ferry.as_ref().ok().map(|f| f.token.clone());
            out.push((ServerKind::Nginx, Proto::Https, Ok(e)));
        }
        Err(why) if why != "not needed" => {
            out.push((ServerKind::Nginx, Proto::Https, Err(why.clone())))
        }
        Err(_) => {}
    }
    // FTP: ferry serve (TLS required, the token as the password), vsftpd.
    // Passive data connections go straight to the server, around the TCP
    // proxy, so under a proxy profile FTP is not measured; a packet-level
    // link carries them like any other connection.
    let ftp_na = "FTP data connections would bypass the TCP-proxy link emulator: FTP is measured on loopback and packet-level profiles only";
    if let (Ok(f), Some(fp)) = (
        &servers.ferry,
        servers.ferry.as_ref().ok().and_then(|f| f.ftp_port),
    ) {
        let mut e = base(ServerKind::FerryServe, Proto::Ftp, fp, String::new());
        e.cacert = f.cert_pem.clone();
        e.token = Some(f.token.clone());
        if profile.link().is_some() {
            e.unavailable = Some(ftp_na.into());
        }
        out.push((ServerKind::FerryServe, Proto::Ftp, Ok(e)));
    }
    match &servers.vsftpd {
        Ok(v) => {
            let mut e = base(ServerKind::Vsftpd, Proto::Ftp, v.port, srv_prefix.clone());
            if profile.link().is_some() {
                e.unavailable = Some(ftp_na.into());
            }
            out.push((ServerKind::Vsftpd, Proto::Ftp, Ok(e)));
        }
        Err(why) if why != "not needed" => {
            out.push((ServerKind::Vsftpd, Proto::Ftp, Err(why.clone())))
        }
        Err(_) => {}
    }
    Ok(out)
}

/// The most a curl-ftp cell of many files may take (see one_run).
const CURL_FTP_MANY_FILES_TIMEOUT: Duration = Duration::from_secs(150);

#[allow(clippy::too_many_arguments)]
fn one_run(
    client: &Client,
    ep: &Endpoint,
    ds: &DataSet,
    dir: Direction,
    variant_dir: &str,
    paths: &Paths,
    up: &Path,
    logs: &Path,
    timeout: Duration,
    servers: &Servers,
) -> Result<RunResult> {
    let dest_root = match dir {
        Direction::Download => &paths.local,
        Direction::Upload => up,
    };
    empty_dir(dest_root)?;
    let plan = clients::command(client, ep, ds, dir, variant_dir, paths)?;
    if plan.precreate {
        fs::create_dir_all(dest_root.join(&ds.name))?;
    }
    let mut cmd = plan.cmd;
    // curl 7.88's sequential FTP waits for its 1 s multi-poll timeout
    // before it connects about one data connection in ten (29 of 291 in a
    // --trace-time run against vsftpd), and over FTPS (ferry serve) about
    // 200 ms before each data connection and 200 ms for the reply to the
    // TYPE I after it (--trace-time; the server is idle meanwhile), so
    // 1000 small files take minutes: bound those cells rather than hold
    // up the whole scorecard (and skip them in --quick).
    let timeout = if client.id == "curl-ftp" && !ds.single_file() {
        timeout.min(CURL_FTP_MANY_FILES_TIMEOUT)
    } else {
        timeout
    };
    let out_log = logs.join(format!("{}.out", client.id));
    let err_log = logs.join(format!("{}.err", client.id));
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out_log)?)
        .stderr(fs::File::create(&err_log)?)
        .env("HOME", paths.scratch.as_path())
        .env_remove("SSH_AUTH_SOCK");
    let loadavg = fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok());
    let srv0 = servers.cpu(ep.server);
    let o = proc::run_measured_in(ep.netns.as_deref(), cmd, timeout)?;
    let srv1 = servers.cpu(ep.server);
    let server_cpu_s = srv0
        .zip(srv1)
        .map(|(a, b)| ((b - a) * 1000.0).round() / 1000.0);
    let seconds = o.wall.as_secs_f64();
    let mut r = RunResult {
        seconds: (seconds * 10_000.0).round() / 10_000.0,
        mb_per_s: None,
        cpu_s: (o.cpu * 1000.0).round() / 1000.0,
        rss_mb: (o.maxrss_kb as f64 / 1024.0 * 10.0).round() / 10.0,
        server_cpu_s,
        ok: false,
        error: None,
        loadavg,
    };
    let why = || {
        let mut t = tail(&err_log, 600);
        if t.is_empty() {
            t = tail(&out_log, 600);
        }
        t
    };
    if o.timed_out {
        r.error = Some(format!("timeout after {} s: {}", timeout.as_secs(), why()));
        return Ok(r);
    }
    if o.code != 0 {
        r.error = Some(format!("exit {}: {}", o.code, why()));
        return Ok(r);
    }
    if let Err(e) = data::verify(ds, &dest_root.join(&ds.name)) {
        r.error = Some(format!("verify: {e}"));
        return Ok(r);
    }
    r.ok = true;
    r.mb_per_s = Some((ds.total_bytes as f64 / 1e6 / seconds * 100.0).round() / 100.0);
    Ok(r)
}

fn summarize(cell: &mut Cell) {
    if cell.status != "ok" {
        return;
    }
    if cell.runs.is_empty() {
        cell.status = "failed".into();
        cell.reason = Some("no run finished".into());
        return;
    }
    cell.verified = cell.runs.iter().all(|r| r.ok);
    let mut mbps: Vec<f64> = cell.runs.iter().filter_map(|r| r.mb_per_s).collect();
    let mut cpu: Vec<f64> = cell.runs.iter().map(|r| r.cpu_s).collect();
    let mut srv: Vec<f64> = cell.runs.iter().filter_map(|r| r.server_cpu_s).collect();
    cell.mb_per_s = median(&mut mbps);
    cell.cpu_s = median(&mut cpu);
    cell.server_cpu_s = median(&mut srv);
    let gb = cell.bytes as f64 / 1e9;
    if gb > 0.0 {
        let per_gb = |v: f64| (v / gb * 100.0).round() / 100.0;
        cell.cpu_s_per_gb = cell.cpu_s.map(per_gb);
        cell.server_cpu_s_per_gb = cell.server_cpu_s.map(per_gb);
    }
    cell.rss_mb = cell.runs.iter().map(|r| r.rss_mb).reduce(f64::max);
}
