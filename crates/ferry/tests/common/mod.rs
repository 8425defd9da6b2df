//! End-to-end test harness: a real OpenSSH `sshd` on 127.0.0.1, the `ferry`
//! binary run with a private HOME, deterministic test data and tree checks.
//!
//! Everything a test starts is stopped by PID when its guard is dropped:
//! `Sshd` (the listener and every per-connection child, found through the
//! process tree because sshd's children call `setsid()`), `FerryChild`,
//! `Tmpfs` (unmounted) and the temporary directories.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;

/// Whether `prog` runs (`--version`; `openssl version`).
pub fn have(prog: &str) -> bool {
    Command::new(prog)
        .arg(if prog == "openssl" {
            "version"
        } else {
            "--version"
        })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Where a peer installed by scripts/install-peers.sh may be: `name` on
/// PATH, then /usr/local/bin/`name`, then ~/go/bin/`go_name` (where `go
/// install` puts it); the first that exists and `usable` accepts.
pub fn installed(name: &str, go_name: &str, usable: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let mut c: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect())
        .unwrap_or_default();
    c.push(Path::new("/usr/local/bin").join(name));
    if let Some(h) = std::env::var_os("HOME") {
        c.push(Path::new(&h).join("go/bin").join(go_name));
    }
    c.into_iter().find(|p| p.is_file() && usable(p))
}

/// Skip the test (return) when `prog` is not installed.
#[allow(unused_macros)]
macro_rules! need {
    ($prog:expr) => {
        if !$crate::common::have($prog) {
            eprintln!("SKIP: {} is not installed", $prog);
            return;
        }
    };
}

pub const SSHD_BIN: &str = "/usr/sbin/sshd";
pub const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";
/// Passphrase of [`Sshd::key_encrypted`].
pub const PASSPHRASE: &str = "hunter2";
/// `Host` alias written to [`Sshd::ssh_config`].
pub const HOST_ALIAS: &str = "sshd-test";
/// Every ferry run is killed after this long.
pub const FERRY_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound for sshd to start listening.
const SSHD_START_TIMEOUT: Duration = Duration::from_secs(30);

/// `vec![OsString, ...]` from anything path- or string-like.
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        ::std::vec::Vec::<::std::ffi::OsString>::from([$(::std::ffi::OsString::from($a)),*])
    };
}

// ---------------------------------------------------------------------------
// small process helpers
// ---------------------------------------------------------------------------

/// Run a helper command (ssh-keygen, useradd, ...) to completion; panic with
/// its output if it fails.
pub fn run_checked(cmd: &mut Command) -> Output {
    let desc = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    if !out.status.success() {
        panic!(
            "{desc} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn stdout_of(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run_checked(cmd).stdout)
        .trim()
        .to_string()
}

/// The procps `kill` program (shells' builtins differ, e.g. dash has no
/// `--`).
fn kill_bin() -> &'static str {
    ["/bin/kill", "/usr/bin/kill"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("kill")
}

/// Send `signal` (a name like "KILL") to the given process ids with the
/// `kill` utility. Missing processes are ignored.
fn send_signal(signal: &str, pids: &[String]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new(kill_bin())
        .arg(format!("-{signal}"))
        .arg("--")
        .args(pids)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

pub fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| stdout_of(Command::new("id").arg("-u")) == "0")
}

/// Name of the user running the tests (the sshd login user for key auth).
pub fn current_user() -> String {
    static USER: OnceLock<String> = OnceLock::new();
    USER.get_or_init(|| stdout_of(Command::new("id").arg("-un")))
        .clone()
}

/// Home directory of `user` according to the password database (what the
/// SFTP server considers `~`), not `$HOME`.
pub fn home_of(user: &str) -> PathBuf {
    let line = stdout_of(Command::new("getent").args(["passwd", user]));
    let home = line.split(':').nth(5).unwrap_or_default();
    assert!(!home.is_empty(), "no home for {user} in {line:?}");
    PathBuf::from(home)
}

#[derive(Clone, Debug)]
struct ProcInfo {
    ppid: u32,
    pgrp: u32,
    state: char,
    start: u64,
}

/// Snapshot of /proc: pid -> (ppid, pgrp, state, starttime).
fn proc_table() -> HashMap<u32, ProcInfo> {
    let mut table = HashMap::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return table;
    };
    for ent in rd.flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(ent.path().join("stat")) else {
            continue;
        };
        // "pid (comm) S ppid pgrp session ..."; comm may contain anything.
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if f.len() < 20 {
            continue;
        }
        let (Some(state), Ok(ppid), Ok(pgrp), Ok(start)) = (
            f[0].chars().next(),
            f[1].parse(),
            f[2].parse(),
            f[19].parse(),
        ) else {
            continue;
        };
        table.insert(
            pid,
            ProcInfo {
                ppid,
                pgrp,
                state,
                start,
            },
        );
    }
    table
}

/// Live processes that belong to `root`: itself, its descendants (through
/// ppid), members of its process group, plus still-live members of `known`
/// (orphans re-parented away after an ancestor died). Identity is
/// (pid, starttime), so a recycled pid is never mistaken for ours.
fn process_tree(root: u32, known: &mut HashMap<u32, u64>) -> Vec<u32> {
    let table = proc_table();
    let alive = |pid: &u32, start: &u64| {
        table
            .get(pid)
            .is_some_and(|p| p.start == *start && p.state != 'Z' && p.state != 'X')
    };
    known.retain(|pid, start| alive(pid, start));
    if let Some(p) = table.get(&root) {
        if p.state != 'Z' && p.state != 'X' {
            known.entry(root).or_insert(p.start);
        }
    }
    let root_start = known.get(&root).copied();
    loop {
        let mut added = false;
        for (pid, p) in &table {
            if known.contains_key(pid) || p.state == 'Z' || p.state == 'X' {
                continue;
            }
            let in_group = root_start.is_some_and(|rs| p.pgrp == root && p.start >= rs);
            if known.contains_key(&p.ppid) || in_group {
                known.insert(*pid, p.start);
                added = true;
            }
        }
        if !added {
            break;
        }
    }
    let mut v: Vec<u32> = known.keys().copied().collect();
    v.sort_unstable();
    v
}

/// Freeze the whole tree of `root` (itself, descendants, process group)
/// with SIGSTOP until no new process appears — a stopped process cannot
/// fork, so nothing escapes by being re-parented — then SIGKILL all of it;
/// repeat until nothing is left.
fn kill_tree(root: u32) {
    let mut known = HashMap::new();
    let give_up = Instant::now() + Duration::from_secs(30);
    while Instant::now() < give_up {
        let mut pids = process_tree(root, &mut known);
        if pids.is_empty() {
            return;
        }
        // STOP until the set is closed (every member stopped, no newcomers).
        for _ in 0..50 {
            let strs: Vec<String> = pids.iter().map(u32::to_string).collect();
            send_signal("STOP", &strs);
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                let table = proc_table();
                let all_stopped = pids.iter().all(|p| {
                    table
                        .get(p)
                        .is_none_or(|i| matches!(i.state, 'T' | 't' | 'Z' | 'X'))
                });
                if all_stopped {
                    break;
                }
                thread::sleep(Duration::from_millis(1));
            }
            let again = process_tree(root, &mut known);
            if again.iter().all(|p| pids.contains(p)) {
                break;
            }
            pids = again;
        }
        let mut strs: Vec<String> = pids.iter().map(u32::to_string).collect();
        strs.push(format!("-{root}")); // the process group, as a backstop
        send_signal("KILL", &strs);
        thread::sleep(Duration::from_millis(5));
    }
    panic!("processes of sshd {root} survive SIGKILL: {known:?}");
}

