//! End-to-end tests of `ferry serve`'s HTTP side: the real binary on
//! 127.0.0.1 port 0, driven by curl (HTTP/1.1 and HTTP/2 over TLS, and
//! plain HTTP), aria2c, and a raw TCP client for the cases no client makes
//! on purpose. Every byte is checked by blake3; timings are never asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::fs;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::serve::FerryServe;
use common::*;

/// How a request authenticates.
#[derive(Clone, Copy)]
enum Tok<'a> {
    Good,
    None,
    Wrong,
    Basic,
    Other(&'a str),
}

/// One curl exchange, parsed.
#[derive(Debug)]
struct Resp {
    code: u16,
    version: String,
    headers: String,
    body: Vec<u8>,
    out: Output,
}

impl Resp {
    /// The value of the first header `name` (case-insensitive).
    fn header(&self, name: &str) -> Option<String> {
        let want = format!("{}:", name.to_ascii_lowercase());
        self.headers.lines().find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with(&want)
                .then(|| l[want.len()..].trim().to_string())
        })
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn cert(s: &FerryServe) -> PathBuf {
    s.dir().join("state/tls-cert.pem")
}

fn https(s: &FerryServe, path: &str) -> String {
    format!("https://127.0.0.1:{}{path}", s.https_port.unwrap())
}

fn plain(s: &FerryServe, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", s.http_port.unwrap())
}

/// `curl -sS --cacert STATE/tls-cert.pem --path-as-is [auth] ARGS`, the
/// head and body kept apart.
fn curl(s: &FerryServe, tok: Tok, args: &[&str]) -> Resp {
    let t = tempdir();
    let (hfile, bfile) = (t.path().join("h"), t.path().join("b"));
    let mut c = Command::new("curl");
    c.args(["-sS", "--path-as-is", "--max-time", "60", "--cacert"])
        .arg(cert(s))
        .arg("-D")
        .arg(&hfile)
        .args(["-w", "%{http_code} %{http_version}"]);
    if !args.contains(&"-o") {
        c.arg("-o").arg(&bfile);
    }
    match tok {
        Tok::Good => {
            c.args(["-H", &format!("Authorization: Bearer {}", s.token)]);
        }
        Tok::Wrong => {
            c.args(["-H", "Authorization: Bearer not-the-token"]);
        }
        Tok::Basic => {
            c.args(["-u", &format!("someone:{}", s.token)]);
        }
        Tok::Other(h) => {
            c.args(["-H", h]);
        }
        Tok::None => {}
    }
    c.args(args);
    let out = c.stdin(Stdio::null()).output().unwrap();
    let w = stdout_text(&out);
    let mut it = w.split_whitespace();
    let code = it.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let version = it.next().unwrap_or("").to_string();
    assert!(code != 0, "curl {args:?} got no answer: {}", describe(&out));
    // -D holds every response head (a 100 Continue, redirects): keep the last.
    let all = fs::read_to_string(&hfile).unwrap_or_default();
    let headers = all
        .split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .unwrap_or("")
        .to_string();
    let body = fs::read(&bfile).unwrap_or_default();
    Resp {
        code,
        version,
        headers,
        body,
        out,
    }
}

fn uploads_left(dir: &Path) -> Vec<String> {
    list_dir(dir)
        .into_iter()
        .filter(|n| n.contains(".ferry-upload-"))
        .collect()
}

/// Wait (bounded) until `cond` holds; the result is what the test asserts.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
    cond()
}

#[test]
fn downloads_are_byte_exact_over_h1_h2_and_plain_http() {
    need!("curl");
    let s = FerryServe::start(&["--http", "127.0.0.1:0"]);
    let root = s.root();
    let big = make_file(&root.join("big.bin"), 12 * 1024 * 1024 + 3, 1);
    let small = make_file(&root.join("small.bin"), 1000, 2);
    fs::write(root.join("empty"), b"").unwrap();
    let t = tempdir();
    for (ver, url) in [
        ("--http1.1", https(&s, "/big.bin")),
        ("--http2", https(&s, "/big.bin")),
        ("--http1.1", plain(&s, "/big.bin")),
    ] {
        let dst = t.path().join("got");
        let r = curl(&s, Tok::Good, &[ver, "-o", dst.to_str().unwrap(), &url]);
        assert_eq!(r.code, 200, "{ver} {url}: {}", describe(&r.out));
        let want_ver = if ver == "--http2" && url.starts_with("https") {
            "2"
        } else {
            "1.1"
        };
        assert_eq!(r.version, want_ver, "{ver} {url}");
        assert_file_hash(&dst, &big, &format!("{ver} {url}"));
    }
    for ver in ["--http1.1", "--http2"] {
        let r = curl(&s, Tok::Good, &[ver, &https(&s, "/small.bin")]);
        assert_eq!(r.code, 200);
        assert_eq!(hash_bytes(&r.body), small, "{ver}");
        let r = curl(&s, Tok::Good, &[ver, &https(&s, "/empty")]);
        assert_eq!((r.code, r.body.len()), (200, 0), "{ver}");
        assert_eq!(r.header("content-length").as_deref(), Some("0"));
        // HEAD: the GET's headers, no body.
        let r = curl(&s, Tok::Good, &[ver, "-I", &https(&s, "/big.bin")]);
        assert_eq!(r.code, 200, "{ver}");
        assert_eq!(
            r.header("content-length").as_deref(),
            Some("12582915"),
            "{ver}: {}",
            r.headers
        );
        assert_eq!(r.header("accept-ranges").as_deref(), Some("bytes"));
        assert!(r.header("etag").is_some_and(|e| e.starts_with('"')));
        assert!(r.header("last-modified").is_some());
        let r = curl(&s, Tok::Good, &[ver, &https(&s, "/missing")]);
        assert_eq!(r.code, 404, "{ver}");
    }
}

