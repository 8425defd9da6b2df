//! The credentials S3 requests are signed with: none, fixed keys, or a
//! source that is asked again shortly before the keys it gave expire
//! (`Expiration`), so a long transfer does not fail midway: the
//! application's provider (`S3Options::provider`) or what the AWS chain
//! leads to (a `role_arn` profile, web identity, a `credential_process`,
//! container credentials: `s3_sts`), asked when the backend opens. Requests in flight
//! share one value; one of them asks the source while the others that need
//! new credentials wait for it. A store that answers `ExpiredToken` makes
//! the source be asked once more at once (docs/internals/s3.md,
//! "Credentials").
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ferry_http::Client;

use super::s3_sts::SourceProvider;
use crate::error::TransferError;
use crate::s3::process::{self, CredentialProcess, ProcessCredentials};
use crate::s3::{Config, CredentialSource, Credentials, CredentialsProvider, ExpiringCredentials};

/// The process's output read at most.
const STDOUT_MAX: u64 = 1 << 20;
/// The end of its stderr quoted in an error.
const STDERR_QUOTED: usize = 2048;
/// After a refresh fails while the credentials still work, the next try.
const RETRY_REFRESH: Duration = Duration::from_secs(10);

pub(crate) enum CredSource {
    None,
    /// Unsigned because the chain's last link, EC2 instance metadata,
    /// gave nothing: why (for the messages of refused requests).
    NoneAfterImds(String),
    Static(Arc<Credentials>),
    Refreshing(Box<Refreshing>),
}

pub(crate) struct Refreshing {
    provider: CredentialsProvider,
    /// Where the keys come from, for messages.
    what: String,
    /// The application's provider: its errors get `what` in front (the
    /// process's errors name it already).
    prefix: bool,
    state: Mutex<State>,
    /// Held by the request that asks the source.
    refresh: tokio::sync::Mutex<()>,
}

struct State {
    creds: Arc<Credentials>,
    expiration: Option<SystemTime>,
    refresh_at: Option<SystemTime>,
}

impl State {
    fn fresh(&self, now: SystemTime) -> bool {
        self.refresh_at.is_none_or(|r| now < r)
    }
}

