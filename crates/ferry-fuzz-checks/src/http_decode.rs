//! Content decoding of HTTP bodies (`--compressed`,
//! ferry_http::decode::Decoder): a zstd or gzip body from the server, in
//! pieces as the connection delivers them. The first byte picks the
//! encoding and where the body is cut. Nothing may panic; no step hands
//! out more than `MAX_PIECE` decoded bytes, however much the input
//! inflates (a compression bomb stays a bounded buffer, #24); where the
//! body is cut changes nothing (the same bytes, or an error either way);
//! identity passes bytes through unchanged.

use ferry_http::decode::{Decoder, MAX_PIECE};

/// The body decoded as the given network pieces: every decoded byte, or
/// the step that failed.
fn decode(enc: Option<&str>, body: &[&[u8]]) -> Option<Vec<u8>> {
    let mut d = Decoder::for_encoding(enc).ok()?;
    let mut out = Vec::new();
    for piece in body {
        let mut pieces = d.pieces(piece);
        while let Some(plain) = pieces.next_piece().ok()? {
            assert!(plain.len() <= MAX_PIECE, "{enc:?}: {}", plain.len());
            out.extend_from_slice(plain);
        }
    }
    let rest = d.finish().ok()?;
    assert!(rest.len() <= MAX_PIECE, "{enc:?}: {}", rest.len());
    out.extend(rest);
    Some(out)
}

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
    let cut = usize::from(mode >> 2).min(body.len());
    let (head, tail) = body.split_at(cut);
    let in_two = decode(enc, &[head, tail]);
    if enc == Some("identity") || enc.is_none() {
        assert_eq!(in_two.as_deref(), Some(body));
        return;
    }
    let whole = decode(enc, &[body]);
    assert_eq!(
        in_two.as_ref().map(Vec::len),
        whole.as_ref().map(Vec::len),
        "{enc:?} cut at {cut}"
    );
    assert!(in_two == whole, "{enc:?} cut at {cut}: different bytes");
}
