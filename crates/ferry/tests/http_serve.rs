//! ferry's HTTP client against ferry's own server: `ferry cp https://...`
//! to and from `ferry serve` (HTTP/2 and HTTP/1.1 over TLS, the server's
//! self-signed certificate pinned, its bearer token). The two halves are
//! tested against curl/aria2 (serve_http.rs) and nginx (http_nginx.rs);
//! this file checks they agree with each other: the JSON listing for -r,
//! PUT for uploads, ranges for --streams. Every byte is compared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::fs;

use common::serve::FerryServe;
use common::*;

fn no_temp_files(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for name in list_dir(&d) {
            let p = d.join(&name);
            if name.contains(".ferry-upload-") || name.contains(".ferry-part") {
                found.push(p.display().to_string());
            } else if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    found
}

#[test]
fn downloads_over_h2_and_h1_single_split_and_recursive() {
    let s = FerryServe::start(&[]);
    let want = make_file(&s.root().join("large.bin"), 12 * MIB + 7, 11);
    let tree = s.root().join("tree");
    make_odd_tree(&tree, 3);
    let local = tempdir();
    for (i, version) in ["--http2", "--http1.1"].iter().enumerate() {
        let dst = local.path().join(format!("v{i}"));
        fs::create_dir(&dst).unwrap();
        let o = s.https_cp(true, &args![version, s.https_url("large.bin"), &dst]);
        assert!(o.status.success(), "{version} download: {}", describe(&o));
        assert_file_hash(&dst.join("large.bin"), &want, version);

        let o = s.https_cp(
            true,
            &args![
                version,
                "--streams",
                "4",
                s.https_url("large.bin"),
                dst.join("split.bin")
            ],
        );
        assert!(
            o.status.success(),
            "{version} --streams 4: {}",
            describe(&o)
        );
        assert_file_hash(&dst.join("split.bin"), &want, "--streams 4");

        let o = s.https_cp(
            true,
            &args![
                version,
                "-r",
                "-P",
                "8",
                s.https_url("tree/"),
                dst.join("tree")
            ],
        );
        assert!(o.status.success(), "{version} -r: {}", describe(&o));
        assert_same_tree(&tree, &dst.join("tree"), Cmp::default(), "-r over HTTPS");
        assert!(no_temp_files(&dst).is_empty(), "{:?}", no_temp_files(&dst));
    }
}

#[test]
fn uploads_single_and_recursive_to_a_writable_server() {
    let s = FerryServe::start(&["--writable"]);
    let local = tempdir();
    let want = make_file(&local.path().join("large.bin"), 12 * MIB + 7, 12);
    let tree = local.path().join("tree");
    make_odd_tree(&tree, 4);

    let o = s.https_cp(
        true,
        &args![local.path().join("large.bin"), s.https_url("up/")],
    );
    assert!(o.status.success(), "upload: {}", describe(&o));
    assert_file_hash(&s.root().join("up/large.bin"), &want, "PUT to ferry serve");

    let o = s.https_cp(true, &args!["-r", "--http1.1", &tree, s.https_url("up/")]);
    assert!(o.status.success(), "-r upload: {}", describe(&o));
    assert_same_tree(&tree, &s.root().join("up/tree"), Cmp::default(), "-r PUT");
    assert!(
        no_temp_files(&s.root()).is_empty(),
        "{:?}",
        no_temp_files(&s.root())
    );

    // And back down, the whole uploaded tree.
    let back = local.path().join("back");
    let o = s.https_cp(true, &args!["-r", s.https_url("up/tree/"), &back]);
    assert!(o.status.success(), "-r download: {}", describe(&o));
    assert_same_tree(&tree, &back, Cmp::default(), "round trip");
}

#[test]
fn refusals_are_clear_and_touch_nothing() {
    let s = FerryServe::start(&[]);
    make_file(&s.root().join("f.bin"), 100_000, 13);
    let local = tempdir();
    let dst = local.path().join("f.bin");

    // No token: 401, an authentication failure (exit 3), nothing written.
    let o = s.https_cp(false, &args![s.https_url("f.bin"), &dst]);
    assert_eq!(o.status.code(), Some(3), "no token: {}", describe(&o));
    assert!(stderr_text(&o).contains("--token"), "{}", describe(&o));
    assert!(!dst.exists());

    // The self-signed certificate without --pin/--cacert: refused (exit 3).
    let o = ferry_in(
        &s.home(),
        &args!["cp", "-q", "--token", &s.token, s.https_url("f.bin"), &dst],
        &[],
    );
    assert_eq!(o.status.code(), Some(3), "unpinned: {}", describe(&o));
    assert!(stderr_text(&o).contains("--pin"), "{}", describe(&o));
    assert!(!dst.exists());

    // A missing file: the server's 404, exit 4, naming the URL.
    let o = s.https_cp(true, &args![s.https_url("nope.bin"), &dst]);
    assert_eq!(o.status.code(), Some(4), "404: {}", describe(&o));
    assert!(stderr_text(&o).contains("nope.bin"), "{}", describe(&o));

    // A read-only server refuses the upload (exit 4) and keeps no file.
    let src = local.path().join("up.bin");
    make_file(&src, 1000, 14);
    let o = s.https_cp(true, &args![&src, s.https_url("up.bin")]);
    assert_eq!(o.status.code(), Some(4), "read-only PUT: {}", describe(&o));
    assert!(!s.root().join("up.bin").exists());
    assert!(no_temp_files(&s.root()).is_empty());
}

#[test]
fn public_server_reads_without_a_token_and_compressed_transfer_is_exact() {
    let s = FerryServe::start(&["--public"]);
    // Text-like content: ferry serve sends it zstd-encoded when asked.
    let text: String = (0..200_000)
        .map(|i| format!("line {i} of a log file\n"))
        .collect();
    fs::write(s.root().join("log.txt"), &text).unwrap();
    let local = tempdir();
    let o = s.https_cp(
        false,
        &args!["--compressed", s.https_url("log.txt"), local.path()],
    );
    assert!(o.status.success(), "public --compressed: {}", describe(&o));
    assert_eq!(
        fs::read(local.path().join("log.txt")).unwrap(),
        text.as_bytes()
    );
}
