//! End-to-end tests of `ferry serve`'s SFTP side: the real binary on
//! 127.0.0.1 port 0, driven by `ferry cp` and by OpenSSH's `sftp`, `scp`
//! and `ssh`. Every byte is checked by blake3; timings are never asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::serve::FerryServe;
use common::*;

fn run(mut c: Command) -> Output {
    c.stdin(Stdio::null());
    c.output().unwrap()
}

/// Run `sftp -b -` with `script` on stdin.
fn sftp_batch(s: &FerryServe, script: &str, key: Option<&std::path::Path>) -> Output {
    let mut c = s.openssh("sftp");
    if let Some(k) = key {
        c.arg("-i").arg(k);
    }
    c.args(["-b", "-", "127.0.0.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn no_temp_files(dir: &std::path::Path) -> Vec<String> {
    list_dir(dir)
        .into_iter()
        .filter(|n| n.contains(".ferry-upload-") || n.contains(".ferry-part"))
        .collect()
}

#[test]
fn banner_and_identity_persist_across_restarts() {
    let mut s = FerryServe::start(&[]);
    assert!(
        s.sftp_port.is_some() && s.https_port.is_some(),
        "{}",
        s.banner
    );
    assert!(s.hostkey_fp.starts_with("SHA256:"), "{}", s.banner);
    assert!(s.hostkey_line.starts_with("ssh-ed25519 "), "{}", s.banner);
    assert_eq!(s.cert_sha256.len(), 64, "{}", s.banner);
    assert!(s.token.len() >= 32, "{}", s.banner);
    let (fp, cert, token) = (s.hostkey_fp.clone(), s.cert_sha256.clone(), s.token.clone());
    s.restart(&[]);
    assert_eq!(s.hostkey_fp, fp, "host key changed across a restart");
    assert_eq!(s.cert_sha256, cert, "certificate changed across a restart");
    assert_eq!(s.token, token, "token changed across a restart");
    // After `ready`, the lines for a person: what to paste.
    let o = s.stop_kill();
    assert!(
        stdout_text(&o).contains("ferry cp sftp://127.0.0.1:"),
        "{}",
        describe(&o)
    );
    assert!(
        stdout_text(&o).contains("--pin sha256:"),
        "{}",
        describe(&o)
    );
}

#[test]
fn ferry_cp_both_ways_file_and_tree() {
    cp_both_ways_file_and_tree(&["--writable"]);
}

/// The same with every metadata call on the blocking pool, as on a
/// network filesystem (the default on a local one is the session's thread).
#[test]
fn ferry_cp_both_ways_with_metadata_in_pool() {
    cp_both_ways_file_and_tree(&["--writable", "--metadata-in-pool"]);
}

fn cp_both_ways_file_and_tree(serve_args: &[&str]) {
    let s = FerryServe::start(serve_args);
    let local = tempdir();
    let big = local.path().join("big.bin");
    let want = make_file(&big, 40 * 1024 * 1024 + 123, 1);
    let tree = local.path().join("tree");
    fs::create_dir(&tree).unwrap();
    make_odd_tree(&tree, 7);

    // Upload a file and a tree.
    let o = s.cp(&args![&big, s.url("/")]);
    assert!(o.status.success(), "put file: {}", describe(&o));
    assert_file_hash(&s.root().join("big.bin"), &want, "uploaded file");
    let o = s.cp(&args!["-r", &tree, s.url("/")]);
    assert!(o.status.success(), "put tree: {}", describe(&o));
    assert_same_tree(
        &tree,
        &s.root().join("tree"),
        Cmp::default(),
        "uploaded tree",
    );

    // Download them back.
    let back = tempdir();
    let o = s.cp(&args![s.url("/big.bin"), back.path()]);
    assert!(o.status.success(), "get file: {}", describe(&o));
    assert_file_hash(&back.path().join("big.bin"), &want, "downloaded file");
    let o = s.cp(&args!["-r", s.url("/tree"), back.path()]);
    assert!(o.status.success(), "get tree: {}", describe(&o));
    assert_same_tree(
        &tree,
        &back.path().join("tree"),
        Cmp::default(),
        "downloaded tree",
    );
    assert!(
        no_temp_files(&s.root()).is_empty(),
        "temp files left: {:?}",
        no_temp_files(&s.root())
    );
}

/// Two ferry peers agree on AEGIS-128L (`aegis-128l@ferry`,
/// docs/internals/sftp.md "Crypto backend for SSH"); `Ciphers` in the
/// ssh config still picks a standard one. Every byte checked both ways.
#[test]
fn ferry_peers_use_aegis_and_ciphers_option_overrides_it() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let src = local.path().join("src.bin");
    let want = make_file(&src, 6 * 1024 * 1024 + 5, 41);
    for (cipher, opts) in [
        ("aegis-128l@ferry", vec![]),
        (
            "aes128-gcm@openssh.com",
            args!["-o", "Ciphers=aes128-gcm@openssh.com"],
        ),
        (
            "chacha20-poly1305@openssh.com",
            args!["-o", "Ciphers=chacha20-poly1305@openssh.com"],
        ),
    ] {
        let name = cipher.split('@').next().unwrap_or(cipher);
        let up = format!("/{name}.bin");
        let back = local.path().join(format!("back-{name}.bin"));
        let put = args![&src, s.url(&up)];
        let get = args![s.url(&up), &back];
        for (what, paths) in [("put", put), ("get", get)] {
            let mut a = opts.clone();
            a.extend(args!["--json"]);
            a.extend(paths);
            let o = s.cp(&a);
            assert!(o.status.success(), "{what} with {cipher}: {}", describe(&o));
            assert!(
                stdout_text(&o).contains(&format!("\"cipher\":\"{cipher}\"")),
                "{what}: {}",
                describe(&o)
            );
        }
        assert_file_hash(&s.root().join(&up[1..]), &want, cipher);
        assert_file_hash(&back, &want, cipher);
    }
}

#[test]
fn openssh_sftp_and_scp_work_against_it() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let src = local.path().join("src.bin");
    let want = make_file(&src, 5 * 1024 * 1024 + 7, 2);
    make_file(&s.root().join("served.bin"), 3 * 1024 * 1024 + 1, 3);
    let served_hash = hash_file(&s.root().join("served.bin"));
    let got = local.path().join("got.bin");
    let script = format!(
        "put {} up.bin\nget served.bin {}\nmkdir dir\nrename up.bin dir/moved.bin\nls -l dir\ncd ..\npwd\nrm dir/moved.bin\nrmdir dir\n",
        src.display(),
        got.display()
    );
    // Before removal, check the upload landed: run the first part alone.
    let o = sftp_batch(
        &s,
        &script.replace("rm dir/moved.bin\nrmdir dir\n", ""),
        None,
    );
    assert!(o.status.success(), "sftp: {}", describe(&o));
    assert!(
        stdout_text(&o).contains("moved.bin"),
        "ls -l: {}",
        describe(&o)
    );
    assert!(
        stdout_text(&o).contains("Remote working directory: /"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&s.root().join("dir/moved.bin"), &want, "sftp put");
    assert_file_hash(&got, &served_hash, "sftp get");
    let o = sftp_batch(&s, "rm dir/moved.bin\nrmdir dir\n", None);
    assert!(o.status.success(), "sftp rm: {}", describe(&o));
    assert!(!s.root().join("dir").exists());

    // scp (SFTP mode, OpenSSH's default) both ways; several runs, since
    // replies out of order used to make scp truncate silently.
    for i in 0..3 {
        let dl = local.path().join(format!("scp{i}.bin"));
        let mut c = s.openssh("scp");
        c.arg("-q").arg("127.0.0.1:served.bin").arg(&dl);
        let o = run(c);
        assert!(o.status.success(), "scp get: {}", describe(&o));
        assert_file_hash(&dl, &served_hash, "scp get");
    }
    let mut c = s.openssh("scp");
    c.arg("-q").arg(&src).arg("127.0.0.1:/scp-up.bin");
    let o = run(c);
    assert!(o.status.success(), "scp put: {}", describe(&o));
    assert_file_hash(&s.root().join("scp-up.bin"), &want, "scp put");
    assert!(no_temp_files(&s.root()).is_empty());
}

/// Served from tmpfs, ferry serve reads and writes on the session's
/// thread (docs/internals/server.md, "Reading on the session's thread"):
/// ferry cp and OpenSSH sftp both ways, every byte checked, and an upload
/// that fills the file system fails with its cause and leaves no file
/// under the final name.
#[test]
fn tmpfs_root_both_ways_and_disk_full() {
    let Some(s) = FerryServe::start_on_tmpfs("48m", &["--writable"]) else {
        return;
    };
    let local = tempdir();
    let big = local.path().join("big.bin");
    let want = make_file(&big, 20 * 1024 * 1024 + 123, 11);
    let o = s.cp(&args![&big, s.url("/")]);
    assert!(o.status.success(), "put: {}", describe(&o));
    assert_file_hash(&s.root().join("big.bin"), &want, "ferry cp put");
    let back = tempdir();
    let o = s.cp(&args![s.url("/big.bin"), back.path()]);
    assert!(o.status.success(), "get: {}", describe(&o));
    assert_file_hash(&back.path().join("big.bin"), &want, "ferry cp get");

    let got = local.path().join("got.bin");
    let small = local.path().join("small.bin");
    let small_hash = make_file(&small, 3 * 1024 * 1024 + 5, 12);
    let script = format!(
        "get big.bin {}\nput {} small.bin\n",
        got.display(),
        small.display()
    );
    let o = sftp_batch(&s, &script, None);
    assert!(o.status.success(), "sftp: {}", describe(&o));
    assert_file_hash(&got, &want, "sftp get");
    assert_file_hash(&s.root().join("small.bin"), &small_hash, "sftp put");

    // About 24 MiB are left: 40 MB cannot fit.
    let huge = local.path().join("huge.bin");
    make_file(&huge, 40 * 1024 * 1024, 13);
    let o = s.cp(&args![&huge, s.url("/")]);
    assert!(!o.status.success(), "put on a full disk: {}", describe(&o));
    assert!(
        stderr_text(&o).to_lowercase().contains("no space"),
        "the cause: {}",
        describe(&o)
    );
    let said = stderr_text(&o);
    let lines = said.lines().filter(|l| l.starts_with("ferry:")).count();
    assert_eq!(lines, 1, "one error, said once: {said}");
    assert!(
        !s.root().join("huge.bin").exists(),
        "file under the final name after a failed upload"
    );
    assert_file_hash(&s.root().join("big.bin"), &want, "the other file");
}

#[test]
fn read_only_by_default() {
    let s = FerryServe::start(&[]);
    let local = tempdir();
    let f = local.path().join("f.bin");
    make_file(&f, 1000, 4);
    let o = s.cp(&args![&f, s.url("/")]);
    assert_eq!(o.status.code(), Some(4), "{}", describe(&o));
    assert!(stderr_text(&o).contains("read-only"), "{}", describe(&o));
    assert!(stderr_text(&o).contains("--writable"), "{}", describe(&o));
    let o = sftp_batch(&s, &format!("put {} x\n", f.display()), None);
    assert!(
        !o.status.success(),
        "sftp put on a read-only server: {}",
        describe(&o)
    );
    let o = sftp_batch(&s, "mkdir d\n", None);
    assert!(!o.status.success());
    assert!(list_dir(&s.root()).is_empty(), "{:?}", list_dir(&s.root()));
}

#[test]
fn paths_are_confined_to_the_root() {
    let s = FerryServe::start(&["--writable"]);
    let outside = tempdir();
    let secret = outside.path().join("secret");
    fs::write(&secret, b"do not serve").unwrap();
    fs::create_dir(s.root().join("sub")).unwrap();
    fs::write(s.root().join("sub/inside"), b"fine").unwrap();
    symlink(&secret, s.root().join("link-out")).unwrap();
    symlink(outside.path(), s.root().join("dir-out")).unwrap();
    symlink(s.root().join("sub"), s.root().join("dir-in")).unwrap();
    let local = tempdir();

    for bad in [
        "../secret",
        "/../../../etc/passwd",
        "sub/../../secret",
        "link-out",
        "dir-out/secret",
    ] {
        let o = s.cp(&args![s.url(bad), local.path()]);
        assert_eq!(o.status.code(), Some(4), "get {bad}: {}", describe(&o));
        let dl = sftp_batch(
            &s,
            &format!("get {bad} {}/x\n", local.path().display()),
            None,
        );
        assert!(!dl.status.success(), "sftp get {bad}: {}", describe(&dl));
    }
    assert!(!local.path().join("x").exists());
    assert!(
        list_dir(local.path()).is_empty(),
        "{:?}",
        list_dir(local.path())
    );
    // Absolute paths are inside the root: /etc/passwd is ROOT/etc/passwd.
    let o = s.cp(&args![s.url("/etc/passwd"), local.path()]);
    assert_eq!(o.status.code(), Some(4), "{}", describe(&o));
    // Writing through a symlink that leads out is refused too.
    let f = local.path().join("f");
    fs::write(&f, b"payload").unwrap();
    let o = sftp_batch(&s, &format!("put {} dir-out/planted\n", f.display()), None);
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(!outside.path().join("planted").exists());
    let o = sftp_batch(&s, "rename sub/inside ../escaped\n", None);
    assert!(!o.status.success(), "{}", describe(&o));
    assert_eq!(fs::read(&secret).unwrap(), b"do not serve");
    // Links inside the tree are followed.
    let o = s.cp(&args![s.url("/dir-in/inside"), local.path()]);
    assert!(o.status.success(), "{}", describe(&o));
    assert_eq!(fs::read(local.path().join("inside")).unwrap(), b"fine");
}

#[test]
fn unknown_keys_and_users_are_refused() {
    let s = FerryServe::start(&["--user", "alice"]);
    fs::write(s.root().join("f"), b"x").unwrap();
    let local = tempdir();
    // Wrong key.
    let mut a = args!["cp"];
    a.extend(s.ferry_opts_with(&s.other_key()));
    a.extend(args![
        s.url("/f").replace("sftp://", "sftp://alice@"),
        local.path()
    ]);
    let o = ferry_in(&s.home(), &a, &[]);
    assert_eq!(o.status.code(), Some(3), "wrong key: {}", describe(&o));
    // Right key, wrong user.
    let o = s.cp(&args![
        s.url("/f").replace("sftp://", "sftp://bob@"),
        local.path()
    ]);
    assert_eq!(o.status.code(), Some(3), "wrong user: {}", describe(&o));
    assert!(list_dir(local.path()).is_empty());
    // Right key, right user.
    let o = s.cp(&args![
        s.url("/f").replace("sftp://", "sftp://alice@"),
        local.path()
    ]);
    assert!(o.status.success(), "{}", describe(&o));
    // OpenSSH with the wrong key, no password fallback offered.
    let mut c = s.openssh("sftp");
    c.arg("-i")
        .arg(s.other_key())
        .args(["-o", "IdentityFile=/dev/null"]);
    let mut c2 = Command::new("setsid");
    c2.arg("sftp")
        .env("HOME", s.home())
        .args([
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", s.known_hosts().display()))
        .arg("-i")
        .arg(s.other_key())
        .args(["-P", &s.sftp_port.unwrap().to_string(), "alice@127.0.0.1"]);
    let o = run(c2);
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(
        stderr_text(&o).contains("Permission denied"),
        "{}",
        describe(&o)
    );
    drop(c);
}

#[test]
fn malformed_packets_close_only_that_session() {
    let s = FerryServe::start(&[]);
    fs::write(s.root().join("f"), b"still served").unwrap();
    let garbage: [&[u8]; 3] = [
        // A length far above any limit.
        &[0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 3],
        // A valid INIT, then an unknown packet type.
        &[0, 0, 0, 5, 1, 0, 0, 0, 3, 0, 0, 0, 5, 250, 0, 0, 0, 1],
        // A valid INIT, then an OPEN whose path length runs past the packet.
        &[
            0, 0, 0, 5, 1, 0, 0, 0, 3, 0, 0, 0, 9, 3, 0, 0, 0, 1, 0x7f, 0, 0, 0,
        ],
    ];
    for g in garbage {
        let mut c = s.openssh("ssh");
        c.args(["-s", "127.0.0.1", "sftp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(g).unwrap();
        // Keep stdin open: the server, not our EOF, must end the session.
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            thread::sleep(Duration::from_millis(20));
        };
        drop(stdin);
        assert!(
            status.is_some(),
            "the server did not close a session that sent {g:?}"
        );
    }
    let local = tempdir();
    let o = s.cp(&args![s.url("/f"), local.path()]);
    assert!(
        o.status.success(),
        "server stopped serving: {}",
        describe(&o)
    );
    assert_eq!(fs::read(local.path().join("f")).unwrap(), b"still served");
}

#[test]
fn interrupted_upload_never_replaces_the_old_file() {
    let s = FerryServe::start(&["--writable"]);
    fs::write(s.root().join("target.bin"), b"the old content").unwrap();
    let local = tempdir();
    let big = local.path().join("big.bin");
    make_file(&big, 256 * 1024 * 1024, 5);
    // OpenSSH sftp writes straight to the final name (OPEN with TRUNC);
    // the server puts it under a temporary name until CLOSE.
    let mut c = s.openssh("sftp");
    c.args(["-b", "-", "127.0.0.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "put {} target.bin", big.display()).unwrap();
    // Wait until the upload is under way, then kill the client.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let temps: Vec<String> = no_temp_files(&s.root());
        let grown = temps
            .iter()
            .any(|t| file_len(&s.root().join(t)) > 4 * 1024 * 1024);
        if grown || Instant::now() > deadline {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    // The client is `setsid sftp`, which runs ssh as its child: kill both.
    let pid = child.id();
    let _ = Command::new("pkill")
        .args(["-KILL", "-s", &pid.to_string()])
        .status();
    let _ = child.kill();
    let _ = child.wait();
    drop(stdin);
    assert_eq!(
        fs::read(s.root().join("target.bin")).unwrap(),
        b"the old content",
        "an interrupted upload replaced the old file"
    );
    // The server removes the temporary file once it sees the session end.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !no_temp_files(&s.root()).is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        no_temp_files(&s.root()).is_empty(),
        "left: {:?}",
        no_temp_files(&s.root())
    );
}

#[test]
fn sigterm_stops_cleanly_after_the_grace_period() {
    let mut s = FerryServe::start(&["--grace", "1"]);
    // An idle interactive session holds a connection open.
    let mut c = s.openssh("sftp");
    c.arg("127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut client = c.spawn().unwrap();
    thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    let o = s.sigterm(Duration::from_secs(30));
    let _ = client.kill();
    let _ = client.wait();
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    assert!(stderr_text(&o).contains("SIGTERM"), "{}", describe(&o));
    assert!(started.elapsed() < Duration::from_secs(30), "did not stop");
}

/// ferry's own upload writes `.NAME.ferry-part`; the server must keep that
/// file when the connection dies so that `--resume` continues it.
#[test]
fn interrupted_ferry_put_resumes_against_ferry_serve() {
    let mut s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let src = local.path().join("huge.bin");
    let size = 256 * 1024 * 1024u64;
    let h = make_file(&src, size, 71);
    let dst = s.root().join("huge.bin");
    let part = part_path(&dst);
    let mut a = args!["cp"];
    a.extend(s.ferry_opts_with(&s.key()));
    a.extend(args![&src, s.url("/huge.bin")]);
    let mut child = FerryChild::spawn(&s.home(), &a, &[]);
    let deadline = Instant::now() + FERRY_TIMEOUT;
    // Enough written that some acknowledgements surely came back.
    while file_len(&part) < 48 * 1024 * 1024 {
        assert!(
            child.try_wait().is_none(),
            "ferry finished before the server was killed"
        );
        assert!(
            Instant::now() < deadline,
            "no data in {} in time",
            part.display()
        );
        thread::sleep(Duration::from_millis(1));
    }
    s.restart(&["--writable"]);
    let o = child.wait();
    if o.status.success() {
        // The engine reconnected to the restarted server and sent the
        // ranges that were cut again: the copy completed by itself.
        assert!(
            stderr_text(&o).contains("retrying"),
            "a retry is said: {}",
            describe(&o)
        );
        assert_file_hash(&dst, &h, "upload retried after the restart");
        return;
    }
    assert!(
        !dst.exists(),
        "an interrupted upload left {}",
        dst.display()
    );
    assert!(
        part.exists(),
        "the server removed ferry's part file; nothing to resume"
    );

    let o = s.cp(&args!["--resume", "--json", &src, s.url("/huge.bin")]);
    assert!(o.status.success(), "--resume: {}", describe(&o));
    assert_file_hash(&dst, &h, "resumed upload");
    // How much the resume saved depends on how many acknowledgements
    // reached the client before the kill (its journal records only those),
    // so it is reported, not asserted.
    let j = parse_json(stdout_text(&o).trim()).unwrap();
    let moved = j.get("bytes").and_then(|b| b.as_f64()).unwrap();
    eprintln!("resume moved {moved} of {size} bytes");
    assert!(
        no_temp_files(&s.root()).is_empty(),
        "{:?}",
        no_temp_files(&s.root())
    );
}

/// rclone's SFTP backend (Go's pkg/sftp) both ways, a tree with a file big
/// enough for its concurrent writes. pkg/sftp sends WRITE packets longer
/// than their data; the server must ignore the slack as sshd does.
#[test]
fn rclone_both_ways() {
    if Command::new("rclone").arg("version").output().is_err() {
        eprintln!("skipped: rclone is not installed (scripts/test.sh installs it)");
        return;
    }
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let tree = local.path().join("tree");
    fs::create_dir(&tree).unwrap();
    let want = make_file(&tree.join("large.bin"), 12 * 1024 * 1024 + 7, 3);
    make_odd_tree(&tree, 5);
    let kh = s.dir().join("rclone_known_hosts");
    let line = format!("[127.0.0.1]:{} {}\n", s.sftp_port.unwrap(), s.hostkey_line);
    fs::write(&kh, line).unwrap();
    let remote = format!(
        ":sftp,host=127.0.0.1,port={},user=me,key_file={},known_hosts_file={}:",
        s.sftp_port.unwrap(),
        s.key().display(),
        kh.display()
    );
    let rclone = |from: &str, to: &str| {
        let mut c = Command::new("rclone");
        c.env("RCLONE_CONFIG", "/dev/null")
            .env("HOME", s.home())
            .args([
                "copy",
                "--create-empty-src-dirs",
                "--retries",
                "1",
                from,
                to,
            ]);
        run(c)
    };
    let o = rclone(tree.to_str().unwrap(), &format!("{remote}/up"));
    assert!(o.status.success(), "rclone upload: {}", describe(&o));
    assert_file_hash(&s.root().join("up/large.bin"), &want, "rclone upload");
    assert_same_tree(&tree, &s.root().join("up"), Cmp::default(), "rclone upload");
    let back = local.path().join("back");
    let o = rclone(&format!("{remote}/up"), back.to_str().unwrap());
    assert!(o.status.success(), "rclone download: {}", describe(&o));
    assert_same_tree(&tree, &back, Cmp::default(), "rclone download");
    assert!(no_temp_files(&s.root()).is_empty());
}

/// lftp's SFTP (over OpenSSH's ssh as its connect program): mirror a tree
/// up and back, and `pget -n 4` a file as four ranges.
#[test]
fn lftp_mirror_both_ways_and_pget() {
    if Command::new("lftp").arg("--version").output().is_err() {
        eprintln!("skipped: lftp is not installed (scripts/test.sh installs it)");
        return;
    }
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let tree = local.path().join("tree");
    fs::create_dir(&tree).unwrap();
    let want = make_file(&tree.join("large.bin"), 12 * 1024 * 1024 + 7, 5);
    make_odd_tree(&tree, 6);
    let kh = s.dir().join("lftp_known_hosts");
    let line = format!("[127.0.0.1]:{} {}\n", s.sftp_port.unwrap(), s.hostkey_line);
    fs::write(&kh, line).unwrap();
    let back = local.path().join("back");
    let pget = local.path().join("pget.bin");
    let script = format!(
        "set sftp:connect-program 'ssh -a -x -F /dev/null -i {} -o UserKnownHostsFile={} \
         -o StrictHostKeyChecking=yes -o BatchMode=yes -o IdentitiesOnly=yes'; \
         set cmd:fail-exit yes; mirror -R {} /up; mirror /up {}; pget -n 4 /up/large.bin -o {}; bye",
        s.key().display(),
        kh.display(),
        tree.display(),
        back.display(),
        pget.display()
    );
    let mut c = Command::new("lftp");
    c.env("HOME", s.home())
        .args(["-e", &script, "-u", "me,"])
        .arg(format!("sftp://127.0.0.1:{}", s.sftp_port.unwrap()));
    let o = run(c);
    assert!(o.status.success(), "lftp: {}", describe(&o));
    assert_same_tree(
        &tree,
        &s.root().join("up"),
        Cmp::default(),
        "lftp mirror -R",
    );
    assert_same_tree(&tree, &back, Cmp::default(), "lftp mirror");
    assert_file_hash(&pget, &want, "lftp pget -n 4");
    assert!(no_temp_files(&s.root()).is_empty());
}

/// Issue 21: ferry cp and ferry serve compress with zstd
/// (`zstd@ferry.invalid`), both ways, a text file and `-r` of a tree of
/// text files, every byte checked; `--json` reports the method, the levels
/// and the bytes before and after.
#[test]
fn ferry_peers_compress_with_zstd_both_ways_file_and_tree() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let text = local.path().join("text.txt");
    let want = make_text_file(&text, 12 * 1024 * 1024 + 7, 5);
    let tree = local.path().join("tree");
    make_text_tree(&tree, 40, 9);

    for (flag, level) in [("-C", "[1]"), ("--compress=3", "[3]")] {
        let o = s.cp(&args![flag, "--json", &text, s.url("/text.txt")]);
        assert!(o.status.success(), "put {flag}: {}", describe(&o));
        assert_file_hash(&s.root().join("text.txt"), &want, "uploaded text");
        assert_eq!(compression_field(&o, "method_out"), "zstd@ferry.invalid");
        assert_eq!(compression_field(&o, "method_in"), "zstd@ferry.invalid");
        assert_eq!(compression_field(&o, "levels_sent"), level, "{flag}");
        let (plain, wire) = (
            compression_num(&o, "sent_plain"),
            compression_num(&o, "sent_wire"),
        );
        assert!(plain >= 12.0 * 1024.0 * 1024.0, "{}", stdout_text(&o));
        assert!(
            wire < plain / 2.0,
            "text did not compress: {}",
            stdout_text(&o)
        );

        let back = local.path().join("back.txt");
        let o = s.cp(&args![flag, "--json", s.url("/text.txt"), &back]);
        assert!(o.status.success(), "get {flag}: {}", describe(&o));
        assert_file_hash(&back, &want, "downloaded text");
        let (plain, wire) = (
            compression_num(&o, "received_plain"),
            compression_num(&o, "received_wire"),
        );
        assert!(plain >= 12.0 * 1024.0 * 1024.0, "{}", stdout_text(&o));
        // The server's sender runs `auto`: on loopback it may store.
        assert!(wire <= plain * 1.01, "{}", stdout_text(&o));
        fs::remove_file(&back).unwrap();
    }

    let o = s.cp(&args!["-C", "-r", &tree, s.url("/")]);
    assert!(o.status.success(), "put tree: {}", describe(&o));
    assert_same_tree(
        &tree,
        &s.root().join("tree"),
        Cmp::default(),
        "uploaded tree",
    );
    let back = tempdir();
    let o = s.cp(&args!["--compress=on", "-r", s.url("/tree"), back.path()]);
    assert!(o.status.success(), "get tree: {}", describe(&o));
    assert_same_tree(
        &tree,
        &back.path().join("tree"),
        Cmp::default(),
        "downloaded tree",
    );

    // `auto` negotiates zstd too, and reports what it sent.
    let o = s.cp(&args![
        "--compress=auto",
        "--json",
        &text,
        s.url("/auto.txt")
    ]);
    assert!(o.status.success(), "put auto: {}", describe(&o));
    assert_file_hash(&s.root().join("auto.txt"), &want, "auto upload");
    assert_eq!(compression_field(&o, "method_out"), "zstd@ferry.invalid");
    // `auto` is the default: zstd with ferry serve, and on loopback the
    // controller stores (level 0) rather than compress.
    let o = s.cp(&args!["--json", &text, s.url("/default.txt")]);
    assert!(o.status.success(), "put default: {}", describe(&o));
    assert_file_hash(&s.root().join("default.txt"), &want, "default upload");
    assert_eq!(compression_field(&o, "method_out"), "zstd@ferry.invalid");
    assert_eq!(compression_field(&o, "method_in"), "zstd@ferry.invalid");
    assert!(
        compression_field(&o, "levels_sent").starts_with("[0"),
        "{}",
        compression_field(&o, "levels_sent")
    );
    // `off` offers none.
    let o = s.cp(&args!["--compress=off", "--json", &text, s.url("/off.txt")]);
    assert!(o.status.success(), "put off: {}", describe(&o));
    assert_eq!(compression_field(&o, "method_out"), "none");
    assert_file_hash(
        &s.root().join("off.txt"),
        &want,
        "upload without compression",
    );
}

/// Issue 21: `ferry serve --compress` sets how the server sends (a
/// download's direction, which ferry cp's `-C` does not reach): a fixed
/// level compresses from the first packet on loopback, where `auto`
/// stores; `off` offers no compression at all.
#[test]
fn serve_compress_sets_the_download_level() {
    let local = tempdir();
    let text = local.path().join("text.txt");
    let want = make_text_file(&text, 8 * 1024 * 1024 + 3, 17);
    let back = local.path().join("back.txt");

    let s = FerryServe::start(&["--writable", "--compress=3"]);
    fs::copy(&text, s.root().join("text.txt")).unwrap();
    let o = s.cp(&args!["--json", s.url("/text.txt"), &back]);
    assert!(
        o.status.success(),
        "get from --compress=3: {}",
        describe(&o)
    );
    assert_file_hash(&back, &want, "download from --compress=3");
    assert_eq!(compression_field(&o, "method_in"), "zstd@ferry.invalid");
    let (plain, wire) = (
        compression_num(&o, "received_plain"),
        compression_num(&o, "received_wire"),
    );
    assert!(plain >= 8.0 * 1024.0 * 1024.0, "{}", stdout_text(&o));
    assert!(
        wire < plain / 2.0,
        "server did not compress: {}",
        stdout_text(&o)
    );
    fs::remove_file(&back).unwrap();
    drop(s);

    let s = FerryServe::start(&["--writable", "--compress=off"]);
    fs::copy(&text, s.root().join("text.txt")).unwrap();
    let o = s.cp(&args!["-C", "--json", s.url("/text.txt"), &back]);
    assert!(
        o.status.success(),
        "get -C from --compress=off: {}",
        describe(&o)
    );
    assert_file_hash(&back, &want, "download from --compress=off");
    assert_eq!(compression_field(&o, "method_in"), "none");
    assert_eq!(compression_field(&o, "method_out"), "none");

    let o = ferry(&args!["serve", "--compress=fast", "--no-https", "."]);
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(
        stderr_text(&o).contains("expected auto, on, off or a zstd level"),
        "{}",
        describe(&o)
    );
}

/// Issue 21: `-v` prints the compression line: the method each way, the
/// zstd levels this side sent at, and the bytes before and after.
#[test]
fn verbose_reports_zstd_method_levels_and_bytes() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let text = local.path().join("text.txt");
    let want = make_text_file(&text, 4 * 1024 * 1024 + 5, 41);
    let o = s.cp(&args!["-C", "-v", &text, s.url("/v.txt")]);
    assert!(o.status.success(), "put -C -v: {}", describe(&o));
    assert_file_hash(&s.root().join("v.txt"), &want, "upload -C -v");
    let err = stderr_text(&o);
    let line = err
        .lines()
        .find(|l| l.contains("compression: out "))
        .unwrap_or_else(|| panic!("no compression line in -v: {}", describe(&o)));
    assert!(line.contains("out zstd@ferry.invalid levels [1]"), "{line}");
    assert!(line.contains("in zstd@ferry.invalid"), "{line}");
    // "PLAIN -> WIRE bytes (RATIO)": text compresses, so wire < plain.
    let sent = line
        .split("levels [1] (0 = stored), ")
        .nth(1)
        .and_then(|r| r.split(" bytes").next())
        .unwrap_or_default();
    let nums: Vec<u64> = sent.split(" -> ").filter_map(|n| n.parse().ok()).collect();
    assert_eq!(nums.len(), 2, "{line}");
    assert!(nums[0] >= 4 * 1024 * 1024, "{line}");
    assert!(nums[1] < nums[0] / 2, "{line}");
}

/// Issue 21: random data under `auto` and under `-C` comes through whole
/// (stored packets, and zstd's raw blocks), both ways.
#[test]
fn ferry_peers_zstd_random_data_both_ways() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let src = local.path().join("random.bin");
    let want = make_file(&src, 20 * 1024 * 1024 + 3, 77);
    for flag in ["--compress=auto", "-C"] {
        let o = s.cp(&args![flag, "--json", &src, s.url("/random.bin")]);
        assert!(o.status.success(), "put {flag}: {}", describe(&o));
        assert_file_hash(&s.root().join("random.bin"), &want, flag);
        let back = local.path().join("back.bin");
        let o = s.cp(&args![flag, s.url("/random.bin"), &back]);
        assert!(o.status.success(), "get {flag}: {}", describe(&o));
        assert_file_hash(&back, &want, flag);
        fs::remove_file(&back).unwrap();
    }
}

/// Issue 21: rekeying in the middle of a compressed transfer resets both
/// zstd streams at NEWKEYS; the content must come through intact.
/// `RekeyLimit 1M` makes ferry cp rekey every MiB either way.
#[test]
fn zstd_survives_rekeying_mid_transfer() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let text = local.path().join("text.txt");
    let want = make_text_file(&text, 16 * 1024 * 1024 + 11, 21);
    for flag in ["-C", "--compress=auto"] {
        let o = s.cp(&args![
            flag,
            "-o",
            "RekeyLimit=1M",
            "--json",
            &text,
            s.url("/up.txt")
        ]);
        assert!(o.status.success(), "put {flag}: {}", describe(&o));
        assert_file_hash(&s.root().join("up.txt"), &want, "upload across rekeys");
        assert_eq!(compression_field(&o, "method_out"), "zstd@ferry.invalid");
        // 16 MiB of text at 1 MiB per key: several key exchanges.
        assert!(
            compression_num(&o, "key_exchanges") >= 3.0,
            "{}",
            stdout_text(&o)
        );

        let back = local.path().join("back.txt");
        let o = s.cp(&args![
            flag,
            "-o",
            "RekeyLimit=1M",
            "--json",
            s.url("/up.txt"),
            &back
        ]);
        assert!(o.status.success(), "get {flag}: {}", describe(&o));
        assert_file_hash(&back, &want, "download across rekeys");
        assert!(
            compression_num(&o, "key_exchanges") >= 3.0,
            "{}",
            stdout_text(&o)
        );
        fs::remove_file(&back).unwrap();
    }
}

/// Issue 21: OpenSSH's `sftp -C` against ferry serve gets
/// `zlib@openssh.com` (ferry serve offers it after zstd, which OpenSSH
/// does not list), and the bytes come through.
#[test]
fn openssh_sftp_dash_c_gets_zlib_from_ferry_serve() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let src = local.path().join("text.txt");
    let want = make_text_file(&src, 3 * 1024 * 1024 + 1, 31);
    let got = local.path().join("got.txt");
    let mut c = s.openssh("sftp");
    c.args(["-C", "-v", "-b", "-", "127.0.0.1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            format!(
                "put {} up.txt\nget up.txt {}\n",
                src.display(),
                got.display()
            )
            .as_bytes(),
        )
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "sftp -C: {}", describe(&o));
    assert!(
        stderr_text(&o).contains("compression: zlib@openssh.com"),
        "no zlib in sftp -v: {}",
        describe(&o)
    );
    assert_file_hash(&s.root().join("up.txt"), &want, "sftp -C put");
    assert_file_hash(&got, &want, "sftp -C get");
}
