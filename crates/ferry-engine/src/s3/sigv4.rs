//! AWS Signature Version 4 for S3 requests, in the `Authorization` header
//! (<https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html>).
//! No I/O and no clock: the caller passes the time, so the signature of a
//! request is a pure function of it, and the tests check AWS's published
//! example byte for byte.
//!
//! Bodies are sent as `UNSIGNED-PAYLOAD` (hashing every byte with SHA-256
//! would cost more CPU than the transfer; integrity comes from the
//! `x-amz-checksum-*` or `Content-MD5` header instead, which is signed).
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The payload hash that says "not signed" (S3 accepts it on every request).
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// SHA-256 of nothing, for bodiless requests that want a real hash.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Characters kept as they are in a SigV4 URI component (RFC 3986
/// unreserved); everything else is %XX with upper-case hex.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encode one path segment or query component as SigV4 wants.
pub fn uri_encode(s: &[u8]) -> String {
    percent_encoding::percent_encode(s, UNRESERVED).to_string()
}

/// An S3 object key as a URL path: each `/`-separated segment encoded,
/// the slashes kept (S3 does not normalise paths: `a//b` is its own key).
pub fn encode_key_path(key: &str) -> String {
    key.split('/')
        .map(|s| uri_encode(s.as_bytes()))
        .collect::<Vec<_>>()
        .join("/")
}

/// Secret material: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
}

impl Credentials {
    /// An access key and its secret, no session token.
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Credentials {
        Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            session_token: None,
        }
    }

    /// The same with a session token (temporary credentials from STS).
    pub fn with_session_token(mut self, token: impl Into<String>) -> Credentials {
        self.session_token = Some(token.into());
        self
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials {{ access_key: {:?}, .. }}", self.access_key)
    }
}

/// A UTC time as SigV4 writes it: `20130524T000000Z` and `20130524`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmzDate {
    pub datetime: String,
    pub date: String,
}

impl AmzDate {
    /// From seconds since the epoch.
    pub fn from_unix(secs: i64) -> AmzDate {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let date = format!("{y:04}{m:02}{d:02}");
        AmzDate {
            datetime: format!(
                "{date}T{:02}{:02}{:02}Z",
                rem / 3600,
                rem % 3600 / 60,
                rem % 60
            ),
            date,
        }
    }

    pub fn now() -> AmzDate {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        AmzDate::from_unix(secs)
    }
}

/// Howard Hinnant's days-to-civil: the proleptic Gregorian date of a day
/// number (0 = 1970-01-01).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// One request to sign. `path` is already encoded as it goes on the wire
/// (`encode_key_path`); `query` pairs are raw and encoded here; `headers`
/// are the ones to sign (names in any case), `host` among them.
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a [(String, String)],
    pub headers: &'a [(String, String)],
    pub payload_hash: &'a str,
}

/// The query string as sent: sorted, encoded (SigV4's canonical form is
/// also a valid query, so the same text goes on the wire).
pub fn canonical_query(query: &[(String, String)]) -> String {
    let mut q: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k.as_bytes()), uri_encode(v.as_bytes())))
        .collect();
    q.sort();
    q.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical request and the signed-headers list.
pub fn canonical_request(r: &Request<'_>) -> (String, String) {
    let mut h: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_ascii_lowercase(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect();
    h.sort();
    let canon_headers: String = h.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed = h
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let text = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        r.method,
        r.path,
        canonical_query(r.query),
        canon_headers,
        signed,
        r.payload_hash
    );
    (text, signed)
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length: this cannot fail.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn sha256_hex(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

/// The `Authorization` header value for an S3 request at `when`.
pub fn authorization(r: &Request<'_>, creds: &Credentials, region: &str, when: &AmzDate) -> String {
    authorization_for(r, creds, region, "s3", when)
}

/// The `Authorization` header value for a request to `service` (`s3`,
/// `sts`) at `when`.
pub fn authorization_for(
    r: &Request<'_>,
    creds: &Credentials,
    region: &str,
    service: &str,
    when: &AmzDate,
) -> String {
    let (creq, signed) = canonical_request(r);
    let scope = format!("{}/{region}/{service}/aws4_request", when.date);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        when.datetime,
        sha256_hex(creq.as_bytes())
    );
    let k_date = hmac(
        format!("AWS4{}", creds.secret_key).as_bytes(),
        when.date.as_bytes(),
    );
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    let sig = hex(&hmac(&k_signing, to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={sig}",
        creds.access_key
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example_creds() -> Credentials {
        Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }

    #[test]
    fn dates() {
        let d = AmzDate::from_unix(1_369_353_600); // 2013-05-24 00:00:00
        assert_eq!(d.datetime, "20130524T000000Z");
        assert_eq!(d.date, "20130524");
        assert_eq!(AmzDate::from_unix(951_827_696).datetime, "20000229T123456Z");
    }

    /// AWS's "GET Object" example from the S3 SigV4 documentation
    /// (sig-v4-header-based-auth.html): a ranged GET of test.txt.
    #[test]
    fn aws_example_get_object() {
        let headers = vec![
            (
                "Host".to_string(),
                "examplebucket.s3.amazonaws.com".to_string(),
            ),
            ("Range".to_string(), "bytes=0-9".to_string()),
            ("x-amz-content-sha256".to_string(), EMPTY_SHA256.to_string()),
            ("x-amz-date".to_string(), "20130524T000000Z".to_string()),
        ];
        let r = Request {
            method: "GET",
            path: "/test.txt",
            query: &[],
            headers: &headers,
            payload_hash: EMPTY_SHA256,
        };
        let when = AmzDate::from_unix(1_369_353_600);
        assert_eq!(
            authorization(&r, &example_creds(), "us-east-1", &when),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// The same page's "GET Bucket (List Objects)" example: the query
    /// string is sorted and encoded.
    #[test]
    fn aws_example_list_objects() {
        let headers = vec![
            (
                "host".to_string(),
                "examplebucket.s3.amazonaws.com".to_string(),
            ),
            ("x-amz-content-sha256".to_string(), EMPTY_SHA256.to_string()),
            ("x-amz-date".to_string(), "20130524T000000Z".to_string()),
        ];
        let q = vec![
            ("prefix".to_string(), "J".to_string()),
            ("max-keys".to_string(), "2".to_string()),
        ];
        let r = Request {
            method: "GET",
            path: "/",
            query: &q,
            headers: &headers,
            payload_hash: EMPTY_SHA256,
        };
        let when = AmzDate::from_unix(1_369_353_600);
        assert!(
            authorization(&r, &example_creds(), "us-east-1", &when).ends_with(
                "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
            )
        );
    }

    #[test]
    fn key_paths() {
        assert_eq!(encode_key_path("a b/c+d%/é"), "a%20b/c%2Bd%25/%C3%A9");
        assert_eq!(
            canonical_query(&[("b".into(), "x y".into()), ("a".into(), String::new())]),
            "a=&b=x%20y"
        );
    }
}
