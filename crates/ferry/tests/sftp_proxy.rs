//! End-to-end tests of `ferry cp` through jump hosts (`-J`, `ProxyJump`),
//! through a `ProxyCommand`, and against sshd presenting an OpenSSH host
//! certificate (`@cert-authority` in known_hosts).
//!
//! Every peer is a real OpenSSH sshd on 127.0.0.1 started by the harness
//! (`common::Sshd`); every transferred byte is checked by blake3; timings
//! are never asserted. That a connection really went through the jump host
//! is read from the jump sshd's log (one "Accepted publickey" per
//! connection it authenticated).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use tempfile::TempDir;

// ===========================================================================
// a jump host and a target
// ===========================================================================

/// Two sshds, `jump` and `target`, and an ssh_config naming them:
///
/// - `jump`: the jump sshd, its own key and known_hosts;
/// - `badjump`: the jump sshd with the target's key (which it refuses);
/// - `target`: the target, direct;
/// - `via-jump`, `via-chain` (`ProxyJump jump,jump`), `via-none`
///   (`ProxyJump none` before a block that would say `jump`), `via-nc`,
///   `via-ssh` (`ProxyCommand ssh -W`), `via-false` (a command that fails):
///   the target, reached that way.
struct Net {
    jump: Sshd,
    target: Sshd,
    dir: TempDir,
}

impl Net {
    fn start() -> Net {
        let net = Net {
            jump: Sshd::start(),
            target: Sshd::start(),
            dir: tempdir(),
        };
        net.jump.write_known_hosts(&net.jump_known_hosts());
        net.target.write_known_hosts(&net.target_known_hosts());
        net.write_config(&[]);
        net
    }

    fn cfg(&self) -> PathBuf {
        self.dir.path().join("ssh_config")
    }
    fn jump_known_hosts(&self) -> PathBuf {
        self.dir.path().join("jump_known_hosts")
    }
    fn target_known_hosts(&self) -> PathBuf {
        self.dir.path().join("target_known_hosts")
    }

    /// Write the config, with `extra` blocks first (first value wins).
    fn write_config(&self, extra: &[&str]) {
        let text = format!(
            "{extra}\
             Host jump\n\
             \x20   HostName 127.0.0.1\n\
             \x20   Port {jp}\n\
             \x20   IdentityFile {jkey}\n\
             \x20   UserKnownHostsFile {jkh}\n\
             Host badjump\n\
             \x20   HostName 127.0.0.1\n\
             \x20   Port {jp}\n\
             \x20   IdentityFile {tkey}\n\
             \x20   UserKnownHostsFile {jkh}\n\
             Host via-jump\n\
             \x20   ProxyJump jump\n\
             Host via-chain\n\
             \x20   ProxyJump jump,jump\n\
             Host via-none\n\
             \x20   ProxyJump none\n\
             Host via-none\n\
             \x20   ProxyJump jump\n\
             Host via-nc\n\
             \x20   ProxyCommand nc %h %p\n\
             Host via-ssh\n\
             \x20   ProxyCommand ssh -F {cfg} -o BatchMode=yes -W %h:%p jump\n\
             Host via-false\n\
             \x20   ProxyCommand false\n\
             Host target via-*\n\
             \x20   HostName 127.0.0.1\n\
             \x20   Port {tp}\n\
             \x20   IdentityFile {tkey}\n\
             \x20   UserKnownHostsFile {tkh}\n\
             Host *\n\
             \x20   User {user}\n\
             \x20   IdentitiesOnly yes\n\
             \x20   StrictHostKeyChecking yes\n\
             \x20   GlobalKnownHostsFile /dev/null\n",
            extra = extra.concat(),
            jp = self.jump.port(),
            tp = self.target.port(),
            jkey = self.jump.key_ed25519().display(),
            tkey = self.target.key_ed25519().display(),
            jkh = self.jump_known_hosts().display(),
            tkh = self.target_known_hosts().display(),
            cfg = self.cfg().display(),
            user = self.target.user(),
        );
        write(&self.cfg(), text.as_bytes());
    }