impl CredSource {
    /// From a resolved config; the provider or the chain's source is
    /// asked now, once. `client` makes the source's requests (STS, the
    /// container endpoint).
    pub(crate) async fn open(cfg: &Config, client: &Client) -> Result<CredSource, TransferError> {
        if let Some(c) = &cfg.creds {
            return Ok(CredSource::Static(Arc::new(c.clone())));
        }
        let last_link = match &cfg.creds_source {
            Some(CredentialSource::Imds(i)) if i.last_link => Some(i.endpoint.clone()),
            _ => None,
        };
        // Another backend of this run asked IMDS a moment ago and got
        // nothing: not asked again (a copy between two buckets waits
        // once, not twice).
        if let (Some(endpoint), None) = (&last_link, &cfg.provider) {
            if let Some(why) = imds_gave_nothing(endpoint, None) {
                return no_credentials(cfg, why);
            }
        }
        let (provider, prefix) = match (&cfg.provider, &cfg.creds_source) {
            (Some(p), _) => (p.clone(), true),
            // Its errors name the profile, role or endpoint already.
            (None, Some(source)) => (
                CredentialsProvider::new(SourceProvider::new(source.clone(), client.clone())),
                false,
            ),
            (None, None) => return Ok(CredSource::None),
        };
        match Refreshing::open(provider, cfg.creds_from.clone(), prefix).await {
            Ok(r) => Ok(CredSource::Refreshing(Box::new(r))),
            // Nothing else held credentials and IMDS gave none: as
            // before IMDS was asked (unsigned, or no credentials).
            Err(TransferError::Auth(why)) if last_link.is_some() && cfg.provider.is_none() => {
                if let Some(endpoint) = &last_link {
                    imds_gave_nothing(endpoint, Some(&why));
                }
                no_credentials(cfg, why)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn is_none(&self) -> bool {
        matches!(self, CredSource::None | CredSource::NoneAfterImds(_))
    }

    /// Why there are no credentials, when EC2 instance metadata said.
    pub(crate) fn imds_note(&self) -> Option<&str> {
        match self {
            CredSource::NoneAfterImds(why) => Some(why),
            _ => None,
        }
    }

    /// The source can give new credentials (asked again on `ExpiredToken`).
    pub(crate) fn refreshable(&self) -> bool {
        matches!(self, CredSource::Refreshing(_))
    }

    /// The credentials to sign a request with now.
    pub(crate) async fn get(&self) -> Result<Option<Arc<Credentials>>, TransferError> {
        match self {
            CredSource::None | CredSource::NoneAfterImds(_) => Ok(None),
            CredSource::Static(c) => Ok(Some(c.clone())),
            CredSource::Refreshing(p) => p.obtain(None).await.map(Some),
        }
    }

    /// New credentials after the store refused `stale` as expired: the
    /// source is asked at once, unless another request already replaced
    /// them. Fixed keys cannot be renewed: they come back as they are.
    pub(crate) async fn renew(
        &self,
        stale: &Arc<Credentials>,
    ) -> Result<Option<Arc<Credentials>>, TransferError> {
        match self {
            CredSource::Refreshing(p) => p.obtain(Some(stale)).await.map(Some),
            _ => self.get().await,
        }
    }
}

/// How long a run remembers that IMDS gave nothing.
const IMDS_NOTHING_KEPT: Duration = Duration::from_secs(60);

/// What IMDS at `endpoint` said when it last gave nothing, if in the last
/// minute; `record`: it gave nothing now, saying so.
fn imds_gave_nothing(endpoint: &str, record: Option<&str>) -> Option<String> {
    type Seen = Option<(String, std::time::Instant, String)>;
    static LAST: Mutex<Seen> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = record {
        *last = Some((
            endpoint.to_string(),
            std::time::Instant::now(),
            why.to_string(),
        ));
        return None;
    }
    last.as_ref()
        .filter(|(e, at, _)| e == endpoint && at.elapsed() < IMDS_NOTHING_KEPT)
        .map(|(_, _, why)| why.clone())
}

/// The chain's last link, IMDS, gave nothing (`why`): unsigned requests
/// when the options allow them, else a usage error saying what was
/// looked at.
fn no_credentials(cfg: &Config, why: String) -> Result<CredSource, TransferError> {
    if cfg.anonymous {
        tracing::debug!("{why}; S3 requests go unsigned");
        Ok(CredSource::NoneAfterImds(why))
    } else {
        Err(TransferError::Usage(format!(
            "S3 needs credentials and found none: not in the AWS_* variables nor the profile's settings in ~/.aws, no container endpoint, and {why}"
        )))
    }
}

impl Refreshing {
    pub(crate) async fn open(
        provider: CredentialsProvider,
        what: String,
        prefix: bool,
    ) -> Result<Refreshing, TransferError> {
        let got = fetch(&provider, &what, prefix)
            .await
            .map_err(TransferError::Auth)?;
        let now = SystemTime::now();
        Ok(Refreshing {
            state: Mutex::new(State {
                creds: Arc::new(got.credentials),
                expiration: got.expiration,
                refresh_at: process::refresh_at(now, got.expiration),
            }),
            provider,
            what,
            prefix,
            refresh: tokio::sync::Mutex::new(()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current credentials, asking the source first when they are due
    /// for a refresh, or (`stale`) when the store refused these as expired.
    async fn obtain(
        &self,
        stale: Option<&Arc<Credentials>>,
    ) -> Result<Arc<Credentials>, TransferError> {
        let usable = |st: &State| {
            st.fresh(SystemTime::now()) && stale.is_none_or(|s| !Arc::ptr_eq(s, &st.creds))
        };
        {
            let st = self.lock();
            if usable(&st) {
                return Ok(st.creds.clone());
            }
        }
        let _running = self.refresh.lock().await;
        {
            // Another request may have asked while this one waited.
            let st = self.lock();
            if usable(&st) {
                return Ok(st.creds.clone());
            }
        }
        match stale {
            None => tracing::debug!(
                "S3 credentials from {} expire soon; asking for new ones",
                self.what
            ),
            Some(_) => tracing::info!(
                "the S3 store says the credentials from {} have expired; asking for new ones",
                self.what
            ),
        }
        let res = fetch(&self.provider, &self.what, self.prefix).await;
        let now = SystemTime::now();
        let mut st = self.lock();
        match res {
            Ok(got) => {
                st.creds = Arc::new(got.credentials);
                st.expiration = got.expiration;
                st.refresh_at = process::refresh_at(now, got.expiration);
                Ok(st.creds.clone())
            }
            // The old ones still work for a while: use them, try again soon.
            Err(e) if stale.is_none() && st.expiration.is_some_and(|x| now < x) => {
                tracing::warn!("{e}; the current S3 credentials are used until they expire");
                let exp = st.expiration.unwrap_or(now);
                st.refresh_at = Some((now + RETRY_REFRESH).min(exp));
                Ok(st.creds.clone())
            }
            Err(e) => Err(TransferError::Auth(e)),
        }
    }
}

/// Ask `provider` once; keys that have already expired are an error.
async fn fetch(
    provider: &CredentialsProvider,
    what: &str,
    prefix: bool,
) -> Result<ExpiringCredentials, String> {
    let got = provider.get().await.map_err(|e| {
        if prefix {
            format!("S3 credentials from {what}: {e}")
        } else {
            e
        }
    })?;
    if let Some(exp) = got.expiration {
        if exp <= SystemTime::now() {
            return Err(format!(
                "S3 credentials from {what}: they have already expired (expiration {})",
                httpdate::fmt_http_date(exp)
            ));
        }
    }
    Ok(got)
}

fn what(spec: &CredentialProcess) -> String {
    format!(
        "S3 credentials: credential_process of profile {:?} ({})",
        spec.profile, spec.command
    )
}

/// Run the process: its words as the AWS CLI splits them, no shell; stdin
/// and stderr are the user's (tools prompt there; stderr is also kept to
/// quote in an error), stdout is the JSON.
pub(crate) fn run(spec: &CredentialProcess) -> Result<ProcessCredentials, String> {
    let what = what(spec);
    let words = process::split_words(&spec.command).map_err(|e| format!("{what}: {e}"))?;
    let Some((prog, args)) = words.split_first() else {
        return Err(format!("{what}: no command"));
    };
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: cannot run {prog}: {e}"))?;
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut kept: Vec<u8> = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match err.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut e = std::io::stderr().lock();
                        let _ = e.write_all(&buf[..n]);
                        let _ = e.flush();
                        kept.extend_from_slice(&buf[..n]);
                        if kept.len() > 2 * STDERR_QUOTED {
                            kept.drain(..kept.len() - STDERR_QUOTED);
                        }
                    }
                }
            }
            kept
        })
    });
    let mut out = Vec::new();
    let read = match child.stdout.take() {
        Some(o) => o.take(STDOUT_MAX + 1).read_to_end(&mut out),
        None => Ok(0),
    };
    if out.len() as u64 > STDOUT_MAX {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| format!("{what}: {e}"))?;
    let kept = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let tail = quoted_tail(&kept);
    if !status.success() {
        return Err(format!("{what} failed ({status}){tail}"));
    }
    read.map_err(|e| format!("{what}: reading its output: {e}"))?;
    if out.len() as u64 > STDOUT_MAX {
        return Err(format!("{what}: its output is over {STDOUT_MAX} bytes"));
    }
    // Keys that have already expired are refused where every provider's
    // are (`fetch`).
    process::parse_output(&out).map_err(|e| format!("{what}: {e}{tail}"))
}

