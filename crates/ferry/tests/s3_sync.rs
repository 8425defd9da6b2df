//! `ferry sync` and `ferry check` to and from S3, against versitygw on
//! 127.0.0.1 over TLS (tests/common/versitygw.rs), issue #25. What must
//! hold for a user: the first run copies everything, a second one copies
//! nothing (the times ferry kept in `x-amz-meta-mtime` are found again,
//! not the upload time the listing shows), a changed file is found,
//! `--dry-run` changes nothing, `--delete` removes only what the source
//! lacks, and after a failed listing nothing is deleted. No timing is
//! asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use common::versitygw::{data, files_of, versitygw_or_skip, Versitygw};
use common::*;

const MIB: usize = 1024 * 1024;

/// `ferry CMD --json -q ARGS` with the server's environment, HOME = `home`.
fn run(gw: &Versitygw, home: &Path, cmd: &str, args: &[OsString]) -> std::process::Output {
    let mut a = args![cmd, "--json", "-q"];
    a.extend(args.iter().cloned());
    let env = gw.env();
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    ferry_in(home, &a, &envs)
}

/// The `--json` summary: the last line of stdout (a dry run and `check`
/// print what they found before it).
fn summary(o: &std::process::Output) -> serde_json::Value {
    let out = stdout_text(o);
    let last = out.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("json: {e}: {}", describe(o)))
}

fn field(o: &std::process::Output, k: &str) -> u64 {
    summary(o)
        .get(k)
        .and_then(|v| v.as_u64())
        .unwrap_or_else(|| panic!("{k}: {}", describe(o)))
}

fn text_field(o: &std::process::Output, k: &str) -> String {
    summary(o)
        .get(k)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("{k}: {}", describe(o)))
}

/// A small tree with odd names, one file big enough for a multipart
/// upload (above the 16 MiB threshold), times in the past (so an upload
/// time can never pass for them). Returns the number of files.
fn make_tree(root: &Path) -> usize {
    let files: [(&str, usize); 7] = [
        ("a.txt", 1000),
        ("empty", 0),
        ("sp ace/b+c%41.bin", 70_000),
        ("sp ace/ünï 日本.txt", 333),
        ("deep/er/x&y=z.dat", 4096),
        ("deep/big.bin", 17 * MIB + 5),
        ("deep/er/one", 1),
    ];
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    for (i, (name, len)) in files.iter().enumerate() {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data(*len, i as u8)).unwrap();
        set_mtime(&p, old + Duration::from_secs(i as u64 * 1000));
    }
    files.len()
}

