//! Contains the [`Server`](crate::Server) struct that is used to configure and control an FTP server instance.

mod chancomms;
pub(crate) mod controlchan;
mod datachan;
mod failed_logins;
pub(crate) mod ftpserver;
mod password;
#[cfg(feature = "proxy_protocol")]
mod proxy_protocol;
mod session;
pub(crate) mod shutdown;
mod switchboard;
mod tls;

pub(crate) use chancomms::ControlChanMsg;
pub(crate) use controlchan::ControlChanMiddleware;
pub(crate) use controlchan::Event;
pub(crate) use controlchan::command::Command;
pub(crate) use controlchan::reply::{Reply, ReplyCode};
pub(crate) use controlchan::{ControlChanError, ControlChanErrorKind};

use session::{Session, SessionState};
