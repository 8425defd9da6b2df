//! Processes the bench starts: servers and transfer clients.
//!
//! Every child gets its own session (`setsid`), so it has no controlling
//! terminal (no password prompt can hang a run) and its process group can be
//! stopped as a whole, by its id. Every live group is recorded in a registry
//! that a signal thread empties on Ctrl-C / SIGTERM / SIGHUP before exiting;
//! [`Guard`] stops a server on drop (error paths included). Clients are
//! measured with `wait4`, which gives the child's CPU time and peak RSS
//! including the children it waited for (sftp's ssh, lftp's ssh).
use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Live process groups we started, and whether the bench is stopping
/// (after which nothing new is started). Spawning holds this lock from
/// before `spawn` until the child is recorded, and the signal thread holds
/// it until the process exits, so no child escapes the clean-up.
static LIVE: Mutex<Live> = Mutex::new(Live {
    pids: BTreeSet::new(),
    stopping: false,
    temp_dir: None,
    netlink: None,
});

struct Live {
    pids: BTreeSet<i32>,
    stopping: bool,
    /// A work directory of ours to remove on Ctrl-C.
    temp_dir: Option<std::path::PathBuf>,
    /// A packet-level link of ours (its name) to remove on Ctrl-C.
    netlink: Option<String>,
}

/// Remove `dir` if the bench is interrupted (it is our temp dir).
pub fn remove_on_interrupt(dir: Option<std::path::PathBuf>) {
    if let Ok(mut l) = LIVE.lock() {
        l.temp_dir = dir;
    }
}

/// Remove the packet-level link `name`'s namespaces if the bench is
/// interrupted (the process exits without running destructors).
pub fn remove_netlink_on_interrupt(name: Option<String>) {
    if let Ok(mut l) = LIVE.lock() {
        l.netlink = name;
    }
}

/// Spawn `cmd` and record its group, unless the bench is stopping.
fn spawn_recorded(cmd: &mut Command) -> Result<std::process::Child> {
    let mut live = LIVE
        .lock()
        .map_err(|_| anyhow::anyhow!("process registry poisoned"))?;
    if live.stopping {
        anyhow::bail!("interrupted");
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
    live.pids.insert(child.id() as i32);
    Ok(child)
}

fn unregister(pid: i32) {
    if let Ok(mut l) = LIVE.lock() {
        l.pids.remove(&pid);
    }
}

/// SIGTERM then (after a grace period) SIGKILL to every live group: called
/// by the signal thread.
fn stop_all_live_and_exit(code: i32) -> ! {
    // Held until exit: nothing new starts, nothing is forgotten.
    let mut live = match LIVE.lock() {
        Ok(l) => l,
        Err(p) => p.into_inner(),
    };
    live.stopping = true;
    let pids: Vec<i32> = live.pids.iter().copied().collect();
    for &p in pids.iter().rev() {
        signal_group(p, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    for &p in pids.iter().rev() {
        while Instant::now() < deadline && alive(p) {
            std::thread::sleep(Duration::from_millis(20));
        }
        signal_group(p, libc::SIGKILL);
    }
    if let Some(d) = &live.temp_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    if let Some(n) = &live.netlink {
        let _ = ferry_linkem::net::down_by_name(n);
    }
    std::process::exit(code);
}

fn alive(pid: i32) -> bool {
    // SAFETY: waitpid with WNOHANG on our own child only reads its status.
    let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    r == 0
}

fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) with a negative id signals that process group,
        // which is one we created with setsid.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Stop everything we started when the user presses Ctrl-C or the bench
/// gets SIGTERM/SIGHUP, then exit 130.
pub fn install_signal_handler() {
    let _ = std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            let what = rt.block_on(async {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut hup)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::hangup()),
                ) else {
                    let _ = tokio::signal::ctrl_c().await;
                    return "interrupt";
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => "interrupt",
                    _ = term.recv() => "SIGTERM",
                    _ = hup.recv() => "SIGHUP",
                }
            });
            eprintln!("\nferry bench: {what}: stopping servers and clients");
            stop_all_live_and_exit(130);
        });
}

/// Make `cmd` start in a session of its own.
pub fn own_session(cmd: &mut Command) {
    // SAFETY: setsid is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
}

/// A long-running child (a server): stopped by its id when dropped.
#[derive(Debug)]
pub struct Guard {
    pid: i32,
    name: String,
}