/// `; its stderr: ...` with the last lines the process wrote, if any.
fn quoted_tail(kept: &[u8]) -> String {
    let start = kept.len().saturating_sub(STDERR_QUOTED);
    let text = String::from_utf8_lossy(&kept[start..]);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else if start > 0 {
        format!("; its stderr ends: ...{text}")
    } else {
        format!("; its stderr: {text}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::s3::ProvideCredentials;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Gives `K1`, `K2`, ... each time it is asked, valid for `life`;
    /// fails once `fail_from` answers were given.
    struct Counting {
        calls: Arc<AtomicUsize>,
        life: Option<Duration>,
        fail_from: usize,
    }

    #[async_trait::async_trait]
    impl ProvideCredentials for Counting {
        async fn provide_credentials(&self) -> Result<ExpiringCredentials, String> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            // Let concurrent askers pile up behind the refresh lock.
            tokio::time::sleep(Duration::from_millis(20)).await;
            if n > self.fail_from {
                return Err("the token service is down".into());
            }
            Ok(ExpiringCredentials {
                credentials: Credentials::new(format!("K{n}"), "s"),
                expiration: self.life.map(|l| SystemTime::now() + l),
            })
        }
    }

    async fn source(life: Option<Duration>, fail_from: usize) -> (CredSource, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let p = CredentialsProvider::new(Counting {
            calls: calls.clone(),
            life,
            fail_from,
        });
        let r = Refreshing::open(p, "the test provider".into(), true)
            .await
            .unwrap();
        (CredSource::Refreshing(Box::new(r)), calls)
    }

    async fn key(s: &CredSource) -> String {
        s.get().await.unwrap().unwrap().access_key.clone()
    }

    #[tokio::test]
    async fn provider_asked_once_then_before_expiry() {
        // No expiry: asked when opened, never again.
        let (s, calls) = source(None, 99).await;
        for _ in 0..3 {
            assert_eq!(key(&s).await, "K1");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // A 2 s life is refreshed halfway: at once after 1.1 s.
        let (s, calls) = source(Some(Duration::from_secs(2)), 99).await;
        assert_eq!(key(&s).await, "K1");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(key(&s).await, "K2");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn expired_token_renews_once_for_all_requests() {
        let (s, calls) = source(Some(Duration::from_secs(3600)), 99).await;
        let stale = s.get().await.unwrap().unwrap();
        // Eight requests refused with the same keys: one new fetch.
        let renewed = futures_util::future::join_all((0..8).map(|_| s.renew(&stale))).await;
        for r in renewed {
            assert_eq!(r.unwrap().unwrap().access_key, "K2");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // A request that still held K1 gets K2 without another fetch.
        assert_eq!(s.renew(&stale).await.unwrap().unwrap().access_key, "K2");
        assert_eq!(key(&s).await, "K2");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn failed_renewal_is_an_auth_error() {
        // The keys have an hour left by the clock, but the store said they
        // expired: a failed fetch is the request's error, not the old keys.
        let (s, _) = source(Some(Duration::from_secs(3600)), 1).await;
        let stale = s.get().await.unwrap().unwrap();
        match s.renew(&stale).await {
            Err(TransferError::Auth(m)) => {
                assert!(m.contains("the test provider") && m.contains("down"), "{m}")
            }
            other => panic!("{:?}", other.map(|c| c.map(|c| c.access_key.clone()))),
        }
        // A scheduled refresh that fails keeps the old keys while they last.
        let (s, calls) = source(Some(Duration::from_secs(2)), 1).await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(key(&s).await, "K1");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn fixed_keys_are_not_renewed() {
        let s = CredSource::Static(Arc::new(Credentials::new("A", "s")));
        assert!(!s.refreshable());
        let c = s.get().await.unwrap().unwrap();
        assert_eq!(s.renew(&c).await.unwrap().unwrap().access_key, "A");
    }

    #[tokio::test]
    async fn provider_errors_and_expired_answers() {
        let calls = Arc::new(AtomicUsize::new(0));
        let p = CredentialsProvider::new(Counting {
            calls,
            life: None,
            fail_from: 0,
        });
        let Err(TransferError::Auth(m)) = Refreshing::open(p, "app".into(), true).await else {
            panic!("opened")
        };
        assert_eq!(m, "S3 credentials from app: the token service is down");
        let p = CredentialsProvider::blocking(|| {
            Ok(ExpiringCredentials {
                credentials: Credentials::new("A", "s"),
                expiration: Some(SystemTime::now() - Duration::from_secs(1)),
            })
        });
        let Err(TransferError::Auth(m)) = Refreshing::open(p, "app".into(), true).await else {
            panic!("opened")
        };
        assert!(m.contains("already expired"), "{m}");
    }
}
