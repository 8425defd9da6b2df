//! What the SSH layer would ask a person, asked through the application:
//! passwords, key passphrases, whether to trust a host key never seen
//! before, and notices the user should read (a host key was learned).
//!
//! The library never reads a terminal, an environment variable for a
//! secret, or prints: without a [`Prompt`], nothing is asked (no password,
//! no passphrase, unknown host keys refused unless `StrictHostKeyChecking`
//! says otherwise) and notices go to `tracing`. The `ferry` binary answers
//! on the terminal and from `FERRY_PASSWORD` / `FERRY_PASSPHRASE`.
use std::path::Path;
use std::sync::Arc;

/// Answers for one application. Every method has a default that asks
/// nothing.
pub trait Prompt: Send + Sync {
    /// The password for `who` (e.g. `alice@host`). `ask`: a person may be
    /// asked (false under `BatchMode`, or when not interactive).
    fn password(&self, _who: &str, _ask: bool) -> Option<String> {
        None
    }
    /// The passphrase of the private key at `key`.
    fn passphrase(&self, _key: &Path, _ask: bool) -> Option<String> {
        None
    }
    /// May a refused password be asked for again (a person typed it)?
    fn retry_password(&self) -> bool {
        false
    }
    /// A yes/no question (an unknown host key under
    /// `StrictHostKeyChecking ask`); `false` refuses.
    fn confirm(&self, _question: &str) -> bool {
        false
    }
    /// Something the user should read; the connection goes on.
    fn notice(&self, message: &str) {
        tracing::warn!("{message}");
    }
}

/// The application's [`Prompt`], if any; cheap to clone.
#[derive(Clone, Default)]
pub struct PromptHandle(pub Option<Arc<dyn Prompt>>);

impl std::fmt::Debug for PromptHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Prompt(..)"
        } else {
            "Prompt(none)"
        })
    }
}

impl PromptHandle {
    pub fn new(p: Arc<dyn Prompt>) -> PromptHandle {
        PromptHandle(Some(p))
    }
    pub fn password(&self, who: &str, ask: bool) -> Option<String> {
        self.0.as_ref().and_then(|p| p.password(who, ask))
    }
    pub fn passphrase(&self, key: &Path, ask: bool) -> Option<String> {
        self.0.as_ref().and_then(|p| p.passphrase(key, ask))
    }
    pub fn retry_password(&self) -> bool {
        self.0.as_ref().is_some_and(|p| p.retry_password())
    }
    pub fn confirm(&self, q: &str) -> bool {
        self.0.as_ref().is_some_and(|p| p.confirm(q))
    }
    pub fn notice(&self, m: &str) {
        match &self.0 {
            Some(p) => p.notice(m),
            None => tracing::warn!("{m}"),
        }
    }
}
