//! Errors of the HTTP client, in the classes the command line turns into
//! exit codes. Each names the URL and says what to do.

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A bad option or URL (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The server's certificate was not trusted, or credentials were
    /// refused (exit 3).
    #[error("{0}")]
    Trust(String),
    /// The server answered with an error status about a URL (exit 4).
    #[error("{url}: HTTP {status} {reason}{hint}")]
    Status {
        url: String,
        status: u16,
        reason: String,
        hint: String,
    },
    /// The server misbehaved about a URL: a redirect loop, a bad listing
    /// (exit 4).
    #[error("{0}")]
    Remote(String),
    /// Connection refused or lost, or the peer broke the protocol (exit 1).
    #[error("{0}")]
    Network(String),
}

impl HttpError {
    /// The error for a response status that is not a success.
    pub fn status(url: &str, status: http::StatusCode) -> HttpError {
        let code = status.as_u16();
        let hint = match code {
            401 => "; the server wants credentials: use --token, -u user:pass or ~/.netrc",
            403 => "; the server refuses access to this URL",
            404 => "; check the URL (a directory URL needs -r and a trailing /)",
            405 => "; the server does not allow this method here (uploads need a writable server, e.g. nginx dav or ferry serve --writable)",
            416 => "; the requested range is not in the file",
            500..=599 => "; the server failed, try again later",
            _ => "",
        };
        if code == 401 || code == 407 {
            return HttpError::Trust(format!(
                "{url}: HTTP {code} {}{hint}",
                status.canonical_reason().unwrap_or("")
            ));
        }
        HttpError::Status {
            url: url.to_string(),
            status: code,
            reason: status.canonical_reason().unwrap_or("").to_string(),
            hint: hint.to_string(),
        }
    }
}
