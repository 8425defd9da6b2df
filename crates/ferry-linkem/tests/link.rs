//! Functional tests of the link emulator on 127.0.0.1: the delay really is
//! applied (round trip at least twice the one-way delay), bulk data passes
//! byte-exact, half-close is forwarded, the rate cap paces, connections
//! sharing one capped link all get their bytes, and shutdown closes
//! connections. How the shared cap divides the link is tested on a virtual
//! clock in `src/pace.rs`, not here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferry_linkem::{LinkConfig, LinkEm};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// An echo server on 127.0.0.1 that echoes until EOF, then half-closes.
async fn echo_server() -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                sock.set_nodelay(true).unwrap();
                let (mut r, mut w) = sock.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    (addr, task)
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Deterministic, non-repeating-looking test data.
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rtt_is_at_least_twice_the_one_way_delay() {
    let (echo, server) = echo_server().await;
    let delay = Duration::from_millis(10);
    let link = LinkEm::start(localhost(), echo, LinkConfig::with_delay(delay))
        .await
        .unwrap();
    let mut sock = TcpStream::connect(link.local_addr()).await.unwrap();
    sock.set_nodelay(true).unwrap();
    let mut best = Duration::MAX;
    let mut buf = [0u8; 1];
    for i in 0..5u8 {
        let t = Instant::now();
        sock.write_all(&[i]).await.unwrap();
        sock.read_exact(&mut buf).await.unwrap();
        let rtt = t.elapsed();
        assert_eq!(buf[0], i);
        best = best.min(rtt);
    }
    assert!(best >= 2 * delay, "min RTT {best:?} < {:?}", 2 * delay);
    drop(sock);
    link.shutdown().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_megabytes_pass_byte_exact_and_half_close_is_forwarded() {
    let (echo, server) = echo_server().await;
    let link = LinkEm::start(
        localhost(),
        echo,
        LinkConfig::with_delay(Duration::from_millis(10)),
    )
    .await
    .unwrap();
    let data = pattern(50_000_000);
    let sock = TcpStream::connect(link.local_addr()).await.unwrap();
    let (mut r, mut w) = sock.into_split();
    let to_send = data.clone();
    let writer = tokio::spawn(async move {
        // Odd-sized writes so chunk boundaries never line up with anything.
        for piece in to_send.chunks(77_777) {
            w.write_all(piece).await.unwrap();
        }
        // Half-close: the echo server sees EOF only if the proxy forwards it,
        // and only then closes its side, ending our read_to_end below.
        w.shutdown().await.unwrap();
        w
    });
    let mut got = Vec::with_capacity(data.len());
    tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut got))
        .await
        .expect("echo did not finish: half-close not forwarded?")
        .unwrap();
    let _w = writer.await.unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "echoed bytes differ from the bytes sent");
    link.shutdown().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_cap_paces_the_transfer() {
    let (echo, server) = echo_server().await;
    let cfg = LinkConfig {
        one_way_delay: Duration::ZERO,
        rate_bytes_per_sec: Some(10_000_000),
        ..LinkConfig::default()
    };
    let link = LinkEm::start(localhost(), echo, cfg).await.unwrap();
    let data = pattern(2_000_000);
    let sock = TcpStream::connect(link.local_addr()).await.unwrap();
    let (mut r, mut w) = sock.into_split();
    let t = Instant::now();
    let to_send = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&to_send).await.unwrap();
        w.shutdown().await.unwrap();
        w
    });
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.unwrap();
    let elapsed = t.elapsed();
    let _w = writer.await.unwrap();
    assert!(got == data);
    // 2 MB at 10 MB/s takes at least 0.2 s through each direction; the two
    // directions overlap, so only the lower bound of one is asserted.
    assert!(
        elapsed >= Duration::from_millis(190),
        "2 MB at 10 MB/s took only {elapsed:?}"
    );
    link.shutdown().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_sharing_one_capped_link_all_deliver_byte_exact() {
    let (echo, server) = echo_server().await;
    let cfg = LinkConfig {
        one_way_delay: Duration::from_millis(1),
        rate_bytes_per_sec: Some(100_000_000),
        max_buffer: 1 << 20,
    };
    let link = LinkEm::start(localhost(), echo, cfg).await.unwrap();
    let mut conns = Vec::new();
    for i in 0..4usize {
        let addr = link.local_addr();
        conns.push(tokio::spawn(async move {
            let mut data = pattern(1_000_000 + i * 1234);
            data.rotate_left(i * 1000);
            let sock = TcpStream::connect(addr).await.unwrap();
            let (mut r, mut w) = sock.into_split();
            let to_send = data.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&to_send).await.unwrap();
                w.shutdown().await.unwrap();
                w
            });
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            let _w = writer.await.unwrap();
            assert!(got == data, "connection {i}: echoed bytes differ");
        }));
    }
    for c in conns {
        tokio::time::timeout(Duration::from_secs(60), c)
            .await
            .expect("a connection on the shared link stalled")
            .unwrap();
    }
    link.shutdown().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_buffer_still_delivers_everything() {
    let (echo, server) = echo_server().await;
    let cfg = LinkConfig {
        one_way_delay: Duration::from_millis(1),
        rate_bytes_per_sec: None,
        max_buffer: 1000,
    };
    let link = LinkEm::start(localhost(), echo, cfg).await.unwrap();
    let data = pattern(300_000);
    let sock = TcpStream::connect(link.local_addr()).await.unwrap();
    let (mut r, mut w) = sock.into_split();
    let to_send = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&to_send).await.unwrap();
        w.shutdown().await.unwrap();
        w
    });
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), r.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let _w = writer.await.unwrap();
    assert!(got == data);
    link.shutdown().await;
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_open_connections_and_the_listener() {
    let (echo, server) = echo_server().await;
    let link = LinkEm::start(localhost(), echo, LinkConfig::default())
        .await
        .unwrap();
    let addr = link.local_addr();
    let mut sock = TcpStream::connect(addr).await.unwrap();
    sock.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    sock.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
    link.shutdown().await;
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut rest))
        .await
        .expect("connection stayed open after shutdown");
    // Either a clean EOF or a reset: both mean the proxy closed it.
    if let Ok(n) = n {
        assert_eq!(n, 0);
    }
    assert!(TcpStream::connect(addr).await.is_err());
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstream_closes_the_client() {
    // Bind then drop a listener to get a port nobody listens on.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let link = LinkEm::start(localhost(), dead, LinkConfig::default())
        .await
        .unwrap();
    let mut sock = TcpStream::connect(link.local_addr()).await.unwrap();
    let mut rest = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut rest))
        .await
        .expect("client was left hanging");
    if let Ok(n) = r {
        assert_eq!(n, 0);
    }
    link.shutdown().await;
}
