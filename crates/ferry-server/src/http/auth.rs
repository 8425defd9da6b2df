//! The bearer token check, done before anything touches the file system.
//!
//! Accepted: `Authorization: Bearer TOKEN`, or `Basic` with any user name
//! and the token as the password (for clients that only know user and
//! password: browsers, `curl -u`, aria2's `--http-user/--http-passwd`).
//! Both sides are hashed with SHA-256 and the digests compared in constant
//! time, so neither the token's bytes nor its length leak through timing.
use base64::Engine;
use http::header::AUTHORIZATION;
use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    Ok,
    /// No `Authorization` header, or a scheme we do not take.
    Missing,
    /// A token was given and it is not ours.
    Wrong,
}

impl Auth {
    pub fn describe(self) -> &'static str {
        match self {
            Auth::Ok => "token accepted",
            Auth::Missing => "no token",
            Auth::Wrong => "wrong token",
        }
    }
}

/// The server's token, kept as its digest.
pub struct Token {
    /// `None`: an empty token was configured; nothing authenticates.
    digest: Option<[u8; 32]>,
}

impl Token {
    pub fn new(token: &str) -> Token {
        Token {
            digest: (!token.is_empty()).then(|| Sha256::digest(token.as_bytes()).into()),
        }
    }

    pub fn check(&self, headers: &HeaderMap) -> Auth {
        let Some(given) = headers.get(AUTHORIZATION) else {
            return Auth::Missing;
        };
        let Some(candidate) = credential(given.as_bytes()) else {
            return Auth::Missing;
        };
        let Some(ours) = &self.digest else {
            return Auth::Wrong;
        };
        let theirs: [u8; 32] = Sha256::digest(&candidate).into();
        if bool::from(theirs.ct_eq(ours)) {
            Auth::Ok
        } else {
            Auth::Wrong
        }
    }
}

/// The secret in an `Authorization` value: the bearer token, or a Basic
/// password. `None` for other schemes or a malformed value.
fn credential(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = text.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.as_bytes().to_vec());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let colon = decoded.iter().position(|&b| b == b':')?;
        return decoded.get(colon + 1..).map(<[u8]>::to_vec);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(AUTHORIZATION, v);
        }
        h
    }

    #[test]
    fn bearer_and_basic() {
        let t = Token::new("s3cret");
        assert_eq!(t.check(&HeaderMap::new()), Auth::Missing);
        assert_eq!(t.check(&with("Bearer s3cret")), Auth::Ok);
        assert_eq!(t.check(&with("bearer   s3cret ")), Auth::Ok);
        assert_eq!(t.check(&with("Bearer s3cre")), Auth::Wrong);
        assert_eq!(t.check(&with("Bearer s3cret2")), Auth::Wrong);
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        assert_eq!(
            t.check(&with(&format!("Basic {}", b64("anyone:s3cret")))),
            Auth::Ok
        );
        assert_eq!(
            t.check(&with(&format!("Basic {}", b64(":s3cret")))),
            Auth::Ok
        );
        assert_eq!(
            t.check(&with(&format!("Basic {}", b64("s3cret:x")))),
            Auth::Wrong
        );
        assert_eq!(
            t.check(&with(&format!("Basic {}", b64("nocolon")))),
            Auth::Missing
        );
        assert_eq!(t.check(&with("Basic !!!")), Auth::Missing);
        assert_eq!(t.check(&with("Digest s3cret")), Auth::Missing);
    }

    #[test]
    fn empty_token_lets_no_one_in() {
        let t = Token::new("");
        assert_eq!(t.check(&with("Bearer ")), Auth::Missing);
        assert_eq!(t.check(&with("Bearer x")), Auth::Wrong);
    }
}
