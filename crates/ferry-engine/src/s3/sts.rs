//! AWS STS without I/O: the form bodies of `AssumeRole` and
//! `AssumeRoleWithWebIdentity` (Query protocol, version 2011-06-15), the
//! request to sign, and the XML answers: keys with an expiry, or an
//! `<ErrorResponse>`. The calls are made by `backend::s3_sts`.
//! Answers come from the network: a missing field is an error, never a
//! panic, and secrets are never quoted in messages.
use std::time::{SystemTime, UNIX_EPOCH};

use super::process::parse_expiration;
use super::{sigv4, xml, Credentials, ExpiringCredentials};

/// The STS API version the bodies name.
const VERSION: &str = "2011-06-15";
/// STS answers read at most.
pub const ANSWER_MAX: usize = 64 * 1024;

/// Where STS is called and the region its requests are signed for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StsEndpoint {
    /// `https://sts.REGION.amazonaws.com`, or a configured endpoint.
    pub url: String,
    pub region: String,
}

/// The parameters of an `AssumeRole` call (the profile's `role_arn`,
/// `role_session_name`, `external_id`, `duration_seconds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRequest {
    pub role_arn: String,
    pub session_name: String,
    pub external_id: Option<String>,
    pub duration_seconds: Option<u32>,
}

/// The session name when the profile gives none: what botocore does
/// (`botocore-session-SECONDS`), named after ferry. CloudTrail shows it.
pub fn default_session_name(now: SystemTime) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("ferry-session-{secs}")
}

fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", sigv4::uri_encode(v.as_bytes())))
        .collect::<Vec<_>>()
        .join("&")
}

/// The body of `AssumeRole`.
pub fn assume_role_body(r: &RoleRequest) -> String {
    let duration = r.duration_seconds.map(|d| d.to_string());
    let mut pairs = vec![
        ("Action", "AssumeRole"),
        ("Version", VERSION),
        ("RoleArn", r.role_arn.as_str()),
        ("RoleSessionName", r.session_name.as_str()),
    ];
    if let Some(e) = &r.external_id {
        pairs.push(("ExternalId", e));
    }
    if let Some(d) = &duration {
        pairs.push(("DurationSeconds", d));
    }
    form(&pairs)
}

/// The body of `AssumeRoleWithWebIdentity` (sent unsigned: the token is
/// the proof).
pub fn web_identity_body(r: &RoleRequest, token: &str) -> String {
    let duration = r.duration_seconds.map(|d| d.to_string());
    let mut pairs = vec![
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", VERSION),
        ("RoleArn", r.role_arn.as_str()),
        ("RoleSessionName", r.session_name.as_str()),
        ("WebIdentityToken", token),
    ];
    if let Some(d) = &duration {
        pairs.push(("DurationSeconds", d));
    }
    form(&pairs)
}

/// The content type of the bodies above.
pub const FORM_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// The headers to sign for a POST of `body` to `authority` at `when`
/// (`session_token`: the source credentials' own), and the payload hash.
pub fn signed_headers(
    authority: &str,
    body: &str,
    when: &sigv4::AmzDate,
    session_token: Option<&str>,
) -> (Vec<(String, String)>, String) {
    let mut h = vec![
        ("host".to_string(), authority.to_string()),
        ("content-type".to_string(), FORM_TYPE.to_string()),
        ("x-amz-date".to_string(), when.datetime.clone()),
    ];
    if let Some(t) = session_token {
        h.push(("x-amz-security-token".to_string(), t.to_string()));
    }
    (h, sigv4::sha256_hex(body.as_bytes()))
}

