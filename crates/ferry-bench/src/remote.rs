//! Remote mode, `ferry bench sftp://[user@]host[:port]/dir`,
//! `https://host[:port]/dir` or `ftp://` / `ftps://[user[:pass]@]host/dir`:
//! find the `ferry cp` settings that move data
//! fastest to and from one real server.
//!
//! A modest generated set (one 32 MiB file and 100 files of 64 kB; a
//! quarter of that with `--quick`) is uploaded into a scratch directory
//! under `dir` (`ferry-bench-<pid>-<random>`, removed afterwards), then the
//! knobs are swept one at a time (coordinate descent, starting from ferry's
//! defaults). Each trial is a real `ferry cp` run: downloads are verified
//! by blake3, and each upload is downloaded back with the defaults and
//! verified. The best settings per direction and their gain over the
//! defaults are printed; `--save` writes them to
//! `~/.config/ferry/hosts.toml`, which `ferry cp` reads for that host when
//! the flags are not given.
//!
//! What differs per protocol is in [`Scheme`]: the knobs
//! ([`Scheme::knobs`]), the flags every `ferry cp` needs (SSH options, or
//! TLS trust and the token), how the scratch directory is removed
//! (OpenSSH's `sftp`, HTTP DELETEs, or FTP DELE/RMD) and the hosts.toml
//! key. FTP logs in as the URL says (else anonymous; `FERRY_PASSWORD` for
//! a user without a password in the URL).
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::data::{self, DataSet, SetSpec};
use crate::hosts::{self, HttpVersion, Tuning};
use crate::proc;
use crate::BenchArgs;

/// The protocols remote mode can tune.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Sftp,
    Https,
    Http,
    Ftp,
    /// FTP over implicit TLS.
    Ftps,
}

/// Sets one knob of a [`Tuning`] to a swept value.
type Knob = fn(&mut Tuning, u64);

impl Scheme {
    fn prefix(self) -> &'static str {
        match self {
            Scheme::Sftp => "sftp://",
            Scheme::Https => "https://",
            Scheme::Http => "http://",
            Scheme::Ftp => "ftp://",
            Scheme::Ftps => "ftps://",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Sftp => 22,
            Scheme::Https => 443,
            Scheme::Http => 80,
            Scheme::Ftp => 21,
            Scheme::Ftps => 990,
        }
    }

    /// The path when the URL has none.
    fn default_path(self) -> &'static str {
        match self {
            Scheme::Sftp => "/~",
            // FTP paths are relative to the login directory, as in ferry cp.
            Scheme::Https | Scheme::Http | Scheme::Ftp | Scheme::Ftps => "/",
        }
    }

    /// The knobs worth sweeping and the values tried (the default,
    /// `None`, is the starting point), in the order they are swept.
    pub fn knobs(self, upload: bool) -> Vec<(&'static [u64], Knob)> {
        let streams: Knob = |t, v| t.streams = Some(v as usize);
        let parallel: Knob = |t, v| t.parallel = Some(v as usize);
        match self {
            Scheme::Sftp => vec![
                (&[1, 2, 4, 8], streams),
                (&[1, 4, 16], parallel),
                (&[32 << 10, 256 << 10], |t, v| t.chunk = Some(v)),
                (&[16, 64], |t, v| t.depth = Some(v as usize)),
                // SSH compression (zlib) costs CPU on both ends; it pays
                // only on compressible data over a slow link.
                (&[1], |t, _| t.compress = Some(true)),
            ],
            // No request size or pipeline depth in FTP, and only downloads
            // are split into ranges: connections only.
            Scheme::Ftp | Scheme::Ftps if upload => vec![(&[1, 4, 16], parallel)],
            Scheme::Ftp | Scheme::Ftps => vec![(&[1, 2, 4, 8], streams), (&[1, 4, 16], parallel)],
            Scheme::Https | Scheme::Http => {
                let version: Knob = |t, v| {
                    t.http = Some(if v == 1 {
                        HttpVersion::Http1
                    } else {
                        HttpVersion::Http2
                    })
                };
                if upload {
                    // One PUT per file: --streams and --compressed do not
                    // apply to uploads.
                    vec![(&[1, 8, 32, 128], parallel), (&[1, 2], version)]
                } else {
                    vec![
                        (&[2, 4, 8], streams),
                        (&[1, 8, 32, 128], parallel),
                        (&[1, 2], version),
                        (&[1], |t, _| t.compressed = Some(true)),
                    ]
                }
            }
        }
    }
}

