//! The fault matrix of issue #24: `ferry cp` against real servers on
//! loopback (OpenSSH sshd, ferry serve's SFTP, HTTPS and FTPS, nginx with
//! WebDAV, vsftpd), both directions, one big file and a small tree, under
//! each fault: the client SIGKILLed mid-copy, the server killed and
//! restarted, the connection reset or stalled by a proxy
//! (`common::faultproxy`), the destination disk full or refusing writes, a
//! file of the same name already there, the source truncated mid-copy.
//!
//! The promise checked everywhere: no file under its final name that
//! differs from its source at any point we look (mid-fault and after); a
//! failure names the file and exits with the documented code (README,
//! "Exit codes"); `--resume` afterwards ends byte-identical; a stall ends
//! within `--timeout` (3 s here) by a retry or an error, never a hang.
//!
//! The matrix is the `matrix!` table at the bottom: one test per protocol,
//! direction and fault, each over the big file and then the tree (every
//! server here takes writes). docs/internals/reliability.md ("Fault
//! matrix") has it as a table with what each cell verifies; rerun one
//! with `cargo test -p ferry --test faults -- sftp_serve_up_kill_client`,
//! the ignored ones (known bugs) with `-- --ignored`.
//!
//! FTP data connections do not go through the proxy (the control
//! connection tells the client where to connect; with TLS the proxy cannot
//! rewrite it), so for FTP the mid-copy point is found by watching the
//! part file (vsftpd is rate-limited to make that reliable; ferry serve's
//! writer is SIGSTOPped there) and the reset and stall hit the control
//! connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::faultproxy::{Action, Fault as ProxyFault, FaultProxy, Flow};
use common::ftpproxy::FtpProxy;
use common::nginx::{nginx_or_skip, Nginx};
use common::serve::FerryServe;
use common::vsftpd::{vsftpd_or_skip, Ftpd};
use common::*;
use ferry_bench::servers::VsftpdOptions;
use tempfile::TempDir;

/// `--timeout` for every faulted run: a stall must end about this soon.
const TIMEOUT_SECS: u64 = 3;
/// The big file (a multiple of nothing in particular).
const BIG: u64 = 16 * MIB + 4321;
/// vsftpd's rate per transfer, so the copy is still running when we look.
const VSFTPD_RATE: u64 = 8 * MIB;
/// A stalled or reset run must end within this (retries with backoff
/// included); it is a bound against hangs, not a speed claim.
const END_WITHIN: Duration = Duration::from_secs(45);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    SftpSshd,
    SftpServe,
    HttpsNginx,
    HttpsServe,
    FtpVsftpd,
    FtpsServe,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// server -> local
    Down,
    /// local -> server
    Up,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillClient,
    KillServer,
    Reset,
    Stall,
    DiskFull,
    Denied,
    Existing,
    SourceTruncated,
    /// The source rewritten in place, same size, new bytes and a later
    /// time, while the copy is held at 40%: caught before the rename
    /// where ferry can ask the source's time alike (a local source, SFTP),
    /// never a mix under the final name; `--resume` ends identical.
    SourceRewritten,
    /// The client killed at a second point: half-way through its
    /// `--resume` continuation of a copy killed mid-way.
    KillResume,
    /// The server killed while the client is connecting and logging in
    /// (its first bytes held by the proxy), then restarted: the copy is
    /// tried again (`--retries`) and ends whole.
    KillServerLogin,
    /// Down only: the client killed with a part file complete, just
    /// before it renames it to the final name (the rename held by strace).
    KillBeforeRename,
    /// Down only: the client killed while it writes the resume record of
    /// a split copy (`--streams 4`; the record's write held by strace).
    KillRecord,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    File,
    Tree,
}

impl Proto {
    fn is_ftp(self) -> bool {
        matches!(self, Proto::FtpVsftpd | Proto::FtpsServe)
    }
}

// ===========================================================================
// the servers
// ===========================================================================

enum Server {
    Sshd(Sshd),
    Serve(FerryServe),
    Nginx(Nginx),
    Vsftpd(Ftpd),
}

/// One server, a proxy in front of its main port, and how to reach both.
struct Peer {
    proto: Proto,
    server: Server,
    proxy: FaultProxy,
    /// Scratch space and HOME for the client.
    work: TempDir,
    known_hosts: PathBuf,
}

impl Peer {
    fn start(proto: Proto) -> Option<Peer> {
        let (server, port) = match proto {
            Proto::SftpSshd => {
                let s = Sshd::start();
                let p = s.port();
                (Server::Sshd(s), p)
            }
            Proto::SftpServe | Proto::HttpsServe => {
                let s = FerryServe::start(&["--writable"]);
                let p = if proto == Proto::SftpServe {
                    s.sftp_port
                } else {
                    s.https_port
                };
                (Server::Serve(s), p.unwrap_or_default())
            }
            Proto::FtpsServe => {
                let s = FerryServe::start_ftp(&["--writable"]);
                let p = s.ftp_port.unwrap_or_default();
                (Server::Serve(s), p)
            }
            Proto::HttpsNginx => {
                let n = nginx_or_skip("faults")?;
                let p = n.https_port;
                (Server::Nginx(n), p)
            }
            Proto::FtpVsftpd => {
                let f = vsftpd_or_skip(
                    "faults",
                    VsftpdOptions {
                        max_rate: VSFTPD_RATE,
                        ..VsftpdOptions::default()
                    },
                )?;
                let p = f.port();
                (Server::Vsftpd(f), p)
            }
        };
        let proxy = FaultProxy::start(port);
        let work = tempdir();
        let known_hosts = work.path().join("known_hosts");
        let key_line = match &server {
            Server::Sshd(s) => Some(s.host_public_key().to_string()),
            Server::Serve(s) => Some(s.hostkey_line.clone()),
            _ => None,
        };
        if let Some(k) = key_line {
            let text = format!("[127.0.0.1]:{port} {k}\n[127.0.0.1]:{} {k}\n", proxy.port());
            fs::write(&known_hosts, text).unwrap();
        }
        fs::create_dir_all(work.path().join("home")).unwrap();
        let p = Peer {
            proto,
            server,
            proxy,
            work,
            known_hosts,
        };
        fs::create_dir_all(p.remote_root()).unwrap();
        Some(p)
    }

    fn server_port(&self) -> u16 {
        match &self.server {
            Server::Sshd(s) => s.port(),
            Server::Serve(s) => match self.proto {
                Proto::SftpServe => s.sftp_port,
                Proto::HttpsServe => s.https_port,
                _ => s.ftp_port,
            }
            .unwrap_or_default(),
            Server::Nginx(n) => n.https_port,
            Server::Vsftpd(f) => f.port(),
        }
    }

    /// The directory on disk that `url("")` names.
    fn remote_root(&self) -> PathBuf {
        match &self.server {
            Server::Sshd(s) => s.dir().join("remote"),
            Server::Serve(s) => s.root(),
            Server::Nginx(n) => n.www().join("upload"),
            Server::Vsftpd(f) => f.root().to_path_buf(),
        }
    }

    /// URL of `rel` under [`Peer::remote_root`], through the proxy or not.
    fn url(&self, rel: &str, proxied: bool) -> String {
        let port = if proxied {
            self.proxy.port()
        } else {
            self.server_port()
        };
        let rel = rel.trim_start_matches('/');
        match self.proto {
            Proto::SftpSshd => format!(
                "sftp://{}@127.0.0.1:{port}{}/{rel}",
                current_user(),
                self.remote_root().display()
            ),
            Proto::SftpServe => format!("sftp://127.0.0.1:{port}/{rel}"),
            Proto::HttpsNginx => format!("https://127.0.0.1:{port}/upload/{rel}"),
            Proto::HttpsServe => format!("https://127.0.0.1:{port}/{rel}"),
            Proto::FtpVsftpd | Proto::FtpsServe => format!("ftp://127.0.0.1:{port}/{rel}"),
        }
    }