    /// `ferry cp -q -F cfg ARGS...` with HOME = the target's directory.
    fn cp<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        let mut a = args!["cp", "-q", "-F", self.cfg()];
        a.extend(args.iter().map(|x| x.as_ref().to_owned()));
        ferry_in(self.target.dir(), &a, &[])
    }

    /// `sftp://HOST/abs/path`.
    fn url(&self, host: &str, path: &Path) -> String {
        format!("sftp://{host}{}", path.display())
    }

    /// Connections the jump sshd has authenticated so far.
    fn jump_logins(&self) -> usize {
        self.jump.log().matches("Accepted publickey").count()
    }
    fn target_logins(&self) -> usize {
        self.target.log().matches("Accepted publickey").count()
    }

    fn assert_ok(&self, o: &Output, ctx: &str) {
        if !o.status.success() {
            panic!(
                "{ctx}: ferry failed\n{}\n--- jump sshd ---\n{}\n--- target sshd ---\n{}",
                describe(o),
                self.jump.log_tail(),
                self.target.log_tail()
            );
        }
    }
}

fn has_nc() -> bool {
    std::process::Command::new("sh")
        .args(["-c", "command -v nc"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn dash_j_download_and_upload_go_through_the_jump_host() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    let h = make_file(&rem.join("down.bin"), 3_000_000, 1);
    let before = net.jump_logins();
    let o = net.cp(&args![
        "-J",
        "jump",
        net.url("target", &rem.join("down.bin")),
        local.join("down.bin")
    ]);
    net.assert_ok(&o, "download -J jump");
    assert_file_hash(&local.join("down.bin"), &h, "download through the jump");
    assert_eq!(net.jump_logins(), before + 1, "one connection via the jump");

    let h2 = make_file(&local.join("up.bin"), 2_500_000, 2);
    let o = net.cp(&args![
        "-J",
        "jump",
        local.join("up.bin"),
        net.url("target", &rem.join("up.bin"))
    ]);
    net.assert_ok(&o, "upload -J jump");
    assert_file_hash(&rem.join("up.bin"), &h2, "upload through the jump");
    assert_eq!(net.jump_logins(), before + 2);
}

#[test]
fn proxyjump_in_config_and_a_chain_of_two_jumps() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    let h = make_file(&rem.join("f.bin"), 1_000_000, 3);
    let before = net.jump_logins();
    let o = net.cp(&args![
        net.url("via-jump", &rem.join("f.bin")),
        local.join("a.bin")
    ]);
    net.assert_ok(&o, "ProxyJump jump in the config");
    assert_file_hash(&local.join("a.bin"), &h, "via ProxyJump");
    assert_eq!(net.jump_logins(), before + 1);

    // jump, then (over a channel of it) jump again, then the target.
    let o = net.cp(&args![
        net.url("via-chain", &rem.join("f.bin")),
        local.join("b.bin")
    ]);
    net.assert_ok(&o, "ProxyJump jump,jump");
    assert_file_hash(&local.join("b.bin"), &h, "via a chain of two");
    assert_eq!(
        net.jump_logins(),
        before + 3,
        "two more logins on the jump sshd"
    );

    // The same chain with -J.
    let o = net.cp(&args![
        "-J",
        "jump,jump",
        net.url("target", &rem.join("f.bin")),
        local.join("c.bin")
    ]);
    net.assert_ok(&o, "-J jump,jump");
    assert_file_hash(&local.join("c.bin"), &h, "-J chain");
    assert_eq!(net.jump_logins(), before + 5);
}

/// Connections that came up (`--json` "streams") and logins on each sshd:
/// every connection to the target has a jump connection of its own. (An
/// extra connection still shaking hands when the copy ends is dropped, so
/// the counts are compared, not fixed at 4.)
fn assert_all_through_the_jump(net: &Net, o: &Output, jump_before: usize, target_before: usize) {
    let streams: usize = json_field(o, "streams").parse().unwrap();
    let (jd, td) = (
        net.jump_logins() - jump_before,
        net.target_logins() - target_before,
    );
    assert!(
        streams >= 2,
        "the split file used {streams} connection(s): {}",
        describe(o)
    );
    assert!(
        td >= streams,
        "{td} target logins for {streams} connections"
    );
    assert!(
        jd >= td,
        "{td} connections to the target but only {jd} through the jump"
    );
}

#[test]
fn every_stream_goes_through_the_jump_host() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    // Large enough to be split into ranges over the connections.
    let h = make_file(&local.join("big.bin"), 68_000_000, 4);
    let (jb, tb) = (net.jump_logins(), net.target_logins());
    let o = net.cp(&args![
        "--streams",
        "4",
        "--json",
        local.join("big.bin"),
        net.url("via-jump", &rem.join("big.bin"))
    ]);
    net.assert_ok(&o, "--streams 4 via the jump");
    assert_file_hash(&rem.join("big.bin"), &h, "4 streams through the jump");
    assert_all_through_the_jump(&net, &o, jb, tb);

    let (jb, tb) = (net.jump_logins(), net.target_logins());
    let o = net.cp(&args![
        "--streams",
        "4",
        "--json",
        "-J",
        "jump",
        net.url("target", &rem.join("big.bin")),
        local.join("down.bin")
    ]);
    net.assert_ok(&o, "download --streams 4 -J jump");
    assert_file_hash(&local.join("down.bin"), &h, "download, 4 streams");
    assert_all_through_the_jump(&net, &o, jb, tb);
}