/// `sftp://[user@]host[:port]/path` (or https://, http://) split up.
#[derive(Debug, Clone)]
pub struct Target {
    pub scheme: Scheme,
    pub user: Option<String>,
    pub host: String,
    pub port: u16,
    /// As in the URL ("/~/x" is home-relative over SFTP).
    pub path: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target> {
        let Some((scheme, rest)) = [
            Scheme::Sftp,
            Scheme::Https,
            Scheme::Http,
            Scheme::Ftp,
            Scheme::Ftps,
        ]
        .into_iter()
        .find_map(|s| url.strip_prefix(s.prefix()).map(|r| (s, r))) else {
            bail!(
                "{url}: remote mode supports sftp://, https://, http://, ftp:// and ftps:// URLs"
            );
        };
        let (auth, path) = match rest.find('/') {
            Some(i) => (rest.get(..i).unwrap_or(""), rest.get(i..).unwrap_or("/")),
            None => (rest, scheme.default_path()),
        };
        let (user, hostport) = match auth.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, auth),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') || h.starts_with('[') => (
                h.trim_matches(|c| c == '[' || c == ']').to_string(),
                p.parse::<u16>()
                    .with_context(|| format!("{url}: bad port {p:?}"))?,
            ),
            _ => (hostport.to_string(), scheme.default_port()),
        };
        if host.is_empty() {
            bail!("{url}: no host");
        }
        let path = path.trim_end_matches('/').to_string();
        let path = if path.is_empty() { "/".into() } else { path };
        Ok(Target {
            scheme,
            user,
            host,
            port,
            path,
        })
    }

    fn authority(&self) -> String {
        let h = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match &self.user {
            Some(u) => format!("{u}@{h}:{}", self.port),
            None => format!("{h}:{}", self.port),
        }
    }

    /// `scheme://authority/path/rel`
    fn url(&self, rel: &str) -> String {
        let base = self.path.trim_end_matches('/');
        format!("{}{}{base}/{rel}", self.scheme.prefix(), self.authority())
    }

    /// Where `--save` keeps the settings (hosts.rs).
    fn host_key(&self) -> String {
        match self.scheme {
            Scheme::Sftp => format!("{}:{}", self.host, self.port),
            Scheme::Https => hosts::http_key(true, &self.host, self.port),
            Scheme::Http => hosts::http_key(false, &self.host, self.port),
            Scheme::Ftp => hosts::scheme_key("ftp", &self.host, self.port),
            Scheme::Ftps => hosts::scheme_key("ftps", &self.host, self.port),
        }
    }

    /// The path of `rel` as an FTP command takes it (the URL's path is
    /// relative to the login directory; `%2F` makes it absolute).
    fn ftp_path(&self, rel: &str) -> String {
        let base = self
            .path
            .trim_start_matches('/')
            .replace("%2F", "/")
            .replace("%2f", "/");
        let base = base.trim_end_matches('/');
        if base.is_empty() {
            rel.to_string()
        } else {
            format!("{base}/{rel}")
        }
    }

    /// The same path as OpenSSH's sftp wants it ("/~/x" -> "x").
    fn sftp_path(&self, rel: &str) -> String {
        let base = self.path.trim_end_matches('/');
        let base = match base.strip_prefix("/~") {
            Some(r) => r.trim_start_matches('/').to_string(),
            None => base.to_string(),
        };
        if base.is_empty() {
            rel.to_string()
        } else {
            format!("{base}/{rel}")
        }
    }
}

/// One trial's result.
#[derive(Debug, Clone)]
struct Trial {
    tuning: Tuning,
    mb_per_s: Option<f64>,
    error: Option<String>,
}

/// What a sweep found for one direction.
#[derive(Debug, Clone)]
struct Sweep {
    /// The defaults.
    base: Trial,
    best: Trial,
    /// The compression trial (`-C` over SFTP, `--compressed` over HTTP)
    /// and the best it had to beat, when the scheme sweeps one.
    compression: Option<(Trial, Trial)>,
}

