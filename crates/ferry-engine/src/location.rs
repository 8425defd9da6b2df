//! What the user typed as a source or destination: a local path, an
//! `sftp://` URL, an `http://` or `https://` URL, an `ftp://` or `ftps://`
//! URL, an `s3://bucket/key` location, or the scp form `[user@]host:path`.
//!
//! Path rules follow curl for URLs (the path is absolute; `/~/` starts at
//! the home directory) and scp for the short form (relative to home unless
//! it starts with `/`).
use std::path::PathBuf;

/// A remote path before the server tells us where home is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemotePath {
    Absolute(Vec<u8>),
    /// Relative to the login directory; empty means the directory itself.
    HomeRelative(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSpec {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    pub path: RemotePath,
    /// The text as given, for messages.
    pub original: String,
}

impl RemoteSpec {
    /// Same server and account (so one set of connections serves both).
    pub fn same_endpoint(&self, other: &RemoteSpec) -> bool {
        self.user == other.user && self.host == other.host && self.port == other.port
    }
    /// Did the user end the path with `/` (meaning "into this directory")?
    pub fn trailing_slash(&self) -> bool {
        match &self.path {
            RemotePath::Absolute(p) | RemotePath::HomeRelative(p) => p.ends_with(b"/"),
        }
    }
}

/// An `http://` or `https://` URL (`user[:pass]@` in it means Basic
/// authentication).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSpec {
    pub url: ferry_http::Url,
    /// The text as given, for messages.
    pub original: String,
}

/// An `ftp://` or `ftps://` URL. As with curl, the path is relative to
/// the login directory; `%2F` after the host makes it absolute
/// (`ftp://h/%2Fsrv/x` is `/srv/x`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FtpSpec {
    pub user: Option<String>,
    pub password: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    /// `ftps://`: implicit TLS (port 990).
    pub implicit_tls: bool,
    /// Decoded; empty is the login directory itself.
    pub path: String,
    /// The URL as given, without the password, for messages.
    pub original: String,
}

impl FtpSpec {
    /// Same server and account (one pool of connections serves both).
    pub fn same_endpoint(&self, other: &FtpSpec) -> bool {
        self.user == other.user
            && self.password == other.password
            && self.host == other.host
            && self.port == other.port
            && self.implicit_tls == other.implicit_tls
    }
    /// Did the URL end with `/` (a directory)?
    pub fn trailing_slash(&self) -> bool {
        self.path.is_empty() || self.path.ends_with('/')
    }
}

/// An `s3://bucket/key` location. The key is taken as written (no
/// percent-decoding, as the AWS CLI and rclone do); the endpoint, region
/// and credentials come from `CopyOptions::s3` and the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Spec {
    pub bucket: String,
    /// The key or prefix, without a leading `/`; empty is the bucket.
    pub key: String,
    /// The text as given, for messages.
    pub original: String,
}

impl S3Spec {
    /// Ends with `/` or names the bucket itself (a "directory").
    pub fn trailing_slash(&self) -> bool {
        self.key.is_empty() || self.key.ends_with('/')
    }
}

