//! Held requests' shares of the proxy (`egress.max_held_per_chat`, `egress.max_held`): a
//! request that really waits for an answer keeps its client connection open, so each chat,
//! and all chats together, may hold only so many at once ([`Approvals::hold`]).

use std::sync::Arc;

use nexbot_core::ChatRef;
use nexbot_egress::Approval;

use super::Approvals;

impl Approvals {
    /// A held request's share of the proxy, kept while it waits: a chat may hold at most
    /// `egress.max_held_per_chat` requests at once and all chats together at most
    /// `egress.max_held` (half the listener's connections by default). A held request keeps
    /// its client connection open; without these shares one chat's flood of held requests
    /// would take the connections other chats' tasks — the owner's model calls among them —
    /// need. Only requests that really wait are counted (a grant or a rule answers at once).
    pub(super) fn hold(self: &Arc<Self>, chat: &ChatRef) -> Result<HeldSlot, Approval> {
        let (per_chat, total) = self.max_held;
        let mut state = self.lock();
        let all: usize = state.held.values().sum();
        let mine = state.held.get(chat).copied().unwrap_or(0);
        if mine >= per_chat {
            return Err(Approval::Refuse(format!(
                "too_many_held: {mine} requests of this chat already wait for answers \
                 (egress.max_held_per_chat = {per_chat}); this one is refused at once — answer \
                 the questions waiting, or let them time out"
            )));
        }
        if all >= total {
            return Err(Approval::Refuse(format!(
                "too_many_held: {all} requests already wait for answers across the chats \
                 (egress.max_held = {total}); this one is refused at once"
            )));
        }
        *state.held.entry(chat.clone()).or_insert(0) += 1;
        Ok(HeldSlot { approvals: self.clone(), chat: chat.clone() })
    }
}

/// One held request's place in [`super::State::held`], given back when it stops waiting.
pub(super) struct HeldSlot {
    approvals: Arc<Approvals>,
    chat: ChatRef,
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        let mut state = self.approvals.lock();
        if let Some(count) = state.held.get_mut(&self.chat) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.held.remove(&self.chat);
            }
        }
    }
}