/// Whether `t` turns on compression that `from` does not have.
fn adds_compression(from: &Tuning, t: &Tuning) -> bool {
    (t.compress == Some(true) && from.compress != Some(true))
        || (t.compressed == Some(true) && from.compressed != Some(true))
}

/// One line saying whether compression was kept and why, so "off" is not
/// mistaken for "not tried": compression only pays on compressible data,
/// and the generated set is random unless `--compressible` was given.
fn compression_verdict(with: &Trial, without: &Trial, kept: bool, compressible: bool) -> String {
    let flag = if with.tuning.compress == Some(true) {
        "-C"
    } else {
        "--compressed"
    };
    let (data, why) = if compressible {
        ("text-like data", "zlib is slower than this link")
    } else {
        ("random data", "--compressible sweeps text-like data")
    };
    match (with.mb_per_s, without.mb_per_s) {
        (Some(a), Some(b)) if kept => format!(
            "compression: on ({flag}: {:.2}x the speed without it on {data})",
            a / b
        ),
        (Some(a), Some(b)) => format!(
            "compression: off (no gain: {flag} gave {:.2}x on {data}; {why})",
            a / b
        ),
        (None, _) => format!(
            "compression: off ({flag} FAILED: {})",
            first_line(with.error.as_deref().unwrap_or(""))
        ),
        (Some(_), None) => format!(
            "compression: {} (on {data})",
            if kept { "on" } else { "off" }
        ),
    }
}

struct Ctx<'a> {
    args: &'a BenchArgs,
    ferry: PathBuf,
    target: Target,
    scratch: String,
    sets: Vec<DataSet>,
    total: u64,
    upload_src: PathBuf,
    work: PathBuf,
    timeout: Duration,
    uploads: usize,
}

/// The first line of a failed trial's error, with how many more there
/// were (ferry prints one line per failed file; 128 of them would bury the
/// sweep).
fn first_line(e: &str) -> String {
    let mut lines = e.lines();
    let first = lines.next().unwrap_or("").to_string();
    match lines.count() {
        0 => first,
        n => format!("{first} (and {n} more lines)"),
    }
}

/// TLS trust flags for `ferry cp` over HTTPS (the token goes in the
/// environment, not on a command line other users can read).
fn http_flags(args: &BenchArgs) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(f) = &args.cacert {
        v.push("--cacert".into());
        v.push(f.display().to_string());
    }
    for p in &args.pin {
        v.push("--pin".into());
        v.push(p.clone());
    }
    if args.insecure {
        v.push("-k".into());
    }
    v
}

fn ssh_flags(args: &BenchArgs) -> Vec<String> {
    let mut v = Vec::new();
    // As -o ProxyJump, first, so both ferry cp and OpenSSH's sftp (used
    // for the scratch directory) take it over the config files.
    if let Some(j) = &args.jump {
        v.push("-o".into());
        v.push(format!("ProxyJump={j}"));
    }
    if let Some(f) = &args.ssh_config {
        v.push("-F".into());
        v.push(f.display().to_string());
    }
    for i in &args.identity {
        v.push("-i".into());
        v.push(i.display().to_string());
    }
    for o in &args.ssh_option {
        v.push("-o".into());
        v.push(o.clone());
    }
    v
}

