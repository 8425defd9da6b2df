//! `ferry serve` against abusive and idle clients (issue #24): malformed
//! traffic on every listener (random bytes, truncated handshakes, oversized
//! packets and headers) never crashes or wedges it, clients that never log
//! in or dribble headers are closed after `--login-grace-time` and
//! `--header-timeout`, `--max-startups` caps connections that have not
//! logged in, and a normal client is served afterwards every time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::serve::FerryServe;
use common::*;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Send `bytes` (ignoring a reset half-way), then read until the server
/// closes or 20 s pass; returns what it said.
fn send_and_drain(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = connect(port);
    for chunk in bytes.chunks(64 * 1024) {
        if s.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = s.shutdown(Shutdown::Write);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

/// Wait until the server closes `s` (EOF or reset); how long it took, or
/// `None` after `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while start.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// A normal client still gets a file over SFTP, HTTPS and FTPS.
fn still_serves(s: &FerryServe, want: &blake3::Hash, ctx: &str) {
    let out = tempdir();
    let o = s.cp(&args![s.url("/ok.bin"), out.path()]);
    assert_ok(&o, &format!("{ctx}: SFTP afterwards"));
    assert_file_hash(&out.path().join("ok.bin"), want, ctx);
    let out = tempdir();
    let o = s.https_cp(true, &args![s.https_url("/ok.bin"), out.path()]);
    assert_ok(&o, &format!("{ctx}: HTTPS afterwards"));
    assert_file_hash(&out.path().join("ok.bin"), want, ctx);
    if s.ftp_port.is_some() {
        let out = tempdir();
        let o = s.ftp_cp(&args![s.ftp_url("ok.bin"), out.path()]);
        assert_ok(&o, &format!("{ctx}: FTPS afterwards"));
        assert_file_hash(&out.path().join("ok.bin"), want, ctx);
    }
    assert!(pid_alive(s.pid()), "{ctx}: ferry serve died");
}

/// A TLS ClientHello cut short (a real record header announcing more than
/// is sent).
fn truncated_client_hello() -> Vec<u8> {
    let mut v = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    v.extend(random_bytes(40, 5));
    v
}

#[test]
fn malformed_traffic_on_every_listener_never_wedges_the_server() {
    let s = FerryServe::start_ftp(&["--http", "127.0.0.1:0"]);
    let want = make_file(&s.root().join("ok.bin"), 300_000, 1);
    let (ssh, https, ftp) = (
        s.sftp_port.unwrap(),
        s.https_port.unwrap(),
        s.ftp_port.unwrap(),
    );
    let http = s.http_port.unwrap();

    // (listener, what, bytes): every one is sent on its own connection,
    // several at once.
    let mut cases: Vec<(u16, &str, Vec<u8>)> = Vec::new();
    for (port, name) in [(ssh, "ssh"), (https, "https"), (ftp, "ftp"), (http, "http")] {
        for seed in 0..4u64 {
            cases.push((
                port,
                name,
                random_bytes(1 + (seed as usize) * 70_000, 100 + seed),
            ));
        }
        cases.push((port, name, Vec::new()));
        cases.push((port, name, vec![0u8; 1 << 20]));
    }
    // SSH: a version line, then a packet announcing 4 GiB; a version line
    // of 1 MiB without a newline; a KEXINIT cut short.
    let mut huge_packet = b"SSH-2.0-abuse\r\n".to_vec();
    huge_packet.extend([0xff, 0xff, 0xff, 0xff, 0x04, 20]);
    huge_packet.extend(random_bytes(5000, 7));
    cases.push((ssh, "ssh huge packet", huge_packet));
    let mut long_version = b"SSH-2.0-".to_vec();
    long_version.extend(std::iter::repeat_n(b'a', 1 << 20));
    cases.push((ssh, "ssh endless version", long_version));
    let mut cut_kex = b"SSH-2.0-abuse\r\n".to_vec();
    cut_kex.extend([0, 0, 4, 0, 8, 20]);
    cut_kex.extend(random_bytes(100, 8));
    cases.push((ssh, "ssh truncated kexinit", cut_kex));
    // TLS: a ClientHello cut short, on HTTPS and after FTP's AUTH TLS.
    cases.push((https, "tls truncated hello", truncated_client_hello()));
    let mut ftp_tls = b"AUTH TLS\r\n".to_vec();
    ftp_tls.extend(truncated_client_hello());
    cases.push((ftp, "ftp auth tls truncated", ftp_tls));
    // FTP: a 1 MiB command line, commands before login, a NUL flood.
    let mut long_cmd = b"USER ".to_vec();
    long_cmd.extend(std::iter::repeat_n(b'x', 1 << 20));
    cases.push((ftp, "ftp huge line", long_cmd));
    cases.push((
        ftp,
        "ftp before login",
        b"RETR /etc/passwd\r\nSTOR x\r\nPASV\r\nCWD ..\r\nQUIT\r\n".to_vec(),
    ));
    // HTTP: 1 MiB of header, 10,000 headers, a bad request line.
    let mut big_header = b"GET /ok.bin HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big_header.extend(std::iter::repeat_n(b'a', 1 << 20));
    big_header.extend(b"\r\n\r\n");
    cases.push((http, "http 1 MiB header", big_header));
    let mut many = b"GET /ok.bin HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..10_000 {
        many.extend(format!("X-{i}: y\r\n").as_bytes());
    }
    many.extend(b"\r\n");
    cases.push((http, "http 10000 headers", many));
    cases.push((
        http,
        "http bad line",
        b"\x00GET / HTTP/9.9\r\n\r\n".to_vec(),
    ));
    cases.push((
        http,
        "h2 preface then junk",
        [
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".as_slice(),
            &random_bytes(20_000, 9),
        ]
        .concat(),
    ));

    let started = Instant::now();
    let handles: Vec<_> = cases
        .into_iter()
        .map(|(port, what, bytes)| {
            thread::spawn(move || {
                let _ = send_and_drain(port, &bytes);
                what
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    eprintln!(
        "malformed connections all closed in {:?}",
        started.elapsed()
    );
    still_serves(&s, &want, "after malformed traffic");

    // Oversized headers over TLS too (curl), answered or cut, not a crash.
    let big = "a".repeat(1 << 20);
    let _ = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "20", "--cacert"])
        .arg(s.cert_pem())
        .arg("-H")
        .arg(format!("X-Big: {big}"))
        .arg(s.https_url("/ok.bin"))
        .stdin(Stdio::null())
        .status();
    still_serves(&s, &want, "after a 1 MiB header over TLS");
}

#[test]
fn idle_and_slow_clients_are_closed_after_the_limits() {
    let s = FerryServe::start_ftp(&[
        "--http",
        "127.0.0.1:0",
        "--login-grace-time",
        "2",
        "--header-timeout",
        "2",
    ]);
    let want = make_file(&s.root().join("ok.bin"), 300_000, 2);
    // SSH: says its version, then nothing (never authenticates).
    let mut ssh = connect(s.sftp_port.unwrap());
    ssh.write_all(b"SSH-2.0-idle\r\n").unwrap();
    // FTP: connects, never logs in.
    let mut ftp = connect(s.ftp_port.unwrap());
    // HTTP: a header dribbled one byte a second (slowloris).
    let mut http = connect(s.http_port.unwrap());
    let mut slow = http.try_clone().unwrap();
    let dribble = thread::spawn(move || {
        for b in b"GET /ok.bin HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if slow.write_all(&[*b]).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(500));
        }
    });
    // HTTPS: connects, never starts TLS.
    let mut https = connect(s.https_port.unwrap());
    let limit = Duration::from_secs(15);
    for (what, sock) in [
        ("ssh without auth", &mut ssh),
        ("ftp without login", &mut ftp),
        ("http slowloris", &mut http),
        ("https silent", &mut https),
    ] {
        let took = closed_within(sock, limit);
        eprintln!("{what}: closed after {took:?}");
        assert!(took.is_some(), "{what}: still open after {limit:?}");
    }
    let _ = dribble.join();
    still_serves(&s, &want, "after idle clients");
}

#[test]
fn max_startups_caps_connections_that_have_not_logged_in() {
    let s = FerryServe::start_ftp(&["--max-startups", "3", "--login-grace-time", "30"]);
    let want = make_file(&s.root().join("ok.bin"), 300_000, 3);
    let ssh = s.sftp_port.unwrap();
    let mut idle: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut c = connect(ssh);
            // Read the server's version line: the connection is being served.
            let mut b = [0u8; 64];
            let n = c.read(&mut b).unwrap();
            assert!(b[..n].starts_with(b"SSH-2.0-"), "{:?}", &b[..n]);
            c
        })
        .collect();
    // Slots are taken as connections are handed to a worker: give the
    // acceptor a moment.
    thread::sleep(Duration::from_millis(200));
    let mut extra = connect(ssh);
    let took = closed_within(&mut extra, Duration::from_secs(10));
    assert!(took.is_some(), "a 4th unauthenticated connection was kept");
    let mut ftp = connect(s.ftp_port.unwrap());
    assert!(
        closed_within(&mut ftp, Duration::from_secs(10)).is_some(),
        "FTP shares the cap"
    );
    for c in &mut idle {
        let _ = c.shutdown(Shutdown::Both);
    }
    idle.clear();
    thread::sleep(Duration::from_millis(300));
    still_serves(&s, &want, "after the idle connections left");
}