/// Live processes that have `file` open (sshd and all its per-connection
/// children keep the log on stderr, wherever they were re-parented; the
/// environment is no use as sshd's setproctitle overwrites it).
pub fn holders_of(file: &Path) -> Vec<u32> {
    let mut deleted = file.as_os_str().to_owned();
    deleted.push(" (deleted)");
    let deleted = PathBuf::from(deleted);
    let table = proc_table();
    let mut v: Vec<u32> = table
        .iter()
        .filter(|(_, p)| p.state != 'Z' && p.state != 'X')
        .filter(|(pid, _)| {
            fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
                rd.flatten()
                    .any(|fd| fs::read_link(fd.path()).is_ok_and(|l| l == file || l == deleted))
            })
        })
        .map(|(pid, _)| *pid)
        .collect();
    v.sort_unstable();
    v
}

/// SIGKILL stragglers holding `file` open until none is left.
fn kill_holders(file: &Path) {
    for _ in 0..100 {
        let pids = holders_of(file);
        if pids.is_empty() {
            return;
        }
        let strs: Vec<String> = pids.iter().map(u32::to_string).collect();
        send_signal("KILL", &strs);
        thread::sleep(Duration::from_millis(10));
    }
}

/// Read a pipe to the end on a thread.
fn drain<R: Read + Send + 'static>(r: Option<R>) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        buf
    })
}

