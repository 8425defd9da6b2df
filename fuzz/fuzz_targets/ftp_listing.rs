//! Directory listings from an FTP server (ferry_ftp::listing): the lines
//! of an MLSD or LIST reply, MLSD facts and `ls -l`/DOS lines parsed by
//! suppaftp. Nothing may panic, and every entry kept must be safe to join
//! onto a local directory and to send back in a command: one plain path
//! segment, never `.` or `..`, no CR/LF/NUL.
#![no_main]

use ferry_ftp::listing::{mdtm_seconds, parse, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
});