    /// `cp -q` with the credentials and pins this server needs.
    fn cp_args(&self) -> Vec<OsString> {
        let mut a = args!["cp", "-q"];
        let kh = format!("UserKnownHostsFile={}", self.known_hosts.display());
        match &self.server {
            Server::Sshd(s) => a.extend(args![
                "-i",
                s.key_ed25519(),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                kh,
                "-o",
                "StrictHostKeyChecking=yes"
            ]),
            Server::Serve(s) => match self.proto {
                Proto::SftpServe => a.extend(args![
                    "-i",
                    s.key(),
                    "-o",
                    "IdentitiesOnly=yes",
                    "-o",
                    kh,
                    "-o",
                    "StrictHostKeyChecking=yes"
                ]),
                Proto::HttpsServe => a.extend(args![
                    "--pin",
                    format!("sha256:{}", s.cert_sha256),
                    "--token",
                    s.token.clone()
                ]),
                _ => a.extend(args![
                    "--ssl-reqd",
                    "--pin",
                    format!("sha256:{}", s.cert_sha256),
                    "-u",
                    format!("ferry:{}", s.token)
                ]),
            },
            Server::Nginx(n) => a.extend(args!["--pin", n.pin()]),
            Server::Vsftpd(_) => {}
        }
        a
    }

    fn home(&self) -> PathBuf {
        self.work.path().join("home")
    }

    fn run(&self, extra: &[OsString]) -> Output {
        let mut a = self.cp_args();
        a.extend(extra.iter().cloned());
        ferry_in(&self.home(), &a, &[])
    }

    fn spawn(&self, extra: &[OsString]) -> FerryChild {
        let mut a = self.cp_args();
        a.extend(extra.iter().cloned());
        FerryChild::spawn(&self.home(), &a, &[])
    }

    fn server_pid(&self) -> Option<u32> {
        match &self.server {
            Server::Serve(s) => Some(s.pid()),
            _ => None,
        }
    }

    fn kill_server(&mut self) {
        match &mut self.server {
            Server::Sshd(s) => s.kill(),
            Server::Serve(s) => {
                let _ = s.stop_kill();
            }
            Server::Nginx(n) => n.stop(),
            Server::Vsftpd(f) => f.kill(),
        }
    }

    fn restart_server(&mut self) {
        match &mut self.server {
            Server::Sshd(s) => s.restart(),
            Server::Serve(s) => {
                // Every port as before (FTP's too), so a client that
                // reconnects through the proxy finds the new server.
                let ftp = format!("127.0.0.1:{}", s.ftp_port.unwrap_or(0));
                let args: &[&str] = if self.proto == Proto::FtpsServe {
                    &["--writable", "--ftp", &ftp]
                } else {
                    &["--writable"]
                };
                s.restart(args);
            }
            Server::Nginx(n) => n.restart(),
            Server::Vsftpd(f) => f.restart(VSFTPD_RATE),
        }
    }
}

// ===========================================================================
// data and checks
// ===========================================================================

/// The source: `big.bin` or `tree/` (files of 1 MiB and a few small ones).
fn make_source(dir: &Path, shape: Shape, seed: u64) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    match shape {
        Shape::File => {
            let p = dir.join("big.bin");
            make_file(&p, BIG, seed);
            p
        }
        Shape::Tree => {
            let t = dir.join("tree");
            fs::create_dir_all(t.join("sub/deeper")).unwrap();
            for i in 0..10u64 {
                make_file(&t.join(format!("f{i:02}.bin")), MIB + i, seed + i);
            }
            make_file(&t.join("sub/small.txt"), 1000, seed + 20);
            make_file(&t.join("sub/deeper/empty"), 0, seed + 21);
            make_file(&t.join("sub/deeper/two.bin"), 2 * MIB + 1, seed + 22);
            t
        }
    }
}

fn total_bytes(src: &Path) -> u64 {
    if src.is_file() {
        return file_len(src);
    }
    snapshot(src)
        .keys()
        .map(|k| src.join(k))
        .filter(|p| p.is_file())
        .map(|p| file_len(&p))
        .sum()
}

/// ferry's own files beside the destination: `.NAME.ferry-part` and the
/// resume journal `.NAME.ferry-resume`.
fn is_part(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') && n.contains(".ferry-"))
}

/// Regular files under their final name below `dir` (ferry's own part
/// and journal files skipped), relative; files that vanish while we look
/// (renamed by a running copy) are skipped too.
fn finals(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = fs::read_dir(root.join(rel)) else {
            return;
        };
        for e in rd.flatten() {
            let r = rel.join(e.file_name());
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(root, &r, out),
                Ok(t) if t.is_file() && !is_part(&r) => out.push(r),
                _ => {}
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, Path::new(""), &mut v);
    v
}

fn hash_if_there(p: &Path) -> Option<blake3::Hash> {
    let mut h = blake3::Hasher::new();
    let mut f = fs::File::open(p).ok()?;
    std::io::copy(&mut f, &mut h).ok()?;
    Some(h.finalize())
}

/// Files under their final name in `dst` that differ from `src` (a file or
/// a tree): the promise is that there are none, ever. `also`: other
/// contents a file may rightly have (the source before it was truncated).
fn bad_finals_or(src: &Path, dst: &Path, also: &[(PathBuf, blake3::Hash)]) -> Vec<String> {
    let ok = |s: &Path, d: &Path| -> bool {
        let Some(got) = hash_if_there(d) else {
            return true; // gone (renamed) while we looked
        };
        hash_if_there(s) == Some(got) || also.iter().any(|(p, h)| p == s && *h == got)
    };
    let mut bad = Vec::new();
    if src.is_file() {
        if dst.exists() && !ok(src, dst) {
            bad.push(format!(
                "{} differs: {}",
                dst.display(),
                describe_difference(src, dst)
            ));
        }
        return bad;
    }
    for rel in finals(dst) {
        let (s, d) = (src.join(&rel), dst.join(&rel));
        if !s.is_file() {
            // Not a final name of ours: a server's own leftover (nginx's
            // dav leaves NAME.0000000026 when a copy across file systems
            // fails). Untidy, but no file of the source's name is wrong.
            eprintln!("leftover (not a source name): {}", d.display());
        } else if !ok(&s, &d) {
            bad.push(format!(
                "{} differs from {}: {}",
                d.display(),
                s.display(),
                describe_difference(&s, &d)
            ));
        }
    }
    bad
}

fn bad_finals(src: &Path, dst: &Path) -> Vec<String> {
    bad_finals_or(src, dst, &[])
}

fn assert_no_bad_finals(src: &Path, dst: &Path, ctx: &str) {
    let bad = bad_finals(src, dst);
    assert!(
        bad.is_empty(),
        "{ctx}: files under their final name differ from the source:\n{}",
        bad.join("\n")
    );
}

fn assert_identical(src: &Path, dst: &Path, ctx: &str) {
    if src.is_file() {
        assert_same_file(src, dst, ctx);
    } else {
        let diff = tree_diff(src, dst, Cmp::default());
        let diff: Vec<_> = diff
            .into_iter()
            .filter(|d| !d.contains(".ferry-"))
            .collect();
        assert!(diff.is_empty(), "{ctx}: trees differ:\n{}", diff.join("\n"));
    }
}

/// SIGSTOP / SIGCONT / SIGKILL a process we started.
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .stdin(Stdio::null())
        .status();
}

/// `chattr +i`: even root cannot create files in it (EPERM), which is how
/// a root test gets "permission denied"; undone on drop so the temporary
/// directory can be removed.
struct Immutable(PathBuf);

