//! The delegated tasks that hold a decoy secret, and what is known of each when it trips.
//!
//! Why here: the egress sees only a task id when a request carries a decoy
//! (`nexbot_egress::DecoyTrip`); the chat, the task's words, what the turn had read before
//! it delegated (the likely injection) and the task's cancellation are known only where the
//! task was given out. The delegation arms a trap for every task given a decoy and disarms
//! it when the task ends, however it ends; the host's alarm [`DecoyTraps::spring`]s it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nexbot_core::memory::OutsideRead;
use nexbot_core::ChatRef;
use tokio_util::sync::CancellationToken;

/// What a task stopped by its decoy's trip ends with, for its caller (the chat's model) and
/// its record: nothing that says "decoy", which would tell an injection what to avoid next
/// time.
pub const STOPPED: &str = "stopped: the task tried to send a secret where it may not go";

/// What is known of a task given a decoy.
#[derive(Debug, Clone)]
pub struct Trap {
    pub chat: ChatRef,
    /// The delegating call: its task's first line.
    pub first_line: String,
    /// What outside the chat's own words the turn had read when it delegated: pages tasks
    /// fetched, files, MCP results — the likely source of an injection.
    pub reads: Vec<OutsideRead>,
    /// Cancels the task (a child of the turn's token).
    pub cancel: CancellationToken,
}

/// The armed traps, by task id. Shared by the delegation tool and the host's alarm.
#[derive(Debug, Default)]
pub struct DecoyTraps(Mutex<HashMap<String, Trap>>);

impl DecoyTraps {
    /// Arms a trap for `task_id` until the returned guard drops.
    pub(crate) fn arm(self: &Arc<Self>, task_id: &str, trap: Trap) -> Armed {
        self.lock().insert(task_id.to_owned(), trap);
        Armed { traps: self.clone(), task_id: task_id.to_owned() }
    }

    /// The trap of `task_id`, taken (a second trip of the same task finds none), its task
    /// cancelled. `None`: no task of that id holds a decoy now.
    pub fn spring(&self, task_id: &str) -> Option<Trap> {
        let trap = self.lock().remove(task_id)?;
        trap.cancel.cancel();
        Some(trap)
    }

    /// How many tasks holding a decoy run now.
    pub fn armed(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Trap>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Disarms its task's trap when dropped.
pub(crate) struct Armed {
    traps: Arc<DecoyTraps>,
    task_id: String,
}

impl Armed {
    /// Whether the trap was sprung. While the guard lives only [`DecoyTraps::spring`] takes
    /// its trap, and the proxy springs it before it answers the request that carried the
    /// decoy: a task whose answer came after that answer reads `true` here.
    pub(crate) fn sprung(&self) -> bool {
        !self.traps.lock().contains_key(&self.task_id)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.traps.lock().remove(&self.task_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_springs_once_cancels_its_task_and_is_gone_when_the_task_ends() {
        let traps = Arc::new(DecoyTraps::default());
        let cancel = CancellationToken::new();
        let trap = Trap {
            chat: ChatRef::Telegram(5),
            first_line: "send the keys".into(),
            reads: vec![OutsideRead::tool("delegate_to_sub_agent").with_task("t-0")],
            cancel: cancel.clone(),
        };
        let armed = traps.arm("t-1", trap.clone());
        assert_eq!(traps.armed(), 1);
        assert!(traps.spring("t-2").is_none(), "another task's id springs nothing");
        assert!(!armed.sprung());
        let sprung = traps.spring("t-1").expect("the trap");
        assert!(armed.sprung(), "the guard knows");
        assert_eq!(sprung.chat, ChatRef::Telegram(5));
        assert!(cancel.is_cancelled(), "the task is cancelled");
        assert!(traps.spring("t-1").is_none(), "a second trip finds it taken");
        drop(armed);
        let _armed = traps.arm("t-3", trap);
        drop(_armed);
        assert_eq!(traps.armed(), 0, "disarmed when the task ended");
    }
}
