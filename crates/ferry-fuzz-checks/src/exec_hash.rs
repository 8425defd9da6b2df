//! What `sha256sum`/`b3sum` print on an SSH exec channel, and the probe's
//! answer (ferry_engine::backend::exec_hash): a server's output, so peer
//! data. The input is split at the first NUL: the path asked before it,
//! the tool's output after (no NUL: all of it is output, for `/f`).
//! Nothing may panic; a hash accepted is 32 bytes; the output the tools
//! print for the path (plain, or `\`-escaped as coreutils and b3sum do for
//! a name with `\` or a new line) is accepted with the same hash; `found`
//! names only the two tools, BLAKE3 first; the path's shell quoting is
//! one single-quoted word that means exactly the path, and a path with
//! NUL, CR or LF is never quoted.

use ferry_engine::backend::exec_hash::{command, found, parse, quote};
use ferry_engine::backend::HashAlgo;

/// The line `sha256sum -- PATH` prints for `hash` (coreutils 9: a name
/// with `\` or a new line is escaped and the line starts with `\`).
fn tool_line(hash: &[u8], path: &[u8]) -> Vec<u8> {
    let escape = path.iter().any(|&b| matches!(b, b'\\' | b'\n' | b'\r'));
    let mut line = Vec::new();
    if escape {
        line.push(b'\\');
    }
    for b in hash {
        line.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    line.extend_from_slice(b"  ");
    for &b in path {
        match b {
            b'\\' if escape => line.extend_from_slice(b"\\\\"),
            b'\n' => line.extend_from_slice(b"\\n"),
            b'\r' => line.extend_from_slice(b"\\r"),
            _ => line.push(b),
        }
    }
    line.push(b'\n');
    line
}

/// What a POSIX shell makes of `word`: single-quoted runs and `\'`,
/// nothing else; `None` for anything a shell would read differently.
fn unquote(word: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < word.len() {
        match word[i] {
            b'\'' => {
                let end = i + 1 + word[i + 1..].iter().position(|&b| b == b'\'')?;
                out.extend_from_slice(&word[i + 1..end]);
                i = end + 1;
            }
            b'\\' if word.get(i + 1) == Some(&b'\'') => {
                out.push(b'\'');
                i += 2;
            }
            _ => return None,
        }
    }
    Some(out)
}

/// One input of the `exec_hash` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn exec_hash(data: &[u8]) {
    let (path, out) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"/f"[..], data),
    };

    if let Ok(h) = parse(out, path) {
        assert_eq!(h.len(), 32, "{out:?} for {path:?} -> {h:?}");
        assert_eq!(parse(&tool_line(&h, path), path), Ok(h));
    }
    // The tool's own line for this path, with a hash from the input.
    let mut hash = [0u8; 32];
    for (d, s) in hash.iter_mut().zip(out) {
        *d = *s;
    }
    let line = tool_line(&hash, path);
    assert_eq!(parse(&line, path), Ok(hash.to_vec()), "{line:?}");
    // b3sum/sha256sum in binary mode (` *`) reads the same.
    if let Some(pos) = line.windows(2).position(|w| w == b"  ") {
        let mut star = line.clone();
        star[pos + 1] = b'*';
        assert_eq!(parse(&star, path), Ok(hash.to_vec()), "{star:?}");
    }

    let algos = found(out);
    assert!(algos.len() <= 2, "{algos:?}");
    assert!(
        algos
            .iter()
            .all(|a| matches!(a, HashAlgo::Blake3 | HashAlgo::Sha256)),
        "{algos:?}"
    );
    if algos.len() == 2 {
        assert_eq!(algos, [HashAlgo::Blake3, HashAlgo::Sha256]);
    }

    let sendable = !path.iter().any(|b| matches!(b, 0 | b'\n' | b'\r'));
    match quote(path) {
        Some(q) => {
            assert!(sendable, "{path:?} quoted as {q:?}");
            assert_eq!(unquote(&q).as_deref(), Some(path), "{q:?}");
            let c = command(HashAlgo::Sha256, path).unwrap();
            assert_eq!(&c[..13], b"sha256sum -- ");
            assert_eq!(&c[13..], &q[..]);
        }
        None => assert!(!sendable, "{path:?} not quoted"),
    }
}