impl Immutable {
    fn set(p: &Path) -> Option<Immutable> {
        let ok = Command::new("chattr")
            .arg("+i")
            .arg(p)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIP: chattr +i {} refused", p.display());
            return None;
        }
        Some(Immutable(p.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

/// A small tmpfs mounted on an existing directory (a server's subtree, so
/// the server writes into it), unmounted on drop.
struct MountAt(PathBuf);

impl MountAt {
    fn tmpfs(dir: &Path, size: &str) -> Option<MountAt> {
        if !is_root() {
            eprintln!("SKIP: tmpfs needs root");
            return None;
        }
        fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIP: mount tmpfs on {} refused", dir.display());
            return None;
        }
        Some(MountAt(dir.to_path_buf()))
    }
}

impl Drop for MountAt {
    fn drop(&mut self) {
        for _ in 0..50 {
            if Command::new("umount")
                .arg(&self.0)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

// ===========================================================================
// one cell: (protocol, direction, shape, fault)
// ===========================================================================

/// Where one cell's source and destination are.
struct Cell {
    dir: Dir,
    shape: Shape,
    /// The source file or tree (local for Up, under the server for Down).
    src: PathBuf,
    /// The destination directory on disk.
    dst_dir: PathBuf,
    /// The source as the client names it (through the proxy or not: see
    /// [`Cell::args`]).
    name: String,
    tag: String,
}

impl Cell {
    fn new(peer: &Peer, dir: Dir, shape: Shape, tag: &str, local: &Path) -> Cell {
        let seed = 1000 + tag.len() as u64;
        let (src_base, dst_dir) = match dir {
            Dir::Down => (peer.remote_root().join(tag).join("src"), local.join(tag)),
            Dir::Up => (local.join(tag).join("src"), peer.remote_root().join(tag)),
        };
        let src = make_source(&src_base, shape, seed);
        fs::create_dir_all(&dst_dir).unwrap();
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        Cell {
            dir,
            shape,
            src,
            dst_dir,
            name,
            tag: tag.to_string(),
        }
    }

    fn dst(&self) -> PathBuf {
        self.dst_dir.join(&self.name)
    }

    /// `[-r] SRC DST/` for `ferry cp`, via the proxy or straight.
    fn args(&self, peer: &Peer, proxied: bool, extra: &[&str]) -> Vec<OsString> {
        let mut a: Vec<OsString> = args!["--timeout", TIMEOUT_SECS.to_string(), "--retries", "3"];
        a.extend(extra.iter().map(OsString::from));
        if self.shape == Shape::Tree {
            a.push("-r".into());
        }
        match self.dir {
            Dir::Down => {
                a.push(
                    peer.url(&format!("{}/src/{}", self.tag, self.name), proxied)
                        .into(),
                );
                a.push(format!("{}/", self.dst_dir.display()).into());
            }
            Dir::Up => {
                a.push(self.src.clone().into());
                a.push(format!("{}/", peer.url(&self.tag, proxied)).into());
            }
        }
        a
    }

    /// Where the copy writes its part files (to watch for progress).
    fn watch(&self) -> PathBuf {
        self.dst_dir.clone()
    }

    /// Whether the data goes through the proxy. Not for FTP (data
    /// connections go where the control connection says), nor for a tree
    /// from nginx: ferry asks for `/tree`, nginx redirects to `/tree/` on
    /// its own port (absolute_redirect), around the proxy.
    fn data_proxied(&self, peer: &Peer) -> bool {
        !(peer.proto.is_ftp()
            || (peer.proto == Proto::HttpsNginx
                && self.dir == Dir::Down
                && self.shape == Shape::Tree))
    }

    fn ctx(&self, peer: &Peer, fault: Fault) -> String {
        format!(
            "{:?} {:?} {:?} {:?}",
            peer.proto, self.dir, self.shape, fault
        )
    }
}

/// Bytes written so far under `dir` (part files included); no hashing, as
/// it runs in a tight loop.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// How the copy was held at its mid point, to let it go again.
enum Held {
    Proxy,
    Stopped(u32),
    Nothing,
}

/// Start the copy and hold it mid-way: the proxy pauses after 40% of the
/// bytes (SFTP, HTTPS), or for FTP the writer is SIGSTOPped once 30% is on
/// disk (vsftpd is slow enough without). Returns the running client.
fn start_and_hold(peer: &Peer, cell: &Cell, extra: &[&str]) -> (FerryChild, Held) {
    let total = total_bytes(&cell.src);
    start_and_hold_at(peer, cell, extra, total * 2 / 5, total * 3 / 10)
}

/// [`start_and_hold`] at other points: the proxy pauses after
/// `proxy_after` more bytes; without the proxy (FTP) the writer is held
/// once `on_disk` bytes are under the destination.
fn start_and_hold_at(
    peer: &Peer,
    cell: &Cell,
    extra: &[&str],
    proxy_after: u64,
    on_disk: u64,
) -> (FerryChild, Held) {
    if cell.data_proxied(peer) {
        let flow = if cell.dir == Dir::Down {
            Flow::Down
        } else {
            Flow::Up
        };
        peer.proxy.arm(ProxyFault {
            flow,
            after: proxy_after,
            action: Action::Pause,
            times: usize::MAX,
        });
        let mut child = peer.spawn(&cell.args(peer, true, extra));
        let end = Instant::now() + Duration::from_secs(60);
        while peer.proxy.fired() == 0 {
            if child.try_wait().is_some() || Instant::now() > end {
                let o = child.kill();
                panic!(
                    "{}: the copy never reached {} bytes through the proxy: {} up, {} down, {} connections: {}",
                    cell.tag,
                    proxy_after,
                    peer.proxy.bytes(Flow::Up),
                    peer.proxy.bytes(Flow::Down),
                    peer.proxy.connections(),
                    describe(&o)
                );
            }
            thread::sleep(Duration::from_millis(5));
        }
        return (child, Held::Proxy);
    }
    let mut child = peer.spawn(&cell.args(peer, false, extra));
    let end = Instant::now() + Duration::from_secs(60);
    let watch = cell.watch();
    while bytes_under(&watch) < on_disk {
        if let Some(st) = child.try_wait() {
            panic!(
                "{}: the copy ended ({st}) before we could hold it",
                cell.tag
            );
        }
        assert!(Instant::now() < end, "{}: no progress", cell.tag);
        thread::sleep(Duration::from_micros(300));
    }
    let writer = match (cell.dir, peer.server_pid()) {
        (Dir::Down, _) => Some(child.pid()),
        (Dir::Up, Some(p)) => Some(p),
        (Dir::Up, None) => None,
    };
    match writer {
        Some(pid) if peer.proto == Proto::FtpsServe || cell.dir == Dir::Down => {
            signal(pid, "STOP");
            // Every thread stopped before we look.
            thread::sleep(Duration::from_millis(100));
            (child, Held::Stopped(pid))
        }
        _ => (child, Held::Nothing),
    }
}

fn let_go(peer: &Peer, held: &Held) {
    match held {
        Held::Proxy => peer.proxy.release(),
        Held::Stopped(pid) => signal(*pid, "CONT"),
        Held::Nothing => {}
    }
}

/// Wait until nothing under `dir` grows for a second (at most 30 s): a
/// server's session may still be writing what the killed client sent
/// (vsftpd drains its socket at its rate). Resuming before that is a
/// separate finding (docs/internals/reliability.md).
fn settle(dir: &Path) {
    let end = Instant::now() + Duration::from_secs(30);
    let mut last = bytes_under(dir);
    while Instant::now() < end {
        thread::sleep(Duration::from_secs(1));
        let now = bytes_under(dir);
        if now == last {
            return;
        }
        last = now;
    }
}

/// Run the copy, SIGKILLed after `limit`: `None` if it was still running.
fn run_bounded(peer: &Peer, args: &[OsString], limit: Duration) -> Option<Output> {
    let mut child = peer.spawn(args);
    let end = Instant::now() + limit;
    while child.try_wait().is_none() {
        if Instant::now() > end {
            let o = child.kill();
            eprintln!("killed after {limit:?}: {}", describe(&o));
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
    Some(child.wait())
}

/// A rerun with `--resume`, straight to the server: must end identical.
fn resume_ends_identical(peer: &Peer, cell: &Cell, ctx: &str) {
    let o = peer.run(&cell.args(peer, false, &["--resume"]));
    assert_ok(&o, &format!("{ctx}: --resume rerun"));
    assert_identical(&cell.src, &cell.dst(), &format!("{ctx}: after --resume"));
}

fn run_cell(peer: &mut Peer, dir: Dir, shape: Shape, fault: Fault, local: &Path) {
    let tag = format!("{dir:?}-{shape:?}").to_lowercase();
    let cell = Cell::new(peer, dir, shape, &tag, local);
    let ctx = cell.ctx(peer, fault);
    eprintln!("--- {ctx}");
    match fault {
        Fault::KillClient | Fault::Existing => {
            let old = if fault == Fault::Existing {
                Some(pre_existing(&cell))
            } else {
                None
            };
            let (child, held) = start_and_hold(peer, &cell, &[]);
            check_mid(&cell, old.as_ref(), &ctx);
            let _ = child.kill();
            let_go(peer, &held);
            peer.proxy.close_all();
            // Whatever the server still had in flight lands now.
            thread::sleep(Duration::from_millis(300));
            check_mid(&cell, old.as_ref(), &format!("{ctx}: after SIGKILL"));
            settle(&cell.dst_dir);
            resume_ends_identical(peer, &cell, &ctx);
        }
        Fault::KillResume => {
            // The first run, killed at 40% as in KillClient.
            let (child, held) = start_and_hold(peer, &cell, &[]);
            let _ = child.kill();
            let_go(peer, &held);
            peer.proxy.close_all();
            thread::sleep(Duration::from_millis(300));
            check_mid(&cell, None, &format!("{ctx}: after the first SIGKILL"));
            settle(&cell.dst_dir);
            // Its --resume continuation, held half-way through what is
            // left (30% more through the proxy, or 65% on disk), killed.
            let total = total_bytes(&cell.src);
            let (child, held) =
                start_and_hold_at(peer, &cell, &["--resume"], total * 3 / 10, total * 13 / 20);
            check_mid(&cell, None, &format!("{ctx}: --resume held"));
            let _ = child.kill();
            let_go(peer, &held);
            peer.proxy.close_all();
            thread::sleep(Duration::from_millis(300));
            check_mid(&cell, None, &format!("{ctx}: --resume killed"));
            settle(&cell.dst_dir);
            resume_ends_identical(peer, &cell, &ctx);
        }
        Fault::KillServerLogin => {
            // Hold the client's first bytes (the SSH version line, the TLS
            // ClientHello, FTP's first command after the greeting).
            peer.proxy.arm(ProxyFault {
                flow: Flow::Up,
                after: 1,
                action: Action::Pause,
                times: usize::MAX,
            });
            let child = peer.spawn(&cell.args(peer, true, &[]));
            assert!(
                peer.proxy.wait_fired(Duration::from_secs(30)),
                "{ctx}: the client never connected"
            );
            peer.kill_server();
            peer.restart_server();
            peer.proxy.release();
            let o = child.wait();
            eprintln!(
                "{ctx}: client after the server's death at login: {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            );
            // The server is back within the retries' backoff: the copy
            // ends whole (`--retries`), unless a restarted nginx has a new
            // certificate, which the client's --pin refuses (exit 3).
            let new_cert = peer.proto == Proto::HttpsNginx && o.status.code() == Some(3);
            if !new_cert {
                assert_code(&o, 0, &format!("{ctx}: retried after the server came back"));
                assert_identical(&cell.src, &cell.dst(), &format!("{ctx}: retried"));
            }
            assert_no_bad_finals(&cell.src, &cell.dst(), &ctx);
            resume_ends_identical(peer, &cell, &ctx);
        }
        Fault::KillBeforeRename => kill_before_rename(peer, &cell, &ctx),
        Fault::KillRecord => kill_in_record(peer, &cell, &ctx),
        Fault::KillServer => {
            let (child, held) = start_and_hold(peer, &cell, &[]);
            peer.kill_server();
            peer.restart_server();
            if let Held::Proxy = held {
                peer.proxy.release();
            } else {
                let_go(peer, &held);
            }
            let o = child.wait();
            eprintln!(
                "{ctx}: client after the server's death: {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            );
            // A restarted nginx has a new self-signed certificate, so a
            // client that reconnects is refused by its --pin: exit 3.
            let new_cert = peer.proto == Proto::HttpsNginx && o.status.code() == Some(3);
            if !o.status.success() && !new_cert {
                assert_code(&o, 1, &format!("{ctx}: a lost server is a network error"));
            }
            assert_no_bad_finals(&cell.src, &cell.dst(), &ctx);
            resume_ends_identical(peer, &cell, &ctx);
        }
        Fault::Reset | Fault::Stall if !cell.data_proxied(peer) && !peer.proto.is_ftp() => {
            eprintln!(
                "{ctx}: skipped: the data does not go through the proxy (see Cell::data_proxied)"
            );
        }
        Fault::Reset | Fault::Stall => {
            let flow = match (peer.proto.is_ftp(), dir) {
                // FTP: the control connection (see the file's doc).
                (true, _) => Flow::Up,
                (false, Dir::Down) => Flow::Down,
                (false, Dir::Up) => Flow::Up,
            };
            let after = if peer.proto.is_ftp() {
                40
            } else {
                total_bytes(&cell.src) * 2 / 5
            };
            peer.proxy.arm(ProxyFault {
                flow,
                after,
                action: if fault == Fault::Reset {
                    Action::Reset
                } else {
                    Action::Stall
                },
                times: 1,
            });
            let started = Instant::now();
            let o = run_bounded(peer, &cell.args(peer, true, &[]), END_WITHIN);
            let took = started.elapsed();
            // The client is gone: what a stalled connection still holds
            // is dropped with it, as a dead peer's unsent bytes are (let
            // through late, an HTTP/2 PUT from byte 0 queued behind the
            // stall reached ferry serve during the --resume rerun and
            // started that part afresh under it: exit 4, seen once in CI).
            peer.proxy.close_all();
            let Some(o) = o else {
                peer.proxy.release();
                panic!("{ctx}: still running after {END_WITHIN:?} (killed): the stall was not detected");
            };
            peer.proxy.release();
            eprintln!(
                "{ctx}: fired {} time(s); ended in {:.1} s: {}: {}",
                peer.proxy.fired(),
                took.as_secs_f64(),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            );
            assert!(peer.proxy.fired() > 0, "{ctx}: the fault never fired");
            assert!(took < END_WITHIN, "{ctx}: took {took:?}");
            if o.status.success() {
                assert_identical(&cell.src, &cell.dst(), &format!("{ctx}: retried"));
            } else {
                assert_code(&o, 1, &ctx);
                assert_no_bad_finals(&cell.src, &cell.dst(), &ctx);
                resume_ends_identical(peer, &cell, &ctx);
            }
        }
        Fault::DiskFull => {
            // Replace the destination directory with a 6 MiB tmpfs: the big
            // file (16 MiB) and the tree (14 MiB) cannot fit.
            let _mount = match MountAt::tmpfs(&cell.dst_dir, "6m") {
                Some(m) => m,
                None => return,
            };
            let o = peer.run(&cell.args(peer, false, &[]));
            let want = if dir == Dir::Down { 5 } else { 4 };
            // OpenSSH's sftp-server says only "Failure", nginx 500, vsftpd
            // 451: the cause can be named only when ferry or ferry serve
            // sees it.
            let names_cause = dir == Dir::Down
                || matches!(
                    peer.proto,
                    Proto::SftpServe | Proto::HttpsServe | Proto::FtpsServe
                );
            check_refusal(
                &o,
                &cell,
                want,
                if names_cause { "space|storage" } else { "" },
                &ctx,
            );
        }
        Fault::Denied => {
            let _lock = match Immutable::set(&cell.dst_dir) {
                Some(l) => l,
                None => return,
            };
            let o = peer.run(&cell.args(peer, false, &[]));
            let want = if dir == Dir::Down { 5 } else { 4 };
            check_refusal(&o, &cell, want, "", &ctx);
        }
        Fault::SourceRewritten => {
            let (child, held) = start_and_hold(peer, &cell, &[]);
            let victim = if shape == Shape::File {
                cell.src.clone()
            } else {
                cell.src.join("sub/deeper/two.bin")
            };
            let before = [(victim.clone(), hash_file(&victim))];
            // In place (same inode, same size), as a program rewriting
            // its file does, with a time 5 s later than the copy saw.
            let old = fs::metadata(&victim).unwrap().modified().unwrap();
            let mut body = fs::read(&victim).unwrap();
            for b in &mut body {
                *b ^= 0x5a;
            }
            let f = fs::OpenOptions::new().write(true).open(&victim).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, &body, 0).unwrap();
            f.set_modified(old + Duration::from_secs(5)).unwrap();
            drop(f);
            let_go(peer, &held);
            let o = child.wait();
            eprintln!(
                "{ctx}: after rewriting the source: {}: {}",
                o.status,
                stderr_text(&o).trim()
            );
            let bad = bad_finals_or(&cell.src, &cell.dst(), &before);
            assert!(
                bad.is_empty(),
                "{ctx}: exit {}; final files match neither the source nor its old content:\n{}\n{}",
                o.status,
                bad.join("\n"),
                stderr_text(&o)
            );
            let said = stderr_text(&o);
            if shape == Shape::File {
                assert_eq!(o.status.code(), Some(4), "{ctx}: {said}");
            }
            if !o.status.success() {
                assert!(
                    (said.contains("big.bin") || said.contains("two.bin"))
                        && said.contains("changed during the copy"),
                    "{ctx}: names the file and the cause: {said}"
                );
            }
            peer.proxy.close_all();
            settle(&cell.dst_dir);
            resume_ends_identical(peer, &cell, &ctx);
        }
        Fault::SourceTruncated => {
            let (child, held) = start_and_hold(peer, &cell, &[]);
            // Cut the source short behind the copy's back: the big file, or
            // in a tree the file that is last in name order.
            let victim = if shape == Shape::File {
                cell.src.clone()
            } else {
                cell.src.join("sub/deeper/two.bin")
            };
            let before = [(victim.clone(), hash_file(&victim))];
            let f = fs::OpenOptions::new().write(true).open(&victim).unwrap();
            f.set_len(file_len(&victim) / 5).unwrap();
            drop(f);
            let_go(peer, &held);
            let o = child.wait();
            eprintln!("{ctx}: after truncating the source: {}", o.status);
            // Either an error, or everything under a final name equals the
            // source as it is now or as it was whole (copied before the
            // cut); never a final file matching neither.
            let bad = bad_finals_or(&cell.src, &cell.dst(), &before);
            assert!(
                bad.is_empty(),
                "{ctx}: exit {}; final files match neither the source nor its old content:\n{}\n{}",
                o.status,
                bad.join("\n"),
                stderr_text(&o)
            );
            if !o.status.success() {
                let said = stderr_text(&o);
                assert!(
                    said.contains("big.bin") || said.contains("two.bin"),
                    "{ctx}: names the file: {said}"
                );
            }
        }
    }
}

/// `strace` holding the syscalls `calls` (a strace set) that touch any of
/// `paths` (none: all of them) for 3 s each as they enter (the other
/// syscalls run untraced, `--seccomp-bpf`); `None` (and a SKIP line)
/// without strace. strace matches a path argument as written (ferry may
/// write `dir//name`) but a file descriptor by what it refers to, so
/// `paths` suits writes, not renames.
fn strace_hold(calls: &str, paths: &[PathBuf]) -> Option<Vec<OsString>> {
    if !have("strace") {
        eprintln!("SKIP: strace not installed");
        return None;
    }
    let mut via = args!["strace", "-f", "-qq", "--seccomp-bpf", "-o", "/dev/null"];
    for p in paths {
        via.extend(args!["-P", p]);
    }
    via.extend(args![
        "-e",
        format!("trace={calls}"),
        "-e",
        format!("inject={calls}:delay_enter=3000000")
    ]);
    Some(via)
}

/// `ferry cp` run under `via` (see [`strace_hold`]) with the cell's
/// arguments, straight to the server.
fn spawn_held(peer: &Peer, cell: &Cell, via: &[OsString], extra: &[&str]) -> FerryChild {
    let mut a = peer.cp_args();
    a.extend(cell.args(peer, false, extra));
    FerryChild::spawn_via(via, &peer.home(), &a, &[])
}

/// SIGKILL the ferry that `under` (strace) runs, then collect strace.
fn kill_traced(under: FerryChild) -> Output {
    let pid = under.pid();
    let children =
        fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let mut killed = false;
    for c in children.split_whitespace() {
        if let Ok(c) = c.parse::<u32>() {
            signal(c, "KILL");
            killed = true;
        }
    }
    assert!(killed, "no ferry process under {pid}");
    under.wait()
}

/// Source files of the cell (relative paths; the file itself for a file).
fn source_files(cell: &Cell) -> Vec<PathBuf> {
    if cell.shape == Shape::File {
        return vec![PathBuf::from(&cell.name)];
    }
    finals(&cell.src)
        .into_iter()
        .map(|r| Path::new(&cell.name).join(r))
        .collect()
}

/// `.NAME.ferry-part` beside `final_path`.
fn part_of(final_path: &Path) -> PathBuf {
    let name = final_path.file_name().unwrap().to_string_lossy();
    final_path.with_file_name(format!(".{name}.ferry-part"))
}

/// The client killed once a part file is complete and its rename to the
/// final name is held 3 s by strace: for a download the client renames
/// (strace runs it), or links in a file it made unnamed (a file made in
/// one job: `linkat` held, the unnamed file found by its open
/// descriptor), for an upload over SFTP or FTP the server does, as
/// ferry asks (strace attached to the server; the held rename may still
/// finish after the client died, whole). Nothing under a final name
/// differs, and `--resume` completes. An HTTP PUT has no part file of
/// ferry's (the server keeps the body under its own name until the
/// request ends): mid-copy kills cover it.
fn kill_before_rename(peer: &Peer, cell: &Cell, ctx: &str) {
    let calls = "rename,renameat,renameat2,linkat";
    let (mut child, mut tracer) = match cell.dir {
        Dir::Down => {
            let Some(via) = strace_hold(calls, &[]) else {
                return;
            };
            (spawn_held(peer, cell, &via, &[]), None)
        }
        Dir::Up if matches!(peer.proto, Proto::HttpsNginx | Proto::HttpsServe) => {
            eprintln!("{ctx}: skipped: an HTTP PUT has no part file to rename");
            return;
        }
        Dir::Up => {
            let Some(t) = strace_server(peer, calls, &[]) else {
                return;
            };
            (peer.spawn(&cell.args(peer, false, &[])), Some(t))
        }
    };
    let rels = source_files(cell);
    let src_of = |rel: &Path| -> PathBuf {
        match cell.shape {
            Shape::File => cell.src.clone(),
            Shape::Tree => cell.src.join(rel.strip_prefix(&cell.name).unwrap()),
        }
    };
    let end = Instant::now() + Duration::from_secs(60);
    // A part file as long as its source (not empty: an empty file's part
    // is complete at once), its final name not there yet.
    let complete = loop {
        let unnamed = match cell.dir {
            Dir::Down => unnamed_file_lengths(child.pid()),
            Dir::Up => Vec::new(),
        };
        let found = rels.iter().find(|r| {
            let want = file_len(&src_of(r));
            let d = cell.dst_dir.join(r);
            let part = fs::metadata(part_of(&d)).is_ok_and(|m| m.len() == want);
            want > 0 && (part || unnamed.contains(&want)) && !d.exists()
        });
        if let Some(r) = found {
            break r.clone();
        }
        if let Some(st) = child.try_wait() {
            if let Some(t) = tracer.as_mut() {
                let _ = t.kill();
            }
            panic!("{ctx}: the copy ended ({st}) before a part file was complete");
        }
        assert!(Instant::now() < end, "{ctx}: no part file completed");
        thread::sleep(Duration::from_millis(2));
    };
    // The rename is held for 3 s: it has not happened when we kill.
    thread::sleep(Duration::from_millis(200));
    let o = match tracer.as_mut() {
        None => kill_traced(child),
        Some(t) => {
            let o = child.kill();
            // Let the held rename finish (or not) and the server go on
            // untraced.
            thread::sleep(Duration::from_millis(3500));
            signal(t.id(), "TERM");
            let _ = t.wait();
            o
        }
    };
    eprintln!(
        "{ctx}: killed with {} complete: {}",
        complete.display(),
        o.status
    );
    let d = cell.dst_dir.join(&complete);
    assert!(
        !d.exists() || hash_file(&d) == hash_file(&src_of(&complete)),
        "{ctx}: {} is under its final name but differs",
        d.display()
    );
    assert_no_bad_finals(&cell.src, &cell.dst(), ctx);
    resume_ends_identical(peer, cell, ctx);
}

/// The lengths of the files without a name (`O_TMPFILE`, not linked in
/// yet) that the ferry under `under` (strace) has open: its descriptors
/// read as `/dir/#inode (deleted)`. The tree's files differ in length,
/// so a length says which file it is.
fn unnamed_file_lengths(under: u32) -> Vec<u64> {
    let children =
        fs::read_to_string(format!("/proc/{under}/task/{under}/children")).unwrap_or_default();
    let mut out = Vec::new();
    for c in children.split_whitespace() {
        let Ok(fds) = fs::read_dir(format!("/proc/{c}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let to = fs::read_link(fd.path()).unwrap_or_default();
            let to = to.to_string_lossy();
            let unnamed = to.ends_with(" (deleted)")
                && to.rsplit('/').next().is_some_and(|n| n.starts_with('#'));
            if unnamed {
                if let Ok(m) = fs::metadata(fd.path()) {
                    out.push(m.len());
                }
            }
        }
    }
    out
}

/// strace attached to the server's processes (sshd and its children,
/// ferry serve's threads, vsftpd's sessions), holding `calls` 3 s each
/// (on `paths` only, when given); stopped with SIGTERM, which detaches.
fn strace_server(peer: &Peer, calls: &str, paths: &[PathBuf]) -> Option<std::process::Child> {
    if !have("strace") {
        eprintln!("SKIP: strace not installed");
        return None;
    }
    let pids: Vec<u32> = match &peer.server {
        Server::Sshd(s) => s.pids(),
        Server::Serve(s) => vec![s.pid()],
        Server::Vsftpd(f) => f.pid().into_iter().collect(),
        Server::Nginx(_) => Vec::new(),
    };
    let mut strace = Command::new("strace");
    strace.args(["-f", "-qq", "-o", "/dev/null", "-e"]);
    strace.arg(format!("trace={calls}"));
    strace
        .arg("-e")
        .arg(format!("inject={calls}:delay_enter=3000000"));
    for p in paths {
        strace.arg("-P").arg(p);
    }
    for p in &pids {
        strace.arg("-p").arg(p.to_string());
    }
    let tracer = strace
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // strace says nothing once attached (-qq): give it time.
    thread::sleep(Duration::from_millis(500));
    Some(tracer)
}

/// A split copy (`--streams 4`) killed while its resume record is being
/// written (created, its writes held by strace): `--resume` must not
/// trust a record cut short, and completes. A download's record is the
/// client's (strace runs it; the HTTP loop wrote `RECORD.new` and renamed
/// it); a split upload's lies beside the part on the server (strace
/// attached to it). Uploads: SFTP to sshd only. HTTP and FTP uploads keep
/// no record (ferry serve's ranged PUT asks the server what it has; FTP
/// appends in order), and strace's hold did not take on ferry serve's
/// record writes in one run of two (the copy ended first), which would
/// make the cell check nothing.
fn kill_in_record(peer: &Peer, cell: &Cell, ctx: &str) {
    if cell.shape == Shape::Tree {
        eprintln!("{ctx}: skipped: the file cell covers it (only the tree's 2 MiB file is split)");
        return;
    }
    let record = cell.dst_dir.join(format!(".{}.ferry-resume", cell.name));
    let staged = cell
        .dst_dir
        .join(format!(".{}.ferry-resume.new", cell.name));
    let calls = "write,pwrite64,writev,pwritev,pwritev2";
    let (mut child, mut tracer) = match cell.dir {
        Dir::Down => {
            let Some(via) = strace_hold(calls, &[record.clone(), staged.clone()]) else {
                return;
            };
            (spawn_held(peer, cell, &via, &["--streams", "4"]), None)
        }
        Dir::Up if peer.proto != Proto::SftpSshd => {
            eprintln!("{ctx}: skipped: a split SFTP upload to sshd only");
            return;
        }
        Dir::Up => {
            let Some(t) = strace_server(peer, calls, std::slice::from_ref(&record)) else {
                return;
            };
            let args = cell.args(peer, false, &["--streams", "4"]);
            (peer.spawn(&args), Some(t))
        }
    };
    let end = Instant::now() + Duration::from_secs(60);
    while !record.exists() && !staged.exists() {
        if let Some(st) = child.try_wait() {
            if let Some(t) = tracer.as_mut() {
                let _ = t.kill();
            }
            let o = child.wait();
            panic!(
                "{ctx}: the copy ended ({st}) without writing {}: {}",
                record.display(),
                describe(&o)
            );
        }
        assert!(Instant::now() < end, "{ctx}: no resume record");
        thread::sleep(Duration::from_millis(2));
    }
    thread::sleep(Duration::from_millis(200));
    let len_of = |p: &Path| fs::metadata(p).map(|m| m.len()).ok();
    let (o, lens) = match tracer.as_mut() {
        None => {
            let o = kill_traced(child);
            (o, (len_of(&record), len_of(&staged)))
        }
        Some(t) => {
            let o = child.kill();
            let lens = (len_of(&record), len_of(&staged));
            assert!(!o.status.success(), "{ctx}: the copy ended before the kill");
            thread::sleep(Duration::from_millis(3500));
            signal(t.id(), "TERM");
            let _ = t.wait();
            (o, lens)
        }
    };
    eprintln!(
        "{ctx}: killed while writing the record (record {:?} bytes, staged {:?}): {}",
        lens.0, lens.1, o.status
    );
    assert_no_bad_finals(&cell.src, &cell.dst(), ctx);
    resume_ends_identical(peer, cell, ctx);
}

/// Put an old file (or tree) of the same name at the destination; returns
/// it (a copy kept aside) to compare with.
fn pre_existing(cell: &Cell) -> PathBuf {
    let keep = cell.dst_dir.with_extension("old");
    let old_src = keep.join("src");
    let old = make_source(&old_src, cell.shape, 7);
    // Shorter and different: any mix with the new source shows.
    if cell.shape == Shape::File {
        fs::OpenOptions::new()
            .write(true)
            .open(&old)
            .unwrap()
            .set_len(3 * MIB)
            .unwrap();
    }
    copy_all(&old, &cell.dst());
    old
}

fn copy_all(from: &Path, to: &Path) {
    if from.is_file() {
        fs::copy(from, to).unwrap();
        return;
    }
    for (rel, _) in snapshot(from) {
        let (s, d) = (from.join(&rel), to.join(&rel));
        if s.is_dir() {
            fs::create_dir_all(&d).unwrap();
        } else {
            fs::create_dir_all(d.parent().unwrap()).unwrap();
            fs::copy(&s, &d).unwrap();
        }
    }
}

/// Mid-fault: every final-named file equals its source, or, with a
/// pre-existing destination, the old file is still there whole (a tree
/// may already have new files in place of old ones: those equal the new
/// source).
fn check_mid(cell: &Cell, old: Option<&PathBuf>, ctx: &str) {
    match old {
        None => assert_no_bad_finals(&cell.src, &cell.dst(), ctx),
        Some(old) if cell.shape == Shape::File => {
            let h = hash_if_there(&cell.dst());
            assert!(
                h == Some(hash_file(old)) || h == Some(hash_file(&cell.src)),
                "{ctx}: the pre-existing file was damaged: {}",
                describe_difference(old, &cell.dst())
            );
        }
        Some(old) => {
            for rel in finals(old) {
                let d = cell.dst().join(&rel);
                let Some(h) = hash_if_there(&d) else {
                    continue;
                };
                assert!(
                    h == hash_file(&old.join(&rel)) || h == hash_file(&cell.src.join(&rel)),
                    "{ctx}: {} is neither the old nor the new file",
                    d.display()
                );
            }
        }
    }
}

/// A refused copy: the documented exit code, the file and (when given)
/// the cause named, nothing wrong under a final name.
fn check_refusal(o: &Output, cell: &Cell, code: i32, cause: &str, ctx: &str) {
    let said = stderr_text(o);
    eprintln!("{ctx}: {} {}", o.status, said.trim());
    assert!(!o.status.success(), "{ctx}: succeeded: {}", describe(o));
    assert_code(o, code, ctx);
    assert!(
        said.contains(&cell.name) || said.contains(".bin") || said.contains(&cell.tag),
        "{ctx}: the error names no file: {said}"
    );
    if !cause.is_empty() {
        let low = said.to_lowercase();
        assert!(
            cause.split('|').any(|c| low.contains(c)),
            "{ctx}: the cause ({cause}): {said}"
        );
    }
    assert_no_bad_finals(&cell.src, &cell.dst(), ctx);
}

fn run_row(proto: Proto, fault: Fault, dir: Dir) {
    let Some(mut peer) = Peer::start(proto) else {
        return;
    };
    let local = tempdir();
    for shape in [Shape::File, Shape::Tree] {
        run_cell(&mut peer, dir, shape, fault, local.path());
    }
}

// ===========================================================================
// the matrix: one test per protocol x direction x fault (each runs the big
// file, then the tree); docs/internals/reliability.md has it as a table.
// Every server here takes writes, so every row has both directions.
// ===========================================================================

macro_rules! matrix {
    ($($(#[$m:meta])* $name:ident: $proto:ident, $dir:ident, $fault:ident;)*) => {
        $(
            #[test]
            $(#[$m])*
            fn $name() {
                run_row(Proto::$proto, Fault::$fault, Dir::$dir);
            }
        )*
    };
}

matrix! {
    sftp_sshd_down_kill_client: SftpSshd, Down, KillClient;
    sftp_sshd_down_kill_server: SftpSshd, Down, KillServer;
    sftp_sshd_down_reset: SftpSshd, Down, Reset;
    sftp_sshd_down_stall: SftpSshd, Down, Stall;
    sftp_sshd_down_disk_full: SftpSshd, Down, DiskFull;
    sftp_sshd_down_denied: SftpSshd, Down, Denied;
    sftp_sshd_down_existing: SftpSshd, Down, Existing;
    sftp_sshd_down_source_truncated: SftpSshd, Down, SourceTruncated;
    sftp_sshd_up_kill_client: SftpSshd, Up, KillClient;
    sftp_sshd_up_kill_server: SftpSshd, Up, KillServer;
    sftp_sshd_up_reset: SftpSshd, Up, Reset;
    sftp_sshd_up_stall: SftpSshd, Up, Stall;
    sftp_sshd_up_disk_full: SftpSshd, Up, DiskFull;
    sftp_sshd_up_denied: SftpSshd, Up, Denied;
    sftp_sshd_up_existing: SftpSshd, Up, Existing;
    sftp_sshd_up_source_truncated: SftpSshd, Up, SourceTruncated;
    sftp_sshd_down_source_rewritten: SftpSshd, Down, SourceRewritten;
    sftp_sshd_up_source_rewritten: SftpSshd, Up, SourceRewritten;

    sftp_serve_down_kill_client: SftpServe, Down, KillClient;
    sftp_serve_down_kill_server: SftpServe, Down, KillServer;
    sftp_serve_down_reset: SftpServe, Down, Reset;
    sftp_serve_down_stall: SftpServe, Down, Stall;
    sftp_serve_down_disk_full: SftpServe, Down, DiskFull;
    sftp_serve_down_denied: SftpServe, Down, Denied;
    sftp_serve_down_existing: SftpServe, Down, Existing;
    sftp_serve_down_source_truncated: SftpServe, Down, SourceTruncated;
    sftp_serve_up_kill_client: SftpServe, Up, KillClient;
    sftp_serve_up_kill_server: SftpServe, Up, KillServer;
    sftp_serve_up_reset: SftpServe, Up, Reset;
    sftp_serve_up_stall: SftpServe, Up, Stall;
    sftp_serve_up_disk_full: SftpServe, Up, DiskFull;
    sftp_serve_up_denied: SftpServe, Up, Denied;
    sftp_serve_up_existing: SftpServe, Up, Existing;
    sftp_serve_up_source_truncated: SftpServe, Up, SourceTruncated;
    sftp_serve_down_source_rewritten: SftpServe, Down, SourceRewritten;
    sftp_serve_up_source_rewritten: SftpServe, Up, SourceRewritten;

    https_nginx_down_kill_client: HttpsNginx, Down, KillClient;
    https_nginx_down_kill_server: HttpsNginx, Down, KillServer;
    https_nginx_down_reset: HttpsNginx, Down, Reset;
    https_nginx_down_stall: HttpsNginx, Down, Stall;
    https_nginx_down_disk_full: HttpsNginx, Down, DiskFull;
    https_nginx_down_denied: HttpsNginx, Down, Denied;
    https_nginx_down_existing: HttpsNginx, Down, Existing;
    https_nginx_down_source_truncated: HttpsNginx, Down, SourceTruncated;
    https_nginx_up_kill_client: HttpsNginx, Up, KillClient;
    https_nginx_up_kill_server: HttpsNginx, Up, KillServer;
    https_nginx_up_reset: HttpsNginx, Up, Reset;
    https_nginx_up_stall: HttpsNginx, Up, Stall;
    https_nginx_up_disk_full: HttpsNginx, Up, DiskFull;
    https_nginx_up_denied: HttpsNginx, Up, Denied;
    https_nginx_up_existing: HttpsNginx, Up, Existing;
    https_nginx_up_source_truncated: HttpsNginx, Up, SourceTruncated;
    https_nginx_up_source_rewritten: HttpsNginx, Up, SourceRewritten;

    https_serve_down_kill_client: HttpsServe, Down, KillClient;
    https_serve_down_kill_server: HttpsServe, Down, KillServer;
    https_serve_down_reset: HttpsServe, Down, Reset;
    https_serve_down_stall: HttpsServe, Down, Stall;
    https_serve_down_disk_full: HttpsServe, Down, DiskFull;
    https_serve_down_denied: HttpsServe, Down, Denied;
    https_serve_down_existing: HttpsServe, Down, Existing;
    https_serve_down_source_truncated: HttpsServe, Down, SourceTruncated;
    https_serve_up_kill_client: HttpsServe, Up, KillClient;
    https_serve_up_kill_server: HttpsServe, Up, KillServer;
    https_serve_up_reset: HttpsServe, Up, Reset;
    https_serve_up_stall: HttpsServe, Up, Stall;
    https_serve_up_disk_full: HttpsServe, Up, DiskFull;
    https_serve_up_denied: HttpsServe, Up, Denied;
    https_serve_up_existing: HttpsServe, Up, Existing;
    https_serve_up_source_truncated: HttpsServe, Up, SourceTruncated;
    https_serve_up_source_rewritten: HttpsServe, Up, SourceRewritten;

    ftp_vsftpd_down_kill_client: FtpVsftpd, Down, KillClient;
    ftp_vsftpd_down_kill_server: FtpVsftpd, Down, KillServer;
    ftp_vsftpd_down_reset: FtpVsftpd, Down, Reset;
    ftp_vsftpd_down_stall: FtpVsftpd, Down, Stall;
    ftp_vsftpd_down_disk_full: FtpVsftpd, Down, DiskFull;
    ftp_vsftpd_down_denied: FtpVsftpd, Down, Denied;
    ftp_vsftpd_down_existing: FtpVsftpd, Down, Existing;
    ftp_vsftpd_down_source_truncated: FtpVsftpd, Down, SourceTruncated;
    ftp_vsftpd_up_kill_client: FtpVsftpd, Up, KillClient;
    ftp_vsftpd_up_kill_server: FtpVsftpd, Up, KillServer;
    ftp_vsftpd_up_reset: FtpVsftpd, Up, Reset;
    ftp_vsftpd_up_stall: FtpVsftpd, Up, Stall;
    ftp_vsftpd_up_disk_full: FtpVsftpd, Up, DiskFull;
    ftp_vsftpd_up_denied: FtpVsftpd, Up, Denied;
    ftp_vsftpd_up_existing: FtpVsftpd, Up, Existing;
    ftp_vsftpd_up_source_truncated: FtpVsftpd, Up, SourceTruncated;

    ftps_serve_down_kill_client: FtpsServe, Down, KillClient;
    ftps_serve_down_kill_server: FtpsServe, Down, KillServer;
    ftps_serve_down_reset: FtpsServe, Down, Reset;
    ftps_serve_down_stall: FtpsServe, Down, Stall;
    ftps_serve_down_disk_full: FtpsServe, Down, DiskFull;
    ftps_serve_down_denied: FtpsServe, Down, Denied;
    ftps_serve_down_existing: FtpsServe, Down, Existing;
    ftps_serve_down_source_truncated: FtpsServe, Down, SourceTruncated;
    ftps_serve_up_kill_client: FtpsServe, Up, KillClient;
    ftps_serve_up_kill_server: FtpsServe, Up, KillServer;
    ftps_serve_up_reset: FtpsServe, Up, Reset;
    ftps_serve_up_stall: FtpsServe, Up, Stall;
    ftps_serve_up_disk_full: FtpsServe, Up, DiskFull;
    ftps_serve_up_denied: FtpsServe, Up, Denied;
    ftps_serve_up_existing: FtpsServe, Up, Existing;
    ftps_serve_up_source_truncated: FtpsServe, Up, SourceTruncated;
    ftps_serve_up_source_rewritten: FtpsServe, Up, SourceRewritten;
}

// Kill points other than mid-copy (issue #24): during a --resume
// continuation and the server at login, both ways; just before the final
// rename and while the resume record is written, downloads (the local
// side is the one that renames and keeps the record).
matrix! {
    sftp_sshd_down_kill_resume: SftpSshd, Down, KillResume;
    sftp_sshd_up_kill_resume: SftpSshd, Up, KillResume;
    sftp_sshd_down_kill_server_login: SftpSshd, Down, KillServerLogin;
    sftp_sshd_up_kill_server_login: SftpSshd, Up, KillServerLogin;
    sftp_sshd_down_kill_before_rename: SftpSshd, Down, KillBeforeRename;
    sftp_sshd_down_kill_record: SftpSshd, Down, KillRecord;

    sftp_serve_down_kill_resume: SftpServe, Down, KillResume;
    sftp_serve_up_kill_resume: SftpServe, Up, KillResume;
    sftp_serve_down_kill_server_login: SftpServe, Down, KillServerLogin;
    sftp_serve_up_kill_server_login: SftpServe, Up, KillServerLogin;
    sftp_serve_down_kill_before_rename: SftpServe, Down, KillBeforeRename;
    sftp_serve_down_kill_record: SftpServe, Down, KillRecord;

    https_nginx_down_kill_resume: HttpsNginx, Down, KillResume;
    https_nginx_up_kill_resume: HttpsNginx, Up, KillResume;
    https_nginx_down_kill_server_login: HttpsNginx, Down, KillServerLogin;
    https_nginx_up_kill_server_login: HttpsNginx, Up, KillServerLogin;
    https_nginx_down_kill_before_rename: HttpsNginx, Down, KillBeforeRename;
    https_nginx_down_kill_record: HttpsNginx, Down, KillRecord;

    https_serve_down_kill_resume: HttpsServe, Down, KillResume;
    https_serve_up_kill_resume: HttpsServe, Up, KillResume;
    https_serve_down_kill_server_login: HttpsServe, Down, KillServerLogin;
    https_serve_up_kill_server_login: HttpsServe, Up, KillServerLogin;
    https_serve_down_kill_before_rename: HttpsServe, Down, KillBeforeRename;
    https_serve_down_kill_record: HttpsServe, Down, KillRecord;

    ftp_vsftpd_down_kill_resume: FtpVsftpd, Down, KillResume;
    ftp_vsftpd_up_kill_resume: FtpVsftpd, Up, KillResume;
    ftp_vsftpd_down_kill_server_login: FtpVsftpd, Down, KillServerLogin;
    ftp_vsftpd_up_kill_server_login: FtpVsftpd, Up, KillServerLogin;
    ftp_vsftpd_down_kill_before_rename: FtpVsftpd, Down, KillBeforeRename;
    ftp_vsftpd_down_kill_record: FtpVsftpd, Down, KillRecord;

    ftps_serve_down_kill_resume: FtpsServe, Down, KillResume;
    ftps_serve_up_kill_resume: FtpsServe, Up, KillResume;
    ftps_serve_down_kill_server_login: FtpsServe, Down, KillServerLogin;
    ftps_serve_up_kill_server_login: FtpsServe, Up, KillServerLogin;
    ftps_serve_down_kill_before_rename: FtpsServe, Down, KillBeforeRename;
    ftps_serve_down_kill_record: FtpsServe, Down, KillRecord;
}

// The client killed while the server's rename of a complete part is held
// (uploads: ferry asks the server to rename; strace on the server holds
// it). HTTP PUTs have no part file of ferry's.
matrix! {
    sftp_sshd_up_kill_before_rename: SftpSshd, Up, KillBeforeRename;
    sftp_serve_up_kill_before_rename: SftpServe, Up, KillBeforeRename;
    ftp_vsftpd_up_kill_before_rename: FtpVsftpd, Up, KillBeforeRename;
    ftps_serve_up_kill_before_rename: FtpsServe, Up, KillBeforeRename;
    sftp_sshd_up_kill_record: SftpSshd, Up, KillRecord;
}

// ===========================================================================
// issue #20: a STOR the server ends with 226 although the file is short
// ===========================================================================

/// `ferry cp -q FILE URL` plus `extra`.
fn put(file: &Path, url: &str, extra: &[&str]) -> Output {
    let mut a: Vec<String> = extra.iter().map(|x| x.to_string()).collect();
    a.push(file.display().to_string());
    a.push(url.to_string());
    cp(&a)
}

/// A refused short upload: exit 4, the final URL and both sizes in the
/// message, and what to do.
fn assert_short(o: &Output, fin: &str, got: u64, want: u64, ctx: &str) {
    let said = stderr_text(o);
    eprintln!("{ctx}: {} {}", o.status, said.trim());
    assert_code(o, 4, ctx);
    for part in [
        fin.to_string(),
        format!("SIZE {got},"),
        format!("expected {want}"),
    ] {
        assert!(said.contains(&part), "{ctx}: no {part:?} in: {said}");
    }
    assert!(
        said.contains("quota") && said.contains("free space"),
        "{ctx}: says what to do: {said}"
    );
}

/// A server that ends a `STOR` with `226` although it stored less (a full
/// disk or a quota does that on some servers): ferry asks the part file's
/// `SIZE` after the upload and refuses it before the rename, so the short
/// file never gets the final name. vsftpd stores a real short file here:
/// `common::ftpproxy` drops each upload's last 100 bytes and ends the data
/// connection cleanly, so vsftpd sees the data end and answers 226 (on a
/// full disk vsftpd itself says 451: the matrix's disk-full cells). A small
/// file (`put_whole`: STOR, SIZE, RNFR/RNTO in one job) to a new name and
/// over an old file, a big one (the streamed upload) over an old file, a
/// `--resume` whose APPE is cut too (expected: the whole file's size),
/// then the `--resume` that completes it; a server without `SIZE` (502) is
/// not an error.
#[test]
fn ftp_vsftpd_up_short_store() {
    let Some(ftpd) = vsftpd_or_skip("ftp_vsftpd_up_short_store", VsftpdOptions::default()) else {
        return;
    };
    let proxy = FtpProxy::start(ftpd.port());
    let url = |p: &str| format!("ftp://127.0.0.1:{}/{p}", proxy.port());
    let root = ftpd.root().to_path_buf();
    let local = tempdir();
    let small = local.path().join("small.bin");
    let small_h = make_file(&small, 20_000, 201);
    let big = local.path().join("big.bin");
    let big_len = 3 * MIB + 17;
    let big_h = make_file(&big, big_len, 202);
    let old = make_file(&root.join("old-small.bin"), 777, 203);
    let old_big = make_file(&root.join("old-big.bin"), 5000, 204);

    // Untouched, through the proxy's data relay.
    let o = put(&small, &url("clean.bin"), &[]);
    assert_ok(&o, "through the proxy");
    assert_eq!(hash_file(&root.join("clean.bin")), small_h);
    assert!(
        proxy.data_connections() > 0,
        "the data went around the proxy"
    );

    proxy.cut(100);
    let o = put(&small, &url("new.bin"), &[]);
    assert_short(&o, &url("new.bin"), 19_900, 20_000, "small, new name");
    assert!(
        !root.join("new.bin").exists(),
        "small, new name: a short file got the final name"
    );
    assert_eq!(file_len(&root.join(".new.bin.ferry-part")), 19_900);

    let o = put(&small, &url("old-small.bin"), &[]);
    assert_short(
        &o,
        &url("old-small.bin"),
        19_900,
        20_000,
        "small, over a file",
    );
    assert_eq!(
        hash_file(&root.join("old-small.bin")),
        old,
        "small: old content"
    );

    let o = put(&big, &url("old-big.bin"), &[]);
    assert_short(
        &o,
        &url("old-big.bin"),
        big_len - 100,
        big_len,
        "big, over a file",
    );
    assert_eq!(
        hash_file(&root.join("old-big.bin")),
        old_big,
        "big: old content"
    );
    let cuts = proxy.cuts();
    assert!(cuts >= 3, "the proxy cut {cuts} uploads");

    // --resume continues the part file with APPE (its last 100 bytes),
    // cut again: the part must be the whole file's size.
    let o = put(&big, &url("old-big.bin"), &["--resume"]);
    assert_short(
        &o,
        &url("old-big.bin"),
        big_len - 100,
        big_len,
        "resume, cut",
    );
    assert!(proxy.cuts() > cuts, "the APPE went through the proxy");
    assert_eq!(
        hash_file(&root.join("old-big.bin")),
        old_big,
        "resume: old content"
    );

    // Space again: --resume completes both.
    proxy.cut(0);
    let o = put(&big, &url("old-big.bin"), &["--resume"]);
    assert_ok(&o, "resume after the fault");
    assert_eq!(hash_file(&root.join("old-big.bin")), big_h);
    assert!(!root.join(".old-big.bin.ferry-part").exists());
    let o = put(&small, &url("new.bin"), &["--resume"]);
    assert_ok(&o, "small resume after the fault");
    assert_eq!(hash_file(&root.join("new.bin")), small_h);

    // A server without SIZE (502): not checked, not an error.
    proxy.refuse_size(true);
    let o = put(&small, &url("nosize.bin"), &[]);
    assert_ok(&o, "SIZE refused");
    assert_eq!(hash_file(&root.join("nosize.bin")), small_h);
    assert!(proxy.sizes_refused() > 0, "no SIZE was asked");
}
