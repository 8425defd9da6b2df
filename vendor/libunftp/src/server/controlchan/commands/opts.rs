//! The RFC 2389 Options (`OPTS`) command
//
// The OPTS (options) command allows a user-PI to specify the desired
// behavior of a server-FTP process when another FTP command (the target
// command) is later issued.  The exact behavior, and syntax, will vary
// with the target command indicated, and will be specified with the
// definition of that command.  Where no OPTS behavior is defined for a
// particular command there are no options available for that command.

use crate::{
    auth::UserDetail,
    server::controlchan::{
        Reply, ReplyCode,
        error::ControlChanError,
        handler::{CommandContext, CommandHandler},
    },
    storage::{Metadata, StorageBackend},
};
use async_trait::async_trait;

/// The parameters that can be given to the `OPTS` command, specifying the option the client wants
/// to set.
#[derive(Debug, PartialEq, Eq, Clone)]
pub enum Opt {
    /// The client wants us to enable UTF-8 encoding for file paths and such.
    Utf8 { on: bool },
    /// ferry: `OPTS NAME ARGS` for a command registered with
    /// [`ServerBuilder::command`](crate::ServerBuilder::command).
    Other { name: String, arguments: String },
}

#[derive(Debug)]
pub struct Opts {
    option: Opt,
}

impl Opts {
    pub fn new(option: Opt) -> Self {
        Opts { option }
    }
}

#[async_trait]
impl<Storage, User> CommandHandler<Storage, User> for Opts
where
    User: UserDetail + 'static,
    Storage: StorageBackend<User> + 'static,
    Storage::Metadata: Metadata,
{
    #[tracing_attributes::instrument]
    async fn handle(&self, args: CommandContext<Storage, User>) -> Result<Reply, ControlChanError> {
        match &self.option {
            Opt::Utf8 { on: true } => Ok(Reply::new(ReplyCode::CommandOkay, "Always in UTF-8 mode.")),
            Opt::Utf8 { on: false } => Ok(Reply::new(ReplyCode::CommandNotImplementedForParameter, "Non UTF-8 mode not supported")),
            // ferry: the registered command's handler answers its OPTS,
            // called with `command` = "OPTS NAME".
            Opt::Other { name, arguments } => {
                if !args.site_handlers.contains_key(&super::site::extension_key(name)) {
                    return Ok(Reply::new(ReplyCode::ParameterSyntaxError, "Option not understood"));
                }
                super::Site::extension(format!("OPTS {name}"), name.clone(), arguments.clone())
                    .handle(args)
                    .await
            }
        }
    }
}