fn set_mtime(p: &Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// Same size, new bytes, the old modification time put back.
fn change_keeping_size_and_time(p: &Path) {
    let mtime = fs::metadata(p).unwrap().modified().unwrap();
    let mut d = fs::read(p).unwrap();
    for b in d.iter_mut().take(16) {
        *b ^= 0x5a;
    }
    fs::write(p, &d).unwrap();
    set_mtime(p, mtime);
}

#[test]
fn sync_local_to_s3_twice_change_dry_run_and_delete() {
    let Some(gw) = versitygw_or_skip("sync_local_to_s3_twice_change_dry_run_and_delete", &["bkt"])
    else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("src");
    let n = make_tree(&src) as u64;
    let url = "s3://bkt/mirror/";
    let stored = gw.root().join("bkt/mirror");

    let o = run(&gw, t.path(), "sync", &args![&src, url]);
    assert_ok(&o, "first sync");
    assert_eq!(field(&o, "copied"), n, "{}", describe(&o));
    assert_eq!(files_of(&stored), files_of(&src));
    assert!(gw.leftover_uploads("bkt").is_empty());

    // The listing shows upload times; the kept times must be found.
    let o = run(&gw, t.path(), "sync", &args![&src, url]);
    assert_ok(&o, "second sync");
    assert_eq!(field(&o, "copied"), 0, "{}", describe(&o));
    assert_eq!(field(&o, "same"), n);

    // A changed file (new size) is found and sent; nothing else is.
    fs::write(src.join("sp ace/b+c%41.bin"), data(70_001, 9)).unwrap();
    let o = run(&gw, t.path(), "sync", &args![&src, url]);
    assert_ok(&o, "sync after a change");
    assert_eq!(field(&o, "copied"), 1, "{}", describe(&o));
    assert_eq!(files_of(&stored), files_of(&src));

    // An extra object, and a file gone from the source.
    let extra = t.path().join("extra.txt");
    fs::write(&extra, b"extra").unwrap();
    let o = run(
        &gw,
        t.path(),
        "cp",
        &args![&extra, "s3://bkt/mirror/deep/extra.txt"],
    );
    assert_ok(&o, "cp extra");
    fs::remove_file(src.join("a.txt")).unwrap();
    let before = files_of(&stored);

    // --dry-run changes nothing, and says what it would delete.
    let o = run(
        &gw,
        t.path(),
        "sync",
        &args!["--dry-run", "--delete", &src, url],
    );
    assert_ok(&o, "dry run");
    assert_eq!(files_of(&stored), before, "--dry-run changed the store");
    assert_eq!(field(&o, "deleted"), 2, "{}", describe(&o));

    // --delete removes exactly the two, keeps the rest.
    let o = run(&gw, t.path(), "sync", &args!["--delete", &src, url]);
    assert_ok(&o, "sync --delete");
    assert_eq!(field(&o, "deleted"), 2, "{}", describe(&o));
    assert_eq!(field(&o, "copied"), 0, "{}", describe(&o));
    assert_eq!(files_of(&stored), files_of(&src));

    // `ferry check` agrees: the trees are the same.
    let o = run(&gw, t.path(), "check", &args![&src, url]);
    assert_ok(&o, "check after sync");
}

#[test]
fn sync_s3_to_local_twice_and_delete() {
    let Some(gw) = versitygw_or_skip("sync_s3_to_local_twice_and_delete", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("src");
    let n = make_tree(&src) as u64;
    // Up with -p (times in x-amz-meta-mtime), as another tool would leave
    // them; then down by sync.
    let o = run(&gw, t.path(), "cp", &args!["-r", "-p", &src, "s3://bkt/"]);
    assert_ok(&o, "cp -r -p up");
    let dst = t.path().join("dst");
    let url = "s3://bkt/src/";
    let o = run(&gw, t.path(), "sync", &args![url, &dst]);
    assert_ok(&o, "first sync down");
    assert_eq!(field(&o, "copied"), n, "{}", describe(&o));
    assert_eq!(files_of(&dst), files_of(&src));
    // The object's own time (x-amz-meta-mtime), not its upload time.
    for rel in ["a.txt", "deep/big.bin"] {
        assert_eq!(
            fs::metadata(dst.join(rel)).unwrap().modified().unwrap(),
            fs::metadata(src.join(rel)).unwrap().modified().unwrap(),
            "{rel}: mtime kept"
        );
    }

    let o = run(&gw, t.path(), "sync", &args![url, &dst]);
    assert_ok(&o, "second sync down");
    assert_eq!(field(&o, "copied"), 0, "{}", describe(&o));
    assert_eq!(field(&o, "same"), n);

    // A local extra file: --dry-run keeps it, --delete removes it alone.
    fs::write(dst.join("deep/er/local-only"), b"l").unwrap();
    let o = run(&gw, t.path(), "sync", &args!["-n", "--delete", url, &dst]);
    assert_ok(&o, "dry run down");
    assert!(dst.join("deep/er/local-only").exists());
    let o = run(&gw, t.path(), "sync", &args!["--delete", url, &dst]);
    assert_ok(&o, "sync --delete down");
    assert_eq!(field(&o, "deleted"), 1, "{}", describe(&o));
    assert_eq!(files_of(&dst), files_of(&src));
}

#[test]
fn sync_from_s3_deletes_nothing_after_a_failed_listing() {
    let Some(gw) = versitygw_or_skip(
        "sync_from_s3_deletes_nothing_after_a_failed_listing",
        &["bkt"],
    ) else {
        return;
    };
    let t = tempdir();
    let dst = t.path().join("dst");
    fs::create_dir_all(&dst).unwrap();
    fs::write(dst.join("keep-me"), b"k").unwrap();

    // A bucket that does not exist: the listing fails, nothing goes.
    let o = run(
        &gw,
        t.path(),
        "sync",
        &args!["--delete", "s3://no-such-bucket/x/", &dst],
    );
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(
        stderr_text(&o).contains("no-such-bucket"),
        "{}",
        describe(&o)
    );
    assert!(dst.join("keep-me").exists(), "deleted after an error");

    // A prefix with nothing under it is not an empty source: syncing it
    // with --delete must not empty the destination.
    let o = run(
        &gw,
        t.path(),
        "sync",
        &args!["--delete", "s3://bkt/nothing-here/", &dst],
    );
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(dst.join("keep-me").exists(), "deleted after an error");

    // Wrong credentials: refused listing, nothing deleted, exit 3.
    let a = args!["sync", "-q", "--delete", "s3://bkt/", &dst];
    let env = gw.env();
    let mut envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    envs.push(("AWS_SECRET_ACCESS_KEY", "wrong-secret"));
    let o = ferry_in(t.path(), &a, &envs);
    assert_code(&o, 3, "wrong secret");
    assert!(dst.join("keep-me").exists(), "deleted after an error");
}

#[test]
fn sync_and_check_compare_with_the_stored_crc32() {
    let Some(gw) = versitygw_or_skip("sync_and_check_compare_with_the_stored_crc32", &["bkt"])
    else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("src");
    let n = make_tree(&src) as u64;
    let url = "s3://bkt/c/";
    let o = run(&gw, t.path(), "sync", &args![&src, url]);
    assert_ok(&o, "first sync");

    // The store's CRC32 against the local file's: no object is read, the
    // multipart one (FULL_OBJECT) included.
    let o = run(&gw, t.path(), "check", &args!["-c", &src, url]);
    assert_ok(&o, "check -c");
    assert_eq!(text_field(&o, "hash"), "crc32", "{}", describe(&o));
    assert_eq!(field(&o, "hashed_by_reading"), 0, "{}", describe(&o));
    assert_eq!(field(&o, "same"), n);

    // Same sizes and times, other bytes: only -c finds them.
    change_keeping_size_and_time(&src.join("sp ace/ünï 日本.txt"));
    change_keeping_size_and_time(&src.join("deep/big.bin"));
    let o = run(&gw, t.path(), "sync", &args![&src, url]);
    assert_ok(&o, "sync by size and time");
    assert_eq!(field(&o, "copied"), 0, "{}", describe(&o));
    let o = run(&gw, t.path(), "check", &args!["-c", &src, url]);
    assert_code(&o, 1, "check -c finds the two");
    assert_eq!(field(&o, "differ"), 2, "{}", describe(&o));
    let o = run(&gw, t.path(), "sync", &args!["-c", &src, url]);
    assert_ok(&o, "sync -c");
    assert_eq!(field(&o, "copied"), 2, "{}", describe(&o));
    assert_eq!(field(&o, "hashed_by_reading"), 0, "{}", describe(&o));
    assert_eq!(
        files_of(&gw.root().join("bkt/c")),
        files_of(&src),
        "after sync -c"
    );
    // The other way too: S3 as the source.
    let o = run(&gw, t.path(), "check", &args!["-c", url, &src]);
    assert_ok(&o, "check -c from S3");
    assert_eq!(field(&o, "hashed_by_reading"), 0, "{}", describe(&o));

    // An object stored without a checksum is read to hash it, and ferry
    // says so.
    let o = run(
        &gw,
        t.path(),
        "cp",
        &args![
            "-p",
            "--s3-checksum",
            "none",
            src.join("a.txt"),
            "s3://bkt/c/a.txt"
        ],
    );
    assert_ok(&o, "cp without a checksum");
    let o = run(&gw, t.path(), "check", &args!["-c", &src, url]);
    assert_ok(&o, "check -c with one object to read");
    assert!(field(&o, "hashed_by_reading") <= 1, "{}", describe(&o));
}