/// `--max-connections` counts every listener together (issue #24: the help
/// said "per protocol"): with one idle SSH, one idle HTTPS and one idle FTP
/// connection under `--max-connections 3`, a 4th connection to any of them
/// is closed at once; after the idle ones leave, clients are served.
#[test]
fn max_connections_counts_every_protocol_together() {
    let s = FerryServe::start_ftp(&["--max-connections", "3", "--login-grace-time", "30"]);
    let want = make_file(&s.root().join("ok.bin"), 300_000, 5);
    let mut idle = Vec::new();
    let mut ssh = connect(s.sftp_port.unwrap());
    let mut b = [0u8; 64];
    let n = ssh.read(&mut b).unwrap();
    assert!(b[..n].starts_with(b"SSH-2.0-"), "{:?}", &b[..n]);
    idle.push(ssh);
    let mut ftp = connect(s.ftp_port.unwrap());
    let n = ftp.read(&mut b).unwrap();
    assert!(b[..n].starts_with(b"220"), "{:?}", &b[..n]);
    idle.push(ftp);
    // An HTTPS client that has not started TLS yet: kept for the
    // handshake timeout (10 s), far longer than the refusal below takes.
    idle.push(connect(s.https_port.unwrap()));
    thread::sleep(Duration::from_millis(300));
    for (name, port) in [
        ("HTTPS", s.https_port.unwrap()),
        ("SSH", s.sftp_port.unwrap()),
        ("FTP", s.ftp_port.unwrap()),
    ] {
        let mut extra = connect(port);
        let took = closed_within(&mut extra, Duration::from_secs(3));
        assert!(
            took.is_some(),
            "a 4th connection ({name}) was kept: the limit is not shared"
        );
    }
    for c in &mut idle {
        let _ = c.shutdown(Shutdown::Both);
    }
    idle.clear();
    thread::sleep(Duration::from_millis(300));
    still_serves(&s, &want, "after the idle connections left");
}

