//! Remote mode, `ferry bench sftp://[user@]host[:port]/dir` (or
//! `ftp://` / `ftps://`): find the `ferry cp` settings that move data
//! fastest to and from one real server.
//!
//! A modest generated set (one 32 MiB file and 100 files of 64 kB; a
//! quarter of that with `--quick`) is uploaded into a scratch directory
//! under `dir` (`ferry-bench-<pid>-<random>`, removed afterwards with
//! OpenSSH's `sftp`, or over FTP with ferry-ftp's DELE/RMD), then the knobs
//! are swept one at a time (coordinate descent, starting from ferry's
//! defaults): `--streams` 1/2/4/8 (not for FTP uploads, which are not
//! split), `-P` 1/4/16, and over SFTP `--chunk` 32k/256k and `--depth`
//! 16/64. FTP logs in as the URL says (else
//! anonymous; `FERRY_PASSWORD` for a user without a password), and
//! `ftps://` trusts the system's roots. Each trial is a real
//! `ferry cp` run: downloads are verified by blake3, and each upload is
//! downloaded back with the defaults and verified. The best settings per
//! direction and their gain over the defaults are printed; `--save`
//! writes them to `~/.config/ferry/hosts.toml`, which `ferry cp` reads for
//! that host when the flags are not given.
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::data::{self, DataSet, SetSpec};
use crate::hosts::{self, Tuning};
use crate::proc;
use crate::BenchArgs;

/// The protocol of a remote-mode URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Sftp,
    Ftp,
    /// Implicit TLS.
    Ftps,
}

impl Scheme {
    fn name(self) -> &'static str {
        match self {
            Scheme::Sftp => "sftp",
            Scheme::Ftp => "ftp",
            Scheme::Ftps => "ftps",
        }
    }
}