impl Ctx<'_> {
    fn ferry_cp(&self, t: &Tuning, from: &str, to: &str) -> Command {
        let mut c = Command::new(&self.ferry);
        c.args(["cp", "-q", "-r"]);
        match self.target.scheme {
            Scheme::Sftp => {
                c.args(ssh_flags(self.args));
            }
            Scheme::Https | Scheme::Http => {
                c.args(http_flags(self.args));
                if let Some(tok) = &self.args.token {
                    c.env("FERRY_TOKEN", tok);
                }
            }
            Scheme::Ftps => {
                c.args(http_flags(self.args));
            }
            Scheme::Ftp => {}
        }
        c.args(t.flags());
        c.arg(from).arg(to);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, mut cmd: Command, log: &Path) -> Result<f64, String> {
        cmd.stderr(fs::File::create(log).map_err(|e| e.to_string())?);
        let o = proc::run_measured(cmd, self.timeout).map_err(|e| format!("{e:#}"))?;
        if o.timed_out {
            return Err(format!("timeout after {} s", self.timeout.as_secs()));
        }
        if o.code != 0 {
            let err = fs::read_to_string(log).unwrap_or_default();
            return Err(format!("exit {}: {}", o.code, err.trim()));
        }
        Ok(o.wall.as_secs_f64())
    }

    /// Download `remote_rel` with `t` into a fresh local dir and verify.
    fn download(&self, t: &Tuning, remote_rel: &str) -> Result<f64, String> {
        let dest = self.work.join("dl");
        let _ = fs::remove_dir_all(&dest);
        fs::create_dir_all(&dest).map_err(|e| e.to_string())?;
        let from = self.target.url(&format!("{}/{remote_rel}", self.scratch));
        let secs = self.run(
            self.ferry_cp(t, &from, &format!("{}/", dest.display())),
            &self.work.join("dl.err"),
        )?;
        let name = remote_rel.rsplit('/').next().unwrap_or(remote_rel);
        for ds in &self.sets {
            data::verify(ds, &dest.join(name).join(&ds.name))?;
        }
        Ok(secs)
    }

    /// Upload the set with `t` to a new `u<N>` and verify it by
    /// downloading it back with the defaults.
    fn upload(&mut self, t: &Tuning) -> Result<f64, String> {
        let rel = format!("u{}", self.uploads);
        self.uploads += 1;
        let to = self.target.url(&format!("{}/{rel}", self.scratch));
        let secs = self.run(
            self.ferry_cp(t, &self.upload_src.display().to_string(), &to),
            &self.work.join("up.err"),
        )?;
        self.download(&Tuning::default(), &rel)
            .map_err(|e| format!("uploaded tree does not verify: {e}"))?;
        Ok(secs)
    }

    fn trial(&mut self, t: &Tuning, upload: bool) -> Trial {
        let mut best: Option<f64> = None;
        let mut error = None;
        for _ in 0..self.args.runs.unwrap_or(1).max(1) {
            let r = if upload {
                self.upload(t)
            } else {
                self.download(t, "u0")
            };
            match r {
                Ok(secs) => {
                    let v = self.total as f64 / 1e6 / secs;
                    // Median would need 3+ runs; with few runs the best run
                    // is the least disturbed by the network.
                    best = Some(best.map_or(v, |b: f64| b.max(v)));
                }
                Err(e) => {
                    error = Some(e);
                    best = None;
                    break;
                }
            }
        }
        let tr = Trial {
            tuning: t.clone(),
            mb_per_s: best,
            error,
        };
        eprintln!(
            "  {:<8} {:<44} {}",
            if upload { "upload" } else { "download" },
            t.describe(),
            match (&tr.mb_per_s, &tr.error) {
                (Some(v), _) => format!("{v:.1} MB/s"),
                (None, Some(e)) => format!("FAILED: {}", first_line(e)),
                _ => "FAILED".into(),
            }
        );
        tr
    }

    /// Coordinate descent from the defaults.
    fn sweep(&mut self, upload: bool) -> Sweep {
        let base = self.trial(&Tuning::default(), upload);
        let mut best = base.clone();
        let mut compression = None;
        for (values, set) in self.target.scheme.knobs(upload) {
            let start = best.tuning.clone();
            for &v in values {
                let mut t = start.clone();
                set(&mut t, v);
                let tr = self.trial(&t, upload);
                if adds_compression(&start, &t) {
                    compression = Some((tr.clone(), best.clone()));
                }
                // A change must win by 3% to be kept: less is noise.
                if let (Some(a), Some(b)) = (tr.mb_per_s, best.mb_per_s) {
                    if a > b * 1.03 {
                        best = tr;
                    }
                } else if best.mb_per_s.is_none() && tr.mb_per_s.is_some() {
                    best = tr;
                }
            }
        }
        Sweep {
            base,
            best,
            compression,
        }
    }
}

