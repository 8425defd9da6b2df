//! `ferry cp` over HTTP/1.1 and HTTP/2 against a real nginx on loopback
//! (tests/common/nginx.rs): TLS trust (--cacert, --pin, refused), plain
//! HTTP, parallel files, byte ranges, resume, listings, uploads, errors.
//! Every file is compared byte for byte (blake3); no timing is asserted.
//! Skipped, with a message, when nginx is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::nginx::{nginx_or_skip, Nginx, BASIC_PASS, BASIC_USER, BEARER};
use common::*;

fn cacert(ng: &Nginx) -> Vec<String> {
    vec!["--cacert".into(), ng.cert().display().to_string()]
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn https_h2_h1_and_plain_http_are_byte_exact() {
    let Some(ng) = nginx_or_skip("https_h2_h1_and_plain_http_are_byte_exact") else {
        return;
    };
    let big = make_file(&ng.www().join("big.bin"), 12 * MIB, 1);
    let small = make_file(&ng.www().join("small.bin"), 1000, 2);
    make_file(&ng.www().join("empty.bin"), 0, 3);
    let out = tempdir();
    for (name, scheme_args, proto) in [
        ("h2", vec![], "https/h2"),
        ("h1", vec!["--http1.1".to_string()], "https/http1.1"),
    ] {
        let dst = out.path().join(name);
        fs::create_dir(&dst).unwrap();
        let mut a = cacert(&ng);
        a.extend(scheme_args);
        a.extend([
            "--json".into(),
            ng.https("/big.bin"),
            ng.https("/small.bin"),
            ng.https("/empty.bin"),
            s(&dst),
        ]);
        let o = cp(&a);
        assert_ok(&o, name);
        assert_eq!(json_field(&o, "protocol"), proto, "{name}");
        assert_file_hash(&dst.join("big.bin"), &big, name);
        assert_file_hash(&dst.join("small.bin"), &small, name);
        assert_eq!(file_len(&dst.join("empty.bin")), 0);
        assert!(part_files(&dst).is_empty(), "{name}: part files left");
    }
    // Plain HTTP, to a file name.
    let dst = out.path().join("plain.bin");
    let o = cp(&["--json".into(), ng.http("/big.bin"), s(&dst)]);
    assert_ok(&o, "plain");
    assert_eq!(json_field(&o, "protocol"), "http/http1.1");
    assert_file_hash(&dst, &big, "plain");
    // Plain HTTP/2 with prior knowledge.
    let dst = out.path().join("h2c.bin");
    let o = cp(&[
        "--http2".into(),
        "--json".into(),
        ng.h2c("/big.bin"),
        s(&dst),
    ]);
    assert_ok(&o, "h2c");
    assert_eq!(json_field(&o, "protocol"), "http/h2c");
    assert_file_hash(&dst, &big, "h2c");
}

#[test]
fn pin_accepts_self_signed_and_wrong_trust_is_refused() {
    let Some(ng) = nginx_or_skip("pin_accepts_self_signed_and_wrong_trust_is_refused") else {
        return;
    };
    let h = make_file(&ng.www().join("f.bin"), 100_000, 4);
    let out = tempdir();
    let dst = out.path().join("f.bin");
    let o = cp(&["--pin".into(), ng.pin(), ng.https("/f.bin"), s(&dst)]);
    assert_ok(&o, "pin");
    assert_file_hash(&dst, &h, "pin");

    // No --cacert: the self-signed certificate is refused, exit 3, and the
    // message says what to do.
    let dst2 = out.path().join("g.bin");
    let o = cp(&[ng.https("/f.bin"), s(&dst2)]);
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    let err = stderr_text(&o);
    assert!(err.contains("--cacert") && err.contains("--pin"), "{err}");
    assert!(!dst2.exists() && part_files(out.path()).is_empty());

    // A wrong pin is refused too.
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let o = cp(&["--pin".into(), wrong, ng.https("/f.bin"), s(&dst2)]);
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    assert!(
        stderr_text(&o).contains("does not match --pin"),
        "{}",
        describe(&o)
    );

    // --insecure works and warns loudly.
    let o = cp(&["-k".into(), ng.https("/f.bin"), s(&dst2)]);
    assert_ok(&o, "insecure");
    assert!(
        stderr_text(&o).contains("warning: --insecure: server certificates are NOT checked"),
        "{}",
        describe(&o)
    );
}

#[test]
fn many_files_in_parallel_over_h2_and_h1() {
    let Some(ng) = nginx_or_skip("many_files_in_parallel_over_h2_and_h1") else {
        return;
    };
    let dir = ng.www().join("many");
    fs::create_dir(&dir).unwrap();
    let mut hashes = Vec::new();
    let mut urls = Vec::new();
    for i in 0..150u64 {
        let name = format!("f{i:03}.bin");
        let len = (i * 7919) % 70_000 + (i % 3) * 200_000;
        hashes.push((name.clone(), make_file(&dir.join(&name), len, 100 + i)));
        urls.push(ng.https(&format!("/many/{name}")));
    }
    for (tag, extra) in [("h2", None), ("h1", Some("--http1.1"))] {
        let out = tempdir();
        let mut a = cacert(&ng);
        a.extend(["-P".into(), "16".into(), "--json".into()]);
        if let Some(e) = extra {
            a.push(e.into());
        }
        a.extend(urls.iter().cloned());
        a.push(s(out.path()));
        let o = cp(&a);
        assert_ok(&o, tag);
        for (name, h) in &hashes {
            assert_file_hash(&out.path().join(name), h, tag);
        }
        let conns: f64 = json_field(&o, "streams").parse().unwrap();
        if tag == "h2" {
            // Files are multiplexed over one h2 connection per download
            // shard, and there is a shard per core (at most 4).
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
            assert!(
                (1.0..=cores as f64).contains(&conns),
                "h2: one connection per shard, at most one per core ({cores}): {conns}"
            );
        } else {
            assert!(
                (1.0..=16.0).contains(&conns),
                "h1 pool bounded by -P: {conns}"
            );
        }
    }
}

/// With one shard (`FERRY_HTTP_SHARDS=1`, the tuning knob) every file goes
/// over exactly one h2 connection; with two, over two, and each file
/// arrives once and whole either way.
#[test]
fn download_shards_each_have_one_h2_connection() {
    let Some(ng) = nginx_or_skip("download_shards_each_have_one_h2_connection") else {
        return;
    };
    let dir = ng.www().join("shards");
    fs::create_dir(&dir).unwrap();
    let mut hashes = Vec::new();
    let mut urls = Vec::new();
    for i in 0..200u64 {
        let name = format!("s{i:03}.bin");
        hashes.push((
            name.clone(),
            make_file(&dir.join(&name), 1000 + i * 97, 7000 + i),
        ));
        urls.push(ng.https(&format!("/shards/{name}")));
    }
    for shards in ["1", "2"] {
        let out = tempdir();
        let mut a = vec!["cp".to_string(), "-q".into(), "--json".into()];
        a.extend(cacert(&ng));
        a.extend(urls.iter().cloned());
        a.push(s(out.path()));
        let home = tempdir();
        let o = ferry_in(home.path(), &a, &[("FERRY_HTTP_SHARDS", shards)]);
        assert_ok(&o, shards);
        for (name, h) in &hashes {
            assert_file_hash(&out.path().join(name), h, shards);
        }
        assert_eq!(json_field(&o, "files"), "200", "{shards} shards");
        assert_eq!(
            json_field(&o, "streams"),
            shards,
            "one connection per shard"
        );
        assert_eq!(
            list_dir(out.path()).len(),
            200,
            "{shards}: no part files left"
        );
    }
}

/// A destination that is a directory is refused by the final rename (no
/// stat of every destination first): a clear error that names it, exit
/// 5, the directory and what is in it untouched, no part file left.
#[test]
fn a_directory_in_the_way_is_refused_and_left_alone() {
    let Some(ng) = nginx_or_skip("a_directory_in_the_way_is_refused_and_left_alone") else {
        return;
    };
    make_file(&ng.www().join("inway.bin"), 50_000, 3);
    let ok_hash = make_file(&ng.www().join("fine.bin"), 30_000, 4);
    let out = tempdir();
    fs::create_dir(out.path().join("inway.bin")).unwrap();
    fs::write(out.path().join("inway.bin/keep.txt"), "mine").unwrap();
    let mut a = cacert(&ng);
    a.extend([ng.https("/inway.bin"), ng.https("/fine.bin"), s(out.path())]);
    let o = cp(&a);
    assert_code(&o, 5, "a directory under the file's name");
    let err = stderr_text(&o);
    assert!(
        err.contains("inway.bin: a directory is in the way"),
        "names the directory: {err}"
    );
    assert_eq!(
        fs::read_to_string(out.path().join("inway.bin/keep.txt")).unwrap(),
        "mine"
    );
    assert_file_hash(&out.path().join("fine.bin"), &ok_hash, "the other file");
    let mut left = list_dir(out.path());
    left.sort();
    assert_eq!(left, ["fine.bin", "inway.bin"], "no part file left");
}

#[test]
fn streams_split_a_file_into_ranges_and_fall_back_when_ranges_are_ignored() {
    let Some(ng) = nginx_or_skip("streams_split_a_file_into_ranges") else {
        return;
    };
    let h = make_file(&ng.www().join("big.bin"), 12 * MIB + 12345, 5);
    fs::copy(ng.www().join("big.bin"), ng.www().join("noranges/big.bin")).unwrap();
    for (tag, extra) in [("h2", None), ("h1", Some("--http1.1"))] {
        let out = tempdir();
        let dst = out.path().join("big.bin");
        let mut a = cacert(&ng);
        a.extend(["--streams".into(), "4".into()]);
        if let Some(e) = extra {
            a.push(e.into());
        }
        a.extend([ng.https("/big.bin"), s(&dst)]);
        assert_ok(&cp(&a), tag);
        assert_file_hash(&dst, &h, tag);

        let dst2 = out.path().join("nr.bin");
        let mut a = cacert(&ng);
        a.extend(["--streams".into(), "4".into()]);
        if let Some(e) = extra {
            a.push(e.into());
        }
        a.extend([ng.https("/noranges/big.bin"), s(&dst2)]);
        assert_ok(&cp(&a), tag);
        assert_file_hash(&dst2, &h, &format!("{tag} server ignoring Range"));
        assert!(part_files(out.path()).is_empty());
    }
    let log = ng.access_log();
    assert!(log.contains(" 206 "), "ranges were used:\n{log}");
}

/// Start a download from the 1 MB/s location, kill ferry once part of it
/// arrived; returns the part file path.
fn interrupted(ng: &Nginx, name: &str, dst: &Path, extra: &[&str]) -> std::path::PathBuf {
    let home = tempdir();
    let mut a: Vec<String> = vec!["cp".into(), "-q".into()];
    a.extend(cacert(ng));
    a.extend(extra.iter().map(|s| s.to_string()));
    a.extend([ng.https(&format!("/slow/{name}")), s(dst)]);
    let mut child = FerryChild::spawn(home.path(), &a, &[]);
    let part = part_path(dst);
    let deadline = Instant::now() + Duration::from_secs(60);
    while file_len(&part) < 2 * MIB {
        assert!(
            child.try_wait().is_none(),
            "ferry ended before it was interrupted"
        );
        assert!(Instant::now() < deadline, "no progress in 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(child); // killed by PID
    assert!(!dst.exists(), "nothing under the final name after a kill");
    part
}

#[test]
fn resume_after_kill_continues_and_a_changed_file_starts_over() {
    let Some(ng) = nginx_or_skip("resume_after_kill") else {
        return;
    };
    let src = ng.www().join("slow/r.bin");
    let h = make_file(&src, 6 * MIB, 6);
    let out = tempdir();
    let dst = out.path().join("r.bin");
    let part = interrupted(&ng, "r.bin", &dst, &[]);
    let had = file_len(&part);
    assert!((2 * MIB..6 * MIB).contains(&had), "{had}");
    // Resume over the fast location of the same file (same ETag).
    fs::copy(&src, ng.www().join("r.bin")).unwrap();
    let mtime = mtime_of(&src);
    set_mtime(&ng.www().join("r.bin"), mtime as u64);
    let mut a = cacert(&ng);
    a.extend([
        "--resume".into(),
        "--json".into(),
        ng.https("/r.bin"),
        s(&dst),
    ]);
    let o = cp(&a);
    assert_ok(&o, "resume");
    assert!(
        !stderr_text(&o).contains("starting over"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&dst, &h, "resumed");
    let moved: f64 = json_field(&o, "bytes").parse().unwrap();
    assert!(
        moved <= (6 * MIB - had) as f64,
        "resume moved {moved} bytes, had {had}"
    );
    assert!(!part.exists());

    // Interrupt again, then change the file on the server: --resume must
    // notice (If-Range) and start over, with the new content.
    fs::remove_file(&dst).unwrap();
    let part = interrupted(&ng, "r.bin", &dst, &[]);
    assert!(part.exists());
    let h2 = make_file(&ng.www().join("r.bin"), 6 * MIB, 7);
    set_mtime(&ng.www().join("r.bin"), mtime as u64 + 100);
    let mut a = cacert(&ng);
    a.extend(["--resume".into(), ng.https("/r.bin"), s(&dst)]);
    let o = cp(&a);
    assert_ok(&o, "changed");
    assert!(
        stderr_text(&o).contains("changed on the server"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&dst, &h2, "changed file");
}

#[test]
fn resume_of_a_split_download() {
    let Some(ng) = nginx_or_skip("resume_of_a_split_download") else {
        return;
    };
    let src = ng.www().join("slow/s.bin");
    let h = make_file(&src, 8 * MIB, 8);
    let out = tempdir();
    let dst = out.path().join("s.bin");
    let part = interrupted(&ng, "s.bin", &dst, &["--streams", "4"]);
    assert!(part.exists());
    fs::copy(&src, ng.www().join("s.bin")).unwrap();
    set_mtime(&ng.www().join("s.bin"), mtime_of(&src) as u64);
    let mut a = cacert(&ng);
    a.extend([
        "--resume".into(),
        "--streams".into(),
        "4".into(),
        ng.https("/s.bin"),
        s(&dst),
    ]);
    let o = cp(&a);
    assert_ok(&o, "split resume");
    assert_file_hash(&dst, &h, "split resume");
}

#[test]
fn http_errors_exit_4_with_status_and_url() {
    let Some(ng) = nginx_or_skip("http_errors_exit_4_with_status_and_url") else {
        return;
    };
    make_file(&ng.www().join("forbidden/x.bin"), 10, 9);
    let out = tempdir();
    // An existing destination file survives every failure.
    let dst = out.path().join("keep.bin");
    fs::write(&dst, b"old content").unwrap();
    for (path, status) in [
        ("/missing.bin", "404"),
        ("/forbidden/x.bin", "403"),
        ("/error500", "500"),
    ] {
        let mut a = cacert(&ng);
        a.extend([ng.https(path), s(&dst)]);
        let o = cp(&a);
        assert_eq!(o.status.code(), Some(4), "{path}: {}", describe(&o));
        let err = stderr_text(&o);
        assert!(err.contains(status) && err.contains(path), "{path}: {err}");
        assert_eq!(fs::read(&dst).unwrap(), b"old content");
    }
    // Several files, two missing: the others arrive, every failure is
    // reported, exit 4.
    let good = make_file(&ng.www().join("good.bin"), 70_000, 16);
    let dir = out.path().join("many");
    fs::create_dir(&dir).unwrap();
    let mut a = cacert(&ng);
    a.extend([
        "-P".into(),
        "1".into(),
        ng.https("/nope1.bin"),
        ng.https("/good.bin"),
        ng.https("/nope2.bin"),
        s(&dir),
    ]);
    let from = ng.access_log().lines().count();
    let o = cp(&a);
    assert_eq!(o.status.code(), Some(4), "{}", describe(&o));
    let err = stderr_text(&o);
    assert!(
        err.contains("/nope1.bin") && err.contains("/nope2.bin") && err.contains("2 of 3 files"),
        "{err}"
    );
    assert_file_hash(&dir.join("good.bin"), &good, "good file among failures");
    assert_eq!(list_dir(&dir), vec!["good.bin".to_string()]);
    // Named among several, a file costs its GET alone, no HEAD before it.
    let (gets, heads, log) = requests_under(&ng, from, "/good.bin");
    assert_eq!((gets, heads), (1, 0), "{log}");

    let mut a = cacert(&ng);
    a.extend([ng.https("/loop"), s(&dst)]);
    let o = cp(&a);
    assert_eq!(o.status.code(), Some(4), "{}", describe(&o));
    let err = stderr_text(&o);
    assert!(
        err.contains("redirect loop") && err.contains("/loop"),
        "{err}"
    );
    assert!(part_files(out.path()).is_empty());
}

#[test]
fn recursive_download_of_an_autoindex() {
    let Some(ng) = nginx_or_skip("recursive_download_of_an_autoindex") else {
        return;
    };
    let root = ng.www().join("tree");
    fs::create_dir_all(root.join("sub/deeper")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    let mut want = Vec::new();
    for (i, rel) in [
        "a.bin",
        "with space.bin",
        "amp&semi;.txt",
        "ünïcode.bin",
        "sub/b.bin",
        "sub/deeper/c.bin",
    ]
    .iter()
    .enumerate()
    {
        let len = 1000 * i as u64 + 5 + if i == 0 { 3 * MIB } else { 0 };
        want.push((
            rel.to_string(),
            make_file(&root.join(rel), len, 200 + i as u64),
        ));
    }
    let out = tempdir();
    let mut a = cacert(&ng);
    a.extend(["-r".into(), ng.https("/tree/"), s(out.path())]);
    let o = cp(&a);
    assert_ok(&o, "-r");
    for (rel, h) in &want {
        assert_file_hash(&out.path().join("tree").join(rel), h, rel);
    }
    assert!(out.path().join("tree/empty").is_dir());
    assert!(part_files(out.path()).is_empty());
    // Without -r a directory is refused, not saved as its index page.
    let mut a = cacert(&ng);
    a.extend([ng.https("/tree"), s(&out.path().join("page"))]);
    let o = cp(&a);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(stderr_text(&o).contains("use -r"), "{}", describe(&o));
    assert!(!out.path().join("page").exists());
    // Without the trailing slash nginx redirects to the directory.
    let out2 = tempdir();
    let mut a = cacert(&ng);
    a.extend(["-r".into(), ng.https("/tree"), s(&out2.path().join("copy"))]);
    assert_ok(&cp(&a), "-r no slash");
    for (rel, h) in &want {
        assert_file_hash(&out2.path().join("copy").join(rel), h, rel);
    }
}

/// The requests nginx logged for paths under `prefix` since line `from`
/// of its access log: (GETs, HEADs), and the lines.
fn requests_under(ng: &Nginx, from: usize, prefix: &str) -> (usize, usize, String) {
    let lines: Vec<String> = ng
        .access_log()
        .lines()
        .skip(from)
        .filter(|l| l.contains(&format!(" {prefix}")))
        .map(str::to_string)
        .collect();
    let n = |m: &str| lines.iter().filter(|l| l.contains(m)).count();
    (n("\"GET "), n("\"HEAD "), lines.join("\n"))
}

/// A tree from an HTML index (no sizes in it) costs one GET a file and no
/// HEAD (issues #20, #26): the size, and -p's time, come with the GET's
/// answer. A compressed answer says no file size: it streams whole.
#[test]
fn an_autoindex_tree_costs_one_get_a_file() {
    let Some(ng) = nginx_or_skip("an_autoindex_tree_costs_one_get_a_file") else {
        return;
    };
    let root = ng.www().join("count");
    fs::create_dir_all(root.join("sub")).unwrap();
    let mut want = Vec::new();
    for i in 0..20u64 {
        let rel = if i % 2 == 0 {
            format!("f{i}.bin")
        } else {
            format!("sub/f{i}.bin")
        };
        // One file --streams would split, were its size known first.
        let len = if i == 0 { 3 * MIB } else { 5000 + i };
        let h = make_file(&root.join(&rel), len, 300 + i);
        set_mtime(&root.join(&rel), 1_600_000_000 + i);
        want.push((rel, h, 1_600_000_000 + i as i64));
    }
    for (tag, extra) in [("h2", None), ("h1", Some("--http1.1"))] {
        let out = tempdir();
        let from = ng.access_log().lines().count();
        let mut a = cacert(&ng);
        // --streams 4 splits a 3 MiB file whose size is known first.
        a.extend(["-r".into(), "-p".into(), "--streams".into(), "4".into()]);
        if let Some(e) = extra {
            a.push(e.into());
        }
        a.extend([ng.https("/count/"), s(out.path())]);
        assert_ok(&cp(&a), tag);
        for (rel, h, t) in &want {
            let p = out.path().join("count").join(rel);
            assert_file_hash(&p, h, rel);
            assert_eq!(mtime_of(&p), *t, "{tag} {rel}: -p");
        }
        assert!(part_files(out.path()).is_empty());
        let (gets, heads, log) = requests_under(&ng, from, "/count/");
        assert_eq!(heads, 0, "{tag}: no HEAD a file:\n{log}");
        // Two listings and one GET a file.
        assert_eq!(gets, want.len() + 2, "{tag}:\n{log}");
    }

    let gz = ng.www().join("gz/tree");
    fs::create_dir_all(&gz).unwrap();
    let texts: Vec<String> = (0..5)
        .map(|k| {
            (0..2000 * (k + 1))
                .map(|i| format!("{k} line {i}\n"))
                .collect()
        })
        .collect();
    for (k, t) in texts.iter().enumerate() {
        fs::write(gz.join(format!("t{k}.txt")), t).unwrap();
    }
    let out = tempdir();
    let from = ng.access_log().lines().count();
    let mut a = cacert(&ng);
    a.extend([
        "-r".into(),
        "--compressed".into(),
        "--json".into(),
        ng.https("/gz/tree/"),
        s(out.path()),
    ]);
    let o = cp(&a);
    assert_ok(&o, "--compressed");
    for (k, t) in texts.iter().enumerate() {
        let got = fs::read_to_string(out.path().join(format!("tree/t{k}.txt"))).unwrap();
        assert!(got == *t, "t{k}.txt differs");
    }
    let total: usize = texts.iter().map(String::len).sum();
    assert_eq!(json_field(&o, "bytes"), total.to_string());
    let (gets, heads, log) = requests_under(&ng, from, "/gz/tree/");
    assert_eq!(heads, 0, "--compressed:\n{log}");
    assert_eq!(gets, texts.len() + 1, "--compressed:\n{log}");
}

#[test]
fn put_uploads_to_dav_and_read_back() {
    let Some(ng) = nginx_or_skip("put_uploads_to_dav_and_read_back") else {
        return;
    };
    let src = tempdir();
    let one = src.path().join("one.bin");
    let h1 = make_file(&one, 5 * MIB + 3, 10);
    let tree = src.path().join("up");
    fs::create_dir_all(tree.join("nested/more")).unwrap();
    let mut want = Vec::new();
    for (i, rel) in ["x.bin", "nested/y y.bin", "nested/more/z.bin"]
        .iter()
        .enumerate()
    {
        want.push((
            rel.to_string(),
            make_file(&tree.join(rel), 30_000 * i as u64 + 1, 300 + i as u64),
        ));
    }
    for (tag, extra) in [("h2", None), ("h1", Some("--http1.1"))] {
        let mut a = cacert(&ng);
        if let Some(e) = extra {
            a.push(e.into());
        }
        a.extend([s(&one), ng.https(&format!("/upload/{tag}/"))]);
        assert_ok(&cp(&a), tag);
        assert_file_hash(&ng.www().join(format!("upload/{tag}/one.bin")), &h1, tag);

        let mut a = cacert(&ng);
        if let Some(e) = extra {
            a.push(e.into());
        }
        a.extend([
            "-r".into(),
            "-P".into(),
            "4".into(),
            s(&tree),
            ng.https(&format!("/upload/{tag}/")),
        ]);
        assert_ok(&cp(&a), tag);
        for (rel, h) in &want {
            assert_file_hash(&ng.www().join(format!("upload/{tag}/up")).join(rel), h, rel);
        }
        // And back down with -r.
        let back = tempdir();
        let mut a = cacert(&ng);
        a.extend([
            "-r".into(),
            ng.https(&format!("/upload/{tag}/up/")),
            s(back.path()),
        ]);
        assert_ok(&cp(&a), "readback");
        for (rel, h) in &want {
            assert_file_hash(&back.path().join("up").join(rel), h, rel);
        }
    }
    // nginx's dav cannot take ranged PUTs: --resume says so and sends the
    // whole file, which arrives intact.
    let mut a = cacert(&ng);
    a.extend(["--resume".into(), s(&one), ng.https("/upload/resumed/")]);
    let o = cp(&a);
    assert_ok(&o, "--resume to nginx");
    assert!(
        stderr_text(&o).contains("cannot be resumed"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&ng.www().join("upload/resumed/one.bin"), &h1, "resumed");
    // Uploading where the server does not allow PUT: exit 4, clear message.
    let mut a = cacert(&ng);
    a.extend([s(&tree.join("x.bin")), ng.https("/elsewhere/")]);
    let o = cp(&a);
    assert_eq!(o.status.code(), Some(4), "{}", describe(&o));
    assert!(stderr_text(&o).contains("405"), "{}", describe(&o));
}

#[test]
fn compressed_uploads_to_nginx_stay_plain() {
    // nginx does not say it takes zstd request bodies (and would store
    // the coded bytes as the file): -C and --compressed send plain PUTs.
    let Some(ng) = nginx_or_skip("compressed_uploads_to_nginx_stay_plain") else {
        return;
    };
    let src = tempdir();
    let tree = src.path().join("text");
    make_text_tree(&tree, 12, 31);
    make_text_file(&tree.join("big.txt"), 3 * MIB, 32);
    for (tag, flag) in [("on", "-C=on"), ("auto", "-C=auto")] {
        let mut a = cacert(&ng);
        a.extend([
            "-r".into(),
            "--json".into(),
            flag.into(),
            s(&tree),
            ng.https(&format!("/upload/z{tag}/")),
        ]);
        let o = cp(&a);
        assert_ok(&o, tag);
        assert_same_tree(
            &tree,
            &ng.www().join(format!("upload/z{tag}/text")),
            Cmp::default(),
            tag,
        );
        assert!(
            !stdout_text(&o).contains("\"compression\""),
            "{tag}: {}",
            stdout_text(&o)
        );
    }
}

#[test]
fn compressed_and_digest() {
    let Some(ng) = nginx_or_skip("compressed_and_digest") else {
        return;
    };
    let text: String = (0..50_000)
        .map(|i| format!("line {i} of a text file\n"))
        .collect();
    fs::write(ng.www().join("gz/t.txt"), &text).unwrap();
    let out = tempdir();
    let dst = out.path().join("t.txt");
    let mut a = cacert(&ng);
    a.extend(["--compressed".into(), ng.https("/gz/t.txt"), s(&dst)]);
    assert_ok(&cp(&a), "gzip");
    assert_eq!(fs::read_to_string(&dst).unwrap(), text);
    assert!(ng.access_log().contains("/gz/t.txt"));

    // nginx announces a digest that does not match: refused, nothing kept.
    make_file(&ng.www().join("digest/d.bin"), 10_000, 11);
    let dst = out.path().join("d.bin");
    let mut a = cacert(&ng);
    a.extend([ng.https("/digest/d.bin"), s(&dst)]);
    let o = cp(&a);
    assert_eq!(o.status.code(), Some(4), "{}", describe(&o));
    assert!(stderr_text(&o).contains("digest"), "{}", describe(&o));
    assert!(!dst.exists() && part_files(out.path()).is_empty());
}

#[test]
fn credentials_token_basic_netrc_and_resolve() {
    let Some(ng) = nginx_or_skip("credentials_token_basic_netrc_and_resolve") else {
        return;
    };
    let hp = make_file(&ng.www().join("private/p.bin"), 50_000, 12);
    let hb = make_file(&ng.www().join("bearer/b.bin"), 60_000, 13);
    let out = tempdir();
    let dst = out.path().join("x.bin");
    let up = format!("{BASIC_USER}:{BASIC_PASS}");

    // No credentials: 401 is an authentication failure, exit 3, with a hint.
    let mut a = cacert(&ng);
    a.extend([ng.https("/private/p.bin"), s(&dst)]);
    let o = cp(&a);
    assert_eq!(o.status.code(), Some(3), "{}", describe(&o));
    assert!(stderr_text(&o).contains("401"), "{}", describe(&o));

    let mut a = cacert(&ng);
    a.extend(["-u".into(), up.clone(), ng.https("/private/p.bin"), s(&dst)]);
    assert_ok(&cp(&a), "-u");
    assert_file_hash(&dst, &hp, "-u");

    let url = ng
        .https("/private/p.bin")
        .replace("https://", &format!("https://{up}@"));
    let mut a = cacert(&ng);
    a.extend([url, s(&dst)]);
    assert_ok(&cp(&a), "user:pass@ in the URL");

    let home = tempdir();
    fs::write(
        home.path().join(".netrc"),
        format!("machine 127.0.0.1 login {BASIC_USER} password {BASIC_PASS}\n"),
    )
    .unwrap();
    let mut a: Vec<String> = vec!["cp".into(), "-q".into()];
    a.extend(cacert(&ng));
    a.extend([ng.https("/private/p.bin"), s(&dst)]);
    assert_ok(&ferry_in(home.path(), &a, &[]), "netrc");

    let mut a = cacert(&ng);
    a.extend([
        "--token".into(),
        BEARER.into(),
        ng.https("/bearer/b.bin"),
        s(&dst),
    ]);
    assert_ok(&cp(&a), "--token");
    assert_file_hash(&dst, &hb, "--token");
    let mut a: Vec<String> = vec!["cp".into(), "-q".into()];
    a.extend(cacert(&ng));
    a.extend([ng.https("/bearer/b.bin"), s(&dst)]);
    assert_ok(
        &ferry_in(home.path(), &a, &[("FERRY_TOKEN", BEARER)]),
        "FERRY_TOKEN",
    );
    let mut a = cacert(&ng);
    a.extend([
        "--token".into(),
        "wrong".into(),
        ng.https("/bearer/b.bin"),
        s(&dst),
    ]);
    assert_eq!(cp(&a).status.code(), Some(3));

    // --resolve: the certificate names localhost, the address comes from us.
    let port = ng.https_port;
    let mut a = cacert(&ng);
    a.extend([
        "--resolve".into(),
        format!("localhost:{port}:127.0.0.1"),
        "-u".into(),
        up,
        format!("https://localhost:{port}/private/p.bin"),
        s(&dst),
    ]);
    assert_ok(&cp(&a), "--resolve");
    assert_file_hash(&dst, &hp, "--resolve");
}

#[test]
fn server_killed_mid_transfer_then_resume() {
    let Some(mut ng) = nginx_or_skip("server_killed_mid_transfer_then_resume") else {
        return;
    };
    let h = make_file(&ng.www().join("slow/k.bin"), 6 * MIB, 14);
    let out = tempdir();
    let dst = out.path().join("k.bin");
    let home = tempdir();
    let mut a: Vec<String> = vec!["cp".into(), "-q".into()];
    a.extend(cacert(&ng));
    a.extend([ng.https("/slow/k.bin"), s(&dst)]);
    let child = FerryChild::spawn(home.path(), &a, &[]);
    let part = part_path(&dst);
    let deadline = Instant::now() + Duration::from_secs(60);
    while file_len(&part) < 2 * MIB {
        assert!(Instant::now() < deadline, "no progress in 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    ng.restart(); // stops nginx (master and workers) by PID, starts a new one
    let o = child.wait();
    if o.status.success() {
        // A retry met the restarted server (same certificate, as a real
        // restart keeps it) and continued after the bytes it had.
        assert_file_hash(&dst, &h, "finished by a retry after the restart");
        assert!(!part.exists());
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert!(stderr_text(&o).contains("--resume"), "{}", describe(&o));
    assert!(!dst.exists() && part.exists());
    let mut a = cacert(&ng);
    a.extend(["--resume".into(), ng.https("/slow/k.bin"), s(&dst)]);
    let o = cp(&a);
    assert_ok(&o, "resume after the server died");
    assert!(
        !stderr_text(&o).contains("starting over"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&dst, &h, "resumed after server kill");
}

/// A minimal CONNECT proxy on 127.0.0.1 (threads of this test process):
/// records each CONNECT target, then relays bytes both ways.
fn connect_proxy() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { break };
            let seen = seen2.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if c.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let target = text.split_whitespace().nth(1).unwrap_or("").to_string();
                seen.lock().unwrap().push(target.clone());
                let Ok(mut up) = std::net::TcpStream::connect(&target) else {
                    let _ = c.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
                    return;
                };
                c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .unwrap();
                let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut up2);
                    let _ = up2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    (port, seen)
}

#[test]
fn https_proxy_connect_tunnel_and_no_proxy() {
    let Some(ng) = nginx_or_skip("https_proxy_connect_tunnel_and_no_proxy") else {
        return;
    };
    let h = make_file(&ng.www().join("p.bin"), 300_000, 15);
    let (port, seen) = connect_proxy();
    let proxy = format!("http://127.0.0.1:{port}");
    let out = tempdir();
    let home = tempdir();
    let dst = out.path().join("p.bin");
    let mut a: Vec<String> = vec!["cp".into(), "-q".into()];
    a.extend(cacert(&ng));
    a.extend([ng.https("/p.bin"), s(&dst)]);
    let o = ferry_in(home.path(), &a, &[("HTTPS_PROXY", &proxy)]);
    assert_ok(&o, "through the proxy");
    assert_file_hash(&dst, &h, "proxy");
    let want = format!("127.0.0.1:{}", ng.https_port);
    assert_eq!(*seen.lock().unwrap(), vec![want.clone()]);
    let o = ferry_in(
        home.path(),
        &a,
        &[("HTTPS_PROXY", &proxy), ("NO_PROXY", "localhost,127.0.0.1")],
    );
    assert_ok(&o, "NO_PROXY");
    assert_eq!(seen.lock().unwrap().len(), 1, "NO_PROXY bypasses the proxy");
}

#[test]
fn a_matching_digest_is_accepted() {
    if !Path::new(common::nginx::NGINX_BIN).exists() {
        eprintln!("SKIPPED a_matching_digest_is_accepted: nginx not found");
        return;
    }
    let data = random_bytes(3 * MIB as usize + 7, 17);
    let tmp = tempdir();
    write(&tmp.path().join("d"), &data);
    let out = run_checked(std::process::Command::new("sh").arg("-c").arg(format!(
        "openssl dgst -sha256 -binary {} | base64",
        tmp.path().join("d").display()
    )));
    let b64 = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let ng = Nginx::start(&format!("sha-256=:{b64}:"));
    write(&ng.www().join("digest/d.bin"), &data);
    let h = hash_bytes(&data);
    for extra in [None, Some("--streams"), Some("--http1.1")] {
        let dst = tmp.path().join("got.bin");
        let mut a = cacert(&ng);
        if let Some(e) = extra {
            a.push(e.into());
            if e == "--streams" {
                a.push("3".into());
            }
        }
        a.extend([ng.https("/digest/d.bin"), s(&dst)]);
        assert_ok(&cp(&a), &format!("{extra:?}"));
        assert_file_hash(&dst, &h, "digest ok");
    }
}

#[test]
fn recursive_download_of_a_json_listing_refuses_unsafe_names() {
    let Some(ng) = nginx_or_skip("recursive_download_of_a_json_listing") else {
        return;
    };
    let root = ng.www().join("jsondir");
    fs::create_dir_all(root.join("sub")).unwrap();
    let ha = make_file(&root.join("a.bin"), 2 * MIB + 1, 18);
    set_mtime(&root.join("a.bin"), 1_600_000_000);
    let hb = make_file(&root.join("sub/b b.bin"), 1234, 19);
    make_file(&ng.www().join("secret.bin"), 10, 20);
    fs::write(
        root.join("listing.json"),
        r#"[{"name":"a.bin","type":"file","size":2097153,"mtime":1700000000,"etag":"x"},
            {"name":"sub","type":"dir","size":0,"mtime":1700000000},
            {"name":"../secret.bin","type":"file","size":10,"mtime":1}]"#,
    )
    .unwrap();
    fs::write(
        root.join("sub/listing.json"),
        r#"[{"name":"b b.bin","type":"file","size":1234,"mtime":1700000000}]"#,
    )
    .unwrap();
    let out = tempdir();
    let mut a = cacert(&ng);
    a.extend([
        "-r".into(),
        "-p".into(),
        ng.https("/jsondir/"),
        s(out.path()),
    ]);
    let o = cp(&a);
    assert_ok(&o, "json -r");
    assert!(
        stderr_text(&o).contains("../secret.bin"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&out.path().join("jsondir/a.bin"), &ha, "a");
    assert_file_hash(&out.path().join("jsondir/sub/b b.bin"), &hb, "b");
    assert!(!out.path().join("secret.bin").exists());
    // -p: the time the listing gives (as sync compares it), not the
    // HEAD's Last-Modified.
    assert_eq!(mtime_of(&out.path().join("jsondir/a.bin")), 1_700_000_000);
    assert_eq!(
        list_dir(&out.path().join("jsondir")),
        vec!["a.bin".to_string(), "sub".to_string()]
    );
}

#[test]
fn resume_against_a_server_without_ranges_starts_over_correctly() {
    let Some(ng) = nginx_or_skip("resume_against_a_server_without_ranges") else {
        return;
    };
    let src = ng.www().join("slow/n.bin");
    let h = make_file(&src, 5 * MIB, 21);
    let out = tempdir();
    let dst = out.path().join("n.bin");
    let part = interrupted(&ng, "n.bin", &dst, &[]);
    assert!(part.exists());
    // The same file (same mtime and size, so the same ETag) where nginx
    // ignores Range: a 200 with the same validator.
    let copy = ng.www().join("noranges/n.bin");
    fs::copy(&src, &copy).unwrap();
    set_mtime(&copy, mtime_of(&src) as u64);
    let mut a = cacert(&ng);
    a.extend(["--resume".into(), ng.https("/noranges/n.bin"), s(&dst)]);
    let o = cp(&a);
    assert_ok(&o, "no ranges");
    assert!(
        stderr_text(&o).contains("does not continue downloads"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&dst, &h, "restarted without ranges");
    assert!(part_files(out.path()).is_empty());
}

/// Issue "uploads ... resumable where the server allows", nginx's side: an
/// upload cut by killing nginx mid-PUT leaves no file under the final name
/// (nginx writes the body to a temporary file first), and `--resume` says
/// nginx cannot resume and sends the whole file, which arrives intact.
#[test]
fn upload_cut_by_an_nginx_kill_leaves_nothing_and_resume_starts_over() {
    let Some(mut ng) =
        nginx_or_skip("upload_cut_by_an_nginx_kill_leaves_nothing_and_resume_starts_over")
    else {
        return;
    };
    let src = tempdir();
    let file = src.path().join("cut.bin");
    let h = make_file(&file, 16 * MIB + 9, 41);
    let relay = slow_relay(ng.https_port);
    let home = tempdir();
    let mut a: Vec<String> = vec!["cp".into(), "-q".into()];
    a.extend(cacert(&ng));
    a.extend([s(&file), format!("https://127.0.0.1:{relay}/upload/cut/")]);
    let child = FerryChild::spawn(home.path(), &a, &[]);
    // nginx gathers the body in client_body_temp_path before the rename.
    let body_tmp = ng.dir().join("tmp/body");
    let received = || {
        let mut stack = vec![body_tmp.clone()];
        let mut most = 0;
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).into_iter().flatten().flatten() {
                let m = e.metadata().unwrap();
                if m.is_dir() {
                    stack.push(e.path());
                } else {
                    most = most.max(m.len());
                }
            }
        }
        most
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while received() < 2 * MIB {
        assert!(Instant::now() < deadline, "no upload progress in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    ng.restart(); // stops nginx (master and workers) by PID, starts a new one
    let o = child.wait();
    let dest = ng.www().join("upload/cut/cut.bin");
    if o.status.success() {
        // A retry sent the whole file again to the restarted server.
        assert_file_hash(&dest, &h, "sent again by a retry");
        fs::remove_file(&dest).unwrap();
    } else {
        assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
        assert!(!dest.exists(), "a truncated file under the final name");
    }

    let mut a = cacert(&ng);
    a.extend(["--resume".into(), s(&file), ng.https("/upload/cut/")]);
    let o = cp(&a);
    assert_ok(&o, "--resume after the kill");
    assert!(
        stderr_text(&o).contains("cannot be resumed"),
        "{}",
        describe(&o)
    );
    assert_file_hash(&dest, &h, "sent again in full");
}
