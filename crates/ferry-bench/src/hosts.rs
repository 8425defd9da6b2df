//! Per-host `ferry cp` settings found by `ferry bench URL --save`, kept in
//! `~/.config/ferry/hosts.toml`:
//!
//! ```toml
//! [host."example.org:22"]
//! streams = 4
//! parallel = 16
//! chunk = 262144
//! depth = 64
//! compress = true       # -C: SSH compression (zlib)
//!
//! [host."example.org:22".upload]
//! streams = 8
//! ```
//!
//! The top-level values are the best for downloads; `upload` holds the best
//! for uploads. `ferry cp` applies them for the remote host of a copy when
//! the corresponding flag is not on its command line.
//!
//! SFTP hosts are keyed `"host:port"`; HTTP(S) servers
//! `"https://host:port"` (or `http://`), with their own knobs:
//!
//! ```toml
//! [host."https://example.org:443"]
//! streams = 4
//! parallel = 32
//! http = "1.1"          # or "2": --http1.1 / --http2
//! compressed = true     # --compressed
//!
//! [host."https://example.org:443".upload]
//! parallel = 8
//! ```
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The knobs the remote sweep turns; `None` = ferry's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    pub streams: Option<usize>,
    pub parallel: Option<usize>,
    pub chunk: Option<u64>,
    pub depth: Option<usize>,
    /// HTTP(S) only: `--http1.1` or `--http2`.
    pub http: Option<HttpVersion>,
    /// HTTP(S) only: `--compressed` (downloads).
    pub compressed: Option<bool>,
    /// SFTP only: `-C`, SSH compression (zlib), both directions.
    pub compress: Option<bool>,
}

/// An HTTP version forced with `--http1.1` / `--http2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpVersion {
    Http1,
    Http2,
}

impl HttpVersion {
    pub fn flag(self) -> &'static str {
        match self {
            HttpVersion::Http1 => "--http1.1",
            HttpVersion::Http2 => "--http2",
        }
    }
    fn toml(self) -> &'static str {
        match self {
            HttpVersion::Http1 => "1.1",
            HttpVersion::Http2 => "2",
        }
    }
    fn from_toml(s: &str) -> Option<HttpVersion> {
        match s {
            "1.1" => Some(HttpVersion::Http1),
            "2" => Some(HttpVersion::Http2),
            _ => None,
        }
    }
}

/// The hosts.toml key of an HTTP(S) server.
pub fn http_key(https: bool, host: &str, port: u16) -> String {
    scheme_key(if https { "https" } else { "http" }, host, port)
}

/// The hosts.toml key `scheme://host:port` (HTTP(S), FTP(S)); SFTP keeps
/// the plain `host:port` it always had.
pub fn scheme_key(scheme: &str, host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("{scheme}://[{host}]:{port}")
    } else {
        format!("{scheme}://{host}:{port}")
    }
}

impl Tuning {
    /// `ferry cp` flags for the values that are set.
    pub fn flags(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(s) = self.streams {
            v.extend(["--streams".to_string(), s.to_string()]);
        }
        if let Some(p) = self.parallel {
            v.extend(["-P".to_string(), p.to_string()]);
        }
        if let Some(c) = self.chunk {
            // ferry cp reads "256k" as 262144.
            let c = if c % 1024 == 0 {
                format!("{}k", c / 1024)
            } else {
                c.to_string()
            };
            v.extend(["--chunk".to_string(), c]);
        }
        if let Some(d) = self.depth {
            v.extend(["--depth".to_string(), d.to_string()]);
        }
        if let Some(h) = self.http {
            v.push(h.flag().to_string());
        }
        if self.compressed == Some(true) {
            v.push("--compressed".to_string());
        }
        if self.compress == Some(true) {
            v.push("-C".to_string());
        }
        v
    }

    /// "--streams 4 -P 16 --chunk 256k", or "defaults".
    pub fn describe(&self) -> String {
        let v = self.flags();
        if v.is_empty() {
            "defaults".into()
        } else {
            v.join(" ")
        }
    }

    fn to_table(&self) -> toml::Table {
        let mut t = toml::Table::new();
        let mut put = |k: &str, v: Option<u64>| {
            if let Some(v) = v {
                t.insert(
                    k.into(),
                    toml::Value::Integer(v.min(i64::MAX as u64) as i64),
                );
            }
        };
        put("streams", self.streams.map(|v| v as u64));
        put("parallel", self.parallel.map(|v| v as u64));
        put("chunk", self.chunk);
        put("depth", self.depth.map(|v| v as u64));
        if let Some(h) = self.http {
            t.insert("http".into(), toml::Value::String(h.toml().into()));
        }
        if let Some(c) = self.compressed {
            t.insert("compressed".into(), toml::Value::Boolean(c));
        }
        if let Some(c) = self.compress {
            t.insert("compress".into(), toml::Value::Boolean(c));
        }
        t
    }

    fn from_table(t: &toml::Table) -> Tuning {
        let get = |k: &str| {
            t.get(k)
                .and_then(|v| v.as_integer())
                .filter(|v| *v > 0)
                .map(|v| v as u64)
        };
        Tuning {
            streams: get("streams").map(|v| v as usize),
            parallel: get("parallel").map(|v| v as usize),
            chunk: get("chunk"),
            depth: get("depth").map(|v| v as usize),
            http: t
                .get("http")
                .and_then(|v| v.as_str())
                .and_then(HttpVersion::from_toml),
            compressed: t.get("compressed").and_then(|v| v.as_bool()),
            compress: t.get("compress").and_then(|v| v.as_bool()),
        }
    }
}

