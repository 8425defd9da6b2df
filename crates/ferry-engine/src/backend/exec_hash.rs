//! Hashing with `b3sum` or `sha256sum` over an SSH exec channel, for an
//! SFTP server without a hash extension (OpenSSH) whose sshd lets the user
//! run commands: the file is read on the server, not through the link.
//! These are the pure parts (the probe's answer, the command line, the
//! output, the time limit); `sftp.rs` runs them. Every doubt is a
//! refusal, and the caller then reads the file through the connection to
//! hash it. Public for the `exec_hash` fuzz target (ferry-fuzz-checks).
use std::time::Duration;

use super::HashAlgo;

/// The command that asks which tools the server has: `command -v` prints
/// the path of each one found (sh, dash, bash, zsh, ksh), nothing for one
/// missing.
pub const PROBE: &[u8] = b"command -v b3sum sha256sum";

/// The tool for an algorithm.
pub fn tool(algo: HashAlgo) -> Option<&'static str> {
    match algo {
        HashAlgo::Blake3 => Some("b3sum"),
        HashAlgo::Sha256 => Some("sha256sum"),
        HashAlgo::Xxh128 | HashAlgo::Crc32 => None,
    }
}

/// The algorithms whose tool the probe found (BLAKE3 first): lines that
/// are the tool's name or a path ending in `/NAME`.
pub fn found(probe_stdout: &[u8]) -> Vec<HashAlgo> {
    let text = String::from_utf8_lossy(probe_stdout);
    let has = |name: &str| {
        text.lines().map(str::trim).any(|l| {
            l == name
                || (l.starts_with('/') && l.strip_suffix(name).is_some_and(|d| d.ends_with('/')))
        })
    };
    [HashAlgo::Blake3, HashAlgo::Sha256]
        .into_iter()
        .filter(|a| tool(*a).is_some_and(has))
        .collect()
}

/// The slowest rate a server's disk is expected to hash at, bytes per
/// second: [`limit`] allows a file's size at this rate.
pub const SLOW_RATE: u64 = 50_000_000;

/// How long the tool may take for a file of `size` bytes: the engine's
/// stall time (`--timeout`: how long ferry waits for any answer) plus the
/// size at [`SLOW_RATE`]. The tool prints nothing until it has read the
/// whole file, so "no output for `--timeout`" would cut every big file;
/// past this limit the disk is stalled or the name is something that
/// never ends (a FIFO made after the listing), and reading the file
/// through the link is the better bet. Unknown size: `stall` alone.
pub fn limit(size: Option<u64>, stall: Duration) -> Duration {
    let secs = size.unwrap_or(0) as f64 / SLOW_RATE as f64;
    stall.saturating_add(Duration::from_secs_f64(secs.ceil()))
}

/// `path` in single quotes for a POSIX shell (`'` becomes `'\''`); `None`
/// for a path with NUL, CR or LF, which is never sent.
pub fn quote(path: &[u8]) -> Option<Vec<u8>> {
    if path.iter().any(|b| matches!(b, 0 | b'\n' | b'\r')) {
        return None;
    }
    let mut q = Vec::with_capacity(path.len() + 2);
    q.push(b'\'');
    for &b in path {
        if b == b'\'' {
            q.extend_from_slice(b"'\\''");
        } else {
            q.push(b);
        }
    }
    q.push(b'\'');
    Some(q)
}

/// `TOOL -- 'PATH'`, or `None` when the path cannot be sent.
pub fn command(algo: HashAlgo, path: &[u8]) -> Option<Vec<u8>> {
    let mut c = tool(algo)?.as_bytes().to_vec();
    c.extend_from_slice(b" -- ");
    c.extend_from_slice(&quote(path)?);
    Some(c)
}

