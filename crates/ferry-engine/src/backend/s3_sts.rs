//! Following a [`CredentialSource`] for keys: STS `AssumeRole` (signed
//! with the source's keys, fetched first) and `AssumeRoleWithWebIdentity`
//! (unsigned; the token file read again at each call), the container
//! credentials endpoint, EC2 instance metadata (IMDSv2), a
//! `credential_process`. Requests go over the S3
//! backend's own HTTP client, so STS gets the same TLS trust
//! (`AWS_CA_BUNDLE`, `--cacert`) and proxies. Wrapped by `s3_creds` in
//! the refresh logic every provider shares: asked when the backend opens
//! and again before the keys expire.
use bytes::Bytes;
use ferry_http::{Client, HeaderMap, HeaderValue, Method, Url};
use futures_util::future::BoxFuture;

use super::s3_creds;
use crate::s3::chain::{self, AssumeRole, ContainerEndpoint, CredentialSource, WebIdentity};
use crate::s3::imds::{self, Imds, TokenAnswer};
use crate::s3::sts::{self, StsEndpoint};
use crate::s3::{sigv4, Credentials, ExpiringCredentials, ProvideCredentials};

/// A [`CredentialSource`] as a provider.
pub(crate) struct SourceProvider {
    source: CredentialSource,
    client: Client,
}

impl SourceProvider {
    pub(crate) fn new(source: CredentialSource, client: Client) -> SourceProvider {
        SourceProvider { source, client }
    }
}

#[async_trait::async_trait]
impl ProvideCredentials for SourceProvider {
    async fn provide_credentials(&self) -> Result<ExpiringCredentials, String> {
        fetch(&self.client, &self.source).await
    }
}

/// Keys from `source`; errors say which profile, role or endpoint failed.
fn fetch<'a>(
    client: &'a Client,
    source: &'a CredentialSource,
) -> BoxFuture<'a, Result<ExpiringCredentials, String>> {
    Box::pin(async move {
        match source {
            CredentialSource::Keys { credentials, .. } => {
                Ok(ExpiringCredentials::new(credentials.clone()))
            }
            CredentialSource::Process(spec) => {
                let spec = spec.clone();
                tokio::task::spawn_blocking(move || s3_creds::run(&spec).map(Into::into))
                    .await
                    .map_err(|e| format!("S3 credentials: credential_process failed: {e}"))?
            }
            CredentialSource::AssumeRole(role) => assume_role(client, role).await,
            CredentialSource::WebIdentity(w) => web_identity(client, w).await,
            CredentialSource::Container(c) => container(client, c).await,
            CredentialSource::Imds(i) => imds_credentials(client, i).await,
        }
    })
}

async fn assume_role(client: &Client, role: &AssumeRole) -> Result<ExpiringCredentials, String> {
    let what = format!(
        "S3 credentials: role {} of profile {:?}",
        role.request.role_arn, role.profile
    );
    // Fetched at each call: a source that expires (another role, a
    // process) is renewed with the role.
    let source = fetch(client, &role.source)
        .await
        .map_err(|e| format!("{e} (the source credentials of {what})"))?;
    let body = sts::assume_role_body(&role.request);
    let answer = sts_call(client, &role.sts, body, Some(&source.credentials))
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    sts::parse_credentials(&answer).map_err(|e| format!("{what}: {e}"))
}

async fn web_identity(client: &Client, w: &WebIdentity) -> Result<ExpiringCredentials, String> {
    let what = format!(
        "S3 credentials: role {} with the web identity token {}",
        w.request.role_arn,
        w.token_file.display()
    );
    // Read at each call: Kubernetes and others rotate the token.
    let token = tokio::fs::read_to_string(&w.token_file)
        .await
        .map_err(|e| format!("{what}: cannot read the token file: {e}"))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("{what}: the token file is empty"));
    }
    let body = sts::web_identity_body(&w.request, token);
    let answer = sts_call(client, &w.sts, body, None)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    sts::parse_credentials(&answer).map_err(|e| format!("{what}: {e}"))
}