/// `ferry bench URL`.
pub fn run_remote(args: &BenchArgs, url: &str) -> Result<i32> {
    let target = Target::parse(url)?;
    if target.scheme == Scheme::Sftp && proc::which("sftp").is_none() {
        bail!(
            "remote mode removes its scratch directory with OpenSSH's sftp, which is not installed"
        );
    }
    let ferry = match &args.ferry {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("cannot find the ferry binary")?,
    };
    let temp = tempfile::Builder::new()
        .prefix("ferry-bench-remote-")
        .tempdir()?;
    let work = temp.path().to_path_buf();
    // On Ctrl-C the local temp dir goes; the remote scratch dir stays (its
    // URL is printed first, so it can be removed by hand).
    proc::remove_on_interrupt(Some(work.clone()));
    let div = if args.quick { 4 } else { 1 };
    let src = work.join("src").join("set");
    let specs = [
        SetSpec {
            name: "big",
            count: 1,
            size: (32 << 20) / div,
        },
        SetSpec {
            name: "small",
            count: 100 / div as usize,
            size: 64_000,
        },
    ];
    let mut sets = Vec::new();
    for s in &specs {
        sets.push(data::prepare(&src, s, args.compressible)?);
        // Keep only the files in the tree that is uploaded.
        let _ = fs::remove_file(src.join(format!(".{}.manifest.json", s.name)));
    }
    let total: u64 = sets.iter().map(|s| s.total_bytes).sum();
    let empty = work.join("empty");
    fs::create_dir_all(&empty)?;
    let scratch = format!(
        "ferry-bench-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let mut ctx = Ctx {
        args,
        ferry,
        target: target.clone(),
        scratch: scratch.clone(),
        sets,
        total,
        upload_src: src,
        work: work.clone(),
        timeout: Duration::from_secs(args.timeout.unwrap_or(600)),
        uploads: 0,
    };
    eprintln!(
        "ferry bench: {} -> {} ({} files, {:.1} MB of {} data), scratch dir {}",
        ctx.upload_src.display(),
        target.url(""),
        ctx.sets.iter().map(|s| s.files.len()).sum::<usize>(),
        total as f64 / 1e6,
        if args.compressible {
            "text-like"
        } else {
            "random"
        },
        target.url(&scratch)
    );
    // Create the scratch dir (copying an empty dir), then the first upload
    // (u0, defaults) that every download trial reads.
    let mk = ctx.run(
        ctx.ferry_cp(
            &Tuning::default(),
            &empty.display().to_string(),
            &target.url(&scratch),
        ),
        &work.join("mk.err"),
    );
    let result = match mk {
        Err(e) => Err(anyhow::anyhow!(
            "cannot create {}: {e}",
            target.url(&scratch)
        )),
        Ok(_) => {
            let up = ctx.sweep(true);
            let down = ctx.sweep(false);
            Ok((up, down))
        }
    };
    let cleaned = cleanup(args, &target, &scratch, ctx.uploads, &ctx.sets, &work);
    let (up, down) = result?;
    let mut out = String::new();
    let host_key = target.host_key();
    let _ = writeln!(out, "\nferry bench {}: best settings", target.url(""));
    for (name, sweep) in [("download", &down), ("upload", &up)] {
        let (base, best) = (&sweep.base, &sweep.best);
        match (base.mb_per_s, best.mb_per_s) {
            (Some(b), Some(v)) => {
                let _ = writeln!(
                    out,
                    "  {name:<8} {:<44} {v:.1} MB/s, {:.2}x the defaults ({b:.1} MB/s)",
                    best.tuning.describe(),
                    v / b
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    "  {name:<8} FAILED: {}",
                    best.error
                        .clone()
                        .or(base.error.clone())
                        .unwrap_or_default()
                );
            }
        }
        if let Some((with, without)) = &sweep.compression {
            let kept = adds_compression(&Tuning::default(), &best.tuning);
            let _ = writeln!(
                out,
                "  {:<8} {}",
                "",
                compression_verdict(with, without, kept, args.compressible)
            );
        }
    }
    print!("{out}");
    if let Err(e) = &cleaned {
        eprintln!("ferry bench: warning: {e}");
    }
    if down.best.mb_per_s.is_none() || up.best.mb_per_s.is_none() {
        return Ok(1);
    }
    if args.save {
        let path = hosts::default_path().context("no config directory for hosts.toml")?;
        hosts::save(&path, &host_key, &down.best.tuning, &up.best.tuning)?;
        eprintln!(
            "ferry bench: saved for {host_key} in {} (ferry cp uses them when the flags are not given)",
            path.display()
        );
    } else {
        eprintln!("ferry bench: --save stores these for {host_key}");
    }
    Ok(0)
}

