//! Directory listings for `-r`: `ferry serve`'s JSON (an array of
//! `{"name", "type", "size", "mtime", "etag"}`), nginx's `autoindex_format
//! json`, and the HTML index pages of nginx and Apache (the links in them).
//!
//! Names come from the server and are untrusted: a name is one path
//! segment, never empty, `.` or `..`, and never contains `/` or NUL. Links
//! that leave the directory (parent, absolute paths elsewhere, other
//! hosts, query links such as Apache's sort headers) are not entries.
use crate::Url;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// One decoded path segment.
    pub name: Vec<u8>,
    pub kind: Kind,
    pub size: Option<u64>,
    /// Seconds since the epoch.
    pub mtime: Option<i64>,
    pub etag: Option<String>,
}

/// Is `name` safe to join onto a local directory?
pub fn safe_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name != b"."
        && name != b".."
        && !name.contains(&b'/')
        && !name.contains(&0)
        && !name.contains(&b'\\')
}

/// Parse a JSON listing. Entries with unsafe names are dropped (and
/// reported in the second value).
pub fn parse_json(body: &[u8]) -> Result<(Vec<Entry>, Vec<String>), String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("bad JSON listing: {e}"))?;
    let items = v
        .as_array()
        .or_else(|| v.get("entries").and_then(|e| e.as_array()))
        .ok_or("JSON listing is not an array")?;
    let mut out = Vec::new();
    let mut refused = Vec::new();
    for it in items {
        let Some(name) = it.get("name").and_then(|n| n.as_str()) else {
            continue;
        };
        let kind = match it.get("type").and_then(|t| t.as_str()).unwrap_or("file") {
            "dir" | "directory" => Kind::Dir,
            "symlink" | "link" => Kind::Symlink,
            _ => Kind::File,
        };
        if !safe_name(name.as_bytes()) {
            refused.push(name.to_string());
            continue;
        }
        let mtime = match it.get("mtime") {
            Some(serde_json::Value::Number(n)) => n.as_i64(),
            Some(serde_json::Value::String(s)) => httpdate::parse_http_date(s)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs() as i64),
            _ => None,
        };
        out.push(Entry {
            name: name.as_bytes().to_vec(),
            kind,
            size: it.get("size").and_then(|s| s.as_u64()),
            mtime,
            etag: it.get("etag").and_then(|e| e.as_str()).map(str::to_string),
        });
    }
    Ok((out, refused))
}

/// The links of an HTML index page at `base` (a directory URL) that name
/// entries of that directory. Returns the entries and the names refused.
pub fn parse_html(body: &str, base: &Url) -> (Vec<Entry>, Vec<String>) {
    let mut out: Vec<Entry> = Vec::new();
    let mut refused = Vec::new();
    let base_path = base.path.split('?').next().unwrap_or("/").to_string();
    for href in hrefs(body) {
        let href = unescape_html(&href);
        if href.is_empty() || href.starts_with('?') || href.starts_with('#') {
            continue;
        }
        if href.contains('?') || href.contains('#') {
            continue;
        }
        // Resolve against the directory; keep only direct children.
        let Some(u) = base.join(&href) else { continue };
        if u.origin() != base.origin() {
            continue;
        }
        let Some(rest) = u.path.strip_prefix(base_path.as_str()) else {
            continue;
        };
        if rest.is_empty() {
            continue;
        }
        let (seg, kind) = match rest.strip_suffix('/') {
            Some(s) => (s, Kind::Dir),
            None => (rest, Kind::File),
        };
        if seg.contains('/') {
            continue;
        }
        let name: Vec<u8> = percent_encoding::percent_decode_str(seg).collect();
        if !safe_name(&name) {
            refused.push(String::from_utf8_lossy(&name).into_owned());
            continue;
        }
        // Only links that look relative in the page are trusted to be
        // listing entries: a link back to "../" resolved to the parent and
        // was dropped above.
        if out.iter().any(|e| e.name == name) {
            continue;
        }
        out.push(Entry {
            name,
            kind,
            size: None,
            mtime: None,
            etag: None,
        });
    }
    (out, refused)
}