/// `sftp://[user@]host[:port]/path` (or ftp://, ftps://) split up.
#[derive(Debug, Clone)]
pub struct Target {
    pub scheme: Scheme,
    /// With its `:password` when the URL had one (FTP).
    pub user: Option<String>,
    pub host: String,
    pub port: u16,
    /// As in the URL ("/~/x" is home-relative).
    pub path: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target> {
        let (scheme, rest) = if let Some(r) = url.strip_prefix("sftp://") {
            (Scheme::Sftp, r)
        } else if let Some(r) = url.strip_prefix("ftp://") {
            (Scheme::Ftp, r)
        } else if let Some(r) = url.strip_prefix("ftps://") {
            (Scheme::Ftps, r)
        } else {
            bail!("{url}: remote mode supports sftp://, ftp:// and ftps:// URLs (https:// is not written yet)");
        };
        // FTP paths are relative to the login directory, as in ferry cp.
        let home = if scheme == Scheme::Sftp { "/~" } else { "/" };
        let (auth, path) = match rest.find('/') {
            Some(i) => (rest.get(..i).unwrap_or(""), rest.get(i..).unwrap_or("/")),
            None => (rest, home),
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
            _ => (
                hostport.to_string(),
                match scheme {
                    Scheme::Sftp => 22,
                    Scheme::Ftp => 21,
                    Scheme::Ftps => 990,
                },
            ),
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

    /// `sftp://authority/path/rel`
    fn url(&self, rel: &str) -> String {
        let base = self.path.trim_end_matches('/');
        format!("{}://{}{base}/{rel}", self.scheme.name(), self.authority())
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

fn ssh_flags(args: &BenchArgs) -> Vec<String> {
    let mut v = Vec::new();
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
        c.args(["cp", "-q", "-r"]).args(ssh_flags(self.args));
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
                (None, Some(e)) => format!("FAILED: {e}"),
                _ => "FAILED".into(),
            }
        );
        tr
    }

    /// Coordinate descent from the defaults.
    fn sweep(&mut self, upload: bool) -> (Trial, Trial) {
        let base = self.trial(&Tuning::default(), upload);
        let mut best = base.clone();
        type Knob = fn(&mut Tuning, u64);
        let knobs: [(&[u64], Knob); 4] = [
            (&[1, 2, 4, 8], |t, v| t.streams = Some(v as usize)),
            (&[1, 4, 16], |t, v| t.parallel = Some(v as usize)),
            (&[32 << 10, 256 << 10], |t, v| t.chunk = Some(v)),
            (&[16, 64], |t, v| t.depth = Some(v as usize)),
        ];
        // FTP has no request size or pipeline depth, and splits only
        // downloads into ranges: connections only.
        let ftp = self.target.scheme != Scheme::Sftp;
        let (skip, take) = match (ftp, upload) {
            (false, _) => (0, 4),
            (true, false) => (0, 2),
            (true, true) => (1, 1),
        };
        for (values, set) in knobs.into_iter().skip(skip).take(take) {
            let start = best.tuning.clone();
            for &v in values {
                let mut t = start.clone();
                set(&mut t, v);
                let tr = self.trial(&t, upload);
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
        (base, best)
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
        "ferry bench: {} -> {} ({} files, {:.1} MB), scratch dir {}",
        ctx.upload_src.display(),
        target.url(""),
        ctx.sets.iter().map(|s| s.files.len()).sum::<usize>(),
        total as f64 / 1e6,
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
    let ((up_base, up_best), (down_base, down_best)) = result?;
    let mut out = String::new();
    let host_key = format!("{}:{}", target.host, target.port);
    let _ = writeln!(out, "\nferry bench {}: best settings", target.url(""));
    for (name, base, best) in [
        ("download", &down_base, &down_best),
        ("upload", &up_base, &up_best),
    ] {
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
    }
    print!("{out}");
    if let Err(e) = &cleaned {
        eprintln!("ferry bench: warning: {e}");
    }
    if down_best.mb_per_s.is_none() || up_best.mb_per_s.is_none() {
        return Ok(1);
    }
    if args.save {
        let path = hosts::default_path().context("no config directory for hosts.toml")?;
        hosts::save(&path, &host_key, &down_best.tuning, &up_best.tuning)?;
        eprintln!(
            "ferry bench: saved for {host_key} in {} (ferry cp uses them when the flags are not given)",
            path.display()
        );
    } else {
        eprintln!("ferry bench: --save stores these for {host_key}");
    }
    Ok(0)
}

/// Remove the scratch dir with OpenSSH sftp (ferry has no rm yet), or
/// over FTP.
fn cleanup(
    args: &BenchArgs,
    t: &Target,
    scratch: &str,
    uploads: usize,
    sets: &[DataSet],
    work: &Path,
) -> Result<()> {
    if t.scheme != Scheme::Sftp {
        return cleanup_ftp(t, scratch, uploads, sets);
    }
    let mut batch = String::new();
    for i in 0..uploads {
        for ds in sets {
            let d = t.sftp_path(&format!("{scratch}/u{i}/{}", ds.name));
            // One rm per file: a quoted glob is not expanded by sftp.
            for f in &ds.files {
                let _ = writeln!(batch, "-rm \"{d}/{}\"", f.name);
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
fn cleanup_ftp(t: &Target, scratch: &str, uploads: usize, sets: &[DataSet]) -> Result<()> {
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
            ferry_http::tls::client_config(&ferry_http::TlsOptions::default(), &[])
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
    for i in 0..uploads {
        for ds in sets {
            let d = t.ftp_path(&format!("{scratch}/u{i}/{}", ds.name));
            for f in &ds.files {
                rm(c.remove(&format!("{d}/{}", f.name)));
            }
            rm(c.rmdir(&d));
        }
        rm(c.rmdir(&t.ftp_path(&format!("{scratch}/u{i}"))));
    }
    rm(c.rmdir(&t.ftp_path(scratch)));
    c.quit();
    if failed > 0 {
        bail!(
            "could not remove all of the scratch dir {} ({failed} refusals; remove it by hand)",
            t.url(scratch)
        );
    }
    Ok(())
}
