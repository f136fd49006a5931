//! The secrets each task may have sent on its behalf ("proxy mode"), and what the proxy needs
//! to keep them out of the task's container.
//!
//! A user's secret (say `GITHUB_TOKEN`) is bound to the hosts it is meant for
//! (`api.github.com`). The container never holds it: it writes the placeholder
//! `{{secret:GITHUB_TOKEN}}` into a request it sends through the proxy, and the proxy puts the
//! value in only when the request goes to one of those hosts (`inject.rs`). A secret with no
//! hosts was handed to the task some other way (over stdin): the proxy never sends it, but
//! still scrubs it out of whatever comes back and out of the task's LLM calls.
//!
//! The table lives as long as the task: [`TaskCredentials::grant`] when it starts,
//! [`crate::TaskTokens::finish`] (the one place a task ends for the egress) drops it. Values
//! are [`SecretString`]s, zeroized when dropped, and never shown by `Debug`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use nexbot_redact::{is_valid_secret_name, Redactor, SecretMap, SecretsError};
use secrecy::{ExposeSecret, SecretString};

use super::binding::{Binding, Destination, Spot};

/// The label name the provider keys get in a task's redactor: lower case, so it can never be
/// a secret's name (`[A-Z_][A-Z0-9_]*`).
const PROVIDER_KEY_LABEL: &str = "llm_provider_key";

/// One secret granted to a task.
pub struct Credential {
    /// `[A-Z_][A-Z0-9_]*`, at most 64 characters: what the placeholder names.
    pub name: String,
    pub value: SecretString,
    /// Where the value may be sent: hosts, and the places in their requests (`binding.rs`).
    /// Empty: a secret the task got another way (stdin), never substituted, only scrubbed.
    pub bindings: Vec<Binding>,
    /// Stored with `--confirm`: filled into a request of the task only once the chat's user
    /// allowed it for the task (the proxy asks its [`crate::Approver`] first).
    pub confirm: bool,
    /// A decoy (`decoy.rs`): bound nowhere, never filled in; a request carrying its
    /// placeholder is refused and rings the alarm. The task's container holds only the
    /// placeholder, and no tunnel is opened for the task, as for a proxy-mode secret.
    pub decoy: bool,
}

impl Credential {
    pub fn new(name: impl Into<String>, value: SecretString, bindings: Vec<Binding>) -> Self {
        Self { name: name.into(), value, bindings, confirm: false, decoy: false }
    }

    /// A decoy secret (`decoy.rs`): no binding, never filled in anywhere.
    pub fn decoy(name: impl Into<String>, value: SecretString) -> Self {
        Self { decoy: true, ..Self::new(name, value, Vec::new()) }
    }

    /// This credential, asked about before its first use by the task (`--confirm`).
    pub fn confirmed_first(mut self) -> Self {
        self.confirm = true;
        self
    }

    /// Whether a request to `to` may carry the value somewhere.
    pub(crate) fn reaches(&self, to: &Destination<'_>) -> bool {
        self.bindings.iter().any(|b| b.reaches(to))
    }

    /// Whether the value may fill a placeholder at `spot` of a request to `to`.
    pub(crate) fn allows(&self, to: &Destination<'_>, spot: Spot<'_>) -> bool {
        self.bindings.iter().any(|b| b.allows(to, spot))
    }

    /// The places its bindings allow, in words.
    pub(crate) fn places(&self) -> String {
        let places: Vec<String> = self.bindings.iter().map(Binding::places).collect();
        places.join("; ")
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("name", &self.name)
            .field("value", &"[hidden]")
            .field("bindings", &self.bindings)
            .field("confirm", &self.confirm)
            .field("decoy", &self.decoy)
            .finish()
    }
}

/// Why a set of credentials was not granted. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error(
        "invalid secret name {name:?}: must match [A-Z_][A-Z0-9_]* and be at most 64 characters"
    )]
    InvalidName { name: String },
    #[error("secret {name} is granted twice to task {task_id}")]
    Duplicate { task_id: String, name: String },
    /// Count or value size out of the secrets spec's limits.
    #[error(transparent)]
    Limits(#[from] SecretsError),
}

