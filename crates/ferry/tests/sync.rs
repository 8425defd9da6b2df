//! `ferry sync`, `ferry check` and `ferry ls` against real servers on
//! 127.0.0.1: OpenSSH's sshd, ferry serve (which hashes files itself),
//! nginx (the HTTP read side; its `/forbidden/` makes a listing fail) and
//! vsftpd. What must hold for a user: a second run copies nothing; a
//! same-size change with the old mtime put back is found by --checksum
//! and not by default; --dry-run changes nothing; --delete never deletes
//! after an error; every byte right. No timing is asserted, but for an
//! upper bound where a hang is the failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::nginx::nginx_or_skip;
use common::serve::FerryServe;
use common::vsftpd::vsftpd_or_skip;
use common::*;
use ferry_bench::servers::VsftpdOptions;

/// `ferry sync --json -F CONFIG ARGS...` with sshd's config and home.
fn sync_sshd(sshd: &Sshd, args: &[OsString]) -> std::process::Output {
    let mut all = args!["sync", "--json", "-q", "-F", sshd.ssh_config()];
    all.extend(args.iter().cloned());
    ferry_in(sshd.dir(), &all, &[])
}

/// `ferry CMD` with ferry serve's key and known_hosts.
fn with_serve(serve: &FerryServe, cmd: &str, args: &[OsString]) -> std::process::Output {
    let mut all = args![cmd];
    all.extend(serve.ferry_opts_with(&serve.key()));
    all.extend(args.iter().cloned());
    ferry_in(&serve.home(), &all, &[])
}

fn field(o: &std::process::Output, k: &str) -> u64 {
    json_field(o, k)
        .parse()
        .unwrap_or_else(|_| panic!("{k}: {}", describe(o)))
}

/// Same size, new bytes, the old modification time put back.
fn change_keeping_size_and_time(p: &Path) {
    let meta = fs::metadata(p).unwrap();
    let mtime = meta.modified().unwrap();
    let mut data = fs::read(p).unwrap();
    assert!(!data.is_empty());
    for b in data.iter_mut().take(16) {
        *b ^= 0x5a;
    }
    fs::write(p, &data).unwrap();
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_modified(mtime).unwrap();
}

