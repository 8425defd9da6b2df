//! End-to-end tests of `ferry serve --ftp`: the real binary on 127.0.0.1
//! port 0 (tests/common/serve.rs), driven by `ferry cp` over explicit FTPS,
//! curl and lftp. Every byte is checked by blake3; timings are never
//! asserted. curl and lftp tests are skipped, with a message, when the
//! program is missing (scripts/install-peers.sh installs both).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::serve::FerryServe;
use common::*;

/// Names that break naive clients: spaces, unicode, a leading dot, empty
/// files and an empty directory, a nested directory.
fn odd_tree(root: &Path) {
    fs::create_dir_all(root.join("sub dir/deeper")).unwrap();
    fs::create_dir_all(root.join("empty dir")).unwrap();
    make_file(&root.join("with space.bin"), 300_000, 1);
    make_file(&root.join("ünïcødé ✓.txt"), 1234, 2);
    make_file(&root.join(".hidden"), 10, 3);
    make_file(&root.join("zero"), 0, 4);
    make_file(&root.join("sub dir/zero too"), 0, 6);
    make_file(&root.join("sub dir/deeper/2 MiB + 1"), 2 * MIB + 1, 5);
}

/// curl with the served certificate trusted and `user:pass`, or anonymous.
fn curl(s: &FerryServe, login: Option<&str>, args: &[OsString]) -> Output {
    let mut c = Command::new("curl");
    c.args(["-sS", "--ssl-reqd", "--cacert"]).arg(s.cert_pem());
    if let Some(l) = login {
        c.args(["-u", l]);
    }
    c.args(args).stdin(Stdio::null());
    c.output().unwrap()
}

fn login(s: &FerryServe) -> String {
    format!("ferry:{}", s.token)
}

/// lftp with FTPS forced (`ssl-force`, data protected), the certificate
/// not checked, then `script`.
fn lftp(s: &FerryServe, user: &str, pass: &str, script: &str) -> Output {
    let all = format!(
        "set ftp:ssl-force true; set ftp:ssl-protect-data true; set ssl:verify-certificate no; \
         set net:max-retries 1; set net:timeout 20; \
         open -u {user},{pass} -p {} 127.0.0.1; {script}",
        s.ftp_port.unwrap()
    );
    Command::new("lftp")
        .args(["-c", &all])
        .env("HOME", s.home())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn no_upload_leftovers(dir: &Path) {
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("ferry-upload") || n.contains("ferry-part"))
        .collect();
    assert!(
        left.is_empty(),
        "left behind in {}: {left:?}",
        dir.display()
    );
}

#[test]
fn ferry_cp_files_and_trees_both_ways_over_ftps() {
    let mut s = FerryServe::start_ftp(&["--writable"]);
    let tree = s.root().join("tree");
    odd_tree(&tree);
    let big = make_file(&s.root().join("big.bin"), 5 * MIB + 3, 9);
    let out = tempdir();

    // One file, into a directory and to a name.
    let o = s.ftp_cp(&args!["--json", s.ftp_url("big.bin"), out.path()]);
    assert_ok(&o, "get into dir");
    assert_eq!(json_field(&o, "protocol"), "ftps");
    assert_eq!(hash_file(&out.path().join("big.bin")), big);
    let o = s.ftp_cp(&args![
        s.ftp_url("tree/with%20space.bin"),
        out.path().join("renamed")
    ]);
    assert_ok(&o, "get to a name");
    assert_same_file(
        &tree.join("with space.bin"),
        &out.path().join("renamed"),
        "space",
    );

    // The tree down: odd names, empty files, empty directory.
    let o = s.ftp_cp(&args!["-r", s.ftp_url("tree"), out.path()]);
    assert_ok(&o, "get -r");
    assert_same_tree(&tree, &out.path().join("tree"), Cmp::default(), "get -r");

    // And up again, to a new name and into a directory.
    fs::create_dir(s.root().join("up")).unwrap();
    let o = s.ftp_cp(&args!["-r", out.path().join("tree"), s.ftp_url("up/copy")]);
    assert_ok(&o, "put -r to a new name");
    assert_same_tree(&tree, &s.root().join("up/copy"), Cmp::default(), "put -r");
    let o = s.ftp_cp(&args!["-r", out.path().join("tree"), s.ftp_url("up/")]);
    assert_ok(&o, "put -r into a dir");
    assert_same_tree(
        &tree,
        &s.root().join("up/tree"),
        Cmp::default(),
        "put -r into",
    );

    // Single files up, one replacing an old file.
    fs::write(s.root().join("up/big.bin"), b"old").unwrap();
    let o = s.ftp_cp(&args![
        out.path().join("big.bin"),
        out.path().join("renamed"),
        s.ftp_url("up/")
    ]);
    assert_ok(&o, "put several");
    assert_eq!(hash_file(&s.root().join("up/big.bin")), big);
    assert_same_file(
        &tree.join("with space.bin"),
        &s.root().join("up/renamed"),
        "put renamed",
    );
    no_upload_leftovers(&s.root().join("up"));
    no_upload_leftovers(&s.root().join("up/copy/sub dir"));

    // The banner's FTP lines: the command to copy with, the pin.
    let banner = stdout_text(&s.stop_kill());
    let cmd = format!(
        "ferry cp --ssl-reqd --pin sha256:{} -u ferry:{} ftp://127.0.0.1:{}/FILE",
        s.cert_sha256,
        s.token,
        s.ftp_port.unwrap()
    );
    assert!(banner.contains(&cmd), "{banner}");
    assert!(banner.contains("TLS required"), "{banner}");
}