#[test]
fn jump_host_with_unknown_or_changed_key_is_refused_and_named() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    make_file(&rem.join("f.bin"), 1000, 6);

    write(&net.jump_known_hosts(), b"");
    let o = net.cp(&args![
        "-J",
        "jump",
        net.url("target", &rem.join("f.bin")),
        &local
    ]);
    assert_code(&o, 3, "unknown jump host key");
    let err = stderr_text(&o);
    assert!(
        err.contains("jump host jump (127.0.0.1:") && err.contains(&net.jump.host_pattern()),
        "the message names the jump host: {err}"
    );
    assert!(list_dir(&local).is_empty(), "{:?}", list_dir(&local));

    net.jump.write_wrong_known_hosts(&net.jump_known_hosts());
    let o = net.cp(&args![net.url("via-jump", &rem.join("f.bin")), &local]);
    assert_code(&o, 3, "changed jump host key");
    let err = stderr_text(&o);
    assert!(
        err.contains("jump host jump") && err.contains("REMOTE HOST IDENTIFICATION HAS CHANGED"),
        "{err}"
    );
    assert!(list_dir(&local).is_empty());
}

#[test]
fn target_key_is_checked_under_the_target_name_not_the_jump_host_name() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    make_file(&rem.join("f.bin"), 1000, 7);
    // The target's real key, but recorded under the jump host's name.
    let line = format!(
        "{} {}\n",
        net.jump.host_pattern(),
        net.target.host_public_key()
    );
    write(&net.target_known_hosts(), line.as_bytes());
    let o = net.cp(&args![
        "-J",
        "jump",
        net.url("target", &rem.join("f.bin")),
        &local
    ]);
    assert_code(&o, 3, "target key under the jump host's name only");
    let err = stderr_text(&o);
    assert!(err.contains(&net.target.host_pattern()), "{err}");
    assert!(
        !err.contains("jump host"),
        "the jump host was fine; the target failed: {err}"
    );
    assert!(list_dir(&local).is_empty());
}

