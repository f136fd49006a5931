//! `nexbot-ctl reload` and SIGHUP: re-read the config file and apply what can change while the
//! daemon runs; say which changes need a restart.
//!
//! Live today: the Telegram allow-lists (`telegram.allowed_users`, `telegram.allowed_chats`).
//! Everything else that differs from the running settings is listed as needing a restart,
//! by section (or key, for `[telegram]`), so an operator is never left guessing.

use std::path::PathBuf;
use std::sync::Mutex;

use nexbot_control::ReloadReport;
use nexbot_telegram::Telegram;

use crate::config::Config;
use crate::BoxFuture;

/// Holds the settings the daemon runs with and what can take new ones.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    running: Mutex<Config>,
    telegram: Option<Telegram>,
}

impl Reloader {
    pub fn new(path: PathBuf, running: Config, telegram: Option<Telegram>) -> Self {
        Self { path, running: Mutex::new(running), telegram }
    }

    /// Reads the file again (with the process environment, as at start).
    pub async fn reload(&self) -> Result<ReloadReport, String> {
        let path = self.path.clone();
        let new = tokio::task::spawn_blocking(move || Config::load(&path))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("the config was not reloaded: {e}"))?;
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let mut report = ReloadReport { applied: Vec::new(), needs_restart: Vec::new() };
        let (old_tg, new_tg) = (&running.telegram, &new.telegram);
        let live = old_tg.allowed_users != new_tg.allowed_users
            || old_tg.allowed_chats != new_tg.allowed_chats;
        if live {
            if let Some(telegram) = &self.telegram {
                telegram.set_access(new_tg);
            }
            if old_tg.allowed_users != new_tg.allowed_users {
                report.applied.push("telegram.allowed_users".to_owned());
            }
            if old_tg.allowed_chats != new_tg.allowed_chats {
                report.applied.push("telegram.allowed_chats".to_owned());
            }
        }
        let (old_json, new_json) = (json(old_tg), json(new_tg));
        if let (Some(old), Some(new)) = (old_json.as_object(), new_json.as_object()) {
            for (key, value) in new {
                let live_key = key == "allowed_users" || key == "allowed_chats";
                if !live_key && old.get(key) != Some(value) {
                    report.needs_restart.push(format!("telegram.{key}"));
                }
            }
        }
        let (old_all, new_all) = (json(&*running), json(&new));
        if let (Some(old), Some(new)) = (old_all.as_object(), new_all.as_object()) {
            for (section, value) in new {
                if section != "telegram" && old.get(section) != Some(value) {
                    report.needs_restart.push(format!("[{section}]"));
                }
            }
        }
        // What was applied is now the running state; the rest waits for the restart.
        running.telegram.allowed_users = new.telegram.allowed_users.clone();
        running.telegram.allowed_chats = new.telegram.allowed_chats.clone();
        tracing::info!(applied = ?report.applied, needs_restart = ?report.needs_restart, "config reloaded");
        Ok(report)
    }
}

impl nexbot_control_api::Reload for Reloader {
    fn reload(&self) -> BoxFuture<'_, Result<ReloadReport, String>> {
        Box::pin(Reloader::reload(self))
    }
}

fn json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}
