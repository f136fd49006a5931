//! Per-task capability tokens for the LLM relay, and each task's token budget.
//!
//! A container never holds the provider key; it holds a random token that is good only while
//! its task runs (the pool issues it when the task starts and revokes it when it ends) and only
//! up to the task's budget. Tokens are stored as SHA-256 digests and looked up by digest, so
//! checking a presented token compares no secret bytes and the table holds nothing usable.
//!
//! A task's budget is a [`nexbot_llm::Allowance`]: the relay reserves a call's worst case on it
//! before the call is sent and settles the reservation with what the provider reported when
//! the answer ends ([`TaskTokens::reserve`]), so concurrent calls cannot all pass the budget.
//!
//! The same table ends a task for the whole egress: [`TaskTokens::finish`] revokes the token,
//! drops the task's proxy-mode secrets ([`TaskCredentials`]), cuts the task's open tunnels and
//! requests, and hands over what the task did ([`TaskSummary`], see `ledger.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use nexbot_llm::{Allowance, Exceeded, Hold};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use super::audit::AuditLog;
use super::credentials::TaskCredentials;
use super::ledger::{TaskStatsTable, TaskSummary};

/// Per-task relay tokens issued and revoked since the start, for the metrics (counted by
/// whoever issues them: the daemon's sandbox).
#[derive(Debug, Default)]
pub struct RelayCounters {
    pub issued: AtomicU64,
    pub revoked: AtomicU64,
}

/// Prefix of every relay token, so a leaked one is recognisable in a scan.
pub const TOKEN_PREFIX: &str = "nxr_";
/// Prefix of every egress (proxy) credential, likewise.
pub const PROXY_TOKEN_PREFIX: &str = "nxp_";
/// How many ended tasks' egress credentials are remembered, so a request that presents one
/// (a process left over from an ended task) is refused and audited as such rather than as
/// an unknown credential. Older ones read as unknown: refused all the same.
pub const MAX_ENDED_CREDENTIALS: usize = 4096;

/// A task's budget and what it has used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskUsage {
    pub budget: u64,
    /// Tokens charged. While the task runs: calls whose answers have ended; when it ends
    /// ([`TaskTokens::finish`]): calls still in flight too, at their reservation.
    pub used: u64,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("missing, unknown or expired relay token")]
    Invalid,
    #[error("task {task_id} used {used} of its {budget} LLM tokens")]
    BudgetExhausted { task_id: String, used: u64, budget: u64 },
    /// The call's worst case does not fit what is left of the task's budget.
    #[error("{0}")]
    WouldExceed(Exceeded),
    #[error("the system random number generator failed: {0}")]
    Random(String),
}

type Digest32 = [u8; 32];

#[derive(Debug, Default)]
struct Table {
    by_digest: HashMap<Digest32, String>,
    tasks: HashMap<String, Entry>,
    /// Egress credentials: digest → task, and task → digest.
    proxy_by_digest: HashMap<Digest32, String>,
    proxy_of_task: HashMap<String, Digest32>,
    /// Credentials of ended tasks (digest → task), oldest first, at most
    /// [`MAX_ENDED_CREDENTIALS`].
    ended_proxy: HashMap<Digest32, String>,
    ended_order: VecDeque<Digest32>,
}

impl Table {
    /// Retires the task's egress credential (if any) into the ended list.
    fn end_proxy(&mut self, task_id: &str) {
        let Some(digest) = self.proxy_of_task.remove(task_id) else { return };
        self.proxy_by_digest.remove(&digest);
        if self.ended_order.len() >= MAX_ENDED_CREDENTIALS {
            if let Some(oldest) = self.ended_order.pop_front() {
                self.ended_proxy.remove(&oldest);
            }
        }
        self.ended_proxy.insert(digest, task_id.to_owned());
        self.ended_order.push_back(digest);
    }
}

/// Whose a presented egress credential is ([`TaskTokens::proxy_task`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyCredential {
    /// The credential of this running task.
    Live(String),
    /// The credential of this task, which has ended.
    Ended(String),
    /// No task's credential (forged, malformed, or ended too long ago to be remembered).
    Unknown,
}

#[derive(Debug)]
struct Entry {
    digest: Digest32,
    budget: u64,
    allowance: Arc<Allowance>,
    cost: Arc<RelayCost>,
}