#[test]
fn ranges_single_multiple_and_unsatisfiable() {
    need!("curl");
    let s = FerryServe::start(&[]);
    let data = random_bytes(100_000, 3);
    fs::write(s.root().join("f"), &data).unwrap();
    let u = https(&s, "/f");
    for ver in ["--http1.1", "--http2"] {
        let r = curl(&s, Tok::Good, &[ver, "-r", "10-19", &u]);
        assert_eq!(r.code, 206, "{ver}");
        assert_eq!(r.body, &data[10..20]);
        assert_eq!(
            r.header("content-range").as_deref(),
            Some("bytes 10-19/100000")
        );
        let r = curl(&s, Tok::Good, &[ver, "-r", "-5", &u]);
        assert_eq!((r.code, &r.body[..]), (206, &data[99_995..]), "{ver}");
        let r = curl(&s, Tok::Good, &[ver, "-r", "99990-", &u]);
        assert_eq!((r.code, &r.body[..]), (206, &data[99_990..]), "{ver}");

        let r = curl(&s, Tok::Good, &[ver, "-r", "0-3,50000-50009", &u]);
        assert_eq!(r.code, 206, "{ver}");
        let ct = r.header("content-type").unwrap();
        let boundary = ct
            .strip_prefix("multipart/byteranges; boundary=")
            .unwrap_or_else(|| panic!("{ct}"));
        let mut want = Vec::new();
        for (a, b) in [(0usize, 3usize), (50_000, 50_009)] {
            want.extend_from_slice(
                format!(
                    "\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes {a}-{b}/100000\r\n\r\n"
                )
                .as_bytes(),
            );
            want.extend_from_slice(&data[a..=b]);
        }
        want.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        assert_eq!(r.body, want, "{ver}");
        assert_eq!(
            r.header("content-length"),
            Some(want.len().to_string()),
            "{ver}"
        );

        let r = curl(&s, Tok::Good, &[ver, "-r", "100000-", &u]);
        assert_eq!(r.code, 416, "{ver}");
        assert_eq!(r.header("content-range").as_deref(), Some("bytes */100000"));
        // A malformed Range is ignored: the whole file.
        let r = curl(&s, Tok::Good, &[ver, "-H", "Range: bytes=5-1", &u]);
        assert_eq!((r.code, r.body.len()), (200, 100_000), "{ver}");
    }
}

#[test]
fn conditional_requests() {
    need!("curl");
    let s = FerryServe::start(&[]);
    let data = random_bytes(5000, 4);
    fs::write(s.root().join("f"), &data).unwrap();
    let u = https(&s, "/f");
    let head = curl(&s, Tok::Good, &["-I", &u]);
    let etag = head.header("etag").unwrap();
    let lm = head.header("last-modified").unwrap();
    for ver in ["--http1.1", "--http2"] {
        let inm = format!("If-None-Match: {etag}");
        let r = curl(&s, Tok::Good, &[ver, "-H", &inm, &u]);
        assert_eq!((r.code, r.body.len()), (304, 0), "{ver}");
        let r = curl(&s, Tok::Good, &[ver, "-H", "If-None-Match: \"other\"", &u]);
        assert_eq!(r.code, 200, "{ver}");
        let ims = format!("If-Modified-Since: {lm}");
        let r = curl(&s, Tok::Good, &[ver, "-H", &ims, &u]);
        assert_eq!(r.code, 304, "{ver}");
        // If-Range: the same version gets the range, another the whole file.
        let ir = format!("If-Range: {etag}");
        let r = curl(&s, Tok::Good, &[ver, "-r", "0-9", "-H", &ir, &u]);
        assert_eq!((r.code, &r.body[..]), (206, &data[..10]), "{ver}");
        let r = curl(
            &s,
            Tok::Good,
            &[ver, "-r", "0-9", "-H", "If-Range: \"stale\"", &u],
        );
        assert_eq!((r.code, &r.body[..]), (200, &data[..]), "{ver}");
        let r = curl(
            &s,
            Tok::Good,
            &[
                ver,
                "-r",
                "0-9",
                "-H",
                "If-Range: Mon, 01 Jan 2001 00:00:00 GMT",
                &u,
            ],
        );
        assert_eq!(r.code, 200, "{ver}");
        let r = curl(&s, Tok::Good, &[ver, "-H", "If-Match: \"stale\"", &u]);
        assert_eq!(r.code, 412, "{ver}");
        let r = curl(
            &s,
            Tok::Good,
            &[
                ver,
                "-H",
                "If-Unmodified-Since: Mon, 01 Jan 2001 00:00:00 GMT",
                &u,
            ],
        );
        assert_eq!(r.code, 412, "{ver}");
    }
    // A rewrite changes the ETag.
    thread::sleep(Duration::from_millis(20));
    fs::write(s.root().join("f"), b"new").unwrap();
    let r = curl(
        &s,
        Tok::Good,
        &["-H", &format!("If-None-Match: {etag}"), &u],
    );
    assert_eq!((r.code, &r.body[..]), (200, &b"new"[..]));
}

