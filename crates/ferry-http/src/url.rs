//! The URLs ferry speaks: `http://` and `https://`, with an optional
//! `user[:password]@`, a host (name, IPv4, `[IPv6]`), a port, and a path
//! kept percent-encoded as the server will see it.

use std::fmt;

/// Characters percent-encoded when a file name goes into a URL path:
/// everything but unreserved characters and a few safe sub-delimiters.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Url {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, percent-encoded, starting with `/`.
    pub path: String,
    pub user: Option<String>,
    pub password: Option<String>,
}

/// Scheme, host and port: what one pool of connections serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    pub https: bool,
    pub host: String,
    pub port: u16,
}

impl Url {
    /// Parse `http[s]://[user[:pass]@]host[:port][/path]`.
    pub fn parse(s: &str) -> Result<Url, String> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| format!("{s}: not a URL"))?;
        let https = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return Err(format!("{s}: not an http:// or https:// URL"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        // A fragment is never sent.
        let path = match path.split_once('#') {
            Some((p, _)) => p.to_string(),
            None => path,
        };
        let (userinfo, hp) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => {
                let (n, p) = match u.split_once(':') {
                    Some((n, p)) => (n, Some(p)),
                    None => (u, None),
                };
                (Some(decode_str(n)), p.map(decode_str))
            }
            None => (None, None),
        };
        let default_port = if https { 443 } else { 80 };
        let (host, port) = if let Some(r) = hp.strip_prefix('[') {
            let (h, after) = r
                .split_once(']')
                .ok_or_else(|| format!("{s}: unclosed '[' in host"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => parse_port(p, s)?,
                None if after.is_empty() => default_port,
                None => return Err(format!("{s}: unexpected text after ']'")),
            };
            (h.to_string(), port)
        } else {
            match hp.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), parse_port(p, s)?),
                None => (hp.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(format!("{s}: no host in URL"));
        }
        // A host goes into DNS lookups, the Host header and messages: no
        // spaces, control characters or brackets, and an IPv6 address
        // only in brackets (`a:b:80` would print back as `[a:b]:80`).
        let bracketed = hp.starts_with('[');
        if host
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '[' | ']'))
            || (!bracketed && host.contains(':'))
        {
            return Err(format!("{s}: {host:?} is not a host name or address"));
        }
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!(
                "{s}: spaces or control characters in the URL; percent-encode them (%20)"
            ));
        }
        Ok(Url {
            https,
            host: host.to_ascii_lowercase(),
            port,
            path,
            user,
            password,
        })
    }

    pub fn origin(&self) -> Origin {
        Origin {
            https: self.https,
            host: self.host.clone(),
            port: self.port,
        }
    }

    pub fn scheme(&self) -> &'static str {
        if self.https {
            "https"
        } else {
            "http"
        }
    }

    /// `host[:port]` as in a Host header (port left out when default).
    pub fn authority(&self) -> String {
        let h = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            h
        } else {
            format!("{h}:{}", self.port)
        }
    }

    /// The path without the query, percent-decoded.
    pub fn decoded_path(&self) -> Vec<u8> {
        let p = self.path.split('?').next().unwrap_or("");
        percent_encoding::percent_decode_str(p).collect()
    }

    /// The last path segment, decoded (`""` for a directory URL).
    pub fn file_name(&self) -> Vec<u8> {
        let p = self.decoded_path();
        match p.iter().rposition(|&c| c == b'/') {
            Some(i) => p.get(i + 1..).unwrap_or_default().to_vec(),
            None => p,
        }
    }

    /// The last non-empty path segment, decoded: a directory's name.
    pub fn last_segment(&self) -> Vec<u8> {
        let mut p = self.decoded_path();
        while p.last() == Some(&b'/') {
            p.pop();
        }
        match p.iter().rposition(|&c| c == b'/') {
            Some(i) => p.get(i + 1..).unwrap_or_default().to_vec(),
            None => p,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.path.split('?').next().unwrap_or("").ends_with('/')
    }

    /// This URL with a `/` at the end of its path.
    pub fn as_dir(&self) -> Url {
        let mut u = self.clone();
        if !u.is_dir() {
            let (p, q) = match u.path.split_once('?') {
                Some((p, q)) => (p.to_string(), Some(q.to_string())),
                None => (u.path.clone(), None),
            };
            u.path = format!("{p}/");
            if let Some(q) = q {
                u.path.push('?');
                u.path.push_str(&q);
            }
        }
        u
    }

    /// A child of this directory URL: `name` is percent-encoded.
    pub fn child(&self, name: &[u8]) -> Url {
        let mut u = self.as_dir();
        if let Some((p, _)) = u.path.split_once('?') {
            u.path = p.to_string();
        }
        u.path
            .push_str(&percent_encoding::percent_encode(name, PATH_SEGMENT).to_string());
        u
    }

    /// Resolve a Location header or a link against this URL.
    pub fn join(&self, reference: &str) -> Option<Url> {
        let r = reference.trim();
        if r.contains("://") {
            let mut u = Url::parse(r).ok()?;
            if u.user.is_none() && u.origin() == self.origin() {
                u.user = self.user.clone();
                u.password = self.password.clone();
            }
            return Some(u);
        }
        if let Some(rest) = r.strip_prefix("//") {
            return Url::parse(&format!("{}://{rest}", self.scheme())).ok();
        }
        let mut u = self.clone();
        if r.starts_with('/') {
            u.path = r.to_string();
        } else if r.starts_with('?') {
            let p = self.path.split('?').next().unwrap_or("/");
            u.path = format!("{p}{r}");
        } else {
            let p = self.path.split('?').next().unwrap_or("/");
            let dir = match p.rfind('/') {
                Some(i) => p.get(..=i).unwrap_or("/"),
                None => "/",
            };
            u.path = format!("{dir}{r}");
        }
        if let Some((p, _)) = u.path.clone().split_once('#') {
            u.path = p.to_string();
        }
        u.path = normalize(&u.path);
        if u.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return None;
        }
        Some(u)
    }
}

