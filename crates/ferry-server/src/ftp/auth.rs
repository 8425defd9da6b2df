//! FTP login: any user name (or only `--user NAME`), the serve token as
//! the password; anonymous (`anonymous`, `ftp`) only for reading, and only
//! with `--public`.
//!
//! A refused login is logged with the peer's address and the user name,
//! never the password; the reply (`530 Authentication failed`) is the same
//! for every reason, comes after [`FAILED_LOGIN_PAUSE`], and no file is
//! looked at before a login succeeds.
use std::fmt;

use async_trait::async_trait;
use subtle::ConstantTimeEq;
use unftp_core::auth::{
    AuthenticationError, Authenticator, Credentials, Principal, UserDetail, UserDetailError,
    UserDetailProvider,
};

/// How long a refused login waits before its `530` by default
/// (`ferry serve --auth-fail-delay`).
pub const FAILED_LOGIN_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// A logged-in session's user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FtpUser {
    pub name: String,
    /// Uploads, renames and deletes allowed.
    pub writable: bool,
}

impl fmt::Display for FtpUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl UserDetail for FtpUser {}

/// The names FTP clients send for an anonymous login (RFC 1635).
pub fn is_anonymous(name: &str) -> bool {
    name.eq_ignore_ascii_case("anonymous") || name.eq_ignore_ascii_case("ftp")
}

/// Checks logins against the serve token.
#[derive(Clone)]
pub struct TokenAuth {
    pub token: String,
    pub user: Option<String>,
    pub writable: bool,
    pub public: bool,
    /// Pause before a refused login's `530` ([`FAILED_LOGIN_PAUSE`] by
    /// default).
    pub fail_delay: std::time::Duration,
}

impl fmt::Debug for TokenAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenAuth")
            .field("user", &self.user)
            .field("writable", &self.writable)
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl TokenAuth {
    /// The decision, without the logging: `Err` carries why, for the log.
    pub fn check(&self, name: &str, password: Option<&str>) -> Result<FtpUser, &'static str> {
        if is_anonymous(name) {
            return if self.public {
                Ok(FtpUser {
                    name: "anonymous".into(),
                    writable: false,
                })
            } else {
                Err("anonymous login (serve with --public to allow read-only anonymous access)")
            };
        }
        if self.user.as_deref().is_some_and(|u| u != name) {
            return Err("user name not allowed (--user)");
        }
        let given = password.unwrap_or("").as_bytes();
        if bool::from(given.ct_eq(self.token.as_bytes())) {
            Ok(FtpUser {
                name: name.to_string(),
                writable: self.writable,
            })
        } else {
            Err("wrong password (the password is the serve token)")
        }
    }
}

/// libunftp asks the [`Authenticator`] for a [`Principal`] (the name),
/// then the [`UserDetailProvider`] for the session's user.
#[async_trait]
impl Authenticator for TokenAuth {
    async fn authenticate(
        &self,
        username: &str,
        creds: &Credentials,
    ) -> Result<Principal, AuthenticationError> {
        match self.check(username, creds.password.as_deref()) {
            Ok(u) => {
                tracing::info!(peer = %creds.source_ip, user = %u.name, "ftp: logged in");
                Ok(Principal { username: u.name })
            }
            Err(why) => {
                tracing::warn!(peer = %creds.source_ip, user = %username.escape_debug(), "ftp: login refused: {why}");
                // One guess per second per connection (and --max-connections
                // connections): slow enough for a 192-bit token to be safe,
                // and a human who mistyped barely notices.
                tokio::time::sleep(self.fail_delay).await;
                Err(AuthenticationError::BadPassword)
            }
        }
    }

    fn name(&self) -> &str {
        "ferry-token"
    }
}

/// One control connection's authenticator: [`TokenAuth`], and on success
/// the connection's slot among those not logged in is released and its
/// login grace timer stopped (`crate::login`).
#[derive(Debug)]
pub struct SessionAuth {
    pub inner: std::sync::Arc<TokenAuth>,
    pub login: std::sync::Arc<crate::login::Login>,
}

#[async_trait]
impl Authenticator for SessionAuth {
    async fn authenticate(
        &self,
        username: &str,
        creds: &Credentials,
    ) -> Result<Principal, AuthenticationError> {
        let r = self.inner.authenticate(username, creds).await;
        if r.is_ok() {
            self.login.succeeded();
        }
        r
    }

    fn name(&self) -> &str {
        "ferry-token"
    }
}

#[async_trait]
impl UserDetailProvider for TokenAuth {
    type User = FtpUser;

    async fn provide_user_detail(&self, p: &Principal) -> Result<FtpUser, UserDetailError> {
        // Only a name that passed `authenticate` gets here; anonymous was
        // renamed `anonymous` there, and never writes.
        Ok(FtpUser {
            writable: self.writable && !is_anonymous(&p.username),
            name: p.username.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn auth(public: bool, user: Option<&str>) -> TokenAuth {
        TokenAuth {
            token: "s3cret".into(),
            user: user.map(str::to_string),
            writable: true,
            public,
            fail_delay: FAILED_LOGIN_PAUSE,
        }
    }

    #[test]
    fn token_is_the_password_for_any_name() {
        let a = auth(false, None);
        assert!(a.check("alice", Some("s3cret")).unwrap().writable);
        assert!(a.check("bob", Some("s3cret")).is_ok());
        assert!(a.check("alice", Some("s3cre")).is_err());
        assert!(a.check("alice", Some("")).is_err());
        assert!(a.check("alice", None).is_err());
    }

    #[test]
    fn only_the_named_user_with_user_flag() {
        let a = auth(false, Some("alice"));
        assert!(a.check("alice", Some("s3cret")).is_ok());
        assert!(a.check("bob", Some("s3cret")).is_err());
    }

    #[test]
    fn anonymous_only_with_public_and_read_only() {
        assert!(auth(false, None).check("anonymous", Some("x@y")).is_err());
        assert!(auth(false, None).check("FTP", Some("s3cret")).is_err());
        let u = auth(true, None).check("anonymous", Some("x@y")).unwrap();
        assert!(!u.writable);
    }
}
