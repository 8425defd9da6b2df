//! `ferry cp` to and from S3, against a real S3 server on 127.0.0.1:
//! versitygw with its POSIX backend, over TLS with a test CA given as
//! `AWS_CA_BUNDLE` (tests/common/versitygw.rs). Small objects (one PUT)
//! and multipart ones, `-r` over prefixes with odd keys, SFTP <-> S3
//! remote to remote, server-side copies, `-p` times kept in metadata,
//! wrong credentials, a missing bucket, and a multipart upload cut short
//! leaving no parts behind. Every byte is compared; no timing is asserted.
//! `mod library` drives `ferry_engine` directly: keys and a provider given
//! in `S3Options` with no AWS variables, and `ExpiredToken` answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::versitygw::{data, versitygw_or_skip, Versitygw};
use common::*;

const MIB: usize = 1024 * 1024;

fn env_of(gw: &Versitygw) -> Vec<(String, String)> {
    gw.env()
}

/// `ferry cp -q ARGS` with the server's environment and HOME = `home`.
fn cp_s3(
    gw: &Versitygw,
    home: &Path,
    args: &[OsString],
    extra: &[(&str, &str)],
) -> std::process::Output {
    let mut a = args!["cp", "-q"];
    a.extend(args.iter().cloned());
    let env = env_of(gw);
    let mut envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    envs.extend_from_slice(extra);
    ferry_in(home, &a, &envs)
}

