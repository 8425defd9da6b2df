//! What a user types as a source or destination: URLs (sftp, http(s),
//! ftp(s), s3) and scp-style `[user@]host:path` (ferry_engine::Location),
//! and the HTTP URL type on its own (ferry_http::Url): parse, print, and
//! resolve references the way listings and redirects do. Nothing may
//! panic; an HTTP URL without credentials printed and parsed again must
//! be the same URL.

use ferry_engine::Location;
use ferry_http::Url;

/// One input of the `location_url` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn location_url(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(loc) = Location::parse(s) {
        let _ = loc.describe();
    }
    // A reference after the first newline, as a redirect's Location or a
    // listing's href.
    let (url, reference) = s.split_once('\n').unwrap_or((s, ""));
    if let Ok(u) = Url::parse(url) {
        // Display hides the password and prints the user decoded, so only
        // URLs without credentials must come back identical.
        let printed = u.to_string();
        if u.user.is_none() && u.password.is_none() {
            let again = Url::parse(&printed);
            assert_eq!(again.as_ref(), Ok(&u), "{printed:?}");
        }
        let _ = u.decoded_path();
        let _ = u.file_name();
        let _ = u.authority();
        let dir = u.as_dir();
        assert!(dir.is_dir());
        let child = dir.child(reference.as_bytes());
        assert_eq!(child.origin(), u.origin());
        if let Some(j) = u.join(reference) {
            let _ = j.to_string();
        }
    }
}