/// Remove the scratch dir: every file the uploads made, then the
/// directories, deepest first (ferry has no rm command yet).
fn cleanup(
    args: &BenchArgs,
    t: &Target,
    scratch: &str,
    uploads: usize,
    sets: &[DataSet],
    work: &Path,
) -> Result<()> {
    match t.scheme {
        Scheme::Sftp => cleanup_sftp(args, t, scratch, uploads, sets, work),
        Scheme::Https | Scheme::Http => cleanup_http(args, t, scratch, uploads, sets),
        Scheme::Ftp | Scheme::Ftps => cleanup_ftp(args, t, scratch, uploads, sets),
    }
}

/// The scratch dir's files, then its directories deepest first, relative
/// to the target's path.
fn scratch_paths(scratch: &str, uploads: usize, sets: &[DataSet]) -> (Vec<String>, Vec<String>) {
    let (mut files, mut dirs) = (Vec::new(), Vec::new());
    for i in 0..uploads {
        for ds in sets {
            let d = format!("{scratch}/u{i}/{}", ds.name);
            files.extend(ds.files.iter().map(|f| format!("{d}/{}", f.name)));
            dirs.push(d);
        }
        dirs.push(format!("{scratch}/u{i}"));
    }
    dirs.push(scratch.to_string());
    (files, dirs)
}

/// The temporary name ferry gives `rel` while writing it
/// (`dir/.NAME.ferry-part`, as in ferry-engine): an upload trial that
/// failed can leave one, and its directory cannot go while it is there.
fn part_name(rel: &str) -> String {
    match rel.rsplit_once('/') {
        Some((dir, name)) => format!("{dir}/.{name}.ferry-part"),
        None => format!(".{rel}.ferry-part"),
    }
}

/// TLS trust from the command line (--cacert, --pin, -k), for the
/// cleanup connections.
fn tls_options(args: &BenchArgs) -> ferry_http::TlsOptions {
    ferry_http::TlsOptions {
        cacert: args.cacert.clone(),
        pins: args.pin.clone(),
        insecure: args.insecure,
    }
}

/// DELETE each file, then each directory (ferry serve removes only empty
/// directories; nginx's dav removes them whole). A missing one (404) is
/// fine: an upload trial that failed early made fewer.
fn cleanup_http(
    args: &BenchArgs,
    t: &Target,
    scratch: &str,
    uploads: usize,
    sets: &[DataSet],
) -> Result<()> {
    let opts = ferry_http::Options {
        tls: tls_options(args),
        token: args.token.clone().filter(|t| !t.is_empty()),
        ..Default::default()
    };
    let client = ferry_http::Client::new(opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mut files, dirs) = scratch_paths(scratch, uploads, sets);
    // Left by failed trials, if any (404 otherwise, which is fine).
    let parts: Vec<String> = files.iter().map(|f| part_name(f)).collect();
    files.extend(parts);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut failed = Vec::new();
        for (rel, dir) in files
            .iter()
            .map(|f| (f, false))
            .chain(dirs.iter().map(|d| (d, true)))
        {
            let text = if dir { t.url(rel) + "/" } else { t.url(rel) };
            let url = ferry_http::Url::parse(&text).map_err(|e| anyhow::anyhow!("{text}: {e}"))?;
            client.trust(&url);
            let r = client
                .send(
                    ferry_http::Method::DELETE,
                    &url,
                    &ferry_http::HeaderMap::new(),
                    None,
                )
                .await;
            match r {
                Ok(resp) if resp.status.is_success() || resp.status.as_u16() == 404 => {
                    let _ = resp.bytes(64 * 1024).await;
                }
                Ok(resp) => failed.push(format!("{text}: HTTP {}", resp.status)),
                Err(e) => failed.push(format!("{text}: {e}")),
            }
        }
        if let Some(first) = failed.first() {
            bail!(
                "could not remove the scratch dir {} (remove it by hand): {first}{}",
                t.url(scratch),
                if failed.len() > 1 {
                    format!(" and {} more", failed.len() - 1)
                } else {
                    String::new()
                }
            );
        }
        Ok(())
    })
}