#[test]
fn no_token_or_a_wrong_one_is_refused_without_saying_what_exists() {
    need!("curl");
    let s = FerryServe::start(&["--writable", "--http", "127.0.0.1:0"]);
    fs::write(s.root().join("exists"), b"secret data").unwrap();
    let mut bodies = Vec::new();
    for tok in [Tok::None, Tok::Wrong, Tok::Other("Authorization: Digest x")] {
        for ver in ["--http1.1", "--http2"] {
            for path in ["/exists", "/does-not-exist", "/", "/../etc/passwd"] {
                let r = curl(&s, tok, &[ver, &https(&s, path)]);
                assert_eq!(r.code, 401, "{ver} {path}");
                let wa = r.headers.to_ascii_lowercase();
                assert!(
                    wa.contains("www-authenticate: bearer realm=\"ferry\""),
                    "{wa}"
                );
                assert!(wa.contains("www-authenticate: basic"), "{wa}");
                bodies.push(r.body);
            }
        }
        let r = curl(&s, tok, &["-T", "/dev/null", &https(&s, "/new")]);
        assert_eq!(r.code, 401);
        let r = curl(&s, tok, &["-X", "DELETE", &https(&s, "/exists")]);
        assert_eq!(r.code, 401);
        let r = curl(&s, tok, &[&plain(&s, "/exists")]);
        assert_eq!(r.code, 401);
    }
    bodies.dedup();
    assert_eq!(bodies.len(), 1, "every refusal is the same");
    assert!(!String::from_utf8_lossy(&bodies[0]).contains("exist"));
    assert!(s.root().join("exists").exists());
    assert!(!s.root().join("new").exists());
    // Basic with any user and the token as the password works.
    let r = curl(&s, Tok::Basic, &[&https(&s, "/exists")]);
    assert_eq!((r.code, r.text().as_str()), (200, "secret data"));
}

#[test]
fn refusals_are_logged_with_the_peer_address() {
    need!("curl");
    let mut s = FerryServe::start(&[]);
    let r = curl(&s, Tok::Wrong, &[&https(&s, "/x")]);
    assert_eq!(r.code, 401);
    let o = s.stop_kill();
    let err = stderr_text(&o);
    assert!(
        err.contains("127.0.0.1") && err.contains("wrong token"),
        "{err}"
    );
}

#[test]
fn public_reads_need_no_token_but_writes_do() {
    need!("curl");
    let s = FerryServe::start(&["--public"]);
    fs::write(s.root().join("f"), b"open").unwrap();
    let r = curl(&s, Tok::None, &[&https(&s, "/f")]);
    assert_eq!((r.code, r.text().as_str()), (200, "open"));
    let r = curl(&s, Tok::None, &[&https(&s, "/?list")]);
    assert_eq!(r.code, 200);
    let r = curl(&s, Tok::None, &["-T", "/dev/null", &https(&s, "/new")]);
    assert_eq!(r.code, 401);
    // With the token, still read-only.
    let r = curl(&s, Tok::Good, &["-T", "/dev/null", &https(&s, "/new")]);
    assert_eq!(r.code, 403);
    assert!(r.text().contains("read-only"), "{}", r.text());
    assert!(!s.root().join("new").exists());
}

#[test]
fn read_only_server_refuses_every_change() {
    need!("curl");
    let s = FerryServe::start(&[]);
    fs::write(s.root().join("f"), b"keep").unwrap();
    for args in [
        vec!["-T", "/dev/null"],
        vec!["-X", "DELETE"],
        vec!["-X", "MKCOL"],
    ] {
        let mut a = args.clone();
        let u = https(&s, "/f");
        a.push(&u);
        let r = curl(&s, Tok::Good, &a);
        assert_eq!(r.code, 403, "{args:?}");
        assert!(r.text().contains("read-only"));
    }
    assert_eq!(fs::read(s.root().join("f")).unwrap(), b"keep");
    let r = curl(&s, Tok::Good, &["-X", "OPTIONS", &https(&s, "/")]);
    assert_eq!(r.header("allow").as_deref(), Some("GET, HEAD, OPTIONS"));
}

#[test]
fn writable_put_get_round_trip_delete_and_mkcol() {
    need!("curl");
    let s = FerryServe::start(&["--writable"]);
    let t = tempdir();
    let src = t.path().join("src");
    let h = make_file(&src, 5 * 1024 * 1024 + 7, 5);
    for (i, ver) in ["--http1.1", "--http2"].iter().enumerate() {
        let path = format!("/up/deep/er/f{i}.bin");
        let r = curl(
            &s,
            Tok::Good,
            &[ver, "-T", src.to_str().unwrap(), &https(&s, &path)],
        );
        assert_eq!(r.code, 201, "{ver}: {}", describe(&r.out));
        assert_file_hash(&s.root().join(&path[1..]), &h, ver);
        let dst = t.path().join(format!("back{i}"));
        let r = curl(
            &s,
            Tok::Good,
            &[ver, "-o", dst.to_str().unwrap(), &https(&s, &path)],
        );
        assert_eq!(r.code, 200);
        assert_file_hash(&dst, &h, ver);
        // Replacing answers 204.
        fs::write(t.path().join("small"), b"v2").unwrap();
        let small = t.path().join("small");
        let r = curl(
            &s,
            Tok::Good,
            &[ver, "-T", small.to_str().unwrap(), &https(&s, &path)],
        );
        assert_eq!(r.code, 204, "{ver}");
        assert_eq!(fs::read(s.root().join(&path[1..])).unwrap(), b"v2");
    }
    assert!(uploads_left(&s.root().join("up/deep/er")).is_empty());
    // PUT onto a directory, or to a directory name, is refused.
    let r = curl(&s, Tok::Good, &["-T", "/dev/null", &https(&s, "/up/deep")]);
    assert_eq!(r.code, 409);
    let r = curl(&s, Tok::Good, &["-X", "PUT", "-d", "x", &https(&s, "/up/")]);
    assert_eq!(r.code, 405);
    // A malformed Content-Range is refused rather than written as the
    // whole file.
    let r = curl(
        &s,
        Tok::Good,
        &[
            "-X",
            "PUT",
            "-H",
            "Content-Range: bytes 5-1/10",
            "-d",
            "x",
            &https(&s, "/p"),
        ],
    );
    assert_eq!(r.code, 400);
    assert!(!s.root().join("p").exists());

    let r = curl(&s, Tok::Good, &["-X", "MKCOL", &https(&s, "/made")]);
    assert_eq!(r.code, 201);
    assert!(s.root().join("made").is_dir());
    let r = curl(&s, Tok::Good, &["-X", "MKCOL", &https(&s, "/made")]);
    assert_eq!(r.code, 405);
    let r = curl(&s, Tok::Good, &["-X", "MKCOL", &https(&s, "/no/parent")]);
    assert_eq!(r.code, 409);
    let r = curl(&s, Tok::Good, &["-X", "DELETE", &https(&s, "/up/deep")]);
    assert_eq!(r.code, 409, "not empty");
    let r = curl(
        &s,
        Tok::Good,
        &["-X", "DELETE", &https(&s, "/up/deep/er/f0.bin")],
    );
    assert_eq!(r.code, 204);
    assert!(!s.root().join("up/deep/er/f0.bin").exists());
    let r = curl(&s, Tok::Good, &["-X", "DELETE", &https(&s, "/made")]);
    assert_eq!(r.code, 204);
    let r = curl(&s, Tok::Good, &["-X", "DELETE", &https(&s, "/made")]);
    assert_eq!(r.code, 404);
    let r = curl(&s, Tok::Good, &["-X", "DELETE", &https(&s, "/")]);
    assert_eq!(r.code, 403);
    let r = curl(&s, Tok::Good, &["-X", "OPTIONS", &https(&s, "/")]);
    assert_eq!(
        r.header("allow").as_deref(),
        Some("GET, HEAD, OPTIONS, PUT, DELETE, MKCOL")
    );
}