#[test]
fn jump_host_uses_its_own_identity_and_its_failures_name_it() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    make_file(&rem.join("f.bin"), 1000, 8);
    // badjump offers the target's key, which the jump sshd does not know;
    // -i for the target is not handed to the jump host (as with ssh -J).
    let o = net.cp(&args![
        "-i",
        net.jump.key_ed25519(),
        "-J",
        "badjump",
        net.url("target", &rem.join("f.bin")),
        &local
    ]);
    assert_code(&o, 3, "jump host refuses the key");
    let err = stderr_text(&o);
    assert!(
        err.contains("jump host badjump (127.0.0.1:")
            && err.contains("permission denied")
            && err.contains("IdentityFile in its Host block"),
        "{err}"
    );

    // The first of two hops fails: it is the one named, not the second.
    let o = net.cp(&args![
        "-J",
        "badjump,jump",
        net.url("target", &rem.join("f.bin")),
        &local
    ]);
    assert_code(&o, 3, "first hop of two refuses the key");
    let err = stderr_text(&o);
    assert!(
        err.contains("jump host badjump (") && !err.contains("jump host jump ("),
        "{err}"
    );

    // A jump host that is not there: a network failure, named.
    let port = free_port();
    let o = net.cp(&args![
        "-J",
        format!("127.0.0.1:{port}"),
        net.url("target", &rem.join("f.bin")),
        &local
    ]);
    assert_code(&o, 1, "jump host down");
    let err = stderr_text(&o);
    assert!(
        err.contains(&format!("jump host 127.0.0.1:{port}")),
        "{err}"
    );

    // A hop that does not parse is a usage error, not a direct connection.
    let o = net.cp(&args![
        "-J",
        "jump:notaport",
        net.url("target", &rem.join("f.bin")),
        &local
    ]);
    assert_code(&o, 2, "bad -J");
    assert!(
        stderr_text(&o).contains("jump:notaport"),
        "{}",
        describe(&o)
    );
    assert!(list_dir(&local).is_empty());
}

#[test]
fn jump_host_that_refuses_forwarding_says_what_to_check() {
    let mut net = Net::start();
    net.jump.set_sshd_options(&["AllowTcpForwarding no"]);
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    make_file(&rem.join("f.bin"), 1000, 15);
    let o = net.cp(&args![
        "-J",
        "jump",
        net.url("target", &rem.join("f.bin")),
        &local
    ]);
    assert_code(&o, 1, "direct-tcpip refused");
    let err = stderr_text(&o);
    assert!(
        err.contains("jump host jump (")
            && err.contains(&format!("127.0.0.1:{}", net.target.port()))
            && err.contains("AllowTcpForwarding"),
        "{err}"
    );
    assert!(list_dir(&local).is_empty());
}

#[test]
fn proxyjump_loop_is_refused_before_connecting() {
    let dir = tempdir();
    let cfg = dir.path().join("ssh_config");
    write(&cfg, b"Host a\n    ProxyJump b\nHost b\n    ProxyJump a\n");
    let local = dir.path().join("local");
    fs::create_dir(&local).unwrap();
    let o = ferry_in(
        dir.path(),
        &args!["cp", "-q", "-F", &cfg, "sftp://a/f", &local],
        &[],
    );
    assert_code(&o, 2, "ProxyJump a -> b -> a");
    let err = stderr_text(&o);
    assert!(err.contains("ProxyJump loop"), "{err}");
}

#[test]
fn proxyjump_none_and_dash_j_beating_proxycommand() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    let h = make_file(&rem.join("f.bin"), 100_000, 9);
    let before = net.jump_logins();
    let o = net.cp(&args![
        net.url("via-none", &rem.join("f.bin")),
        local.join("a.bin")
    ]);
    net.assert_ok(&o, "ProxyJump none comes first");
    assert_file_hash(&local.join("a.bin"), &h, "ProxyJump none");
    assert_eq!(net.jump_logins(), before, "no jump for ProxyJump none");

    // via-false has `ProxyCommand false`; -J replaces it, as with ssh -J.
    let o = net.cp(&args![
        "-J",
        "jump",
        net.url("via-false", &rem.join("f.bin")),
        local.join("b.bin")
    ]);
    net.assert_ok(&o, "-J beats ProxyCommand");
    assert_file_hash(&local.join("b.bin"), &h, "-J over ProxyCommand");
    assert_eq!(net.jump_logins(), before + 1);
}

