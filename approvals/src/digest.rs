//! The owner's digest of every chat's waiting questions, each with its buttons, in the
//! owner's private chat (or the console), shown by the host's `/questions`. A question asked
//! in another user's chat or a group can then be answered by the owner without being there;
//! the press goes through the same `/egress` and `/approve` commands, which take the owner's
//! private chat as a place to answer any question from
//! ([`super::Approvals::answers_anywhere`]).

use nexbot_core::channel::Button;
use nexbot_core::ChatRef;

use super::{Approvals, COMMAND, CONFIRM_COMMAND};

impl Approvals {
    /// The digest for whoever asked in `chat` (`user`: who, where the channel tells users
    /// apart): every waiting question, one block and one row of buttons each, for the owner;
    /// a refusal (no buttons) for anyone else (it would show other chats).
    pub fn digest(&self, chat: &ChatRef, user: Option<i64>) -> (String, Vec<Vec<Button>>) {
        if !self.answers_anywhere(chat, user) {
            return (
            "Only the owner, in their private chat, sees every chat's questions; the questions \
             of this chat are answered under them."
                .to_owned(),
            Vec::new(),
        );
        }
        let pending = self.pending();
        if pending.is_empty() {
            return ("No question is waiting.".to_owned(), Vec::new());
        }
        let mut text = format!("{} question(s) waiting:", pending.len());
        let mut buttons = Vec::new();
        for p in &pending {
            let what = match p.kind.as_str() {
                "egress" | "secret" => {
                    let path = p.path.as_deref().unwrap_or("(a tunnel)");
                    let secret =
                        p.subject.as_deref().map(|s| format!(" with {s}")).unwrap_or_default();
                    format!("{} {}:{} {path}{secret}", p.method, p.host, p.port)
                }
                _ => p.subject.clone().unwrap_or_default(),
            };
            text.push_str(&format!("\n#{} in {} ({}): {what}", p.id, p.chat, p.kind));
            let press = |label: &str, command: &str, word: &str| {
                Button::new(format!("#{} {label}", p.id), format!("/{command} {} {word}", p.id))
            };
            let row = match p.kind.as_str() {
                "egress" => vec![
                    press("once", COMMAND, "once"),
                    press("task", COMMAND, "task"),
                    press("always", COMMAND, "chat"),
                    press("deny", COMMAND, "deny"),
                ],
                "secret" => {
                    vec![
                        press("task", CONFIRM_COMMAND, "task"),
                        press("deny", CONFIRM_COMMAND, "deny"),
                    ]
                }
                _ => vec![
                    press("allow", CONFIRM_COMMAND, "allow"),
                    press("deny", CONFIRM_COMMAND, "deny"),
                ],
            };
            buttons.push(row);
        }
        (text, buttons)
    }
}
