//! EC2 instance metadata (IMDS) without I/O: where it is and how long to
//! wait for it (the `AWS_EC2_METADATA_*` and `AWS_METADATA_SERVICE_*`
//! variables and their profile settings, as botocore reads them), the
//! IMDSv2 requests (a PUT for a session token, then the role's name and
//! its keys), what an answer means, and the keys' JSON. The requests are
//! made by `backend::s3_sts` (docs/internals/s3.md, "EC2 instance
//! metadata").
use std::time::{Duration, SystemTime};

use super::chain::{parse_container_answer, AwsFiles};
use super::{Env, ExpiringCredentials};

/// IMDS over IPv4 (`AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE = IPv4`, the default).
pub const IPV4_ENDPOINT: &str = "http://169.254.169.254";
/// IMDS over IPv6 (`... = IPv6`).
pub const IPV6_ENDPOINT: &str = "http://[fd00:ec2::254]";
/// PUT here for an IMDSv2 session token.
pub const TOKEN_PATH: &str = "/latest/api/token";
/// GET: the instance profile's role name; with the name after it: its keys.
pub const ROLE_PATH: &str = "/latest/meta-data/iam/security-credentials/";
/// The token's life asked for (six hours, what the SDKs ask).
pub const TOKEN_TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
pub const TOKEN_TTL_SECONDS: &str = "21600";
/// The token, sent with each GET.
pub const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";
/// The SDKs' defaults: one attempt of one second, so a machine that is not
/// on EC2 loses at most about a second looking.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
pub const DEFAULT_ATTEMPTS: u32 = 1;
/// Answers read at most (the keys' JSON is under 2 kB).
pub const ANSWER_MAX: usize = 64 * 1024;
/// Keys IMDS gives already expired are used this much longer (the SDKs'
/// "static stability": IMDS keeps serving the last keys while its source
/// is down), and asked for again before.
pub const EXTENSION: Duration = Duration::from_secs(15 * 60);

/// How to reach IMDS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imds {
    /// `http://169.254.169.254` or a configured endpoint, no trailing `/`.
    pub endpoint: String,
    /// Per request: connecting and the whole answer.
    pub timeout: Duration,
    /// Tries per request (a timeout, a lost connection, a 5xx).
    pub attempts: u32,
    /// Without a token when the token PUT is refused as unknown
    /// (403, 404, 405) or unanswered after connecting; off with
    /// `AWS_EC2_METADATA_V1_DISABLED` / `ec2_metadata_v1_disabled`.
    pub v1_fallback: bool,
    /// The chain's last link, tried because nothing else held
    /// credentials: when it gives none, the run goes on as without it
    /// (unsigned when the options allow). `false`: a profile's
    /// `credential_source = Ec2InstanceMetadata`, whose failure is an error.
    pub last_link: bool,
}

fn truthy(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("true")
}

/// IMDS as the environment and the profile configure it, or `None` when
/// `AWS_EC2_METADATA_DISABLED=true`. The environment's value first, then
/// the profile's, setting by setting: `AWS_EC2_METADATA_SERVICE_ENDPOINT`
/// (`ec2_metadata_service_endpoint`), else
/// `AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE` (`..._endpoint_mode`, IPv4 or
/// IPv6); `AWS_METADATA_SERVICE_TIMEOUT` (`metadata_service_timeout`,
/// seconds) and `AWS_METADATA_SERVICE_NUM_ATTEMPTS`
/// (`metadata_service_num_attempts`); `AWS_EC2_METADATA_V1_DISABLED`
/// (`ec2_metadata_v1_disabled`).
pub fn settings(
    env: &dyn Env,
    files: &AwsFiles,
    profile: &str,
    last_link: bool,
) -> Result<Option<Imds>, String> {
    if env
        .var("AWS_EC2_METADATA_DISABLED")
        .is_some_and(|v| truthy(&v))
    {
        return Ok(None);
    }
    let setting = |var: &str, key: &str| -> Option<(String, String)> {
        env.var(var)
            .map(|v| (v, var.to_string()))
            .or_else(|| {
                files
                    .get(profile, key)
                    .map(|v| (v, format!("{key} in profile {profile:?}")))
            })
            .filter(|(v, _)| !v.trim().is_empty())
    };
    let endpoint = match setting(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT",
        "ec2_metadata_service_endpoint",
    ) {
        Some((url, from)) => {
            let u = ferry_http::Url::parse(url.trim())
                .map_err(|e| format!("{from} = {url}: {e}; want http://host[:port]"))?;
            if u.path != "/" && !u.path.is_empty() {
                return Err(format!(
                    "{from} = {url}: give the endpoint without a path (http://host[:port])"
                ));
            }
            url.trim().trim_end_matches('/').to_string()
        }
        None => match setting(
            "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
            "ec2_metadata_service_endpoint_mode",
        ) {
            None => IPV4_ENDPOINT.to_string(),
            Some((m, _)) if m.trim().eq_ignore_ascii_case("ipv4") => IPV4_ENDPOINT.to_string(),
            Some((m, _)) if m.trim().eq_ignore_ascii_case("ipv6") => IPV6_ENDPOINT.to_string(),
            Some((m, from)) => return Err(format!("{from} = {m}: want IPv4 or IPv6")),
        },
    };
    let timeout = match setting("AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout") {
        None => DEFAULT_TIMEOUT,
        Some((t, from)) => t
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{from} = {t}: want a number of seconds (1 by default)"))?,
    };
    let attempts = match setting(
        "AWS_METADATA_SERVICE_NUM_ATTEMPTS",
        "metadata_service_num_attempts",
    ) {
        None => DEFAULT_ATTEMPTS,
        Some((n, from)) => n
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=10).contains(n))
            .ok_or_else(|| format!("{from} = {n}: want a number of attempts from 1 to 10"))?,
    };
    let v1_disabled = setting("AWS_EC2_METADATA_V1_DISABLED", "ec2_metadata_v1_disabled")
        .is_some_and(|(v, _)| truthy(&v));
    Ok(Some(Imds {
        endpoint,
        timeout,
        attempts,
        v1_fallback: !v1_disabled,
        last_link,
    }))
}

