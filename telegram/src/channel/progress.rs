//! A delegated task's progress message: started, its latest lines (at most
//! [`PROGRESS_LINES`]), edited in place no more often than Telegram allows, and its end.
//!
//! Why apart: the one message of the channel that is edited again and again while a task
//! runs, with its own rate and state ([`TaskView`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexbot_core::channel::TaskUpdate;

use super::{one_line, plain_part, Inner};

/// Lines of a task's progress shown in its message.
const PROGRESS_LINES: usize = 6;

pub(super) struct TaskView {
    chat_id: i64,
    message_id: Option<i32>,
    header: String,
    lines: VecDeque<String>,
    last_edit: Instant,
    flush_scheduled: bool,
    /// The text last shown, so an edit never repeats it ("message is not modified").
    shown: String,
}

impl TaskView {
    fn text(&self) -> String {
        let mut text = self.header.clone();
        for line in &self.lines {
            text.push_str("\n• ");
            text.push_str(line);
        }
        text
    }
}

impl Inner {
    pub(super) async fn task_update(
        self: &Arc<Self>,
        chat_id: i64,
        task_id: &str,
        update: TaskUpdate,
    ) {
        match update {
            TaskUpdate::Started { task } => {
                let header = format!("⏳ Working on: {}", one_line(&task, 200));
                let message_id = match self.send_part(chat_id, &plain_part(&header), None).await {
                    Ok(id) => id,
                    Err(e) => {
                        tracing::debug!(chat_id, error = %e, "cannot show a task's progress");
                        None
                    }
                };
                if let Some(id) = message_id {
                    // Kept, so a run after a crash can edit it to say the task was interrupted.
                    if let Err(e) = self.ledger.task_message(task_id, id).await {
                        tracing::warn!(task_id, error = %e, "cannot record a task's progress message");
                    }
                }
                let view = TaskView {
                    chat_id,
                    message_id,
                    shown: header.clone(),
                    header,
                    lines: VecDeque::new(),
                    last_edit: Instant::now(),
                    flush_scheduled: false,
                };
                self.tasks
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(task_id.to_owned(), view);
            }
            TaskUpdate::Progress { line } => {
                let interval = Duration::from_millis(self.config.progress_edit_interval_ms);
                let schedule = {
                    let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
                    let Some(view) = tasks.get_mut(task_id) else { return };
                    view.lines.push_back(one_line(&line, 120));
                    while view.lines.len() > PROGRESS_LINES {
                        view.lines.pop_front();
                    }
                    if view.message_id.is_none() || view.flush_scheduled {
                        None
                    } else {
                        view.flush_scheduled = true;
                        Some(interval.saturating_sub(view.last_edit.elapsed()))
                    }
                };
                // Edits are spaced: the newest state is shown once the interval has passed.
                if let Some(wait) = schedule {
                    let (me, task_id) = (self.clone(), task_id.to_owned());
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        me.flush_progress(&task_id).await;
                    });
                }
            }
            TaskUpdate::Finished(receipt) => {
                let view = self.tasks.lock().unwrap_or_else(|p| p.into_inner()).remove(task_id);
                let mark = if receipt.status == "success" { "✅" } else { "⚠️" };
                let text = format!("{mark} {}", receipt.render());
                match view.and_then(|v| v.message_id.map(|id| (id, v.last_edit))) {
                    Some((message_id, last_edit)) => {
                        // Spaced like the other edits, without holding up the turn.
                        let wait = Duration::from_millis(self.config.progress_edit_interval_ms)
                            .saturating_sub(last_edit.elapsed());
                        let me = self.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            if let Err(e) = me.edit_text(chat_id, message_id, &text).await {
                                tracing::debug!(chat_id, error = %e, "cannot show a task's receipt by editing; sending it");
                                let _ = me.send_part(chat_id, &plain_part(&text), None).await;
                            }
                        });
                    }
                    None => {
                        let _ = self.send_part(chat_id, &plain_part(&text), None).await;
                    }
                }
            }
        }
    }

    async fn flush_progress(&self, task_id: &str) {
        let edit = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            let Some(view) = tasks.get_mut(task_id) else { return };
            view.flush_scheduled = false;
            let text = view.text();
            if text == view.shown {
                return;
            }
            view.shown = text.clone();
            view.last_edit = Instant::now();
            view.message_id.map(|id| (view.chat_id, id, text))
        };
        if let Some((chat_id, message_id, text)) = edit {
            if let Err(e) = self.edit_text(chat_id, message_id, &text).await {
                tracing::debug!(chat_id, error = %e, "cannot edit a task's progress message");
            }
        }
    }
}