/// Wait for `child` (whose stdout/stderr are drained by `out`/`err`) with a
/// timeout; on timeout kill it by PID and panic with what it printed.
fn wait_with_timeout(
    child: &mut Child,
    out: JoinHandle<Vec<u8>>,
    err: JoinHandle<Vec<u8>>,
    timeout: Duration,
    what: &str,
) -> Output {
    let deadline = Instant::now() + timeout;
    let status: Option<ExitStatus> = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    let timed_out = status.is_none();
    let status = match status {
        Some(st) => st,
        None => {
            let _ = child.kill();
            child
                .wait()
                .unwrap_or_else(|e| panic!("reaping {what}: {e}"))
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if timed_out {
        panic!(
            "{what} did not finish within {timeout:?} and was killed\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    }
    Output {
        status,
        stdout,
        stderr,
    }
}

// ---------------------------------------------------------------------------
// running ferry
// ---------------------------------------------------------------------------

pub fn ferry_bin() -> &'static str {
    env!("CARGO_BIN_EXE_ferry")
}

/// The library's example (crates/ferry-engine/examples/events.rs) beside
/// ferry's binary, built first if it is not there.
pub fn events_example() -> PathBuf {
    let example = Path::new(ferry_bin())
        .with_file_name("examples")
        .join("events");
    if !example.exists() {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "-p", "ferry-engine", "--example", "events"]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let st = build.stdout(Stdio::null()).status().unwrap();
        assert!(st.success());
    }
    example
}

/// ferry, started through `setsid` (which execs in place, so the PID is
/// ferry's) so it has no controlling terminal and can never prompt on
/// /dev/tty, even when the tests run in a terminal.
fn ferry_command<S: AsRef<OsStr>>(home: &Path, args: &[S], envs: &[(&str, &str)]) -> Command {
    ferry_command_via(&[], home, args, envs)
}

/// [`ferry_command`] run by `via` (a tool and its arguments, ferry's
/// path and `args` after them; empty: ferry itself).
fn ferry_command_via<S: AsRef<OsStr>>(
    via: &[OsString],
    home: &Path,
    args: &[S],
    envs: &[(&str, &str)],
) -> Command {
    let setsid = Path::new("/usr/bin/setsid");
    let mut cmd = if setsid.exists() {
        let mut c = Command::new(setsid);
        c.args(via);
        c.arg(ferry_bin());
        c
    } else if let Some((tool, rest)) = via.split_first() {
        let mut c = Command::new(tool);
        c.args(rest);
        c.arg(ferry_bin());
        c
    } else {
        Command::new(ferry_bin())
    };
    cmd.args(args)
        .env("HOME", home)
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("FERRY_PASSWORD")
        .env_remove("FERRY_PASSPHRASE")
        .env_remove("SSH_ASKPASS")
        // No run looks for EC2 instance metadata at 169.254.169.254 (the
        // S3 chain's last link) unless its test says where it is.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

fn describe_args<S: AsRef<OsStr>>(args: &[S]) -> String {
    let mut s = String::from("ferry");
    for a in args {
        s.push(' ');
        s.push_str(&a.as_ref().to_string_lossy());
    }
    s
}

/// Run ferry with HOME=`home`, no agent, stdin null, extra `envs`, killed
/// after [`FERRY_TIMEOUT`].
pub fn ferry_in<S: AsRef<OsStr>>(home: &Path, args: &[S], envs: &[(&str, &str)]) -> Output {
    let what = describe_args(args);
    let mut child = ferry_command(home, args, envs)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    wait_with_timeout(&mut child, out, err, FERRY_TIMEOUT, &what)
}

/// [`ferry_in`] with its stderr closed before ferry writes to it (`ferry
/// ... 2>&1 | head` once `head` exited); the `Output`'s stderr is empty.
pub fn ferry_closed_stderr<S: AsRef<OsStr>>(
    home: &Path,
    args: &[S],
    envs: &[(&str, &str)],
) -> Output {
    let what = describe_args(args);
    let mut child = ferry_command(home, args, envs)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    drop(child.stderr.take());
    let out = drain(child.stdout.take());
    wait_with_timeout(
        &mut child,
        out,
        drain(None::<std::process::ChildStderr>),
        FERRY_TIMEOUT,
        &what,
    )
}

/// Run ferry without an sshd (usage errors etc.), with a fresh empty HOME.
pub fn ferry<S: AsRef<OsStr>>(args: &[S]) -> Output {
    let home = tempdir();
    ferry_in(home.path(), args, &[])
}

/// A running ferry process; killed by PID when dropped.
pub struct FerryChild {
    child: Child,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    what: String,
    done: bool,
}

impl FerryChild {
    pub fn spawn<S: AsRef<OsStr>>(home: &Path, args: &[S], envs: &[(&str, &str)]) -> FerryChild {
        FerryChild::start(ferry_command(home, args, envs), describe_args(args))
    }

    /// Start `cmd` with its output drained as it comes.
    fn start(mut cmd: Command, what: String) -> FerryChild {
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let out = Some(drain(child.stdout.take()));
        let err = Some(drain(child.stderr.take()));
        FerryChild {
            child,
            out,
            err,
            what,
            done: false,
        }
    }

    /// [`FerryChild::spawn`] under a tool (`via`: the tool and its
    /// arguments, e.g. `strace -f ...`), which runs ferry as its child.
    pub fn spawn_via<S: AsRef<OsStr>>(
        via: &[OsString],
        home: &Path,
        args: &[S],
        envs: &[(&str, &str)],
    ) -> FerryChild {
        let what = format!("{} {}", describe_args(via), describe_args(args));
        FerryChild::start(ferry_command_via(via, home, args, envs), what)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL it (a client cut off mid-copy) and collect what it said.
    pub fn kill(mut self) -> Output {
        let _ = self.child.kill();
        self.wait()
    }

    /// `Some(status)` once the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Wait (at most [`FERRY_TIMEOUT`]) and collect the output.
    pub fn wait(mut self) -> Output {
        self.done = true;
        let (Some(out), Some(err)) = (self.out.take(), self.err.take()) else {
            panic!("{} already waited for", self.what);
        };
        wait_with_timeout(&mut self.child, out, err, FERRY_TIMEOUT, &self.what)
    }
}

impl Drop for FerryChild {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Text of an output, for assertions and messages.
pub fn stdout_text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr_text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `XX:YY:...`, the SHA-256 fingerprint of a PEM certificate's DER as
/// `openssl x509 -fingerprint -sha256` prints it.
pub fn cert_sha256(cert: &Path) -> String {
    let out = run_checked(
        Command::new("openssl")
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(cert),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .split_once('=')
        .map(|(_, h)| h.trim().to_string())
        .unwrap_or_else(|| panic!("openssl fingerprint: {text}"))
}

/// `ferry cp -q ARGS...`.
pub fn cp(args: &[String]) -> Output {
    let mut a = vec!["cp".to_string(), "-q".to_string()];
    a.extend_from_slice(args);
    ferry(&a)
}

/// The run exited 0; `ctx` and the output in the message otherwise.
pub fn assert_ok(o: &Output, ctx: &str) {
    assert_eq!(o.status.code(), Some(0), "{ctx}: {}", describe(o));
}

/// The run exited with `code`.
pub fn assert_code(o: &Output, code: i32, ctx: &str) {
    assert_eq!(o.status.code(), Some(code), "{ctx}: {}", describe(o));
}

/// A field of `ferry cp --json`'s summary, as text.
pub fn json_field(o: &Output, key: &str) -> String {
    let j =
        parse_json(stdout_text(o).trim()).unwrap_or_else(|e| panic!("json: {e}: {}", describe(o)));
    match j.get(key) {
        Some(v) => v
            .as_str()
            .map(str::to_string)
            .or_else(|| v.as_f64().map(|f| f.to_string()))
            .unwrap_or_default(),
        None => panic!("no {key} in {}", stdout_text(o)),
    }
}

pub fn describe(o: &Output) -> String {
    format!(
        "exit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        stdout_text(o),
        stderr_text(o)
    )
}

// ---------------------------------------------------------------------------
// sshd
// ---------------------------------------------------------------------------

/// A real OpenSSH sshd on 127.0.0.1 with its own keys and configuration in a
/// temporary directory. Key auth for [`current_user`] via the `sshd-test`
/// alias of [`Sshd::ssh_config`]; password auth on; sftp subsystem is
/// OpenSSH's own sftp-server.
pub struct Sshd {
    dir: TempDir,
    port: u16,
    child: Option<Child>,
    /// `sh` that kills sshd when our end of its stdin closes, i.e. when the
    /// test process dies without running Drop (panic=abort, SIGKILL, ^C).
    watchdog: Option<Child>,
    user: String,
    host_key_line: String,
    /// The sshd is too old for `SetEnv` in sshd_config.
    no_setenv: bool,
    /// Lines added to sshd_config ([`Sshd::set_sshd_options`]).
    extra_config: Vec<String>,
    /// `NAME=value` pairs added to the `SetEnv` line ([`Sshd::set_sshd_env`]).
    extra_env: Vec<String>,
}

fn keygen(path: &Path, kind: &str, bits: Option<&str>, passphrase: &str) {
    let mut cmd = Command::new("ssh-keygen");
    cmd.args(["-q", "-t", kind]);
    if let Some(b) = bits {
        cmd.args(["-b", b]);
    }
    cmd.args(["-N", passphrase, "-C"])
        .arg(format!("ferry-test-{kind}"))
        .arg("-f")
        .arg(path);
    run_checked(&mut cmd);
}

/// A new unencrypted ed25519 key pair at `path` (and `path.pub`), e.g. a
/// certificate authority; returns its public "type base64".
pub fn new_ed25519_key(path: &Path) -> String {
    keygen(path, "ed25519", None, "");
    pubkey_line(&pub_path(path))
}

/// "type base64" of a public key file (comment dropped).
fn pubkey_line(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

fn pub_path(key: &Path) -> PathBuf {
    let mut s = key.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// Start a server, `command(port)`, on a free port and wait (20 s) until
/// it listens on 127.0.0.1, trying five ports (another process may take
/// one first). Its output goes to `log`; `name` and the log explain a
/// server that exits.
pub fn start_listening(
    name: &str,
    log: &Path,
    mut command: impl FnMut(u16) -> std::process::Command,
) -> (std::process::Child, u16) {
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port();
        let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("{name} log: {e}"));
        let mut child = command(port)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (child, port);
            }
            if let Ok(Some(st)) = child.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                last = format!("{name} exited ({st}): {text}");
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                last = format!("{name} did not listen within 20 s");
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    panic!("{name} did not start: {last}");
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind 127.0.0.1:0: {e}"));
    l.local_addr()
        .unwrap_or_else(|e| panic!("local_addr: {e}"))
        .port()
}

pub fn tempdir() -> TempDir {
    tempfile::Builder::new()
        .prefix("ferry-test-")
        .tempdir()
        .unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

enum StartError {
    /// The port was taken (by someone else); another port may work.
    PortBusy(String),
    Fatal(String),
}

impl Sshd {
    /// Generate keys and config, start sshd, wait until it accepts
    /// connections. Panics with the sshd log if it does not come up.
    pub fn start() -> Sshd {
        let dir = tempdir();
        let d = dir.path();
        let keys = d.join("keys");
        fs::create_dir(&keys).unwrap_or_else(|e| panic!("mkdir keys: {e}"));

        let host_key = d.join("ssh_host_ed25519_key");
        keygen(&host_key, "ed25519", None, "");
        let host_key_line = pubkey_line(&pub_path(&host_key));

        keygen(&keys.join("id_ed25519"), "ed25519", None, "");
        keygen(&keys.join("id_ed25519_enc"), "ed25519", None, PASSPHRASE);
        keygen(&keys.join("id_rsa"), "rsa", Some("3072"), "");
        keygen(&keys.join("id_ecdsa"), "ecdsa", Some("256"), "");
        let mut auth = String::new();
        for k in ["id_ed25519", "id_ed25519_enc", "id_rsa", "id_ecdsa"] {
            auth.push_str(&pubkey_line(&pub_path(&keys.join(k))));
            auth.push('\n');
        }
        write(&d.join("authorized_keys"), auth.as_bytes());

        let mut sshd = Sshd {
            dir,
            port: 0,
            child: None,
            watchdog: None,
            user: current_user(),
            host_key_line,
            no_setenv: false,
            extra_config: Vec::new(),
            extra_env: Vec::new(),
        };
        let mut last = String::new();
        for _ in 0..10 {
            sshd.port = free_port();
            sshd.write_configs();
            match sshd.spawn() {
                Ok(()) => return sshd,
                Err(StartError::PortBusy(log)) => last = log,
                Err(StartError::Fatal(msg))
                    if !sshd.no_setenv && msg.contains("Bad configuration option: SetEnv") =>
                {
                    sshd.no_setenv = true;
                }
                Err(StartError::Fatal(msg)) => panic!("{msg}"),
            }
        }
        panic!("sshd could not bind a free port in 10 attempts; last log:\n{last}");
    }

    /// Start sshd again after [`Sshd::kill`]: same directory, keys, config
    /// and port (so known_hosts and URLs stay valid).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + SSHD_START_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(StartError::PortBusy(log)) if Instant::now() < deadline => {
                    let _ = log;
                    thread::sleep(Duration::from_millis(200));
                }
                Err(StartError::PortBusy(log)) => {
                    panic!("restart: port {} stays busy:\n{log}", self.port)
                }
                Err(StartError::Fatal(msg)) => panic!("restart: {msg}"),
            }
        }
    }

    /// Add `lines` to sshd_config (replacing earlier ones given here) and
    /// restart sshd on the same port, e.g. `HostCertificate FILE` or
    /// `AllowTcpForwarding no`.
    pub fn set_sshd_options(&mut self, lines: &[&str]) {
        self.extra_config = lines.iter().map(|l| l.to_string()).collect();
        self.write_sshd_config();
        self.restart();
    }

    /// Give every session `vars` (`NAME=value`, replacing earlier ones
    /// given here) through sshd_config's one `SetEnv` line (sshd keeps the
    /// first `SetEnv` it reads, so not through [`Sshd::set_sshd_options`])
    /// and restart sshd on the same port, e.g. a `PATH` with fake tools
    /// first. `false`, and nothing changed, when this sshd is too old for
    /// `SetEnv`.
    pub fn set_sshd_env(&mut self, vars: &[&str]) -> bool {
        if self.no_setenv {
            return false;
        }
        self.extra_env = vars.iter().map(|v| v.to_string()).collect();
        self.write_sshd_config();
        self.restart();
        true
    }

    /// Sign this server's host key with the CA key `ca` (`ssh-keygen -s CA
    /// -h -n PRINCIPALS -V VALIDITY`) and have sshd present the certificate.
    pub fn use_host_certificate(&mut self, ca: &Path, principals: &str, validity: &str) {
        let cert = self.dir.path().join("ssh_host_ed25519_key-cert.pub");
        let _ = fs::remove_file(&cert);
        run_checked(
            Command::new("ssh-keygen")
                .arg("-q")
                .arg("-s")
                .arg(ca)
                .args([
                    "-I",
                    "ferry-test-host",
                    "-h",
                    "-n",
                    principals,
                    "-V",
                    validity,
                ])
                .arg(pub_path(&self.host_key())),
        );
        let line = format!("HostCertificate {}", cert.display());
        self.set_sshd_options(&[&line]);
    }

    /// The server's private host key (ed25519).
    pub fn host_key(&self) -> PathBuf {
        self.dir.path().join("ssh_host_ed25519_key")
    }

    fn write_configs(&self) {
        self.write_sshd_config();
        self.write_client_config();
        self.write_known_hosts(&self.known_hosts());
    }

    fn write_sshd_config(&self) {
        let d = self.dir.path();
        let cfg = format!(
            "Port {port}\n\
             ListenAddress 127.0.0.1\n\
             HostKey {hk}\n\
             AuthorizedKeysFile {ak}\n\
             PubkeyAuthentication yes\n\
             PasswordAuthentication yes\n\
             KbdInteractiveAuthentication no\n\
             UsePAM no\n\
             StrictModes no\n\
             PidFile {pid}\n\
             Subsystem sftp {sftp}\n\
             LogLevel VERBOSE\n\
             PermitRootLogin yes\n\
             MaxStartups 100\n\
             MaxSessions 100\n\
             {setenv}{extra}",
            port = self.port,
            hk = d.join("ssh_host_ed25519_key").display(),
            ak = d.join("authorized_keys").display(),
            pid = d.join("sshd.pid").display(),
            sftp = SFTP_SERVER,
            // sshd runs the subsystem as `$SHELL -c sftp-server`, and
            // Debian's bash then sources ~/.bashrc (it was "run by ssh").
            // A slow or hanging rc file (pyenv's rehash lock, prompts...)
            // would stall every SFTP session; bash skips that when SHLVL
            // says it is nested. (SetEnv needs OpenSSH >= 8.7.)
            setenv = if self.no_setenv {
                String::new()
            } else {
                let more: String = self.extra_env.iter().map(|v| format!(" {v}")).collect();
                format!("SetEnv SHLVL=1{more}\n")
            },
            extra = self
                .extra_config
                .iter()
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
        );
        write(&d.join("sshd_config"), cfg.as_bytes());
    }

    fn write_client_config(&self) {
        let client = format!(
            "Host {HOST_ALIAS}\n\
             \x20   HostName 127.0.0.1\n\
             \x20   Port {port}\n\
             \x20   User {user}\n\
             \x20   IdentityFile {key}\n\
             \x20   IdentitiesOnly yes\n\
             \x20   UserKnownHostsFile {kh}\n\
             \x20   StrictHostKeyChecking yes\n",
            port = self.port,
            user = self.user,
            key = self.key_ed25519().display(),
            kh = self.known_hosts().display(),
        );
        write(&self.ssh_config(), client.as_bytes());
    }

    fn spawn(&mut self) -> Result<(), StartError> {
        let d = self.dir.path().to_path_buf();
        fs::create_dir_all("/run/sshd")
            .map_err(|e| StartError::Fatal(format!("mkdir /run/sshd: {e}")))?;
        let log_path = d.join("sshd.log");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| StartError::Fatal(format!("open sshd.log: {e}")))?;
        let log_start = log
            .metadata()
            .map_err(|e| StartError::Fatal(format!("stat sshd.log: {e}")))?
            .len() as usize;
        let log2 = log
            .try_clone()
            .map_err(|e| StartError::Fatal(format!("dup sshd.log: {e}")))?;
        let child = Command::new(SSHD_BIN)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| StartError::Fatal(format!("cannot start {SSHD_BIN}: {e}")))?;
        let pid = child.id();
        self.child = Some(child);
        // Own process group, so a ^C to the test run does not take the
        // watchdog down before it has done its job.
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "read _; {} -KILL -- -{pid} {pid} 2>/dev/null",
                kill_bin()
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| StartError::Fatal(format!("cannot start the sshd watchdog: {e}")))?;
        self.watchdog = Some(watchdog);

        let ready = format!("Server listening on 127.0.0.1 port {}", self.port);
        let deadline = Instant::now() + SSHD_START_TIMEOUT;
        loop {
            let text = fs::read(&log_path).unwrap_or_default();
            let new = String::from_utf8_lossy(text.get(log_start..).unwrap_or_default());
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(st) = exited {
                self.stop();
                let msg = format!(
                    "sshd exited ({st}) on port {}:\n{}",
                    self.port,
                    tail(&new, 30)
                );
                return Err(
                    if new.contains("Address already in use") || new.contains("Cannot bind") {
                        StartError::PortBusy(msg)
                    } else {
                        StartError::Fatal(msg)
                    },
                );
            }
            if new.contains(&ready) {
                let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
                if TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                self.stop();
                return Err(StartError::Fatal(format!(
                    "sshd not accepting on 127.0.0.1:{} after {SSHD_START_TIMEOUT:?}:\n{}",
                    self.port,
                    tail(&new, 30)
                )));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        // The watchdog goes first: once sshd is reaped its PID may be reused.
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        if let Some(mut child) = self.child.take() {
            kill_tree(child.id());
            let _ = child.wait();
        }
        kill_holders(&self.log_path());
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("sshd.log")
    }

    /// PIDs of processes that have this sshd's log open: the listener and
    /// per-connection children (not session programs like sftp-server,
    /// whose stderr is a channel), wherever they were re-parented.
    pub fn log_holders(&self) -> Vec<u32> {
        holders_of(&self.log_path())
    }

    /// For the harness self-test: act as if the test process had died
    /// (close the watchdog's stdin); true once the watchdog killed sshd.
    pub fn fire_watchdog(&mut self) -> bool {
        if let Some(w) = self.watchdog.as_mut() {
            drop(w.stdin.take());
            let _ = w.wait();
        }
        self.watchdog = None;
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                self.child = None;
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Kill sshd and every per-connection child (SIGKILL, like a dropped
    /// network link). Open transfers break. [`Sshd::restart`] brings it back.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// PIDs of the sshd listener and all its per-connection processes
    /// (privsep children, sessions, sftp-server), for checks.
    pub fn pids(&self) -> Vec<u32> {
        match &self.child {
            Some(c) => process_tree(c.id(), &mut HashMap::new()),
            None => Vec::new(),
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn port(&self) -> u16 {
        self.port
    }
    /// Login user for key auth (the user running the tests).
    pub fn user(&self) -> &str {
        &self.user
    }
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    /// `dir/name`, created as a directory.
    pub fn mkdir(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        p
    }
    /// Client config with `Host sshd-test` (use with `-F`).
    pub fn ssh_config(&self) -> PathBuf {
        self.dir.path().join("ssh_config")
    }
    /// known_hosts used by `ssh_config`; holds the right host key.
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }
    pub fn key_ed25519(&self) -> PathBuf {
        self.dir.path().join("keys/id_ed25519")
    }
    /// ed25519 key encrypted with [`PASSPHRASE`].
    pub fn key_encrypted(&self) -> PathBuf {
        self.dir.path().join("keys/id_ed25519_enc")
    }
    pub fn key_rsa(&self) -> PathBuf {
        self.dir.path().join("keys/id_rsa")
    }
    pub fn key_ecdsa(&self) -> PathBuf {
        self.dir.path().join("keys/id_ecdsa")
    }
    /// "ssh-ed25519 AAAA..." of the server's host key.
    pub fn host_public_key(&self) -> &str {
        &self.host_key_line
    }
    /// The known_hosts host pattern, `[127.0.0.1]:PORT`.
    pub fn host_pattern(&self) -> String {
        format!("[127.0.0.1]:{}", self.port)
    }
    pub fn known_hosts_line(&self) -> String {
        format!("{} {}\n", self.host_pattern(), self.host_key_line)
    }

    /// Write a known_hosts file with the correct host key.
    pub fn write_known_hosts(&self, path: &Path) {
        write(path, self.known_hosts_line().as_bytes());
    }

    /// Write a known_hosts file that lists ANOTHER ed25519 key for this
    /// host (a "changed host key").
    pub fn write_wrong_known_hosts(&self, path: &Path) {
        let other = self.dir.path().join("other_host_key");
        if !other.exists() {
            keygen(&other, "ed25519", None, "");
        }
        let line = format!(
            "{} {}\n",
            self.host_pattern(),
            pubkey_line(&pub_path(&other))
        );
        write(path, line.as_bytes());
    }

    /// Write the correct known_hosts and hash it with `ssh-keygen -H`.
    pub fn write_hashed_known_hosts(&self, path: &Path) {
        self.write_known_hosts(path);
        run_checked(
            Command::new("ssh-keygen")
                .arg("-q")
                .arg("-H")
                .arg("-f")
                .arg(path),
        );
        let mut old = path.as_os_str().to_owned();
        old.push(".old");
        let _ = fs::remove_file(PathBuf::from(old));
    }

    /// True if `path` (plain or hashed) has this server's key for
    /// `[127.0.0.1]:PORT` (checked with `ssh-keygen -F`).
    pub fn known_hosts_has_key(&self, path: &Path) -> bool {
        let Ok(out) = Command::new("ssh-keygen")
            .arg("-F")
            .arg(self.host_pattern())
            .arg("-f")
            .arg(path)
            .stdin(Stdio::null())
            .output()
        else {
            return false;
        };
        let blob = self.host_key_line.split(' ').nth(1).unwrap_or("-");
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(blob)
    }

    /// `sftp://sshd-test/abs/path` (or `sftp://sshd-test/~/rel`).
    pub fn url(&self, path: impl AsRef<Path>) -> String {
        let p = path.as_ref().display().to_string();
        if p.starts_with('/') {
            format!("sftp://{HOST_ALIAS}{p}")
        } else {
            format!("sftp://{HOST_ALIAS}/{p}")
        }
    }
    /// scp form `sshd-test:path`.
    pub fn scp(&self, path: impl AsRef<Path>) -> String {
        format!("{HOST_ALIAS}:{}", path.as_ref().display())
    }
    /// `sftp://127.0.0.1:PORT/abs/path` (no alias; combine with
    /// [`Sshd::direct_opts`]).
    pub fn url_ip(&self, path: impl AsRef<Path>) -> String {
        format!("sftp://127.0.0.1:{}{}", self.port, path.as_ref().display())
    }
    /// `sftp://USER@127.0.0.1:PORT/abs/path`.
    pub fn url_ip_user(&self, user: &str, path: impl AsRef<Path>) -> String {
        format!(
            "sftp://{user}@127.0.0.1:{}{}",
            self.port,
            path.as_ref().display()
        )
    }
    /// `-o UserKnownHostsFile=<known_hosts> -o StrictHostKeyChecking=yes`.
    pub fn known_hosts_opts(&self) -> Vec<OsString> {
        let mut kh = OsString::from("UserKnownHostsFile=");
        kh.push(self.known_hosts());
        args!["-o", kh, "-o", "StrictHostKeyChecking=yes"]
    }
    /// `-i KEY -o IdentitiesOnly=yes` + [`Sshd::known_hosts_opts`]: what a
    /// `sftp://127.0.0.1:PORT/...` run needs without `-F`.
    pub fn direct_opts(&self, key: &Path) -> Vec<OsString> {
        let mut v = args!["-i", key, "-o", "IdentitiesOnly=yes"];
        v.extend(self.known_hosts_opts());
        v
    }
    /// `-F ssh_config`.
    pub fn f(&self) -> Vec<OsString> {
        args!["-F", self.ssh_config()]
    }

    /// The sshd log so far (all starts).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }
    pub fn log_tail(&self) -> String {
        tail(&self.log(), 40)
    }

    /// Run ferry with HOME = this sshd's temp dir (which has no `.ssh`).
    pub fn ferry<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        ferry_in(self.dir.path(), args, &[])
    }
    pub fn ferry_env<S: AsRef<OsStr>>(&self, args: &[S], envs: &[(&str, &str)]) -> Output {
        ferry_in(self.dir.path(), args, envs)
    }
    pub fn ferry_spawn<S: AsRef<OsStr>>(&self, args: &[S], envs: &[(&str, &str)]) -> FerryChild {
        FerryChild::spawn(self.dir.path(), args, envs)
    }
    /// `ferry cp -F ssh_config ARGS...`.
    pub fn cp<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        self.cp_env(args, &[])
    }
    /// `ferry cp -F ssh_config ARGS...` with extra environment.
    pub fn cp_env<S: AsRef<OsStr>>(&self, args: &[S], envs: &[(&str, &str)]) -> Output {
        ferry_in(self.dir.path(), &self.cp_args(args), envs)
    }
    /// `cp -F ssh_config ARGS...` as an argument vector.
    pub fn cp_args<S: AsRef<OsStr>>(&self, args: &[S]) -> Vec<OsString> {
        let mut v = args!["cp", "-F", self.ssh_config()];
        v.extend(args.iter().map(|a| a.as_ref().to_owned()));
        v
    }

    /// Panic with ferry's output and the sshd log unless exit code 0.
    pub fn assert_ok(&self, o: &Output, ctx: &str) {
        if !o.status.success() {
            panic!(
                "{ctx}: ferry failed\n{}\n--- sshd log ---\n{}",
                describe(o),
                self.log_tail()
            );
        }
    }
    /// Panic unless ferry exited with `code`.
    pub fn assert_code(&self, o: &Output, code: i32, ctx: &str) {
        self.assert_code_in(o, &[code], ctx);
    }
    pub fn assert_code_in(&self, o: &Output, codes: &[i32], ctx: &str) {
        if !o.status.code().is_some_and(|c| codes.contains(&c)) {
            panic!(
                "{ctx}: expected exit code {codes:?}\n{}\n--- sshd log ---\n{}",
                describe(o),
                self.log_tail()
            );
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// password user
// ---------------------------------------------------------------------------

pub const PASSWORD_USER: &str = "ferrytest";
pub const PASSWORD: &str = "Ferry-test-pw-7";

/// As root: create (once, idempotently) the system user `ferrytest` with home
/// /home/ferrytest and password [`PASSWORD`]; returns (user, password).
/// Not root: `None` (callers print why they skip).
pub fn ensure_password_user() -> Option<(String, String)> {
    static USER: OnceLock<Option<(String, String)>> = OnceLock::new();
    USER.get_or_init(|| {
        if !is_root() {
            return None;
        }
        let exists = Command::new("id")
            .arg("-u")
            .arg(PASSWORD_USER)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !exists {
            let out = Command::new("useradd")
                .args([
                    "-m",
                    "-d",
                    "/home/ferrytest",
                    "-s",
                    "/bin/sh",
                    PASSWORD_USER,
                ])
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("useradd: {e}"));
            // 9 = exists (a concurrent run won the race).
            if !out.status.success() && out.status.code() != Some(9) {
                panic!("useradd {PASSWORD_USER}: {}", describe(&out));
            }
        }
        fs::create_dir_all("/home/ferrytest").unwrap_or_else(|e| panic!("mkdir home: {e}"));
        run_checked(Command::new("chown").args(["ferrytest:", "/home/ferrytest"]));
        let mut child = Command::new("chpasswd")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("chpasswd: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            writeln!(stdin, "{PASSWORD_USER}:{PASSWORD}").unwrap_or_else(|e| panic!("{e}"));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("chpasswd: {e}"));
        assert!(out.status.success(), "chpasswd: {}", describe(&out));
        Some((PASSWORD_USER.to_string(), PASSWORD.to_string()))
    })
    .clone()
}

/// A directory under `home` (e.g. `/root` or `/home/ferrytest`), removed on
/// drop; `owner` is chowned to it when given.
pub struct HomeDir {
    dir: TempDir,
    name: String,
}

impl HomeDir {
    pub fn new(home: &Path, owner: Option<&str>) -> HomeDir {
        let dir = tempfile::Builder::new()
            .prefix("ferry-test-")
            .tempdir_in(home)
            .unwrap_or_else(|e| panic!("tempdir in {}: {e}", home.display()));
        if let Some(o) = owner {
            run_checked(Command::new("chown").arg(format!("{o}:")).arg(dir.path()));
        }
        let name = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        HomeDir { dir, name }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// Name relative to the home directory.
    pub fn name(&self) -> &str {
        &self.name
    }
}

// ---------------------------------------------------------------------------
// tmpfs
// ---------------------------------------------------------------------------

/// A small tmpfs (for disk-full tests), unmounted on drop.
pub struct Tmpfs {
    dir: TempDir,
    mounted: bool,
}

impl Tmpfs {
    /// Mount a tmpfs of `size` (e.g. "4m"). `None` (reason printed) if not
    /// root or the mount is refused.
    pub fn mount(size: &str) -> Option<Tmpfs> {
        if !is_root() {
            eprintln!("SKIP: tmpfs needs root");
            return None;
        }
        let dir = tempdir();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size}"))
            .arg("tmpfs")
            .arg(dir.path())
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir, mounted: true }),
            Ok(o) => {
                eprintln!("SKIP: mount -t tmpfs refused: {}", describe(&o));
                None
            }
            Err(e) => {
                eprintln!("SKIP: cannot run mount: {e}");
                None
            }
        }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        for _ in 0..50 {
            let ok = Command::new("umount")
                .arg(self.dir.path())
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .status();
    }
}

/// True if process `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    proc_table()
        .get(&pid)
        .is_some_and(|p| p.state != 'Z' && p.state != 'X')
}

/// Command name of process `pid` (from /proc/PID/comm).
pub fn pid_comm(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// True if `path` is a mount point listed in /proc/mounts.
pub fn is_mounted(path: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let p = path.display().to_string();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(p.as_str()))
}

// ---------------------------------------------------------------------------
// data
// ---------------------------------------------------------------------------

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * 1024;

pub fn write(path: &Path, data: &[u8]) {
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

pub fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn xof(seed: u64) -> blake3::OutputReader {
    let mut h = blake3::Hasher::new();
    h.update(b"ferry test data v1");
    h.update(&seed.to_le_bytes());
    h.finalize_xof()
}

/// `len` deterministic pseudo-random bytes for `seed`.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    xof(seed).fill(&mut v);
    v
}

/// Create `path` with `len` deterministic pseudo-random bytes (the stream
/// for `seed`; a file of length n is the n-byte prefix of the stream).
/// Returns the blake3 of the content.
pub fn make_file(path: &Path, len: u64, seed: u64) -> blake3::Hash {
    let mut f = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    let mut r = xof(seed);
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        r.fill(&mut buf[..n]);
        h.update(&buf[..n]);
        f.write_all(&buf[..n])
            .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        left -= n as u64;
    }
    h.finalize()
}

pub fn hash_file(path: &Path) -> blake3::Hash {
    let mut f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; MIB as usize];
    loop {
        let n = f
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize()
}

pub fn hash_bytes(b: &[u8]) -> blake3::Hash {
    blake3::hash(b)
}

/// Copy the first `len` bytes of `src` to `dst`.
pub fn write_prefix(src: &Path, dst: &Path, len: u64) {
    let mut f = File::open(src).unwrap_or_else(|e| panic!("open {}: {e}", src.display()));
    let mut out = File::create(dst).unwrap_or_else(|e| panic!("create {}: {e}", dst.display()));
    let copied = std::io::copy(&mut Read::take(&mut f, len), &mut out)
        .unwrap_or_else(|e| panic!("copy to {}: {e}", dst.display()));
    assert_eq!(copied, len, "{} is shorter than {len}", src.display());
}

/// Panic unless `path` holds exactly the content with hash `want`.
pub fn assert_file_hash(path: &Path, want: &blake3::Hash, ctx: &str) {
    assert!(path.is_file(), "{ctx}: {} missing", path.display());
    let got = hash_file(path);
    assert_eq!(
        got.to_hex().as_str(),
        want.to_hex().as_str(),
        "{ctx}: content of {} differs (size {})",
        path.display(),
        file_len(path)
    );
}

/// Where `got` differs from `want`, in 1 MiB blocks: the first few
/// differing ranges and whether those blocks are all zeros (holes).
pub fn describe_difference(want: &Path, got: &Path) -> String {
    let (Ok(mut a), Ok(mut b)) = (File::open(want), File::open(got)) else {
        return format!("cannot open {} or {}", want.display(), got.display());
    };
    let (la, lb) = (file_len(want), file_len(got));
    let mut ba = vec![0u8; MIB as usize];
    let mut bb = vec![0u8; MIB as usize];
    let mut ranges: Vec<(u64, u64, bool)> = Vec::new(); // (start MiB, end MiB, all zero)
    let mut block = 0u64;
    loop {
        let na = read_full(&mut a, &mut ba);
        let nb = read_full(&mut b, &mut bb);
        if na == 0 && nb == 0 {
            break;
        }
        if ba[..na] != bb[..nb] {
            let zero = bb[..nb].iter().all(|x| *x == 0);
            match ranges.last_mut() {
                Some(r) if r.1 == block && r.2 == zero => r.1 = block + 1,
                _ => ranges.push((block, block + 1, zero)),
            }
        }
        block += 1;
    }
    let total: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
    let shown: Vec<String> = ranges
        .iter()
        .take(8)
        .map(|(s, e, z)| format!("[{s}..{e}) MiB{}", if *z { " zeros" } else { "" }))
        .collect();
    format!(
        "sizes {la} (want) vs {lb} (got); {total} MiB block(s) differ in {} range(s): {}",
        ranges.len(),
        shown.join(", ")
    )
}

fn read_full(f: &mut File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

/// Panic unless `got` has exactly the bytes of `want` (blake3), saying
/// where they differ if not.
pub fn assert_same_file(want: &Path, got: &Path, ctx: &str) {
    assert!(got.is_file(), "{ctx}: {} missing", got.display());
    let (hw, hg) = (hash_file(want), hash_file(got));
    assert!(
        hw == hg,
        "{ctx}: {} differs from {}: {}",
        got.display(),
        want.display(),
        describe_difference(want, got)
    );
}

pub fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// `.NAME.ferry-part` next to `final_path`.
pub fn part_path(final_path: &Path) -> PathBuf {
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    final_path.with_file_name(format!(".{name}.ferry-part"))
}

/// All `*.ferry-part` files under `dir` (recursive).
pub fn part_files(dir: &Path) -> Vec<PathBuf> {
    if !dir.is_dir() {
        return Vec::new();
    }
    snapshot(dir)
        .keys()
        .filter(|p| p.to_string_lossy().ends_with(".ferry-part"))
        .map(|p| dir.join(p))
        .collect()
}

/// Names directly in `dir`, sorted.
pub fn list_dir(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Set mode bits (e.g. 0o640).
pub fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

pub fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .mode()
        & 0o7777
}

/// Set the modification (and access) time to `secs` since the epoch.
pub fn set_mtime(path: &Path, secs: u64) {
    let t = UNIX_EPOCH + Duration::from_secs(secs);
    let f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    f.set_times(fs::FileTimes::new().set_accessed(t).set_modified(t))
        .unwrap_or_else(|e| panic!("set times {}: {e}", path.display()));
}

pub fn mtime_of(path: &Path) -> i64 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .mtime()
}

/// Seconds since the epoch, now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// trees
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File { size: u64, hash: String },
    Symlink(PathBuf),
    Other,
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub kind: Kind,
    pub mode: u32,
    pub mtime: i64,
}

/// Every entry below `root` (not `root` itself), keyed by relative path,
/// with blake3 of every regular file.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
        let dir = root.join(rel);
        let rd = fs::read_dir(&dir).unwrap_or_else(|e| panic!("readdir {}: {e}", dir.display()));
        for ent in rd {
            let ent = ent.unwrap_or_else(|e| panic!("readdir {}: {e}", dir.display()));
            let r = rel.join(ent.file_name());
            let p = root.join(&r);
            let md =
                fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
            let ft = md.file_type();
            let kind = if ft.is_dir() {
                Kind::Dir
            } else if ft.is_file() {
                Kind::File {
                    size: md.len(),
                    hash: hash_file(&p).to_hex().to_string(),
                }
            } else if ft.is_symlink() {
                Kind::Symlink(fs::read_link(&p).unwrap_or_default())
            } else {
                Kind::Other
            };
            out.insert(
                r.clone(),
                Entry {
                    kind: kind.clone(),
                    mode: md.mode() & 0o7777,
                    mtime: md.mtime(),
                },
            );
            if kind == Kind::Dir {
                walk(root, &r, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, Path::new(""), &mut out);
    out
}

/// What [`assert_same_tree`] compares besides names, kinds, sizes and hashes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cmp {
    /// permission bits of files and directories
    pub modes: bool,
    /// mtime (whole seconds) of regular files
    pub mtimes: bool,
}

/// Differences between two trees (empty = same).
pub fn tree_diff(a: &Path, b: &Path, cmp: Cmp) -> Vec<String> {
    let sa = snapshot(a);
    let sb = snapshot(b);
    let mut diffs = Vec::new();
    let names: BTreeSet<&PathBuf> = sa.keys().chain(sb.keys()).collect();
    for n in names {
        match (sa.get(n), sb.get(n)) {
            (Some(_), None) => diffs.push(format!("only in {}: {}", a.display(), n.display())),
            (None, Some(_)) => diffs.push(format!("only in {}: {}", b.display(), n.display())),
            (Some(x), Some(y)) => {
                if x.kind != y.kind {
                    diffs.push(format!("{}: {:?} vs {:?}", n.display(), x.kind, y.kind));
                }
                if cmp.modes && x.mode != y.mode {
                    diffs.push(format!(
                        "{}: mode {:o} vs {:o}",
                        n.display(),
                        x.mode,
                        y.mode
                    ));
                }
                if cmp.mtimes && matches!(x.kind, Kind::File { .. }) && x.mtime != y.mtime {
                    diffs.push(format!("{}: mtime {} vs {}", n.display(), x.mtime, y.mtime));
                }
            }
            (None, None) => {}
        }
    }
    diffs
}

pub fn assert_same_tree(a: &Path, b: &Path, cmp: Cmp, ctx: &str) {
    assert!(a.is_dir(), "{ctx}: {} is not a directory", a.display());
    assert!(b.is_dir(), "{ctx}: {} is not a directory", b.display());
    let d = tree_diff(a, b, cmp);
    assert!(
        d.is_empty(),
        "{ctx}: trees {} and {} differ ({} differences):\n{}",
        a.display(),
        b.display(),
        d.len(),
        d.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Build the awkward test tree under `root` (created): spaces, unicode, a
/// leading dash, '%' and '#', 0-byte files, nested empty dirs, a
/// 1000-entry directory of small files, a 2 MiB file. Returns the number
/// of regular files.
pub fn make_odd_tree(root: &Path, seed: u64) -> usize {
    let mk = |rel: &str| {
        let p = root.join(rel);
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
    };
    let mut files = 0usize;
    let mut file = |rel: &str, len: u64| {
        make_file(&root.join(rel), len, seed.wrapping_add(files as u64 * 7919));
        files += 1;
    };
    mk("");
    mk("nested/deeper/deepest");
    mk("nested/empty sibling");
    mk("sp ace dir/ünï");
    mk("many");
    mk("ünïcödé 日本");
    file("file with spaces.txt", 1000);
    file("ünïcödé 日本.bin", 12_345);
    file("ünïcödé 日本/中身 ファイル.txt", 777);
    file("-leading-dash", 10);
    file("--double-dash", 0);
    file("empty.dat", 0);
    file("one byte", 1);
    file("100% sure #1.txt", 321);
    file("it's \"quoted\"", 42);
    file("nested/a.bin", 100_000);
    file("nested/deeper/empty", 0);
    file("sp ace dir/ünï/日本語.txt", 4096);
    file("big.bin", 2 * MIB + 17);
    for i in 0..1000u64 {
        file(&format!("many/f{i:04}"), (i * 37) % 3001);
    }
    files
}

// ---------------------------------------------------------------------------
// JSON (the --json summary) — a minimal parser, enough to check shape
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.get(key),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Num(n) => Some(*n),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
}

pub fn parse_json(text: &str) -> Result<Json, String> {
    struct P<'a> {
        s: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
                self.i += 1;
            }
        }
        fn err<T>(&self, what: &str) -> Result<T, String> {
            Err(format!("JSON: {what} at byte {}", self.i))
        }
        fn lit(&mut self, word: &str, v: Json) -> Result<Json, String> {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                Ok(v)
            } else {
                self.err("bad literal")
            }
        }
        fn value(&mut self) -> Result<Json, String> {
            self.ws();
            match self.s.get(self.i) {
                None => self.err("unexpected end"),
                Some(b'{') => {
                    self.i += 1;
                    let mut m = BTreeMap::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(Json::Obj(m));
                    }
                    loop {
                        self.ws();
                        let Json::Str(k) = self.value()? else {
                            return self.err("object key is not a string");
                        };
                        self.ws();
                        if self.s.get(self.i) != Some(&b':') {
                            return self.err("expected ':'");
                        }
                        self.i += 1;
                        let v = self.value()?;
                        m.insert(k, v);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(Json::Obj(m));
                            }
                            _ => return self.err("expected ',' or '}'"),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut v = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(Json::Arr(v));
                    }
                    loop {
                        v.push(self.value()?);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(Json::Arr(v));
                            }
                            _ => return self.err("expected ',' or ']'"),
                        }
                    }
                }
                Some(b'"') => {
                    self.i += 1;
                    let mut out: Vec<u8> = Vec::new();
                    loop {
                        match self.s.get(self.i) {
                            None => return self.err("unterminated string"),
                            Some(b'"') => {
                                self.i += 1;
                                return String::from_utf8(out)
                                    .map(Json::Str)
                                    .map_err(|e| e.to_string());
                            }
                            Some(b'\\') => {
                                let c = self.s.get(self.i + 1).copied();
                                self.i += 2;
                                let ch = match c {
                                    Some(b'"') => '"',
                                    Some(b'\\') => '\\',
                                    Some(b'/') => '/',
                                    Some(b'b') => '\u{8}',
                                    Some(b'f') => '\u{c}',
                                    Some(b'n') => '\n',
                                    Some(b'r') => '\r',
                                    Some(b't') => '\t',
                                    Some(b'u') => {
                                        let hex = self
                                            .s
                                            .get(self.i..self.i + 4)
                                            .and_then(|h| std::str::from_utf8(h).ok())
                                            .and_then(|h| u32::from_str_radix(h, 16).ok());
                                        self.i += 4;
                                        hex.and_then(char::from_u32).unwrap_or('\u{fffd}')
                                    }
                                    _ => return self.err("bad escape"),
                                };
                                let mut b = [0u8; 4];
                                out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                            }
                            Some(&c) => {
                                out.push(c);
                                self.i += 1;
                            }
                        }
                    }
                }
                Some(b't') => self.lit("true", Json::Bool(true)),
                Some(b'f') => self.lit("false", Json::Bool(false)),
                Some(b'n') => self.lit("null", Json::Null),
                Some(_) => {
                    let start = self.i;
                    while self.i < self.s.len()
                        && matches!(
                            self.s[self.i],
                            b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                        )
                    {
                        self.i += 1;
                    }
                    std::str::from_utf8(&self.s[start..self.i])
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                        .map(Json::Num)
                        .map_or_else(|| self.err("bad number"), Ok)
                }
            }
        }
    }
    let mut p = P {
        s: text.as_bytes(),
        i: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.i != p.s.len() {
        return p.err("trailing characters");
    }
    Ok(v)
}

