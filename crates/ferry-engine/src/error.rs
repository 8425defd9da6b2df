//! Transfer errors, each in one of the classes the CLI turns into an exit
//! code, each saying which file or URL and what to do.
use ferry_ssh::{SftpError, SshError};

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The command line or config was wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Host key or authentication refused (exit 3).
    #[error("{0}")]
    Auth(String),
    /// The server answered with an error about a file (exit 4).
    #[error("{0}")]
    Remote(String),
    /// Reading or writing a local file failed (exit 5).
    #[error("{0}")]
    Local(String),
    /// Connection refused, lost, or a protocol failure (exit 1).
    #[error("{0}")]
    Network(String),
    /// The application (or Ctrl-C) cancelled the transfer (exit 130).
    #[error("{0}")]
    Cancelled(String),
}

/// The class of a failure, without its message: what an application
/// matches on, and what the CLI turns into an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    Usage,
    Auth,
    Remote,
    Local,
    Network,
    Cancelled,
}

impl TransferError {
    pub fn exit_code(&self) -> i32 {
        match self {
            TransferError::Usage(_) => 2,
            TransferError::Auth(_) => 3,
            TransferError::Remote(_) => 4,
            TransferError::Local(_) => 5,
            TransferError::Network(_) => 1,
            TransferError::Cancelled(_) => 130,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            TransferError::Usage(_) => ErrorKind::Usage,
            TransferError::Auth(_) => ErrorKind::Auth,
            TransferError::Remote(_) => ErrorKind::Remote,
            TransferError::Local(_) => ErrorKind::Local,
            TransferError::Network(_) => ErrorKind::Network,
            TransferError::Cancelled(_) => ErrorKind::Cancelled,
        }
    }

    pub fn from_kind(kind: ErrorKind, message: String) -> TransferError {
        match kind {
            ErrorKind::Usage => TransferError::Usage(message),
            ErrorKind::Auth => TransferError::Auth(message),
            ErrorKind::Remote => TransferError::Remote(message),
            ErrorKind::Local => TransferError::Local(message),
            ErrorKind::Network => TransferError::Network(message),
            ErrorKind::Cancelled => TransferError::Cancelled(message),
        }
    }

    /// `what` (no answer, no data, no progress) for `stall`: the
    /// connection stalled (`--timeout`); another attempt may get through.
    pub(crate) fn stalled(display: &str, what: &str, stall: std::time::Duration) -> TransferError {
        TransferError::Network(format!(
            "{display}: {what} for {} s: the connection stalled (--timeout)",
            stall.as_secs()
        ))
    }

    /// The transfer was cancelled; part files are kept for `--resume`.
    pub fn cancelled() -> TransferError {
        TransferError::Cancelled(
            "cancelled; nothing incomplete was put under a final name (part files are kept for --resume)".into(),
        )
    }

    pub fn local(path: &std::path::Path, what: &str, e: std::io::Error) -> Self {
        TransferError::Local(format!("{}: {what}: {e}", path.display()))
    }

    /// An SFTP failure about `path` on `host`.
    pub fn sftp(host: &str, path: &[u8], e: SftpError) -> Self {
        match e {
            SftpError::Status { code, message, .. } => {
                let msg = if message.is_empty() {
                    code.describe().to_string()
                } else {
                    message
                };
                TransferError::Remote(format!(
                    "{host}:{}: {msg}",
                    String::from_utf8_lossy(path)
                ))
            }
            SftpError::Protocol(m) => TransferError::Network(format!("{host}: {m}")),
            SftpError::Closed(m) => TransferError::Network(format!(
                "{host}: connection lost ({m}) while copying {}; the partial data is kept, rerun with --resume",
                String::from_utf8_lossy(path)
            )),
        }
    }
}

impl From<ferry_http::HttpError> for TransferError {
    fn from(e: ferry_http::HttpError) -> Self {
        use ferry_http::HttpError as H;
        match e {
            H::Usage(m) => TransferError::Usage(m),
            H::Trust(m) => TransferError::Auth(m),
            e @ H::Status { .. } => TransferError::Remote(e.to_string()),
            H::Remote(m) => TransferError::Remote(m),
            H::Network(m) => TransferError::Network(m),
        }
    }
}

impl From<SshError> for TransferError {
    fn from(e: SshError) -> Self {
        // The message names every hop; the kind of the failure itself
        // (under any jump-host wrappers) decides the exit code.
        let message = e.to_string();
        match e.root() {
            SshError::Config(_) => TransferError::Usage(message),
            SshError::HostKey(_) | SshError::Auth(_) => TransferError::Auth(message),
            SshError::Connect { .. }
            | SshError::Protocol { .. }
            | SshError::ExecTimeout { .. }
            | SshError::Jump { .. } => TransferError::Network(message),
        }
    }
}