/// Resuming an upload with ranged PUTs: the first half, a status query,
/// a gap refused, the second half completes the file.
#[test]
fn ranged_put_resumes_an_upload() {
    need!("curl");
    let s = FerryServe::start(&["--writable"]);
    let t = tempdir();
    let data = random_bytes(3 * 1024 * 1024 + 5, 9);
    let n = data.len();
    let half = n / 2;
    fs::write(t.path().join("a"), &data[..half]).unwrap();
    fs::write(t.path().join("b"), &data[half..]).unwrap();
    fs::write(t.path().join("c"), &data[half + 1..]).unwrap();
    fs::write(s.root().join("f"), b"old").unwrap();
    let u = https(&s, "/f");
    let put = |range: String, file: Option<&str>| {
        let mut a = vec!["-X".to_string(), "PUT".into(), "-H".into(), range];
        if let Some(f) = file {
            a.push("--data-binary".into());
            a.push(format!("@{}", t.path().join(f).display()));
        }
        a.push(u.clone());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        curl(&s, Tok::Good, &a)
    };
    let r = put(format!("Content-Range: bytes */{n}"), None);
    assert_eq!(r.code, 202);
    assert_eq!(r.header("range"), None, "nothing yet");
    let r = put(
        format!("Content-Range: bytes 0-{}/{n}", half - 1),
        Some("a"),
    );
    assert_eq!(r.code, 202, "{}", r.text());
    assert_eq!(r.header("range"), Some(format!("bytes=0-{}", half - 1)));
    assert_eq!(
        fs::read(s.root().join("f")).unwrap(),
        b"old",
        "not yet replaced"
    );
    let r = put(format!("Content-Range: bytes */{n}"), None);
    assert_eq!(r.header("range"), Some(format!("bytes=0-{}", half - 1)));
    // The state answer carries the SHA-256 of the part's last 64 KiB, so a
    // client can check that the server holds the start of its file.
    let from = half - 64 * 1024;
    let tail = {
        use base64::Engine;
        use sha2::Digest;
        let sum = sha2::Sha256::digest(&data[from..half]);
        base64::engine::general_purpose::STANDARD.encode(sum)
    };
    assert_eq!(
        r.header("ferry-part-tail"),
        Some(format!("bytes={from}-{} sha-256=:{tail}:", half - 1))
    );
    // A gap is refused with what the server has.
    let r = put(
        format!("Content-Range: bytes {}-{}/{n}", half + 1, n - 1),
        Some("c"),
    );
    assert_eq!(r.code, 416, "{}", r.text());
    assert_eq!(r.header("range"), Some(format!("bytes=0-{}", half - 1)));
    let r = put(
        format!("Content-Range: bytes {half}-{}/{n}", n - 1),
        Some("b"),
    );
    assert_eq!(r.code, 204, "{}", r.text());
    assert_eq!(hash_file(&s.root().join("f")), hash_bytes(&data));
    assert!(
        uploads_left(&s.root()).is_empty(),
        "{:?}",
        list_dir(&s.root())
    );

    // A ranged PUT from byte 0 starts afresh: a longer part file left by
    // another upload is not kept underneath.
    let r = put(
        format!("Content-Range: bytes 0-{}/{n}", half - 1),
        Some("a"),
    );
    assert_eq!(r.code, 202, "{}", r.text());
    let r = put(
        format!("Content-Range: bytes 0-{}/{}", n - half - 1, n - half),
        Some("b"),
    );
    assert_eq!(r.code, 204, "{}", r.text());
    assert_eq!(hash_file(&s.root().join("f")), hash_bytes(&data[half..]));

    // OPTIONS tells clients that PUT takes Content-Range.
    let r = curl(&s, Tok::Good, &["-X", "OPTIONS", &u]);
    assert_eq!(r.header("ferry-put-ranges").as_deref(), Some("bytes"));
}