/// Remove `.` and `..` segments (RFC 3986 section 5.2.4).
fn normalize(path: &str) -> String {
    let (p, q) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = p.split('/').collect();
    let last = segs.len().saturating_sub(1);
    for (i, s) in segs.iter().enumerate() {
        match *s {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut r = out.join("/");
    if !r.starts_with('/') {
        r.insert(0, '/');
    }
    if let Some(q) = q {
        r.push('?');
        r.push_str(q);
    }
    r
}

fn parse_port(p: &str, original: &str) -> Result<u16, String> {
    p.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{original}: bad port {p:?}"))
}

fn decode_str(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// For messages: never shows the password.
impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme())?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        write!(f, "{}{}", self.authority(), self.path)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        let u = Url::parse("https://bob:s%40cret@Example.org:8443/a/b%20c?x=1#frag").unwrap();
        assert!(u.https);
        assert_eq!(u.host, "example.org");
        assert_eq!(u.port, 8443);
        assert_eq!(u.path, "/a/b%20c?x=1");
        assert_eq!(u.user.as_deref(), Some("bob"));
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        assert_eq!(u.file_name(), b"b c");
        assert_eq!(u.to_string(), "https://bob@example.org:8443/a/b%20c?x=1");
        let v6 = Url::parse("http://[::1]/").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 80));
        assert_eq!(v6.authority(), "[::1]");
        assert!(Url::parse("ftp://h/x").is_err());
        assert!(Url::parse("http:///x").is_err());
        assert!(Url::parse("http://h:0/x").is_err());
        assert!(Url::parse("http://h/a b").is_err());
    }

    /// Found by the location_url fuzz target: a host with NUL, control
    /// characters and a stray `]` parsed, and printed back as a URL that
    /// no longer parsed.
    #[test]
    fn refuses_hosts_that_do_not_print_back() {
        for bad in [
            "http://126.12\0]:'\u{1a}host0.0.1]:8080/p",
            "http://a b/",
            "http://h\tx/",
            "http://a:b:80/",
            "http://[a]b]/",
            "http://x]/",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad:?}");
        }
        for good in [
            "http://[::1]:8080/",
            "https://[fe80::1%25eth0]/",
            "http://h/",
        ] {
            let u = Url::parse(good).unwrap();
            assert_eq!(Url::parse(&u.to_string()).unwrap(), u);
        }
    }

    #[test]
    fn join_references() {
        let base = Url::parse("http://h/dir/sub/index.html").unwrap();
        assert_eq!(base.join("x").unwrap().path, "/dir/sub/x");
        assert_eq!(base.join("../x").unwrap().path, "/dir/x");
        assert_eq!(base.join("../../../x").unwrap().path, "/x");
        assert_eq!(base.join("/y/").unwrap().path, "/y/");
        assert_eq!(base.join("?C=N").unwrap().path, "/dir/sub/index.html?C=N");
        let other = base.join("https://o:1/z").unwrap();
        assert_eq!(
            (other.host.as_str(), other.port, other.https),
            ("o", 1, true)
        );
        assert_eq!(base.join("//o2/q").unwrap().host, "o2");
    }

    #[test]
    fn child_encodes_names() {
        let d = Url::parse("http://h/d").unwrap();
        assert_eq!(d.child(b"a b#?.txt").path, "/d/a%20b%23%3F.txt");
        assert_eq!(d.as_dir().last_segment(), b"d");
    }
}