// `ferry serve` as a test peer (after the `args!` macro it uses).
pub mod faultproxy;
pub mod ftpproxy;
pub mod nginx;
pub mod serve;

/// A TCP relay on 127.0.0.1 to `port` that passes what the client sends
/// on at about 6 MB/s (32 KiB every 5 ms), so an upload is still running
/// when the test kills the server. Returns the relay's port.
pub fn slow_relay(port: u16) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = l.local_addr().unwrap().port();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { break };
            thread::spawn(move || {
                let Ok(mut up) = TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
                thread::spawn(move || {
                    let mut buf = vec![0u8; 32 * 1024];
                    while let Ok(n) = c2.read(&mut buf) {
                        if n == 0 || up2.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        thread::sleep(Duration::from_millis(5));
                    }
                    let _ = up2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    p
}
pub mod ec2_metadata;
pub mod moto;
pub mod rclone_s3;
pub mod versitygw;
pub mod vsftpd;

/// A real `ssh-agent -D` on a socket in its own temporary directory,
/// killed by PID when dropped.
pub struct Agent {
    child: Child,
    sock: PathBuf,
    _dir: TempDir,
}

impl Agent {
    pub fn start() -> Agent {
        let dir = tempdir();
        let sock = dir.path().join("agent.sock");
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start ssh-agent: {e}"));
        let agent = Agent {
            child,
            sock,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !agent.sock.exists() {
            assert!(Instant::now() < deadline, "ssh-agent made no socket");
            thread::sleep(Duration::from_millis(20));
        }
        agent
    }

    /// `ssh-add KEY` (ssh-add also loads `KEY-cert.pub` when it is there).
    pub fn add(&self, key: &Path) {
        run_checked(
            Command::new("ssh-add")
                .arg("-q")
                .arg(key)
                .env("SSH_AUTH_SOCK", &self.sock),
        );
    }

    /// The value for `SSH_AUTH_SOCK`.
    pub fn sock(&self) -> String {
        self.sock.display().to_string()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A file of `len` bytes of text-like data (words and numbers on lines,
/// about 3:1 with zstd -1), from `seed`; returns its blake3. For the SSH
/// compression tests (issue 21), where random data would not compress.
pub fn make_text_file(path: &Path, len: u64, seed: u64) -> blake3::Hash {
    const WORDS: &[&str] = &[
        "the",
        "ferry",
        "copies",
        "files",
        "over",
        "sftp",
        "and",
        "http",
        "with",
        "zstd",
        "compression",
        "window",
        "packet",
        "server",
        "client",
        "bytes",
        "level",
        "stream",
    ];
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut text = Vec::with_capacity(len as usize + 32);
    while (text.len() as u64) < len {
        let r = next();
        let w = WORDS[(r % WORDS.len() as u64) as usize];
        text.extend_from_slice(w.as_bytes());
        match (r >> 20) % 12 {
            0 => text.extend_from_slice(format!(" {}\n", (r >> 32) % 100_000).as_bytes()),
            1 => text.push(b'\n'),
            _ => text.push(b' '),
        }
    }
    text.truncate(len as usize);
    fs::write(path, &text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    blake3::hash(&text)
}

/// A tree of `n` text files (some in subdirectories) under `root`.
pub fn make_text_tree(root: &Path, n: usize, seed: u64) {
    for i in 0..n {
        let dir = root.join(format!("d{}", i % 3));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        make_text_file(
            &dir.join(format!("f{i}.txt")),
            (i as u64 * 37_001) % 300_000 + 1,
            seed + i as u64,
        );
    }
}

/// `--json`'s `"compression"` object, field `key` (a string or a number
/// as text; arrays as `[a,b]`).
pub fn compression_field(o: &Output, key: &str) -> String {
    let j =
        parse_json(stdout_text(o).trim()).unwrap_or_else(|e| panic!("json: {e}: {}", describe(o)));
    let Some(c) = j.get("compression") else {
        panic!("no compression in {}", stdout_text(o))
    };
    match c.get(key) {
        Some(Json::Str(s)) => s.clone(),
        Some(Json::Num(n)) => n.to_string(),
        Some(Json::Arr(a)) => format!(
            "[{}]",
            a.iter()
                .map(|v| v.as_f64().map(|f| f.to_string()).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(",")
        ),
        _ => panic!("no compression.{key} in {}", stdout_text(o)),
    }
}

/// `compression_field` as a number.
pub fn compression_num(o: &Output, key: &str) -> f64 {
    compression_field(o, key)
        .parse()
        .unwrap_or_else(|_| panic!("compression.{key} not a number: {}", stdout_text(o)))
}