#[test]
fn put_and_get_small_and_multipart() {
    let Some(gw) = versitygw_or_skip("put_and_get_small_and_multipart", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let small = t.path().join("small.bin");
    let big = t.path().join("big.bin");
    fs::write(&small, data(1000, 1)).unwrap();
    // 23 MiB in 5 MiB parts: five parts, the last one short.
    fs::write(&big, data(23 * MIB + 7, 2)).unwrap();
    let o = cp_s3(&gw, t.path(), &args![&small, "s3://bkt/dir/small.bin"], &[]);
    assert_ok(&o, "put small");
    let o = cp_s3(
        &gw,
        t.path(),
        &args![&big, "s3://bkt/dir/big.bin", "--s3-part-size", "5M"],
        &[],
    );
    assert_ok(&o, "put multipart");
    for name in ["small.bin", "big.bin"] {
        assert_eq!(
            fs::read(gw.root().join("bkt/dir").join(name)).unwrap(),
            fs::read(t.path().join(name)).unwrap(),
            "{name} on the server"
        );
    }
    assert!(gw.leftover_uploads("bkt").is_empty());

    let back = t.path().join("back");
    fs::create_dir(&back).unwrap();
    let o = cp_s3(
        &gw,
        t.path(),
        &args!["s3://bkt/dir/small.bin", "s3://bkt/dir/big.bin", &back],
        &[],
    );
    assert_ok(&o, "get both");
    assert_eq!(
        fs::read(back.join("small.bin")).unwrap(),
        fs::read(&small).unwrap()
    );
    // Big enough to be read in parallel ranges.
    assert_eq!(
        fs::read(back.join("big.bin")).unwrap(),
        fs::read(&big).unwrap()
    );

    // Content-MD5 instead of CRC32 works too.
    let o = cp_s3(
        &gw,
        t.path(),
        &args![
            &big,
            "s3://bkt/md5/big.bin",
            "--s3-part-size",
            "5M",
            "--s3-checksum",
            "md5"
        ],
        &[],
    );
    assert_ok(&o, "put multipart with Content-MD5");
    assert_eq!(
        fs::read(gw.root().join("bkt/md5/big.bin")).unwrap(),
        fs::read(&big).unwrap()
    );
}

#[test]
fn recursive_prefixes_with_odd_keys() {
    let Some(gw) = versitygw_or_skip("recursive_prefixes_with_odd_keys", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let src = t.path().join("tree");
    let names = [
        "a b.txt",
        "plus+sign.txt",
        "100%.txt",
        "%41%20.txt",
        "sub dir/ünïcødé é.txt",
        "sub dir/deeper/x&y=z?.bin",
        "日本/ファイル.dat",
    ];
    for (i, n) in names.iter().enumerate() {
        let p = src.join(n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data(100 + i * 1000, i as u8)).unwrap();
    }
    let o = cp_s3(&gw, t.path(), &args!["-r", &src, "s3://bkt/up/"], &[]);
    assert_ok(&o, "put -r");
    for n in names {
        assert_eq!(
            fs::read(gw.root().join("bkt/up/tree").join(n)).unwrap(),
            fs::read(src.join(n)).unwrap(),
            "{n}"
        );
    }
    let dst = t.path().join("down");
    let o = cp_s3(&gw, t.path(), &args!["-r", "s3://bkt/up/tree", &dst], &[]);
    assert_ok(&o, "get -r");
    assert_eq!(tree_digest(&dst), tree_digest(&src));
    // A prefix (with a space) to a new directory: it becomes that directory.
    let dst2 = t.path().join("down2");
    let o = cp_s3(
        &gw,
        t.path(),
        &args!["-r", "s3://bkt/up/tree/sub dir/", &dst2],
        &[],
    );
    assert_ok(&o, "get -r a prefix with a space");
    assert_eq!(
        fs::read(dst2.join("deeper/x&y=z?.bin")).unwrap(),
        fs::read(src.join("sub dir/deeper/x&y=z?.bin")).unwrap()
    );
}

/// Every file under `dir` with the BLAKE3 of its bytes, by relative path.
fn tree_digest(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.push((
                    rel,
                    blake3::hash(&fs::read(&p).unwrap()).to_hex().to_string(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn sftp_to_s3_and_back_remote_to_remote() {
    let Some(gw) = versitygw_or_skip("sftp_to_s3_and_back_remote_to_remote", &["bkt"]) else {
        return;
    };
    let sshd = Sshd::start();
    let src = sshd.mkdir("r2r-src");
    fs::write(src.join("one.bin"), data(3 * MIB, 7)).unwrap();
    fs::create_dir(src.join("d")).unwrap();
    fs::write(src.join("d/big file.bin"), data(20 * MIB + 3, 8)).unwrap();
    let env = env_of(&gw);
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let o = sshd.cp_env(&args!["-q", "-r", sshd.url(&src), "s3://bkt/r2r/"], &envs);
    sshd.assert_ok(&o, "sftp -> s3 -r");
    let up = gw.root().join("bkt/r2r/r2r-src");
    assert_eq!(
        fs::read(up.join("one.bin")).unwrap(),
        fs::read(src.join("one.bin")).unwrap()
    );
    assert_eq!(
        fs::read(up.join("d/big file.bin")).unwrap(),
        fs::read(src.join("d/big file.bin")).unwrap()
    );
    let back = sshd.mkdir("r2r-back");
    let o = sshd.cp_env(
        &args!["-q", "-r", "s3://bkt/r2r/r2r-src/", sshd.url(&back)],
        &envs,
    );
    sshd.assert_ok(&o, "s3 -> sftp -r");
    // As cp -r: the source directory goes into the destination.
    assert_eq!(tree_digest(&back.join("r2r-src")), tree_digest(&src));
}

#[test]
fn server_side_copy_and_times() {
    let Some(gw) = versitygw_or_skip("server_side_copy_and_times", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("f.bin");
    fs::write(&f, data(6 * MIB, 3)).unwrap();
    let when = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(when)
        .unwrap();
    let o = cp_s3(&gw, t.path(), &args!["-p", &f, "s3://bkt/a/f.bin"], &[]);
    assert_ok(&o, "put -p");
    // S3 to S3 in one bucket: CopyObject, no byte through ferry.
    let o = cp_s3(
        &gw,
        t.path(),
        &args!["s3://bkt/a/f.bin", "s3://bkt/b/copy.bin"],
        &[],
    );
    assert_ok(&o, "copy on the store");
    assert_eq!(
        fs::read(gw.root().join("bkt/b/copy.bin")).unwrap(),
        fs::read(&f).unwrap()
    );
    // The time went up with -p (x-amz-meta-mtime) and comes back with -p.
    let back = t.path().join("back.bin");
    let o = cp_s3(&gw, t.path(), &args!["-p", "s3://bkt/a/f.bin", &back], &[]);
    assert_ok(&o, "get -p");
    assert_eq!(fs::metadata(&back).unwrap().modified().unwrap(), when);
}

#[test]
fn wrong_credentials_say_so() {
    let Some(gw) = versitygw_or_skip("wrong_credentials_say_so", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    for args in [
        args![&f, "s3://bkt/f"],
        args!["s3://bkt/f", t.path().join("g")],
    ] {
        let o = cp_s3(
            &gw,
            t.path(),
            &args,
            &[("AWS_SECRET_ACCESS_KEY", "not-the-secret")],
        );
        assert_code(&o, 3, "wrong secret");
        let e = stderr_text(&o);
        assert!(
            e.contains("s3://bkt/") && e.contains("AWS_SECRET_ACCESS_KEY"),
            "{e}"
        );
    }
    let o = cp_s3(
        &gw,
        t.path(),
        &args![&f, "s3://bkt/f"],
        &[("AWS_ACCESS_KEY_ID", "nobody")],
    );
    assert_code(&o, 3, "unknown access key");
}

#[test]
fn no_sign_request_sends_no_keys() {
    let Some(gw) = versitygw_or_skip("no_sign_request_sends_no_keys", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    // The environment's keys are right, yet nothing is signed: versitygw
    // (no public buckets) refuses, and the message says why.
    let o = cp_s3(
        &gw,
        t.path(),
        &args![&f, "s3://bkt/unsigned", "--s3-no-sign-request"],
        &[],
    );
    assert_code(&o, 3, "unsigned");
    let e = stderr_text(&o);
    assert!(e.contains("unsigned"), "{e}");
    assert!(!gw.root().join("bkt/unsigned").exists());
    let o = cp_s3(&gw, t.path(), &args![&f, "s3://bkt/signed"], &[]);
    assert_ok(&o, "signed");
}

#[test]
fn missing_bucket_says_so() {
    let Some(gw) = versitygw_or_skip("missing_bucket_says_so", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    let o = cp_s3(&gw, t.path(), &args![&f, "s3://nosuchbucket/f"], &[]);
    assert_code(&o, 4, "upload into a missing bucket");
    let e = stderr_text(&o);
    assert!(
        e.contains("nosuchbucket") && e.contains("NoSuchBucket") && e.contains(&gw.endpoint()),
        "{e}"
    );
    let o = cp_s3(
        &gw,
        t.path(),
        &args!["s3://nosuchbucket/f", t.path().join("g")],
        &[],
    );
    assert_code(&o, 4, "download from a missing bucket");
    assert!(stderr_text(&o).contains("create it"), "{}", describe(&o));
}

/// An upload cut short (Ctrl-C mid-way) aborts its multipart upload: no
/// parts are left on the store to be paid for, and no object appears.
#[test]
fn interrupted_multipart_upload_leaves_no_parts() {
    let Some(gw) = versitygw_or_skip("interrupted_multipart_upload_leaves_no_parts", &["bkt"])
    else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("big.bin");
    // Sparse: 4 GiB cost no disk, and take long enough to interrupt.
    fs::File::create(&f).unwrap().set_len(4 << 30).unwrap();
    let env = env_of(&gw);
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut child = FerryChild::spawn(
        t.path(),
        &args!["cp", "-q", &f, "s3://bkt/big.bin", "--s3-part-size", "5M"],
        &envs,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while gw.leftover_uploads("bkt").len() < 2 {
        assert!(Instant::now() < deadline, "no parts arrived: {}", gw.log());
        assert!(
            child.try_wait().is_none(),
            "ferry ended before it was interrupted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.pid().to_string()])
        .status();
    let o = child.wait();
    assert_code(&o, 130, "interrupted");
    assert!(
        gw.leftover_uploads("bkt").is_empty(),
        "parts left: {:?}",
        gw.leftover_uploads("bkt")
    );
    assert!(!gw.root().join("bkt/big.bin").exists());
}

/// `--resume` continues a multipart upload that was cut short: the parts
/// already on the store are checked (size and MD5 ETag) and skipped, the
/// rest are sent, and the object is whole.
#[test]
fn interrupted_multipart_upload_resumes() {
    let Some(gw) = versitygw_or_skip("interrupted_multipart_upload_resumes", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("big.bin");
    let st = std::process::Command::new("head")
        .args(["-c", &(300 * MIB).to_string(), "/dev/urandom"])
        .stdout(fs::File::create(&f).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    let env = env_of(&gw);
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args = args![
        "cp",
        "-q",
        "--resume",
        &f,
        "s3://bkt/big.bin",
        "--s3-part-size",
        "5M",
        "--s3-upload-concurrency",
        "1"
    ];
    let mut child = FerryChild::spawn(t.path(), &args, &envs);
    let deadline = Instant::now() + Duration::from_secs(60);
    while gw.leftover_uploads("bkt").len() < 4 {
        assert!(Instant::now() < deadline, "no parts arrived: {}", gw.log());
        assert!(
            child.try_wait().is_none(),
            "ferry ended before it was interrupted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.pid().to_string()])
        .status();
    let o = child.wait();
    assert_code(&o, 130, "interrupted");
    assert!(
        stderr_text(&o).contains("kept for --resume"),
        "{}",
        describe(&o)
    );
    assert!(
        !gw.leftover_uploads("bkt").is_empty(),
        "the upload was kept"
    );
    assert!(!gw.root().join("bkt/big.bin").exists());

    let o = FerryChild::spawn(t.path(), &args, &envs).wait();
    assert_ok(&o, "resumed");
    assert!(
        stderr_text(&o).contains("resuming multipart upload"),
        "{}",
        describe(&o)
    );
    assert_eq!(
        blake3::hash(&fs::read(gw.root().join("bkt/big.bin")).unwrap()),
        blake3::hash(&fs::read(&f).unwrap())
    );
    assert!(gw.leftover_uploads("bkt").is_empty());
}

/// A 503 storm: a proxy in front of the store answers the first requests
/// of every third connection with `503 SlowDown` and closes it; the copy
/// retries (each part and request on its own, with backoff) and every
/// object arrives whole.
#[test]
fn slowdown_storm_is_retried() {
    let Some(bin) = common::versitygw::versitygw_bin() else {
        eprintln!("SKIPPED slowdown_storm_is_retried: versitygw not found");
        return;
    };
    let gw = Versitygw::start_with(&bin, &["bkt"], false);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    let upstream = gw.port;
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r2 = refused.clone();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut c) = conn else { continue };
            if n % 3 == 0 && r2.load(std::sync::atomic::Ordering::Relaxed) < 20 {
                r2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => seen.extend_from_slice(&buf[..k]),
                        }
                    }
                    let body = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                    let _ = write!(
                        c,
                        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = c.shutdown(std::net::Shutdown::Both);
                });
                continue;
            }
            std::thread::spawn(move || {
                let Ok(up) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else {
                    return;
                };
                let (mut a, mut b) = (c.try_clone().unwrap(), up.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b);
                    let _ = b.shutdown(std::net::Shutdown::Write);
                });
                let (mut up2, mut c2) = (up, c);
                let _ = std::io::copy(&mut up2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    let t = tempdir();
    let src = t.path().join("src");
    fs::create_dir(&src).unwrap();
    for i in 0..12 {
        fs::write(src.join(format!("f{i}.bin")), data(50_000 + i, i as u8)).unwrap();
    }
    fs::write(src.join("big.bin"), data(30 * MIB, 99)).unwrap();
    let endpoint = format!("http://127.0.0.1:{proxy_port}");
    let envs = [
        ("AWS_ACCESS_KEY_ID", common::versitygw::ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", common::versitygw::SECRET_KEY),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
    ];
    let o = ferry_in(
        t.path(),
        &args![
            "cp",
            "-q",
            "-r",
            "--retries",
            "6",
            &src,
            "s3://bkt/storm/",
            "--s3-part-size",
            "5M"
        ],
        &envs,
    );
    assert_ok(&o, "upload through the storm");
    assert!(refused.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert_eq!(
        tree_digest(&gw.root().join("bkt/storm/src")),
        tree_digest(&src)
    );
    let back = t.path().join("back");
    let o = ferry_in(
        t.path(),
        &args![
            "cp",
            "-q",
            "-r",
            "--retries",
            "6",
            "s3://bkt/storm/src",
            &back
        ],
        &envs,
    );
    assert_ok(&o, "download through the storm");
    assert_eq!(tree_digest(&back), tree_digest(&src));
}

/// A download refused for a CRC32 that does not match: it says so, and
/// nothing of `name` is left in `dir`, under the final name or a part.
fn assert_refused_as_corrupt(o: &std::process::Output, dir: &Path, dst: &Path, name: &str) {
    let err = stderr_text(o).to_lowercase();
    assert!(
        err.contains("does not match") && err.contains("crc32"),
        "{name}: {}",
        describe(o)
    );
    assert!(!dst.exists(), "{name} kept");
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(name))
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{name}: left {left:?}");
}

/// Same size, other bytes, written into the object's file on the server:
/// the checksum versitygw keeps (in extended attributes) stays the old one.
fn corrupt_in_place(p: &Path) {
    let mut d = fs::read(p).unwrap();
    let mid = d.len() / 2;
    for b in d.iter_mut().skip(mid).take(64) {
        *b ^= 0xa5;
    }
    fs::write(p, &d).unwrap();
}

#[test]
fn download_checked_against_the_stored_crc32() {
    let Some(gw) = versitygw_or_skip("download_checked_against_the_stored_crc32", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    // Read whole and put whole; one stream; ranges in parallel (and a
    // multipart object, whose CRC32 is FULL_OBJECT).
    let files = [
        ("small.bin", 100_000usize),
        ("medium.bin", 3 * MIB),
        ("big.bin", 33 * MIB + 11),
    ];
    for (i, (name, len)) in files.iter().enumerate() {
        let p = t.path().join(name);
        fs::write(&p, data(*len, 40 + i as u8)).unwrap();
        let o = cp_s3(&gw, t.path(), &args![&p, format!("s3://bkt/v/{name}")], &[]);
        assert_ok(&o, name);
    }
    // Intact: each comes back (and is checked on the way).
    let back = t.path().join("back");
    fs::create_dir(&back).unwrap();
    let o = cp_s3(&gw, t.path(), &args!["-r", "s3://bkt/v/", &back], &[]);
    assert_ok(&o, "get intact");
    for (name, _) in files {
        assert_eq!(
            fs::read(back.join("v").join(name)).unwrap(),
            fs::read(t.path().join(name)).unwrap()
        );
    }
    // Changed behind the store's back: each download fails, exit 4,
    // nothing kept under the name or as a part file.
    for (name, _) in files {
        corrupt_in_place(&gw.root().join("bkt/v").join(name));
        let dst = t.path().join(format!("bad-{name}"));
        let o = cp_s3(
            &gw,
            t.path(),
            &args![format!("s3://bkt/v/{name}"), &dst],
            &[],
        );
        assert_code(&o, 4, name);
        // One stream: the backend's check; ranges: the engine's, of the
        // CRC32 combined from the ranges' (taken as their bytes passed)
        // against the same stored value.
        assert_refused_as_corrupt(&o, t.path(), &dst, name);
    }
}

/// A `credential_process` script in `dir/my tools/` (a space, so the
/// config line must quote it): checks that its arguments arrived as two
/// words, appends a line to `dir/runs` each time it runs, says something
/// on stderr (passed through to the user), then runs `body`.
fn credential_script(dir: &Path, body: &str) -> std::path::PathBuf {
    let tools = dir.join("my tools");
    fs::create_dir_all(&tools).unwrap();
    let script = tools.join("creds.sh");
    let runs = dir.join("runs");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             [ \"$1\" = --who ] && [ \"$2\" = 'ferry test' ] || {{ echo \"bad arguments: $*\" >&2; exit 2; }}\n\
             echo run >> '{}'\n\
             echo 'credential tool: hello' >&2\n\
             {body}\n",
            runs.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// The profile `ferrytest` in a config file whose credential_process is
/// `script`, and the environment that selects it (no AWS_ACCESS_KEY_ID).
fn credential_process_env(gw: &Versitygw, dir: &Path, script: &Path) -> Vec<(String, String)> {
    let config = dir.join("aws-config");
    fs::write(
        &config,
        format!(
            "[profile ferrytest]\ncredential_process = \"{}\" --who 'ferry test'\n",
            script.display()
        ),
    )
    .unwrap();
    let mut env: Vec<(String, String)> = gw
        .env()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AWS_ACCESS_KEY_ID") && !k.starts_with("AWS_SECRET"))
        .collect();
    env.push(("AWS_CONFIG_FILE".into(), config.display().to_string()));
    env.push(("AWS_PROFILE".into(), "ferrytest".into()));
    env
}

fn runs_of(dir: &Path) -> usize {
    fs::read_to_string(dir.join("runs"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// What the script prints: the server's keys, as a credential tool would,
/// with an `Expiration` `expires_in` seconds from now if given.
fn credentials_json(expires_in: Option<u32>) -> String {
    let (exp_fmt, exp_arg) = match expires_in {
        Some(s) => (
            ", \"Expiration\": \"%s\"",
            format!(" \"$(date -u -d \"@$(( $(date +%s) + {s} ))\" +%Y-%m-%dT%H:%M:%SZ)\""),
        ),
        None => ("", String::new()),
    };
    format!(
        "printf '{{\"Version\": 1, \"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\"{exp_fmt}}}\\n' {} {}{exp_arg}",
        common::versitygw::ACCESS_KEY,
        common::versitygw::SECRET_KEY
    )
}

fn envs_ref(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[test]
fn credential_process_signs_uploads_and_downloads() {
    let Some(gw) = versitygw_or_skip("credential_process_signs_uploads_and_downloads", &["bkt"])
    else {
        return;
    };
    let t = tempdir();
    let script = credential_script(t.path(), &credentials_json(None));
    let env = credential_process_env(&gw, t.path(), &script);
    let envs = envs_ref(&env);
    let small = t.path().join("small.bin");
    let big = t.path().join("big.bin");
    fs::write(&small, data(1000, 7)).unwrap();
    fs::write(&big, data(17 * MIB + 3, 8)).unwrap();
    let o = ferry_in(
        t.path(),
        &args!["cp", &small, &big, "s3://bkt/cp/", "--s3-part-size", "5M"],
        &envs,
    );
    assert_ok(&o, "upload with credential_process");
    // Run once (no Expiration), its stderr shown to the user.
    assert_eq!(runs_of(t.path()), 1, "{}", describe(&o));
    assert!(
        stderr_text(&o).contains("credential tool: hello"),
        "{}",
        describe(&o)
    );
    for name in ["small.bin", "big.bin"] {
        assert_eq!(
            fs::read(gw.root().join("bkt/cp").join(name)).unwrap(),
            fs::read(t.path().join(name)).unwrap(),
            "{name} on the server"
        );
    }
    let back = t.path().join("back");
    fs::create_dir(&back).unwrap();
    let o = ferry_in(
        t.path(),
        &args!["cp", "-q", "-r", "s3://bkt/cp/", &back],
        &envs,
    );
    assert_ok(&o, "download with credential_process");
    assert_eq!(runs_of(t.path()), 2);
    for name in ["small.bin", "big.bin"] {
        assert_eq!(
            fs::read(back.join("cp").join(name)).unwrap(),
            fs::read(t.path().join(name)).unwrap(),
            "{name} back"
        );
    }

    // Static keys in the same profile come first: the script is not run.
    let config = t.path().join("aws-config");
    let text = fs::read_to_string(&config).unwrap();
    fs::write(
        &config,
        format!(
            "{text}aws_access_key_id = {}\naws_secret_access_key = {}\n",
            common::versitygw::ACCESS_KEY,
            common::versitygw::SECRET_KEY
        ),
    )
    .unwrap();
    let o = ferry_in(
        t.path(),
        &args!["cp", "-q", &small, "s3://bkt/cp/again"],
        &envs,
    );
    assert_ok(&o, "profile keys");
    assert_eq!(runs_of(t.path()), 2, "credential_process run despite keys");
}

#[test]
fn credential_process_failures_say_so() {
    let Some(gw) = versitygw_or_skip("credential_process_failures_say_so", &["bkt"]) else {
        return;
    };
    let t = tempdir();
    let f = t.path().join("f");
    fs::write(&f, b"x").unwrap();
    // Exits 1: exit 3, naming the profile and the command, quoting stderr.
    let script = credential_script(t.path(), "echo 'session expired: log in again' >&2; exit 1");
    let env = credential_process_env(&gw, t.path(), &script);
    let o = ferry_in(
        t.path(),
        &args!["cp", "-q", &f, "s3://bkt/f"],
        &envs_ref(&env),
    );
    assert_code(&o, 3, "credential_process exits 1");
    let e = stderr_text(&o);
    for want in [
        "credential_process",
        "\"ferrytest\"",
        "my tools/creds.sh",
        "log in again",
        "status: 1",
    ] {
        assert!(e.contains(want), "{want:?} missing: {}", describe(&o));
    }
    assert!(!gw.root().join("bkt/f").exists());

    // Prints another Version, or no secret: the same, saying what is wrong.
    for (body, want) in [
        (
            "echo '{\"Version\": 2, \"AccessKeyId\": \"a\", \"SecretAccessKey\": \"s\"}'",
            "Version",
        ),
        (
            "echo '{\"Version\": 1, \"AccessKeyId\": \"a\"}'",
            "SecretAccessKey",
        ),
        ("echo 'not json'", "not JSON"),
    ] {
        let script = credential_script(t.path(), body);
        let env = credential_process_env(&gw, t.path(), &script);
        let o = ferry_in(
            t.path(),
            &args!["cp", "-q", &f, "s3://bkt/f"],
            &envs_ref(&env),
        );
        assert_code(&o, 3, body);
        let e = stderr_text(&o);
        assert!(
            e.contains(want) && e.contains("\"ferrytest\""),
            "{body}: {}",
            describe(&o)
        );
    }
}

#[test]
fn credential_process_runs_again_before_expiration() {
    let Some(bin) = common::versitygw::versitygw_bin() else {
        eprintln!("SKIPPED credential_process_runs_again_before_expiration: versitygw not found");
        return;
    };
    use common::faultproxy::{Action, Fault, FaultProxy, Flow};
    // Plain HTTP behind a proxy that pauses every connection mid-upload.
    let gw = Versitygw::start_with(&bin, &["bkt"], false);
    let proxy = FaultProxy::start(gw.port);
    let t = tempdir();
    // Credentials that expire 2 s after they are printed: ferry runs the
    // script again after about half of that.
    let script = credential_script(t.path(), &credentials_json(Some(2)));
    let mut env = credential_process_env(&gw, t.path(), &script);
    for (k, v) in env.iter_mut() {
        if k == "AWS_ENDPOINT_URL" {
            *v = format!("http://127.0.0.1:{}", proxy.port());
        }
    }
    let big = t.path().join("big.bin");
    fs::write(&big, data(30 * MIB, 9)).unwrap();
    proxy.arm(Fault {
        flow: Flow::Up,
        after: 8 * MIB as u64,
        action: Action::Pause,
        times: 1,
    });
    let child = FerryChild::spawn(
        t.path(),
        &args![
            "cp",
            "-q",
            &big,
            "s3://bkt/exp/big.bin",
            "--s3-part-size",
            "5M",
            "--s3-upload-concurrency",
            "1"
        ],
        &envs_ref(&env),
    );
    assert!(proxy.wait_fired(Duration::from_secs(60)), "never paused");
    // Hold the upload past the credentials' expiration.
    std::thread::sleep(Duration::from_millis(2500));
    proxy.release();
    let o = child.wait();
    assert_ok(&o, "upload across an expiration");
    assert!(
        runs_of(t.path()) >= 2,
        "credential_process ran {} times: {}",
        runs_of(t.path()),
        describe(&o)
    );
    assert_eq!(
        fs::read(gw.root().join("bkt/exp/big.bin")).unwrap(),
        fs::read(&big).unwrap()
    );
    assert!(gw.leftover_uploads("bkt").is_empty());
}

/// One request signed with ferry's own SigV4 code, sent over a plain TCP
/// connection to versitygw on HTTP: (status, headers and body as text).
fn raw_s3(
    port: u16,
    method: &str,
    path: &str,
    query: &[(&str, &str)],
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    use ferry_engine::s3::sigv4;
    use std::io::{Read, Write};
    let query: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let when = sigv4::AmzDate::now();
    let host = format!("127.0.0.1:{port}");
    let mut signed: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    signed.push(("host".into(), host.clone()));
    signed.push(("x-amz-date".into(), when.datetime.clone()));
    signed.push((
        "x-amz-content-sha256".into(),
        sigv4::UNSIGNED_PAYLOAD.into(),
    ));
    let creds = ferry_engine::s3::Credentials {
        access_key: common::versitygw::ACCESS_KEY.into(),
        secret_key: common::versitygw::SECRET_KEY.into(),
        session_token: None,
    };
    let auth = sigv4::authorization(
        &sigv4::Request {
            method,
            path,
            query: &query,
            headers: &signed,
            payload_hash: sigv4::UNSIGNED_PAYLOAD,
        },
        &creds,
        "us-east-1",
        &when,
    );
    let q = sigv4::canonical_query(&query);
    let mut req = format!(
        "{method} {path}{}{q} HTTP/1.1\r\n",
        if q.is_empty() { "" } else { "?" }
    );
    for (k, v) in &signed {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!(
        "authorization: {auth}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> &'a str {
    let start = text
        .find(open)
        .map(|i| i + open.len())
        .unwrap_or_else(|| panic!("no {open} in {text}"));
    let end = text[start..]
        .find(close)
        .map(|i| start + i)
        .unwrap_or_else(|| panic!("no {close} in {text}"));
    &text[start..end]
}

/// Upload `data` to `bucket/key` as a COMPOSITE multipart object in parts
/// of `part` bytes, as the AWS CLI did before FULL_OBJECT (and other
/// tools still do): each part with its CRC32, the object keeping the
/// CRC32 of the parts' CRC32s, written `VALUE-N`.
fn put_composite(port: u16, bucket: &str, key: &str, data: &[u8], part: usize) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let path = format!("/{bucket}/{key}");
    let (s, text) = raw_s3(
        port,
        "POST",
        &path,
        &[("uploads", "")],
        &[
            ("x-amz-checksum-algorithm", "CRC32".into()),
            ("x-amz-checksum-type", "COMPOSITE".into()),
        ],
        b"",
    );
    assert_eq!(s, 200, "{text}");
    let id = between(&text, "<UploadId>", "</UploadId>").to_string();
    let mut complete = String::from("<CompleteMultipartUpload>");
    let mut crcs = Vec::new();
    for (i, chunk) in data.chunks(part).enumerate() {
        let n = (i + 1).to_string();
        let crc = crc32fast::hash(chunk);
        crcs.extend_from_slice(&crc.to_be_bytes());
        let sum = b64.encode(crc.to_be_bytes());
        let (s, text) = raw_s3(
            port,
            "PUT",
            &path,
            &[("partNumber", &n), ("uploadId", &id)],
            &[("x-amz-checksum-crc32", sum.clone())],
            chunk,
        );
        assert_eq!(s, 200, "part {n}: {text}");
        let lower = text.to_ascii_lowercase();
        let etag = between(&lower, "etag: ", "\r\n").to_string();
        complete.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag><ChecksumCRC32>{sum}</ChecksumCRC32></Part>"
        ));
    }
    complete.push_str("</CompleteMultipartUpload>");
    let (s, text) = raw_s3(
        port,
        "POST",
        &path,
        &[("uploadId", &id)],
        &[],
        complete.as_bytes(),
    );
    assert!(s == 200 && !text.contains("<Error>"), "complete: {text}");
    let want = format!(
        "{}-{}",
        b64.encode(crc32fast::hash(&crcs).to_be_bytes()),
        data.len().div_ceil(part)
    );
    assert!(text.contains(&want), "not COMPOSITE {want}: {text}");
    want
}

#[test]
fn composite_multipart_objects_are_checked() {
    let Some(bin) = common::versitygw::versitygw_bin() else {
        eprintln!("SKIPPED composite_multipart_objects_are_checked: versitygw not found");
        return;
    };
    // Plain HTTP: the test's own requests make the objects.
    let gw = Versitygw::start_with(&bin, &["bkt"], false);
    let t = tempdir();
    // One stream (12 MiB) and parallel ranges (34 MiB), in 5 MiB parts.
    let files = [("one.bin", 12 * MIB + 5), ("split.bin", 34 * MIB + 3)];
    for (i, (name, len)) in files.iter().enumerate() {
        let d = data(*len, 60 + i as u8);
        fs::write(t.path().join(name), &d).unwrap();
        put_composite(gw.port, "bkt", &format!("c/{name}"), &d, 5 * MIB);
    }
    let endpoint = gw.endpoint();
    let envs = [
        ("AWS_ACCESS_KEY_ID", common::versitygw::ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", common::versitygw::SECRET_KEY),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
    ];
    let back = t.path().join("back");
    fs::create_dir(&back).unwrap();
    let o = ferry_in(
        t.path(),
        &args!["cp", "-q", "-r", "s3://bkt/c/", &back],
        &envs,
    );
    assert_ok(&o, "get intact COMPOSITE objects");
    for (name, _) in files {
        assert_eq!(
            fs::read(back.join("c").join(name)).unwrap(),
            fs::read(t.path().join(name)).unwrap(),
            "{name}"
        );
    }
    // check -c compares the stored value with the local files hashed part
    // by part: no object read; a same-size change is found.
    let check = |ctx: &str| {
        let o = ferry_in(
            t.path(),
            &args!["check", "--json", "-q", "-c", back.join("c"), "s3://bkt/c/"],
            &envs,
        );
        let out = stdout_text(&o);
        let last = out.lines().last().unwrap_or_default().to_string();
        let v: serde_json::Value = serde_json::from_str(&last)
            .unwrap_or_else(|e| panic!("{ctx}: json: {e}: {}", describe(&o)));
        assert_eq!(v["hash"], "crc32", "{ctx}: {}", describe(&o));
        assert_eq!(v["hashed_by_reading"], 0, "{ctx}: {}", describe(&o));
        (o, v)
    };
    let (o, v) = check("intact");
    assert_ok(&o, "check -c");
    assert_eq!(v["same"], 2, "{}", describe(&o));
    let local = back.join("c/one.bin");
    let mtime = fs::metadata(&local).unwrap().modified().unwrap();
    corrupt_in_place(&local);
    fs::File::options()
        .write(true)
        .open(&local)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let (o, v) = check("changed");
    assert_code(&o, 1, "check -c finds the change");
    assert_eq!(v["differ"], 1, "{}", describe(&o));

    // Changed on the server behind versitygw's back: refused, nothing kept.
    for (name, _) in files {
        corrupt_in_place(&gw.root().join("bkt/c").join(name));
        let dst = t.path().join(format!("bad-{name}"));
        let o = ferry_in(
            t.path(),
            &args!["cp", "-q", format!("s3://bkt/c/{name}"), &dst],
            &envs,
        );
        assert_code(&o, 4, name);
        assert_refused_as_corrupt(&o, t.path(), &dst, name);
    }
}

/// The library, not the binary: `ferry_engine` with S3 options built in
/// code, reading nothing from the environment (this test process has no
/// AWS keys, endpoint or profile; the harness gives them only to ferry
/// children).
mod library {
    use super::*;
    use ferry_engine::s3::{Credentials, CredentialsProvider, ExpiringCredentials, S3Options};
    use ferry_engine::{run_blocking, CopyOptions, ErrorKind, Location, Transfer, TransferError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::SystemTime;

    /// Keys in this process's environment would make these tests prove
    /// less (an AWS_CA_BUNDLE some machines set does not matter).
    fn no_aws_env() {
        let set: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| {
                k.starts_with("AWS_ACCESS")
                    || k.starts_with("AWS_SECRET")
                    || k.starts_with("AWS_SESSION")
                    || k.starts_with("AWS_PROFILE")
                    || k.starts_with("AWS_ENDPOINT")
            })
            .collect();
        assert!(set.is_empty(), "the test process has {set:?}");
    }

    fn options(endpoint: String, cacert: Option<&Path>, s3: S3Options) -> CopyOptions {
        let mut o = CopyOptions::default();
        o.http.tls.cacert = cacert.map(Path::to_path_buf);
        o.s3 = S3Options {
            endpoint: Some(endpoint),
            ..s3
        };
        o
    }

    fn copy(
        src: impl AsRef<std::ffi::OsStr>,
        dst: &str,
        o: &CopyOptions,
    ) -> Result<(), TransferError> {
        let src = Location::parse(&src.as_ref().to_string_lossy()).unwrap();
        let dst = Location::parse(dst).unwrap();
        run_blocking(Transfer::new(vec![src], dst, o.clone()), |_| true)
            .into_result()
            .map(drop)
    }

    fn keys() -> Credentials {
        Credentials::new(common::versitygw::ACCESS_KEY, common::versitygw::SECRET_KEY)
    }

    #[test]
    fn static_keys_in_the_options() {
        let Some(gw) = versitygw_or_skip("library::static_keys_in_the_options", &["bkt"]) else {
            return;
        };
        no_aws_env();
        let t = tempdir();
        let f = t.path().join("lib.bin");
        fs::write(&f, data(300_000, 31)).unwrap();
        let with = |s3| options(gw.endpoint(), Some(&gw.cert), s3);

        // Nothing given: refused before any request, saying how to give keys.
        let e = copy(&f, "s3://bkt/lib/none.bin", &with(S3Options::default())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage, "{e}");
        assert!(e.to_string().contains("S3Options::credentials"), "{e}");

        let o = with(S3Options {
            credentials: Some(keys()),
            ..S3Options::default()
        });
        copy(&f, "s3://bkt/lib/lib.bin", &o).unwrap();
        assert_eq!(
            fs::read(gw.root().join("bkt/lib/lib.bin")).unwrap(),
            fs::read(&f).unwrap()
        );
        let back = t.path().join("back.bin");
        copy("s3://bkt/lib/lib.bin", &back.display().to_string(), &o).unwrap();
        assert_eq!(fs::read(&back).unwrap(), fs::read(&f).unwrap());

        // Wrong keys: an Auth error that names where they came from.
        let o = with(S3Options {
            credentials: Some(Credentials::new(common::versitygw::ACCESS_KEY, "wrong")),
            ..S3Options::default()
        });
        let e = copy(&f, "s3://bkt/lib/wrong.bin", &o).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
        assert!(e.to_string().contains("S3Options::credentials"), "{e}");
        assert!(!e.to_string().contains("AWS_ACCESS_KEY_ID"), "{e}");
    }

    /// Keys set by name (what the Python and C bindings do) come before
    /// the AWS variables that `aws_config` holds, even wrong ones.
    #[test]
    fn keys_by_name_before_the_aws_variables() {
        let Some(gw) =
            versitygw_or_skip("library::keys_by_name_before_the_aws_variables", &["bkt"])
        else {
            return;
        };
        let t = tempdir();
        let f = t.path().join("named.bin");
        fs::write(&f, data(200_000, 33)).unwrap();
        let wrong_env = |o: &mut CopyOptions| {
            let env: std::collections::HashMap<String, String> = [
                ("AWS_ACCESS_KEY_ID", "AKIDWRONG"),
                ("AWS_SECRET_ACCESS_KEY", "wrong-secret"),
                ("AWS_SESSION_TOKEN", "wrong-token"),
                ("AWS_ENDPOINT_URL", "https://127.0.0.1:1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            o.s3.aws_config = Some(ferry_engine::s3::AwsConfig::new(env, Some(t.path().into())));
        };
        let named = |secret: &str| {
            let mut o = CopyOptions::default();
            wrong_env(&mut o);
            o.set("cacert", &gw.cert.display().to_string()).unwrap();
            o.set("s3_endpoint", &gw.endpoint()).unwrap();
            o.set("s3_access_key_id", common::versitygw::ACCESS_KEY)
                .unwrap();
            o.set("s3_secret_access_key", secret).unwrap();
            o.set("s3_part_size", "5M").unwrap();
            o.check_named().unwrap();
            o
        };
        let o = named(common::versitygw::SECRET_KEY);
        copy(&f, "s3://bkt/named/f.bin", &o).unwrap();
        assert_eq!(
            fs::read(gw.root().join("bkt/named/f.bin")).unwrap(),
            fs::read(&f).unwrap()
        );
        let back = t.path().join("back.bin");
        copy("s3://bkt/named/f.bin", &back.display().to_string(), &o).unwrap();
        assert_eq!(fs::read(&back).unwrap(), fs::read(&f).unwrap());

        // Wrong keys by name: the message names them, not the variables.
        let e = copy(&f, "s3://bkt/named/wrong.bin", &named("wrong")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
        assert!(e.to_string().contains("s3_secret_access_key"), "{e}");
        assert!(!e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");
    }

    #[test]
    fn keys_from_a_provider() {
        let Some(gw) = versitygw_or_skip("library::keys_from_a_provider", &["bkt"]) else {
            return;
        };
        no_aws_env();
        let t = tempdir();
        let src = t.path().join("tree");
        fs::create_dir(&src).unwrap();
        for i in 0..5 {
            fs::write(src.join(format!("f{i}")), data(10_000 + i, i as u8)).unwrap();
        }
        let calls = Arc::new(AtomicUsize::new(0));
        let c2 = calls.clone();
        let provider = CredentialsProvider::blocking(move || {
            c2.fetch_add(1, Ordering::SeqCst);
            Ok(ExpiringCredentials {
                credentials: keys(),
                expiration: Some(SystemTime::now() + Duration::from_secs(3600)),
            })
        });
        let mut o = options(
            gw.endpoint(),
            Some(&gw.cert),
            S3Options {
                provider: Some(provider),
                ..S3Options::default()
            },
        );
        o.recursive = true;
        copy(&src, "s3://bkt/p/", &o).unwrap();
        assert_eq!(
            tree_digest(&gw.root().join("bkt/p/tree")),
            tree_digest(&src)
        );
        // Asked when the backend opened, not per request.
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        // A provider that fails: Auth, with its message.
        let o = options(
            gw.endpoint(),
            Some(&gw.cert),
            S3Options {
                provider: Some(CredentialsProvider::blocking(|| Err("vault sealed".into()))),
                ..S3Options::default()
            },
        );
        let e = copy(src.join("f0"), "s3://bkt/p/x", &o).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
        assert!(e.to_string().contains("vault sealed"), "{e}");
    }

    /// A plain-HTTP proxy in front of the store that answers any request
    /// signed with the access key `STALE` as AWS answers an expired
    /// session token (400 ExpiredToken) and passes the rest on. Returns
    /// its port and how many requests it refused.
    fn expiring_proxy(upstream: u16) -> (u16, Arc<AtomicUsize>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let refused = Arc::new(AtomicUsize::new(0));
        let r2 = refused.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { continue };
                let refused = r2.clone();
                std::thread::spawn(move || {
                    // The first request's head decides for the connection
                    // (refused ones are closed).
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    let end = loop {
                        if let Some(i) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(k) => seen.extend_from_slice(&buf[..k]),
                        }
                    };
                    let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                    if head.contains("credential=stale/") {
                        refused.fetch_add(1, Ordering::SeqCst);
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        let mut have = seen.len() - end;
                        while have < len {
                            match c.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(k) => have += k,
                            }
                        }
                        let body = "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>";
                        let _ = write!(
                            c,
                            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = c.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                    let Ok(mut up) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else {
                        return;
                    };
                    if up.write_all(&seen).is_err() {
                        return;
                    }
                    let (mut a, mut b) = (c.try_clone().unwrap(), up.try_clone().unwrap());
                    let t = std::thread::spawn(move || {
                        let _ = std::io::copy(&mut a, &mut b);
                        let _ = b.shutdown(std::net::Shutdown::Write);
                    });
                    let _ = std::io::copy(&mut up, &mut c);
                    let _ = c.shutdown(std::net::Shutdown::Write);
                    let _ = t.join();
                });
            }
        });
        (port, refused)
    }

    /// Keys the store calls expired (ExpiredToken) while their expiry is
    /// an hour away: a provider is asked again at once and the requests
    /// sent again with the new keys; fixed keys fail, saying they expired.
    #[test]
    fn expired_token_asks_the_provider_again() {
        let Some(bin) = common::versitygw::versitygw_bin() else {
            eprintln!(
                "SKIPPED library::expired_token_asks_the_provider_again: versitygw not found"
            );
            return;
        };
        no_aws_env();
        let gw = Versitygw::start_with(&bin, &["bkt"], false);
        let (port, refused) = expiring_proxy(gw.port);
        let endpoint = format!("http://127.0.0.1:{port}");
        let t = tempdir();
        let f = t.path().join("e.bin");
        fs::write(&f, data(200_000, 41)).unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let c2 = calls.clone();
        let provider = CredentialsProvider::blocking(move || {
            let n = c2.fetch_add(1, Ordering::SeqCst);
            Ok(ExpiringCredentials {
                credentials: if n == 0 {
                    Credentials::new("STALE", "x")
                } else {
                    keys()
                },
                expiration: Some(SystemTime::now() + Duration::from_secs(3600)),
            })
        });
        let o = options(
            endpoint.clone(),
            None,
            S3Options {
                provider: Some(provider),
                ..S3Options::default()
            },
        );
        copy(&f, "s3://bkt/e/e.bin", &o).unwrap();
        assert_eq!(
            fs::read(gw.root().join("bkt/e/e.bin")).unwrap(),
            fs::read(&f).unwrap()
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "asked when opened, then once on ExpiredToken"
        );
        assert!(refused.load(Ordering::SeqCst) >= 1);

        let o = options(
            endpoint,
            None,
            S3Options {
                credentials: Some(Credentials::new("STALE", "x")),
                ..S3Options::default()
            },
        );
        let e = copy(&f, "s3://bkt/e/static.bin", &o).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
        let m = e.to_string();
        assert!(
            m.contains("s3://bkt/e/static.bin") && m.contains("ExpiredToken"),
            "{m}"
        );
        assert!(
            m.contains("have expired") && m.contains("not renewed"),
            "{m}"
        );
    }
}
