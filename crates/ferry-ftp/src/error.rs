//! FTP failures in the classes the engine turns into exit codes, each
//! naming the URL, with the server's reply code and text when it sent one.

/// What went wrong, already worded for the user.
#[derive(Debug, thiserror::Error)]
pub enum FtpError {
    /// Bad options (an unreadable --cacert, a bad --pin).
    #[error("{0}")]
    Usage(String),
    /// The server's certificate was not trusted.
    #[error("{0}")]
    Trust(String),
    /// Login refused (530).
    #[error("{0}")]
    Auth(String),
    /// The server refused a command about a file (a 5xx reply such as
    /// `550 Failed to open file.`).
    #[error("{what}: {code} {text}")]
    Reply {
        what: String,
        code: u32,
        text: String,
    },
    /// Something the server sent that ferry refuses (an endless listing).
    #[error("{0}")]
    Remote(String),
    /// Connection refused or lost, a transient 4xx reply, a protocol
    /// violation.
    #[error("{0}")]
    Network(String),
}

impl FtpError {
    /// The reply code, if the server refused.
    pub fn code(&self) -> Option<u32> {
        match self {
            FtpError::Reply { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// A refusal that means "no such file or not a plain file" (550) or
    /// "name not allowed" (553).
    pub fn is_not_found(&self) -> bool {
        matches!(self.code(), Some(550 | 553))
    }

    /// A failure of the connection rather than a refusal: worth another
    /// connection.
    pub fn is_network(&self) -> bool {
        matches!(self, FtpError::Network(_))
    }

    /// A login refused because the server already holds as many
    /// connections from this client as it allows: a `421` greeting
    /// (vsftpd's `max_per_ip`, pure-ftpd, FileZilla Server) or a `530`
    /// that says so (ProFTPD's `MaxClientsPerHost`). The connections
    /// already open still work: wait for one of them, as lftp lowers its
    /// connection limit on such a refusal.
    pub fn is_connection_limit(&self) -> bool {
        match self {
            FtpError::Network(m) => m.contains(": 421 "),
            FtpError::Auth(m) => {
                let m = m.to_ascii_lowercase();
                m.contains(" 530 ")
                    && ["too many", "maximum number", "connection limit"]
                        .iter()
                        .any(|w| m.contains(w))
            }
            _ => false,
        }
    }

    /// Wrap a suppaftp error about `what` (a URL).
    pub fn from_ftp(what: &str, e: suppaftp::FtpError) -> FtpError {
        use suppaftp::FtpError as E;
        match e {
            E::UnexpectedResponse(r) => {
                let code = r.status.code();
                let text = reply_text(&r.body, code);
                match code {
                    // Transient: service closing, cannot open or lost the
                    // data connection.
                    421 | 425 | 426 => {
                        FtpError::Network(format!("{what}: {code} {text}; run the copy again"))
                    }
                    530 => FtpError::Auth(format!("{what}: {code} {text}")),
                    _ => FtpError::Reply {
                        what: what.to_string(),
                        code,
                        text,
                    },
                }
            }
            E::ConnectionError(io) => io_error(what, io),
            E::SecureError(m) => FtpError::Network(format!("{what}: TLS: {m}")),
            E::BadResponse => {
                FtpError::Network(format!("{what}: the server sent a malformed reply"))
            }
            E::InvalidAddress(a) => FtpError::Network(format!(
                "{what}: the server gave an unusable passive address ({a})"
            )),
            E::DataConnectionAlreadyOpen => {
                FtpError::Network(format!("{what}: internal: a data connection is still open"))
            }
        }
    }
}

/// A socket error; a TLS failure inside it (rustls reports the handshake
/// on the first read) becomes the HTTP path's trust message.
pub(crate) fn io_error(what: &str, io: std::io::Error) -> FtpError {
    let tls = io
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .is_some();
    if tls {
        return match ferry_http::tls::handshake_error(what, io) {
            ferry_http::HttpError::Trust(m) => FtpError::Trust(m),
            other => FtpError::Network(other.to_string()),
        };
    }
    match io.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            FtpError::Network(format!("{what}: connection refused"))
        }
        std::io::ErrorKind::UnexpectedEof => {
            FtpError::Network(format!("{what}: the server closed the connection"))
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            FtpError::Network(format!("{what}: the server stopped answering (timeout)"))
        }
        _ => FtpError::Network(format!("{what}: connection lost: {io}")),
    }
}

/// The text of a reply without its code: `550 Failed to open file.\r\n`
/// -> `Failed to open file.`; lines of a multi-line reply joined by `; `.
pub(crate) fn reply_text(body: &[u8], code: u32) -> String {
    let s = String::from_utf8_lossy(body);
    let prefix = code.to_string();
    let lines: Vec<&str> = s
        .lines()
        .map(|l| {
            let l = l.trim();
            match l.strip_prefix(prefix.as_str()) {
                Some(rest) => rest.trim_start_matches(['-', ' ']),
                None => l,
            }
        })
        .filter(|l| !l.is_empty())
        .collect();
    let t = lines.join("; ");
    // A hostile server could send a huge reply: keep messages readable.
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", t.get(..i).unwrap_or("")),
        None => t,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reply_texts() {
        assert_eq!(
            reply_text(b"550 Failed to open file.\r\n", 550),
            "Failed to open file."
        );
        assert_eq!(
            reply_text(b"530-Login incorrect.\r\n530 Bye\r\n", 530),
            "Login incorrect.; Bye"
        );
        assert_eq!(reply_text(b"", 550), "");
    }

    #[test]
    fn connection_limits() {
        let reply = |code: u32, text: &str| {
            let body = format!("{code} {text}\r\n").into_bytes();
            let r = suppaftp::types::Response::new(suppaftp::Status::from(code), body);
            FtpError::from_ftp("ftp://h:21", suppaftp::FtpError::UnexpectedResponse(r))
        };
        // vsftpd's max_per_ip, ProFTPD's MaxClientsPerHost.
        let vsftpd = reply(
            421,
            "There are too many connections from your internet address.",
        );
        assert!(vsftpd.is_connection_limit());
        let proftpd = reply(
            530,
            "Sorry, the maximum number of clients (3) from your host are already connected.",
        );
        assert!(proftpd.is_connection_limit());
        assert!(!reply(530, "Login incorrect.").is_connection_limit());
        assert!(!reply(550, "Too many files.").is_connection_limit());
        assert!(!reply(426, "Connection closed; transfer aborted.").is_connection_limit());
    }
}
