//! The credentials S3 requests are signed with: none, fixed keys, or a
//! profile's `credential_process`, run when the backend opens and again
//! shortly before the credentials it printed expire (`Expiration`), so a
//! long transfer does not fail midway. Requests in flight share one value;
//! one of them runs the process while the others that need new
//! credentials wait for it (docs/internals/s3.md, "credential_process").
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::error::TransferError;
use crate::s3::process::{self, CredentialProcess, ProcessCredentials};
use crate::s3::{Config, Credentials};

/// The process's output read at most.
const STDOUT_MAX: u64 = 1 << 20;
/// The end of its stderr quoted in an error.
const STDERR_QUOTED: usize = 2048;
/// After a refresh fails while the credentials still work, the next try.
const RETRY_REFRESH: Duration = Duration::from_secs(10);

pub(crate) enum CredSource {
    None,
    Static(Arc<Credentials>),
    Process(Box<ProcessSource>),
}

pub(crate) struct ProcessSource {
    spec: CredentialProcess,
    state: Mutex<State>,
    /// Held by the request that runs the process.
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
    /// From a resolved config; a `credential_process` is run now, once.
    pub(crate) async fn open(cfg: &Config) -> Result<CredSource, TransferError> {
        if let Some(c) = &cfg.creds {
            return Ok(CredSource::Static(Arc::new(c.clone())));
        }
        let Some(spec) = cfg.creds_process.clone() else {
            return Ok(CredSource::None);
        };
        let got = run_blocking(&spec).await.map_err(TransferError::Auth)?;
        let now = SystemTime::now();
        Ok(CredSource::Process(Box::new(ProcessSource {
            state: Mutex::new(State {
                creds: Arc::new(got.creds),
                expiration: got.expiration,
                refresh_at: process::refresh_at(now, got.expiration),
            }),
            spec,
            refresh: tokio::sync::Mutex::new(()),
        })))
    }

    pub(crate) fn is_none(&self) -> bool {
        matches!(self, CredSource::None)
    }

    /// The credentials to sign a request with now.
    pub(crate) async fn get(&self) -> Result<Option<Arc<Credentials>>, TransferError> {
        match self {
            CredSource::None => Ok(None),
            CredSource::Static(c) => Ok(Some(c.clone())),
            CredSource::Process(p) => p.get().await.map(Some),
        }
    }
}

impl ProcessSource {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn get(&self) -> Result<Arc<Credentials>, TransferError> {
        {
            let st = self.lock();
            if st.fresh(SystemTime::now()) {
                return Ok(st.creds.clone());
            }
        }
        let _running = self.refresh.lock().await;
        {
            // Another request may have run it while this one waited.
            let st = self.lock();
            if st.fresh(SystemTime::now()) {
                return Ok(st.creds.clone());
            }
        }
        tracing::debug!(
            "S3 credentials of profile {:?} expire soon; running credential_process again",
            self.spec.profile
        );
        let res = run_blocking(&self.spec).await;
        let now = SystemTime::now();
        let mut st = self.lock();
        match res {
            Ok(got) => {
                st.creds = Arc::new(got.creds);
                st.expiration = got.expiration;
                st.refresh_at = process::refresh_at(now, got.expiration);
                Ok(st.creds.clone())
            }
            // The old ones still work for a while: use them, try again soon.
            Err(e) if st.expiration.is_some_and(|x| now < x) => {
                tracing::warn!("{e}; the current S3 credentials are used until they expire");
                let exp = st.expiration.unwrap_or(now);
                st.refresh_at = Some((now + RETRY_REFRESH).min(exp));
                Ok(st.creds.clone())
            }
            Err(e) => Err(TransferError::Auth(e)),
        }
    }
}

async fn run_blocking(spec: &CredentialProcess) -> Result<ProcessCredentials, String> {
    let s = spec.clone();
    tokio::task::spawn_blocking(move || run(&s))
        .await
        .map_err(|e| format!("{}: {e}", what(spec)))?
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
    let got = process::parse_output(&out).map_err(|e| format!("{what}: {e}{tail}"))?;
    if let Some(exp) = got.expiration {
        if exp <= SystemTime::now() {
            return Err(format!(
                "{what}: it printed credentials that have already expired (Expiration {})",
                httpdate::fmt_http_date(exp)
            ));
        }
    }
    Ok(got)
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
