//! Copies between two remotes, and local to local, through the engine
//! (docs/internals/engine.md): OpenSSH's sshd to ferry serve and back,
//! nginx (HTTPS) to sshd, sshd to ferry serve over HTTPS (PUT), vsftpd to
//! ferry serve, sshd to itself (server-side `copy-data`), with -r and -p;
//! and the library example cancelling a copy between two servers. Every
//! byte is compared (blake3); no timing is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use common::nginx::nginx_or_skip;
use common::serve::FerryServe;
use common::vsftpd::vsftpd_or_skip;
use common::*;
use ferry_bench::servers::VsftpdOptions;

const MIB: u64 = 1024 * 1024;

fn ferry_cp(home: &Path, config: &Path, args: &[OsString]) -> std::process::Output {
    let mut all = args!["cp", "-q", "-F", config];
    all.extend(args.iter().cloned());
    ferry_in(home, &all, &[])
}

#[test]
fn sftp_to_sftp_between_two_servers_both_ways() {
    let sshd = Sshd::start();
    let serve = FerryServe::start(&["--writable"]);
    let work = tempdir();
    let config = serve.config_with_sshd(&sshd, work.path());

    // A big file (split into ranges over connections) and a tree.
    let src = sshd.mkdir("r2r-src");
    let want = make_file(&src.join("big.bin"), 40 * MIB + 123, 7);
    make_odd_tree(&src.join("tree"), 11);

    let out = ferry_cp(
        work.path(),
        &config,
        &args![sshd.url(src.join("big.bin")), "sftp://ferry-serve/big.bin"],
    );
    assert_ok(&out, "sshd -> ferry serve, one file");
    assert_file_hash(
        &serve.root().join("big.bin"),
        &want,
        "big.bin on ferry serve",
    );
    assert!(part_files(&serve.root()).is_empty());

    let out = ferry_cp(
        work.path(),
        &config,
        &args![
            "-r",
            "-p",
            sshd.url(src.join("tree")),
            "sftp://ferry-serve/"
        ],
    );
    assert_ok(&out, "sshd -> ferry serve, -r -p");
    assert_same_tree(
        &src.join("tree"),
        &serve.root().join("tree"),
        Cmp {
            modes: false,
            mtimes: true,
        },
        "tree",
    );

    // And back, into a new directory on sshd.
    let back = sshd.mkdir("r2r-back");
    let out = ferry_cp(
        work.path(),
        &config,
        &args![
            "-r",
            "--json",
            "sftp://ferry-serve/tree",
            sshd.url(back.join("copy"))
        ],
    );
    assert_ok(&out, "ferry serve -> sshd, -r");
    assert_same_tree(
        &src.join("tree"),
        &back.join("copy"),
        Cmp::default(),
        "tree back",
    );
    assert!(
        json_field(&out, "protocol").contains("sftp"),
        "{}",
        stdout_text(&out)
    );
}

#[test]
fn sftp_within_one_server_copies_on_the_server() {
    let sshd = Sshd::start();
    let src = sshd.mkdir("same-src");
    let want = make_file(&src.join("f.bin"), 5 * MIB, 3);
    let dst = sshd.mkdir("same-dst");
    let out = sshd.cp(&args![
        sshd.url(src.join("f.bin")),
        sshd.url(dst.join("g.bin"))
    ]);
    assert_ok(&out, "sshd -> same sshd");
    assert_file_hash(&dst.join("g.bin"), &want, "server-side copy");
    assert!(part_files(&dst).is_empty());
}

#[test]
fn https_to_sftp_and_sftp_to_https() {
    let Some(nginx) = nginx_or_skip("https_to_sftp_and_sftp_to_https") else {
        return;
    };
    let sshd = Sshd::start();
    let www = nginx.www().join("set");
    fs::create_dir_all(www.join("sub")).unwrap();
    let mut want = Vec::new();
    for i in 0..20u64 {
        let p = www.join(if i % 2 == 0 {
            format!("f{i}.bin")
        } else {
            format!("sub/f {i}.bin")
        });
        want.push((p.clone(), make_file(&p, 100_000 + i * 777, i)));
    }
    let dst = sshd.mkdir("from-nginx");
    let out = sshd.cp(&args![
        "-r",
        "--pin",
        nginx.pin(),
        nginx.https("/set/"),
        sshd.url(dst.join("set"))
    ]);
    assert_ok(&out, "nginx -> sshd, -r");
    assert_same_tree(&www, &dst.join("set"), Cmp::default(), "nginx tree on sshd");

    // sshd -> ferry serve over HTTPS (PUT): the token and the pin.
    let serve = FerryServe::start(&["--writable"]);
    let big = sshd.mkdir("to-https");
    let hash = make_file(&big.join("b.bin"), 9 * MIB + 5, 9);
    let mut a = args![
        "--pin",
        format!("sha256:{}", cert_sha256(&serve.cert_pem())),
        "--token",
        serve.token.clone(),
        sshd.url(big.join("b.bin")),
        serve.https_url("/up/b.bin"),
    ];
    a.insert(0, OsString::from("-q"));
    let out = sshd.cp(&a);
    assert_ok(&out, "sshd -> ferry serve over HTTPS");
    assert_file_hash(&serve.root().join("up/b.bin"), &hash, "PUT from sftp");
}