// ===========================================================================
// ProxyCommand
// ===========================================================================

#[test]
fn proxycommand_nc_download_and_upload() {
    if !has_nc() {
        eprintln!("SKIP: nc is not installed (scripts/install-peers.sh installs netcat-openbsd)");
        return;
    }
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    let h = make_file(&rem.join("down.bin"), 2_000_000, 10);
    let o = net.cp(&args![net.url("via-nc", &rem.join("down.bin")), &local]);
    net.assert_ok(&o, "ProxyCommand nc %h %p, download");
    assert_file_hash(&local.join("down.bin"), &h, "download over nc");
    let h2 = make_file(&local.join("up.bin"), 1_500_000, 11);
    let o = net.cp(&args![
        "--streams",
        "2",
        local.join("up.bin"),
        net.url("via-nc", &rem.join("up.bin"))
    ]);
    net.assert_ok(&o, "ProxyCommand nc %h %p, upload, 2 streams");
    assert_file_hash(&rem.join("up.bin"), &h2, "upload over nc");
}

#[test]
fn proxycommand_ssh_dash_w_through_the_jump_host() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    let h = make_file(&rem.join("f.bin"), 1_000_000, 12);
    let before = net.jump_logins();
    let o = net.cp(&args![net.url("via-ssh", &rem.join("f.bin")), &local]);
    net.assert_ok(&o, "ProxyCommand ssh -W %h:%p jump");
    assert_file_hash(&local.join("f.bin"), &h, "over ssh -W");
    assert_eq!(
        net.jump_logins(),
        before + 1,
        "OpenSSH's ssh went through the jump"
    );
}

#[test]
fn proxycommand_that_fails_says_so_and_is_reaped() {
    let net = Net::start();
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    make_file(&rem.join("f.bin"), 1000, 13);
    let o = net.cp(&args![net.url("via-false", &rem.join("f.bin")), &local]);
    assert_code(&o, 1, "ProxyCommand false");
    let err = stderr_text(&o);
    assert!(
        err.contains("ProxyCommand \"false\" exited"),
        "the message names the command and says it exited: {err}"
    );
    assert!(list_dir(&local).is_empty());

    // Each command records its PID (exec keeps it); none is left running
    // once ferry is done.
    if !has_nc() {
        eprintln!("SKIP (reaping part): nc is not installed");
        return;
    }
    let pids = net.dir.path().join("pids");
    let block = format!(
        "Host via-pid\n    ProxyCommand sh -c 'echo $$ >> {}; exec nc %h %p'\n",
        pids.display()
    );
    net.write_config(&[&block]);
    let h = make_file(&local.join("up.bin"), 500_000, 14);
    let o = net.cp(&args![
        local.join("up.bin"),
        net.url("via-pid", &rem.join("up.bin"))
    ]);
    net.assert_ok(&o, "ProxyCommand recording its PID");
    assert_file_hash(
        &rem.join("up.bin"),
        &h,
        "upload over the PID-recording command",
    );
    let text = fs::read_to_string(&pids).unwrap();
    let pids: Vec<u32> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(pids.len(), 1, "one command for the one connection: {text}");
    for pid in pids {
        assert!(!pid_alive(pid), "ProxyCommand {pid} still running");
    }
}

// ===========================================================================
// host certificates
// ===========================================================================