/// Values of `href="..."` / `href='...'` / `href=...` attributes.
fn hrefs(body: &str) -> Vec<String> {
    let lower = body.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = lower.get(at..).and_then(|s| s.find("href")) {
        let mut j = at + i + 4;
        let bytes = body.as_bytes();
        while bytes.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
            j += 1;
        }
        if bytes.get(j) != Some(&b'=') {
            at = j;
            continue;
        }
        j += 1;
        while bytes.get(j).is_some_and(|c| c.is_ascii_whitespace()) {
            j += 1;
        }
        let (start, end) = match bytes.get(j) {
            Some(&q @ (b'"' | b'\'')) => {
                let s = j + 1;
                let e = body
                    .get(s..)
                    .and_then(|r| r.find(q as char))
                    .map(|k| s + k)
                    .unwrap_or(body.len());
                (s, e)
            }
            Some(_) => {
                let s = j;
                let e = body
                    .get(s..)
                    .and_then(|r| r.find(|c: char| c.is_ascii_whitespace() || c == '>'))
                    .map(|k| s + k)
                    .unwrap_or(body.len());
                (s, e)
            }
            None => break,
        };
        if let Some(v) = body.get(start..end) {
            out.push(v.to_string());
        }
        at = end.max(j);
    }
    out
}

fn unescape_html(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names(v: &[Entry]) -> Vec<(String, Kind)> {
        v.iter()
            .map(|e| (String::from_utf8_lossy(&e.name).into_owned(), e.kind))
            .collect()
    }

    #[test]
    fn nginx_autoindex() {
        let page = r#"<html><head><title>Index of /d/</title></head><body>
<h1>Index of /d/</h1><hr><pre><a href="../">../</a>
<a href="sub/">sub/</a>                                               23-Nov-2026 10:00       -
<a href="a%20b.txt">a b.txt</a>                                           23-Nov-2026 10:00       5
<a href="x&amp;y">x&amp;y</a>                                           23-Nov-2026 10:00       5
</pre><hr></body></html>"#;
        let base = Url::parse("http://h/d/").unwrap();
        let (e, refused) = parse_html(page, &base);
        assert_eq!(
            names(&e),
            vec![
                ("sub".into(), Kind::Dir),
                ("a b.txt".into(), Kind::File),
                ("x&y".into(), Kind::File)
            ]
        );
        assert!(refused.is_empty());
    }

    #[test]
    fn apache_index_and_hostile_links() {
        let page = r#"<table><tr><th><a href="?C=N;O=D">Name</a></th></tr>
<tr><td><a href="/pub/">Parent Directory</a></td></tr>
<tr><td><a HREF='file.tar.gz'>file.tar.gz</a></td></tr>
<tr><td><a href="http://evil.example/x">x</a></td></tr>
<tr><td><a href="/etc/passwd">p</a></td></tr>
<tr><td><a href="%2e%2e/">up</a></td></tr>
<tr><td><a href="a%2fb">slash</a></td></tr>
<tr><td><a href="deep/er/file">deep</a></td></tr>
<tr><td><a href="/pub/data/abs.bin">abs</a></td></tr>
</table>"#;
        let base = Url::parse("http://h/pub/data/").unwrap();
        let (e, refused) = parse_html(page, &base);
        assert_eq!(
            names(&e),
            vec![
                ("file.tar.gz".into(), Kind::File),
                ("abs.bin".into(), Kind::File)
            ]
        );
        assert_eq!(refused, vec!["..".to_string(), "a/b".to_string()]);
    }

    #[test]
    fn json_listing() {
        let body = br#"[{"name":"a.txt","type":"file","size":5,"mtime":1700000000,"etag":"\"x\""},
            {"name":"sub","type":"dir","size":0,"mtime":1},
            {"name":"../../etc","type":"dir"},
            {"name":"n.txt","type":"file","size":1,"mtime":"Thu, 23 Nov 2023 10:00:00 GMT"}]"#;
        let (e, refused) = parse_json(body).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].size, Some(5));
        assert_eq!(e[0].mtime, Some(1_700_000_000));
        assert_eq!(e[1].kind, Kind::Dir);
        assert_eq!(e[2].mtime, Some(1_700_733_600));
        assert_eq!(refused, vec!["../../etc".to_string()]);
        assert!(parse_json(b"{").is_err());
    }
}
