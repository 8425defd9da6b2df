//! `HASH` (draft-bryan-ftpext-hash-02): the hash of a file, computed here,
//! so that `ferry sync --checksum` does not read it through the link.
//!
//! - FEAT lists `HASH SHA-256*;BLAKE3` (the session's choice marked `*`);
//! - `OPTS HASH NAME` chooses (`200 NAME`; `504` for another name), and
//!   `OPTS HASH` alone names the current choice;
//! - `HASH PATH` answers `213 ALGO 0-SIZE HEX PATH` (the whole file: `RANG`
//!   is not offered), 550 for a missing file, a directory or a path outside
//!   the served root (confined by [`crate::Root`] like every command).
//!
//! The file is hashed on tokio's blocking pool with reads of up to 1 MiB,
//! so the session's runtime thread is not held; the control connection
//! waits for the 213 as the draft says it may.
//!
//! libunftp has no such command: vendor/libunftp's `ServerBuilder::command`
//! (a ferry patch) routes `HASH` and `OPTS HASH` here.
use std::fs;
use std::io;
use std::sync::Mutex;

use async_trait::async_trait;
use ferry_hash::Algo;
use libunftp::options::{Reply, ReplyCode, SiteCommandContext, SiteCommandHandler};

use super::auth::FtpUser;
use super::storage::ConfinedFs;

/// The algorithms offered, in FEAT's order, with the draft's names.
const ALGOS: [(Algo, &str); 2] = [(Algo::Sha256, "SHA-256"), (Algo::Blake3, "BLAKE3")];

/// One session's `HASH` command and its `OPTS HASH` choice (libunftp
/// builds a server, and so this handler, for each control connection).
#[derive(Debug)]
pub struct HashCommand {
    chosen: Mutex<usize>,
}

impl HashCommand {
    pub fn new() -> Self {
        HashCommand {
            chosen: Mutex::new(0),
        }
    }

    fn chosen(&self) -> usize {
        *self.chosen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn opts(&self, arg: &str) -> Reply {
        let arg = arg.trim();
        if arg.is_empty() {
            return Reply::new(ReplyCode::CommandOkay, ALGOS[self.chosen()].1);
        }
        match ALGOS.iter().position(|(_, n)| n.eq_ignore_ascii_case(arg)) {
            Some(i) => {
                *self.chosen.lock().unwrap_or_else(|e| e.into_inner()) = i;
                Reply::new(ReplyCode::CommandOkay, ALGOS[i].1)
            }
            None => Reply::new(
                ReplyCode::CommandNotImplementedForParameter,
                "Unknown algorithm (SHA-256 and BLAKE3 are known)",
            ),
        }
    }

    async fn hash(&self, ctx: &SiteCommandContext<ConfinedFs, FtpUser>) -> Reply {
        let name = ctx.arguments.as_str();
        if name.is_empty() {
            return Reply::new(ReplyCode::ParameterSyntaxError, "HASH needs a file name");
        }
        let (algo, algo_name) = ALGOS[self.chosen()];
        let path = ctx.cwd.join(name);
        let r = match ctx.storage.resolve(&path, false) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("ftp: HASH {name:?} refused: {e}");
                return Reply::new(ReplyCode::FileError, "File not found");
            }
        };
        let task = tokio::task::spawn_blocking(move || -> io::Result<(u64, Vec<u8>)> {
            let m = fs::metadata(&r.real)?;
            if m.is_dir() {
                return Err(io::Error::other("a directory, not a file"));
            }
            let h = crate::sftp::check_file(&r.real, algo, crate::sftp::HashRange::WHOLE)?;
            Ok((m.len(), h))
        });
        match task.await {
            Ok(Ok((size, h))) => {
                let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
                Reply::new_with_string(
                    ReplyCode::FileStatus,
                    format!("{algo_name} 0-{size} {hex} {name}"),
                )
            }
            Ok(Err(e)) => {
                tracing::debug!("ftp: HASH {name:?}: {e}");
                let text = if e.kind() == io::ErrorKind::NotFound {
                    "File not found".to_string()
                } else {
                    format!("Cannot hash this file: {e}")
                };
                Reply::new_with_string(ReplyCode::FileError, text)
            }
            Err(e) => Reply::new_with_string(ReplyCode::LocalError, format!("internal error: {e}")),
        }
    }
}

impl Default for HashCommand {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl SiteCommandHandler<ConfinedFs, FtpUser> for HashCommand {
    async fn handle(&self, ctx: &SiteCommandContext<ConfinedFs, FtpUser>) -> Reply {
        if ctx.command == "HASH" {
            self.hash(ctx).await
        } else {
            self.opts(&ctx.arguments)
        }
    }

    fn feat(&self) -> Option<String> {
        let chosen = self.chosen();
        let list: Vec<String> = ALGOS
            .iter()
            .enumerate()
            .map(|(i, (_, n))| {
                if i == chosen {
                    format!("{n}*")
                } else {
                    n.to_string()
                }
            })
            .collect();
        Some(format!("HASH {}", list.join(";")))
    }
}
