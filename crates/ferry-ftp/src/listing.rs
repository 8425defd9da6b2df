//! Directory listings into entries: MLSD facts (RFC 3659 section 7) or
//! `LIST` lines (Unix `ls -l` or DOS style, parsed by suppaftp's parsers).
//! A name from the server is used as a local file name, so only single,
//! plain path segments are kept (ferry_http::listing::safe_name), and
//! names that could not be sent back in a command (CR, LF) are refused.
use suppaftp::list::{File, ListParser};

/// The same kinds as an HTTP listing's; a symbolic link is fetched with
/// RETR, which follows it on the server.
pub use ferry_http::listing::Kind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: Kind,
    pub size: u64,
    /// Seconds since the epoch, when the listing says (MLSD: exact UTC;
    /// LIST: to the minute, or the day for old files).
    pub mtime: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Mlsd,
    List,
}

/// Parse listing lines; the second value is the names left out as unsafe.
pub fn parse(lines: &[String], format: Format) -> (Vec<Entry>, Vec<String>) {
    let mut out = Vec::new();
    let mut refused = Vec::new();
    for line in lines {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() || line.starts_with("total ") {
            continue;
        }
        let parsed = match format {
            Format::Mlsd => mlsd_line(line),
            Format::List => ListParser::parse_posix(line)
                .or_else(|_| ListParser::parse_dos(line))
                .ok()
                .map(|f| entry_of(&f)),
        };
        let Some(e) = parsed else {
            tracing::debug!("listing: cannot parse {line:?}");
            continue;
        };
        if e.name == "." || e.name == ".." {
            continue;
        }
        if !ferry_http::listing::safe_name(e.name.as_bytes()) || !crate::sendable(&e.name) {
            refused.push(e.name);
            continue;
        }
        out.push(e);
    }
    (out, refused)
}

fn entry_of(f: &File) -> Entry {
    let kind = if f.is_directory() {
        Kind::Dir
    } else if f.is_symlink() {
        Kind::Symlink
    } else {
        Kind::File
    };
    let mtime = f
        .modified()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs().min(i64::MAX as u64) as i64);
    Entry {
        name: f.name().to_string(),
        kind,
        size: f.size() as u64,
        mtime,
    }
}

/// `type=file;size=12;modify=20261123101500; name` (facts are
/// case-insensitive; the name follows the first space and may contain
/// anything but CR/LF).
fn mlsd_line(line: &str) -> Option<Entry> {
    let (facts, name) = line.split_once(' ')?;
    let mut kind = None;
    let mut size = 0;
    let mut mtime = None;
    for fact in facts.split(';').filter(|f| !f.is_empty()) {
        let (k, v) = fact.split_once('=')?;
        match k.to_ascii_lowercase().as_str() {
            "type" => {
                kind = Some(match v.to_ascii_lowercase().as_str() {
                    "file" => Kind::File,
                    "dir" => Kind::Dir,
                    // The directory itself and its parent.
                    "cdir" | "pdir" => return None,
                    t if t.starts_with("os.unix=symlink") || t.starts_with("os.unix=slink") => {
                        Kind::Symlink
                    }
                    _ => return None,
                })
            }
            "size" => size = v.parse().ok()?,
            "modify" => mtime = mdtm_seconds(v),
            _ => {}
        }
    }
    Some(Entry {
        name: name.to_string(),
        kind: kind?,
        size,
        mtime,
    })
}

/// `YYYYMMDDHHMMSS[.sss]` (UTC) as seconds since the epoch.
pub fn mdtm_seconds(v: &str) -> Option<i64> {
    let d = v.split('.').next()?;
    if d.len() != 14 || !d.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let n = |a: usize, b: usize| d.get(a..b).and_then(|s| s.parse::<i64>().ok());
    let (y, mo, day, h, mi, s) = (
        n(0, 4)?,
        n(4, 6)?,
        n(6, 8)?,
        n(8, 10)?,
        n(10, 12)?,
        n(12, 14)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&day) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + s)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn vsftpd_list_lines() {
        // What vsftpd 3.0 sends for LIST -a.
        let (e, refused) = parse(
            &lines(&[
                "drwxr-xr-x    3 0        0            4096 Nov 23 10:15 .",
                "drwxr-xr-x    3 0        0            4096 Nov 23 10:15 ..",
                "-rw-r--r--    1 0        0               0 Nov 23 10:15 empty",
                "-rw-r--r--    1 0        0           12345 Jan 02  2024 with space.bin",
                "drwxr-xr-x    2 0        0            4096 Nov 23 10:15 sub dir",
                "-rw-r--r--    1 0        0               5 Nov 23 10:15 ünï.txt",
                "lrwxrwxrwx    1 0        0               5 Nov 23 10:15 link -> empty",
                "-rw-r--r--    1 0        0               5 Nov 23 10:15 .hidden",
            ]),
            Format::List,
        );
        assert!(refused.is_empty());
        let names: Vec<(&str, Kind, u64)> = e
            .iter()
            .map(|e| (e.name.as_str(), e.kind, e.size))
            .collect();
        assert_eq!(
            names,
            vec![
                ("empty", Kind::File, 0),
                ("with space.bin", Kind::File, 12345),
                ("sub dir", Kind::Dir, 4096),
                ("ünï.txt", Kind::File, 5),
                ("link", Kind::Symlink, 5),
                (".hidden", Kind::File, 5),
            ]
        );
    }

    #[test]
    fn mlsd_lines_and_hostile_names() {
        let (e, refused) = parse(
            &lines(&[
                "type=cdir;modify=20261123101500; .",
                "type=file;size=3;modify=20261123101500;UNIX.mode=0644; a b",
                "type=dir;modify=20261123101500; d",
                "type=file;size=1; ../../etc/passwd",
                "type=file;size=1; x\\y",
                "garbage",
            ]),
            Format::Mlsd,
        );
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].name, "a b");
        assert_eq!(e[0].size, 3);
        assert_eq!(e[0].mtime, Some(1_795_428_900));
        assert_eq!(e[1].kind, Kind::Dir);
        assert_eq!(refused, vec!["../../etc/passwd", "x\\y"]);
    }

    #[test]
    fn mdtm() {
        assert_eq!(mdtm_seconds("19700101000000"), Some(0));
        assert_eq!(mdtm_seconds("20000301000000.123"), Some(951_868_800));
        assert_eq!(mdtm_seconds("2000030100000"), None);
        assert_eq!(mdtm_seconds("20001301000000"), None);
    }
}
