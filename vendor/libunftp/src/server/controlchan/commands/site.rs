use crate::{
    auth::UserDetail,
    options::SiteCommandContext,
    server::controlchan::{
        Reply, ReplyCode,
        error::ControlChanError,
        handler::{CommandContext, CommandHandler},
    },
    storage::{Metadata, StorageBackend},
};
use async_trait::async_trait;

#[derive(Debug)]
pub struct Site {
    command: String,
    arguments: String,
    // ferry: the key of the handler in `site_handlers`: the SITE
    // subcommand's name, or `extension_key(NAME)` for a top-level command.
    key: String,
}

/// ferry: where a top-level command registered with
/// [`ServerBuilder::command`](crate::ServerBuilder::command) is kept among
/// the SITE handlers (a SITE name cannot start with `/`).
pub fn extension_key(name: &str) -> String {
    format!("/{name}")
}

impl Site {
    pub fn new(command: String, arguments: String) -> Self {
        let key = command.clone();
        Site { command, arguments, key }
    }

    /// ferry: a top-level command (`NAME ARGS`), or its `OPTS NAME ARGS`
    /// (then `command` is "OPTS NAME").
    pub fn extension(command: String, name: String, arguments: String) -> Self {
        Site {
            command,
            arguments,
            key: extension_key(&name),
        }
    }

    /// Narrow a Command context into a SiteCommandContext
    async fn narrow<Storage, User>(&self, context: &CommandContext<Storage, User>) -> SiteCommandContext<Storage, User>
    where
        User: UserDetail,
        Storage: StorageBackend<User> + 'static,
        Storage::Metadata: Metadata,
    {
        let (username, storage, user, cwd) = {
            let session = context.session.lock().await;
            (session.username.clone(), session.storage.clone(), session.user.clone(), session.cwd.clone())
        };
        SiteCommandContext {
            command: self.command.clone(),
            arguments: self.arguments.clone(),
            username,
            storage,
            user,
            cwd,
            logger: context.logger.clone(),
        }
    }
}

#[async_trait]
impl<Storage, User> CommandHandler<Storage, User> for Site
where
    User: UserDetail,
    Storage: StorageBackend<User> + 'static,
    Storage::Metadata: Metadata,
{
    #[tracing_attributes::instrument]
    async fn handle(&self, context: CommandContext<Storage, User>) -> Result<Reply, ControlChanError> {
        // ferry: `SITE /NAME` must not reach a top-level command's handler.
        if self.key == self.command && self.command.starts_with('/') {
            return Ok(Reply::new(ReplyCode::CommandNotImplemented, "Unknown SITE command"));
        }
        let Some(handler) = context.site_handlers.get(&self.key) else {
            return Ok(Reply::new(ReplyCode::CommandNotImplemented, "Unknown SITE command"));
        };
        let site_context = self.narrow(&context).await;
        Ok(handler.handle(&site_context).await)
    }
}
