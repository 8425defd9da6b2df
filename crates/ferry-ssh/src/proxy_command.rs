//! `ProxyCommand`: a shell command whose stdin and stdout carry the SSH
//! connection, as `ssh` runs it (`sh -c "exec CMD"`, stderr left to the
//! terminal). The process belongs to its connection: it is killed and
//! reaped when the connection is closed or dropped.
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::Join;
use tokio::net::unix::pipe;

/// The transport: the command's stdout to read, its stdin to write.
pub(crate) type ProxyStream = Join<pipe::Receiver, pipe::Sender>;

/// A running proxy command.
pub(crate) struct ProxyCommand {
    child: Option<Child>,
    command: String,
}

impl ProxyCommand {
    /// Start `command` (tokens already expanded). Must be called within a
    /// tokio runtime (the pipes register with its reactor).
    pub(crate) fn spawn(command: &str) -> std::io::Result<(ProxyCommand, ProxyStream)> {
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            // `exec`, as OpenSSH does, so the process we kill is the
            // command itself and not a shell waiting for it.
            .arg(format!("exec {command}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        // From here on, dropping `proc` kills and reaps the command.
        let proc = ProxyCommand {
            command: command.to_string(),
            child: Some(child),
        };
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(std::io::Error::other(
                "the command's pipes were not created",
            ));
        };
        let rx = pipe::Receiver::from_owned_fd(stdout.into())?;
        let tx = pipe::Sender::from_owned_fd(stdin.into())?;
        Ok((proc, tokio::io::join(rx, tx)))
    }

    pub(crate) fn command(&self) -> &str {
        &self.command
    }

    /// The exit status, if the command has ended within `grace` (it is
    /// given a moment: a failed handshake is often seen before the command
    /// that caused it has been reaped).
    pub(crate) fn exited(&mut self, grace: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kill (SIGKILL) and reap the command; idempotent.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            // After SIGKILL this returns at once: no zombie left behind.
            let _ = child.wait();
        }
    }
}

impl Drop for ProxyCommand {
    fn drop(&mut self) {
        self.stop();
    }
}