fn parse_s3(original: &str, rest: &str) -> Result<S3Spec, String> {
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    // Bucket names: 3-63 of lower-case letters, digits, '.', '-' (AWS);
    // other stores allow a little more (upper case, '_'), nothing else.
    if bucket.is_empty()
        || !bucket
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
    {
        return Err(format!(
            "{original}: {bucket:?} is not a bucket name; write s3://bucket/key"
        ));
    }
    if key.contains('\0') {
        return Err(format!("{original}: a NUL byte in the key"));
    }
    Ok(S3Spec {
        bucket: bucket.to_string(),
        key: key.trim_start_matches('/').to_string(),
        original: original.to_string(),
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Sftp(RemoteSpec),
    Http(HttpSpec),
    Ftp(FtpSpec),
    S3(S3Spec),
}

impl Location {
    /// As the user wrote it (a local path as displayed).
    pub fn describe(&self) -> String {
        match self {
            Location::Local(p) => p.display().to_string(),
            Location::Sftp(r) => r.original.clone(),
            Location::Http(h) => h.original.clone(),
            Location::Ftp(f) => f.original.clone(),
            Location::S3(s) => s.original.clone(),
        }
    }

    pub fn parse(arg: &str) -> Result<Location, String> {
        if arg.is_empty() {
            return Err("empty path".into());
        }
        if let Some(rest) = strip_scheme(arg, "sftp") {
            return parse_url(arg, rest).map(Location::Sftp);
        }
        if strip_scheme(arg, "http").is_some() || strip_scheme(arg, "https").is_some() {
            return ferry_http::Url::parse(arg).map(|url| {
                Location::Http(HttpSpec {
                    url,
                    original: arg.to_string(),
                })
            });
        }
        if let Some(rest) = strip_scheme(arg, "ftp") {
            return parse_ftp(arg, rest, false).map(Location::Ftp);
        }
        if let Some(rest) = strip_scheme(arg, "ftps") {
            return parse_ftp(arg, rest, true).map(Location::Ftp);
        }
        if let Some(rest) = strip_scheme(arg, "s3") {
            return parse_s3(arg, rest).map(Location::S3);
        }
        if let Some((scheme, _)) = arg.split_once("://") {
            if !scheme.contains('/') {
                return Err(format!(
                    "{arg}: the {scheme}:// scheme is not supported yet; use sftp://, https://, http://, ftp://, ftps://, s3://, a local path, or host:path"
                ));
            }
        }
        // scp form: a colon before any slash, and not a path like ./a:b.
        if !arg.starts_with('/') && !arg.starts_with('.') {
            if let Some(spec) = parse_scp(arg)? {
                return Ok(Location::Sftp(spec));
            }
        }
        Ok(Location::Local(PathBuf::from(arg)))
    }
}

fn strip_scheme<'a>(arg: &'a str, scheme: &str) -> Option<&'a str> {
    let (s, rest) = arg.split_once("://")?;
    s.eq_ignore_ascii_case(scheme).then_some(rest)
}