fn body_of(bytes: Bytes) -> ferry_http::Body {
    use http_body_util::BodyExt;
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn header(v: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(v).map_err(|_| "a value that cannot go in an HTTP header".to_string())
}

/// A failed call: its message, and whether another try may cure it.
struct CallError {
    message: String,
    retry: bool,
}

impl CallError {
    fn retry(message: String) -> CallError {
        CallError {
            message,
            retry: true,
        }
    }
    fn fail(message: String) -> CallError {
        CallError {
            message,
            retry: false,
        }
    }
}

/// `call` up to [`sts::CALL_ATTEMPTS`] times while it fails in a way
/// another try may cure (a lost connection, 5xx, throttling), waiting as
/// the engine's retries do (backoff with jitter) in between.
async fn with_retries<T, F, Fut>(what: &str, mut call: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CallError>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Ok(v) => return Ok(v),
            Err(e) if e.retry && attempt + 1 < sts::CALL_ATTEMPTS => {
                let wait = crate::retry::backoff(attempt);
                tracing::debug!(
                    "{what}: {}; trying again in {:.1} s",
                    e.message,
                    wait.as_secs_f64()
                );
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            Err(e) if attempt > 0 => {
                return Err(format!("{} (after {} attempts)", e.message, attempt + 1))
            }
            Err(e) => return Err(e.message),
        }
    }
}

/// POST `body` to STS, signed with `signer` (none: unsigned), and the
/// answer's body when it is a success; tried again on 5xx and throttling.
async fn sts_call(
    client: &Client,
    sts: &StsEndpoint,
    body: String,
    signer: Option<&Credentials>,
) -> Result<Vec<u8>, String> {
    let what = format!("STS at {}", sts.url);
    with_retries(&what, || sts_call_once(client, sts, body.clone(), signer)).await
}

async fn sts_call_once(
    client: &Client,
    sts: &StsEndpoint,
    body: String,
    signer: Option<&Credentials>,
) -> Result<Vec<u8>, CallError> {
    let mut url = Url::parse(&sts.url)
        .map_err(|e| CallError::fail(format!("STS endpoint {}: {e}", sts.url)))?;
    if url.path.is_empty() {
        url.path = "/".into();
    }
    let when = sigv4::AmzDate::now();
    let (signed, payload_hash) = sts::signed_headers(
        &url.authority(),
        &body,
        &when,
        signer.and_then(|c| c.session_token.as_deref()),
    );
    let mut headers = HeaderMap::new();
    if let Some(creds) = signer {
        let auth = sigv4::authorization_for(
            &sigv4::Request {
                method: "POST",
                path: &url.path,
                query: &[],
                headers: &signed,
                payload_hash: &payload_hash,
            },
            creds,
            &sts.region,
            "sts",
            &when,
        );
        let mut v =
            header(&auth).map_err(|e| CallError::fail(format!("the source credentials: {e}")))?;
        v.set_sensitive(true);
        headers.insert("authorization", v);
    }
    for (k, v) in signed.iter().filter(|(k, _)| k != "host") {
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| CallError::fail(e.to_string()))?;
        headers.insert(
            name,
            header(v).map_err(|e| CallError::fail(format!("{k}: {e}")))?,
        );
    }
    let bytes = Bytes::from(body);
    let make = move || body_of(bytes.clone());
    let resp = client
        .send(Method::POST, &url, &headers, Some(&make))
        .await
        .map_err(|e| sent_error(&format!("STS at {}", sts.url), e))?;
    let status = resp.status;
    let answer = resp
        .bytes(sts::ANSWER_MAX)
        .await
        .map_err(|e| CallError::retry(format!("STS at {}: reading the answer: {e}", sts.url)))?;
    if status.is_success() {
        return Ok(answer);
    }
    let status = status.as_u16();
    let parsed = sts::parse_error(&answer);
    let retry = sts::retryable(status, parsed.as_ref().map(|(c, _)| c.as_str()));
    let message = match parsed {
        Some((code, message)) => format!(
            "STS at {} refused (HTTP {status}, {code}: {message}); {}",
            sts.url,
            sts::advice(&code)
        ),
        None => format!(
            "STS at {} answered HTTP {status} with no STS error in the body; check the STS endpoint (AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, the profile's endpoint_url)",
            sts.url,
        ),
    };
    Err(CallError { message, retry })
}

/// A request that got no answer: tried again unless the URL or the TLS
/// trust is wrong (another try would not change that).
fn sent_error(what: &str, e: ferry_http::HttpError) -> CallError {
    let retry = matches!(e, ferry_http::HttpError::Network(_));
    CallError {
        message: format!("{what}: {e}"),
        retry,
    }
}