/// A client that sends part of the body and hangs up: no final file, no
/// temporary file, and an older file under the name is untouched.
#[test]
fn interrupted_upload_leaves_no_file_behind() {
    need!("curl");
    let s = FerryServe::start(&["--writable", "--http", "127.0.0.1:0"]);
    fs::write(s.root().join("old"), b"previous version").unwrap();
    for name in ["old", "fresh"] {
        let mut t = TcpStream::connect(("127.0.0.1", s.http_port.unwrap())).unwrap();
        write!(
            t,
            "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Length: 10000000\r\n\r\n",
            s.token
        )
        .unwrap();
        t.write_all(&vec![7u8; 3 * 1024 * 1024]).unwrap();
        // Let the server start writing the temporary file, then hang up.
        eventually(|| !uploads_left(&s.root()).is_empty());
        drop(t);
        assert!(
            eventually(|| uploads_left(&s.root()).is_empty()),
            "temporary file left: {:?}",
            list_dir(&s.root())
        );
    }
    assert_eq!(fs::read(s.root().join("old")).unwrap(), b"previous version");
    assert!(!s.root().join("fresh").exists());

    // curl over h2, killed mid-upload (rate-limited so it is still sending).
    let t = tempdir();
    let src = t.path().join("src");
    make_file(&src, 20 * 1024 * 1024, 6);
    let mut child = Command::new("curl")
        .args(["-sS", "--http2", "--limit-rate", "2M", "--cacert"])
        .arg(cert(&s))
        .args(["-H", &format!("Authorization: Bearer {}", s.token), "-T"])
        .arg(&src)
        .arg(https(&s, "/killed"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(|| !uploads_left(&s.root()).is_empty());
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        eventually(|| uploads_left(&s.root()).is_empty()),
        "temporary file left: {:?}",
        list_dir(&s.root())
    );
    assert!(!s.root().join("killed").exists());
}

#[test]
fn paths_outside_the_root_are_refused() {
    need!("curl");
    let s = FerryServe::start(&["--writable"]);
    fs::write(s.dir().join("secret"), b"TOP SECRET").unwrap();
    fs::create_dir(s.root().join("sub")).unwrap();
    symlink(s.dir().join("secret"), s.root().join("link-out")).unwrap();
    symlink(s.dir(), s.root().join("dir-out")).unwrap();
    // Relative: the kernel's confined open (openat2) refuses it too.
    symlink("../../secret", s.root().join("sub/rel-out")).unwrap();
    for ver in ["--http1.1", "--http2"] {
        for (path, want) in [
            ("/../secret", 403),
            ("/sub/../../secret", 403),
            ("/%2e%2e/secret", 403),
            ("/sub/%2E%2E/%2e%2e/secret", 403),
            ("/sub/..%2f..%2fsecret", 403),
            ("/link-out", 403),
            ("/dir-out/secret", 403),
            ("/sub/rel-out", 403),
            ("/a%00b", 400),
            ("/%ff", 400),
        ] {
            let r = curl(&s, Tok::Good, &[ver, &https(&s, path)]);
            assert_eq!(r.code, want, "{ver} {path}: {}", r.text());
            assert!(!r.text().contains("TOP SECRET"));
            assert!(
                !r.text().contains(s.dir().to_str().unwrap()),
                "no real paths"
            );
        }
        for path in ["/../escaped", "/%2e%2e/escaped", "/dir-out/escaped"] {
            let r = curl(
                &s,
                Tok::Good,
                &[ver, "-X", "PUT", "-d", "x", &https(&s, path)],
            );
            assert!((400..500).contains(&r.code), "{ver} PUT {path}: {}", r.code);
            let r = curl(&s, Tok::Good, &[ver, "-X", "MKCOL", &https(&s, path)]);
            assert!(
                (400..500).contains(&r.code),
                "{ver} MKCOL {path}: {}",
                r.code
            );
        }
        let r = curl(
            &s,
            Tok::Good,
            &[ver, "-X", "DELETE", &https(&s, "/dir-out/secret")],
        );
        assert!((400..500).contains(&r.code));
    }
    assert!(!s.dir().join("escaped").exists());
    assert_eq!(fs::read(s.dir().join("secret")).unwrap(), b"TOP SECRET");
    // A symlink that stays inside is followed.
    fs::write(s.root().join("sub/in"), b"inside").unwrap();
    symlink(s.root().join("sub/in"), s.root().join("link-in")).unwrap();
    let r = curl(&s, Tok::Good, &[&https(&s, "/link-in")]);
    assert_eq!((r.code, r.text().as_str()), (200, "inside"));
}

#[test]
fn listings_json_html_and_the_slash_redirect() {
    need!("curl");
    let s = FerryServe::start(&[]);
    let root = s.root();
    fs::create_dir_all(root.join("d/inner")).unwrap();
    fs::write(root.join("d/a.txt"), b"12345").unwrap();
    fs::write(root.join("d/<odd> & \"name\""), b"x").unwrap();
    symlink(root.join("d/a.txt"), root.join("d/ln")).unwrap();
    let r = curl(&s, Tok::Good, &[&https(&s, "/d")]);
    assert_eq!(r.code, 301);
    assert_eq!(r.header("location").as_deref(), Some("/d/"));
    let r = curl(&s, Tok::Good, &[&https(&s, "/d?list")]);
    assert_eq!(r.header("location").as_deref(), Some("/d/?list"));
    // curl -L follows it.
    let r = curl(&s, Tok::Good, &["-L", &https(&s, "/d")]);
    assert_eq!(r.code, 200);

    for ver in ["--http1.1", "--http2"] {
        for args in [
            vec![https(&s, "/d/?list")],
            vec![
                "-H".into(),
                "Accept: application/json".into(),
                https(&s, "/d/"),
            ],
        ] {
            let mut a: Vec<&str> = vec![ver];
            a.extend(args.iter().map(String::as_str));
            let r = curl(&s, Tok::Good, &a);
            assert_eq!(r.code, 200, "{args:?}");
            assert_eq!(
                r.header("content-type").as_deref(),
                Some("application/json")
            );
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            let arr = v.as_array().unwrap();
            let names: Vec<&str> = arr.iter().map(|e| e["name"].as_str().unwrap()).collect();
            assert_eq!(names, ["<odd> & \"name\"", "a.txt", "inner", "ln"]);
            let a = &arr[1];
            assert_eq!(a["type"], "file");
            assert_eq!(a["size"], 5);
            assert!(a["mtime"].as_i64().unwrap() > 1_600_000_000);
            let head = curl(&s, Tok::Good, &["-I", &https(&s, "/d/a.txt")]);
            assert_eq!(a["etag"].as_str(), head.header("etag").as_deref());
            assert_eq!(arr[2]["type"], "dir");
            assert_eq!(arr[3]["type"], "symlink");
            assert_eq!(arr[3]["target"], "file");
        }
        let r = curl(&s, Tok::Good, &[ver, &https(&s, "/d/")]);
        assert_eq!(r.code, 200);
        assert!(r.header("content-type").unwrap().starts_with("text/html"));
        let html = r.text();
        assert!(html.contains("<a href=\"a.txt\">a.txt</a>"), "{html}");
        assert!(html.contains("<a href=\"inner/\">inner/</a>"), "{html}");
        assert!(html.contains("<a href=\"../\">../</a>"), "{html}");
        assert!(
            html.contains(
                "<a href=\"%3Codd%3E%20%26%20%22name%22\">&lt;odd&gt; &amp; &quot;name&quot;</a>"
            ),
            "{html}"
        );
    }
    let r = curl(&s, Tok::Good, &[&https(&s, "/?list")]);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v[0]["name"], "d");
}

