//! Errors of the SSH transport and the SFTP session, shaped so the CLI can
//! map each to an exit code and a message that says what to do.
use ferry_sftp::StatusCode;

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("{0}")]
    Config(String),
    #[error("cannot connect to {host}:{port}: {source}")]
    Connect {
        host: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    /// The host key is unknown, changed or revoked: never accepted silently.
    #[error("{0}")]
    HostKey(String),
    #[error("{0}")]
    Auth(String),
    #[error("SSH connection to {host}: {message}")]
    Protocol { host: String, message: String },
    /// A command on an exec channel ran past its time limit
    /// ([`crate::SshConnection::exec`]); the channel was closed.
    #[error("SSH connection to {host}: the command did not finish within {seconds} s")]
    ExecTimeout { host: String, seconds: f64 },
    /// A hop of a ProxyJump chain failed: `hop` names it, `source` says
    /// how (and decides the exit code).
    #[error("jump host {hop}: {source}")]
    Jump {
        hop: String,
        #[source]
        source: Box<SshError>,
    },
}

impl SshError {
    /// The failure itself, under any jump-host wrappers: what kind of
    /// failure it was (host key, authentication, network...).
    pub fn root(&self) -> &SshError {
        match self {
            SshError::Jump { source, .. } => source.root(),
            other => other,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SftpError {
    /// The server answered with an error status.
    #[error("{}: {}", String::from_utf8_lossy(path), status_text(*code, message))]
    Status {
        code: StatusCode,
        message: String,
        path: Vec<u8>,
    },
    /// The server broke the protocol (bad packet, unknown id, ...).
    #[error("SFTP protocol error: {0}")]
    Protocol(String),
    /// The SSH channel closed under us.
    #[error("connection lost: {0}")]
    Closed(String),
}

fn status_text(code: StatusCode, message: &str) -> String {
    if message.is_empty() {
        code.describe().to_string()
    } else {
        message.to_string()
    }
}

impl SftpError {
    pub fn code(&self) -> Option<StatusCode> {
        match self {
            SftpError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
    pub fn is_no_such_file(&self) -> bool {
        self.code() == Some(StatusCode::NO_SUCH_FILE)
    }
    /// Attach the path the failed request was about.
    pub fn with_path(mut self, p: &[u8]) -> Self {
        if let SftpError::Status { path, .. } = &mut self {
            if path.is_empty() {
                *path = p.to_vec();
            }
        }
        self
    }
}
