//! The Telegram channel (`nexbot-telegram`) wired into the daemon: its update ledger is the
//! store, it serves `telegram:` chats through the router, feeds the bus, shows the command
//! registry as its menu, and reports its health to `/status`.

use std::sync::Arc;

use nexbot_core::BoxFuture;
use nexbot_telegram::{Ledger, LedgerError, ReceivedUpdate, Settlement, Telegram};

use crate::app::{App, Stage};
use crate::config::Config;
use crate::store::{LedgerRow, Store, UpdateState};

/// The store as the channel's ledger.
#[derive(Debug, Clone)]
pub struct StoreLedger(pub Store);

fn ledger_error(e: crate::store::StoreError) -> LedgerError {
    if e.is_disk_full() {
        LedgerError::disk_full(e.to_string())
    } else {
        LedgerError::new(e.to_string())
    }
}

/// The ledger's state of a settled update.
/// A ledger row as the channel reads it.
fn received(row: crate::store::LedgerRow) -> ReceivedUpdate {
    ReceivedUpdate {
        update_id: row.update_id,
        chat: row.chat,
        user_id: row.user_id,
        message_id: row.message_id.and_then(|id| i32::try_from(id).ok()),
        text: row.text,
        file: row.file,
    }
}

fn state(settlement: &Settlement) -> UpdateState {
    match settlement {
        Settlement::Answered { .. } => UpdateState::Answered,
        Settlement::Refused { .. } => UpdateState::Refused,
        Settlement::Failed { .. } => UpdateState::Failed,
    }
}

fn detail(settlement: &Settlement) -> String {
    match settlement {
        Settlement::Answered { message_ids } => {
            message_ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
        }
        Settlement::Refused { rule } => rule.clone(),
        Settlement::Failed { error } => error.clone(),
    }
}

impl Ledger for StoreLedger {
    fn next_offset(&self) -> BoxFuture<'_, Result<Option<i64>, LedgerError>> {
        Box::pin(async move { self.0.telegram_offset().await.map_err(ledger_error) })
    }

    fn receive(
        &self,
        update: ReceivedUpdate,
        settled: Option<Settlement>,
    ) -> BoxFuture<'_, Result<bool, LedgerError>> {
        Box::pin(async move {
            let row = LedgerRow {
                update_id: update.update_id,
                chat: update.chat,
                user_id: update.user_id,
                message_id: update.message_id.map(i64::from),
                text: update.text,
                state: settled.as_ref().map_or(UpdateState::Pending, state),
                detail: settled.as_ref().map(detail).filter(|d| !d.is_empty()),
                file: update.file,
            };
            self.0.receive_update(row).await.map_err(ledger_error)
        })
    }

    fn settle(
        &self,
        update_id: i64,
        settlement: Settlement,
    ) -> BoxFuture<'_, Result<(), LedgerError>> {
        // The answer was sent: a lost "answered" would replay the update at the next start.
        let (state, detail) = (state(&settlement), detail(&settlement));
        let what = format!("how Telegram update {update_id} ended");
        Box::pin(async move {
            self.0
                .write_or_retry(what, move |store| {
                    let detail = detail.clone();
                    async move { store.settle_update(update_id, state, detail).await }
                })
                .await
                .map_err(ledger_error)
        })
    }

    fn unsettled(&self) -> BoxFuture<'_, Result<Vec<ReceivedUpdate>, LedgerError>> {
        Box::pin(async move {
            let (again, _) = self.0.pending_updates().await.map_err(ledger_error)?;
            Ok(again.into_iter().map(received).collect())
        })
    }

    fn sending(&self, update_id: i64) -> BoxFuture<'_, Result<(), LedgerError>> {
        Box::pin(async move { self.0.mark_update_sending(update_id).await.map_err(ledger_error) })
    }

    fn cut_off(&self) -> BoxFuture<'_, Result<Vec<ReceivedUpdate>, LedgerError>> {
        Box::pin(async move {
            let (_, cut) = self.0.pending_updates().await.map_err(ledger_error)?;
            Ok(cut.into_iter().map(received).collect())
        })
    }

    fn task_message(
        &self,
        task_id: &str,
        message_id: i32,
    ) -> BoxFuture<'_, Result<(), LedgerError>> {
        let task_id = task_id.to_owned();
        Box::pin(async move {
            self.0.set_task_message(&task_id, i64::from(message_id)).await.map_err(ledger_error)
        })
    }
}

/// Starts the Telegram channel when `NEXBOT_TELEGRAM_TOKEN` is set and `telegram.enabled`;
/// returns it, or why it is off (for the log and `/status`).
pub fn attach(app: &mut App, config: &Config) -> Result<Telegram, String> {
    let Some(token) = &config.secrets.telegram_token else {
        return Err(format!("{} is not set", crate::config::TELEGRAM_TOKEN_ENV));
    };
    if !config.telegram.enabled {
        return Err("telegram.enabled = false".to_owned());
    }
    let ledger = Arc::new(StoreLedger(app.store().clone()));
    let telegram =
        Telegram::new(token, config.telegram.clone(), ledger).map_err(|e| e.to_string())?;
    app.add_channel(nexbot_telegram::KIND, Arc::new(telegram.clone()));
    let health = telegram.health();
    let problem = health.clone();
    app.status().add("telegram", move || health.summary());
    app.status().add_problem("telegram", move || problem.problem());
    let commands: Vec<(String, String)> = app
        .commands()
        .list()
        .into_iter()
        .map(|(name, summary)| (name.to_owned(), summary.to_owned()))
        .collect();
    let inbound = app.inbound();
    let channel = telegram.clone();
    app.spawn("telegram", Stage::Input, move |stop| async move {
        // The command menu is registered beside polling, never before it: a slow
        // `setMyCommands` (10 s against the emulator) held up the first message of every run.
        let menu = {
            let channel = channel.clone();
            tokio::spawn(async move {
                let menu: Vec<(&str, &str)> =
                    commands.iter().map(|(n, s)| (n.as_str(), s.as_str())).collect();
                channel.set_commands(&menu).await;
            })
        };
        channel.run(inbound, stop).await;
        menu.abort();
    });
    Ok(telegram)
}