/// What the answer to the token PUT means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenAnswer {
    /// 200: the token.
    Token(String),
    /// 403, 404, 405: IMDSv2 is not there (or turned off); botocore goes
    /// on without a token.
    NoV2,
    /// Anything else: an error, said so.
    Refused(u16),
}

/// The token PUT's answer: `status` and its body.
pub fn token_answer(status: u16, body: &[u8]) -> TokenAnswer {
    match status {
        200 => match std::str::from_utf8(body).map(str::trim) {
            // A token goes in a header: printable ASCII only.
            Ok(t) if !t.is_empty() && t.bytes().all(|b| (0x21..0x7f).contains(&b)) => {
                TokenAnswer::Token(t.to_string())
            }
            _ => TokenAnswer::Refused(200),
        },
        403..=405 => TokenAnswer::NoV2,
        s => TokenAnswer::Refused(s),
    }
}

/// The role's name from the listing at [`ROLE_PATH`]: its first line. A
/// name that would not stay one path segment is refused.
pub fn role_name(body: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the role name is not UTF-8".to_string())?;
    let name = text.lines().map(str::trim).find(|l| !l.is_empty());
    match name {
        None => Err("the instance has no IAM role (an empty list of roles)".into()),
        Some(n)
            if n.len() <= 128
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b)) =>
        {
            Ok(n.to_string())
        }
        Some(_) => Err("the role name has characters an IAM role name cannot have".into()),
    }
}

