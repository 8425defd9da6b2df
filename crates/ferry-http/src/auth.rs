//! Credentials: `--token` (Bearer), `-u user:pass` or `user:pass@` in the
//! URL (Basic), and `~/.netrc` (`machine HOST login USER password PASS`,
//! `default`), as curl reads it.
use base64::Engine;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetrcEntry {
    /// `None` for the `default` entry.
    pub machine: Option<String>,
    pub login: String,
    pub password: String,
}

/// Parse a netrc file's text. Unknown tokens (`account`, `macdef`) are
/// skipped; a `macdef` body runs to the next empty line.
pub fn parse_netrc(text: &str) -> Vec<NetrcEntry> {
    let mut out = Vec::new();
    let mut cur: Option<NetrcEntry> = None;
    let mut lines = text.lines();
    let mut tokens: Vec<String> = Vec::new();
    while let Some(line) = lines.next() {
        for w in line.split_whitespace() {
            if w.starts_with('#') && tokens.is_empty() {
                break;
            }
            if w == "macdef" {
                // Skip the macro body.
                for l in lines.by_ref() {
                    if l.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            tokens.push(w.to_string());
        }
    }
    let mut it = tokens.into_iter();
    while let Some(t) = it.next() {
        match t.as_str() {
            "machine" | "default" => {
                if let Some(e) = cur.take() {
                    out.push(e);
                }
                let machine = if t == "machine" { it.next() } else { None };
                cur = Some(NetrcEntry {
                    machine,
                    login: String::new(),
                    password: String::new(),
                });
            }
            "login" => {
                if let (Some(e), Some(v)) = (cur.as_mut(), it.next()) {
                    e.login = v;
                }
            }
            "password" => {
                if let (Some(e), Some(v)) = (cur.as_mut(), it.next()) {
                    e.password = v;
                }
            }
            "account" => {
                it.next();
            }
            _ => {}
        }
    }
    if let Some(e) = cur.take() {
        out.push(e);
    }
    out
}

/// The netrc entry for `host`: its machine line, else `default`.
pub fn netrc_lookup<'a>(entries: &'a [NetrcEntry], host: &str) -> Option<&'a NetrcEntry> {
    entries
        .iter()
        .find(|e| {
            e.machine
                .as_deref()
                .is_some_and(|m| m.eq_ignore_ascii_case(host))
        })
        .or_else(|| entries.iter().find(|e| e.machine.is_none()))
}

/// Read `$NETRC` or `~/.netrc`; a missing file is no entries.
pub fn load_netrc(path: Option<&std::path::Path>) -> Vec<NetrcEntry> {
    let p = match path {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os("NETRC") {
            Some(p) => p.into(),
            None => match std::env::var_os("HOME") {
                Some(h) => std::path::PathBuf::from(h).join(".netrc"),
                None => return Vec::new(),
            },
        },
    };
    std::fs::read_to_string(p)
        .map(|t| parse_netrc(&t))
        .unwrap_or_default()
}

pub fn basic(user: &str, password: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {b}")
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {}", token.trim())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn netrc_entries() {
        let text = "# comment\nmachine a.example login alice password s3cret\n\
                    machine b.example\n  login bob\n  password pw\n\
                    macdef init\ncd /x\n\ndefault login anon password guest\n";
        let e = parse_netrc(text);
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(netrc_lookup(&e, "A.example").unwrap().password, "s3cret");
        assert_eq!(netrc_lookup(&e, "b.example").unwrap().login, "bob");
        assert_eq!(netrc_lookup(&e, "other").unwrap().login, "anon");
        assert_eq!(
            basic("Aladdin", "open sesame"),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
    }
}