#[test]
fn sync_to_sshd_twice_then_checksum_finds_the_change() {
    let sshd = Sshd::start();
    let work = tempdir();
    let src = work.path().join("src");
    let files = make_odd_tree(&src, 21);
    let dst = sshd.mkdir("sync-dst");

    let out = sync_sshd(&sshd, &args![&src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "first sync");
    assert_eq!(field(&out, "copied"), files as u64);
    assert_same_tree(
        &src,
        &dst,
        Cmp {
            modes: false,
            mtimes: true,
        },
        "first sync",
    );
    assert!(part_files(&dst).is_empty());

    let out = sync_sshd(&sshd, &args![&src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "second sync");
    assert_eq!(field(&out, "copied"), 0, "{}", describe(&out));
    assert_eq!(field(&out, "same"), files as u64);

    // Same size and time, other bytes: only --checksum sees it.
    let changed = src.join("nested/a.bin");
    change_keeping_size_and_time(&changed);
    let out = sync_sshd(&sshd, &args![&src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "default compare");
    assert_eq!(field(&out, "copied"), 0);
    let out = sync_sshd(&sshd, &args!["--checksum", &src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "--checksum");
    assert_eq!(field(&out, "copied"), 1, "{}", describe(&out));
    assert_eq!(
        fs::read(&changed).unwrap(),
        fs::read(dst.join("nested/a.bin")).unwrap()
    );
    // OpenSSH's sftp-server cannot hash, but sshd runs sha256sum (or
    // b3sum) on an exec channel: nothing is read through the link.
    assert_eq!(field(&out, "hashed_by_reading"), 0, "{}", describe(&out));
    assert!(
        !stderr_text(&out).contains("reading them"),
        "{}",
        describe(&out)
    );

    // A name with a space and a single quote, and -v says how files are
    // hashed.
    let quoted = src.join("it's \"quoted\"");
    change_keeping_size_and_time(&quoted);
    let mut a = args!["check", "-v", "-c", "-F", sshd.ssh_config()];
    a.extend(args![&src, sshd.url(&dst)]);
    let out = ferry_in(sshd.dir(), &a, &[]);
    assert_code(&out, 1, "check -c finds the change");
    assert!(
        stdout_text(&out).contains("differs (hash): it's \"quoted\""),
        "{}",
        describe(&out)
    );
    let err = stderr_text(&out);
    assert!(
        err.contains("hashed on the server by") && err.contains("over SSH exec channels"),
        "{err}"
    );
    assert!(!err.contains("reading them"), "{err}");
    assert!(!err.contains("not hashed on the server"), "{err}");

    // sshd that runs only SFTP (ForceCommand internal-sftp): the files are
    // read to hash them, and ferry says so; never a fallback to sizes.
    let mut sshd = sshd;
    sshd.set_sshd_options(&["ForceCommand internal-sftp"]);
    let out = sync_sshd(&sshd, &args!["--checksum", &src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "--checksum with ForceCommand internal-sftp");
    assert_eq!(field(&out, "copied"), 1, "{}", describe(&out));
    assert!(
        stderr_text(&out).contains("cannot hash files; reading them"),
        "{}",
        describe(&out)
    );
    assert!(field(&out, "hashed_by_reading") > 0);
    assert_eq!(
        fs::read(&quoted).unwrap(),
        fs::read(dst.join("it's \"quoted\"")).unwrap()
    );
}

/// A copy into a directory both sides have, and a deletion in one,
/// change the destination directory's time (the rename, the unlink):
/// the sync puts the source's back in the same run, not the next.
#[test]
fn copies_and_deletions_put_the_directory_time_back() {
    let sshd = Sshd::start();
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/a"), b"one").unwrap();
    fs::write(src.join("d/b"), b"two").unwrap();
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let set_time = |p: &Path| fs::File::open(p).unwrap().set_modified(old).unwrap();
    let time = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
    set_time(&src.join("d"));
    let dst = sshd.mkdir("dir-times");
    let out = sync_sshd(&sshd, &args![&src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "first sync");
    assert_eq!(time(&dst.join("d")), old);

    // A new size, written in place: src/d keeps its time.
    fs::write(src.join("d/a"), b"one more").unwrap();
    set_time(&src.join("d"));
    let out = sync_sshd(&sshd, &args![&src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "a copy into d");
    assert_eq!(field(&out, "copied"), 1, "{}", describe(&out));
    assert_eq!(time(&dst.join("d")), old, "after a copy into it");

    fs::write(dst.join("d/extra"), b"x").unwrap();
    set_time(&dst.join("d"));
    let out = sync_sshd(&sshd, &args!["--delete", &src, sshd.url(&dst)]);
    sshd.assert_ok(&out, "a deletion in d");
    assert_eq!(field(&out, "deleted"), 1, "{}", describe(&out));
    assert_eq!(time(&dst.join("d")), old, "after a deletion in it");
}

/// Executable `name` in `dir` running the shell script `body`.
fn fake_tool(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
}

/// sshd whose sessions find `bin` first in PATH; `None` (the test is
/// skipped) when this sshd is too old for `SetEnv`.
fn sshd_with_path_first(bin: &Path) -> Option<Sshd> {
    let mut sshd = Sshd::start();
    let path = format!("PATH={}:/usr/local/bin:/usr/bin:/bin", bin.display());
    if !sshd.set_sshd_env(&[&path]) {
        eprintln!("skipped: this sshd has no SetEnv");
        return None;
    }
    Some(sshd)
}

/// `ferry check -v -c ARGS... SRC DST` against sshd.
fn check_sshd(sshd: &Sshd, args: &[OsString], src: &Path, dst: &Path) -> std::process::Output {
    let mut a = args!["check", "-v", "-c", "-F", sshd.ssh_config()];
    a.extend(args.iter().cloned());
    a.extend(args![src, sshd.url(dst)]);
    ferry_in(sshd.dir(), &a, &[])
}

#[test]
fn check_reads_files_whose_hash_command_hangs_on_the_server() {
    // A hash command that never answers (a stalled disk, a FIFO): each
    // file gets --timeout plus its size at 50 MB/s, then its channel is
    // closed (the command killed) and the file is read through the link.
    let work = tempdir();
    let bin = work.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let pids = work.path().join("pids");
    for tool in ["b3sum", "sha256sum"] {
        fake_tool(
            &bin,
            tool,
            &format!("echo $$ >> '{}'\nexec sleep 300\n", pids.display()),
        );
    }
    let Some(sshd) = sshd_with_path_first(&bin) else {
        return;
    };
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let dst = sshd.mkdir("hang-dst");
    for (name, len) in [("a.bin", 1000), ("b c.bin", 70_000)] {
        make_file(&src.join(name), len, len);
        fs::copy(src.join(name), dst.join(name)).unwrap();
    }

    let started = std::time::Instant::now();
    let out = check_sshd(&sshd, &args!["--timeout", "2"], &src, &dst);
    let took = started.elapsed();
    sshd.assert_ok(&out, "check -c with a hanging hash command");
    let err = stderr_text(&out);
    assert!(err.contains("over SSH exec channels"), "{err}");
    for name in ["a.bin", "b c.bin"] {
        assert!(
            err.lines().any(|l| l.contains(name)
                && l.contains("did not finish within 3 s")
                && l.contains("its channel is closed")
                && l.contains("reading it to hash it")),
            "{name}: {err}"
        );
    }
    // The commands sleep 300 s: ferry did not wait for them.
    assert!(took < Duration::from_secs(120), "took {took:?}: {err}");
    // ferry sent them a KILL signal. sshd delivers it for a user's
    // session, not for root's (no privilege separation after a root
    // login: "session signalling requires privilege separation"), so as
    // root the request in sshd's log is what can be checked.
    let listed = fs::read_to_string(&pids).unwrap_or_default();
    let started: Vec<u32> = listed.lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(started.len(), 2, "{listed}");
    let log = sshd.dir().join("sshd.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let signalled = || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        text.matches("session_signal_req").count() >= 2
    };
    while !(signalled() || started.iter().all(|&p| !pid_alive(p)))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let alive: Vec<u32> = started.iter().copied().filter(|&p| pid_alive(p)).collect();
    for &p in &alive {
        // Ours (the fake tool's sleep), as root: not left for 300 s.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
    }
    assert!(
        alive.is_empty() || (is_root() && signalled()),
        "still running: {alive:?}; sshd.log:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
}

#[test]
fn check_uses_b3sum_on_the_server_when_it_is_there() {
    // A b3sum that prints what the real one prints (BLAKE3 computed here):
    // BLAKE3 is chosen over sha256sum, and its hashes are compared with
    // ferry's own. One file's line has a wrong hash, so a match cannot
    // come from reading the files instead.
    let work = tempdir();
    let bin = work.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let log = work.path().join("b3sum.log");
    let dst = work.path().join("dst");
    fs::create_dir(&dst).unwrap();
    let mut cases = String::new();
    for (name, len) in [("a.bin", 0u64), ("with space.bin", 5000), ("liar.bin", 300)] {
        make_file(&src.join(name), len, len + 7);
        fs::copy(src.join(name), dst.join(name)).unwrap();
        let remote = dst.join(name);
        let hash = if name == "liar.bin" {
            hash_bytes(b"something else")
        } else {
            hash_file(&remote)
        };
        cases.push_str(&format!(
            "  '{p}') echo '{h}  {p}' ;;\n",
            p = remote.display(),
            h = hash.to_hex()
        ));
    }
    fake_tool(
        &bin,
        "b3sum",
        &format!(
            "echo \"$*\" >> '{log}'\n[ \"$1\" = -- ] || exit 2\ncase \"$2\" in\n{cases}  *) echo \"b3sum: $2: No such file\" >&2; exit 1 ;;\nesac\n",
            log = log.display()
        ),
    );
    let Some(sshd) = sshd_with_path_first(&bin) else {
        return;
    };

    let out = check_sshd(&sshd, &[], &src, &dst);
    assert_code(&out, 1, "check -c with b3sum on the server");
    let stdout = stdout_text(&out);
    assert!(
        stdout.contains("differs (hash): liar.bin"),
        "{}",
        describe(&out)
    );
    assert!(!stdout.contains("a.bin"), "{}", describe(&out));
    assert!(!stdout.contains("with space.bin"), "{}", describe(&out));
    let err = stderr_text(&out);
    assert!(
        err.contains("hashed on the server by b3sum or sha256sum"),
        "{err}"
    );
    assert!(!err.contains("not hashed on the server"), "{err}");
    let calls = fs::read_to_string(&log).unwrap();
    assert_eq!(calls.lines().count(), 3, "{calls}");
}

#[test]
fn sync_and_check_with_ferry_serve_hash_on_the_server() {
    let serve = FerryServe::start(&["--writable"]);
    let work = tempdir();
    let src = work.path().join("src");
    make_odd_tree(&src, 22);
    let url = serve.url("/mirror");
    let out = with_serve(&serve, "sync", &args![&src, &url]);
    assert_ok(&out, "first sync to ferry serve");
    assert_same_tree(
        &src,
        &serve.root().join("mirror"),
        Cmp::default(),
        "ferry serve",
    );

    let out = ferry_in(
        &serve.home(),
        &[
            vec![OsString::from("check")],
            serve.ferry_opts_with(&serve.key()).split_off(1),
            args!["--checksum", &src, &url],
        ]
        .concat(),
        &[],
    );
    assert_ok(&out, "check -c: the same");
    assert!(
        !stderr_text(&out).contains("reading them"),
        "ferry serve hashes on the server: {}",
        describe(&out)
    );
    assert!(
        stderr_text(&out).contains("compared by xxh128"),
        "{}",
        describe(&out)
    );

    // A change the sizes and times do not show, an extra file and a
    // missing one.
    change_keeping_size_and_time(&src.join("file with spaces.txt"));
    fs::write(serve.root().join("mirror/extra.txt"), b"x").unwrap();
    fs::remove_file(src.join("one byte")).unwrap();
    fs::write(src.join("new file"), b"new").unwrap();
    let out = with_serve(&serve, "check", &args!["-c", &src, &url]);
    assert_code(&out, 1, "check finds differences");
    let text = stdout_text(&out);
    assert!(
        text.contains("differs (hash): file with spaces.txt"),
        "{text}"
    );
    assert!(text.contains("only in DST: extra.txt"), "{text}");
    assert!(text.contains("only in DST: one byte"), "{text}");
    assert!(text.contains("only in SRC: new file"), "{text}");

    // --dry-run changes nothing.
    let before = tree_listing(&serve.root().join("mirror"));
    let out = with_serve(&serve, "sync", &args!["-n", "--delete", "-c", &src, &url]);
    assert_ok(&out, "dry run");
    assert_eq!(tree_listing(&serve.root().join("mirror")), before);
    let text = stdout_text(&out);
    assert!(text.contains("would delete: extra.txt"), "{text}");

    let out = with_serve(&serve, "sync", &args!["--delete", "-c", &src, &url]);
    assert_ok(&out, "sync --delete -c");
    assert_same_tree(
        &src,
        &serve.root().join("mirror"),
        Cmp::default(),
        "after --delete",
    );
    let out = with_serve(&serve, "check", &args!["-c", &src, &url]);
    assert_ok(&out, "check after sync");
}

/// Walk a tree into sorted (path, size) pairs.
fn tree_listing(root: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if m.is_dir() {
                todo.push(e.path());
            }
            out.push((rel, m.len()));
        }
    }
    out.sort();
    out
}

#[test]
fn sync_from_nginx_deletes_nothing_after_a_failed_listing() {
    let Some(nginx) = nginx_or_skip("sync_from_nginx_deletes_nothing_after_a_failed_listing")
    else {
        return;
    };
    let www = nginx.www();
    fs::create_dir_all(www.join("forbidden")).unwrap();
    fs::write(www.join("forbidden/secret"), b"s").unwrap();
    fs::create_dir_all(www.join("ok")).unwrap();
    let want = make_file(&www.join("ok/f.bin"), 300_000, 5);
    let work = tempdir();
    let dst = work.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    fs::write(dst.join("keep-me"), b"k").unwrap();
    let out = ferry(&args![
        "sync",
        "-q",
        "--delete",
        "--pin",
        nginx.pin(),
        nginx.https("/"),
        &dst
    ]);
    assert!(
        !out.status.success(),
        "a listing failed: {}",
        describe(&out)
    );
    let err = stderr_text(&out);
    assert!(err.contains("forbidden"), "{err}");
    assert!(err.contains("not deleting anything"), "{err}");
    assert!(dst.join("keep-me").exists(), "deleted after an error");
    assert_file_hash(&dst.join("ok/f.bin"), &want, "the rest was copied");

    // Leaving the forbidden part out, the run succeeds, a second run
    // copies nothing (Last-Modified against the kept mtimes), and the
    // extra file goes.
    let run = |extra: &[&str]| {
        // The harness's other protected locations are left out too.
        let mut a = args!["sync", "-q", "--json", "--pin", nginx.pin()];
        for p in ["/forbidden/", "/private/", "/bearer/"] {
            a.extend(args!["--exclude", p]);
        }
        a.extend(extra.iter().map(OsString::from));
        a.extend(args![nginx.https("/"), &dst]);
        ferry(&a)
    };
    let out = run(&["--delete"]);
    assert_ok(&out, "sync --delete with the forbidden part excluded");
    assert!(!dst.join("keep-me").exists());
    // The excluded directory is protected from --delete (as rsync's
    // excludes are); the failed run left it empty.
    assert!(!dst.join("forbidden/secret").exists());
    let out = run(&[]);
    assert_ok(&out, "second sync from nginx");
    assert_eq!(field(&out, "copied"), 0, "{}", describe(&out));
}

#[test]
fn sync_to_vsftpd_compares_by_size_and_says_so() {
    let Some(ftpd) = vsftpd_or_skip(
        "sync_to_vsftpd_compares_by_size_and_says_so",
        VsftpdOptions::default(),
    ) else {
        return;
    };
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d e")).unwrap();
    make_file(&src.join("a.bin"), 2 * 1024 * 1024, 1);
    make_file(&src.join("d e/b c.txt"), 1234, 2);
    fs::create_dir_all(ftpd.root().join("up")).unwrap();
    let url = ftpd.url("up/mirror/");
    let out = ferry(&args!["sync", "-q", "--json", &src, &url]);
    assert_ok(&out, "sync to vsftpd");
    assert_eq!(field(&out, "copied"), 2);
    assert!(
        stderr_text(&out).contains("cannot keep modification times"),
        "{}",
        describe(&out)
    );
    assert_same_tree(
        &src,
        &ftpd.root().join("up/mirror"),
        Cmp::default(),
        "vsftpd",
    );
    let out = ferry(&args!["sync", "-q", "--json", &src, &url]);
    assert_ok(&out, "second sync to vsftpd");
    assert_eq!(field(&out, "copied"), 0, "{}", describe(&out));

    // vsftpd has no HASH: -c reads its files to hash them, and says so.
    change_keeping_size_and_time(&src.join("d e/b c.txt"));
    let out = ferry(&args!["sync", "--json", "-c", &src, &url]);
    assert_ok(&out, "sync -c to vsftpd");
    assert_eq!(field(&out, "copied"), 1, "{}", describe(&out));
    assert!(field(&out, "hashed_by_reading") > 0, "{}", describe(&out));
    assert!(
        stderr_text(&out).contains("cannot hash files; reading them"),
        "{}",
        describe(&out)
    );
    assert_same_tree(
        &src,
        &ftpd.root().join("up/mirror"),
        Cmp::default(),
        "vsftpd after -c",
    );
}

/// `ferry CMD --ssl-reqd --pin CERT -u ferry:TOKEN ARGS...` against ferry
/// serve's FTP.
fn with_serve_ftp(serve: &FerryServe, cmd: &str, args: &[OsString]) -> std::process::Output {
    let mut all = args![
        cmd,
        "--ssl-reqd",
        "--pin",
        format!("sha256:{}", serve.cert_sha256),
        "-u",
        format!("ferry:{}", serve.token),
    ];
    all.extend(args.iter().cloned());
    ferry_in(&serve.home(), &all, &[])
}

/// A few odd names, small, an empty file and a nested one.
fn small_odd_tree(root: &Path) {
    fs::create_dir_all(root.join("nested/deeper")).unwrap();
    make_file(&root.join("file with spaces.txt"), 1000, 31);
    make_file(&root.join("it's \"quoted\""), 42, 32);
    make_file(&root.join("ünïcödé 日本.bin"), 12_345, 33);
    make_file(&root.join("-leading-dash"), 10, 34);
    make_file(&root.join("empty.dat"), 0, 35);
    make_file(&root.join("nested/a.bin"), 100_000, 36);
    make_file(&root.join("nested/deeper/b.bin"), 2 * 1024 * 1024 + 3, 37);
}

#[test]
fn check_and_sync_over_ftps_hash_with_ferry_serves_hash_command() {
    let serve = FerryServe::start_ftp(&["--writable"]);
    let work = tempdir();
    let src = work.path().join("src");
    small_odd_tree(&src);
    let url = serve.ftp_url("mirror/");
    let out = with_serve_ftp(&serve, "sync", &args!["-q", "--json", &src, &url]);
    assert_ok(&out, "first sync to ferry serve over FTPS");
    assert_eq!(field(&out, "copied"), 7, "{}", describe(&out));
    let out = with_serve_ftp(&serve, "check", &args!["-c", &src, &url]);
    assert_ok(&out, "check -c: the same");
    let err = stderr_text(&out);
    assert!(!err.contains("reading them"), "hashed on the server: {err}");
    assert!(err.contains("compared by blake3"), "{err}");

    // Same size, the old time: FTP compares by size (it cannot keep
    // times), so only -c finds it, with HASH, not by reading.
    change_keeping_size_and_time(&src.join("nested/a.bin"));
    change_keeping_size_and_time(&src.join("it's \"quoted\""));
    let out = with_serve_ftp(&serve, "check", &args!["-c", &src, &url]);
    assert_code(&out, 1, "check -c finds the changes");
    let text = stdout_text(&out);
    assert!(text.contains("differs (hash): nested/a.bin"), "{text}");
    assert!(text.contains("differs (hash): it's \"quoted\""), "{text}");
    assert!(
        !stderr_text(&out).contains("reading them"),
        "{}",
        describe(&out)
    );
    let out = with_serve_ftp(&serve, "sync", &args!["-q", "--json", "-c", &src, &url]);
    assert_ok(&out, "sync -c");
    assert_eq!(field(&out, "copied"), 2, "{}", describe(&out));
    assert_eq!(field(&out, "hashed_by_reading"), 0, "{}", describe(&out));
    assert_eq!(json_field(&out, "hash"), "blake3");
    assert_same_tree(
        &src,
        &serve.root().join("mirror"),
        Cmp::default(),
        "after sync -c",
    );
}

#[test]
fn sync_between_two_servers_and_filters() {
    let sshd = Sshd::start();
    let serve = FerryServe::start(&["--writable"]);
    let src = sshd.mkdir("r2r-sync");
    make_odd_tree(&src, 23);
    let work = tempdir();
    let config = serve.config_with_sshd(&sshd, work.path());
    let run = |extra: &[&str]| {
        let mut a = args!["sync", "-q", "--json", "-F", &config];
        a.extend(extra.iter().map(OsString::from));
        a.extend(args![sshd.url(&src), "sftp://ferry-serve/copy"]);
        ferry_in(work.path(), &a, &[])
    };
    let out = run(&[
        "--exclude",
        "many/",
        "--exclude",
        "*.txt",
        "--include",
        "one*",
    ]);
    assert_ok(&out, "sshd -> ferry serve with filters");
    let dst = serve.root().join("copy");
    assert!(!dst.join("many").exists(), "excluded directory");
    assert!(!dst.join("file with spaces.txt").exists(), "excluded *.txt");
    assert!(dst.join("ünïcödé 日本.bin").exists());
    assert!(dst.join("one byte").exists());
    let out = run(&[]);
    assert_ok(&out, "sshd -> ferry serve, everything");
    assert_same_tree(&src, &dst, Cmp::default(), "remote to remote sync");
    let out = run(&[]);
    assert_ok(&out, "second run");
    assert_eq!(field(&out, "copied"), 0, "{}", describe(&out));
}

#[test]
fn ls_lists_sshd_and_nginx() {
    let sshd = Sshd::start();
    let d = sshd.mkdir("ls-me");
    fs::create_dir_all(d.join("sub dir")).unwrap();
    make_file(&d.join("sub dir/ü.bin"), 1000, 1);
    make_file(&d.join("a.txt"), 10, 2);
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    fs::File::options()
        .write(true)
        .open(d.join("a.txt"))
        .unwrap()
        .set_modified(t)
        .unwrap();
    let ls = |extra: &[&str]| {
        let mut a = args!["ls", "-F", sshd.ssh_config()];
        a.extend(extra.iter().map(OsString::from));
        a.push(OsString::from(sshd.url(&d)));
        ferry_in(sshd.dir(), &a, &[])
    };
    let out = ls(&[]);
    sshd.assert_ok(&out, "ls");
    assert_eq!(stdout_text(&out), "a.txt\nsub dir/\n");
    let out = ls(&["-l"]);
    sshd.assert_ok(&out, "ls -l");
    let text = stdout_text(&out);
    assert!(text.contains("10 2020-09-13 12:26:40 a.txt"), "{text}");
    let out = ls(&["-R", "--json"]);
    sshd.assert_ok(&out, "ls -R --json");
    let v: serde_json::Value = serde_json::from_str(&stdout_text(&out)).unwrap();
    let paths: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"sub dir/ü.bin"), "{paths:?}");
    assert_eq!(paths.len(), 3);

    if let Some(nginx) = nginx_or_skip("ls_lists_sshd_and_nginx") {
        fs::create_dir_all(nginx.www().join("x")).unwrap();
        make_file(&nginx.www().join("x/y.bin"), 5, 3);
        let out = ferry(&args!["ls", "-R", "--pin", nginx.pin(), nginx.https("/x/")]);
        assert_ok(&out, "ls over HTTPS");
        assert_eq!(stdout_text(&out), "y.bin\n");
    }
    // A missing path: a clear error naming it, exit 4.
    let out = ls(&[]);
    assert_ok(&out, "ls again");
    let mut a = args!["ls", "-F", sshd.ssh_config()];
    a.push(OsString::from(sshd.url(d.join("nope"))));
    let out = ferry_in(sshd.dir(), &a, &[]);
    assert_code(&out, 4, "ls of a missing path");
    assert!(stderr_text(&out).contains("nope"), "{}", describe(&out));
}