#[test]
fn streams_4_ranges_and_resume_of_a_partial_download() {
    let s = FerryServe::start_ftp(&[]);
    let want = make_file(&s.root().join("big.bin"), 64 * MIB + 13, 21);
    let out = tempdir();

    // --streams 4: four REST ranges on four connections.
    let o = s.ftp_cp(&args![
        "--json",
        "--streams",
        "4",
        s.ftp_url("big.bin"),
        out.path().join("s4.bin")
    ]);
    assert_ok(&o, "streams 4");
    assert_eq!(hash_file(&out.path().join("s4.bin")), want);
    assert_eq!(json_field(&o, "streams"), "4", "{}", describe(&o));

    // A download killed part way, then --resume: REST from where it was.
    let dst = out.path().join("r.bin");
    let part = out.path().join(".r.bin.ferry-part");
    let mut all = args![
        "cp",
        "-q",
        "--ssl-reqd",
        "--pin",
        format!("sha256:{}", s.cert_sha256),
        "-u",
        login(&s)
    ];
    let mut child = FerryChild::spawn(
        &s.home(),
        &{
            all.extend(args![s.ftp_url("big.bin"), &dst]);
            all.clone()
        },
        &[],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let have = fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if have >= MIB {
            break;
        }
        assert!(
            child.try_wait().is_none(),
            "the copy ended before it was cut"
        );
        assert!(Instant::now() < deadline, "the part file never grew");
        thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill();
    let had = fs::metadata(&part).unwrap().len();
    assert!(!dst.exists(), "nothing under the final name");
    let o = s.ftp_cp(&args!["--resume", "--json", s.ftp_url("big.bin"), &dst]);
    assert_ok(&o, "resume");
    assert_eq!(hash_file(&dst), want);
    if had < 64 * MIB {
        let moved: f64 = json_field(&o, "bytes").parse().unwrap();
        assert!(
            moved <= (64 * MIB + 13 - had) as f64 + MIB as f64,
            "resumed, not restarted: {moved} after {had}"
        );
    }
    assert!(!part.exists());
}

#[test]
fn curl_and_lftp_download_and_upload() {
    need!("curl");
    need!("lftp");
    let s = FerryServe::start_ftp(&["--writable"]);
    let tree = s.root().join("tree");
    odd_tree(&tree);
    let big = make_file(&s.root().join("big.bin"), 3 * MIB + 1, 7);
    let out = tempdir();

    // curl: download, ranged download, listing, upload.
    let o = curl(
        &s,
        Some(&login(&s)),
        &args!["-o", out.path().join("c.bin"), s.ftp_url("big.bin")],
    );
    assert_ok(&o, "curl get");
    assert_eq!(hash_file(&out.path().join("c.bin")), big);
    let o = curl(
        &s,
        Some(&login(&s)),
        &args![
            "-r",
            "1000-",
            "-o",
            out.path().join("tail"),
            s.ftp_url("big.bin")
        ],
    );
    assert_ok(&o, "curl range");
    assert_eq!(
        read(&out.path().join("tail")),
        read(&s.root().join("big.bin"))[1000..]
    );
    let o = curl(&s, Some(&login(&s)), &args!["-l", s.ftp_url("tree/")]);
    assert_ok(&o, "curl NLST");
    let names = stdout_text(&o);
    for n in ["with space.bin", "ünïcødé ✓.txt", "zero", "sub dir"] {
        assert!(names.lines().any(|l| l == n), "{n} in {names}");
    }
    let o = curl(
        &s,
        Some(&login(&s)),
        &args!["-T", out.path().join("c.bin"), s.ftp_url("from%20curl.bin")],
    );
    assert_ok(&o, "curl put");
    assert_eq!(hash_file(&s.root().join("from curl.bin")), big);

    // lftp: get, mirror a tree down, put, mirror a tree up.
    let script = format!(
        "get big.bin -o '{}'; mirror tree '{}'; put '{}' -o 'from lftp.bin'; mirror -R '{}' 'up tree'",
        out.path().join("l.bin").display(),
        out.path().join("ltree").display(),
        out.path().join("c.bin").display(),
        tree.display(),
    );
    let o = lftp(&s, "ferry", &s.token, &script);
    assert_ok(&o, "lftp");
    assert_eq!(hash_file(&out.path().join("l.bin")), big);
    assert_eq!(hash_file(&s.root().join("from lftp.bin")), big);
    assert_same_tree(
        &tree,
        &out.path().join("ltree"),
        Cmp::default(),
        "lftp mirror",
    );
    assert_same_tree(
        &tree,
        &s.root().join("up tree"),
        Cmp::default(),
        "lftp mirror -R",
    );
    no_upload_leftovers(&s.root());
}

#[test]
fn refusals_logins_paths_and_read_only() {
    need!("curl");
    let s = FerryServe::start_ftp(&["--user", "alice"]);
    let outer = s.dir().join("secret.txt");
    fs::write(&outer, b"outside the root").unwrap();
    symlink(&outer, s.root().join("link-out")).unwrap();
    make_file(&s.root().join("f.bin"), 1000, 3);
    let out = tempdir();

    // Wrong password, another user name, anonymous: 530, and logged.
    let o = curl(&s, Some("alice:wrong"), &args![s.ftp_url("f.bin")]);
    assert_code(&o, 67, "wrong password");
    let o = curl(
        &s,
        Some(&format!("bob:{}", s.token)),
        &args![s.ftp_url("f.bin")],
    );
    assert_code(&o, 67, "user not allowed");
    let o = curl(&s, None, &args![s.ftp_url("f.bin")]);
    assert_code(&o, 67, "anonymous without --public");
    let o = s.ftp_cp(&args![s.ftp_url("f.bin"), out.path()]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "ferry as user ferry with --user alice"
    );
    assert!(
        stderr_text(&o).contains(&format!("ftp://127.0.0.1:{}", s.ftp_port.unwrap())),
        "names the server: {}",
        describe(&o)
    );

    // Plain FTP is refused when TLS is required (before any password).
    let o = Command::new("curl")
        .args(["-sS", "-u", &format!("alice:{}", s.token)])
        .arg(s.ftp_url("f.bin"))
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0), "plain login: {}", describe(&o));
    assert!(!out.path().join("f.bin").exists());

    // The right login works; `..` and a symlink out of the root do not.
    let alice = format!("alice:{}", s.token);
    let o = curl(
        &s,
        Some(&alice),
        &args!["-o", out.path().join("ok"), s.ftp_url("f.bin")],
    );
    assert_ok(&o, "alice");
    let o = curl(
        &s,
        Some(&alice),
        &args!["--path-as-is", s.ftp_url("../secret.txt")],
    );
    assert_ne!(o.status.code(), Some(0), "..: {}", describe(&o));
    assert!(!stdout_text(&o).contains("outside"), "{}", describe(&o));
    let o = curl(&s, Some(&alice), &args![s.ftp_url("%2F..%2Fsecret.txt")]);
    assert_ne!(o.status.code(), Some(0), "/../: {}", describe(&o));
    let o = curl(&s, Some(&alice), &args![s.ftp_url("link-out")]);
    assert_ne!(o.status.code(), Some(0), "symlink out: {}", describe(&o));
    assert!(!stdout_text(&o).contains("outside"), "{}", describe(&o));
    let o = curl(
        &s,
        Some(&alice),
        &args!["-Q", "SIZE link-out", s.ftp_url("")],
    );
    assert_ne!(
        o.status.code(),
        Some(0),
        "SIZE of a symlink out: {}",
        describe(&o)
    );

    // Read-only: uploads refused with 550, ferry names the URL. libunftp
    // answers STOR with 150 before the storage refuses it; the server
    // reads the data to the end so the client sees the 550, not a broken
    // pipe (8 MiB: more than the socket buffers hold).
    let local = out.path().join("big");
    make_file(&local, 8 * MIB, 12);
    let o = curl(&s, Some(&alice), &args!["-T", &local, s.ftp_url("new.bin")]);
    assert_ne!(
        o.status.code(),
        Some(0),
        "curl upload to a read-only server"
    );
    assert!(stderr_text(&o).contains("550"), "{}", describe(&o));
    let mut all = args![
        "cp",
        "-q",
        "--ssl-reqd",
        "--pin",
        format!("sha256:{}", s.cert_sha256),
        "-u",
        alice.clone(),
    ];
    all.extend(args![&local, s.ftp_url("new.bin")]);
    let o = ferry_in(&s.home(), &all, &[]);
    assert_ne!(o.status.code(), Some(0), "ferry upload to read-only");
    let err = stderr_text(&o);
    assert!(err.contains("ftp://127.0.0.1:"), "names the URL: {err}");
    assert!(err.contains("550"), "gives the reply: {err}");
    assert!(!err.contains("--resume"), "a refusal, not a cut: {err}");
    let o = curl(&s, Some(&alice), &args!["-Q", "DELE f.bin", s.ftp_url("")]);
    assert_ne!(o.status.code(), Some(0), "DELE on read-only");
    let o = curl(&s, Some(&alice), &args!["-Q", "MKD d", s.ftp_url("")]);
    assert_ne!(o.status.code(), Some(0), "MKD on read-only");
    assert!(s.root().join("f.bin").exists());
    assert!(!s.root().join("d").exists());
    assert!(!s.root().join("new.bin").exists());
    no_upload_leftovers(&s.root());

    let mut s = s;
    let log = stderr_text(&s.stop_kill());
    assert!(
        log.contains("login refused") && log.contains("127.0.0.1"),
        "failed logins are logged with the peer: {log}"
    );
    assert!(
        !log.contains("wrong\""),
        "the password is never logged: {log}"
    );
}

