//! `/memory`: a chat's long-term memory as its people see and control it (recent entries,
//! search, forget one, forget all), and its line in `/status`.
//!
//! Why the owner decides in a group: a group's memory is the group's, and every member sees it,
//! but wiping it is not one member's choice; in a private chat its one user decides.

use nexbot_core::text::{clip, human_size};
use nexbot_core::{BoxFuture, ChatRef};
use nexbot_store::Store;

use crate::{ChatCommand, CommandContext};

/// Entries `/memory` lists, and characters of each it shows.
const LISTED: usize = 10;
const SHOWN_CHARS: usize = 300;

/// `/memory`.
#[derive(Debug)]
pub struct MemoryCommand {
    store: Store,
    owner: Option<i64>,
}

impl MemoryCommand {
    pub fn new(store: Store, owner: Option<i64>) -> Self {
        Self { store, owner }
    }

    /// Whether `user` may forget in `chat`: the console's operator, a private chat's user, a
    /// group's owner.
    fn may_forget(&self, chat: &ChatRef, user: Option<i64>) -> bool {
        match chat {
            ChatRef::Console(_) => true,
            ChatRef::Telegram(id) if *id > 0 => user == Some(*id),
            ChatRef::Telegram(_) => user.is_some() && user == self.owner,
        }
    }

    async fn answer(&self, chat: &ChatRef, args: &str, user: Option<i64>) -> String {
        let (word, rest) = args.split_once(char::is_whitespace).unwrap_or((args, ""));
        let rest = rest.trim();
        let result = match word.to_ascii_lowercase().as_str() {
            "" | "list" => self.list(chat).await,
            "search" if !rest.is_empty() => self.search(chat, rest).await,
            "forget" if !self.may_forget(chat, user) => {
                return "Only the owner can make this group's memory forget.".to_owned()
            }
            "forget" if rest.eq_ignore_ascii_case("all") => self
                .store
                .forget_all(chat)
                .await
                .map(|n| format!("Forgot all {n} entries of this chat's memory.")),
            "forget" => match rest.trim_start_matches('#').parse::<i64>() {
                Ok(id) => self.store.forget(chat, id).await.map(|gone| match gone {
                    true => format!("Forgot #{id}."),
                    false => format!("This chat's memory has no entry #{id}."),
                }),
                Err(_) => Ok(USAGE.to_owned()),
            },
            _ => Ok(USAGE.to_owned()),
        };
        result.unwrap_or_else(|e| format!("I cannot read this chat's memory right now: {e}"))
    }

    async fn list(&self, chat: &ChatRef) -> Result<String, nexbot_store::StoreError> {
        let stats = self.store.memory_stats(chat).await?;
        if stats.entries == 0 {
            return Ok("This chat's memory is empty.".to_owned());
        }
        let recent = self.store.recent_memories(chat, LISTED).await?;
        let mut out = vec![format!("{}. Newest first:", summary(stats))];
        out.extend(recent.iter().map(|m| format!("• {}", clip(&m.line(), SHOWN_CHARS))));
        out.push(USAGE.to_owned());
        Ok(out.join("\n"))
    }

    async fn search(
        &self,
        chat: &ChatRef,
        query: &str,
    ) -> Result<String, nexbot_store::StoreError> {
        let found = self.store.recall(chat, query, LISTED, false).await?;
        if found.is_empty() {
            return Ok(format!("Nothing in this chat's memory matches «{query}»."));
        }
        let mut out = vec![format!("Best matches for «{query}»:")];
        out.extend(found.iter().map(|m| format!("• {}", clip(&m.line(), SHOWN_CHARS))));
        Ok(out.join("\n"))
    }
}

const USAGE: &str = "/memory — recent entries · /memory search WORDS · /memory forget ID · \
                     /memory forget all. Entries marked DATA came from outside this chat's own \
                     words (a page, a file, a tool).";

impl ChatCommand for MemoryCommand {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn summary(&self) -> &'static str {
        "what I remember in this chat and where it came from; search it, forget"
    }
    fn run<'a>(&'a self, ctx: CommandContext<'a>) -> BoxFuture<'a, String> {
        Box::pin(self.answer(ctx.chat, ctx.args, ctx.user))
    }
}

/// `N entries (SIZE), M from outside`.
fn summary(stats: nexbot_store::MemoryStats) -> String {
    format!(
        "{} entries ({}), {} from outside",
        stats.entries,
        human_size(stats.bytes),
        stats.outside
    )
}

/// `/status`'s line of the chat's memory.
pub async fn status_line(store: &Store, chat: &ChatRef) -> String {
    match store.memory_stats(chat).await {
        Ok(stats) => format!("Memory here: {}", summary(stats)),
        Err(e) => format!("Memory here: unreadable ({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_owner_forgets_in_a_group_and_each_user_in_their_chat() {
        let c = |owner| MemoryCommand { store: futures_store(), owner };
        let cmd = c(Some(5));
        assert!(cmd.may_forget(&ChatRef::Telegram(-100), Some(5)));
        assert!(!cmd.may_forget(&ChatRef::Telegram(-100), Some(6)));
        assert!(!cmd.may_forget(&ChatRef::Telegram(-100), None));
        assert!(cmd.may_forget(&ChatRef::Telegram(6), Some(6)));
        assert!(!cmd.may_forget(&ChatRef::Telegram(6), Some(7)));
        assert!(!c(None).may_forget(&ChatRef::Telegram(-100), None));
    }

    fn futures_store() -> Store {
        let dir = std::env::temp_dir().join(format!("nxm-cmd-{}", uuid::Uuid::new_v4()));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(Store::open(&dir.join("db.sqlite"))).unwrap()
    }
}