/// What a task's relayed calls cost in money, by the prices of the provider that answered
/// each: added to as calls end, read when the task ends, so the daemon's cost caps count
/// delegated work in money and not only in tokens.
#[derive(Debug, Default)]
pub(crate) struct RelayCost {
    micros: AtomicU64,
    unpriced_calls: AtomicU64,
}

impl RelayCost {
    /// A call cost `micros` (`None`: its provider has no prices).
    pub(crate) fn add(&self, micros: Option<u64>) {
        match micros {
            Some(micros) => self.micros.fetch_add(micros, Ordering::Relaxed),
            None => self.unpriced_calls.fetch_add(1, Ordering::Relaxed),
        };
    }

    fn snapshot(&self) -> TaskCost {
        TaskCost {
            micros: self.micros.load(Ordering::Relaxed),
            unpriced_calls: self.unpriced_calls.load(Ordering::Relaxed),
        }
    }
}

pub use nexbot_llm::TaskCost;

impl Entry {
    fn usage(&self) -> TaskUsage {
        TaskUsage { budget: self.budget, used: self.allowance.counts().used }
    }
}

/// The live tokens, and the ledger of what each task did. Cheap to share behind an `Arc`.
#[derive(Debug, Default)]
pub struct TaskTokens {
    table: Mutex<Table>,
    ledger: Arc<TaskStatsTable>,
    /// The listener's audit log, told when a task ends (for its suppressed-lines line).
    audit: Option<Arc<AuditLog>>,
    /// The tasks' proxy-mode secrets, dropped with the task.
    credentials: Arc<TaskCredentials>,
}

/// What the egress hands over when a task ends ([`TaskTokens::finish`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedTask {
    /// The relay usage, when the task had a token.
    pub usage: Option<TaskUsage>,
    /// What its relayed calls cost, when the task had a token.
    pub cost: Option<TaskCost>,
    /// What the task did through the proxy and relay.
    pub egress: TaskSummary,
}

fn allowance(task_id: &str, budget: u64) -> Arc<Allowance> {
    Allowance::new(Some(budget), format!("LLM tokens of task {task_id}"))
}

