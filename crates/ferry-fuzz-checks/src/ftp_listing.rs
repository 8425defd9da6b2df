//! Directory listings from an FTP server (ferry_ftp::listing): the lines
//! of an MLSD or LIST reply, MLSD facts and `ls -l`/DOS lines parsed by
//! suppaftp. Nothing may panic, and every entry kept must be safe to join
//! onto a local directory and to send back in a command: one plain path
//! segment, never `.` or `..`, no CR/LF/NUL.

use ferry_ftp::listing::{mdtm_seconds, parse, Format};

/// One input of the `ftp_listing` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn ftp_listing(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    for format in [Format::Mlsd, Format::List] {
        let (entries, _refused) = parse(&lines, format);
        assert!(entries.len() <= lines.len());
        for e in &entries {
            assert!(ferry_http::listing::safe_name(e.name.as_bytes()), "{e:?}");
            assert!(ferry_ftp::sendable(&e.name), "{e:?}");
        }
    }
    for line in &lines {
        let _ = mdtm_seconds(line.trim());
    }
}