#[test]
fn ftp_to_sftp() {
    let Some(ftpd) = vsftpd_or_skip("ftp_to_sftp", VsftpdOptions::default()) else {
        return;
    };
    let serve = FerryServe::start(&["--writable"]);
    let tree = ftpd.root().join("pub");
    fs::create_dir_all(tree.join("a b")).unwrap();
    make_file(&tree.join("one.bin"), 3 * MIB, 1);
    make_file(&tree.join("a b/two.txt"), 1234, 2);
    make_file(&tree.join("zero"), 0, 3);
    let out = serve.cp(&args!["-r", ftpd.url("pub/"), serve.url("/ftp-copy")]);
    assert_ok(&out, "vsftpd -> ferry serve");
    assert_same_tree(
        &tree,
        &serve.root().join("ftp-copy"),
        Cmp::default(),
        "ftp tree",
    );
}

#[test]
fn local_to_local() {
    let d = tempdir();
    let src = d.path().join("src");
    make_odd_tree(&src, 5);
    let out = ferry(&args!["cp", "-q", "-r", "-p", &src, d.path().join("dst")]);
    assert_ok(&out, "local -> local");
    assert_same_tree(
        &src,
        &d.path().join("dst"),
        Cmp {
            modes: false,
            mtimes: true,
        },
        "local copy",
    );
}

/// A log whose reader went away (`ferry cp -vv ... 2>&1 | head`) loses
/// its lines, not the copy: writing to the closed stderr once panicked in
/// the log's fallback and left ferry waiting for good.
#[test]
fn a_closed_stderr_does_not_stop_the_copy() {
    let d = tempdir();
    let src = d.path().join("src");
    make_odd_tree(&src, 20);
    let args = args!["cp", "-q", "-r", &src, d.path().join("dst")];
    let status = ferry_closed_stderr(d.path(), &args, &[("FERRY_LOG", "trace")]).status;
    assert!(status.success(), "{status:?}");
    assert_same_tree(
        &src,
        &d.path().join("dst"),
        Cmp {
            modes: false,
            mtimes: false,
        },
        "local copy with a closed stderr",
    );
    // A failure said on a closed stderr keeps its own exit code (5: a
    // local error), not a panic's 101.
    let args = args!["cp", d.path().join("missing"), d.path().join("dst2")];
    let status = ferry_closed_stderr(d.path(), &args, &[]).status;
    assert_eq!(status.code(), Some(5), "{status:?}");
}

/// The library example: one JSON event per line, cancelled after 8 MiB of
/// a copy between two servers; nothing under the final name.
#[test]
fn example_cancels_a_remote_to_remote_copy() {
    let sshd = Sshd::start();
    let serve = FerryServe::start(&["--writable"]);
    let work = tempdir();
    let config = serve.config_with_sshd(&sshd, work.path());
    let src = sshd.mkdir("cancel-src");
    make_file(&src.join("big.bin"), 96 * MIB, 4);
    let example = events_example();
    // The example reads the ssh config from HOME (no -F flag): link it.
    let home = work.path().join("home");
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::copy(&config, home.join(".ssh/config")).unwrap();
    let out = Command::new(&example)
        .env("HOME", &home)
        .env_remove("SSH_AUTH_SOCK")
        .args([
            sshd.url(src.join("big.bin")).as_str(),
            "sftp://ferry-serve/big.bin",
            "--cancel-after",
            &(8 * MIB).to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "cancelled copy must fail: {text}");
    assert!(text.lines().all(|l| l.starts_with("{\"type\":")), "{text}");
    assert!(text.contains("\"type\":\"planned\""), "{text}");
    assert!(text.contains("\"kind\":\"Cancelled\""), "{text}");
    assert!(
        !serve.root().join("big.bin").exists(),
        "a cancelled copy left a final file"
    );
}

/// ferry serve offers `copy-data`: a copy between two of its paths is
/// made on the server (copy_file_range), and is byte-exact.
#[test]
fn ferry_serve_copies_on_the_server() {
    let serve = FerryServe::start(&["--writable"]);
    let want = make_file(&serve.root().join("a.bin"), 7 * MIB + 3, 8);
    fs::create_dir_all(serve.root().join("d")).unwrap();
    let out = serve.cp(&args!["-v", serve.url("/a.bin"), serve.url("/d/b.bin")]);
    assert_ok(&out, "ferry serve -> same ferry serve");
    assert!(
        stderr_text(&out).contains("copy-data"),
        "{}",
        stderr_text(&out)
    );
    assert_file_hash(
        &serve.root().join("d/b.bin"),
        &want,
        "copy-data on ferry serve",
    );
    assert!(part_files(&serve.root().join("d")).is_empty());
}
