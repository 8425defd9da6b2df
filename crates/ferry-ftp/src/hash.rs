//! The `HASH` command of draft-bryan-ftpext-hash-02: what FEAT says of it
//! and its `213` reply, as pure functions (fuzzed by ferry-fuzz-checks'
//! `ftp_control`).
//!
//! ```text
//! FEAT       ->  211- ... " HASH SHA-1;SHA-256*;BLAKE3" ... 211 END
//! OPTS HASH SHA-256  ->  200 SHA-256
//! HASH /dir/a b.txt  ->  213 SHA-256 0-1234 9f86d08...f00a08 /dir/a b.txt
//! ```

/// Longest hash accepted in a reply, in bytes (SHA-512's 64).
pub const MAX_HASH: usize = 64;

/// The algorithms a FEAT `HASH` line's value lists (`SHA-1;SHA-256*;MD5`),
/// in its order, with the one the server would use now (marked `*`).
/// Names are kept as the server wrote them, without the `*`; empty or
/// odd names (spaces, control characters) are left out.
pub fn feat_algorithms(value: &str) -> Vec<(String, bool)> {
    value
        .split(';')
        .filter_map(|n| {
            let n = n.trim();
            let (name, chosen) = match n.strip_suffix('*') {
                Some(n) => (n, true),
                None => (n, false),
            };
            let ok = !name.is_empty()
                && name.len() <= 32
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            ok.then(|| (name.to_string(), chosen))
        })
        .collect()
}

/// A `213` reply to `HASH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashReply {
    /// The algorithm the server used, as it wrote it.
    pub algorithm: String,
    /// The byte range hashed: `start-end`.
    pub start: u64,
    pub end: u64,
    /// The hash's bytes (from hex).
    pub hash: Vec<u8>,
    /// The path as the server echoed it (may hold spaces).
    pub path: String,
}

/// Parse a reply to `HASH`: `213 ALGO START-END HEX PATH` (the `213 ` and
/// the line end may be there or not). A multi-line reply, a hash that is
/// not even-length hex of at most [`MAX_HASH`] bytes, or a range that is
/// not two numbers with `start <= end` is refused with a reason.
pub fn parse_hash_reply(line: &str) -> Result<HashReply, String> {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.contains(['\r', '\n']) {
        return Err("a reply of more than one line".into());
    }
    let rest = match line.strip_prefix("213") {
        Some(r) => r
            .strip_prefix(' ')
            .ok_or_else(|| "not a 213 reply line".to_string())?,
        None if line
            .get(..3)
            .is_some_and(|c| c.bytes().all(|b| b.is_ascii_digit())) =>
        {
            return Err(format!("reply {} instead of 213", &line[..3]));
        }
        None => line,
    };
    let mut it = rest.splitn(4, ' ');
    let (Some(algo), Some(range), Some(hex), Some(path)) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return Err("expected ALGORITHM START-END HASH PATH".into());
    };
    if algo.is_empty() || !algo.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("no algorithm name".into());
    }
    let (start, end) = range
        .split_once('-')
        .and_then(|(a, b)| Some((number(a)?, number(b)?)))
        .ok_or_else(|| format!("{range:?} is not a byte range START-END"))?;
    if start > end {
        return Err(format!("the range {range} ends before it starts"));
    }
    let hash = from_hex(hex).ok_or_else(|| format!("{hex:?} is not a hash in hex"))?;
    Ok(HashReply {
        algorithm: algo.to_string(),
        start,
        end,
        hash,
        path: path.to_string(),
    })
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) || s.len() > 2 * MAX_HASH {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    s.as_bytes()
        .chunks(2)
        .map(|p| match p {
            [a, b] => Some((digit(*a)? * 16 + digit(*b)?) as u8),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn feat_lines() {
        assert_eq!(
            feat_algorithms("SHA-1;SHA-256*;SHA-512;MD5"),
            vec![
                ("SHA-1".to_string(), false),
                ("SHA-256".to_string(), true),
                ("SHA-512".to_string(), false),
                ("MD5".to_string(), false),
            ]
        );
        assert_eq!(
            feat_algorithms("SHA-256*;BLAKE3"),
            vec![("SHA-256".to_string(), true), ("BLAKE3".to_string(), false)]
        );
        assert_eq!(feat_algorithms(""), vec![]);
        assert_eq!(
            feat_algorithms(";; CRC32 ;a b;*;\u{1}"),
            vec![("CRC32".to_string(), false)]
        );
    }

    #[test]
    fn replies() {
        let r = parse_hash_reply("213 SHA-256 0-5 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824 /a b/c.txt\r\n").unwrap();
        assert_eq!(r.algorithm, "SHA-256");
        assert_eq!((r.start, r.end), (0, 5));
        assert_eq!(r.hash.len(), 32);
        assert_eq!(r.hash[0], 0x2c);
        assert_eq!(r.path, "/a b/c.txt");
        // Upper-case hex, no code.
        let r = parse_hash_reply("BLAKE3 0-0 AF13 f").unwrap();
        assert_eq!(r.hash, vec![0xaf, 0x13]);
        for bad in [
            "550 File not found",
            "213 SHA-256 0-5 abc f",
            "213 SHA-256 5-0 ab f",
            "213 SHA-256 0-x ab f",
            "213 SHA-256 -1-5 ab f",
            "213 SHA-256 0-5 zz f",
            "213 SHA-256 0-5 ab",
            "213-SHA-256 0-5 ab f",
            "213 SHA-256 0-5 ab f\r\n213 x",
            "213 SHA-256 0-99999999999999999999999 ab f",
            "",
        ] {
            assert!(parse_hash_reply(bad).is_err(), "{bad:?}");
        }
        let long = format!("213 X 0-1 {} f", "ab".repeat(MAX_HASH + 1));
        assert!(parse_hash_reply(&long).is_err());
    }
}