/// A target sshd presenting a host certificate for 127.0.0.1 from a CA in
/// its directory, known_hosts holding only `known_hosts` (written by the
/// caller), and a file to fetch.
struct CertHost {
    sshd: Sshd,
    ca_pub: String,
    rem: PathBuf,
    local: PathBuf,
    hash: blake3::Hash,
}

impl CertHost {
    fn start(principals: &str, validity: &str) -> CertHost {
        let mut sshd = Sshd::start();
        let ca = sshd.dir().join("host_ca");
        let ca_pub = new_ed25519_key(&ca);
        sshd.use_host_certificate(&ca, principals, validity);
        let rem = sshd.mkdir("remote");
        let local = sshd.mkdir("local");
        let hash = make_file(&rem.join("f.bin"), 300_000, 20);
        CertHost {
            sshd,
            ca_pub,
            rem,
            local,
            hash,
        }
    }

    /// `@cert-authority [127.0.0.1]:PORT <ca>` and any `more` lines.
    fn trust(&self, more: &str) {
        let line = format!(
            "@cert-authority {} {}\n{more}",
            self.sshd.host_pattern(),
            self.ca_pub
        );
        write(&self.sshd.known_hosts(), line.as_bytes());
    }

    fn fetch(&self, extra: &[&str]) -> Output {
        let mut a: Vec<OsString> = extra.iter().map(OsString::from).collect();
        a.extend(args![self.sshd.url(self.rem.join("f.bin")), &self.local]);
        self.sshd.cp(&a)
    }

    fn refused(&self, o: &Output, ctx: &str, want: &str) {
        self.sshd.assert_code(o, 3, ctx);
        let err = stderr_text(o);
        assert!(err.contains(want), "{ctx}: want {want:?} in: {err}");
        assert!(
            list_dir(&self.local).is_empty(),
            "{ctx}: {:?}",
            list_dir(&self.local)
        );
    }
}

#[test]
fn host_certificate_from_a_trusted_ca_is_accepted() {
    let c = CertHost::start("127.0.0.1", "always:forever");
    c.trust("");
    let o = c.fetch(&[]);
    c.sshd.assert_ok(&o, "@cert-authority only");
    // known_hosts has no plain key and StrictHostKeyChecking is yes: only
    // the certificate can have been accepted.
    assert_file_hash(&c.local.join("f.bin"), &c.hash, "host certificate");
    // A wildcard pattern covers [127.0.0.1]:PORT too.
    fs::remove_file(c.local.join("f.bin")).unwrap();
    write(
        &c.sshd.known_hosts(),
        format!("@cert-authority * {}\n", c.ca_pub).as_bytes(),
    );
    let o = c.fetch(&[]);
    c.sshd.assert_ok(&o, "@cert-authority *");
    assert_file_hash(&c.local.join("f.bin"), &c.hash, "wildcard CA line");
}

#[test]
fn host_certificate_from_another_ca_or_for_another_host_pattern_is_refused() {
    let c = CertHost::start("127.0.0.1", "always:forever");
    let other = new_ed25519_key(&c.sshd.dir().join("other_ca"));
    write(
        &c.sshd.known_hosts(),
        format!("@cert-authority {} {other}\n", c.sshd.host_pattern()).as_bytes(),
    );
    let o = c.fetch(&[]);
    c.refused(&o, "wrong CA", "no @cert-authority line");
    assert!(
        stderr_text(&o).contains("name other CAs"),
        "{}",
        describe(&o)
    );

    // The right CA, but its line is for another port.
    write(
        &c.sshd.known_hosts(),
        format!("@cert-authority [127.0.0.1]:1 {}\n", c.ca_pub).as_bytes(),
    );
    let o = c.fetch(&[]);
    c.refused(&o, "CA line for another host", "no @cert-authority line");
    assert!(
        stderr_text(&o).contains("not accepted either"),
        "the plain-key fallback is reported too: {}",
        describe(&o)
    );
}

