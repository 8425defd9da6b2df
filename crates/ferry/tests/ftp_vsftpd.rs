//! `ferry cp` over FTP and FTPS against a real vsftpd on loopback
//! (tests/common/vsftpd.rs): files and trees both ways (odd names, empty
//! files, a 1000-entry directory), -P, --streams ranges, resume after the
//! server was killed, 550/553 and login errors, explicit and implicit TLS
//! with --cacert and --pin and a refused certificate. Every file is
//! compared byte for byte (blake3); no timing is asserted. Skipped, with a
//! message, when vsftpd is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::vsftpd::{vsftpd_or_skip, FTP_PASS};
use common::*;
use ferry_bench::servers::VsftpdOptions;

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// A tree with the names that break naive clients: spaces, unicode, a
/// leading dot, an empty file, an empty directory, and 1000 entries in one
/// directory.
fn odd_tree(root: &Path) {
    fs::create_dir_all(root.join("sub dir/deeper")).unwrap();
    fs::create_dir_all(root.join("empty dir")).unwrap();
    fs::create_dir_all(root.join("many")).unwrap();
    make_file(&root.join("with space.bin"), 300_000, 1);
    make_file(&root.join("ünïcødé ✓.txt"), 1234, 2);
    make_file(&root.join(".hidden"), 10, 3);
    make_file(&root.join("zero"), 0, 4);
    make_file(&root.join("sub dir/deeper/2 MiB + 1"), 2 * MIB + 1, 5);
    for i in 0..1000 {
        make_file(&root.join(format!("many/f{i:04}")), 100 + i, 100 + i);
    }
}

