//! Bytes from the network, as ferry's SFTP server and client see them:
//! framed by `Framer`, decoded as a request (server side) and as a reply
//! (client side). Nothing may panic, and whatever decodes must re-encode to
//! a frame that decodes to the same value.

use bytes::{Bytes, BytesMut};
use ferry_sftp::{Framer, Request, Response};

/// One input of the `sftp_decode` fuzz target: returns when it holds, panics
/// with what broke (the module documentation says what is checked).
pub fn sftp_decode(data: &[u8]) {
    let mut framer = Framer::new(1 << 20);
    // Feed in two pieces, as the channel may split it anywhere.
    let cut = data.first().map_or(0, |b| *b as usize).min(data.len());
    framer.push(&data[..cut]);
    framer.push(&data[cut..]);
    while let Ok(Some(frame)) = framer.next_frame() {
        if let Ok(req) = Request::decode(frame.clone()) {
            let mut out = BytesMut::new();
            req.encode(&mut out);
            let again = Request::decode(Bytes::copy_from_slice(&out[4..]));
            assert_eq!(again.as_ref().ok(), Some(&req));
        }
        if let Ok(resp) = Response::decode(frame) {
            let mut out = BytesMut::new();
            resp.encode(&mut out);
            let _ = Response::decode(Bytes::copy_from_slice(&out[4..]));
        }
    }
}
