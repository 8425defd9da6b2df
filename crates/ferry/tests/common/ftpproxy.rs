//! An FTP proxy on 127.0.0.1 for the short-upload test (tests/faults.rs,
//! issue #20): it relays control connections to a plain-FTP server and puts
//! itself in the path of every passive data connection by rewriting the
//! server's `229` (EPSV) and `227` (PASV) replies to a port of its own.
//!
//! With [`FtpProxy::cut`] set to N, every upload's data connection loses
//! its last N bytes: the proxy holds N bytes back and, when the client
//! closes, closes its side to the server cleanly (FIN) without them. The
//! server sees the data end, stores a short file and answers `226`, as a
//! server whose disk or quota cut the file short does (vsftpd says `451`
//! on a full disk, so this is how a real server gets there). With
//! [`FtpProxy::refuse_size`], the proxy answers `SIZE` itself with `502`,
//! as a server without `SIZE` does. Threads, not tokio: two per
//! connection, bounded by the test.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

struct Shared {
    upstream: u16,
    cut: AtomicU64,
    refuse_size: AtomicBool,
    /// Data connections that lost bytes to `cut`.
    cuts: AtomicUsize,
    /// Data connections relayed.
    data: AtomicUsize,
    /// `SIZE` commands answered with `502`.
    refused: AtomicUsize,
    stop: AtomicBool,
}

pub struct FtpProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl FtpProxy {
    /// A proxy to the FTP server on 127.0.0.1:`upstream`, relaying
    /// untouched until told otherwise.
    pub fn start(upstream: u16) -> FtpProxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = l.local_addr().map(|a| a.port()).unwrap_or_default();
        let shared = Arc::new(Shared {
            upstream,
            cut: AtomicU64::new(0),
            refuse_size: AtomicBool::new(false),
            cuts: AtomicUsize::new(0),
            data: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        thread::spawn(move || {
            for c in l.incoming() {
                if sh.stop.load(Ordering::Acquire) {
                    break;
                }
                let Ok(c) = c else { continue };
                let sh = sh.clone();
                thread::spawn(move || control(c, sh));
            }
        });
        FtpProxy { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Drop the last `n` bytes of every upload from now on (0: none).
    pub fn cut(&self, n: u64) {
        self.shared.cut.store(n, Ordering::Release);
    }

    /// Answer `SIZE` with `502` (or relay it again).
    pub fn refuse_size(&self, on: bool) {
        self.shared.refuse_size.store(on, Ordering::Release);
    }

    /// Uploads that lost bytes so far.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::Acquire)
    }

    /// Data connections relayed so far.
    pub fn data_connections(&self) -> usize {
        self.shared.data.load(Ordering::Acquire)
    }

    /// `SIZE` commands refused so far.
    pub fn sizes_refused(&self) -> usize {
        self.shared.refused.load(Ordering::Acquire)
    }
}

impl Drop for FtpProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One control connection: commands up (a `SIZE` answered here when
/// refused), replies down (passive replies rewritten to a data relay).
fn control(client: TcpStream, sh: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", sh.upstream)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(client_r), Ok(server_r), Ok(client_w), Ok(server_w)) = (
        client.try_clone(),
        server.try_clone(),
        client.try_clone(),
        server.try_clone(),
    ) else {
        return;
    };
    let to_client = Arc::new(Mutex::new(client_w));
    let down = {
        let (to_client, sh) = (to_client.clone(), sh.clone());
        thread::spawn(move || replies(server_r, &to_client, &sh))
    };
    commands(client_r, server_w, &to_client, &sh);
    let _ = server.shutdown(Shutdown::Both);
    let _ = down.join();
    let _ = client.shutdown(Shutdown::Both);
}

fn commands(from: TcpStream, mut to: TcpStream, to_client: &Mutex<TcpStream>, sh: &Shared) {
    let mut r = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let size = line.len() >= 5 && line[..5].eq_ignore_ascii_case(b"SIZE ");
        if size && sh.refuse_size.load(Ordering::Acquire) {
            sh.refused.fetch_add(1, Ordering::AcqRel);
            if lock(to_client)
                .write_all(b"502 SIZE not implemented.\r\n")
                .is_err()
            {
                break;
            }
            continue;
        }
        if to.write_all(&line).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn replies(from: TcpStream, to_client: &Mutex<TcpStream>, sh: &Arc<Shared>) {
    let mut r = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        let out = if let Some(port) = epsv_port(&text) {
            let mine = data_relay(port, sh.clone());
            format!("229 Entering Extended Passive Mode (|||{mine}|).\r\n").into_bytes()
        } else if let Some(port) = pasv_port(&text) {
            let mine = data_relay(port, sh.clone());
            format!(
                "227 Entering Passive Mode (127,0,0,1,{},{}).\r\n",
                mine >> 8,
                mine & 0xff
            )
            .into_bytes()
        } else {
            line.clone()
        };
        if lock(to_client).write_all(&out).is_err() {
            break;
        }
    }
    let _ = lock(to_client).shutdown(Shutdown::Write);
}

/// The port of `229 Entering Extended Passive Mode (|||PORT|)`.
fn epsv_port(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("229 ")?;
    let inner = rest.split_once("(|||")?.1.split_once('|')?.0;
    inner.parse().ok()
}

/// The port of `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)`.
fn pasv_port(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("227 ")?;
    let inner = rest.split_once('(')?.1.split_once(')')?.0;
    let n: Vec<u16> = inner
        .split(',')
        .map(|x| x.trim().parse().ok())
        .collect::<Option<_>>()?;
    match n.as_slice() {
        [_, _, _, _, p1, p2] => Some(p1 * 256 + p2),
        _ => None,
    }
}

/// A listener for one data connection, relayed to the server's passive
/// `port`; returns the listener's port. Gives up after 10 s without a
/// client.
fn data_relay(port: u16, sh: Arc<Shared>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let mine = l.local_addr().map(|a| a.port()).unwrap_or_default();
    let _ = l.set_nonblocking(true);
    thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = loop {
            match l.accept() {
                Ok((c, _)) => break c,
                Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
                Err(_) => return,
            }
        };
        let _ = client.set_nonblocking(false);
        let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
            let _ = client.shutdown(Shutdown::Both);
            return;
        };
        sh.data.fetch_add(1, Ordering::AcqRel);
        let cut = sh.cut.load(Ordering::Acquire) as usize;
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
            return;
        };
        let down = thread::spawn(move || {
            let (mut from, mut to) = (s2, c2);
            let _ = std::io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
        upload(client, server, cut, &sh);
        let _ = down.join();
    });
    mine
}

/// Client to server, holding the last `cut` bytes back; at the client's
/// end they are dropped and the server sees a clean end of data.
fn upload(mut from: TcpStream, mut to: TcpStream, cut: usize, sh: &Shared) {
    let mut held: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        held.extend_from_slice(&buf[..n]);
        if held.len() > cut {
            let pass = held.len() - cut;
            if to.write_all(&held[..pass]).is_err() {
                return;
            }
            held.drain(..pass);
        }
    }
    if !held.is_empty() {
        sh.cuts.fetch_add(1, Ordering::AcqRel);
    }
    let _ = to.shutdown(Shutdown::Write);
}