/// Remove the scratch dir with OpenSSH sftp.
fn cleanup_sftp(
    args: &BenchArgs,
    t: &Target,
    scratch: &str,
    uploads: usize,
    sets: &[DataSet],
    work: &Path,
) -> Result<()> {
    let mut batch = String::new();
    for i in 0..uploads {
        for ds in sets {
            let d = t.sftp_path(&format!("{scratch}/u{i}/{}", ds.name));
            // One rm per file: a quoted glob is not expanded by sftp.
            for f in &ds.files {
                let _ = writeln!(batch, "-rm \"{d}/{}\"", f.name);
                // A failed trial's temporary file, if any ("-": no error
                // when there is none).
                let _ = writeln!(batch, "-rm \"{}\"", part_name(&format!("{d}/{}", f.name)));
            }
            let _ = writeln!(batch, "-rmdir \"{d}\"");
        }
        let _ = writeln!(
            batch,
            "-rmdir \"{}\"",
            t.sftp_path(&format!("{scratch}/u{i}"))
        );
    }
    let _ = writeln!(batch, "-rmdir \"{}\"", t.sftp_path(scratch));
    let bf = work.join("cleanup.batch");
    fs::write(&bf, batch)?;
    let mut c = Command::new("sftp");
    c.arg("-q")
        .arg("-b")
        .arg(&bf)
        .args(["-P", &t.port.to_string()]);
    c.args(ssh_flags(args));
    c.arg(match &t.user {
        Some(u) => format!("{u}@{}", t.host),
        None => t.host.clone(),
    });
    let o = c
        .stdin(Stdio::null())
        .output()
        .context("running sftp to remove the scratch dir")?;
    if !o.status.success() {
        bail!(
            "could not remove the scratch dir {} (remove it by hand): {}",
            t.url(scratch),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// The FTP cleanup: DELE every file, RMD every directory, deepest first.
fn cleanup_ftp(
    args: &BenchArgs,
    t: &Target,
    scratch: &str,
    uploads: usize,
    sets: &[DataSet],
) -> Result<()> {
    let (user, pass) = match t
        .user
        .as_deref()
        .map(|u| u.split_once(':').unwrap_or((u, "")))
    {
        Some((u, p)) => (
            u.to_string(),
            if p.is_empty() {
                std::env::var("FERRY_PASSWORD").unwrap_or_default()
            } else {
                p.to_string()
            },
        ),
        None => ("anonymous".to_string(), "ferry@".to_string()),
    };
    let security = if t.scheme == Scheme::Ftps {
        ferry_ftp::Security::Implicit
    } else {
        ferry_ftp::Security::Plain
    };
    let tls = if security == ferry_ftp::Security::Plain {
        None
    } else {
        Some(
            ferry_http::tls::client_config(&tls_options(args), &[])
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
    };
    let ep = std::sync::Arc::new(ferry_ftp::Endpoint::new(
        &t.host, t.port, &user, &pass, security, tls,
    ));
    let mut c = ferry_ftp::Conn::open(&ep).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut failed = 0;
    let mut rm = |r: Result<(), ferry_ftp::FtpError>| {
        if r.is_err() {
            failed += 1;
        }
    };
    let (files, dirs) = scratch_paths(scratch, uploads, sets);
    for f in files {
        // A failed trial's temporary file, if any: not there is fine.
        let _ = c.remove(&t.ftp_path(&part_name(&f)));
        rm(c.remove(&t.ftp_path(&f)));
    }
    for d in dirs {
        rm(c.rmdir(&t.ftp_path(&d)));
    }
    c.quit();
    if failed > 0 {
        bail!(
            "could not remove all of the scratch dir {} ({failed} refusals; remove it by hand)",
            t.url(scratch)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn targets_per_scheme() {
        let t = Target::parse("https://example.org/scratch/").unwrap();
        assert_eq!(
            (t.scheme, t.port, t.path.as_str()),
            (Scheme::Https, 443, "/scratch")
        );
        assert_eq!(t.url("x"), "https://example.org:443/scratch/x");
        assert_eq!(t.host_key(), "https://example.org:443");
        let t = Target::parse("http://[::1]:8080").unwrap();
        assert_eq!(
            (t.scheme, t.host.as_str(), t.port),
            (Scheme::Http, "::1", 8080)
        );
        assert_eq!(t.url("x"), "http://[::1]:8080/x");
        let t = Target::parse("sftp://me@h:2222/~/d").unwrap();
        assert_eq!(
            (t.scheme, t.port, t.host_key()),
            (Scheme::Sftp, 2222, "h:2222".into())
        );
        let t = Target::parse("ftp://u:p@h/%2Ftmp/x").unwrap();
        assert_eq!((t.scheme, t.port), (Scheme::Ftp, 21));
        assert_eq!(t.ftp_path("s/f"), "/tmp/x/s/f");
        assert_eq!(t.host_key(), "ftp://h:21");
        let t = Target::parse("ftps://h").unwrap();
        assert_eq!(
            (t.scheme, t.port, t.ftp_path("s")),
            (Scheme::Ftps, 990, "s".into())
        );
        assert!(Target::parse("gopher://h/").is_err());
        // Uploads over HTTP sweep neither ranges nor encoding.
        let mut t = Tuning::default();
        for (values, set) in Scheme::Https.knobs(true) {
            set(&mut t, values[0]);
        }
        assert_eq!((t.streams, t.compressed), (None, None));
    }

    #[test]
    fn sftp_sweeps_ssh_compression_both_ways_last() {
        for upload in [false, true] {
            let knobs = Scheme::Sftp.knobs(upload);
            let mut t = Tuning::default();
            for (values, set) in &knobs {
                set(&mut t, values[0]);
            }
            assert_eq!(t.compress, Some(true));
            assert_eq!(t.compressed, None, "--compressed is HTTP's");
            // Compression is tried once the transfer settings are chosen.
            let (values, set) = knobs.last().unwrap();
            let mut t = Tuning::default();
            set(&mut t, values[0]);
            assert_eq!(t.describe(), "-C");
            assert!(adds_compression(&Tuning::default(), &t));
        }
        // No other scheme turns SSH compression on.
        for scheme in [Scheme::Https, Scheme::Http, Scheme::Ftp, Scheme::Ftps] {
            for upload in [false, true] {
                let mut t = Tuning::default();
                for (values, set) in scheme.knobs(upload) {
                    for &v in values {
                        set(&mut t, v);
                    }
                }
                assert_eq!(t.compress, None, "{scheme:?}");
            }
        }
    }

    #[test]
    fn compression_verdict_explains_itself() {
        let trial = |compress: bool, mb: Option<f64>, error: Option<&str>| Trial {
            tuning: Tuning {
                compress: compress.then_some(true),
                ..Tuning::default()
            },
            mb_per_s: mb,
            error: error.map(str::to_string),
        };
        let without = trial(false, Some(100.0), None);
        assert_eq!(
            compression_verdict(&trial(true, Some(50.0), None), &without, false, false),
            "compression: off (no gain: -C gave 0.50x on random data; \
             --compressible sweeps text-like data)"
        );
        assert_eq!(
            compression_verdict(&trial(true, Some(250.0), None), &without, true, true),
            "compression: on (-C: 2.50x the speed without it on text-like data)"
        );
        assert_eq!(
            compression_verdict(
                &trial(true, None, Some("exit 1: x\ny")),
                &without,
                false,
                true
            ),
            "compression: off (-C FAILED: exit 1: x (and 1 more lines))"
        );
        let http = Trial {
            tuning: Tuning {
                compressed: Some(true),
                ..Tuning::default()
            },
            ..trial(false, Some(101.0), None)
        };
        assert!(compression_verdict(&http, &without, false, false)
            .starts_with("compression: off (no gain: --compressed gave 1.01x on random data"));
    }

    #[test]
    fn failed_trials_print_one_line() {
        assert_eq!(first_line("a"), "a");
        assert_eq!(first_line("a\nb\nc"), "a (and 2 more lines)");
    }

    #[test]
    fn part_names_are_ferrys_temporary_names() {
        assert_eq!(part_name("s/u1/big/f.bin"), "s/u1/big/.f.bin.ferry-part");
        assert_eq!(part_name("f"), ".f.ferry-part");
    }

    #[test]
    fn scratch_paths_list_files_before_their_dirs() {
        let (files, dirs) = scratch_paths("s", 1, &[]);
        assert!(files.is_empty());
        assert_eq!(dirs, ["s/u0", "s"]);
    }
}