/// Wrong keys and passwords are answered after `--auth-fail-delay`, and a
/// right one right after is not slowed.
#[test]
fn failed_logins_are_delayed() {
    let s = FerryServe::start_ftp(&["--auth-fail-delay", "1500"]);
    let want = make_file(&s.root().join("ok.bin"), 1000, 4);
    let out = tempdir();
    let started = Instant::now();
    let mut a = args!["cp"];
    a.extend(s.ferry_opts_with(&s.other_key()));
    a.extend(args![s.url("/ok.bin"), out.path()]);
    let o = ferry_in(&s.home(), &a, &[]);
    assert_code(&o, 3, "a key not in authorized_keys");
    let took = started.elapsed();
    eprintln!("refused key answered after {took:?}");
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    let started = Instant::now();
    let mut a = args![
        "cp",
        "-q",
        "--ssl-reqd",
        "--pin",
        format!("sha256:{}", s.cert_sha256),
        "-u",
        "ferry:wrong-token",
        "--retries",
        "1"
    ];
    a.extend(args![s.ftp_url("ok.bin"), out.path()]);
    let o = ferry_in(&s.home(), &a, &[]);
    assert!(!o.status.success(), "{}", describe(&o));
    let took = started.elapsed();
    eprintln!("refused FTP password answered after {took:?}");
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    still_serves(&s, &want, "after failed logins");
}
