//! What a dead daemon run left of its delegated tasks, settled when the daemon starts.
//!
//! Why: a daemon killed mid-delegation (SIGKILL, OOM, a power cut) never finishes its task
//! records nor edits the chat's "⏳ Working on …" message. Left alone, the record stays
//! `running` for ever (pruning skips it, `nexbot_tasks_running` counts it) and the chat shows
//! a task that seems to go on. So [`App::start`](crate::app::App::start) settles them before
//! anything runs: the records become `interrupted` with the reason (the store settles only
//! another run's records, see `nexbot_store::interrupted`), and each progress message the dead
//! run recorded is edited, once its channel is added, to say the task was interrupted and
//! whether its request is handled again (a Telegram update still pending is replayed).

use std::sync::Arc;

use nexbot_core::channel::{Channel, MessageId};
use nexbot_core::ChannelKind;

pub use crate::store::interrupted::InterruptedTask;
use crate::store::Store;

/// The reason recorded in an interrupted task's record, naming when this run started.
pub fn reason(started: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        "the daemon stopped while it ran (crash or kill); started again at {}",
        started.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

/// Marks the records a dead run left `running` as `interrupted`; returns them (logged). A
/// store error is logged and settles nothing: the daemon starts anyway.
pub async fn settle(store: &Store) -> Vec<InterruptedTask> {
    match store.settle_interrupted_tasks(&reason(chrono::Utc::now())).await {
        Ok(tasks) => {
            if !tasks.is_empty() {
                let retried = tasks.iter().filter(|t| t.retried).count();
                tracing::warn!(
                    tasks = tasks.len(),
                    retried,
                    "delegated tasks the last daemon left running recorded as interrupted"
                );
            }
            tasks
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot settle the tasks the last daemon left running");
            Vec::new()
        }
    }
}

/// What the dead run's progress message of `task` says now.
pub fn notice(task: &InterruptedTask) -> String {
    let what = task.task.lines().next().unwrap_or_default();
    let what: String = what.chars().take(200).collect();
    let next = if task.retried {
        "Your request is being handled again."
    } else {
        "It is not retried: ask again if you still need it."
    };
    format!("⚠️ Task interrupted: {what}\nThe daemon stopped while it ran (crash or kill). {next}")
}

/// Edits, in the background, the progress messages of `tasks` whose chat is served by
/// `channel` (of `kind`). Best effort: a message that cannot be edited (deleted, too old)
/// is logged.
pub fn tell_chats(tasks: &[InterruptedTask], kind: ChannelKind, channel: &Arc<dyn Channel>) {
    let mine: Vec<InterruptedTask> = tasks
        .iter()
        .filter(|t| t.chat.kind() == kind && t.progress_message_id.is_some())
        .cloned()
        .collect();
    if mine.is_empty() {
        return;
    }
    let channel = channel.clone();
    tokio::spawn(async move {
        for task in mine {
            let Some(id) = task.progress_message_id else { continue };
            if let Err(e) = channel.edit(&task.chat, MessageId(id), &notice(&task)).await {
                tracing::warn!(task_id = %task.id, chat = %task.chat, error = %e, "cannot say in the chat that a task was interrupted");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_core::ChatRef;

    fn task(retried: bool) -> InterruptedTask {
        InterruptedTask {
            id: "t".into(),
            chat: ChatRef::Telegram(1),
            task: "fetch the page\nand more".into(),
            progress_message_id: Some(5),
            retried,
        }
    }

    #[test]
    fn the_notice_says_interrupted_and_whether_it_is_retried() {
        let retried = notice(&task(true));
        assert!(retried.contains("Task interrupted: fetch the page\n"), "{retried}");
        assert!(retried.contains("handled again"), "{retried}");
        assert!(notice(&task(false)).contains("not retried"));
        let at = chrono::DateTime::from_timestamp(0, 0).unwrap();
        assert_eq!(
            reason(at),
            "the daemon stopped while it ran (crash or kill); started again at 1970-01-01 \
             00:00:00 UTC"
        );
    }
}