/// The hash from the tool's output for `path`: exactly one line, `HEX
/// NAME` with two spaces (or ` *` for binary mode), the hex of a 32-byte
/// hash and NAME the path as sent. Names with a backslash come escaped
/// with a `\` before the line (coreutils and b3sum both do so).
pub fn parse(out: &[u8], path: &[u8]) -> Result<Vec<u8>, String> {
    let line = out
        .strip_suffix(b"\n")
        .ok_or_else(|| "the output does not end with a new line".to_string())?;
    if line.contains(&b'\n') {
        return Err("more than one line of output".into());
    }
    let (escaped, line) = match line.strip_prefix(b"\\") {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let hex = line.get(..64).ok_or("the output is too short")?;
    let rest = line.get(64..).unwrap_or_default();
    let name = rest
        .strip_prefix(b"  ")
        .or_else(|| rest.strip_prefix(b" *"))
        .ok_or("no file name after the hash")?;
    let name = if escaped {
        unescape(name).ok_or("a badly escaped file name")?
    } else {
        name.to_vec()
    };
    if name != path {
        return Err(format!(
            "the output names {:?}, not the file asked for",
            String::from_utf8_lossy(&name)
        ));
    }
    let digit = |c: u8| (c as char).to_digit(16);
    hex.chunks(2)
        .map(|p| match p {
            [a, b] => Some((digit(*a)? * 16 + digit(*b)?) as u8),
            _ => None,
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| "the hash is not hex".to_string())
}

/// coreutils' escaping of names: `\\` and `\n` (and `\r`, which sends
/// no such names anyway).
fn unescape(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut it = s.iter();
    while let Some(&b) = it.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match it.next()? {
            b'\\' => out.push(b'\\'),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const H: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn probe_answers() {
        assert_eq!(
            found(b"/usr/bin/b3sum\n/usr/bin/sha256sum\n"),
            vec![HashAlgo::Blake3, HashAlgo::Sha256]
        );
        assert_eq!(found(b"/usr/bin/sha256sum\n"), vec![HashAlgo::Sha256]);
        assert_eq!(found(b"sha256sum\n"), vec![HashAlgo::Sha256]);
        assert!(found(b"").is_empty());
        assert!(found(b"/usr/bin/notsha256sum\nsh: command not found\n").is_empty());
        // internal-sftp answering with SFTP bytes, or a banner.
        assert!(found(b"\x00\x00\x00\x05\x02\x00\x00\x00\x03").is_empty());
    }

    #[test]
    fn limits() {
        let s = Duration::from_secs(60);
        assert_eq!(limit(None, s), s);
        assert_eq!(limit(Some(0), s), s);
        assert_eq!(limit(Some(1), s), Duration::from_secs(61));
        assert_eq!(limit(Some(5_000_000_000), s), Duration::from_secs(160));
        assert!(limit(Some(u64::MAX), s).as_secs() >= u64::MAX / SLOW_RATE);
    }

    #[test]
    fn quoting() {
        assert_eq!(quote(b"/a b/c").unwrap(), b"'/a b/c'");
        assert_eq!(quote(b"/it's").unwrap(), b"'/it'\\''s'");
        assert_eq!(quote(b"$(rm -rf ~)`x`").unwrap(), b"'$(rm -rf ~)`x`'");
        assert!(quote(b"/a\nb").is_none());
        assert!(quote(b"/a\0b").is_none());
        assert!(quote(b"/a\rb").is_none());
        assert_eq!(
            command(HashAlgo::Sha256, b"/-x").unwrap(),
            b"sha256sum -- '/-x'"
        );
        assert!(command(HashAlgo::Crc32, b"/x").is_none());
    }

    #[test]
    fn outputs() {
        let ok = format!("{H}  /d/it's a file\n");
        let h = parse(ok.as_bytes(), b"/d/it's a file").unwrap();
        assert_eq!(h.len(), 32);
        assert_eq!(h[0], 0x2c);
        assert!(parse(format!("{H} */f\n").as_bytes(), b"/f").is_ok());
        let esc = format!("\\{H}  /a\\\\b\n");
        assert!(parse(esc.as_bytes(), b"/a\\b").is_ok());
        for (bad, p) in [
            (format!("{H}  /f"), "/f"),
            (format!("{H}  /g\n"), "/f"),
            (format!("{H}  /f\n{H}  /f\n"), "/f"),
            (format!("{}  /f\n", &H[..62]), "/f"),
            (format!("{}zz  /f\n", &H[..62]), "/f"),
            (format!("{H} /f\n"), "/f"),
            ("sha256sum: /f: Permission denied\n".to_string(), "/f"),
            (String::new(), "/f"),
            (format!("\\{H}  /a\\qb\n"), "/a\\qb"),
        ] {
            assert!(parse(bad.as_bytes(), p.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
