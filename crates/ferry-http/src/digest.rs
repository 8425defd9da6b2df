//! Integrity headers: `Repr-Digest: sha-256=:BASE64:` (RFC 9530) and the
//! older `Digest: SHA-256=BASE64` (RFC 3230), and `Repr-Digest:
//! blake3=:BASE64:`, which `ferry serve` sends (BLAKE3 costs a third of
//! SHA-256's CPU per byte here). Other algorithms are ignored; when several
//! are given, BLAKE3 is checked.
use base64::Engine;
use http::HeaderMap;

/// A hash algorithm ferry can check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Sha256,
    Blake3,
}

impl Algo {
    /// The name as written in `Repr-Digest`.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "sha-256",
            Algo::Blake3 => "blake3",
        }
    }
}

/// The digest the server announced for the whole representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub algo: Algo,
    pub sum: [u8; 32],
}

/// The digest to check, if the server sent one ferry can check: BLAKE3
/// from `Repr-Digest` first, then SHA-256.
pub fn expected(headers: &HeaderMap) -> Option<Expected> {
    for v in headers.get_all("repr-digest") {
        let Ok(s) = v.to_str() else { continue };
        for item in s.split(',') {
            let Some((alg, val)) = item.trim().split_once('=') else {
                continue;
            };
            if alg.trim().eq_ignore_ascii_case("blake3") {
                if let Some(sum) = decode32(val.trim().trim_matches(':')) {
                    return Some(Expected {
                        algo: Algo::Blake3,
                        sum,
                    });
                }
            }
        }
    }
    expected_sha256(headers).map(|sum| Expected {
        algo: Algo::Sha256,
        sum,
    })
}

/// Hashes bytes with the algorithm of an [`Expected`].
pub enum Hasher {
    Sha256(sha2::Sha256),
    Blake3(Box<blake3::Hasher>),
}

impl Hasher {
    pub fn new(algo: Algo) -> Hasher {
        match algo {
            Algo::Sha256 => Hasher::Sha256(<sha2::Sha256 as sha2::Digest>::new()),
            Algo::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
        }
    }
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha256(h) => sha2::Digest::update(h, data),
            Hasher::Blake3(h) => {
                h.update(data);
            }
        }
    }
    pub fn finalize(self) -> [u8; 32] {
        match self {
            Hasher::Sha256(h) => sha2::Digest::finalize(h).into(),
            Hasher::Blake3(h) => *h.finalize().as_bytes(),
        }
    }
}

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
    fn blake3_is_preferred_and_hashers_agree() {
        let b = to_base64(&[9u8; 32]);
        let s = to_base64(&[8u8; 32]);
        let mut h = HeaderMap::new();
        h.insert(
            "repr-digest",
            format!("sha-256=:{s}:, blake3=:{b}:").parse().unwrap(),
        );
        assert_eq!(
            expected(&h),
            Some(Expected {
                algo: Algo::Blake3,
                sum: [9u8; 32]
            })
        );
        h.insert("repr-digest", format!("sha-256=:{s}:").parse().unwrap());
        assert_eq!(expected(&h).map(|e| e.algo), Some(Algo::Sha256));
        let mut x = Hasher::new(Algo::Blake3);
        x.update(b"ab");
        x.update(b"c");
        assert_eq!(x.finalize(), *blake3::hash(b"abc").as_bytes());
        let mut x = Hasher::new(Algo::Sha256);
        x.update(b"abc");
        let want: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(b"abc").into();
        assert_eq!(x.finalize(), want);
    }

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
