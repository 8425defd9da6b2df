//! Proxies from the environment, as curl reads them: `https_proxy` /
//! `HTTPS_PROXY` for https:// URLs, `http_proxy` (lowercase only, as curl,
//! since `HTTP_PROXY` can be set by a CGI request) for http://, and
//! `no_proxy` / `NO_PROXY` (comma-separated host names or domain suffixes,
//! `*` for all). Every connection through a proxy is a CONNECT tunnel, so
//! TLS runs end to end and the proxy sees only the host and port.
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{auth, HttpError, Origin};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    /// `Proxy-Authorization` value, from `user:pass@` in the proxy URL.
    pub auth: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    pub https: Option<Proxy>,
    pub http: Option<Proxy>,
    pub no_proxy: Vec<String>,
}

/// Largest CONNECT answer accepted.
const MAX_CONNECT_REPLY: usize = 16 * 1024;

impl ProxyConfig {
    /// From the environment; a malformed proxy URL is an error (better
    /// than silently connecting directly).
    pub fn from_env() -> Result<ProxyConfig, HttpError> {
        let get = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()))
        };
        let parse = |v: Option<String>, name: &str| -> Result<Option<Proxy>, HttpError> {
            v.map(|v| parse_proxy(&v).map_err(|e| HttpError::Usage(format!("{name}: {e}"))))
                .transpose()
        };
        Ok(ProxyConfig {
            https: parse(get(&["https_proxy", "HTTPS_PROXY"]), "HTTPS_PROXY")?,
            http: parse(get(&["http_proxy"]), "http_proxy")?,
            no_proxy: get(&["no_proxy", "NO_PROXY"])
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().trim_start_matches('.').to_ascii_lowercase())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    pub fn for_origin(&self, o: &Origin) -> Option<&Proxy> {
        let p = if o.https {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        }?;
        let host = o.host.to_ascii_lowercase();
        let bypass = self
            .no_proxy
            .iter()
            .any(|n| n == "*" || host == *n || host.ends_with(&format!(".{n}")));
        (!bypass).then_some(p)
    }
}

/// `[http://][user:pass@]host[:port]` (port 1080 by default, as curl).
pub fn parse_proxy(s: &str) -> Result<Proxy, String> {
    let t = s.trim();
    let rest = if let Some((scheme, rest)) = t.split_once("://") {
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "{t}: only http:// proxies are supported (a CONNECT tunnel carries the TLS)"
            ));
        }
        rest
    } else {
        t
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hp) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (host, port) = if let Some(r) = hp.strip_prefix('[') {
        let (h, after) = r.split_once(']').ok_or(format!("{t}: unclosed '['"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| format!("{t}: bad port"))?,
            None => 1080,
        };
        (h.to_string(), port)
    } else {
        match hp.rsplit_once(':') {
            Some((h, p)) => (
                h.to_string(),
                p.parse().map_err(|_| format!("{t}: bad port {p:?}"))?,
            ),
            None => (hp.to_string(), 1080),
        }
    };
    if host.is_empty() {
        return Err(format!("{t}: no proxy host"));
    }
    let auth = userinfo.map(|u| {
        let dec = |x: &str| {
            percent_encoding::percent_decode_str(x)
                .decode_utf8_lossy()
                .into_owned()
        };
        let (n, p) = u.split_once(':').unwrap_or((u, ""));
        auth::basic(&dec(n), &dec(p))
    });
    Ok(Proxy { host, port, auth })
}

/// Ask the proxy on `stream` for a tunnel to `host:port`.
pub(crate) async fn tunnel(
    stream: &mut tokio::net::TcpStream,
    proxy: &Proxy,
    target: &Origin,
) -> Result<(), HttpError> {
    let hp = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let label = format!("proxy {}:{}", proxy.host, proxy.port);
    let mut req = format!("CONNECT {hp} HTTP/1.1\r\nHost: {hp}\r\n");
    if let Some(a) = &proxy.auth {
        req.push_str(&format!("Proxy-Authorization: {a}\r\n"));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(|e| HttpError::Network(format!("{label}: {e}")))?;
    // Byte by byte: nothing after the header may be consumed, it belongs
    // to the tunnel.
    let mut reply = Vec::with_capacity(256);
    while !reply.ends_with(b"\r\n\r\n") {
        if reply.len() >= MAX_CONNECT_REPLY {
            return Err(HttpError::Network(format!(
                "{label}: CONNECT reply too long"
            )));
        }
        let b = stream.read_u8().await.map_err(|e| {
            HttpError::Network(format!("{label}: closed during CONNECT to {hp}: {e}"))
        })?;
        reply.push(b);
    }
    let text = String::from_utf8_lossy(&reply);
    let status_line = text.lines().next().unwrap_or("");
    let code = status_line.split_whitespace().nth(1).unwrap_or("");
    match code {
        "200" => Ok(()),
        "407" => Err(HttpError::Trust(format!(
            "{label}: the proxy wants credentials (407); put user:pass@ in HTTPS_PROXY"
        ))),
        _ => Err(HttpError::Network(format!(
            "{label}: CONNECT {hp} refused: {status_line}"
        ))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_bypass() {
        let p = parse_proxy("http://u:p%40ss@proxy.example:3128/").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("proxy.example", 3128));
        assert_eq!(p.auth.as_deref(), Some(auth::basic("u", "p@ss").as_str()));
        assert_eq!(parse_proxy("10.0.0.1").unwrap().port, 1080);
        assert!(parse_proxy("socks5://h:1").is_err());
        let cfg = ProxyConfig {
            https: Some(p),
            http: None,
            no_proxy: vec!["example.org".into(), "localhost".into()],
        };
        let o = |h: &str| Origin {
            https: true,
            host: h.into(),
            port: 443,
        };
        assert!(cfg.for_origin(&o("a.example.org")).is_none());
        assert!(cfg.for_origin(&o("example.org")).is_none());
        assert!(cfg.for_origin(&o("badexample.org")).is_some());
        assert!(cfg
            .for_origin(&Origin {
                https: false,
                host: "x".into(),
                port: 80
            })
            .is_none());
    }
}