#[test]
fn get_put_and_trees_with_odd_names_are_byte_exact() {
    let Some(ftpd) = vsftpd_or_skip(
        "get_put_and_trees_with_odd_names_are_byte_exact",
        VsftpdOptions::default(),
    ) else {
        return;
    };
    let tree = ftpd.root().join("tree");
    odd_tree(&tree);
    let big = make_file(&ftpd.root().join("big.bin"), 9 * MIB + 7, 9);
    let out = tempdir();

    // One file into a directory, then under another name.
    let o = cp(&args(&["--json", &ftpd.url("big.bin"), &s(out.path())]));
    assert_ok(&o, "get into dir");
    assert_eq!(json_field(&o, "protocol"), "ftp");
    assert_eq!(hash_file(&out.path().join("big.bin")), big);
    let o = cp(&args(&[
        &ftpd.url("big.bin"),
        &s(&out.path().join("renamed")),
    ]));
    assert_ok(&o, "get to a name");
    assert_eq!(hash_file(&out.path().join("renamed")), big);

    // Several sources into a directory, like cp.
    let several = out.path().join("several");
    fs::create_dir(&several).unwrap();
    let o = cp(&args(&[
        &ftpd.url("big.bin"),
        &ftpd.url("tree/zero"),
        &ftpd.url("tree/with%20space.bin"),
        &s(&several),
    ]));
    assert_ok(&o, "several sources");
    assert_eq!(hash_file(&several.join("big.bin")), big);
    assert_eq!(fs::metadata(several.join("zero")).unwrap().len(), 0);
    assert!(several.join("with space.bin").is_file());

    // The tree down (into an existing directory: lands as tree/).
    let o = cp(&args(&["-r", "--json", &ftpd.url("tree"), &s(out.path())]));
    assert_ok(&o, "get -r");
    assert_eq!(json_field(&o, "files"), "1005");
    assert_same_tree(&tree, &out.path().join("tree"), Cmp::default(), "get -r");
    // A directory without -r is refused.
    let o = cp(&args(&[&ftpd.url("tree"), &s(out.path())]));
    assert_code(&o, 2, "dir without -r");
    assert!(stderr_text(&o).contains("use -r"), "{}", describe(&o));

    // And up again, to a new name (cp -r semantics), and into a directory.
    fs::create_dir(ftpd.root().join("up")).unwrap();
    let o = cp(&args(&[
        "-r",
        &s(&out.path().join("tree")),
        &ftpd.url("up/copy"),
    ]));
    assert_ok(&o, "put -r to a new name");
    assert_same_tree(
        &tree,
        &ftpd.root().join("up/copy"),
        Cmp::default(),
        "put -r",
    );
    let o = cp(&args(&[
        "-r",
        "--json",
        &s(&out.path().join("tree")),
        &ftpd.url("up/"),
    ]));
    assert_ok(&o, "put -r into a dir");
    assert_same_tree(
        &tree,
        &ftpd.root().join("up/tree"),
        Cmp::default(),
        "put -r into",
    );
    // Into directories that are not there yet: made from the deepest
    // one that is (up/), level by level down.
    let o = cp(&args(&["-r", &s(&several), &ftpd.url("up/new/deeper/")]));
    assert_ok(&o, "put -r into new directories");
    assert_eq!(
        hash_file(&ftpd.root().join("up/new/deeper/several/big.bin")),
        big
    );
    // Single files up, replacing an old one; no part file is left.
    fs::write(ftpd.root().join("up/big.bin"), b"old").unwrap();
    let o = cp(&args(&[
        &s(&out.path().join("big.bin")),
        &s(&out.path().join("renamed")),
        &ftpd.url("up/"),
    ]));
    assert_ok(&o, "put several");
    assert_eq!(hash_file(&ftpd.root().join("up/big.bin")), big);
    assert_eq!(hash_file(&ftpd.root().join("up/renamed")), big);
    let leftovers: Vec<_> = fs::read_dir(ftpd.root().join("up"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("ferry-part"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // An absolute path (%2F), as curl writes it.
    let abs = format!(
        "ftp://127.0.0.1:{}/%2F{}",
        ftpd.port(),
        s(&ftpd.root().join("big.bin")).trim_start_matches('/')
    );
    let o = cp(&args(&[&abs, &s(&out.path().join("abs"))]));
    assert_ok(&o, "absolute path");
    assert_eq!(hash_file(&out.path().join("abs")), big);
}

#[test]
fn parallel_files_and_streams_ranges_verify_every_byte() {
    let Some(ftpd) = vsftpd_or_skip(
        "parallel_files_and_streams_ranges_verify_every_byte",
        VsftpdOptions::default(),
    ) else {
        return;
    };
    // Not a multiple of the range size: the last range is short.
    let big = make_file(&ftpd.root().join("big.bin"), 40 * MIB + 12_345, 7);
    let out = tempdir();
    for n in ["2", "4", "7"] {
        let dst = out.path().join(format!("s{n}"));
        let o = cp(&args(&[
            "--json",
            "--streams",
            n,
            &ftpd.url("big.bin"),
            &s(&dst),
        ]));
        assert_ok(&o, &format!("--streams {n}"));
        // Connections opened: one per range, less any a finished range
        // handed on before the last range asked (a busy machine).
        let (opened, asked): (usize, usize) = (
            json_field(&o, "streams").parse().expect("streams"),
            n.parse().expect("n"),
        );
        assert!(
            (2..=asked).contains(&opened),
            "--streams {n}: {opened} connection(s)"
        );
        assert_eq!(hash_file(&dst), big, "--streams {n}");
    }
    // -P: 30 files over 4 connections, both ways.
    fs::create_dir(ftpd.root().join("set")).unwrap();
    let mut hashes = Vec::new();
    for i in 0..30 {
        hashes.push(make_file(
            &ftpd.root().join(format!("set/f{i}")),
            (i as u64 + 1) * 37_000,
            i as u64,
        ));
    }
    let o = cp(&args(&[
        "-r",
        "-P",
        "4",
        "--json",
        &ftpd.url("set"),
        &s(out.path()),
    ]));
    assert_ok(&o, "-P 4 get");
    // Connections are opened as files need them and reused: at most -P
    // (small files that finish fast may need fewer).
    let conns: usize = json_field(&o, "streams").parse().unwrap();
    assert!((1..=4).contains(&conns), "-P 4 opened {conns} connections");
    for (i, h) in hashes.iter().enumerate() {
        assert_eq!(hash_file(&out.path().join(format!("set/f{i}"))), *h, "f{i}");
    }
    let o = cp(&args(&[
        "-r",
        "-P",
        "4",
        &s(&out.path().join("set")),
        &ftpd.url("back"),
    ]));
    assert_ok(&o, "-P 4 put");
    assert_same_tree(
        &ftpd.root().join("set"),
        &ftpd.root().join("back"),
        Cmp::default(),
        "-P 4 put",
    );
}

/// A server that allows two sessions from one address: the logins it
/// refuses (`421` at the greeting) hold the pool at what it accepted, and
/// every file waits its turn instead of failing (before, 49 of 200 files
/// failed against a limit of 3 at -P 8).
#[test]
fn a_server_connection_limit_holds_the_pool_and_every_file_arrives() {
    let Some(ftpd) = vsftpd_or_skip(
        "a_server_connection_limit_holds_the_pool_and_every_file_arrives",
        VsftpdOptions {
            max_per_ip: 2,
            ..VsftpdOptions::default()
        },
    ) else {
        return;
    };
    let src = tempdir();
    fs::create_dir(src.path().join("set")).unwrap();
    for i in 0..40 {
        make_file(
            &src.path().join(format!("set/f{i}")),
            (i as u64 + 1) * 3_000,
            i as u64,
        );
    }
    let o = cp(&args(&[
        "-r",
        "-P",
        "6",
        "--json",
        &s(&src.path().join("set")),
        &ftpd.url("set"),
    ]));
    assert_ok(&o, "-P 6 put to a server allowing 2");
    let conns: usize = json_field(&o, "streams").parse().unwrap();
    assert!((1..=2).contains(&conns), "{conns} connections logged in");
    assert_same_tree(
        &src.path().join("set"),
        &ftpd.root().join("set"),
        Cmp::default(),
        "put",
    );
    let out = tempdir();
    let o = cp(&args(&["-r", "-P", "6", &ftpd.url("set"), &s(out.path())]));
    assert_ok(&o, "-P 6 get from a server allowing 2");
    assert_same_tree(
        &src.path().join("set"),
        &out.path().join("set"),
        Cmp::default(),
        "get",
    );
}

/// Wait until `path` holds at least `n` bytes (the copy is under way).
fn wait_for_bytes(path: &Path, n: u64, child: &mut FerryChild) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if fs::metadata(path).map(|m| m.len()).unwrap_or(0) >= n {
            return;
        }
        assert!(
            child.try_wait().is_none(),
            "ferry ended before {} had {n} bytes",
            path.display()
        );
        assert!(Instant::now() < deadline, "{} never grew", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn server_killed_mid_copy_keeps_old_file_then_resume_completes() {
    // 8 MB/s per transfer: a 24 MiB file takes 3 s, time to kill vsftpd.
    let Some(mut ftpd) = vsftpd_or_skip(
        "server_killed_mid_copy_keeps_old_file_then_resume_completes",
        VsftpdOptions {
            max_rate: 8_000_000,
            ..Default::default()
        },
    ) else {
        return;
    };
    let want = make_file(&ftpd.root().join("big.bin"), 24 * MIB + 5, 11);
    let home = tempdir();
    let out = tempdir();
    let dst = out.path().join("big.bin");
    fs::write(&dst, b"the old version").unwrap();
    let part = out.path().join(".big.bin.ferry-part");

    // Download, one stream: killed at >= 4 MiB.
    let mut child = FerryChild::spawn(
        home.path(),
        &["cp", "-q", &ftpd.url("big.bin"), &s(&dst)],
        &[],
    );
    wait_for_bytes(&part, 4 * MIB, &mut child);
    ftpd.kill();
    let o = child.wait();
    assert_code(&o, 1, "killed server");
    let err = stderr_text(&o);
    assert!(err.contains(&ftpd.url("big.bin")), "names the URL: {err}");
    assert!(err.contains("--resume"), "says what to do: {err}");
    assert_eq!(fs::read(&dst).unwrap(), b"the old version", "old file kept");
    let had = fs::metadata(&part).unwrap().len();
    assert!((4 * MIB..24 * MIB).contains(&had), "partial: {had}");

    ftpd.restart(0);
    let o = ferry_in(
        home.path(),
        &[
            "cp",
            "-q",
            "--resume",
            "--json",
            &ftpd.url("big.bin"),
            &s(&dst),
        ],
        &[],
    );
    assert_ok(&o, "resume");
    assert_eq!(hash_file(&dst), want);
    let moved: f64 = json_field(&o, "bytes").parse().unwrap();
    assert!(
        moved <= (24 * MIB + 5 - had) as f64,
        "resumed, not restarted: {moved}"
    );
    assert!(!part.exists());

    // The same with --streams 3: ranges in flight when the server dies.
    // 2 MB/s per connection: three of them move the 24 MiB in about 4 s,
    // so the kill below lands mid-copy (at 8 MB/s each the copy had
    // finished on a quiet machine before the kill).
    ftpd.restart(2_000_000);
    let dst3 = out.path().join("s3.bin");
    let part3 = out.path().join(".s3.bin.ferry-part");
    let child = FerryChild::spawn(
        home.path(),
        &[
            "cp",
            "-q",
            "--streams",
            "3",
            &ftpd.url("big.bin"),
            &s(&dst3),
        ],
        &[],
    );
    // The part file is sized at once: wait for the record instead, then a
    // second for data to flow.
    let journal = out.path().join(".s3.bin.ferry-resume");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !journal.exists() {
        assert!(Instant::now() < deadline, "no resume record");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1000));
    ftpd.kill();
    let o = child.wait();
    assert_code(&o, 1, "killed server, ranges");
    assert!(!dst3.exists(), "no final file after a failed copy");
    assert!(part3.exists());
    ftpd.restart(0);
    let o = ferry_in(
        home.path(),
        &[
            "cp",
            "-q",
            "--resume",
            "--streams",
            "3",
            "--json",
            &ftpd.url("big.bin"),
            &s(&dst3),
        ],
        &[],
    );
    assert_ok(&o, "resume ranges");
    assert_eq!(hash_file(&dst3), want);
    let moved: f64 = json_field(&o, "bytes").parse().unwrap();
    assert!(moved < (24 * MIB) as f64, "ranges resumed: {moved}");

    // Upload killed mid-way: the server keeps .NAME.ferry-part, not a
    // truncated NAME; --resume continues it with APPE.
    ftpd.restart(8_000_000);
    fs::create_dir_all(ftpd.root().join("up")).unwrap();
    fs::write(ftpd.root().join("up/big.bin"), b"old remote").unwrap();
    let rpart = ftpd.root().join("up/.big.bin.ferry-part");
    let mut child = FerryChild::spawn(home.path(), &["cp", "-q", &s(&dst), &ftpd.url("up/")], &[]);
    wait_for_bytes(&rpart, 4 * MIB, &mut child);
    ftpd.kill();
    let o = child.wait();
    assert_code(&o, 1, "killed server, upload");
    assert!(stderr_text(&o).contains("--resume"), "{}", describe(&o));
    assert_eq!(
        fs::read(ftpd.root().join("up/big.bin")).unwrap(),
        b"old remote"
    );
    let had = fs::metadata(&rpart).unwrap().len();
    ftpd.restart(0);
    let o = ferry_in(
        home.path(),
        &["cp", "-q", "--resume", &s(&dst), &ftpd.url("up/")],
        &[],
    );
    assert_ok(&o, "resume upload");
    assert_eq!(hash_file(&ftpd.root().join("up/big.bin")), want);
    assert!(!rpart.exists());
    assert!(had > 0);
}

/// A file on an FTP lane (a whole file of up to 16 MiB, its job run on
/// the lane's own thread, which nothing watches while it runs): its bytes
/// are counted as they come (the example cancels on a progress event),
/// and the cancel reaches it mid-file, leaving nothing under its final
/// name. Through the library's example: 12 MB at 1 MB/s (12 s whole),
/// cancelled after 1 MiB.
#[test]
fn a_lane_file_counts_its_bytes_and_a_cancel_does_not_wait_for_it() {
    let Some(ftpd) = vsftpd_or_skip(
        "a_lane_file_counts_its_bytes_and_a_cancel_does_not_wait_for_it",
        VsftpdOptions {
            max_rate: 1_000_000,
            ..Default::default()
        },
    ) else {
        return;
    };
    make_file(&ftpd.root().join("slow.bin"), 12_000_000, 12);
    let out = tempdir();
    let o = Command::new(events_example())
        .args([
            ftpd.url("slow.bin").as_str(),
            &format!("{}/", out.path().display()),
            "--cancel-after",
            &MIB.to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "a cancelled copy must fail: {text}");
    assert!(text.contains("\"kind\":\"Cancelled\""), "{text}");
    // Counted while the file ran: the cancel came from a progress event.
    let report = text
        .lines()
        .find(|l| l.starts_with("{\"type\":\"report\""))
        .unwrap_or_else(|| panic!("no report: {text}"));
    let secs: f64 = report
        .split("\"seconds\":")
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no seconds: {report}"));
    assert!(secs < 8.0, "the cancel waited for the file: {report}");
    assert!(
        !out.path().join("slow.bin").exists(),
        "a final file was left"
    );
    assert_eq!(fs::read_dir(out.path()).unwrap().count(), 0, "{text}");
}

#[test]
fn refusals_name_the_url_and_the_reply() {
    let Some(ftpd) = vsftpd_or_skip(
        "refusals_name_the_url_and_the_reply",
        VsftpdOptions {
            password: Some(FTP_PASS.into()),
            ..Default::default()
        },
    ) else {
        return;
    };
    let want = make_file(&ftpd.root().join("f.bin"), 100_000, 1);
    let out = tempdir();
    let user = |u: &str| format!("ftp://{u}@127.0.0.1:{}/", ftpd.port());

    // Wrong password: exit 3, the server's 530 in the message.
    let url = format!("{}f.bin", user(&format!("anonymous:{}", "wrong")));
    let o = cp(&args(&[&url, &s(out.path())]));
    assert_code(&o, 3, "wrong password");
    assert!(stderr_text(&o).contains("530"), "{}", describe(&o));
    assert!(
        !stderr_text(&o).contains("wrong"),
        "password shown: {}",
        describe(&o)
    );
    // No password at all (anonymous's default is not on the list).
    let o = cp(&args(&[&ftpd.url("f.bin"), &s(out.path())]));
    assert_code(&o, 3, "anonymous without the password");

    // The right one from the URL, -u, FERRY_PASSWORD and ~/.netrc.
    let dst = out.path().join("f.bin");
    let url = format!("{}f.bin", user(&format!("anonymous:{FTP_PASS}")));
    assert_ok(&cp(&args(&[&url, &s(&dst)])), "password in the URL");
    assert_eq!(hash_file(&dst), want);
    let o = cp(&args(&[
        "-u",
        &format!("anonymous:{FTP_PASS}"),
        &ftpd.url("f.bin"),
        &s(&dst),
    ]));
    assert_ok(&o, "-u");
    let home = tempdir();
    let o = ferry_in(
        home.path(),
        &["cp", "-q", &format!("{}f.bin", user("anonymous")), &s(&dst)],
        &[("FERRY_PASSWORD", FTP_PASS)],
    );
    assert_ok(&o, "FERRY_PASSWORD");
    fs::write(
        home.path().join(".netrc"),
        format!("machine 127.0.0.1 login anonymous password {FTP_PASS}\n"),
    )
    .unwrap();
    let o = ferry_in(
        home.path(),
        &["cp", "-q", &ftpd.url("f.bin"), &s(&dst)],
        &[],
    );
    assert_ok(&o, "netrc");

    // 550: no such file. Exit 4, the URL, nothing created.
    let o = ferry_in(
        home.path(),
        &["cp", "-q", &ftpd.url("nope/missing.bin"), &s(out.path())],
        &[],
    );
    assert_code(&o, 4, "missing file");
    let err = stderr_text(&o);
    assert!(err.contains(&ftpd.url("nope/missing.bin")), "{err}");
    assert!(err.contains("no such file") && err.contains("550"), "{err}");
    assert!(!out.path().join("missing.bin").exists());
    assert!(!out.path().join(".missing.bin.ferry-part").exists());
    // 550 in the middle of a tree (a dangling link: vsftpd cannot open
    // it): that file fails with the server's text, the others arrive.
    fs::create_dir(ftpd.root().join("t")).unwrap();
    make_file(&ftpd.root().join("t/good.bin"), 5000, 2);
    std::os::unix::fs::symlink("/nonexistent/target", ftpd.root().join("t/dangling")).unwrap();
    let tout = tempdir();
    let o = ferry_in(
        home.path(),
        &["cp", "-q", "-r", &ftpd.url("t"), &s(tout.path())],
        &[],
    );
    assert_code(&o, 4, "550 inside a tree");
    let err = stderr_text(&o);
    assert!(
        err.contains(&format!(
            "{}/dangling: 550 Failed to open file.",
            ftpd.url("t")
        )),
        "{err}"
    );
    assert!(tout.path().join("t/good.bin").is_file());
    assert!(!tout.path().join("t/dangling").exists());
    assert!(!tout.path().join("t/.dangling.ferry-part").exists());

    // A directory without -r: refused before anything is written.
    fs::create_dir(ftpd.root().join("adir")).unwrap();
    let o = ferry_in(
        home.path(),
        &["cp", "-q", &ftpd.url("adir"), &s(out.path())],
        &[],
    );
    assert_code(&o, 2, "directory without -r");
    // Upload to a file name in a directory that does not exist: 553 from
    // the server (as sftp's put into a missing directory: exit 4).
    let o = ferry_in(
        home.path(),
        &["cp", "-q", &s(&dst), &ftpd.url("no/such/dir/f.bin")],
        &[],
    );
    assert_code(&o, 4, "upload into a missing directory");
    let err = stderr_text(&o);
    assert!(err.contains("553") && err.contains("no/such/dir"), "{err}");
    assert!(!ftpd.root().join("no").exists());
    // A destination ending in `/` is a directory to copy into, created
    // when missing, on every protocol.
    let o = ferry_in(
        home.path(),
        &["cp", "-q", &s(&dst), &ftpd.url("made/here/")],
        &[],
    );
    assert_ok(&o, "upload into a new directory");
    assert!(ftpd.root().join("made/here/f.bin").is_file());
}

#[test]
fn ftps_explicit_and_implicit_with_cacert_pin_and_a_refused_certificate() {
    let Some(tls) = vsftpd_or_skip(
        "ftps_explicit_and_implicit_with_cacert_pin_and_a_refused_certificate",
        VsftpdOptions {
            tls: true,
            ..Default::default()
        },
    ) else {
        return;
    };
    let want = make_file(&tls.root().join("f.bin"), 5 * MIB + 3, 21);
    let out = tempdir();
    let dst = out.path().join("f.bin");
    let cacert = s(&tls.cert());

    let o = cp(&args(&[
        "--ssl-reqd",
        "--json",
        "--cacert",
        &cacert,
        "--streams",
        "2",
        &tls.url("f.bin"),
        &s(&dst),
    ]));
    assert_ok(&o, "--ssl-reqd --cacert");
    assert_eq!(json_field(&o, "protocol"), "ftps");
    assert_eq!(hash_file(&dst), want);
    fs::create_dir(tls.root().join("up")).unwrap();
    let o = cp(&args(&[
        "--ssl-reqd",
        "--pin",
        &tls.pin(),
        &s(&dst),
        &tls.url("up/"),
    ]));
    assert_ok(&o, "--ssl-reqd --pin upload");
    assert_eq!(hash_file(&tls.root().join("up/f.bin")), want);

    // Not trusted: no --cacert, or a wrong pin. Exit 3, nothing written.
    let other = out.path().join("other");
    let o = cp(&args(&["--ssl-reqd", &tls.url("f.bin"), &s(&other)]));
    assert_code(&o, 3, "untrusted certificate");
    assert!(stderr_text(&o).contains("not trusted"), "{}", describe(&o));
    let wrong = format!("sha256:{}", "00".repeat(32));
    let o = cp(&args(&[
        "--ssl-reqd",
        "--pin",
        &wrong,
        &tls.url("f.bin"),
        &s(&other),
    ]));
    assert_code(&o, 3, "wrong pin");
    assert!(stderr_text(&o).contains("--pin"), "{}", describe(&o));
    assert!(!other.exists());
    // -k works (and warns).
    let o = cp(&args(&["--ssl-reqd", "-k", &tls.url("f.bin"), &s(&other)]));
    assert_ok(&o, "-k");
    assert!(stderr_text(&o).contains("insecure"), "{}", describe(&o));
    // This server wants TLS: plain FTP is refused at login.
    let o = cp(&args(&[&tls.url("f.bin"), &s(&other)]));
    assert_code(&o, 3, "plain login refused");
    assert!(stderr_text(&o).contains("--ssl-reqd"), "{}", describe(&o));

    // A server without TLS and --ssl-reqd: refused, never in the clear.
    let Some(plain) = vsftpd_or_skip("(plain)", VsftpdOptions::default()) else {
        return;
    };
    make_file(&plain.root().join("p.bin"), 10, 1);
    let o = cp(&args(&["--ssl-reqd", &plain.url("p.bin"), &s(&other)]));
    assert_code(&o, 1, "no AUTH TLS");
    assert!(stderr_text(&o).contains("AUTH TLS"), "{}", describe(&o));

    // Implicit TLS: ftps://.
    let Some(imp) = vsftpd_or_skip(
        "(implicit)",
        VsftpdOptions {
            implicit_tls: true,
            ..Default::default()
        },
    ) else {
        return;
    };
    let h = make_file(&imp.root().join("i.bin"), 3 * MIB, 5);
    let o = cp(&args(&[
        "--json",
        "--cacert",
        &s(&imp.cert()),
        &imp.url("i.bin"),
        &s(&out.path().join("i.bin")),
    ]));
    assert_ok(&o, "ftps://");
    assert_eq!(json_field(&o, "protocol"), "ftps");
    assert_eq!(hash_file(&out.path().join("i.bin")), h);
    let o = cp(&args(&[&imp.url("i.bin"), &s(&out.path().join("i2.bin"))]));
    assert_code(&o, 3, "ftps:// untrusted");
}

#[test]
fn bench_remote_mode_sweeps_ftp_saves_and_cleans_up() {
    let Some(ftpd) = vsftpd_or_skip(
        "bench_remote_mode_sweeps_ftp_saves_and_cleans_up",
        VsftpdOptions::default(),
    ) else {
        return;
    };
    fs::create_dir(ftpd.root().join("scratch")).unwrap();
    let home = tempdir();
    let config = s(&home.path().join(".config"));
    let o = ferry_in(
        home.path(),
        &[
            "bench",
            "--quick",
            "--save",
            "--timeout",
            "120",
            &ftpd.url("scratch"),
        ],
        &[("XDG_CONFIG_HOME", &config)],
    );
    assert_ok(&o, "ferry bench ftp://");
    let out = stdout_text(&o);
    assert!(
        out.contains("best settings") && out.contains("upload"),
        "{out}"
    );
    let hosts = fs::read_to_string(home.path().join(".config/ferry/hosts.toml")).unwrap();
    assert!(
        hosts.contains(&format!("[host.\"ftp://127.0.0.1:{}\"", ftpd.port())),
        "{hosts}"
    );
    let left: Vec<_> = fs::read_dir(ftpd.root().join("scratch"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "scratch left on the server: {left:?}");
}