#[test]
fn zstd_when_the_client_takes_it_and_the_file_compresses() {
    need!("curl");
    let s = FerryServe::start(&[]);
    let text: Vec<u8> = (0..3_000_000u32)
        .map(|i| b"ferry moves files fast\n"[(i % 23) as usize])
        .collect();
    fs::write(s.root().join("text.txt"), &text).unwrap();
    let noise = random_bytes(200_000, 7);
    fs::write(s.root().join("noise.bin"), &noise).unwrap();
    let zstd_in_curl = stdout_text(&Command::new("curl").arg("-V").output().unwrap())
        .to_ascii_lowercase()
        .contains("zstd");
    for ver in ["--http1.1", "--http2"] {
        // Raw: the encoded bytes, no Content-Length.
        let r = curl(
            &s,
            Tok::Good,
            &[ver, "-H", "Accept-Encoding: zstd", &https(&s, "/text.txt")],
        );
        assert_eq!(r.code, 200);
        assert_eq!(
            r.header("content-encoding").as_deref(),
            Some("zstd"),
            "{ver}"
        );
        assert!(r.header("vary").unwrap().contains("Accept-Encoding"));
        assert!(r.header("content-length").is_none());
        assert!(r.body.len() < text.len() / 10, "{}", r.body.len());
        assert_eq!(&r.body[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
        if zstd_in_curl {
            let r = curl(
                &s,
                Tok::Good,
                &[ver, "--compressed", &https(&s, "/text.txt")],
            );
            assert_eq!(r.header("content-encoding").as_deref(), Some("zstd"));
            assert_eq!(hash_bytes(&r.body), hash_bytes(&text), "{ver}: decoded");
        } else {
            eprintln!("SKIP: this curl cannot decode zstd; checked the frame magic only");
        }
        // Incompressible data, ranges and clients that do not ask: identity.
        let r = curl(
            &s,
            Tok::Good,
            &[ver, "-H", "Accept-Encoding: zstd", &https(&s, "/noise.bin")],
        );
        assert!(r.header("content-encoding").is_none());
        assert_eq!(r.body, noise);
        let r = curl(
            &s,
            Tok::Good,
            &[
                ver,
                "-H",
                "Accept-Encoding: zstd",
                "-r",
                "0-99",
                &https(&s, "/text.txt"),
            ],
        );
        assert_eq!((r.code, &r.body[..]), (206, &text[..100]));
        assert!(r.header("content-encoding").is_none());
        let r = curl(&s, Tok::Good, &[ver, &https(&s, "/text.txt")]);
        assert!(r.header("content-encoding").is_none());
        assert_eq!(r.body, text);
    }
}

/// Send raw bytes on a fresh plain-HTTP connection; return what came back
/// before the server closed (or 10 s passed).
fn raw_exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut t = TcpStream::connect(("127.0.0.1", port)).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = t.write_all(bytes);
    let _ = t.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = t.read_to_end(&mut out);
    out
}

/// Oversized heads, garbage, a bad h2 preface, smuggling attempts: each
/// gets an error or a closed connection, and the server keeps serving.
#[test]
fn hostile_requests_do_not_hurt_the_server() {
    need!("curl");
    let s = FerryServe::start(&["--http", "127.0.0.1:0", "--writable"]);
    fs::write(s.root().join("f"), b"fine").unwrap();
    let port = s.http_port.unwrap();
    let auth = format!("Authorization: Bearer {}", s.token);
    let huge = format!(
        "GET /f HTTP/1.1\r\nHost: x\r\n{auth}\r\nX-Big: {}\r\n\r\n",
        "a".repeat(1024 * 1024)
    );
    let many: String = (0..500).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET /f HTTP/1.1\r\nHost: x\r\n{auth}\r\n{many}\r\n");
    let smuggle = format!(
        "POST /f HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /f HTTP/1.1\r\n\r\n"
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("huge header", huge.into_bytes()),
        ("500 headers", many.into_bytes()),
        ("garbage", random_bytes(4096, 11)),
        (
            "bad h2 preface",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff".to_vec(),
        ),
        ("CL and TE", smuggle.into_bytes()),
        (
            "bad content-length",
            format!("PUT /g HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Length: -5\r\n\r\n")
                .into_bytes(),
        ),
        (
            "absolute-form escape",
            format!("GET http://x/../../etc/passwd HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n")
                .into_bytes(),
        ),
    ];
    for (what, bytes) in cases {
        let got = raw_exchange(port, &bytes);
        let text = String::from_utf8_lossy(&got);
        assert!(
            !text.contains("200 OK") && !text.contains("root:"),
            "{what}: {text}"
        );
        // Still serving.
        let r = curl(&s, Tok::Good, &[&plain(&s, "/f")]);
        assert_eq!((r.code, r.text().as_str()), (200, "fine"), "after {what}");
    }
    assert!(!s.root().join("g").exists());
}

/// SIGTERM: a download in progress finishes, an idle keep-alive
/// connection is closed at once instead of holding the exit for the whole
/// grace period, and the server exits 0.
#[test]
fn sigterm_lets_a_download_finish_and_closes_idle_connections() {
    use std::io::Read;
    need!("curl");
    let mut s = FerryServe::start(&["--http", "127.0.0.1:0", "--grace", "60"]);
    let h = make_file(&s.root().join("big"), 6 * 1024 * 1024, 12);
    fs::write(s.root().join("small"), b"hi").unwrap();
    // An idle keep-alive connection, after one request.
    let mut idle = TcpStream::connect(("127.0.0.1", s.http_port.unwrap())).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        idle,
        "GET /small HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        s.token
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"\r\n\r\nhi") {
        let n = idle.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    // A slow download in progress.
    let t = tempdir();
    let dst = t.path().join("got");
    let curl_child = Command::new("curl")
        .args(["-sS", "--http2", "--limit-rate", "2M", "--cacert"])
        .arg(cert(&s))
        .args(["-H", &format!("Authorization: Bearer {}", s.token), "-o"])
        .arg(&dst)
        .arg(https(&s, "/big"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(|| dst.exists() && file_len(&dst) > 0));
    let o = s.sigterm(Duration::from_secs(90));
    let c = curl_child.wait_with_output().unwrap();
    assert!(
        c.status.success(),
        "{}\n--- server ---\n{}",
        describe(&c),
        describe(&o)
    );
    assert_file_hash(&dst, &h, "download across SIGTERM");
    assert!(o.status.success(), "{}", describe(&o));
    assert!(
        !stderr_text(&o).contains("still open"),
        "an idle connection held the shutdown: {}",
        describe(&o)
    );
    assert_eq!(
        idle.read(&mut buf).unwrap_or(0),
        0,
        "idle connection closed"
    );
}

/// `--tls-cert/--tls-key`: a certificate made elsewhere (openssl, PKCS#8
/// key) is served instead of the self-signed one, and the banner names it.
#[test]
fn a_given_certificate_is_served() {
    need!("curl");
    need!("openssl");
    let t = tempdir();
    let (cert_path, key_path) = (t.path().join("c.pem"), t.path().join("k.pem"));
    run_checked(
        Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            ])
            .args(["-subj", "/CN=localhost", "-addext"])
            .arg("subjectAltName=DNS:localhost,IP:127.0.0.1")
            .arg("-keyout")
            .arg(&key_path)
            .arg("-out")
            .arg(&cert_path),
    );
    let mut s = FerryServe::start(&[
        "--tls-cert",
        cert_path.to_str().unwrap(),
        "--tls-key",
        key_path.to_str().unwrap(),
    ]);
    fs::write(s.root().join("f"), b"real cert").unwrap();
    for ver in ["--http1.1", "--http2"] {
        let o = Command::new("curl")
            .args(["-sS", ver, "--cacert"])
            .arg(&cert_path)
            .args(["-H", &format!("Authorization: Bearer {}", s.token)])
            .arg(https(&s, "/f"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(stdout_text(&o), "real cert", "{ver}: {}", describe(&o));
        // The self-signed certificate in the state dir is not the one served.
        if cert(&s).exists() {
            let o = Command::new("curl")
                .args(["-sS", ver, "--cacert"])
                .arg(cert(&s))
                .arg(https(&s, "/f"))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(!o.status.success(), "{ver}: {}", describe(&o));
        }
    }
    // The banner's curl line names the given certificate.
    let o = s.stop_kill();
    let want = format!("curl --cacert {}", cert_path.display());
    assert!(stdout_text(&o).contains(&want), "{}", describe(&o));
}

#[test]
fn aria2c_segmented_download() {
    need!("curl");
    need!("aria2c");
    let s = FerryServe::start(&[]);
    let h = make_file(&s.root().join("big.bin"), 12 * 1024 * 1024 + 11, 8);
    let t = tempdir();
    let o = Command::new("aria2c")
        .args(["-q", "-x4", "-s4", "-k1M", "--allow-overwrite=true"])
        .arg(format!("--ca-certificate={}", cert(&s).display()))
        .arg(format!("--header=Authorization: Bearer {}", s.token))
        .arg("-d")
        .arg(t.path())
        .args(["-o", "got", &https(&s, "/big.bin")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", describe(&o));
    assert_file_hash(&t.path().join("got"), &h, "aria2c -x4 -s4");
}

#[test]
fn zstd_uploads_are_decoded_bounded_and_checked() {
    need!("curl");
    let s = FerryServe::start(&["--writable"]);
    let t = tempdir();
    let put = |body: &[u8], path: &str, headers: &[&str]| -> Resp {
        let f = t.path().join("body");
        fs::write(&f, body).unwrap();
        let mut args: Vec<&str> = Vec::new();
        for h in headers {
            args.extend(["-H", h]);
        }
        let url = https(&s, path);
        args.extend(["-T", f.to_str().unwrap(), url.as_str()]);
        curl(&s, Tok::Good, &args)
    };
    // RFC 7694: the OPTIONS answer says which request codings it takes.
    let r = curl(&s, Tok::Good, &["-X", "OPTIONS", &https(&s, "/")]);
    assert_eq!(r.header("accept-encoding").as_deref(), Some("zstd"));

    let text: Vec<u8> = (0..3_000_000u32)
        .map(|i| b"ferry moves files fast\n"[(i % 23) as usize])
        .collect();
    let coded = zstd::encode_all(&text[..], 3).unwrap();
    let len = format!("ferry-decoded-length: {}", text.len());
    for ver in ["--http1.1", "--http2"] {
        let r = put(
            &coded,
            "/z/text.txt",
            &[ver, "Content-Encoding: zstd", &len],
        );
        assert!(r.code == 201 || r.code == 204, "{ver}: {}", r.text());
        assert_eq!(
            hash_bytes(&fs::read(s.root().join("z/text.txt")).unwrap()),
            hash_bytes(&text)
        );
    }

    // A bomb: 256 MiB of zeros in a few KiB, said to be 1000 bytes. 413
    // as soon as it passes them; nothing under the name, no temporary.
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        std::io::Write::write_all(&mut enc, &zeros).unwrap();
    }
    let bomb = enc.finish().unwrap();
    assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
    let r = put(
        &bomb,
        "/z/bomb.bin",
        &["Content-Encoding: zstd", "ferry-decoded-length: 1000"],
    );
    assert_eq!(r.code, 413, "{}", r.text());
    assert!(r.text().contains("decodes to more than"), "{}", r.text());
    assert!(!s.root().join("z/bomb.bin").exists());
    // Without the length a coded whole PUT is refused before anything.
    let r = put(&bomb, "/z/bomb.bin", &["Content-Encoding: zstd"]);
    assert_eq!(r.code, 411, "{}", r.text());
    assert!(!s.root().join("z/bomb.bin").exists());
    // Ranged, the range bounds it: 413 too, and the part holds nothing.
    let r = put(
        &bomb,
        "/z/bomb.bin",
        &["Content-Encoding: zstd", "Content-Range: bytes 0-999/1000"],
    );
    assert_eq!(r.code, 413, "{}", r.text());
    assert!(!s.root().join("z/bomb.bin").exists());
    let part = s.root().join("z/.bomb.bin.ferry-upload-part");
    assert_eq!(fs::metadata(&part).map(|m| m.len()).unwrap_or(0), 0);

    // A frame whose checksum is wrong: 400, nothing stored.
    let mut bad = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    bad.include_checksum(true).unwrap();
    std::io::Write::write_all(&mut bad, &text).unwrap();
    let mut bad = bad.finish().unwrap();
    let n = bad.len();
    bad[n - 1] ^= 0x55;
    let r = put(&bad, "/z/bad.txt", &["Content-Encoding: zstd", &len]);
    assert_eq!(r.code, 400, "{}", r.text());
    assert!(r.text().contains("does not decode"), "{}", r.text());
    assert!(!s.root().join("z/bad.txt").exists());
    // Cut short: 400 as well.
    let r = put(
        &coded[..coded.len() / 2],
        "/z/bad.txt",
        &["Content-Encoding: zstd", &len],
    );
    assert_eq!(r.code, 400, "{}", r.text());
    assert!(!s.root().join("z/bad.txt").exists());
    // Decodes to less than announced.
    let more = format!("ferry-decoded-length: {}", text.len() + 1);
    let r = put(&coded, "/z/bad.txt", &["Content-Encoding: zstd", &more]);
    assert_eq!(r.code, 400, "{}", r.text());
    assert!(!s.root().join("z/bad.txt").exists());

    // Repr-Digest (RFC 9530) is checked against the decoded bytes.
    let sha = |d: &[u8]| {
        use base64::Engine;
        use sha2::Digest;
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(d))
    };
    let good = format!("Repr-Digest: sha-256=:{}:", sha(&text));
    let wrong = format!("Repr-Digest: sha-256=:{}:", sha(b"something else"));
    let r = put(
        &coded,
        "/z/d.txt",
        &["Content-Encoding: zstd", &len, &wrong],
    );
    assert_eq!(r.code, 400, "{}", r.text());
    assert!(r.text().contains("Repr-Digest"), "{}", r.text());
    assert!(!s.root().join("z/d.txt").exists());
    let r = put(&text, "/z/d.txt", &[&wrong]);
    assert_eq!(r.code, 400, "plain too: {}", r.text());
    assert!(!s.root().join("z/d.txt").exists());
    let r = put(&coded, "/z/d.txt", &["Content-Encoding: zstd", &len, &good]);
    assert_eq!(r.code, 201, "{}", r.text());

    // A coding it does not take: 415 saying which it does (RFC 7694).
    let r = put(b"x", "/z/g.txt", &["Content-Encoding: gzip"]);
    assert_eq!(r.code, 415, "{}", r.text());
    assert_eq!(r.header("accept-encoding").as_deref(), Some("zstd"));
    assert!(!s.root().join("z/g.txt").exists());
    assert!(
        uploads_left(&s.root().join("z"))
            .iter()
            .all(|n| n.ends_with("part")),
        "{:?}",
        uploads_left(&s.root().join("z"))
    );
}