/// `prefix` and 256 random bits from the OS CSPRNG, base64url.
fn random_token(prefix: &str) -> Result<String, TokenError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
    Ok(format!("{prefix}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)))
}

fn digest(token: &str) -> Digest32 {
    Sha256::digest(token.as_bytes()).into()
}

impl TaskTokens {
    /// Tokens whose tasks count into the listener's ledger and audit log, and end with their
    /// credentials.
    pub(crate) fn with_audit(audit: Arc<AuditLog>, credentials: Arc<TaskCredentials>) -> Self {
        Self {
            table: Mutex::default(),
            ledger: audit.ledger().clone(),
            audit: Some(audit),
            credentials,
        }
    }

    /// The tasks' proxy-mode secrets (see [`TaskCredentials::grant`]).
    pub fn credentials(&self) -> &Arc<TaskCredentials> {
        &self.credentials
    }

    /// Issues a fresh token (256 random bits from the OS CSPRNG) for `task_id` with a budget
    /// of `token_budget` LLM tokens. An earlier token of the same task stops working; the
    /// usage so far is kept, so re-issuing cannot reset a budget.
    pub fn issue(&self, task_id: &str, token_budget: u64) -> Result<SecretString, TokenError> {
        let token = random_token(TOKEN_PREFIX)?;
        let mut table = self.lock();
        let (allowance, cost) = match table.tasks.remove(task_id) {
            Some(old) => {
                table.by_digest.remove(&old.digest);
                let allowance = if old.budget == token_budget {
                    // Calls in flight settle where they reserved.
                    old.allowance
                } else {
                    // A new cap: what is in flight counts as used in full.
                    let counts = old.allowance.counts();
                    allowance(task_id, token_budget)
                        .with_used(counts.used.saturating_add(counts.reserved))
                };
                (allowance, old.cost)
            }
            None => (allowance(task_id, token_budget), Arc::default()),
        };
        let entry = Entry { digest: digest(&token), budget: token_budget, allowance, cost };
        table.by_digest.insert(entry.digest, task_id.to_owned());
        table.tasks.insert(task_id.to_owned(), entry);
        drop(table);
        self.ledger.reopen(task_id);
        Ok(SecretString::from(token))
    }

    /// Issues the task's egress credential (256 random bits, `nxp_…`): what the task's
    /// processes present to the forward proxy (`Proxy-Authorization: Basic`, user `task`),
    /// so a request is served in the name of the task that holds it — and only while that
    /// task is the one its container runs. Separate from the relay token on purpose: it goes
    /// into the environment of the commands a task runs, which must not be able to spend the
    /// task's LLM budget. An earlier credential of the same task stops working; it dies with
    /// the task ([`TaskTokens::finish`]).
    pub fn issue_proxy(&self, task_id: &str) -> Result<SecretString, TokenError> {
        let token = random_token(PROXY_TOKEN_PREFIX)?;
        let mut table = self.lock();
        if let Some(old) = table.proxy_of_task.remove(task_id) {
            table.proxy_by_digest.remove(&old);
        }
        let digest = digest(&token);
        table.proxy_by_digest.insert(digest, task_id.to_owned());
        table.proxy_of_task.insert(task_id.to_owned(), digest);
        drop(table);
        self.ledger.reopen(task_id);
        Ok(SecretString::from(token))
    }

    /// Whose a presented egress credential is: a running task's, an ended task's, or none.
    /// Looked up by digest, like relay tokens.
    pub fn proxy_task(&self, presented: &str) -> ProxyCredential {
        if !presented.starts_with(PROXY_TOKEN_PREFIX) {
            return ProxyCredential::Unknown;
        }
        let digest = digest(presented);
        let table = self.lock();
        if let Some(task_id) = table.proxy_by_digest.get(&digest) {
            return ProxyCredential::Live(task_id.clone());
        }
        match table.ended_proxy.get(&digest) {
            Some(task_id) => ProxyCredential::Ended(task_id.clone()),
            None => ProxyCredential::Unknown,
        }
    }

    /// Ends the task: revokes its token and egress credential, drops its proxy-mode secrets (zeroized once no
    /// request in flight holds them), cuts its open tunnels and requests, refuses later
    /// connections still attributed to it, and returns its relay usage (when it had a
    /// token) with the summary of everything it did through the egress. Calls still in
    /// flight are charged their whole reservation (the provider may bill them). Call it once
    /// when the task ends, whether or not it had a token.
    pub fn finish(&self, task_id: &str) -> FinishedTask {
        self.credentials.revoke(task_id);
        let usage = {
            let mut table = self.lock();
            table.end_proxy(task_id);
            table.tasks.remove(task_id).map(|entry| {
                table.by_digest.remove(&entry.digest);
                let counts = entry.allowance.counts();
                let usage = TaskUsage {
                    budget: entry.budget,
                    used: counts.used.saturating_add(counts.reserved),
                };
                (usage, entry.cost.snapshot())
            })
        };
        let (usage, cost) = match usage {
            Some((usage, cost)) => (Some(usage), Some(cost)),
            None => (None, None),
        };
        let (egress, stats) = self.ledger.finish(task_id);
        if let (Some(audit), Some(stats)) = (&self.audit, stats) {
            audit.task_ended(task_id, &stats);
        }
        FinishedTask { usage, cost, egress }
    }

    /// [`TaskTokens::finish`] for callers that only want the usage (the summary is
    /// dropped); `None` when the task had no token.
    pub fn revoke(&self, task_id: &str) -> Option<TaskUsage> {
        self.finish(task_id).usage
    }

    /// While the returned guard lasts, what `lender` (an MCP server's identity, as the
    /// proxy attributes its container) reaches also counts for `task_id`: its summary, so its
    /// receipt, names it. `None` when either has ended.
    pub fn lend(&self, lender: &str, task_id: &str) -> Option<super::ledger::Lend> {
        self.ledger.lend(lender, task_id)
    }

    /// What a running task did through the egress so far.
    pub fn summary(&self, task_id: &str) -> Option<TaskSummary> {
        self.ledger.peek(task_id)
    }

    /// Ends every live token and task (at shutdown, for tasks that never gave theirs back);
    /// returns how many tokens there were.
    pub fn revoke_all(&self) -> usize {
        let count = {
            let mut table = self.lock();
            table.by_digest.clear();
            let holders: Vec<String> = table.proxy_of_task.keys().cloned().collect();
            for task_id in holders {
                table.end_proxy(&task_id);
            }
            table.tasks.drain().count()
        };
        self.credentials.revoke_all();
        for task_id in self.ledger.live_tasks() {
            self.finish(&task_id);
        }
        count
    }

    /// The usage of a task that holds a live token (calls in flight not included).
    pub fn usage(&self, task_id: &str) -> Option<TaskUsage> {
        self.lock().tasks.get(task_id).map(Entry::usage)
    }

    /// Tokens reserved by the task's calls in flight.
    pub fn reserved(&self, task_id: &str) -> Option<u64> {
        self.lock().tasks.get(task_id).map(|e| e.allowance.counts().reserved)
    }

    /// Which task a presented token belongs to, if it is live and has budget left.
    pub fn authorize(&self, presented: &SecretString) -> Result<String, TokenError> {
        let presented = presented.expose_secret();
        if !presented.starts_with(TOKEN_PREFIX) {
            return Err(TokenError::Invalid);
        }
        let table = self.lock();
        let task_id = table.by_digest.get(&digest(presented)).ok_or(TokenError::Invalid)?;
        let usage = table.tasks.get(task_id).map(Entry::usage).ok_or(TokenError::Invalid)?;
        if usage.used >= usage.budget {
            return Err(TokenError::BudgetExhausted {
                task_id: task_id.clone(),
                used: usage.used,
                budget: usage.budget,
            });
        }
        Ok(task_id.clone())
    }

    /// Reserves `worst_case` tokens of the task's budget for a call about to be sent: refused
    /// when what is used, what calls in flight reserved and this would pass the budget.
    /// Settle the hold with what the call cost ([`Hold::settle`]); a hold dropped unsettled is
    /// charged in full.
    pub fn reserve(&self, task_id: &str, worst_case: u64) -> Result<Hold, TokenError> {
        let allowance = self
            .lock()
            .tasks
            .get(task_id)
            .map(|e| e.allowance.clone())
            .ok_or(TokenError::Invalid)?;
        allowance.try_reserve(worst_case).map_err(TokenError::WouldExceed)
    }

    /// Where the task's relayed calls add what they cost.
    pub(crate) fn cost_of(&self, task_id: &str) -> Option<Arc<RelayCost>> {
        self.lock().tasks.get(task_id).map(|e| e.cost.clone())
    }

    /// Adds `tokens` to the task's usage (a no-op once the task's token is revoked).
    pub fn charge(&self, task_id: &str, tokens: u64) {
        if let Some(entry) = self.lock().tasks.get(task_id) {
            entry.allowance.charge(tokens);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table stays consistent across a panic elsewhere (every update is one step).
        self.table.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_long_and_bound_to_their_task() {
        let tokens = TaskTokens::default();
        let a = tokens.issue("task-a", 100).unwrap();
        let b = tokens.issue("task-b", 100).unwrap();
        assert_ne!(a.expose_secret(), b.expose_secret());
        let body = a.expose_secret().strip_prefix(TOKEN_PREFIX).unwrap();
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body).unwrap();
        assert!(raw.len() * 8 >= 128, "at least 128 random bits");
        assert_eq!(tokens.authorize(&a).unwrap(), "task-a");
        assert_eq!(tokens.authorize(&b).unwrap(), "task-b");
        assert_eq!(
            tokens.authorize(&SecretString::from(format!("{TOKEN_PREFIX}forged"))),
            Err(TokenError::Invalid)
        );
        assert!(!format!("{tokens:?}").contains(body), "Debug shows no token");
    }

    #[test]
    fn revoked_and_reissued_tokens_stop_working_and_budget_carries_over() {
        let tokens = TaskTokens::default();
        let first = tokens.issue("t", 10).unwrap();
        tokens.charge("t", 4);
        let second = tokens.issue("t", 10).unwrap();
        assert_eq!(tokens.authorize(&first), Err(TokenError::Invalid));
        assert_eq!(tokens.usage("t"), Some(TaskUsage { budget: 10, used: 4 }));
        tokens.charge("t", 6);
        assert!(matches!(tokens.authorize(&second), Err(TokenError::BudgetExhausted { .. })));
        assert_eq!(tokens.revoke("t"), Some(TaskUsage { budget: 10, used: 10 }));
        assert_eq!(tokens.authorize(&second), Err(TokenError::Invalid));
        assert_eq!(tokens.revoke("t"), None);
        tokens.charge("t", 1);
        assert_eq!(tokens.usage("t"), None);
    }

    #[test]
    fn reservations_hold_the_budget_and_calls_in_flight_are_charged_at_the_end() {
        let tokens = TaskTokens::default();
        let token = tokens.issue("t", 100).unwrap();
        let first = tokens.reserve("t", 60).unwrap();
        let err = tokens.reserve("t", 41).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("cap of 100 LLM tokens of task t"), "{message}");
        assert!(message.contains("60 reserved by calls in flight"), "{message}");
        let second = tokens.reserve("t", 40).unwrap();
        assert_eq!(tokens.reserved("t"), Some(100));
        first.settle(15);
        assert_eq!(tokens.usage("t"), Some(TaskUsage { budget: 100, used: 15 }));
        assert_eq!(tokens.authorize(&token).unwrap(), "t");
        // Re-issued with the same budget: the call in flight still counts.
        let _again = tokens.issue("t", 100).unwrap();
        assert_eq!(tokens.reserved("t"), Some(40));
        assert!(tokens.reserve("t", 46).is_err());
        // The task ends with the call in flight: charged its whole reservation.
        assert_eq!(tokens.finish("t").usage, Some(TaskUsage { budget: 100, used: 55 }));
        second.settle(1);
        assert!(matches!(tokens.reserve("t", 1), Err(TokenError::Invalid)));
        // A new budget on re-issue counts what was in flight as used.
        tokens.issue("u", 100).unwrap();
        let hold = tokens.reserve("u", 30).unwrap();
        tokens.issue("u", 50).unwrap();
        assert_eq!(tokens.usage("u"), Some(TaskUsage { budget: 50, used: 30 }));
        drop(hold);
    }

    #[test]
    fn egress_credentials_name_their_task_until_it_ends_and_are_known_as_ended_after() {
        let tokens = TaskTokens::default();
        let a = tokens.issue_proxy("a").unwrap();
        let b = tokens.issue_proxy("b").unwrap();
        assert!(a.expose_secret().starts_with(PROXY_TOKEN_PREFIX));
        assert_ne!(a.expose_secret(), b.expose_secret());
        assert_eq!(tokens.proxy_task(a.expose_secret()), ProxyCredential::Live("a".into()));
        assert_eq!(tokens.proxy_task(b.expose_secret()), ProxyCredential::Live("b".into()));
        // Not a relay token, and a relay token is not a credential.
        assert_eq!(tokens.authorize(&a), Err(TokenError::Invalid));
        let relay = tokens.issue("a", 10).unwrap();
        assert_eq!(tokens.proxy_task(relay.expose_secret()), ProxyCredential::Unknown);
        assert_eq!(tokens.proxy_task("nxp_forged"), ProxyCredential::Unknown);
        tokens.finish("a");
        assert_eq!(tokens.proxy_task(a.expose_secret()), ProxyCredential::Ended("a".into()));
        // Re-issued: the earlier one is no longer the task's (unknown, not live).
        let b2 = tokens.issue_proxy("b").unwrap();
        assert_eq!(tokens.proxy_task(b.expose_secret()), ProxyCredential::Unknown);
        assert_eq!(tokens.revoke_all(), 0, "it counts relay tokens; b had none");
        assert_eq!(tokens.proxy_task(b2.expose_secret()), ProxyCredential::Ended("b".into()));
        assert!(!format!("{tokens:?}").contains(&a.expose_secret()[4..]), "Debug shows none");
    }

    #[test]
    fn revoke_all_ends_every_live_token() {
        let tokens = TaskTokens::default();
        let a = tokens.issue("a", 10).unwrap();
        let b = tokens.issue("b", 10).unwrap();
        assert_eq!(tokens.revoke_all(), 2);
        assert_eq!(tokens.authorize(&a), Err(TokenError::Invalid));
        assert_eq!(tokens.authorize(&b), Err(TokenError::Invalid));
        assert_eq!(tokens.revoke_all(), 0);
    }
}