#[test]
fn host_certificate_for_another_principal_is_refused() {
    let c = CertHost::start("db.example.com,10.0.0.1", "always:forever");
    c.trust("");
    let o = c.fetch(&[]);
    c.refused(&o, "principal mismatch", "not for \"127.0.0.1\"");
}

#[test]
fn expired_host_certificate_is_refused() {
    let c = CertHost::start("127.0.0.1", "20200101:20200102");
    c.trust("");
    let o = c.fetch(&[]);
    c.refused(&o, "expired certificate", "expired on 2020-01-02");
}

#[test]
fn revoked_ca_or_revoked_host_key_refuses_the_certificate() {
    let c = CertHost::start("127.0.0.1", "always:forever");
    c.trust(&format!("@revoked * {}\n", c.ca_pub));
    let o = c.fetch(&[]);
    c.refused(&o, "@revoked CA", "its CA is marked as revoked");

    // The certified host key itself revoked.
    c.trust(&format!("@revoked * {}\n", c.sshd.host_public_key()));
    let o = c.fetch(&[]);
    c.refused(
        &o,
        "@revoked host key",
        "the host key it certifies is marked as revoked",
    );
}

#[test]
fn untrusted_host_certificate_falls_back_to_the_plain_known_key() {
    // As ssh does: no CA vouches for it, but the key inside it is known.
    let c = CertHost::start("127.0.0.1", "always:forever");
    write(&c.sshd.known_hosts(), c.sshd.known_hosts_line().as_bytes());
    let o = c.fetch(&[]);
    c.sshd
        .assert_ok(&o, "plain key line, certificate presented");
    assert_file_hash(&c.local.join("f.bin"), &c.hash, "fallback to the plain key");
}

#[test]
fn host_certificate_of_the_target_through_a_jump_host() {
    let mut net = Net::start();
    let ca = net.dir.path().join("host_ca");
    let ca_pub = new_ed25519_key(&ca);
    net.target
        .use_host_certificate(&ca, "127.0.0.1", "always:forever");
    write(
        &net.target_known_hosts(),
        format!("@cert-authority {} {ca_pub}\n", net.target.host_pattern()).as_bytes(),
    );
    let rem = net.target.mkdir("remote");
    let local = net.target.mkdir("local");
    let h = make_file(&rem.join("f.bin"), 200_000, 21);
    let o = net.cp(&args![net.url("via-jump", &rem.join("f.bin")), &local]);
    net.assert_ok(&o, "certificate of the target, via the jump");
    assert_file_hash(&local.join("f.bin"), &h, "cert via jump");
}

// ===========================================================================
// user certificates
// ===========================================================================

/// An sshd trusting a user CA (`TrustedUserCAKeys`), and a user key that is
/// NOT in authorized_keys, certified by that CA for the test user as
/// `KEY-cert.pub`: only the certificate can log in with it.
struct UserCert {
    sshd: Sshd,
    key: PathBuf,
    rem: PathBuf,
    local: PathBuf,
    hash: blake3::Hash,
}

impl UserCert {
    fn start() -> UserCert {
        let mut sshd = Sshd::start();
        let ca = sshd.dir().join("user_ca");
        new_ed25519_key(&ca);
        let line = format!("TrustedUserCAKeys {}.pub", ca.display());
        sshd.set_sshd_options(&[&line]);
        let key = sshd.dir().join("certified_key");
        new_ed25519_key(&key);
        run_checked(
            std::process::Command::new("ssh-keygen")
                .arg("-q")
                .arg("-s")
                .arg(&ca)
                .args(["-I", "ferry-test-user", "-n", sshd.user()])
                .arg(format!("{}.pub", key.display())),
        );
        let rem = sshd.mkdir("remote");
        let local = sshd.mkdir("local");
        let hash = make_file(&rem.join("f.bin"), 200_000, 30);
        UserCert {
            sshd,
            key,
            rem,
            local,
            hash,
        }
    }