/// curl's `-v` trace of `-Q CMD`s sent after the login (then a listing
/// of the root), with the token as the password.
fn quote(s: &FerryServe, cmds: &[&str]) -> Output {
    let mut a = args!["-v"];
    for c in cmds {
        a.extend(args!["-Q", c]);
    }
    a.push(s.ftp_url("").into());
    curl(s, Some(&login(s)), &a)
}

#[test]
fn hash_command_hashes_on_the_server_and_stays_in_the_root() {
    need!("curl");
    let s = FerryServe::start_ftp(&[]);
    let outer = s.dir().join("secret.txt");
    fs::write(&outer, b"outside the root").unwrap();
    symlink(&outer, s.root().join("link-out")).unwrap();
    fs::create_dir_all(s.root().join("sub dir")).unwrap();
    make_file(&s.root().join("sub dir/it's a file.bin"), 300_000, 21);
    let data = fs::read(s.root().join("sub dir/it's a file.bin")).unwrap();
    let sha = hex(&<sha2::Sha256 as sha2::Digest>::digest(&data));
    let b3 = blake3::hash(&data).to_hex().to_string();

    // FEAT lists HASH with the current choice marked; SHA-256 first.
    let o = quote(&s, &["FEAT"]);
    assert_ok(&o, "FEAT");
    assert!(
        stderr_text(&o).contains(" HASH SHA-256*;BLAKE3"),
        "{}",
        describe(&o)
    );
    // The draft's reply: ALGO START-END HEX PATH, the path as sent.
    let o = quote(&s, &["HASH sub dir/it's a file.bin"]);
    assert_ok(&o, "HASH with SHA-256");
    let want = format!("< 213 SHA-256 0-300000 {sha} sub dir/it's a file.bin");
    assert!(stderr_text(&o).contains(&want), "{want}: {}", describe(&o));
    let o = quote(
        &s,
        &[
            "OPTS HASH BLAKE3",
            "CWD sub dir",
            "HASH it's a file.bin",
            "FEAT",
        ],
    );
    assert_ok(&o, "OPTS HASH BLAKE3, relative path");
    let err = stderr_text(&o);
    assert!(err.contains("< 200 BLAKE3"), "{err}");
    assert!(
        err.contains(&format!("< 213 BLAKE3 0-300000 {b3} it's a file.bin")),
        "{err}"
    );
    assert!(
        err.contains("HASH SHA-256;BLAKE3*"),
        "FEAT marks the choice: {err}"
    );

    // Refused: an unknown algorithm (504), a missing file, a directory,
    // `..` above the root, an absolute path out, a symlink out (550).
    let o = quote(&s, &["OPTS HASH MD5"]);
    assert_ne!(o.status.code(), Some(0), "OPTS HASH MD5");
    assert!(stderr_text(&o).contains("< 504"), "{}", describe(&o));
    for bad in [
        "HASH missing.bin",
        "HASH sub dir",
        "HASH ../secret.txt",
        "HASH /../secret.txt",
        "HASH link-out",
    ] {
        let o = quote(&s, &[bad]);
        assert_ne!(o.status.code(), Some(0), "{bad}: {}", describe(&o));
        let err = stderr_text(&o);
        assert!(err.contains("< 550"), "{bad}: {err}");
        assert!(!err.contains("< 213"), "{bad}: {err}");
    }
    // Not before the login.
    let o = Command::new("curl")
        .args(["-sS", "-v", "--ssl-reqd", "--cacert"])
        .arg(s.cert_pem())
        .args(["-u", "ferry:wrong", "-Q", "HASH sub dir/it's a file.bin"])
        .arg(s.ftp_url(""))
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(
        !stderr_text(&o).contains("< 213 SHA-256"),
        "{}",
        describe(&o)
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn public_allows_anonymous_reads_only_and_plain_when_allowed() {
    need!("curl");
    let mut s = FerryServe::start_ftp(&["--public", "--writable", "--ftp-allow-plain"]);
    let want = make_file(&s.root().join("pub.bin"), 100_000, 8);
    let out = tempdir();
    // curl logs in as anonymous when no -u is given.
    let o = curl(
        &s,
        None,
        &args!["-o", out.path().join("a"), s.ftp_url("pub.bin")],
    );
    assert_ok(&o, "anonymous read");
    assert_eq!(hash_file(&out.path().join("a")), want);
    let o = curl(
        &s,
        None,
        &args!["-T", out.path().join("a"), s.ftp_url("anon.bin")],
    );
    assert_ne!(
        o.status.code(),
        Some(0),
        "anonymous upload: {}",
        describe(&o)
    );
    assert!(!s.root().join("anon.bin").exists());
    // Plain FTP with the token works here (--ftp-allow-plain), writes too.
    let o = Command::new("curl")
        .args(["-sS", "-u", &login(&s), "-T"])
        .arg(out.path().join("a"))
        .arg(s.ftp_url("plain.bin"))
        .output()
        .unwrap();
    assert_ok(&o, "plain upload with --ftp-allow-plain");
    assert_eq!(hash_file(&s.root().join("plain.bin")), want);
    let banner = stdout_text(&s.stop_kill());
    assert!(
        banner.contains("the password travels in the clear"),
        "{banner}"
    );
    assert!(banner.contains("anonymous may read"), "{banner}");
}

#[test]
fn client_killed_mid_upload_leaves_nothing_under_the_final_name() {
    need!("curl");
    let s = FerryServe::start_ftp(&["--writable"]);
    fs::write(s.root().join("final.bin"), b"the old version").unwrap();
    let mut child = Command::new("curl")
        .args(["-sS", "--ssl-reqd", "--cacert"])
        .arg(s.cert_pem())
        .args(["-u", &login(&s), "-T", "-"])
        .arg(s.ftp_url("final.bin"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let chunk = random_bytes(MIB as usize, 5);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Feed it until the temporary file on the server has grown.
    let tmp_len = |root: &Path| -> u64 {
        fs::read_dir(root)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("ferry-upload"))
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum()
    };
    while tmp_len(&s.root()) < MIB {
        stdin.write_all(&chunk).unwrap();
        assert!(
            Instant::now() < deadline,
            "the upload never reached the server"
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(read(&s.root().join("final.bin")), b"the old version");
    let _ = child.kill();
    let _ = child.wait();
    drop(stdin);
    // The server notices the cut and removes its temporary file.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = fs::read_dir(s.root())
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().contains("ferry-upload"));
        if !left {
            break;
        }
        assert!(Instant::now() < deadline, "the temporary file stayed");
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        read(&s.root().join("final.bin")),
        b"the old version",
        "the old file is untouched"
    );
}

#[test]
fn upload_cut_then_resume_continues_with_appe() {
    let s = FerryServe::start_ftp(&["--writable"]);
    let src = tempdir();
    let local = src.path().join("big.bin");
    let want = make_file(&local, 64 * MIB + 9, 31);
    fs::write(s.root().join("big.bin"), b"the old version").unwrap();
    let rpart = s.root().join(".big.bin.ferry-part");

    // ferry cp uploads to .big.bin.ferry-part; killed once the server's
    // temporary file for it has grown.
    let mut all = args![
        "cp",
        "-q",
        "--ssl-reqd",
        "--pin",
        format!("sha256:{}", s.cert_sha256),
        "-u",
        login(&s)
    ];
    all.extend(args![&local, s.ftp_url("")]);
    let mut child = FerryChild::spawn(&s.home(), &all, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let growing = |root: &Path| -> u64 {
        fs::read_dir(root)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".ferry-"))
            .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .sum()
    };
    while growing(&s.root()) < MIB {
        assert!(
            child.try_wait().is_none(),
            "the upload ended before it was cut"
        );
        assert!(Instant::now() < deadline, "the upload never started");
        thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill();
    // The server keeps what arrived under the client's part name (a name
    // that says "partial"), never under the final one.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rpart.exists() {
        assert!(Instant::now() < deadline, "no part file kept");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(read(&s.root().join("big.bin")), b"the old version");
    let part_meta = fs::metadata(&rpart).unwrap();
    assert!(part_meta.len() > 0);

    let o = s.ftp_cp(&args!["--resume", &local, s.ftp_url("")]);
    assert_ok(&o, "resume upload");
    assert_eq!(hash_file(&s.root().join("big.bin")), want);
    assert!(!rpart.exists());
    // APPE wrote on in place, and RNTO moved that same file to its name
    // (a STOR from 0 would have made a new one).
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        fs::metadata(s.root().join("big.bin")).unwrap().ino(),
        part_meta.ino(),
        "continued with APPE, not uploaded again"
    );
    no_upload_leftovers(&s.root());
}

#[test]
fn sigterm_closes_the_ftp_listener_and_idle_sessions_after_the_grace() {
    use std::io::{BufRead, BufReader};
    use std::net::TcpStream;
    let mut s = FerryServe::start_ftp(&["--grace", "1"]);
    let port = s.ftp_port.unwrap();
    // An idle control connection: greeted, then silent.
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut greeting = String::new();
    r.read_line(&mut greeting).unwrap();
    assert!(greeting.starts_with("220 "), "{greeting}");
    let o = s.sigterm(Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(0), "{}", describe(&o));
    let err = stderr_text(&o);
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(err.contains("closing 1 connection"), "{err}");
    // Gone: the session is closed and the listener too.
    let mut rest = String::new();
    assert_eq!(r.read_line(&mut rest).unwrap_or(0), 0, "{rest}");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

/// The congestion control algorithms `ss -tinp` shows for the established
/// TCP connections of process `pid` (one entry per connection).
fn congestion_of(pid: u32) -> Vec<String> {
    let o = Command::new("ss")
        .args(["-tinpH", "state", "established"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let owner = format!("pid={pid},");
    let known = [
        "reno", "cubic", "bbr", "bbr2", "bbr3", "dctcp", "htcp", "vegas",
    ];
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains(&owner))
        .map(|(i, _)| {
            let info = lines.get(i + 1).copied().unwrap_or_default();
            info.split_whitespace()
                .find(|t| known.contains(t))
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

/// ferry serve's data connections get `--congestion` as its control
/// connections do (libunftp opens them; vendor/libunftp/FERRY-PATCH.md,
/// "A hook on data connections' sockets"). While curl downloads slowly,
/// both of ferry serve's connections, control and data, use the chosen
/// algorithm (reno, which every kernel has; not the system's default).
#[test]
fn data_connections_get_the_chosen_congestion_control() {
    need!("curl");
    need!("ss");
    let s = FerryServe::start_ftp(&["--congestion", "reno"]);
    let body = make_file(&s.root().join("slow.bin"), 2 * MIB, 3);
    let out = tempdir();
    let got = out.path().join("slow.bin");
    let mut curl = Command::new("curl")
        .args(["-sS", "--ssl-reqd", "--limit-rate", "400K", "--cacert"])
        .arg(s.cert_pem())
        .args(["-u", &login(&s), "-o"])
        .arg(&got)
        .arg(s.ftp_url("slow.bin"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline && seen.len() < 2 {
        seen = congestion_of(s.pid());
        thread::sleep(Duration::from_millis(100));
    }
    assert!(curl.wait().unwrap().success(), "curl failed");
    assert_eq!(hash_file(&got), body);
    assert_eq!(
        seen,
        vec!["reno".to_string(); 2],
        "ferry serve's control and data connections during the download"
    );
}

/// `count` ports in a row outside Linux's ephemeral range (so that no
/// connection of this host takes them meanwhile), `held` of them bound
/// by listeners here for as long as the returned sockets live: the first
/// port and the listeners.
fn passive_range_mostly_taken(count: u16, held: u16) -> (u16, Vec<std::net::TcpListener>) {
    for lo in (61_000u16..65_000).step_by(97) {
        let taken: Vec<_> = (lo..lo + held)
            .map_while(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        let free =
            (lo + held..lo + count).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if taken.len() == usize::from(held) && free {
            return (lo, taken);
        }
    }
    panic!("no {count} free ports in a row in 61000-65000");
}

/// EPSV binds a random port of the passive range. On one host the
/// client's own connections hold ports there, and libunftp gave up after
/// nine taken ones with `425 No data connection established` (about one
/// EPSV in 5,000 after a few thousand small uploads on loopback). With
/// two thirds of the range held, every one of 200 files still gets its
/// data connection at the first try (vendor/libunftp/FERRY-PATCH.md).
#[test]
fn a_mostly_taken_passive_range_still_gives_every_file_a_port() {
    let (lo, _held) = passive_range_mostly_taken(24, 16);
    let range = format!("{lo}-{}", lo + 23);
    let s = FerryServe::start_ftp(&["--writable", "--ftp-passive-ports", &range]);
    let src = tempdir();
    let files = src.path().join("files");
    fs::create_dir(&files).unwrap();
    for i in 0..200u64 {
        make_file(&files.join(format!("f{i:03}")), 1000, i);
    }
    // One file at a time: one EPSV a file, 200 in all (9 tries each
    // failed 2.6% of them with 16 of 24 ports held).
    let o = s.ftp_cp(&args!["-r", "-P", "1", &files, s.ftp_url("")]);
    assert_ok(&o, "put -r with the passive range mostly taken");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("425"),
        "a transfer was refused a data port: {err}"
    );
    assert_same_tree(&files, &s.root().join("files"), Cmp::default(), "put -r");
}
