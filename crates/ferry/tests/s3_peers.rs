//! The S3 tests that run against both S3 implementations the harness
//! starts on 127.0.0.1 over TLS: versitygw (tests/common/versitygw.rs)
//! and `rclone serve s3` (tests/common/rclone_s3.rs, rclone >= 1.65), so
//! ferry is not tuned to one server's reading of the protocol (#25):
//! one PUT and multipart uploads, downloads in ranges, `-r` over keys
//! with spaces, `+`, `%`, unicode, and a sync with `--delete` and a
//! second run that copies nothing. Every byte is compared on the
//! server's disk and back; no timing is asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::path::Path;

use common::rclone_s3::{rclone_s3_or_skip, S3Peer};
use common::versitygw::{data, files_of, versitygw_or_skip};
use common::*;

const MIB: usize = 1024 * 1024;

/// `ferry CMD -q ARGS` against `peer`, HOME = `home`.
fn run(peer: &dyn S3Peer, home: &Path, cmd: &str, args: &[OsString]) -> std::process::Output {
    let mut a = args![cmd, "-q"];
    a.extend(args.iter().cloned());
    let env = peer.env();
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    ferry_in(home, &a, &envs)
}

fn put_get_small_and_multipart(peer: &dyn S3Peer) {
    let t = tempdir();
    let small = t.path().join("small.bin");
    let big = t.path().join("big.bin");
    fs::write(&small, data(1000, 1)).unwrap();
    // 23 MiB in 5 MiB parts: five parts, the last one short.
    fs::write(&big, data(23 * MIB + 7, 2)).unwrap();
    let what = peer.name();
    let o = run(
        peer,
        t.path(),
        "cp",
        &args![&small, "s3://bkt/dir/small.bin"],
    );
    assert_ok(&o, &format!("{what}: put small"));
    let o = run(
        peer,
        t.path(),
        "cp",
        &args![&big, "s3://bkt/dir/big.bin", "--s3-part-size", "5M"],
    );
    assert_ok(&o, &format!("{what}: put multipart"));
    for name in ["small.bin", "big.bin"] {
        assert_eq!(
            fs::read(peer.root().join("bkt/dir").join(name)).unwrap(),
            fs::read(t.path().join(name)).unwrap(),
            "{what}: {name} on the server"
        );
    }
    let back = t.path().join("back");
    fs::create_dir(&back).unwrap();
    // The big one is read in parallel ranges.
    let o = run(
        peer,
        t.path(),
        "cp",
        &args!["s3://bkt/dir/small.bin", "s3://bkt/dir/big.bin", &back],
    );
    assert_ok(&o, &format!("{what}: get both"));
    assert_eq!(
        fs::read(back.join("small.bin")).unwrap(),
        fs::read(&small).unwrap()
    );
    assert_eq!(
        fs::read(back.join("big.bin")).unwrap(),
        fs::read(&big).unwrap()
    );
}

fn recursive_odd_keys(peer: &dyn S3Peer) {
    let t = tempdir();
    let src = t.path().join("tree");
    let names = [
        "a b.txt",
        "plus+sign.txt",
        "100%.txt",
        "%41%20.txt",
        "sub dir/ünïcødé é.txt",
        "sub dir/deeper/x&y=z.bin",
        "日本/ファイル.dat",
    ];
    for (i, n) in names.iter().enumerate() {
        let p = src.join(n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data(100 + i * 1000, i as u8)).unwrap();
    }
    let what = peer.name();
    let o = run(peer, t.path(), "cp", &args!["-r", &src, "s3://bkt/up/"]);
    assert_ok(&o, &format!("{what}: put -r"));
    assert_eq!(
        files_of(&peer.root().join("bkt/up/tree")),
        files_of(&src),
        "{what}: on the server"
    );
    let dst = t.path().join("down");
    let o = run(peer, t.path(), "cp", &args!["-r", "s3://bkt/up/tree", &dst]);
    assert_ok(&o, &format!("{what}: get -r"));
    assert_eq!(files_of(&dst), files_of(&src), "{what}: back");
}

fn sync_twice_and_delete(peer: &dyn S3Peer) {
    let t = tempdir();
    let src = t.path().join("src");
    for (i, n) in ["a.txt", "d/b c.bin", "d/e/ü+.txt"].iter().enumerate() {
        let p = src.join(n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data(5000 + i, i as u8)).unwrap();
    }
    let what = peer.name();
    let url = "s3://bkt/s/";
    let sync = |extra: &[&str]| {
        let mut a = args!["--json"];
        a.extend(extra.iter().map(OsString::from));
        a.extend(args![&src, url]);
        run(peer, t.path(), "sync", &a)
    };
    let o = sync(&[]);
    assert_ok(&o, &format!("{what}: first sync"));
    assert_eq!(json_field(&o, "copied"), "3", "{}", describe(&o));
    let o = sync(&[]);
    assert_ok(&o, &format!("{what}: second sync"));
    assert_eq!(json_field(&o, "copied"), "0", "{what}: {}", describe(&o));
    fs::remove_file(src.join("d/b c.bin")).unwrap();
    let o = sync(&["--delete"]);
    assert_ok(&o, &format!("{what}: sync --delete"));
    assert_eq!(json_field(&o, "deleted"), "1", "{what}: {}", describe(&o));
    assert_eq!(
        files_of(&peer.root().join("bkt/s")),
        files_of(&src),
        "{what}: after --delete"
    );
}

#[test]
fn versitygw_put_get_small_and_multipart() {
    if let Some(gw) = versitygw_or_skip("versitygw_put_get_small_and_multipart", &["bkt"]) {
        put_get_small_and_multipart(&gw);
    }
}

#[test]
fn rclone_put_get_small_and_multipart() {
    if let Some(rc) = rclone_s3_or_skip("rclone_put_get_small_and_multipart", &["bkt"]) {
        put_get_small_and_multipart(&rc);
    }
}

#[test]
fn versitygw_recursive_odd_keys() {
    if let Some(gw) = versitygw_or_skip("versitygw_recursive_odd_keys", &["bkt"]) {
        recursive_odd_keys(&gw);
    }
}

#[test]
fn rclone_recursive_odd_keys() {
    if let Some(rc) = rclone_s3_or_skip("rclone_recursive_odd_keys", &["bkt"]) {
        recursive_odd_keys(&rc);
    }
}

#[test]
fn versitygw_sync_twice_and_delete() {
    if let Some(gw) = versitygw_or_skip("versitygw_sync_twice_and_delete", &["bkt"]) {
        sync_twice_and_delete(&gw);
    }
}

#[test]
fn rclone_sync_twice_and_delete() {
    if let Some(rc) = rclone_s3_or_skip("rclone_sync_twice_and_delete", &["bkt"]) {
        sync_twice_and_delete(&rc);
    }
}
