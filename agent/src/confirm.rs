//! Confirmations of risky steps a tool is about to take (`agent.confirm`).
//!
//! Why a trait here: the tools (`nexbot-tools`) must not know the host, yet a step such as
//! sending a large file or deleting one may need the chat's user to say yes first. The
//! question machinery (`nexbot-approvals`: one pending question with a deadline, answered by
//! a button, a typed command or `nexbot-ctl approvals`) implements [`Confirm`]; a tool only
//! says what it is about to do and gets back "go" or why not. Which steps ask is the
//! implementation's configuration: a tool asks every time and is told to go at once when
//! nothing is to be asked.

use std::fmt;

use nexbot_core::{BoxFuture, ChatRef};
use serde::{Deserialize, Serialize};

/// The steps `agent.confirm` may list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmKind {
    /// `send_file` of a file larger than `agent.confirm_send_file_bytes`.
    SendFile,
    /// `delete_file`.
    Delete,
    /// A recurring job the model wants to schedule in the chat (`schedule_task`): always
    /// asked, listed in `agent.confirm` or not — it would run the model's instruction again
    /// and again, unattended.
    Schedule,
}

impl ConfirmKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SendFile => "send_file",
            Self::Delete => "delete",
            Self::Schedule => "schedule",
        }
    }
}

impl fmt::Display for ConfirmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step a tool is about to take, as the question shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send `path` (relative to the chat's folder), `bytes` long, to the chat.
    SendFile { path: String, bytes: u64 },
    /// Delete `path` (relative to the chat's folder).
    Delete { path: String },
    /// Store the recurring job `job` describes (its task, schedule, zone and budget).
    Schedule { job: String },
}

impl Step {
    pub fn kind(&self) -> ConfirmKind {
        match self {
            Self::SendFile { .. } => ConfirmKind::SendFile,
            Self::Delete { .. } => ConfirmKind::Delete,
            Self::Schedule { .. } => ConfirmKind::Schedule,
        }
    }
}

/// Why a step was not confirmed: the tool's error says it, so the model stops trying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the user refused it ({by} pressed Deny); do not try again unless the user asks")]
    Denied { by: String },
    #[error("no answer: the user did not confirm it within {secs} s; nothing was done")]
    NoAnswer { secs: u64 },
    /// The question could not be asked or ended otherwise (the daemon stopped, …).
    #[error("not confirmed: {0}")]
    Other(String),
}

/// Asks the chat's user to confirm a step (see the module's docs). `Ok(())`: go on — the
/// user allowed it, or nothing is to be asked about this step.
pub trait Confirm: Send + Sync + fmt::Debug {
    fn confirm<'a>(&'a self, chat: &'a ChatRef, step: Step) -> BoxFuture<'a, Result<(), Refused>>;
}

/// Where nobody can be asked (tools' unit tests, an agent built without the host's
/// questions): the steps that ask only when configured go on at once; a recurring job, which
/// always asks, is refused.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoConfirm;

impl Confirm for NoConfirm {
    fn confirm<'a>(&'a self, _: &'a ChatRef, step: Step) -> BoxFuture<'a, Result<(), Refused>> {
        Box::pin(async move {
            match step {
                Step::Schedule { .. } => {
                    Err(Refused::Other("nobody can be asked to confirm it here".into()))
                }
                Step::SendFile { .. } | Step::Delete { .. } => Ok(()),
            }
        })
    }
}
