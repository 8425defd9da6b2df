//! Directory listings: JSON for programs (`?list` or
//! `Accept: application/json`), a plain HTML index for people.
//!
//! The JSON form is an array of objects, sorted by name (bytewise):
//!
//! ```json
//! [{"name":"a.txt","type":"file","size":12,"mtime":1700000000,"etag":"\"...\""},
//!  {"name":"sub","type":"dir","size":4096,"mtime":1700000000,"etag":"\"...\""},
//!  {"name":"ln","type":"symlink","size":12,"mtime":1700000000,"etag":"\"...\"","target":"file"}]
//! ```
//!
//! `etag` is the exact `ETag` header a GET of that entry answers with
//! (quotes included). For a symlink whose target is inside the root,
//! `size`, `mtime` and `etag` describe the target and `target` says what
//! it is (`file` or `dir`); a link that leads out of the root or nowhere
//! has no `target` (a GET of it is refused) and describes the link itself.
//! Entries that are neither files, directories nor symlinks (sockets,
//! FIFOs, devices), names that are not UTF-8 and the server's own
//! in-progress uploads (`.NAME.ferry-upload-*`) are left out.
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Serialize;

use crate::Root;

/// What is percent-encoded in a path segment: everything but RFC 3986's
/// unreserved characters.
pub const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Marker in the name of an upload in progress (see `upload.rs`).
pub const UPLOAD_MARK: &str = ".ferry-upload-";

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: u64,
    pub mtime: i64,
    pub etag: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<&'static str>,
}

/// The strong ETag (with its quotes) of a file's current version: inode,
/// size and modification time to the nanosecond, so a rewrite of the same
/// size within the same second still changes it.
pub fn etag(meta: &Metadata) -> String {
    format!("\"{}\"", etag_opaque(meta))
}

/// [`etag`] without the quotes.
pub fn etag_opaque(meta: &Metadata) -> String {
    let ns = (meta.mtime() as i128) * 1_000_000_000 + meta.mtime_nsec() as i128;
    format!("{:x}-{:x}-{:x}", meta.ino(), meta.size(), ns)
}

fn mtime_secs(meta: &Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i64)
}

/// Read a directory (blocking). `root` checks where symlinks lead.
pub fn read(root: &Root, dir: &Path) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for ent in fs::read_dir(dir)? {
        let ent = ent?;
        let Ok(name) = ent.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') && name.contains(UPLOAD_MARK) {
            continue;
        }
        let path = ent.path();
        let Ok(lmeta) = fs::symlink_metadata(&path) else {
            continue; // gone meanwhile
        };
        let ft = lmeta.file_type();
        let (kind, meta, target) = if ft.is_symlink() {
            let followed = if root.contains(&path) {
                fs::metadata(&path).ok()
            } else {
                None
            };
            match followed {
                Some(m) if m.is_file() => ("symlink", m, Some("file")),
                Some(m) if m.is_dir() => ("symlink", m, Some("dir")),
                _ => ("symlink", lmeta, None),
            }
        } else if ft.is_file() {
            ("file", lmeta, None)
        } else if ft.is_dir() {
            ("dir", lmeta, None)
        } else {
            continue;
        };
        out.push(Entry {
            name,
            kind,
            size: meta.size(),
            mtime: mtime_secs(&meta),
            etag: etag(&meta),
            target,
        });
    }
    out.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(out)
}

pub fn json(entries: &[Entry]) -> Vec<u8> {
    let mut v = serde_json::to_vec(entries).unwrap_or_else(|_| b"[]".to_vec());
    v.push(b'\n');
    v
}

/// `&`, `<`, `>`, `"` and `'` as entities.
pub fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn is_dir(e: &Entry) -> bool {
    e.kind == "dir" || e.target == Some("dir")
}