/// The credentials of one running task, as the proxy and relay use them.
pub(crate) struct TaskSecrets {
    /// By name, in name order.
    credentials: Vec<Credential>,
    /// Every value of the task (bound or not) and the provider keys.
    redactor: Arc<Redactor>,
    /// The names the redactor labels (the task's and [`PROVIDER_KEY_LABEL`]).
    labels: Vec<String>,
}

impl TaskSecrets {
    pub(crate) fn get(&self, name: &str) -> Option<&Credential> {
        self.credentials
            .binary_search_by(|c| c.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.credentials[i])
    }

    /// The names of its credentials, in order.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.credentials.iter().map(|c| c.name.as_str()).collect()
    }

    pub(crate) fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    /// The first proxy-mode credential (bound to some host): while a task holds one, no
    /// tunnel is opened for it at all — a value filled into a request to its bound host could
    /// be stored there and read back through a tunnel to any other name (or the same server
    /// behind a shared front), where nothing can scrub it.
    pub(crate) fn proxied(&self) -> Option<&Credential> {
        self.credentials.iter().find(|c| !c.bindings.is_empty() || c.decoy)
    }

    /// Whether the task was given a decoy.
    pub(crate) fn has_decoy(&self) -> bool {
        self.credentials.iter().any(|c| c.decoy)
    }

    /// `text` with every value (in any form the redactor knows) replaced by its label, and the
    /// names of the secrets found (`llm_provider_key` for a provider key).
    pub(crate) fn scrub(&self, text: &str) -> (String, BTreeSet<String>) {
        let clean = self.redactor.redact(text);
        if clean == text {
            return (clean, BTreeSet::new());
        }
        let mut found = BTreeSet::new();
        for name in &self.labels {
            if count_labels(&clean, name) > count_labels(text, name) {
                let reported = match name.starts_with(PROVIDER_KEY_LABEL) {
                    true => PROVIDER_KEY_LABEL,
                    false => name.as_str(),
                };
                found.insert(reported.to_owned());
            }
        }
        if found.is_empty() {
            // The labels carry no names (a value that reads like one): say that much.
            found.insert("(unnamed)".to_owned());
        }
        (clean, found)
    }
}

/// How often the label of `name` (`…REDACTED:NAME…`, whatever the brackets) occurs in `text`.
fn count_labels(text: &str, name: &str) -> usize {
    let needle = format!("REDACTED:{name}");
    text.match_indices(&needle)
        .filter(|(at, _)| {
            let next = text.as_bytes().get(at + needle.len()).copied();
            !next.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .count()
}

impl std::fmt::Debug for TaskSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSecrets").field("credentials", &self.credentials).finish()
    }
}

/// Every running task's credentials. Cheap to share behind an `Arc`
/// ([`crate::Egress::credentials`]).
#[derive(Default)]
pub struct TaskCredentials {
    tasks: Mutex<HashMap<String, Arc<TaskSecrets>>>,
    /// Scrubbed like a task's own values (a container never holds them either).
    provider_keys: Vec<SecretString>,
}

impl std::fmt::Debug for TaskCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tasks = self.lock();
        let mut map = f.debug_map();
        for (task, secrets) in tasks.iter() {
            let names: Vec<&str> = secrets.credentials.iter().map(|c| c.name.as_str()).collect();
            map.entry(task, &names);
        }
        map.finish()
    }
}

