//! Following a [`CredentialSource`] for keys: STS `AssumeRole` (signed
//! with the source's keys, fetched first) and `AssumeRoleWithWebIdentity`
//! (unsigned; the token file read again at each call), the container
//! credentials endpoint, a `credential_process`. Requests go over the S3
//! backend's own HTTP client, so STS gets the same TLS trust
//! (`AWS_CA_BUNDLE`, `--cacert`) and proxies. Wrapped by `s3_creds` in
//! the refresh logic every provider shares: asked when the backend opens
//! and again before the keys expire.
use bytes::Bytes;
use ferry_http::{Client, HeaderMap, HeaderValue, Method, Url};
use futures_util::future::BoxFuture;

use super::s3_creds;
use crate::s3::chain::{self, AssumeRole, ContainerEndpoint, CredentialSource, WebIdentity};
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

/// POST `body` to STS, signed with `signer` (none: unsigned), and the
/// answer's body when it is a success.
async fn sts_call(
    client: &Client,
    sts: &StsEndpoint,
    body: String,
    signer: Option<&Credentials>,
) -> Result<Vec<u8>, String> {
    let mut url = Url::parse(&sts.url).map_err(|e| format!("STS endpoint {}: {e}", sts.url))?;
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
        let mut v = header(&auth).map_err(|e| format!("the source credentials: {e}"))?;
        v.set_sensitive(true);
        headers.insert("authorization", v);
    }
    for (k, v) in signed.iter().filter(|(k, _)| k != "host") {
        let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| e.to_string())?;
        headers.insert(name, header(v).map_err(|e| format!("{k}: {e}"))?);
    }
    let bytes = Bytes::from(body);
    let make = move || body_of(bytes.clone());
    let resp = client
        .send(Method::POST, &url, &headers, Some(&make))
        .await
        .map_err(|e| format!("STS at {}: {e}", sts.url))?;
    let status = resp.status;
    let answer = resp
        .bytes(sts::ANSWER_MAX)
        .await
        .map_err(|e| format!("STS at {}: reading the answer: {e}", sts.url))?;
    if status.is_success() {
        return Ok(answer);
    }
    Err(match sts::parse_error(&answer) {
        Some((code, message)) => format!(
            "STS at {} refused (HTTP {}, {code}: {message}); {}",
            sts.url,
            status.as_u16(),
            sts::advice(&code)
        ),
        None => format!(
            "STS at {} answered HTTP {} with no STS error in the body; check the STS endpoint (AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, the profile's endpoint_url)",
            sts.url,
            status.as_u16()
        ),
    })
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
    let resp = client
        .get(&url, &headers)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let status = resp.status;
    let body = resp
        .bytes(sts::ANSWER_MAX)
        .await
        .map_err(|e| format!("{what}: reading the answer: {e}"))?;
    if !status.is_success() {
        return Err(format!(
            "{what} answered HTTP {}; check AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE) and the task's or pod's role",
            status.as_u16()
        ));
    }
    chain::parse_container_answer(&body).map_err(|e| format!("{what}: {e}"))
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