/// An index like nginx's autoindex: directories first, each name a link
/// (percent-encoded) with its text HTML-escaped; directories end in `/`.
pub fn html(virtual_dir: &str, entries: &[Entry]) -> Vec<u8> {
    let title = html_escape(virtual_dir);
    let mut o = format!(
        "<!DOCTYPE html>\n<html>\n<head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body>\n<h1>Index of {title}</h1><hr><pre>\n"
    );
    if virtual_dir != "/" {
        o.push_str("<a href=\"../\">../</a>\n");
    }
    let dirs = entries.iter().filter(|e| is_dir(e));
    let files = entries.iter().filter(|e| !is_dir(e));
    for e in dirs.chain(files) {
        let slash = if is_dir(e) { "/" } else { "" };
        let href = utf8_percent_encode(&e.name, SEGMENT).to_string();
        let shown = format!("{}{slash}", e.name);
        let pad = 50usize.saturating_sub(shown.chars().count());
        let date = httpdate::fmt_http_date(
            UNIX_EPOCH + std::time::Duration::from_secs(e.mtime.max(0) as u64),
        );
        let size = if is_dir(e) {
            "-".to_string()
        } else {
            e.size.to_string()
        };
        o.push_str(&format!(
            "<a href=\"{href}{slash}\">{}</a>{} {date} {size:>12}\n",
            html_escape(&shown),
            " ".repeat(pad)
        ));
    }
    o.push_str("</pre><hr></body>\n</html>\n");
    o.into_bytes()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn lists_files_dirs_and_links_and_hides_uploads() {
        let outer = tempfile::tempdir().unwrap();
        let d = outer.path().join("root");
        fs::create_dir_all(d.join("sub")).unwrap();
        fs::write(d.join("b.txt"), b"hello").unwrap();
        fs::write(d.join(".b.txt.ferry-upload-0011aabb"), b"partial").unwrap();
        fs::write(outer.path().join("secret"), b"s").unwrap();
        symlink(d.join("b.txt"), d.join("ln")).unwrap();
        symlink(outer.path().join("secret"), d.join("out")).unwrap();
        let root = Root::new(&d).unwrap();
        let e = read(&root, root.path()).unwrap();
        let names: Vec<&str> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["b.txt", "ln", "out", "sub"]);
        assert_eq!((e[0].kind, e[0].size), ("file", 5));
        assert_eq!(
            (e[1].kind, e[1].size, e[1].target),
            ("symlink", 5, Some("file"))
        );
        assert_eq!(e[1].etag, e[0].etag);
        assert_eq!((e[2].kind, e[2].target), ("symlink", None));
        assert_eq!(e[3].kind, "dir");
        let j: serde_json::Value = serde_json::from_slice(&json(&e)).unwrap();
        assert_eq!(j[0]["name"], "b.txt");
        assert_eq!(j[0]["type"], "file");
        assert_eq!(j[0]["size"], 5);
        assert!(j[0]["mtime"].as_i64().unwrap() > 0);
        assert!(j[0]["etag"].as_str().unwrap().starts_with('"'));
        assert!(j[0].get("target").is_none());
        assert_eq!(j[1]["target"], "file");
    }

    #[test]
    fn html_escapes_and_encodes_names() {
        let e = vec![
            Entry {
                name: "<a&b> \"x\".txt".into(),
                kind: "file",
                size: 3,
                mtime: 0,
                etag: "\"e\"".into(),
                target: None,
            },
            Entry {
                name: "d ir".into(),
                kind: "dir",
                size: 0,
                mtime: 0,
                etag: "\"e\"".into(),
                target: None,
            },
        ];
        let h = String::from_utf8(html("/x/<y>/", &e)).unwrap();
        assert!(h.contains("Index of /x/&lt;y&gt;/"), "{h}");
        assert!(h.contains("<a href=\"../\">../</a>"), "{h}");
        assert!(h.contains("<a href=\"d%20ir/\">d ir/</a>"), "{h}");
        assert!(
            h.contains(
                "<a href=\"%3Ca%26b%3E%20%22x%22.txt\">&lt;a&amp;b&gt; &quot;x&quot;.txt</a>"
            ),
            "{h}"
        );
        assert!(
            h.find("d ir/").unwrap() < h.find("&lt;a").unwrap(),
            "dirs first"
        );
    }
}