/// The role's keys (`Code`, `AccessKeyId`, `SecretAccessKey`, `Token`,
/// `Expiration`). A `Code` other than `Success` is an error; keys IMDS
/// gives already expired (at `now`) are used [`EXTENSION`] longer, as
/// the SDKs do, and the second value says so. Errors never quote the
/// answer (it holds secrets).
pub fn parse_credentials(
    body: &[u8],
    now: SystemTime,
) -> Result<(ExpiringCredentials, bool), String> {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(code) = v.get("Code").and_then(|c| c.as_str()) {
            if code != "Success" {
                return Err(format!(
                    "IMDS says {:?} instead of Success",
                    code.chars().take(64).collect::<String>()
                ));
            }
        }
    }
    let mut c = parse_container_answer(body)?;
    let stale = c.expiration.is_some_and(|e| e <= now);
    if stale {
        c.expiration = Some(now + EXTENSION);
    }
    Ok((c, stale))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::s3::parse_ini;
    use crate::s3::tests::env;
    use std::time::UNIX_EPOCH;

    fn files(config: &str) -> AwsFiles {
        AwsFiles {
            credentials: Default::default(),
            config: parse_ini(config),
        }
    }

    fn get(e: &[(&str, &str)], config: &str) -> Result<Option<Imds>, String> {
        settings(&env(e), &files(config), "p", true)
    }

    #[test]
    fn defaults_are_the_sdks() {
        let i = get(&[], "").unwrap().unwrap();
        assert_eq!(
            i,
            Imds {
                endpoint: "http://169.254.169.254".into(),
                timeout: Duration::from_secs(1),
                attempts: 1,
                v1_fallback: true,
                last_link: true,
            }
        );
    }

    #[test]
    fn disabled_endpoint_mode_timeout_attempts() {
        assert_eq!(
            get(&[("AWS_EC2_METADATA_DISABLED", "TRUE")], "").unwrap(),
            None
        );
        assert!(get(&[("AWS_EC2_METADATA_DISABLED", "false")], "")
            .unwrap()
            .is_some());
        let i = get(
            &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:8/")],
            "[profile p]\nec2_metadata_service_endpoint = http://[::1]:9\nec2_metadata_service_endpoint_mode = IPv6\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(i.endpoint, "http://127.0.0.1:8");
        // The profile's endpoint, then its mode.
        let p = "[profile p]\nec2_metadata_service_endpoint = http://[::1]:9\n";
        assert_eq!(get(&[], p).unwrap().unwrap().endpoint, "http://[::1]:9");
        let p = "[profile p]\nec2_metadata_service_endpoint_mode = ipv6\n";
        assert_eq!(
            get(&[], p).unwrap().unwrap().endpoint,
            "http://[fd00:ec2::254]"
        );
        assert_eq!(
            get(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "IPv4")], p)
                .unwrap()
                .unwrap()
                .endpoint,
            "http://169.254.169.254"
        );
        let e = get(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "v6")], "").unwrap_err();
        assert!(
            e.contains("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE") && e.contains("IPv6"),
            "{e}"
        );
        let e = get(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://h/x")], "").unwrap_err();
        assert!(e.contains("without a path"), "{e}");
        let i = get(
            &[
                ("AWS_METADATA_SERVICE_TIMEOUT", "2.5"),
                ("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "3"),
            ],
            "[profile p]\nec2_metadata_v1_disabled = true\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (i.timeout, i.attempts, i.v1_fallback),
            (Duration::from_millis(2500), 3, false)
        );
        let p = "[profile p]\nmetadata_service_timeout = 0\n";
        let e = get(&[], p).unwrap_err();
        assert!(
            e.contains("metadata_service_timeout in profile \"p\""),
            "{e}"
        );
        let e = get(&[("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "x")], "").unwrap_err();
        assert!(e.contains("AWS_METADATA_SERVICE_NUM_ATTEMPTS"), "{e}");
    }

    #[test]
    fn token_answers() {
        assert_eq!(
            token_answer(200, b"AQAEAbc==\n"),
            TokenAnswer::Token("AQAEAbc==".into())
        );
        for s in [403, 404, 405] {
            assert_eq!(token_answer(s, b""), TokenAnswer::NoV2);
        }
        assert_eq!(token_answer(400, b""), TokenAnswer::Refused(400));
        assert_eq!(token_answer(200, b""), TokenAnswer::Refused(200));
        assert_eq!(token_answer(200, b"a\r\nb"), TokenAnswer::Refused(200));
    }

    #[test]
    fn role_names() {
        assert_eq!(role_name(b"my-role\n").unwrap(), "my-role");
        assert!(role_name(b"").unwrap_err().contains("no IAM role"));
        assert!(role_name(b"../x").is_err());
        assert!(role_name(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn credentials_and_stale_ones() {
        let now = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let (c, stale) = parse_credentials(
            br#"{"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"A","SecretAccessKey":"S","Token":"T","Expiration":"2999-01-01T00:00:00Z"}"#,
            now,
        )
        .unwrap();
        assert_eq!(
            (
                c.credentials.access_key.as_str(),
                c.credentials.session_token.as_deref(),
                stale
            ),
            ("A", Some("T"), false)
        );
        // Already expired: used 15 minutes more.
        let (c, stale) = parse_credentials(
            br#"{"Code":"Success","AccessKeyId":"A","SecretAccessKey":"S","Token":"T","Expiration":"2020-04-02T00:49:51Z"}"#,
            now,
        )
        .unwrap();
        assert!(stale);
        assert_eq!(c.expiration, Some(now + EXTENSION));
        let e =
            parse_credentials(br#"{"Code":"Failure","AccessKeyId":"secret"}"#, now).unwrap_err();
        assert!(e.contains("Failure") && !e.contains("secret"), "{e}");
        assert!(parse_credentials(b"secret", now)
            .unwrap_err()
            .contains("not JSON"));
    }
}
