//! Who may make what outlives a task: "Always for this chat" and a group's `--confirm`
//! secrets are the owner's alone ([`Approvals::may_choose`]), and the owner answers any chat's
//! question from their own private chat ([`Approvals::answers_anywhere`], `/questions`).

use nexbot_core::ChatRef;

use super::{Approvals, Choice, Kind};

impl Approvals {
    /// Whether the person who pressed in `chat` (`user`, the Telegram user) is the owner: a
    /// console is the owner's; in Telegram only `telegram.owner` is.
    pub(super) fn is_owner(&self, chat: &ChatRef, user: Option<i64>) -> bool {
        match chat {
            ChatRef::Telegram(_) => user.is_some() && user == self.owner,
            _ => true,
        }
    }

    /// Whether an answer given in `chat` by `user` may be any chat's: the owner's private
    /// Telegram chat (pressed by the owner) and the console, the operator's own places.
    pub fn answers_anywhere(&self, chat: &ChatRef, user: Option<i64>) -> bool {
        match chat {
            ChatRef::Telegram(id) => *id > 0 && Some(*id) == self.owner && user == self.owner,
            _ => true,
        }
    }

    /// Whether the "Always for this chat" answer is offered in `chat`'s questions: where the
    /// owner can press it (the owner's own chats and groups), not in another user's private
    /// chat, whose user may not make a rule that outlives the task.
    pub(super) fn always_shown(&self, chat: &ChatRef) -> bool {
        match chat {
            ChatRef::Telegram(id) if *id > 0 => Some(*id) == self.owner,
            _ => true,
        }
    }

    /// Whether `user`, pressing in `chat`, may give `choice` to question `id`: anything
    /// that outlives the task is the owner's alone. "Always for this chat" is a permanent
    /// rule; a `--confirm` secret in a group is the group's, and its use there is the
    /// owner's to confirm. Others get once or the task. `Err`: what to tell them.
    pub fn may_choose(
        &self,
        id: i64,
        choice: Choice,
        chat: &ChatRef,
        user: Option<i64>,
    ) -> Result<(), String> {
        if self.is_owner(chat, user) {
            return Ok(());
        }
        if choice == Choice::Chat {
            return Err("Only the owner can allow a destination always for a chat (a rule that \
                        outlives the task); press Allow once or Allow for this task instead. \
                        Nothing was changed."
                .to_owned());
        }
        let group = matches!(chat, ChatRef::Telegram(id) if *id < 0);
        let kind = self.lock().pending_by_id(id).map(|p| p.question.kind());
        if group && kind == Some(Kind::Secret) {
            return Err("In a group only the owner confirms the use of a --confirm secret; \
                        nothing was changed (`nexbot-ctl approvals` answers it too)."
                .to_owned());
        }
        Ok(())
    }
}
