//! A big file on a long path is widened over more connections, as
//! measured (docs/internals/wan.md, "More connections as measured"),
//! against a real `ferry serve` through the packet-level link: the server
//! in one network namespace, `ferry cp` in another, 20 ms round trip and
//! a 200 Mbit/s bottleneck; SFTP, HTTPS and FTPS. Every byte is compared; `--json` says how many
//! connections the copy used. Root only (namespaces, TUN devices); the
//! speed is the benchmark's business (BENCHMARKS.md), never asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
#[allow(unused_macros)]
mod common;

use std::ffi::OsString;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::serve::FerryServe;
use ferry_linkem::net::{NetConfig, NetLink};
use ferry_linkem::netem::DirConfig;

/// The link, or why this host cannot make one.
fn long_link(tag: &str) -> Option<NetLink> {
    if !common::is_root() {
        println!("SKIPPED: needs root for network namespaces");
        return None;
    }
    if let Some(why) = ferry_linkem::net::unsupported() {
        println!("SKIPPED: {why}");
        return None;
    }
    let dir = DirConfig {
        delay: Duration::from_millis(10),
        rate: Some(25_000_000),
        queue_bytes: 1 << 20,
        ..DirConfig::default()
    };
    let name = format!("{tag}{}", std::process::id() % 100_000);
    Some(NetLink::up(NetConfig::symmetric(&name, dir)).expect("packet-level link"))
}

/// `ferry cp ARGS...` run in network namespace `ns`.
fn cp_in(ns: &str, serve: &FerryServe, args: &[OsString]) -> Output {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, common::ferry_bin(), "cp"])
        .args(args)
        .env("HOME", serve.home())
        .env("FERRY_LOG", "ferry_tcp=debug")
        .stdin(Stdio::null())
        .output()
        .expect("ip netns exec ferry cp");
    println!("{}", common::describe(&out));
    out
}

fn streams(o: &Output) -> u64 {
    common::json_field(o, "streams").parse().unwrap_or(0)
}

/// A download that ended well, holds `body`, and went over more than one
/// connection.
fn assert_widened(o: &Output, got: &std::path::Path, body: &[u8], what: &str) {
    common::assert_ok(o, what);
    assert!(std::fs::read(got).unwrap() == body, "{what} differs");
    assert!(streams(o) >= 2, "{what} used {} connection(s)", streams(o));
}

/// A widened download started on 8 connections: at least six were open
/// (48 MiB is six pieces of 8 MiB over SFTP and HTTPS).
fn assert_starts_on_eight(o: &Output, what: &str) {
    assert!(
        streams(o) >= 6,
        "{what} starts on 8 connections, used {}",
        streams(o)
    );
}

#[test]
fn big_files_are_widened_over_more_connections_on_a_long_path() {
    let Some(link) = long_link("wd") else { return };
    let serve = FerryServe::start_in_netns(
        &link.server_netns(),
        "198.19.0.1",
        &["--writable", "--ftp", "198.19.0.1:0"],
    );
    let body: Vec<u8> = (0..(48u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(serve.root().join("big.bin"), &body).unwrap();
    let local = common::tempdir();
    let ns = link.client_netns();

    // SFTP down: ferry serve gives one connection unasked.
    let down = local.path().join("down.bin");
    let mut a = args!["--json"];
    a.extend(serve.ferry_opts_with(&serve.key()));
    a.extend(args![serve.url("big.bin"), &down]);
    let o = cp_in(&ns, &serve, &a);
    assert_widened(&o, &down, &body, "sftp download");
    // It starts on 8 connections: the 48 MiB are six pieces of 8 MiB,
    // all under way at once.
    assert_starts_on_eight(&o, "an SFTP download");

    // `--streams 3` on the long path: its ranges share the connections
    // out as they join, as a widened file's do.
    let three = local.path().join("three.bin");
    let mut a = args!["--json", "--streams", "3"];
    a.extend(serve.ferry_opts_with(&serve.key()));
    a.extend(args![serve.url("big.bin"), &three]);
    let o = cp_in(&ns, &serve, &a);
    assert_widened(&o, &three, &body, "sftp --streams 3 download");

    // SFTP up, from that file.
    let mut a = args!["--json"];
    a.extend(serve.ferry_opts_with(&serve.key()));
    a.extend(args![&down, serve.url("up.bin")]);
    let o = cp_in(&ns, &serve, &a);
    common::assert_ok(&o, "sftp upload");
    // The upload's sender is this client: on a 20 ms path its send buffer
    // is fixed where the system lets that be larger than autotuning.
    let limits = ferry_tcp::send_buffer_limits().expect("wmem_max and tcp_wmem");
    let fixed = String::from_utf8_lossy(&o.stderr).contains("send buffer fixed");
    assert_eq!(
        fixed,
        limits.0 * 2 > limits.1,
        "send buffer fixed: {fixed}, with wmem_max and tcp_wmem's max {limits:?}"
    );
    assert!(
        std::fs::read(serve.root().join("up.bin")).unwrap() == body,
        "sftp upload differs"
    );

    // HTTPS down over HTTP/2: one connection unasked, ranges added as
    // connections of their own.
    let https = local.path().join("https.bin");
    let o = cp_in(
        &ns,
        &serve,
        &args![
            "--json",
            "--pin",
            format!("sha256:{}", serve.cert_sha256),
            "--token",
            serve.token.clone(),
            serve.https_url("big.bin"),
            &https
        ],
    );
    assert_widened(&o, &https, &body, "https download");
    // HTTPS starts a widened file on 8 connections too.
    assert_starts_on_eight(&o, "an HTTPS download");
    assert!(
        std::fs::read_dir(local.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".ferry-")),
        "no part file or record left"
    );

    // FTPS down: one data connection unasked (`--streams 1`), ranges
    // added as control connections of the pool's.
    let ftp = local.path().join("ftp.bin");
    let mut a = args!["--json"];
    a.extend(serve.ftps_login());
    a.extend(args![serve.ftp_url("big.bin"), &ftp]);
    let o = cp_in(&ns, &serve, &a);
    assert_widened(&o, &ftp, &body, "ftps download");
    assert_starts_on_eight(&o, "an FTP download");

    // --max-streams 1: the protocol's default, nothing added.
    let one = local.path().join("one.bin");
    let mut a = args!["--json", "--max-streams", "1"];
    a.extend(serve.ferry_opts_with(&serve.key()));
    a.extend(args![serve.url("big.bin"), &one]);
    let o = cp_in(&ns, &serve, &a);
    common::assert_ok(&o, "sftp download, --max-streams 1");
    assert!(std::fs::read(&one).unwrap() == body);
    assert_eq!(
        streams(&o),
        1,
        "--max-streams 1 kept ferry serve's one connection"
    );
    let r = link.down();
    println!("link: {r:?}");
}
