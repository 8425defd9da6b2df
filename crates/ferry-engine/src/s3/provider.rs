//! Credentials an application gives the S3 backend: keys that expire,
//! and the provider that fetches them ([`ProvideCredentials`], held in
//! [`CredentialsProvider`]), asked when the backend opens and again
//! before they expire. The profile's `credential_process` is one such
//! provider inside the engine (`backend::s3_creds`).
use std::sync::Arc;
use std::time::SystemTime;

use super::Credentials;

/// Keys, and when they stop working (`None`: they do not expire).
#[derive(Debug, Clone)]
pub struct ExpiringCredentials {
    pub credentials: Credentials,
    pub expiration: Option<SystemTime>,
}

impl ExpiringCredentials {
    /// Keys that do not expire.
    pub fn new(credentials: Credentials) -> ExpiringCredentials {
        ExpiringCredentials {
            credentials,
            expiration: None,
        }
    }
}

impl From<super::process::ProcessCredentials> for ExpiringCredentials {
    fn from(p: super::process::ProcessCredentials) -> Self {
        ExpiringCredentials {
            credentials: p.creds,
            expiration: p.expiration,
        }
    }
}

/// An application's source of S3 keys (an STS call, a vault, a token
/// service...). The backend asks once when it opens and again before the
/// keys expire: 5 minutes before `expiration`, or halfway through their
/// life when that is shorter than 10 minutes; also once early when the
/// store answers `ExpiredToken` (docs/internals/s3.md, "Credentials").
/// Requests in flight share one answer: one request asks while the
/// others that need new keys wait. An `Err` fails the requests that need
/// the keys with [`TransferError::Auth`](crate::TransferError::Auth) and
/// the message; when a refresh fails while the old keys still work, they
/// are used on and the provider asked again 10 s later.
#[async_trait::async_trait]
pub trait ProvideCredentials: Send + Sync {
    async fn provide_credentials(&self) -> Result<ExpiringCredentials, String>;
}

/// A [`ProvideCredentials`] to put in
/// [`S3Options::provider`](super::S3Options::provider).
#[derive(Clone)]
pub struct CredentialsProvider(Arc<dyn ProvideCredentials>);

impl CredentialsProvider {
    /// An async provider.
    pub fn new(p: impl ProvideCredentials + 'static) -> CredentialsProvider {
        CredentialsProvider(Arc::new(p))
    }

    /// A provider that blocks (reads a file, runs a command, makes a
    /// blocking HTTP call): run on tokio's blocking threads, so transfers
    /// on the same runtime go on meanwhile.
    pub fn blocking<F>(f: F) -> CredentialsProvider
    where
        F: Fn() -> Result<ExpiringCredentials, String> + Send + Sync + 'static,
    {
        CredentialsProvider(Arc::new(Blocking(Arc::new(f))))
    }

    pub(crate) async fn get(&self) -> Result<ExpiringCredentials, String> {
        self.0.provide_credentials().await
    }
}

impl std::fmt::Debug for CredentialsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialsProvider(..)")
    }
}

type BlockingFn = dyn Fn() -> Result<ExpiringCredentials, String> + Send + Sync;

struct Blocking(Arc<BlockingFn>);

#[async_trait::async_trait]
impl ProvideCredentials for Blocking {
    async fn provide_credentials(&self) -> Result<ExpiringCredentials, String> {
        let f = self.0.clone();
        tokio::task::spawn_blocking(move || f())
            .await
            .map_err(|e| format!("the credentials provider failed: {e}"))?
    }
}
