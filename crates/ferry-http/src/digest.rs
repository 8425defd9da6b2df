//! Integrity headers: `Repr-Digest: sha-256=:BASE64:` (RFC 9530) and the
//! older `Digest: SHA-256=BASE64` (RFC 3230). Only SHA-256 is checked;
//! other algorithms are ignored.
use base64::Engine;
use http::HeaderMap;

/// The SHA-256 the server announced for the whole file, if any.
pub fn expected_sha256(headers: &HeaderMap) -> Option<[u8; 32]> {
    for v in headers.get_all("repr-digest") {
        let Ok(s) = v.to_str() else { continue };
        for item in s.split(',') {
            let Some((alg, val)) = item.trim().split_once('=') else {
                continue;
            };
            if alg.trim().eq_ignore_ascii_case("sha-256") {
                let b64 = val.trim().trim_matches(':');
                if let Some(d) = decode32(b64) {
                    return Some(d);
                }
            }
        }
    }
    for v in headers.get_all("digest") {
        let Ok(s) = v.to_str() else { continue };
        for item in s.split(',') {
            let Some((alg, val)) = item.trim().split_once('=') else {
                continue;
            };
            if alg.trim().eq_ignore_ascii_case("sha-256") {
                if let Some(d) = decode32(val.trim()) {
                    return Some(d);
                }
            }
        }
    }
    None
}

fn decode32(b64: &str) -> Option<[u8; 32]> {
    let v = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    v.try_into().ok()
}

pub fn to_base64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn both_headers() {
        let sum = [7u8; 32];
        let b = to_base64(&sum);
        let mut h = HeaderMap::new();
        h.insert(
            "repr-digest",
            format!("sha-512=:AAAA:, sha-256=:{b}:").parse().unwrap(),
        );
        assert_eq!(expected_sha256(&h), Some(sum));
        let mut h = HeaderMap::new();
        h.insert("digest", format!("MD5=xx, SHA-256={b}").parse().unwrap());
        assert_eq!(expected_sha256(&h), Some(sum));
        let mut h = HeaderMap::new();
        h.insert("digest", "SHA-256=notbase64!".parse().unwrap());
        assert_eq!(expected_sha256(&h), None);
    }
}