async fn container(client: &Client, c: &ContainerEndpoint) -> Result<ExpiringCredentials, String> {
    let what = format!(
        "S3 credentials: the container credentials endpoint {}",
        c.url
    );
    let url = Url::parse(&c.url).map_err(|e| format!("{what}: {e}"))?;
    // The file comes first and is read at each call (EKS rotates it).
    let token = match (&c.auth_token_file, &c.auth_token) {
        (Some(f), _) => Some(
            tokio::fs::read_to_string(f)
                .await
                .map_err(|e| {
                    format!(
                        "{what}: cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {}: {e}",
                        f.display()
                    )
                })?
                .trim()
                .to_string(),
        ),
        (None, t) => t.clone(),
    };
    let mut headers = HeaderMap::new();
    if let Some(t) = token {
        let mut v = header(&t).map_err(|e| format!("{what}: the authorization token: {e}"))?;
        v.set_sensitive(true);
        headers.insert("authorization", v);
    }
    let body = with_retries(&what, || async {
        let resp = client
            .get(&url, &headers)
            .await
            .map_err(|e| sent_error(&what, e))?;
        let status = resp.status.as_u16();
        let body = resp
            .bytes(sts::ANSWER_MAX)
            .await
            .map_err(|e| CallError::retry(format!("{what}: reading the answer: {e}")))?;
        if !(200..300).contains(&status) {
            return Err(CallError {
                message: format!(
                    "{what} answered HTTP {status}; check AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE) and the task's or pod's role"
                ),
                retry: sts::retryable(status, None),
            });
        }
        Ok(body)
    })
    .await?;
    chain::parse_container_answer(&body).map_err(|e| format!("{what}: {e}"))
}

/// Why one IMDS request gave no answer.
enum ImdsFailure {
    /// No connection was made (nothing listening, no route, or the
    /// connect timed out): nothing else is worth trying.
    Unreachable(String),
    /// Connected, then no (whole) answer in time or the connection broke.
    NoAnswer(String),
}

impl ImdsFailure {
    fn text(self) -> String {
        match self {
            ImdsFailure::Unreachable(m) | ImdsFailure::NoAnswer(m) => m,
        }
    }
}

/// A client for IMDS alone: its timeout as the connect timeout, HTTP/1.1,
/// no proxies (IMDS is link-local), no netrc or bearer token; the same
/// TLS trust as S3 for an https endpoint.
fn imds_client(base: &Client, i: &Imds) -> Result<Client, String> {
    let https = i.endpoint.starts_with("https:");
    Client::new(ferry_http::Options {
        version: ferry_http::Version::Http1,
        tls: if https {
            base.options().tls.clone()
        } else {
            Default::default()
        },
        netrc: false,
        env_proxy: false,
        connect_timeout: i.timeout,
        max_redirs: 0,
        h1_connections: 1,
        ..ferry_http::Options::default()
    })
    .map_err(|e| e.to_string())
}

