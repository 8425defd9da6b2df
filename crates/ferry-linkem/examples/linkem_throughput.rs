//! Measures how fast bulk data flows through the link emulator on loopback,
//! so we know the proxy itself does not cap the benchmarks it sits in.
//!
//! Usage: `cargo run --release -p ferry-linkem --example linkem_throughput --
//! [MIB] [DELAY_MS...]` (default: 1024 MiB, delays 0 and 10, plus a direct
//! connection without the proxy as baseline). A sink server on 127.0.0.1
//! reads and discards; the client writes MIB MiB and waits for the sink to
//! report the byte count, so the timing covers delivery, not just queueing.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferry_linkem::{LinkConfig, LinkEm};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Accepts connections, reads each to EOF, replies with the byte count.
async fn sink() -> Res<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 1 << 20];
                let mut total: u64 = 0;
                loop {
                    match sock.read(&mut buf).await {
                        Ok(0) => break,
                        Ok(n) => total += n as u64,
                        Err(_) => return,
                    }
                }
                let _ = sock.write_all(&total.to_be_bytes()).await;
            });
        }
    });
    Ok(addr)
}

async fn push(target: SocketAddr, bytes: u64) -> Res<Duration> {
    let mut sock = TcpStream::connect(target).await?;
    sock.set_nodelay(true)?;
    let block = vec![0xA5u8; 1 << 20];
    let start = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        sock.write_all(&block[..n]).await?;
        left -= n as u64;
    }
    sock.shutdown().await?;
    let mut count = [0u8; 8];
    sock.read_exact(&mut count).await?;
    let elapsed = start.elapsed();
    let got = u64::from_be_bytes(count);
    if got != bytes {
        return Err(format!("sink got {got} bytes, sent {bytes}").into());
    }
    Ok(elapsed)
}

fn report(label: &str, bytes: u64, t: Duration) {
    let mb_s = bytes as f64 / t.as_secs_f64() / 1e6;
    println!(
        "{label:<22} {:>6} MiB in {:>7.3} s = {:>8.1} MB/s",
        bytes >> 20,
        t.as_secs_f64(),
        mb_s
    );
}

#[tokio::main]
async fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let mib: u64 = match args.next() {
        Some(s) => s.parse()?,
        None => 1024,
    };
    let mut delays: Vec<u64> = args.map(|s| s.parse()).collect::<Result<_, _>>()?;
    if delays.is_empty() {
        delays = vec![0, 10];
    }
    let bytes = mib << 20;
    let sink_addr = sink().await?;
    report("direct (no proxy)", bytes, push(sink_addr, bytes).await?);
    for d in delays {
        let cfg = LinkConfig::with_delay(Duration::from_millis(d));
        let link = LinkEm::start("127.0.0.1:0".parse()?, sink_addr, cfg).await?;
        let t = push(link.local_addr(), bytes).await?;
        report(&format!("linkem delay {d} ms"), bytes, t);
        link.shutdown().await;
    }
    Ok(())
}