impl TaskCredentials {
    /// A table whose redactors also scrub `provider_keys`.
    pub(crate) fn new<'a>(provider_keys: impl IntoIterator<Item = &'a SecretString>) -> Self {
        Self {
            tasks: Mutex::default(),
            provider_keys: provider_keys
                .into_iter()
                .filter(|k| !k.expose_secret().is_empty())
                .cloned()
                .collect(),
        }
    }

    /// Gives `task_id` these credentials, replacing any it had (an empty list takes them all
    /// away). Names must be valid secret names, each once; count and value sizes are the
    /// secrets spec's (at most 50, values of 8 bytes to 64 KiB — shorter values cannot be
    /// scrubbed without wrecking what comes back).
    pub fn grant(
        &self,
        task_id: &str,
        credentials: Vec<Credential>,
    ) -> Result<(), CredentialError> {
        self.grant_watching(task_id, credentials, Vec::new())
    }

    /// [`TaskCredentials::grant`], and `watched`: values the task was not given but that its
    /// chat or the operator own (`(label name, value)`; an empty name labels `[REDACTED]`).
    /// The task's LLM calls are scanned for them too: a process can pick a value up elsewhere
    /// (a file, an earlier task's output) and the relay is the last place before the
    /// provider. Not counted against the task's limit of secrets; never filled in anywhere.
    pub fn grant_watching(
        &self,
        task_id: &str,
        credentials: Vec<Credential>,
        watched: Vec<(String, SecretString)>,
    ) -> Result<(), CredentialError> {
        self.grant_owned(task_id, credentials, watched).map(drop)
    }

    /// [`TaskCredentials::grant_watching`], returning what was granted (`None`: nothing, the
    /// task's are taken away) for [`TaskCredentials::revoke_own`].
    pub(crate) fn grant_owned(
        &self,
        task_id: &str,
        credentials: Vec<Credential>,
        watched: Vec<(String, SecretString)>,
    ) -> Result<Option<Arc<TaskSecrets>>, CredentialError> {
        if credentials.is_empty() && watched.is_empty() {
            self.revoke(task_id);
            return Ok(None);
        }
        let mut map = SecretMap::new();
        for credential in &credentials {
            if !is_valid_secret_name(&credential.name) {
                return Err(CredentialError::InvalidName { name: credential.name.clone() });
            }
            if map.get(&credential.name).is_some() {
                return Err(CredentialError::Duplicate {
                    task_id: task_id.to_owned(),
                    name: credential.name.clone(),
                });
            }
            map.insert(credential.name.clone(), credential.value.clone());
        }
        map.validate()?;
        let mut labels: Vec<String> = credentials.iter().map(|c| c.name.clone()).collect();
        let provider_labels: Vec<String> =
            (0..self.provider_keys.len()).map(|i| format!("{PROVIDER_KEY_LABEL}_{i}")).collect();
        // Distinct labels, one name: `llm_provider_key` never clashes with a secret's name.
        labels.extend(provider_labels.iter().cloned());
        labels.extend(watched.iter().filter(|(n, _)| !n.is_empty()).map(|(n, _)| n.clone()));
        labels.sort();
        labels.dedup();
        let pairs = map
            .iter()
            .chain(provider_labels.iter().map(String::as_str).zip(&self.provider_keys))
            .chain(watched.iter().map(|(name, value)| (name.as_str(), value)));
        let redactor = Arc::new(Redactor::from_pairs(pairs));
        drop(map);
        let mut credentials = credentials;
        credentials.sort_by(|a, b| a.name.cmp(&b.name));
        let secrets = Arc::new(TaskSecrets { credentials, redactor, labels });
        self.lock().insert(task_id.to_owned(), secrets.clone());
        Ok(Some(secrets))
    }

    /// Takes `granted` away from `task_id`, only if it is still what the task holds (a newer
    /// grant to the same name stays).
    pub(crate) fn revoke_own(&self, task_id: &str, granted: &Arc<TaskSecrets>) {
        let mut tasks = self.lock();
        if tasks.get(task_id).is_some_and(|held| Arc::ptr_eq(held, granted)) {
            tasks.remove(task_id);
        }
    }

    /// Takes the task's credentials away (their values are zeroized once no request in flight
    /// holds them); whether it had any. [`crate::TaskTokens::finish`] calls it.
    pub fn revoke(&self, task_id: &str) -> bool {
        self.lock().remove(task_id).is_some()
    }

    /// Takes every task's credentials away (at shutdown).
    pub fn revoke_all(&self) {
        self.lock().clear();
    }

    /// Whether the task holds credentials now.
    pub fn has(&self, task_id: &str) -> bool {
        self.lock().contains_key(task_id)
    }

    /// The names of the task's credentials, in order.
    pub fn names(&self, task_id: &str) -> Vec<String> {
        self.lock()
            .get(task_id)
            .map(|s| s.credentials.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default()
    }

    /// The redactor of the task's values and the provider keys, for scrubbing elsewhere.
    pub fn redactor(&self, task_id: &str) -> Option<Arc<Redactor>> {
        self.lock().get(task_id).map(|s| s.redactor.clone())
    }

    pub(crate) fn for_task(&self, task_id: &str) -> Option<Arc<TaskSecrets>> {
        self.lock().get(task_id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskSecrets>>> {
        // Every update is one insert or remove: the map stays consistent across a panic.
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(name: &str, value: &str, hosts: &[&str]) -> Credential {
        Credential::new(
            name,
            SecretString::from(value.to_owned()),
            hosts.iter().map(|h| Binding::new(h, &[]).unwrap()).collect(),
        )
    }

    fn reaches(credential: &Credential, host: &str) -> bool {
        credential.reaches(&Destination { host, port: 443, https: true })
    }

    #[test]
    fn grants_are_checked_bound_to_hosts_and_revoked() {
        let key = SecretString::from("sk-provider-key-0123456789".to_owned());
        let table = TaskCredentials::new([&key]);
        let err = table.grant("t", vec![credential("bad-name", "value-123456", &[])]).unwrap_err();
        assert!(matches!(err, CredentialError::InvalidName { .. }), "{err}");
        let err = table
            .grant(
                "t",
                vec![credential("A", "value-123456", &[]), credential("A", "x2345678", &[])],
            )
            .unwrap_err();
        assert!(err.to_string().contains("granted twice"), "{err}");
        let err = table.grant("t", vec![credential("SHORT", "abc", &[])]).unwrap_err();
        assert!(err.to_string().contains("too short"), "{err}");
        assert!(!table.has("t"));

        table
            .grant(
                "t",
                vec![
                    credential("GITHUB_TOKEN", "ghp-value-PLANTED-1", &["api.github.com"]),
                    credential("STDIN_ONLY", "stdin-value-PLANTED-2", &[]),
                    credential("WILD", "wild-value-PLANTED-3", &["*.example.com"]),
                ],
            )
            .unwrap();
        let secrets = table.for_task("t").unwrap();
        assert!(reaches(secrets.get("GITHUB_TOKEN").unwrap(), "api.github.com"));
        assert!(!reaches(secrets.get("GITHUB_TOKEN").unwrap(), "github.com"));
        assert!(!reaches(secrets.get("STDIN_ONLY").unwrap(), "api.github.com"));
        assert!(reaches(secrets.get("WILD").unwrap(), "a.example.com"));
        assert!(!reaches(secrets.get("WILD").unwrap(), "example.com"));
        // A task with any proxy-mode credential opens no tunnel.
        assert_eq!(secrets.proxied().unwrap().name, "GITHUB_TOKEN");
        assert_eq!(table.names("t"), ["GITHUB_TOKEN", "STDIN_ONLY", "WILD"]);

        let (clean, found) =
            secrets.scrub("a stdin-value-PLANTED-2 b sk-provider-key-0123456789 c");
        assert!(!clean.contains("PLANTED") && !clean.contains("sk-provider"), "{clean}");
        assert_eq!(found.into_iter().collect::<Vec<_>>(), ["STDIN_ONLY", PROVIDER_KEY_LABEL]);
        let debug = format!("{table:?} {secrets:?}");
        assert!(!debug.contains("PLANTED"), "{debug}");
        assert!(debug.contains("GITHUB_TOKEN"), "{debug}");

        assert!(table.revoke("t"));
        assert!(!table.has("t") && table.redactor("t").is_none());
        assert!(!table.revoke("t"));
    }
}