/// `~/.config/ferry/hosts.toml` (or the platform's config dir).
pub fn default_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("ferry").join("hosts.toml"))
}

/// Store the best settings for `host_port` ("name:port"), keeping the rest
/// of the file.
pub fn save(path: &Path, host_port: &str, download: &Tuning, upload: &Tuning) -> Result<()> {
    let mut doc: toml::Table = match std::fs::read_to_string(path) {
        Ok(s) => s
            .parse()
            .with_context(|| format!("{} is not valid TOML", path.display()))?,
        Err(_) => toml::Table::new(),
    };
    let hosts = doc
        .entry("host")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(hosts) = hosts.as_table_mut() else {
        anyhow::bail!("{}: `host` is not a table", path.display());
    };
    let mut entry = download.to_table();
    entry.insert("upload".into(), toml::Value::Table(upload.to_table()));
    hosts.insert(host_port.into(), toml::Value::Table(entry));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = toml::to_string_pretty(&doc)?;
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The saved settings for `host:port` and direction, if any. Errors
/// (no file, bad TOML) mean "nothing saved": a copy never fails for it.
pub fn lookup(path: &Path, host: &str, port: u16, upload: bool) -> Option<Tuning> {
    lookup_key(path, &format!("{host}:{port}"), upload)
}

/// The saved settings under `key` (`host:port` for SFTP, [`http_key`] for
/// HTTP(S)) and direction, if any.
pub fn lookup_key(path: &Path, key: &str, upload: bool) -> Option<Tuning> {
    let doc: toml::Table = std::fs::read_to_string(path).ok()?.parse().ok()?;
    let entry = doc.get("host")?.as_table()?.get(key)?.as_table()?;
    if upload {
        if let Some(u) = entry.get("upload").and_then(|u| u.as_table()) {
            return Some(Tuning::from_table(u));
        }
    }
    Some(Tuning::from_table(entry))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn save_then_lookup_per_direction_keeps_other_hosts() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ferry/hosts.toml");
        let down = Tuning {
            streams: Some(4),
            parallel: Some(16),
            chunk: Some(262144),
            depth: None,
            ..Tuning::default()
        };
        let up = Tuning {
            streams: Some(8),
            ..Tuning::default()
        };
        save(&p, "a.example:22", &down, &up).unwrap();
        save(&p, "b.example:2222", &up, &down).unwrap();
        assert_eq!(lookup(&p, "a.example", 22, false), Some(down.clone()));
        assert_eq!(lookup(&p, "a.example", 22, true), Some(up.clone()));
        assert_eq!(lookup(&p, "b.example", 2222, false), Some(up));
        assert_eq!(lookup(&p, "a.example", 2222, false), None);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("[host.\"a.example:22\"]"), "{text}");
        assert_eq!(down.describe(), "--streams 4 -P 16 --chunk 256k");
    }

    #[test]
    fn http_knobs_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("hosts.toml");
        let down = Tuning {
            streams: Some(4),
            http: Some(HttpVersion::Http1),
            compressed: Some(true),
            ..Tuning::default()
        };
        let up = Tuning {
            parallel: Some(8),
            http: Some(HttpVersion::Http2),
            ..Tuning::default()
        };
        let key = http_key(true, "127.0.0.1", 8443);
        assert_eq!(key, "https://127.0.0.1:8443");
        save(&p, &key, &down, &up).unwrap();
        assert_eq!(lookup_key(&p, &key, false), Some(down.clone()));
        assert_eq!(lookup_key(&p, &key, true), Some(up));
        assert_eq!(
            lookup(&p, "127.0.0.1", 8443, false),
            None,
            "not an SFTP host"
        );
        assert_eq!(down.describe(), "--streams 4 --http1.1 --compressed");
        assert_eq!(
            down.flags(),
            ["--streams", "4", "--http1.1", "--compressed"]
        );
        assert_eq!(http_key(false, "::1", 80), "http://[::1]:80");
    }

    #[test]
    fn sftp_compression_round_trips_per_direction() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("hosts.toml");
        let down = Tuning {
            parallel: Some(4),
            compress: Some(true),
            ..Tuning::default()
        };
        // Swept and lost: saved as nothing, so ferry cp keeps its default.
        let up = Tuning {
            depth: Some(64),
            ..Tuning::default()
        };
        save(&p, "h.example:22", &down, &up).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("compress = true"), "{text}");
        assert!(!text.contains("compressed"), "{text}");
        assert_eq!(lookup(&p, "h.example", 22, false), Some(down.clone()));
        assert_eq!(lookup(&p, "h.example", 22, true), Some(up));
        assert_eq!(down.describe(), "-P 4 -C");
        assert_eq!(down.flags(), ["-P", "4", "-C"]);
        // An explicit `compress = false` (hand-written) reads back as off.
        std::fs::write(&p, "[host.\"h:22\"]\ncompress = false\n").unwrap();
        let t = lookup(&p, "h", 22, false).unwrap();
        assert_eq!(t.compress, Some(false));
        assert!(t.flags().is_empty());
        assert_eq!(t.describe(), "defaults");
    }
}