    /// `ferry cp -i KEY -o IdentitiesOnly=yes ... sftp://127.0.0.1:PORT/...`
    fn fetch(&self, extra: &[OsString]) -> Output {
        let mut a = args!["cp", "-q"];
        a.extend(self.sshd.direct_opts(&self.key));
        a.extend(extra.iter().cloned());
        a.extend(args![self.sshd.url_ip(self.rem.join("f.bin")), &self.local]);
        self.sshd.ferry(&a)
    }
}

#[test]
fn user_certificate_beside_the_key_logs_in() {
    let u = UserCert::start();
    let o = u.fetch(&[]);
    u.sshd.assert_ok(&o, "-i KEY with KEY-cert.pub beside it");
    assert_file_hash(&u.local.join("f.bin"), &u.hash, "user certificate");
    assert!(
        u.sshd.log().contains("ID ferry-test-user"),
        "sshd did not log the certificate: {}",
        u.sshd.log_tail()
    );
}

#[test]
fn user_certificate_from_certificatefile_and_without_one_refused() {
    let u = UserCert::start();
    let cert = u.sshd.dir().join("certified_key-cert.pub");
    let moved = u.sshd.dir().join("elsewhere.pub");
    fs::rename(&cert, &moved).unwrap();
    // Without the certificate the key alone is not authorized.
    let o = u.fetch(&[]);
    u.sshd.assert_code(&o, 3, "key without its certificate");
    assert!(list_dir(&u.local).is_empty());
    let o = u.fetch(&args!["-o", format!("CertificateFile={}", moved.display())]);
    u.sshd.assert_ok(&o, "-o CertificateFile=...");
    assert_file_hash(&u.local.join("f.bin"), &u.hash, "CertificateFile");
}

#[test]
fn user_certificate_held_by_the_agent_logs_in() {
    let u = UserCert::start();
    let agent = Agent::start();
    agent.add(&u.key); // also loads certified_key-cert.pub
                       // No -i: the agent holds the key (not authorized on its own) and its
                       // certificate (authorized through TrustedUserCAKeys).
    let mut a = args!["cp", "-q"];
    a.extend(u.sshd.known_hosts_opts());
    a.extend(args![u.sshd.url_ip(u.rem.join("f.bin")), &u.local]);
    let o = u.sshd.ferry_env(&a, &[("SSH_AUTH_SOCK", &agent.sock())]);
    u.sshd.assert_ok(&o, "certificate held by ssh-agent");
    assert_file_hash(&u.local.join("f.bin"), &u.hash, "agent certificate");
    assert!(
        u.sshd.log().contains("ID ferry-test-user"),
        "sshd did not log the certificate: {}",
        u.sshd.log_tail()
    );
}

// ===========================================================================
// ConnectTimeout
// ===========================================================================

/// A loopback port that completes TCP handshakes (the kernel's backlog)
/// but never speaks: an SSH server that hangs before its banner.
fn silent_port() -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

#[test]
fn connect_timeout_bounds_the_handshake_direct_and_through_a_jump() {
    let net = Net::start();
    let (_silent, port) = silent_port();
    net.write_config(&[&format!(
        "Host silent silent-via-jump\n\
         \x20   HostName 127.0.0.1\n\
         \x20   Port {port}\n\
         \x20   ConnectTimeout 1\n\
         Host silent-via-jump\n\
         \x20   ProxyJump jump\n"
    )]);
    let local = net.target.mkdir("local");
    for host in ["silent", "silent-via-jump"] {
        let o = net.cp(&args![format!("{host}:/x.bin"), &local]);
        assert_code(&o, 1, &format!("{host}: a server that never answers"));
        let e = stderr_text(&o);
        assert!(
            e.contains("ConnectTimeout") && e.contains(&port.to_string()),
            "{host}: the error does not name the timeout and the port:\n{}",
            describe(&o)
        );
    }
    assert!(list_dir(&local).is_empty());
}
