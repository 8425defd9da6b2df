//! A fault-injecting TCP proxy on 127.0.0.1 for the fault matrix
//! (tests/faults.rs, issue #24): it relays every connection to an upstream
//! port and, once a set number of bytes has crossed in one direction,
//! resets the connection (RST, SO_LINGER 0), stalls it (stops forwarding
//! both ways, keeps both sockets open) or pauses every connection until the
//! test releases them (a fixed "mid-file" point to kill a client or a
//! server at).
//!
//! Bytes are counted over all connections of the proxy, per direction, so
//! "after N bytes downstream" means N bytes of the transfer whatever the
//! number of connections the client opened. A fault fires at most
//! `times` times; later connections are relayed untouched (so a retry can
//! succeed). Threads, not tokio: two per connection, bounded by the test.
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Which way bytes flow through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Client to server (an upload's data).
    Up,
    /// Server to client (a download's data).
    Down,
}

/// What happens when the threshold is crossed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Cut the connection that crossed it with a TCP reset, both sides.
    Reset,
    /// Stop forwarding on that connection, both ways; sockets stay open
    /// until the peer gives up (or [`FaultProxy::release`]).
    Stall,
    /// Stop forwarding on every connection until [`FaultProxy::release`].
    Pause,
}

#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub flow: Flow,
    /// Bytes (over all connections, in `flow`) before the fault fires.
    pub after: u64,
    pub action: Action,
    /// How many times it fires at most.
    pub times: usize,
}

struct Shared {
    upstream: AtomicU16,
    fault: Mutex<Option<Fault>>,
    fired: AtomicUsize,
    up: AtomicU64,
    down: AtomicU64,
    paused: AtomicBool,
    connections: AtomicUsize,
    /// Every connection's sockets, to close them on [`FaultProxy::close_all`].
    socks: Mutex<Vec<(usize, TcpStream, TcpStream)>>,
    stop: AtomicBool,
}

pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

/// Cut with RST rather than FIN: what a middlebox or a crashed peer does.
fn reset(s: &TcpStream) {
    let _ = rustix::net::sockopt::set_socket_linger(s, Some(Duration::ZERO));
    let _ = s.shutdown(Shutdown::Both);
}

impl FaultProxy {
    /// A proxy to 127.0.0.1:`upstream`, relaying untouched until
    /// [`FaultProxy::arm`].
    pub fn start(upstream: u16) -> FaultProxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let port = l.local_addr().map(|a| a.port()).unwrap_or_default();
        let shared = Arc::new(Shared {
            upstream: AtomicU16::new(upstream),
            fault: Mutex::new(None),
            fired: AtomicUsize::new(0),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            socks: Mutex::new(Vec::new()),
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
                thread::spawn(move || relay(c, sh));
            }
        });
        FaultProxy { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Set the fault (counting from the bytes relayed so far).
    pub fn arm(&self, fault: Fault) {
        let base = match fault.flow {
            Flow::Up => self.shared.up.load(Ordering::Acquire),
            Flow::Down => self.shared.down.load(Ordering::Acquire),
        };
        self.shared.fired.store(0, Ordering::Release);
        *self.shared.fault.lock().unwrap_or_else(|e| e.into_inner()) = Some(Fault {
            after: base + fault.after,
            ..fault
        });
    }

    /// How many times the fault has fired.
    pub fn fired(&self) -> usize {
        self.shared.fired.load(Ordering::Acquire)
    }

    /// Wait (at most `limit`) for the fault to fire; false on time-out.
    pub fn wait_fired(&self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while self.fired() == 0 {
            if Instant::now() > end {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Bytes relayed so far in `flow`.
    pub fn bytes(&self, flow: Flow) -> u64 {
        match flow {
            Flow::Up => self.shared.up.load(Ordering::Acquire),
            Flow::Down => self.shared.down.load(Ordering::Acquire),
        }
    }

    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// Forward again after [`Action::Pause`] (or a stall), and disarm.
    pub fn release(&self) {
        *self.shared.fault.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.shared.paused.store(false, Ordering::Release);
    }

    /// Close every relayed connection (FIN to both ends).
    pub fn close_all(&self) {
        let socks =
            std::mem::take(&mut *self.shared.socks.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, a, b) in socks {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.release();
        self.close_all();
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn relay(client: TcpStream, sh: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", sh.upstream.load(Ordering::Acquire))) else {
        reset(&client);
        return;
    };
    let id = sh.connections.fetch_add(1, Ordering::AcqRel);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    if let (Ok(a), Ok(b)) = (client.try_clone(), server.try_clone()) {
        sh.socks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, a, b));
    }
    let stalled = Arc::new(AtomicBool::new(false));
    let (sh2, st2) = (sh.clone(), stalled.clone());
    let (c3, s3) = (client.try_clone().ok(), server.try_clone().ok());
    let t = thread::spawn(move || pump(c2, s2, Flow::Up, &sh2, &st2));
    pump(server, client, Flow::Down, &sh, &stalled);
    let _ = t.join();
    // Both ways are done: close every handle on the two sockets, so the
    // kernel answers whatever else arrives with a reset, as a real dead
    // peer does (a half-open socket nobody reads would be a stall).
    sh.socks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(i, _, _)| *i != id);
    for s in [c3, s3].into_iter().flatten() {
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// Copy `from` to `to`, counting in `flow` and applying the fault.
fn pump(mut from: TcpStream, mut to: TcpStream, flow: Flow, sh: &Shared, stalled: &AtomicBool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let counter = match flow {
            Flow::Up => &sh.up,
            Flow::Down => &sh.down,
        };
        let total = counter.fetch_add(n as u64, Ordering::AcqRel) + n as u64;
        let fire = {
            let f = sh.fault.lock().unwrap_or_else(|e| e.into_inner());
            match *f {
                Some(f) if f.flow == flow && total >= f.after => {
                    let prev = sh.fired.fetch_add(1, Ordering::AcqRel);
                    if prev < f.times {
                        Some(f.action)
                    } else {
                        sh.fired.fetch_sub(1, Ordering::AcqRel);
                        None
                    }
                }
                _ => None,
            }
        };
        match fire {
            Some(Action::Reset) => {
                reset(&from);
                reset(&to);
                return;
            }
            Some(Action::Stall) => stalled.store(true, Ordering::Release),
            Some(Action::Pause) => sh.paused.store(true, Ordering::Release),
            None => {}
        }
        // Hold the bytes while stalled or paused; the sockets stay open.
        while stalled.load(Ordering::Acquire) || sh.paused.load(Ordering::Acquire) {
            if sh.stop.load(Ordering::Acquire) {
                return;
            }
            if stalled.load(Ordering::Acquire)
                && sh.fault.lock().unwrap_or_else(|e| e.into_inner()).is_none()
            {
                // Released: the stall is over.
                stalled.store(false, Ordering::Release);
            }
            // The peer may give up and close: stop holding then.
            if peer_closed(&to) || peer_closed(&from) {
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Whether the other end of `s` has closed or reset it, without taking
/// any byte or changing the socket's mode (the other pump thread reads it).
fn peer_closed(s: &TcpStream) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(s, PollFlags::RDHUP)];
    match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(0) => false,
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
        Err(_) => true,
    }
}
