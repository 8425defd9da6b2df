//! The client against a scripted HTTP/1.1 peer on 127.0.0.1: what the peer
//! receives, what it answers, and what the client must do (reuse a
//! keep-alive connection, retry once when the server closed it while idle,
//! stop redirect loops, keep credentials to the origins they were given for).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use ferry_http::{Client, HeaderMap, HttpError, Options, Url};

/// What the peer does with one request: the bytes to answer, and whether
/// to close the connection afterwards (without saying so).
type Handler = dyn Fn(&str) -> (String, bool) + Send + Sync;

struct Peer {
    port: u16,
    /// Request heads received, in order, with the connection number.
    log: Arc<Mutex<Vec<(usize, String)>>>,
}

fn peer(handler: Box<Handler>) -> Peer {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (log2, handler) = (log.clone(), Arc::new(handler));
    std::thread::spawn(move || {
        for (n, c) in l.incoming().enumerate() {
            let Ok(mut c) = c else { break };
            let (log, handler) = (log2.clone(), handler.clone());
            std::thread::spawn(move || loop {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if c.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                log.lock().unwrap().push((n, text.clone()));
                let (reply, close) = handler(&text);
                if c.write_all(reply.as_bytes()).is_err() || close {
                    return;
                }
            });
        }
    });
    Peer { port, log }
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn redirect(to: &str) -> String {
    format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n")
}

fn path_of(head: &str) -> String {
    head.split_whitespace().nth(1).unwrap_or("").to_string()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn client(opts: Options) -> Client {
    Client::new(Options {
        netrc: false,
        env_proxy: false,
        ..opts
    })
    .unwrap()
}

async fn get_text(c: &Client, url: &str) -> Result<String, HttpError> {
    let u = Url::parse(url).unwrap();
    let r = c.get(&u, &HeaderMap::new()).await?.error_for_status()?;
    Ok(String::from_utf8(r.bytes(1 << 20).await?).unwrap())
}

#[test]
fn keep_alive_connection_is_reused_with_host_header() {
    let p = peer(Box::new(|h| (ok(&path_of(h)), false)));
    let c = client(Options::default());
    rt().block_on(async {
        for i in 0..5 {
            let url = format!("http://127.0.0.1:{}/f{i}", p.port);
            assert_eq!(get_text(&c, &url).await.unwrap(), format!("/f{i}"));
        }
    });
    assert_eq!(c.connections(), 1, "one keep-alive connection for 5 GETs");
    let log = p.log.lock().unwrap();
    assert!(log[0].1.starts_with("GET /f0 HTTP/1.1\r\n"), "{}", log[0].1);
    assert!(log[0]
        .1
        .to_ascii_lowercase()
        .contains(&format!("host: 127.0.0.1:{}", p.port)));
    assert!(log[0].1.contains("ferry/"));
}

#[test]
fn a_keep_alive_connection_closed_while_idle_is_retried_once() {
    // The peer answers, then closes without "Connection: close": the
    // client's next request on that connection fails and must be sent
    // again on a new one.
    let p = peer(Box::new(|h| (ok(&path_of(h)), true)));
    let c = client(Options::default());
    rt().block_on(async {
        assert_eq!(
            get_text(&c, &format!("http://127.0.0.1:{}/a", p.port))
                .await
                .unwrap(),
            "/a"
        );
        // Let the close arrive.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(
            get_text(&c, &format!("http://127.0.0.1:{}/b", p.port))
                .await
                .unwrap(),
            "/b"
        );
    });
    let conns: Vec<usize> = p.log.lock().unwrap().iter().map(|(n, _)| *n).collect();
    assert_eq!(conns.len(), 2);
    assert_ne!(
        conns[0], conns[1],
        "the second GET went over a new connection"
    );
}

#[test]
fn redirect_loop_and_too_many_redirects_are_errors_naming_the_url() {
    let p = peer(Box::new(|h| {
        let path = path_of(h);
        let reply = match path.as_str() {
            "/a" => redirect("/b"),
            "/b" => redirect("/a"),
            p if p.starts_with("/chain") => {
                let n: u32 = p.trim_start_matches("/chain").parse().unwrap_or(0);
                redirect(&format!("/chain{}", n + 1))
            }
            _ => ok("x"),
        };
        (reply, false)
    }));
    let c = client(Options {
        max_redirs: 3,
        ..Options::default()
    });
    rt().block_on(async {
        let e = get_text(&c, &format!("http://127.0.0.1:{}/a", p.port))
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, HttpError::Remote(_)), "{e:?}");
        assert!(
            msg.contains("redirect loop") && msg.contains("/a -> "),
            "{msg}"
        );
        let e = get_text(&c, &format!("http://127.0.0.1:{}/chain0", p.port))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("more than 3 redirects"), "{e}");
    });
    // /chain0 -> 1 -> 2 -> 3 are followed, /chain4 is not requested.
    let log = p.log.lock().unwrap();
    assert!(log.iter().any(|(_, h)| path_of(h) == "/chain3"));
    assert!(!log.iter().any(|(_, h)| path_of(h) == "/chain4"));
}

#[test]
fn credentials_stay_with_their_origin() {
    // Two peers: the first redirects to the second (another origin).
    let other = peer(Box::new(|_| (ok("other"), false)));
    let to = format!("http://127.0.0.1:{}/elsewhere", other.port);
    let first = peer(Box::new(move |h| {
        if path_of(h) == "/go" {
            (redirect(&to), false)
        } else {
            (ok("here"), false)
        }
    }));
    let c = client(Options {
        token: Some("s3cret".into()),
        ..Options::default()
    });
    let start = Url::parse(&format!("http://127.0.0.1:{}/go", first.port)).unwrap();
    c.trust(&start);
    rt().block_on(async {
        assert_eq!(get_text(&c, &start.to_string()).await.unwrap(), "other");
    });
    let sent = &first.log.lock().unwrap()[0].1;
    assert!(sent.contains("Bearer s3cret"), "{sent}");
    let forwarded = &other.log.lock().unwrap()[0].1;
    assert!(
        !forwarded.to_ascii_lowercase().contains("authorization"),
        "the token must not follow a redirect to another origin: {forwarded}"
    );
}

#[test]
fn error_statuses_map_to_exit_classes() {
    let p = peer(Box::new(|h| {
        let code = path_of(h).trim_start_matches('/').to_string();
        (
            format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n"),
            false,
        )
    }));
    let c = client(Options::default());
    rt().block_on(async {
        for (code, trust) in [("404", false), ("500", false), ("401", true)] {
            let e = get_text(&c, &format!("http://127.0.0.1:{}/{code}", p.port))
                .await
                .unwrap_err();
            assert_eq!(matches!(e, HttpError::Trust(_)), trust, "{code}: {e:?}");
            assert!(e.to_string().contains(code) && e.to_string().contains(&format!("/{code}")));
        }
    });
}