/// The keys in an `AssumeRoleResponse` or
/// `AssumeRoleWithWebIdentityResponse`: `<...Result><Credentials>` with
/// `AccessKeyId`, `SecretAccessKey`, `SessionToken`, `Expiration`.
pub fn parse_credentials(doc: &[u8]) -> Result<ExpiringCredentials, String> {
    let root = xml::parse(doc).map_err(|e| format!("the STS answer is not XML ({e})"))?;
    let result = root
        .children
        .iter()
        .find(|c| c.name.ends_with("Result"))
        .ok_or_else(|| format!("the STS answer <{}> has no result", root.name))?;
    let creds = result
        .child("Credentials")
        .ok_or("the STS answer has no <Credentials>")?;
    let field = |k: &str| -> Result<String, String> {
        creds
            .text_of(k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("the STS answer has no <{k}>"))
    };
    let expiration = field("Expiration")?;
    let expiration = parse_expiration(&expiration).ok_or_else(|| {
        format!("the STS answer's <Expiration> {expiration:?} is not an ISO 8601 time")
    })?;
    Ok(ExpiringCredentials {
        credentials: Credentials {
            access_key: field("AccessKeyId")?,
            secret_key: field("SecretAccessKey")?,
            session_token: Some(field("SessionToken")?),
        },
        expiration: Some(expiration),
    })
}

/// `<ErrorResponse><Error><Code>..</Code><Message>..</Message>`: code
/// and message. The first `<Error>` with a `<Code>` at any depth, so
/// `<ErrorResponse><Errors><Error>` (moto, other STS look-alikes) is read
/// too.
pub fn parse_error(doc: &[u8]) -> Option<(String, String)> {
    fn find(n: &xml::Node) -> Option<&xml::Node> {
        if n.name == "Error" && n.child("Code").is_some() {
            return Some(n);
        }
        n.children.iter().find_map(find)
    }
    let root = xml::parse(doc).ok()?;
    let e = find(&root)?;
    Some((
        e.text_of("Code").unwrap_or_default().trim().to_string(),
        e.text_of("Message").unwrap_or_default().trim().to_string(),
    ))
}

/// What to do about an STS error code.
pub fn advice(code: &str) -> &'static str {
    match code {
        "AccessDenied" => "the source credentials may not assume this role: check the role's trust policy and the source's sts:AssumeRole permission",
        "InvalidClientTokenId" | "SignatureDoesNotMatch" => "STS refused the source credentials: check the source profile's keys",
        "ExpiredToken" => "the source credentials have expired: renew them",
        "InvalidIdentityToken" | "ExpiredTokenException" | "IDPRejectedClaim" => "STS refused the web identity token: check the token file and the role's trust policy",
        "ValidationError" => "check role_arn, role_session_name, external_id and duration_seconds",
        "RegionDisabledException" => "STS is not activated in this region: set region or AWS_ENDPOINT_URL_STS",
        _ => "check the profile's role settings",
    }
}

/// Attempts of one STS or container credentials call when it fails in a
/// way another try may cure (botocore's standard retry mode: 3).
pub const CALL_ATTEMPTS: u32 = 3;