impl Guard {
    /// Start `cmd` in its own session and record it.
    pub fn spawn(name: &str, mut cmd: Command) -> Result<(Guard, std::process::Child)> {
        own_session(&mut cmd);
        let child = spawn_recorded(&mut cmd).with_context(|| format!("cannot start {name}"))?;
        let pid = child.id() as i32;
        Ok((
            Guard {
                pid,
                name: name.to_string(),
            },
            child,
        ))
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the process has not exited yet.
    pub fn running(&self) -> bool {
        alive(self.pid)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        signal_group(self.pid, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while alive(self.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The leader is reaped (alive() reaps it); stragglers of its group
        // (sshd sessions, nginx workers) get the hard stop.
        signal_group(self.pid, libc::SIGKILL);
        if alive(self.pid) {
            // SAFETY: blocking waitpid on our own child after SIGKILL.
            unsafe {
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
        unregister(self.pid);
    }
}

/// What one measured client run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Exit code, or 128 + signal.
    pub code: i32,
    pub wall: Duration,
    /// User + system CPU seconds of the child and the children it reaped.
    pub cpu: f64,
    /// Peak resident set, KiB.
    pub maxrss_kb: i64,
    pub timed_out: bool,
}

/// Run `cmd` to completion (killing its group after `timeout`), timed
/// from just before spawn to the moment `wait4` returns.
/// [`run_measured`], with the child started in network namespace `netns`
/// when one is given (a packet-level profile's client side): it is spawned
/// from a thread that has entered the namespace, and inherits it.
pub fn run_measured_in(netns: Option<&str>, cmd: Command, timeout: Duration) -> Result<Outcome> {
    let Some(ns) = netns else {
        return run_measured(cmd, timeout);
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            ferry_linkem::net::enter_netns(ns)
                .with_context(|| format!("entering network namespace {ns}"))?;
            run_measured(cmd, timeout)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
    })
}

pub fn run_measured(mut cmd: Command, timeout: Duration) -> Result<Outcome> {
    own_session(&mut cmd);
    let start = Instant::now();
    let child = spawn_recorded(&mut cmd)?;
    let pid = child.id() as i32;
    // The std handle is not used to wait: wait4 below reaps the child.
    drop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is plain old data; wait4 fills it for our child.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let r = loop {
            // SAFETY: wait4 on our own child's pid with valid pointers.
            let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
            if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            }
            break r;
        };
        let end = Instant::now();
        let _ = tx.send((r, status, ru, end));
    });
    let mut timed_out = false;
    let got = match rx.recv_timeout(timeout) {
        Ok(v) => v,
        Err(_) => {
            timed_out = true;
            signal_group(pid, libc::SIGKILL);
            rx.recv().context("lost the waiting thread")?
        }
    };
    // Anything the client left in its group (an ssh it did not reap).
    signal_group(pid, libc::SIGKILL);
    unregister(pid);
    let (r, status, ru, end) = got;
    if r == -1 {
        anyhow::bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        -1
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Outcome {
        code,
        wall: end.duration_since(start),
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        maxrss_kb: ru.ru_maxrss,
        timed_out,
    })
}

/// CPU seconds (user + system, including reaped children) of `pid` and
/// every live descendant, from /proc: the server side's cost.
pub fn tree_cpu_seconds(pid: i32) -> Option<f64> {
    let tck = {
        // SAFETY: sysconf only reads a constant.
        let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if t > 0 {
            t as f64
        } else {
            100.0
        }
    };
    let mut total = 0u64;
    let mut stack = vec![pid];
    let mut first = true;
    while let Some(p) = stack.pop() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            if first {
                return None;
            }
            continue;
        };
        first = false;
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().collect())
            .unwrap_or_default();
        // fields[0] is stat field 3; utime..cstime are fields 14..17.
        for i in 11..=14 {
            total += fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
        stack.extend(children(p));
    }
    Some(total as f64 / tck)
}

/// Direct children of `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|v| v.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// Find `prog` on PATH (and in /usr/sbin, /usr/lib/openssh, where servers
/// live but PATH often does not reach).
pub fn which(prog: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| is_executable(p))
}

/// Like [`which`], also looking in the system directories servers live in.
pub fn which_server(prog: &str) -> Option<std::path::PathBuf> {
    which(prog).or_else(|| {
        ["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/lib/openssh"]
            .iter()
            .map(|d| std::path::Path::new(d).join(prog))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// First line of a command's output (stdout, else stderr): tool versions.
pub fn version_line(prog: &std::path::Path, args: &[&str]) -> String {
    match Command::new(prog)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(o) => {
            let out = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&out)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        }
        Err(e) => format!("unavailable: {e}"),
    }
}
