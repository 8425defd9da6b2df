//! The FTP control connection as a server drives it: the welcome, replies
//! to USER/PASS, TYPE, PWD, SIZE, MDTM, CWD, FEAT's HASH line, OPTS HASH
//! and HASH (ferry_ftp::Conn, reading replies through suppaftp), then FEAT
//! and the EPSV and PASV replies
//! whose addresses suppaftp parses (a raw suppaftp stream, its data
//! connection refused before any connect). Each exec serves the input on
//! a loopback socket from a thread of this process: up to the first NUL to
//! ferry's connection, the rest to the raw one. Nothing may panic or hang,
//! and every failure must map to one of ferry's FTP errors with a message.
//! The first part is also given, line by line, to the HASH parsers
//! (`ferry_ftp::hash`), whose results must keep their promises.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ferry_ftp::{Conn, Endpoint, FtpError, Security};
use suppaftp::{Mode, RustlsFtpStream};

const TIMEOUT: Duration = Duration::from_secs(5);

/// A loopback "server": each accepted connection gets the next payload,
/// then end of stream; what the client sends is read and dropped.
fn server() -> &'static (SocketAddr, Mutex<Sender<Vec<u8>>>) {
    static S: OnceLock<(SocketAddr, Mutex<Sender<Vec<u8>>>)> = OnceLock::new();
    S.get_or_init(|| {
        // No SIGPIPE: libFuzzer's main, not Rust's, set up this process.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let addr = l.local_addr().expect("local addr");
        let (tx, rx) = channel::<Vec<u8>>();
        std::thread::spawn(move || {
            for payload in rx {
                let Ok((mut s, _)) = l.accept() else { continue };
                let _ = s.set_read_timeout(Some(TIMEOUT));
                let _ = s.set_write_timeout(Some(TIMEOUT));
                let _ = s.write_all(&payload);
                let _ = s.shutdown(Shutdown::Write);
                let mut sink = [0u8; 4096];
                while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
            }
        });
        (addr, Mutex::new(tx))
    })
}

fn serve(payload: &[u8]) -> SocketAddr {
    let (addr, tx) = server();
    tx.lock()
        .expect("server channel")
        .send(payload.to_vec())
        .expect("server thread");
    *addr
}

/// `ferry_ftp::hash` on each line: algorithm names are plain tokens, a
/// parsed reply has a range in order and a hash of 1 to MAX_HASH bytes.
fn hash_parsers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.split_inclusive('\n') {
        for (name, _) in ferry_ftp::hash::feat_algorithms(line) {
            assert!(
                !name.is_empty() && !name.contains(['*', ';', ' ']),
                "{name:?}"
            );
        }
        if let Ok(r) = ferry_ftp::hash::parse_hash_reply(line) {
            assert!(r.start <= r.end, "{r:?}");
            assert!(!r.hash.is_empty() && r.hash.len() <= ferry_ftp::hash::MAX_HASH);
            assert!(!r.algorithm.is_empty() && !r.path.contains(['\r', '\n']));
        }
    }
}

fn check_error(e: &FtpError) {
    assert!(!e.to_string().is_empty());
    let _ = (e.code(), e.is_not_found(), e.is_network());
}

/// One input of the `ftp_control` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn ftp_control(data: &[u8]) {
    let (ours, raw) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };

    // ferry's connection: connect, log in, TYPE I, PWD; then the commands
    // the engine sends before any transfer.
    let addr = serve(ours);
    let mut ep = Endpoint::new(
        "127.0.0.1",
        addr.port(),
        "user",
        "secret",
        Security::Plain,
        None,
    );
    ep.timeout = TIMEOUT;
    match Conn::open(&Arc::new(ep)) {
        Ok(mut c) => {
            let _ = c.url("/home/user/f");
            if let Err(e) = c.size("/f") {
                check_error(&e);
            }
            let _ = c.mdtm("/f");
            if let Err(e) = c.is_dir("/d") {
                check_error(&e);
            }
            let algos = c.hash_algorithms();
            let algo = algos.first().map(String::as_str).unwrap_or("SHA-256");
            match c.hash("/f", algo) {
                Ok(h) => assert!(!h.is_empty() && h.len() <= ferry_ftp::hash::MAX_HASH),
                Err(e) => check_error(&e),
            }
        }
        Err(e) => check_error(&e),
    }
    hash_parsers(ours);

    // suppaftp's EPSV/PASV reply parsing: the data connection is refused
    // by the builder, so no address from the input is ever connected to.
    let addr = serve(raw);
    let Ok(tcp) = TcpStream::connect(addr) else {
        return;
    };
    let _ = tcp.set_read_timeout(Some(TIMEOUT));
    let Ok(s) = RustlsFtpStream::connect_with_stream(tcp) else {
        return;
    };
    let mut s = s.passive_stream_builder(|_addr| {
        Err(suppaftp::FtpError::ConnectionError(std::io::Error::other(
            "fuzz: no data connections",
        )))
    });
    s.set_passive_nat_workaround(true);
    let _ = s.feat();
    s.set_mode(Mode::ExtendedPassive);
    if let Err(e) = s.list(None) {
        check_error(&FtpError::from_ftp("ftp://127.0.0.1", e));
    }
    s.set_mode(Mode::Passive);
    if let Err(e) = s.mlsd(None) {
        check_error(&FtpError::from_ftp("ftp://127.0.0.1", e));
    }
    s.set_passive_nat_workaround(false);
    let _ = s.nlst(None);
}