/// Whether an STS, container endpoint or IMDS answer is worth another try:
/// a 5xx, 429, or a throttling or "try again" error code (botocore's
/// standard retry mode, and `IDPCommunicationError`, which botocore
/// retries for web identity). `code`: the error document's, if any.
pub fn retryable(status: u16, code: Option<&str>) -> bool {
    let code_says = code.is_some_and(|c| {
        matches!(
            c,
            "Throttling"
                | "ThrottlingException"
                | "ThrottledException"
                | "RequestThrottledException"
                | "TooManyRequestsException"
                | "ProvisionedThroughputExceededException"
                | "TransactionInProgressException"
                | "RequestLimitExceeded"
                | "BandwidthLimitExceeded"
                | "LimitExceededException"
                | "RequestThrottled"
                | "SlowDown"
                | "PriorRequestNotComplete"
                | "EC2ThrottledException"
                | "IDPCommunicationError"
                | "RequestTimeout"
                | "RequestTimeoutException"
        )
    });
    code_says || status >= 500 || status == 429
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn what_is_tried_again() {
        for (status, code) in [
            (500, None),
            (503, Some("ServiceUnavailable")),
            (429, None),
            (400, Some("Throttling")),
            (400, Some("IDPCommunicationError")),
        ] {
            assert!(retryable(status, code), "{status} {code:?}");
        }
        for (status, code) in [
            (403, Some("AccessDenied")),
            (403, Some("SignatureDoesNotMatch")),
            (400, Some("InvalidIdentityToken")),
            (400, Some("ValidationError")),
            (401, None),
            (404, None),
        ] {
            assert!(!retryable(status, code), "{status} {code:?}");
        }
    }

    fn role() -> RoleRequest {
        RoleRequest {
            role_arn: "arn:aws:iam::123456789012:role/demo".into(),
            session_name: "s 1".into(),
            external_id: Some("x/y".into()),
            duration_seconds: Some(900),
        }
    }

    #[test]
    fn bodies_are_encoded_forms() {
        assert_eq!(
            assume_role_body(&role()),
            "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fdemo&RoleSessionName=s%201&ExternalId=x%2Fy&DurationSeconds=900"
        );
        let r = RoleRequest {
            external_id: None,
            duration_seconds: None,
            ..role()
        };
        assert_eq!(
            web_identity_body(&r, "a.b+c"),
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fdemo&RoleSessionName=s%201&WebIdentityToken=a.b%2Bc"
        );
        assert_eq!(
            default_session_name(UNIX_EPOCH + Duration::from_secs(42)),
            "ferry-session-42"
        );
    }

    const ANSWER: &str = r#"<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/demo/s</Arn></AssumedRoleUser>
    <Credentials>
      <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
      <SecretAccessKey>secret</SecretAccessKey>
      <SessionToken>token</SessionToken>
      <Expiration>2026-11-29T13:27:31.086779Z</Expiration>
    </Credentials>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>r</RequestId></ResponseMetadata>
</AssumeRoleResponse>"#;

    #[test]
    fn answers_parsed() {
        let c = parse_credentials(ANSWER.as_bytes()).unwrap();
        assert_eq!(c.credentials.access_key, "ASIAEXAMPLE");
        assert_eq!(c.credentials.secret_key, "secret");
        assert_eq!(c.credentials.session_token.as_deref(), Some("token"));
        assert_eq!(
            c.expiration,
            Some(UNIX_EPOCH + Duration::from_secs(1_795_958_851))
        );
        let web = ANSWER.replace("AssumeRoleRe", "AssumeRoleWithWebIdentityRe");
        assert!(parse_credentials(web.as_bytes()).is_ok());
    }

    #[test]
    fn bad_answers_are_errors_not_panics() {
        let err = |s: &str| parse_credentials(s.as_bytes()).unwrap_err();
        assert!(err("not xml <").contains("XML") || err("not xml <").contains("result"));
        assert!(err("<AssumeRoleResponse/>").contains("no result"));
        assert!(err("<R><AssumeRoleResult/></R>").contains("<Credentials>"));
        let no_token = ANSWER.replace("<SessionToken>token</SessionToken>", "");
        assert!(err(&no_token).contains("SessionToken"));
        let bad_time = ANSWER.replace("2026-11-29T13:27:31.086779Z", "soon");
        let e = err(&bad_time);
        assert!(e.contains("Expiration") && !e.contains("secret"), "{e}");
        let no_secret = ANSWER.replace("<SecretAccessKey>secret</SecretAccessKey>", "");
        assert!(err(&no_secret).contains("SecretAccessKey"));
    }

    #[test]
    fn errors_parsed() {
        let doc = br#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>AccessDenied</Code><Message>User: x is not authorized</Message></Error>
  <RequestId>r</RequestId></ErrorResponse>"#;
        assert_eq!(
            parse_error(doc),
            Some(("AccessDenied".into(), "User: x is not authorized".into()))
        );
        let moto = b"<ErrorResponse><Errors><Error><Code>InvalidClientTokenId</Code><Message>m</Message></Error></Errors></ErrorResponse>";
        assert_eq!(
            parse_error(moto),
            Some(("InvalidClientTokenId".into(), "m".into()))
        );
        assert_eq!(parse_error(b"<html>"), None);
        assert!(advice("AccessDenied").contains("trust policy"));
    }
}