fn split_user(authority: &str) -> (Option<String>, &str) {
    match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u.to_string()), h),
        None => (None, authority),
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`.
fn split_host_port(hp: &str, original: &str) -> Result<(String, Option<u16>), String> {
    if let Some(rest) = hp.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{original}: unclosed '[' in host"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(parse_port(p, original)?),
            None if after.is_empty() => None,
            None => return Err(format!("{original}: unexpected text after ']'")),
        };
        return Ok((h.to_string(), port));
    }
    match hp.rsplit_once(':') {
        Some((h, p)) => Ok((h.to_string(), Some(parse_port(p, original)?))),
        None => Ok((hp.to_string(), None)),
    }
}

fn parse_port(p: &str, original: &str) -> Result<u16, String> {
    p.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{original}: bad port {p:?}"))
}

fn parse_url(original: &str, rest: &str) -> Result<RemoteSpec, String> {
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!(
            "{original}: no host in URL; write sftp://[user@]host[:port]/path"
        ));
    }
    let (user, hp) = split_user(authority);
    let user = user
        .map(|u| decode(&u).map(|b| String::from_utf8_lossy(&b).into_owned()))
        .transpose()
        .map_err(|e| format!("{original}: {e}"))?;
    let (host, port) = split_host_port(hp, original)?;
    if host.is_empty() {
        return Err(format!("{original}: no host in URL"));
    }
    let decoded = decode(path).map_err(|e| format!("{original}: {e}"))?;
    let path = if decoded == b"/~" {
        RemotePath::HomeRelative(Vec::new())
    } else if let Some(rel) = decoded.strip_prefix(b"/~/") {
        RemotePath::HomeRelative(rel.to_vec())
    } else {
        RemotePath::Absolute(decoded)
    };
    Ok(RemoteSpec {
        user,
        host,
        port,
        path,
        original: original.to_string(),
    })
}

fn parse_ftp(original: &str, rest: &str, implicit_tls: bool) -> Result<FtpSpec, String> {
    let scheme = if implicit_tls { "ftps" } else { "ftp" };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let (userinfo, hp) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let text = |b: Vec<u8>, what: &str| {
        String::from_utf8(b).map_err(|_| format!("{scheme}://...: the {what} is not UTF-8"))
    };
    let (user, password) = match userinfo {
        Some(u) => {
            let (name, pass) = match u.split_once(':') {
                Some((n, p)) => (n, Some(p)),
                None => (u, None),
            };
            let name = text(decode(name)?, "user name")?;
            let pass = pass
                .map(|p| decode(p).and_then(|b| text(b, "password")))
                .transpose()?;
            (Some(name).filter(|n| !n.is_empty()), pass)
        }
        None => (None, None),
    };
    // Messages never show the password.
    let shown = match &user {
        Some(u) => format!("{scheme}://{u}@{hp}/{path}"),
        None => format!("{scheme}://{hp}/{path}"),
    };
    let (host, port) = split_host_port(hp, &shown)?;
    if host.is_empty() {
        return Err(format!(
            "{shown}: no host in URL; write {scheme}://[user[:password]@]host[:port]/path"
        ));
    }
    let path = text(decode(path).map_err(|e| format!("{shown}: {e}"))?, "path")
        .map_err(|e| format!("{shown}: {e}"))?;
    if !ferry_ftp::sendable(&path) || user.as_deref().is_some_and(|u| !ferry_ftp::sendable(u)) {
        return Err(format!(
            "{shown}: a line break in the URL (FTP commands cannot carry one)"
        ));
    }
    let _ = original;
    Ok(FtpSpec {
        user,
        password,
        host,
        port,
        implicit_tls,
        path,
        original: shown,
    })
}

fn decode(s: &str) -> Result<Vec<u8>, String> {
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(s).collect();
    if bytes.contains(&0) {
        return Err("a NUL byte in the path".into());
    }
    Ok(bytes)
}

fn parse_scp(arg: &str) -> Result<Option<RemoteSpec>, String> {
    // [v6]:path
    let (authority, path) = if arg.starts_with('[') || arg.contains("@[") {
        let Some(close) = arg.find("]:") else {
            return Ok(None);
        };
        (&arg[..close + 1], &arg[close + 2..])
    } else {
        let Some(colon) = arg.find(':') else {
            return Ok(None);
        };
        if arg[..colon].contains('/') {
            return Ok(None);
        }
        (&arg[..colon], &arg[colon + 1..])
    };
    let (user, host) = split_user(authority);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.is_empty() {
        return Err(format!("{arg}: no host before ':'"));
    }
    let path = if let Some(abs) = path.strip_prefix('/') {
        RemotePath::Absolute(format!("/{abs}").into_bytes())
    } else if path == "~" {
        RemotePath::HomeRelative(Vec::new())
    } else if let Some(rel) = path.strip_prefix("~/") {
        RemotePath::HomeRelative(rel.as_bytes().to_vec())
    } else {
        RemotePath::HomeRelative(path.as_bytes().to_vec())
    };
    Ok(Some(RemoteSpec {
        user,
        host,
        port: None,
        path,
        original: arg.to_string(),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn remote(arg: &str) -> RemoteSpec {
        match Location::parse(arg).unwrap() {
            Location::Sftp(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn url_forms() {
        let r = remote("sftp://alice@example.org:2222/data/x%20y");
        assert_eq!(r.user.as_deref(), Some("alice"));
        assert_eq!(r.host, "example.org");
        assert_eq!(r.port, Some(2222));
        assert_eq!(r.path, RemotePath::Absolute(b"/data/x y".to_vec()));
        assert_eq!(
            remote("sftp://h/~/dir").path,
            RemotePath::HomeRelative(b"dir".to_vec())
        );
        assert_eq!(remote("sftp://h/~").path, RemotePath::HomeRelative(vec![]));
        assert_eq!(remote("sftp://h").path, RemotePath::Absolute(b"/".to_vec()));
        let v6 = remote("sftp://[::1]:22/x");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", Some(22)));
    }

    #[test]
    fn scp_forms() {
        let r = remote("bob@host:dir/file");
        assert_eq!(r.user.as_deref(), Some("bob"));
        assert_eq!(r.path, RemotePath::HomeRelative(b"dir/file".to_vec()));
        assert_eq!(
            remote("host:/abs").path,
            RemotePath::Absolute(b"/abs".to_vec())
        );
        assert_eq!(remote("host:").path, RemotePath::HomeRelative(vec![]));
        assert_eq!(remote("[::1]:x").host, "::1");
    }

    #[test]
    fn local_forms() {
        for a in ["/tmp/a:b", "./a:b", "dir/a:b", "plain", "-"] {
            assert_eq!(
                Location::parse(a).unwrap(),
                Location::Local(a.into()),
                "{a}"
            );
        }
    }

    #[test]
    fn http_forms() {
        match Location::parse("https://u:p@h:8443/d/f%20g").unwrap() {
            Location::Http(h) => {
                assert_eq!(h.url.host, "h");
                assert_eq!(h.url.port, 8443);
                assert_eq!(h.url.user.as_deref(), Some("u"));
                assert_eq!(h.url.file_name(), b"f g");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Location::parse("HTTP://h").unwrap(),
            Location::Http(_)
        ));
    }

    #[test]
    fn ftp_forms() {
        let f = |a: &str| match Location::parse(a).unwrap() {
            Location::Ftp(f) => f,
            other => panic!("{other:?}"),
        };
        let a = f("ftp://bob:s%40cret@h:2121/pub/a%20b");
        assert_eq!(a.user.as_deref(), Some("bob"));
        assert_eq!(a.password.as_deref(), Some("s@cret"));
        assert_eq!((a.host.as_str(), a.port), ("h", Some(2121)));
        assert_eq!(a.path, "pub/a b");
        assert!(!a.original.contains("cret"), "{}", a.original);
        assert_eq!(f("ftp://h/%2Fsrv/x").path, "/srv/x");
        assert_eq!(f("ftp://h").path, "");
        assert!(f("ftp://h/d/").trailing_slash());
        let s = f("FTPS://[::1]/x");
        assert!(s.implicit_tls);
        assert_eq!(s.host, "::1");
        assert!(Location::parse("ftp://h/a%0d%0aDELE%20x").is_err());
        assert!(Location::parse("ftp:///x").is_err());
    }

    #[test]
    fn s3_forms() {
        let s = |a: &str| match Location::parse(a).unwrap() {
            Location::S3(s) => s,
            other => panic!("{other:?}"),
        };
        let a = s("s3://my-bucket/dir/a b+c%20.txt");
        assert_eq!(a.bucket, "my-bucket");
        assert_eq!(a.key, "dir/a b+c%20.txt");
        assert!(!a.trailing_slash());
        assert!(s("s3://b").trailing_slash());
        assert!(s("S3://b/p/").trailing_slash());
        assert!(Location::parse("s3:///k").is_err());
        assert!(Location::parse("s3://b@d/k").is_err());
    }

    #[test]
    fn bad_input_names_the_argument() {
        for a in [
            "sftp://",
            "sftp:///x",
            "sftp://h:99999/x",
            "gopher://h/x",
            "sftp://h/a%00b",
            "https://",
            "http://h:0/",
        ] {
            let e = Location::parse(a).unwrap_err();
            assert!(e.contains(a), "{e}");
        }
    }
}