/// One IMDS request, tried up to `i.attempts` times while it times out,
/// loses its connection or gets a 5xx (waits between tries as the engine's
/// retries do); the status and body of the last answer.
async fn imds_request(
    client: &Client,
    i: &Imds,
    method: Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<(u16, Vec<u8>), ImdsFailure> {
    let url = Url::parse(&format!("{}{path}", i.endpoint))
        .map_err(|e| ImdsFailure::Unreachable(format!("{}: {e}", i.endpoint)))?;
    let mut attempt = 0;
    loop {
        let before = client.connections();
        let make = || ferry_http::empty();
        let body: Option<&(dyn Fn() -> ferry_http::Body + Send + Sync)> =
            (method == Method::PUT).then_some(&make);
        let once = async {
            let resp = client
                .send(method.clone(), &url, headers, body)
                .await
                .map_err(|e| e.to_string())?;
            let status = resp.status.as_u16();
            let body = resp
                .bytes(imds::ANSWER_MAX)
                .await
                .map_err(|e| format!("reading the answer: {e}"))?;
            Ok::<_, String>((status, body))
        };
        let failure = match tokio::time::timeout(i.timeout, once).await {
            Ok(Ok((status, body))) if !sts::retryable(status, None) => return Ok((status, body)),
            Ok(Ok((status, body))) => {
                if attempt + 1 >= i.attempts {
                    return Ok((status, body));
                }
                ImdsFailure::NoAnswer(format!("HTTP {status}"))
            }
            Ok(Err(e)) if client.connections() == before => ImdsFailure::Unreachable(e),
            Ok(Err(e)) => ImdsFailure::NoAnswer(e),
            Err(_) => {
                let secs = i.timeout.as_secs_f64();
                if client.connections() == before {
                    ImdsFailure::Unreachable(format!("no connection within {secs} s"))
                } else {
                    ImdsFailure::NoAnswer(format!("no answer within {secs} s"))
                }
            }
        };
        attempt += 1;
        if attempt >= i.attempts {
            return Err(failure);
        }
        tokio::time::sleep(crate::retry::backoff(attempt - 1)).await;
    }
}

/// A GET of IMDS's `path`: the body of a 200.
async fn imds_get(
    client: &Client,
    i: &Imds,
    headers: &HeaderMap,
    path: String,
    what: &str,
) -> Result<Vec<u8>, String> {
    match imds_request(client, i, Method::GET, &path, headers).await {
        Ok((200, body)) => Ok(body),
        Ok((404, _)) => Err(format!(
            "{what}: the instance has no IAM role (HTTP 404 for {path}); attach an instance profile, or set AWS_EC2_METADATA_DISABLED=true to skip it"
        )),
        Ok((401, _)) => Err(format!(
            "{what}: HTTP 401 for {path} (the session token was refused)"
        )),
        Ok((status, _)) => Err(format!("{what}: HTTP {status} for {path}")),
        Err(e) => Err(format!("{what}: {path}: {}", e.text())),
    }
}

/// The instance profile's keys: a PUT for a session token (IMDSv2), the
/// role's name, then its keys, each GET with the token. Without a token
/// (IMDSv1) only when the PUT is refused as unknown (403, 404, 405) or
/// unanswered after connecting (a container behind a hop limit of 1), as
/// botocore does, and unless v1 is turned off. An endpoint that cannot be
/// reached ends it at once.
async fn imds_credentials(base: &Client, i: &Imds) -> Result<ExpiringCredentials, String> {
    let what = format!(
        "EC2 instance metadata (IMDS) at {} gave no credentials",
        i.endpoint
    );
    let off = "set AWS_EC2_METADATA_DISABLED=true to skip it";
    let client = imds_client(base, i).map_err(|e| format!("{what}: {e}"))?;
    let mut put = HeaderMap::new();
    put.insert(
        imds::TOKEN_TTL_HEADER,
        HeaderValue::from_static(imds::TOKEN_TTL_SECONDS),
    );
    let v1 = |why: String| {
        if i.v1_fallback {
            tracing::debug!(
                "IMDS at {}: {why}; going on without a token (IMDSv1)",
                i.endpoint
            );
            Ok(None)
        } else {
            Err(format!(
                "{what}: the session token request {why}, and IMDSv1 is turned off (AWS_EC2_METADATA_V1_DISABLED or ec2_metadata_v1_disabled)"
            ))
        }
    };
    let token = match imds_request(&client, i, Method::PUT, imds::TOKEN_PATH, &put).await {
        Ok((status, body)) => match imds::token_answer(status, &body) {
            TokenAnswer::Token(t) => Some(t),
            TokenAnswer::NoV2 => v1(format!("was answered HTTP {status}"))?,
            TokenAnswer::Refused(s) => {
                return Err(format!(
                    "{what}: the session token request was answered HTTP {s}{}",
                    if s == 200 { " without a token" } else { "" }
                ))
            }
        },
        Err(ImdsFailure::NoAnswer(e)) => v1(format!("got no answer ({e})"))?,
        Err(ImdsFailure::Unreachable(e)) => return Err(format!("{what} ({e}; not on EC2? {off})")),
    };
    let mut headers = HeaderMap::new();
    if let Some(t) = &token {
        let mut v = header(t).map_err(|e| format!("{what}: the session token: {e}"))?;
        v.set_sensitive(true);
        headers.insert(imds::TOKEN_HEADER, v);
    }
    let get = |path: String| imds_get(&client, i, &headers, path, &what);
    let role = imds::role_name(&get(imds::ROLE_PATH.to_string()).await?)
        .map_err(|e| format!("{what}: {e}"))?;
    let body = get(format!("{}{role}", imds::ROLE_PATH)).await?;
    let (creds, stale) = imds::parse_credentials(&body, std::time::SystemTime::now())
        .map_err(|e| format!("{what}: role {role}: {e}"))?;
    if stale {
        tracing::warn!(
            "IMDS at {} gave keys of role {role} that have already expired; using them {} minutes more (as the AWS SDKs do) and asking again before",
            i.endpoint,
            imds::EXTENSION.as_secs() / 60
        );
    }
    Ok(creds)
}

/// A test server's read of one request: its headers and whatever came
/// with them; `None` when the connection ended first.
#[cfg(test)]
async fn read_head(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(buf)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::s3::sts::RoleRequest;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An HTTP/1.1 server on 127.0.0.1 that answers every request with
    /// `status` and `body`, and keeps the requests' text.
    async fn one_answer_server(status: u16, body: String) -> (u16, Arc<Mutex<Vec<String>>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Headers, then the Content-Length body.
                loop {
                    let n = s.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                keep.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).to_string());
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        (port, seen)
    }

    fn client() -> Client {
        Client::new(ferry_http::Options {
            netrc: false,
            env_proxy: false,
            ..ferry_http::Options::default()
        })
        .unwrap()
    }

    fn role(port: u16, source: CredentialSource) -> CredentialSource {
        CredentialSource::AssumeRole(Box::new(AssumeRole {
            profile: "dev".into(),
            request: RoleRequest {
                role_arn: "arn:aws:iam::1:role/r".into(),
                session_name: "sess".into(),
                external_id: Some("ext".into()),
                duration_seconds: Some(900),
            },
            sts: StsEndpoint {
                url: format!("http://127.0.0.1:{port}"),
                region: "eu-west-3".into(),
            },
            source,
        }))
    }

    fn keys() -> CredentialSource {
        CredentialSource::Keys {
            credentials: Credentials::new("SRCKEY", "srcsecret").with_session_token("srctoken"),
            from: "test".into(),
        }
    }

    fn answer(expiration: &str) -> String {
        format!(
            "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>s</SecretAccessKey><SessionToken>t</SessionToken><Expiration>{expiration}</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>"
        )
    }

    #[tokio::test]
    async fn assume_role_is_a_signed_post() {
        let (port, seen) = one_answer_server(200, answer("2999-01-01T00:00:00Z")).await;
        let got = fetch(&client(), &role(port, keys())).await.unwrap();
        assert_eq!(got.credentials.access_key, "ASIA1");
        assert_eq!(got.credentials.session_token.as_deref(), Some("t"));
        let req = seen.lock().unwrap()[0].clone();
        assert!(req.starts_with("POST / HTTP/1.1"), "{req}");
        let lower = req.to_ascii_lowercase();
        assert!(
            lower.contains("authorization: aws4-hmac-sha256 credential=srckey/"),
            "{req}"
        );
        assert!(req.contains("/eu-west-3/sts/aws4_request"), "{req}");
        assert!(lower.contains("x-amz-security-token: srctoken"), "{req}");
        assert!(req.ends_with("Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr&RoleSessionName=sess&ExternalId=ext&DurationSeconds=900"), "{req}");
    }

    #[tokio::test]
    async fn sts_errors_name_the_role_and_say_what_to_do() {
        let (port, _) = one_answer_server(
            403,
            "<ErrorResponse><Error><Code>AccessDenied</Code><Message>not authorized</Message></Error></ErrorResponse>".into(),
        )
        .await;
        let e = fetch(&client(), &role(port, keys())).await.unwrap_err();
        assert!(
            e.contains("arn:aws:iam::1:role/r")
                && e.contains("\"dev\"")
                && e.contains("AccessDenied")
                && e.contains("not authorized")
                && e.contains("trust policy")
                && e.contains(&format!("127.0.0.1:{port}")),
            "{e}"
        );
        // Garbage with 200: an error, no panic.
        let (port, _) = one_answer_server(200, "<html>".into()).await;
        let e = fetch(&client(), &role(port, keys())).await.unwrap_err();
        assert!(e.contains("dev"), "{e}");
        // Nobody listening: the endpoint is named.
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = fetch(&client(), &role(dead, keys())).await.unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{dead}")), "{e}");
    }

    #[tokio::test]
    async fn an_expired_answer_is_refused() {
        let (port, _) = one_answer_server(200, answer("2001-01-01T00:00:00Z")).await;
        let p =
            crate::s3::CredentialsProvider::new(SourceProvider::new(role(port, keys()), client()));
        let Err(crate::TransferError::Auth(m)) =
            s3_creds::Refreshing::open(p, "role r".into(), true).await
        else {
            panic!("opened")
        };
        assert!(m.contains("already expired"), "{m}");
    }

    /// `secs` from now as STS writes it (`2026-11-29T13:27:31Z`).
    fn iso_in(secs: u64) -> String {
        let t = std::time::SystemTime::now() + std::time::Duration::from_secs(secs);
        let unix = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let d = sigv4::AmzDate::from_unix(unix as i64).datetime;
        format!(
            "{}-{}-{}T{}:{}:{}Z",
            &d[0..4],
            &d[4..6],
            &d[6..8],
            &d[9..11],
            &d[11..13],
            &d[13..15]
        )
    }

    #[tokio::test]
    async fn the_role_is_assumed_again_before_it_expires() {
        let (port, seen) = one_answer_server(200, answer(&iso_in(3))).await;
        let p =
            crate::s3::CredentialsProvider::new(SourceProvider::new(role(port, keys()), client()));
        let r = s3_creds::Refreshing::open(p, "role r".into(), false)
            .await
            .unwrap();
        let source = s3_creds::CredSource::Refreshing(Box::new(r));
        source.get().await.unwrap();
        assert_eq!(seen.lock().unwrap().len(), 1);
        // Three seconds of life: asked again halfway.
        tokio::time::sleep(std::time::Duration::from_millis(1700)).await;
        source.get().await.unwrap();
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn web_identity_reads_the_token_at_each_call() {
        let (port, seen) = one_answer_server(200, answer("2999-01-01T00:00:00Z")).await;
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        let w = CredentialSource::WebIdentity(WebIdentity {
            profile: None,
            request: RoleRequest {
                role_arn: "arn:w".into(),
                session_name: "s".into(),
                external_id: None,
                duration_seconds: None,
            },
            token_file: token_file.clone(),
            sts: StsEndpoint {
                url: format!("http://127.0.0.1:{port}"),
                region: "r".into(),
            },
        });
        let e = fetch(&client(), &w).await.unwrap_err();
        assert!(
            e.contains("cannot read the token file") && e.contains("arn:w"),
            "{e}"
        );
        for t in ["first\n", "second"] {
            std::fs::write(&token_file, t).unwrap();
            fetch(&client(), &w).await.unwrap();
        }
        let seen = seen.lock().unwrap();
        assert!(
            !seen[0].to_ascii_lowercase().contains("authorization:"),
            "unsigned"
        );
        assert!(seen[0].ends_with("WebIdentityToken=first"), "{}", seen[0]);
        assert!(seen[1].ends_with("WebIdentityToken=second"), "{}", seen[1]);
    }

    /// A server on 127.0.0.1 that gives `answers` in turn (the last one
    /// again after), one per connection; counts the requests.
    async fn answers_in_turn(answers: Vec<(u16, String)>) -> (u16, Arc<Mutex<usize>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let count = Arc::new(Mutex::new(0usize));
        let keep = count.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                // The headers and whatever came with them (the bodies here are small).
                if read_head(&mut s).await.is_none() {
                    continue;
                }
                let n = {
                    let mut c = keep.lock().unwrap();
                    *c += 1;
                    *c
                };
                let (status, body) = answers[(n - 1).min(answers.len() - 1)].clone();
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        (port, count)
    }

    #[tokio::test]
    async fn sts_5xx_and_throttling_are_tried_again() {
        let throttled = "<ErrorResponse><Error><Code>Throttling</Code><Message>Rate exceeded</Message></Error></ErrorResponse>".to_string();
        let (port, count) = answers_in_turn(vec![
            (503, String::new()),
            (400, throttled.clone()),
            (200, answer("2999-01-01T00:00:00Z")),
        ])
        .await;
        let got = fetch(&client(), &role(port, keys())).await.unwrap();
        assert_eq!(got.credentials.access_key, "ASIA1");
        assert_eq!(*count.lock().unwrap(), 3);
        // Three attempts at most, and the last answer said.
        let (port, count) = answers_in_turn(vec![(400, throttled)]).await;
        let e = fetch(&client(), &role(port, keys())).await.unwrap_err();
        assert!(
            e.contains("Throttling") && e.contains("after 3 attempts"),
            "{e}"
        );
        assert_eq!(*count.lock().unwrap(), 3);
        // A refusal is not tried again.
        let denied = "<ErrorResponse><Error><Code>AccessDenied</Code><Message>no</Message></Error></ErrorResponse>".to_string();
        let (port, count) = answers_in_turn(vec![(403, denied)]).await;
        fetch(&client(), &role(port, keys())).await.unwrap_err();
        assert_eq!(*count.lock().unwrap(), 1);
        // The container endpoint too.
        let (port, count) = answers_in_turn(vec![
            (500, String::new()),
            (200, r#"{"AccessKeyId":"C","SecretAccessKey":"c"}"#.into()),
        ])
        .await;
        let c = CredentialSource::Container(ContainerEndpoint {
            url: format!("http://127.0.0.1:{port}/creds"),
            auth_token_file: None,
            auth_token: None,
        });
        assert_eq!(
            fetch(&client(), &c).await.unwrap().credentials.access_key,
            "C"
        );
        assert_eq!(*count.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn container_endpoint_with_a_token_file() {
        let (port, seen) = one_answer_server(
            200,
            r#"{"AccessKeyId":"C","SecretAccessKey":"c","Token":"ct","Expiration":"2999-01-01T00:00:00Z"}"#.into(),
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let tf = dir.path().join("tok");
        std::fs::write(&tf, "filetoken\n").unwrap();
        let c = CredentialSource::Container(ContainerEndpoint {
            url: format!("http://127.0.0.1:{port}/creds"),
            auth_token_file: Some(tf),
            auth_token: Some("envtoken".into()),
        });
        let got = fetch(&client(), &c).await.unwrap();
        assert_eq!(got.credentials.session_token.as_deref(), Some("ct"));
        let req = seen.lock().unwrap()[0].clone();
        assert!(req.starts_with("GET /creds HTTP/1.1"), "{req}");
        assert!(
            req.to_ascii_lowercase()
                .contains("authorization: filetoken\r\n"),
            "{req}"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod imds_tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const KEYS: &str = r#"{"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"AKIMDS","SecretAccessKey":"s","Token":"t","Expiration":"2999-01-01T00:00:00Z"}"#;

    /// A fake IMDS on 127.0.0.1: the token PUT answered `put_status`
    /// (200 with the token `tok`), the role list and keys answered only
    /// with that token when `v2_only`; keeps each request's first line
    /// and whether it had the token.
    async fn fake_imds(put_status: u16, v2_only: bool) -> (u16, Arc<Mutex<Vec<String>>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let keep = keep.clone();
                tokio::spawn(async move {
                    loop {
                        let Some(buf) = read_head(&mut s).await else {
                            return;
                        };
                        let req = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                        let line = req.lines().next().unwrap_or_default().to_string();
                        let has_token = req.contains("x-aws-ec2-metadata-token: tok\r\n");
                        keep.lock()
                            .unwrap()
                            .push(format!("{line} token={has_token}"));
                        let (status, body) = if line.starts_with("put /latest/api/token") {
                            let ttl = req.contains("x-aws-ec2-metadata-token-ttl-seconds: 21600");
                            match put_status {
                                200 if ttl => (200, "tok".to_string()),
                                200 => (400, String::new()),
                                s => (s, String::new()),
                            }
                        } else if v2_only && !has_token {
                            (401, String::new())
                        } else if line
                            .starts_with("get /latest/meta-data/iam/security-credentials/ ")
                        {
                            (200, "the-role\n".to_string())
                        } else if line
                            .starts_with("get /latest/meta-data/iam/security-credentials/the-role ")
                        {
                            (200, KEYS.to_string())
                        } else {
                            (404, String::new())
                        };
                        let resp = format!(
                            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, seen)
    }

    fn imds_at(port: u16) -> Imds {
        Imds {
            endpoint: format!("http://127.0.0.1:{port}"),
            timeout: Duration::from_secs(1),
            attempts: 1,
            v1_fallback: true,
            last_link: true,
        }
    }

    fn client() -> Client {
        Client::new(ferry_http::Options {
            netrc: false,
            env_proxy: false,
            ..ferry_http::Options::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn v2_token_then_role_then_keys() {
        let (port, seen) = fake_imds(200, true).await;
        let c = imds_credentials(&client(), &imds_at(port)).await.unwrap();
        assert_eq!(c.credentials.access_key, "AKIMDS");
        assert_eq!(c.credentials.session_token.as_deref(), Some("t"));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "put /latest/api/token http/1.1 token=false",
                "get /latest/meta-data/iam/security-credentials/ http/1.1 token=true",
                "get /latest/meta-data/iam/security-credentials/the-role http/1.1 token=true",
            ]
        );
    }

    #[tokio::test]
    async fn v1_only_after_403_404_405_and_unless_turned_off() {
        for s in [403, 404, 405] {
            let (port, seen) = fake_imds(s, false).await;
            let c = imds_credentials(&client(), &imds_at(port)).await.unwrap();
            assert_eq!(c.credentials.access_key, "AKIMDS");
            assert!(seen.lock().unwrap()[1].ends_with("token=false"));
        }
        let (port, seen) = fake_imds(405, false).await;
        let mut i = imds_at(port);
        i.v1_fallback = false;
        let e = imds_credentials(&client(), &i).await.unwrap_err();
        assert!(
            e.contains("405") && e.contains("AWS_EC2_METADATA_V1_DISABLED"),
            "{e}"
        );
        assert_eq!(seen.lock().unwrap().len(), 1);
        // 400 (a bad TTL) is an error, not a reason for v1.
        let (port, _) = fake_imds(400, false).await;
        let e = imds_credentials(&client(), &imds_at(port))
            .await
            .unwrap_err();
        assert!(e.contains("HTTP 400"), "{e}");
    }

    #[tokio::test]
    async fn nothing_listening_ends_at_once() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t = Instant::now();
        let e = imds_credentials(&client(), &imds_at(dead))
            .await
            .unwrap_err();
        assert!(
            t.elapsed() < Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );
        assert!(
            e.contains(&format!("127.0.0.1:{dead}")) && e.contains("AWS_EC2_METADATA_DISABLED"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_silent_server_costs_a_timeout_per_request() {
        // Accepts and never answers: the PUT times out after connecting,
        // so (as botocore) IMDSv1 is tried, and times out too.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let mut i = imds_at(port);
        i.timeout = Duration::from_millis(300);
        let t = Instant::now();
        let e = imds_credentials(&client(), &i).await.unwrap_err();
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(550) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        assert!(e.contains("no answer within 0.3 s"), "{e}");
        // v1 off: one timeout.
        i.v1_fallback = false;
        let t = Instant::now();
        imds_credentials(&client(), &i).await.unwrap_err();
        assert!(
            t.elapsed() < Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );
    }

    #[tokio::test]
    async fn a_5xx_is_tried_again_with_more_attempts() {
        // The first request (the token PUT) gets a 503, the rest work.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(0usize));
        let keep = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let line = String::from_utf8_lossy(&buf[..n]).to_string();
                let k = {
                    let mut c = keep.lock().unwrap();
                    *c += 1;
                    *c
                };
                let (status, body) = if k == 1 {
                    (503, "")
                } else if line.starts_with("PUT") {
                    (200, "tok")
                } else if line.starts_with("GET /latest/meta-data/iam/security-credentials/ ") {
                    (200, "the-role")
                } else {
                    (200, KEYS)
                };
                let r = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(r.as_bytes()).await;
            }
        });
        // One attempt (the default): the 503 is the answer, an error.
        let e = imds_credentials(&client(), &imds_at(port))
            .await
            .unwrap_err();
        assert!(e.contains("HTTP 503"), "{e}");
        *seen.lock().unwrap() = 0;
        let mut i = imds_at(port);
        i.attempts = 2;
        let c = imds_credentials(&client(), &i).await.unwrap();
        assert_eq!(c.credentials.access_key, "AKIMDS");
        assert_eq!(*seen.lock().unwrap(), 4);
    }

    #[tokio::test]
    async fn no_role_is_said() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let r = if buf.starts_with(b"PUT") {
                    "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\ntok"
                } else {
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                };
                let _ = s.write_all(r.as_bytes()).await;
            }
        });
        let e = imds_credentials(&client(), &imds_at(port))
            .await
            .unwrap_err();
        assert!(e.contains("no IAM role") && e.contains("404"), "{e}");
    }
}
