//! Content decoding of HTTP bodies (`--compressed`,
//! ferry_http::decode::Decoder): a zstd or gzip body from the server, in
//! pieces as the connection delivers them. The first byte picks the
//! encoding and where the body is cut. Nothing may panic; identity
//! passes bytes through unchanged.

use ferry_http::decode::Decoder;

/// One input of the `http_decode` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn http_decode(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let enc = match mode % 4 {
        0 => Some("zstd"),
        1 => Some("gzip"),
        2 => Some("identity"),
        _ => None,
    };
    let Ok(mut d) = Decoder::for_encoding(enc) else {
        return;
    };
    let cut = usize::from(mode >> 2).min(body.len());
    let mut out = 0usize;
    for piece in [&body[..cut], &body[cut..]] {
        match d.feed(piece) {
            Ok(plain) => out += plain.len(),
            Err(_) => return,
        }
    }
    match d.finish() {
        Ok(rest) => out += rest.len(),
        Err(_) => return,
    }
    if enc == Some("identity") || enc.is_none() {
        assert_eq!(out, body.len());
    }
}
