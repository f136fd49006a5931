//! The secrets vault: each chat's secrets, and the operator's, encrypted at rest in the store.
//!
//! Its one job: hold the master key's derived key and turn sealed rows into values and back.
//! Why a crate of its own: the key, the cipher (`chacha20poly1305`, `argon2`) and the opened
//! values are reachable only through this crate, and only the crates that act on secrets depend
//! on it (the host, the delegation, the control API, `/secret`'s `nexbot-commands`). The egress gets proxy-mode credentials through its own `Credential` type,
//! the control API and its dashboard reach what [`Vault`] exposes (names, bindings, set and
//! delete; never a value back), and no other crate can name a vault type at all: the crate
//! graph (`ARCHITECTURE.md`, checked by the tidy test) enforces it. The store keeps the rows
//! (`nexbot_store::vault`) but never sees a key or an open value. The cryptography is in
//! `crypto.rs`; bindings of an earlier release in `legacy.rs`.
//!
//! Invariants:
//! - A value is stored only sealed (XChaCha20-Poly1305, a random nonce per value, its scope
//!   and name bound as associated data) under a key derived from `NEXBOT_MASTER_KEY`; names,
//!   hosts and mode are plain (listing needs no key).
//! - Values are decrypted once, at start-up and when set, into `secrecy` types, so every exit
//!   can be scanned for them ([`nexbot_agent::exits::Exits`]); they never reach a log, a
//!   prompt, an error or `Debug`.
//! - A wrong master key, a corrupt or moved row: that secret is unreadable with an error that
//!   says which and why; the daemon goes on, nothing is replaced by an empty value.
//! - Without a (long enough) master key the vault is off and says so; listing and deleting
//!   still work.

mod crypto;
pub mod decoys;
mod legacy;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use nexbot_core::ChatRef;
use nexbot_egress::Binding;
use nexbot_redact::{is_valid_secret_name, MIN_SECRET_VALUE_BYTES};
use secrecy::{ExposeSecret, SecretString};

use crypto::{CryptoError, VaultKey};
use nexbot_agent::exits::Exits;
use nexbot_store::vault::{Resealed, SealedRow, VaultMeta};
use nexbot_store::{unix_now, Store, StoreError};
use serde::{Deserialize, Serialize};

pub use crypto::MIN_MASTER_KEY_CHARS;
#[cfg(any(test, feature = "test-support"))]
pub use legacy::store_legacy_row;
pub use legacy::{narrow_command, LegacyBinding};

/// A value is at most this many bytes.
pub const MAX_VALUE_BYTES: usize = 8 * 1024;
/// At most this many hosts are bound to one secret.
pub const MAX_HOSTS: usize = 16;
/// Secrets one scope may store unless `vault.max_secrets_per_scope` says otherwise.
pub const DEFAULT_MAX_PER_SCOPE: usize = 256;

/// The config's `[vault]` section: the secrets vault's limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VaultConfig {
    /// Secrets one scope (a chat, or the operator) may store. Every value is scanned for at
    /// each of that chat's exits and in its tasks' LLM calls, so the scan's cost and memory
    /// grow with it; setting one more is refused with an error naming this setting.
    pub max_secrets_per_scope: usize,
    /// Decoy secrets to plant ([`decoys`]): names from [`decoys::known_names`], or a name of
    /// the operator's with its kind (`ACME_DEPLOY_TOKEN:github`). None (the
    /// default of a config written before decoys existed) plants none; `nexbot init`'s
    /// config lists [`decoys::DEFAULT_DECOYS`].
    pub decoys: Vec<String>,
}

impl Default for VaultConfig {
    fn default() -> Self {
        Self { max_secrets_per_scope: DEFAULT_MAX_PER_SCOPE, decoys: Vec::new() }
    }
}

/// Held by every task given a value (in [`Resolved`]) and by the vault while the value is
/// current. A changed or deleted value stays in the exit scan while any task still holds it
/// (its process may print it), and leaves it when the last one ends ([`Vault::release`]).
#[derive(Debug, Clone, Default)]
pub struct SecretHold(Arc<()>);

/// A changed or deleted value some running task still holds.
struct Retired {
    scope: SecretScope,
    name: String,
    value: SecretString,
    held: std::sync::Weak<()>,
}

/// Whose secret: a chat's, or the operator's (the daemon's own tool backends).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretScope {
    Chat(ChatRef),
    Operator,
}

impl SecretScope {
    /// The stored form: the chat reference (`telegram:42`) or `operator`.
    pub fn key(&self) -> String {
        match self {
            Self::Chat(chat) => chat.to_string(),
            Self::Operator => "operator".to_owned(),
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        if text == "operator" {
            return Ok(Self::Operator);
        }
        text.parse::<ChatRef>().map(Self::Chat).map_err(|e| e.to_string())
    }
}

impl fmt::Display for SecretScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Chat(chat) => write!(f, "chat {chat}"),
            Self::Operator => f.write_str("the operator scope"),
        }
    }
}

/// How a subagent uses a secret (`docs/product.md` §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The container holds only the placeholder; the egress proxy fills the value in for
    /// the bound hosts. The default for a secret bound to at least one host.
    Proxy,
    /// The value travels to the container in the `execute` request (attached stdin) and is
    /// filled in there. The only mode for a secret bound to no host.
    Stdin,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proxy => "proxy",
            Self::Stdin => "stdin",
        }
    }

    pub fn parse(text: &str) -> Result<Self, VaultError> {
        match text {
            "proxy" => Ok(Self::Proxy),
            "stdin" => Ok(Self::Stdin),
            other => Err(VaultError::BadMode(other.to_owned())),
        }
    }
}

/// What is known of a secret without its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub scope: SecretScope,
    pub name: String,
    pub hosts: Vec<String>,
    pub mode: Mode,
    /// Unix seconds.
    pub updated_at: i64,
    /// Why the value cannot be used, if it cannot (wrong master key, corrupt row).
    pub unreadable: Option<String>,
    /// Stored with `--confirm`: a task's first use asks the chat's user.
    pub confirm: bool,
}

/// A secret a task may use: its value and where it may go.
pub struct Resolved {
    pub name: String,
    pub value: SecretString,
    /// Where the value may go, parsed once when the vault read or stored it.
    pub hosts: Vec<Binding>,
    pub mode: Mode,
    /// Keep it while the task runs: the value stays in the exit scan until then, even if it
    /// is changed or deleted meanwhile.
    pub hold: SecretHold,
    /// Stored with `--confirm`: the egress fills it in only once the user allowed it for
    /// the task.
    pub confirm: bool,
    /// A decoy ([`decoys`]), with the binding its task's prompt shows (a real provider's
    /// API); bound nowhere (`hosts` is empty), never filled in.
    pub decoy: Option<String>,
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("mode", &self.mode)
            .field("confirm", &self.confirm)
            .field("decoy", &self.decoy.is_some())
            .finish_non_exhaustive()
    }
}

/// Whether the vault can be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VaultState {
    On,
    /// No usable master key: the reason, for `/status`, doctor and errors.
    Off(String),
    /// The master key does not open this vault.
    WrongKey,
}

/// Why a vault operation failed. Never holds a value.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    #[error("the secrets vault is off: {0}")]
    Off(String),
    #[error(
        "NEXBOT_MASTER_KEY is not the key this vault was written with, so no secret can be \
         read or stored; start with the right key (or, to start over, delete the secrets with \
         `nexbot-ctl secrets rm`)"
    )]
    WrongKey,
    #[error("invalid secret name {0:?}: use [A-Z_][A-Z0-9_]*, at most 64 characters")]
    BadName(String),
    #[error(
        "a secret's value must be {MIN_SECRET_VALUE_BYTES} bytes to {max} KiB; this one is {0} bytes",
        max = MAX_VALUE_BYTES / 1024
    )]
    BadValue(usize),
    #[error(
        "invalid binding: {0} (a host is api.github.com, *.example.com, https://host:port or \
         http://host:port; a place is header:NAME, path:/PREFIX, query:NAME or body)"
    )]
    BadBinding(String),
    #[error(
        "secret {0} names no host: give --host HOST (the egress proxy then fills the value in \
         for that host only, in the Authorization header unless --in names other places), or \
         --mode stdin to hand the value to the task's container (it then holds the value)"
    )]
    NeedsHost(String),
    #[error("at most {MAX_HOSTS} hosts can be bound to one secret")]
    TooManyHosts,
    #[error(
        "{scope} already has {cap} secrets, the most one scope may store \
         (vault.max_secrets_per_scope): delete one first, or raise the setting"
    )]
    TooMany { scope: SecretScope, cap: usize },
    #[error(
        "secret {0}: --confirm asks before the egress fills the value into a task's request, \
         so it needs proxy mode (a host, and no --mode stdin)"
    )]
    ConfirmNeedsProxy(String),
    #[error("invalid mode {0:?}: use proxy or stdin")]
    BadMode(String),
    #[error(
        "secret {0} is bound to no host, so it cannot be used in proxy mode: add --host HOST, \
         or use --mode stdin"
    )]
    ProxyNeedsHost(String),
    #[error("no secret named {name} in {scope}{}", available_names(available))]
    NotFound { name: String, scope: SecretScope, available: Vec<String> },
    #[error(
        "secret {name} of {scope} cannot be decrypted: the stored row was altered, moved to \
         another chat or name, or is corrupt; set it again"
    )]
    Corrupt { name: String, scope: SecretScope },
    #[error(
        "secret {name} of {scope} is not used: its binding {host:?}, stored by an earlier \
         version as a bare host, {reason}; bind it to the service's own host name: {command}"
    )]
    LegacyBinding {
        name: String,
        scope: SecretScope,
        host: String,
        reason: String,
        command: String,
    },
    #[error("the vault's key cannot be made: {0}")]
    Crypto(String),
    #[error("vault.decoys: {0}")]
    Decoy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn available_names(names: &[String]) -> String {
    if names.is_empty() {
        " (none is stored)".to_owned()
    } else {
        format!(" (stored: {})", names.join(", "))
    }
}

#[derive(Clone)]
struct Entry {
    value: Result<SecretString, Unreadable>,
    hosts: Vec<Binding>,
    mode: Mode,
    updated_at: i64,
    hold: SecretHold,
    confirm: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreadable {
    WrongKey,
    Corrupt,
    Off,
}

type Key = (SecretScope, String);

/// The vault. Share it behind an `Arc`.
pub struct Vault {
    store: Store,
    key: Option<VaultKey>,
    state: VaultState,
    entries: RwLock<BTreeMap<Key, Entry>>,
    /// Values deleted or replaced since start: still scanned for at the exits until the daemon
    /// restarts (a task that was given one may still be running).
    retired: std::sync::Mutex<Vec<Retired>>,
    /// `vault.max_secrets_per_scope`.
    max_per_scope: std::sync::atomic::AtomicUsize,
    exits: Option<Arc<Exits>>,
    /// The planted decoys ([`Vault::plant_decoys`]), in name order.
    decoys: RwLock<Vec<decoys::Decoy>>,
}

impl fmt::Debug for Vault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let names: Vec<String> = entries.keys().map(|(s, n)| format!("{}/{n}", s.key())).collect();
        f.debug_struct("Vault").field("state", &self.state).field("secrets", &names).finish()
    }
}

/// What a sealed value is bound to besides its scope and name: its mode and hosts, exactly
/// as stored, and `--confirm` when it was stored with it (appended only then, so a value
/// sealed before the flag existed opens as it did).
fn binding(mode: &str, hosts_json: &str, confirm: bool) -> String {
    match confirm {
        true => format!("{mode}\0{hosts_json}\0confirm"),
        false => format!("{mode}\0{hosts_json}"),
    }
}

/// How a secret is stored besides its value ([`Vault::set_bound`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Bind<'a> {
    /// Hosts the proxy may fill it in for.
    pub hosts: &'a [String],
    /// Where in their requests (`header:NAME`, …); empty: the `Authorization` header.
    pub places: &'a [String],
    /// `None`: proxy for a secret bound to a host, stdin otherwise.
    pub mode: Option<Mode>,
    /// `--confirm`: a task's first use asks the chat's user (proxy mode only).
    pub confirm: bool,
}

/// Why a master key is not used, if it is not.
fn master_key_problem(master: Option<&SecretString>) -> Option<String> {
    match master {
        None => Some(
            "NEXBOT_MASTER_KEY is not set; set it (e.g. `openssl rand -base64 32`) and restart \
             to store secrets"
                .to_owned(),
        ),
        Some(key) if key.expose_secret().chars().count() < MIN_MASTER_KEY_CHARS => Some(format!(
            "NEXBOT_MASTER_KEY is shorter than {MIN_MASTER_KEY_CHARS} characters; use a \
             random one (e.g. `openssl rand -base64 32`) and restart"
        )),
        Some(_) => None,
    }
}

/// A fresh key, salt and check value for a vault (new or rotated).
fn fresh_meta(master: &SecretString) -> Result<(VaultKey, VaultMeta), VaultError> {
    let crypto = |e: CryptoError| VaultError::Crypto(e.to_string());
    let salt = crypto::random::<{ crypto::SALT_BYTES }>().map_err(crypto)?.to_vec();
    let kdf = crypto::KDF.to_owned();
    let key = VaultKey::derive(master, &kdf, &salt).map_err(crypto)?;
    let (check_nonce, check_sealed) = key.seal_check().map_err(crypto)?;
    Ok((key, VaultMeta { kdf, salt, check_nonce, check_sealed }))
}

fn validate(
    name: &str,
    value: &SecretString,
    hosts: &[String],
    places: &[String],
    mode: Option<Mode>,
) -> Result<(Vec<Binding>, Mode), VaultError> {
    if !is_valid_secret_name(name) {
        return Err(VaultError::BadName(name.to_owned()));
    }
    let len = value.expose_secret().len();
    if !(MIN_SECRET_VALUE_BYTES..=MAX_VALUE_BYTES).contains(&len) {
        return Err(VaultError::BadValue(len));
    }
    if hosts.len() > MAX_HOSTS {
        return Err(VaultError::TooManyHosts);
    }
    if hosts.is_empty() && !places.is_empty() {
        return Err(VaultError::BadBinding("places (--in) are given but no host".into()));
    }
    let mut bound = Vec::new();
    for host in hosts {
        // Public suffixes, `*` and unknown places are refused here (`Binding::new`).
        let binding = Binding::new(host, places).map_err(VaultError::BadBinding)?;
        if !bound.contains(&binding) {
            bound.push(binding);
        }
    }
    let mode = match mode {
        Some(Mode::Proxy) if bound.is_empty() => {
            return Err(VaultError::ProxyNeedsHost(name.to_owned()))
        }
        Some(mode) => mode,
        // A value with no host would go into the container: only when asked for by name.
        None if bound.is_empty() => return Err(VaultError::NeedsHost(name.to_owned())),
        None => Mode::Proxy,
    };
    Ok((bound, mode))
}

impl Vault {
    /// Opens the vault of `store` with `master` (the `NEXBOT_MASTER_KEY`). Only a store
    /// failure is an error: a missing, short or wrong key leaves the vault off (or its
    /// secrets unreadable) with the reason logged, and the daemon goes on.
    pub async fn open(
        store: Store,
        master: Option<&SecretString>,
        exits: Option<Arc<Exits>>,
    ) -> Result<Arc<Self>, VaultError> {
        let (meta, rows) = store.vault_contents().await?;
        let problem = master_key_problem(master);
        let (key, state) = match (problem, master) {
            (Some(reason), _) => {
                if !rows.is_empty() {
                    tracing::warn!(secrets = rows.len(), "the secrets vault is off: {reason}");
                }
                (None, VaultState::Off(reason))
            }
            (None, None) => (None, VaultState::Off("no master key".to_owned())),
            (None, Some(master)) => match meta {
                Some(meta) => {
                    let master = master.clone();
                    let derived = tokio::task::spawn_blocking(move || {
                        VaultKey::derive(&master, &meta.kdf, &meta.salt).map(|key| {
                            (key.opens_check(&meta.check_nonce, &meta.check_sealed), key)
                        })
                    })
                    .await
                    .map_err(|e| VaultError::Crypto(e.to_string()))?
                    .map_err(|e| VaultError::Crypto(e.to_string()))?;
                    match derived {
                        (true, key) => (Some(key), VaultState::On),
                        (false, _) => {
                            tracing::error!(
                                secrets = rows.len(),
                                "NEXBOT_MASTER_KEY does not open the secrets vault: it is not the \
                                 key the vault was written with; its secrets cannot be used"
                            );
                            (None, VaultState::WrongKey)
                        }
                    }
                }
                None => {
                    let master = master.clone();
                    let (key, meta) = tokio::task::spawn_blocking(move || fresh_meta(&master))
                        .await
                        .map_err(|e| VaultError::Crypto(e.to_string()))??;
                    store.create_vault_meta(meta).await?;
                    (Some(key), VaultState::On)
                }
            },
        };
        let mut entries = BTreeMap::new();
        for row in rows {
            let Ok(scope) = SecretScope::parse(&row.scope) else {
                tracing::warn!(scope = %row.scope, name = %row.name, "a stored secret has an unknown scope; skipped");
                continue;
            };
            // A binding that does not parse is a corrupt row: it fails closed, never into
            // stdin mode or no hosts.
            let parsed = serde_json::from_str::<Vec<String>>(&row.hosts)
                .ok()
                .and_then(|hosts| {
                    hosts.iter().map(|h| Binding::parse(h)).collect::<Result<Vec<_>, _>>().ok()
                })
                .zip(Mode::parse(&row.mode).ok());
            let bound = binding(&row.mode, &row.hosts, row.confirm);
            let value = match (&key, &state, &parsed) {
                (_, _, None) => Err(Unreadable::Corrupt),
                (Some(key), _, _) => key
                    .open(&row.scope, &row.name, &bound, &row.nonce, &row.sealed)
                    .map_err(|_| {
                        tracing::error!(%scope, name = %row.name, "a stored secret cannot be decrypted (altered, moved or corrupt row)");
                        Unreadable::Corrupt
                    }),
                (None, VaultState::WrongKey, _) => Err(Unreadable::WrongKey),
                (None, _, _) => Err(Unreadable::Off),
            };
            let (hosts, mode) = parsed.unwrap_or((Vec::new(), Mode::Proxy));
            let entry = Entry {
                value,
                hosts,
                mode,
                updated_at: row.updated_at,
                hold: SecretHold::default(),
                confirm: row.confirm,
            };
            legacy::warn_at_open(&scope, &row.name, &entry);
            entries.insert((scope, row.name), entry);
        }
        let vault = Arc::new(Self {
            store,
            key,
            state,
            entries: RwLock::new(entries),
            retired: std::sync::Mutex::default(),
            max_per_scope: DEFAULT_MAX_PER_SCOPE.into(),
            exits,
            decoys: RwLock::default(),
        });
        vault.refresh_exits();
        Ok(vault)
    }

    pub fn state(&self) -> &VaultState {
        &self.state
    }

    fn usable(&self) -> Result<&VaultKey, VaultError> {
        match (&self.state, &self.key) {
            (VaultState::On, Some(key)) => Ok(key),
            (VaultState::WrongKey, _) => Err(VaultError::WrongKey),
            (VaultState::Off(reason), _) => Err(VaultError::Off(reason.clone())),
            (VaultState::On, None) => Err(VaultError::Off("no key".into())),
        }
    }

    /// Sets `vault.max_secrets_per_scope` (at least 1).
    pub fn set_max_per_scope(&self, cap: usize) {
        self.max_per_scope.store(cap.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    fn refresh_exits(&self) {
        let Some(exits) = &self.exits else { return };
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        retired.retain(|r| r.held.strong_count() > 0);
        let keys: Vec<String> = entries.keys().map(|(scope, _)| scope.key()).collect();
        let retired_keys: Vec<String> = retired.iter().map(|r| r.scope.key()).collect();
        let decoys = self.decoys.read().unwrap_or_else(|p| p.into_inner());
        let operator = SecretScope::Operator.key();
        exits.refresh(
            entries
                .iter()
                .zip(&keys)
                .filter_map(|(((_, name), e), scope)| {
                    Some((Some(scope.as_str()), name.as_str(), e.value.as_ref().ok()?))
                })
                .chain(
                    retired
                        .iter()
                        .zip(&retired_keys)
                        .map(|(r, scope)| (Some(scope.as_str()), r.name.as_str(), &r.value)),
                )
                // Shown as a bare `[REDACTED]` in a chat: a decoy's name says nothing there.
                .chain(decoys.iter().map(|d| (Some(operator.as_str()), d.name.as_str(), &d.value))),
        );
    }

    /// Drops from the exit scan the changed or deleted values no running task holds any
    /// more. Called when a task ends, after it let go of its [`SecretHold`]s.
    pub fn release(&self) {
        let gone = {
            let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            let before = retired.len();
            retired.retain(|r| r.held.strong_count() > 0);
            retired.len() != before
        };
        if gone {
            self.refresh_exits();
        }
    }

    /// Every readable value of `chat` and of the operator, current or retired but still held,
    /// as `(label name, value)`: the chat's named, the operator's unnamed (a chat never learns
    /// the names of the operator's secrets). What the relay scans a task's LLM calls for.
    pub fn watched(&self, chat: &ChatRef) -> Vec<(String, SecretString)> {
        let own = SecretScope::Chat(chat.clone());
        let label = |scope: &SecretScope, name: &str| match scope == &own {
            true => name.to_owned(),
            false => String::new(),
        };
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let mut values: Vec<(String, SecretString)> = entries
            .iter()
            .filter(|((scope, _), _)| scope == &own || scope == &SecretScope::Operator)
            .filter_map(|((scope, name), e)| Some((label(scope, name), e.value.clone().ok()?)))
            .collect();
        let retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        values.extend(
            retired
                .iter()
                .filter(|r| r.held.strong_count() > 0)
                .filter(|r| r.scope == own || r.scope == SecretScope::Operator)
                .map(|r| (label(&r.scope, &r.name), r.value.clone())),
        );
        let decoys = self.decoys.read().unwrap_or_else(|p| p.into_inner());
        values.extend(decoys.iter().map(|d| (d.name.clone(), d.value.clone())));
        values
    }

    /// Plants the decoys `names` (each a known kind, [`decoys::check_names`]): the value
    /// kept in the store since the first start that planted it, a fresh one otherwise. An
    /// empty list plants none. Returns how many are planted.
    pub async fn plant_decoys(&self, names: &[String]) -> Result<usize, VaultError> {
        decoys::check_names(names).map_err(VaultError::Decoy)?;
        let mut planted = Vec::new();
        for entry in names {
            let (name, kind) = decoys::parse(entry).map_err(VaultError::Decoy)?;
            let fresh = decoys::fresh_value(kind).map_err(VaultError::Decoy)?;
            let value = SecretString::from(self.store.plant_decoy(&name, &fresh).await?);
            planted.push(decoys::Decoy { name, value, kind });
        }
        planted.sort_by(|a, b| a.name.cmp(&b.name));
        let count = planted.len();
        *self.decoys.write().unwrap_or_else(|p| p.into_inner()) = planted;
        self.refresh_exits();
        if count > 0 {
            tracing::info!(decoys = count, "decoy secrets planted");
        }
        Ok(count)
    }

    /// How many decoys are planted.
    pub fn decoy_count(&self) -> usize {
        self.decoys.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The decoy `name`, when one is planted and `scope` (a chat) has no real secret of that
    /// name (checked by the caller).
    fn decoy(&self, scope: &SecretScope, name: &str) -> Option<Resolved> {
        let SecretScope::Chat(_) = scope else { return None };
        let decoys = self.decoys.read().unwrap_or_else(|p| p.into_inner());
        let decoy = decoys.iter().find(|d| d.name == name)?;
        Some(Resolved {
            name: name.to_owned(),
            value: decoy.value.clone(),
            hosts: Vec::new(),
            mode: Mode::Proxy,
            hold: SecretHold::default(),
            confirm: false,
            decoy: Some(decoy.shown_as()),
        })
    }

    /// The names of the decoys a chat's lists show beside its own secrets' names.
    fn decoy_names(&self, scope: &SecretScope) -> Vec<String> {
        match scope {
            SecretScope::Chat(_) => {
                let decoys = self.decoys.read().unwrap_or_else(|p| p.into_inner());
                decoys.iter().map(|d| d.name.clone()).collect()
            }
            SecretScope::Operator => Vec::new(),
        }
    }

    /// Stores (or replaces) `name` in `scope`. `mode`: `None` picks proxy for a secret bound
    /// to a host, stdin otherwise.
    pub async fn set(
        &self,
        scope: &SecretScope,
        name: &str,
        value: SecretString,
        hosts: &[String],
        places: &[String],
        mode: Option<Mode>,
    ) -> Result<SecretInfo, VaultError> {
        let bind = Bind { hosts, places, mode, confirm: false };
        self.set_bound(scope, name, value, bind).await
    }

    /// [`Vault::set`] with every setting, `--confirm` included.
    pub async fn set_bound(
        &self,
        scope: &SecretScope,
        name: &str,
        value: SecretString,
        bind: Bind<'_>,
    ) -> Result<SecretInfo, VaultError> {
        self.check_room(scope, name)?;
        let key = self.usable()?;
        let (hosts, mode) = validate(name, &value, bind.hosts, bind.places, bind.mode)?;
        let confirm = bind.confirm;
        if confirm && mode != Mode::Proxy {
            return Err(VaultError::ConfirmNeedsProxy(name.to_owned()));
        }
        let scope_key = scope.key();
        let texts: Vec<String> = hosts.iter().map(ToString::to_string).collect();
        let hosts_json = serde_json::to_string(&texts).unwrap_or_else(|_| "[]".into());
        let bound = binding(mode.as_str(), &hosts_json, confirm);
        let (nonce, sealed) = key
            .seal(&scope_key, name, &bound, value.expose_secret().as_bytes())
            .map_err(|e| VaultError::Crypto(e.to_string()))?;
        let now = unix_now();
        self.store
            .put_sealed(SealedRow {
                scope: scope_key,
                name: name.to_owned(),
                nonce,
                sealed,
                hosts: hosts_json,
                mode: mode.as_str().to_owned(),
                updated_at: now,
                confirm,
            })
            .await?;
        let replaced = self.entries.write().unwrap_or_else(|p| p.into_inner()).insert(
            (scope.clone(), name.to_owned()),
            Entry {
                value: Ok(value),
                hosts: hosts.clone(),
                mode,
                updated_at: now,
                hold: SecretHold::default(),
                confirm,
            },
        );
        self.retire(scope, name, replaced);
        self.refresh_exits();
        let mode_name = mode.as_str();
        tracing::info!(%scope, name, mode = mode_name, hosts = ?texts, confirm, "secret stored");
        Ok(SecretInfo {
            scope: scope.clone(),
            name: name.to_owned(),
            hosts: texts,
            mode,
            updated_at: now,
            unreadable: None,
            confirm,
        })
    }

    /// Refuses a new name in a scope that holds `vault.max_secrets_per_scope` secrets already
    /// (replacing one is always allowed).
    fn check_room(&self, scope: &SecretScope, name: &str) -> Result<(), VaultError> {
        let cap = self.max_per_scope.load(std::sync::atomic::Ordering::Relaxed);
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let key = (scope.clone(), name.to_owned());
        let held = entries.keys().filter(|(s, _)| s == scope).count();
        if held >= cap && !entries.contains_key(&key) {
            return Err(VaultError::TooMany { scope: scope.clone(), cap });
        }
        Ok(())
    }

    /// Keeps a deleted or replaced value in the exit scan while a running task holds it.
    fn retire(&self, scope: &SecretScope, name: &str, entry: Option<Entry>) {
        let Some(entry) = entry else { return };
        let held = Arc::downgrade(&entry.hold.0);
        drop(entry.hold);
        if let (Ok(value), true) = (entry.value, held.strong_count() > 0) {
            let retired = Retired { scope: scope.clone(), name: name.to_owned(), value, held };
            self.retired.lock().unwrap_or_else(|p| p.into_inner()).push(retired);
        }
    }

    /// Deletes `name` from `scope`; false if there was none.
    pub async fn delete(&self, scope: &SecretScope, name: &str) -> Result<bool, VaultError> {
        let deleted = self.store.delete_sealed(&scope.key(), name).await?;
        let removed = self
            .entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(scope.clone(), name.to_owned()));
        self.retire(scope, name, removed);
        self.refresh_exits();
        if deleted {
            tracing::info!(%scope, name, "secret deleted");
        }
        Ok(deleted)
    }

    /// The secrets of `scope` (every scope with `None`), names and bindings only.
    pub fn list(&self, scope: Option<&SecretScope>) -> Vec<SecretInfo> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .filter(|((s, _), _)| scope.is_none_or(|scope| scope == s))
            .map(|((scope, name), e)| SecretInfo {
                scope: scope.clone(),
                name: name.clone(),
                hosts: e.hosts.iter().map(ToString::to_string).collect(),
                mode: e.mode,
                updated_at: e.updated_at,
                confirm: e.confirm,
                unreadable: e
                    .value
                    .as_ref()
                    .err()
                    .map(|u| self.unreadable(*u, scope, name).to_string()),
            })
            .collect()
    }

    fn unreadable(&self, why: Unreadable, scope: &SecretScope, name: &str) -> VaultError {
        match why {
            Unreadable::WrongKey => VaultError::WrongKey,
            Unreadable::Corrupt => {
                VaultError::Corrupt { name: name.to_owned(), scope: scope.clone() }
            }
            Unreadable::Off => VaultError::Off(match &self.state {
                VaultState::Off(reason) => reason.clone(),
                _ => "no key".to_owned(),
            }),
        }
    }

    /// The secret `name` of `scope`, to hand to a task or a tool backend. An unknown name is an
    /// error listing the names that exist.
    pub fn resolve(&self, scope: &SecretScope, name: &str) -> Result<Resolved, VaultError> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = entries.get(&(scope.clone(), name.to_owned())) else {
            if let Some(decoy) = self.decoy(scope, name) {
                return Ok(decoy);
            }
            // Decoys are listed where a chat's own secrets are, indistinguishable from them.
            let mut available: Vec<String> =
                entries.keys().filter(|(s, _)| s == scope).map(|(_, n)| n.clone()).collect();
            available.extend(self.decoy_names(scope));
            available.sort();
            available.dedup();
            return Err(VaultError::NotFound {
                name: name.to_owned(),
                scope: scope.clone(),
                available,
            });
        };
        if let Some(refused) = legacy::refused_use(scope, name, entry) {
            return Err(refused);
        }
        match &entry.value {
            Ok(value) => Ok(Resolved {
                name: name.to_owned(),
                value: value.clone(),
                hosts: entry.hosts.clone(),
                mode: entry.mode,
                hold: entry.hold.clone(),
                confirm: entry.confirm,
                decoy: None,
            }),
            Err(why) => Err(self.unreadable(*why, scope, name)),
        }
    }
}

/// Stores `value` as `name` in `scope`, stdin mode (no host): the setup most tests need.
#[cfg(any(test, feature = "test-support"))]
pub async fn set_stdin(vault: &Vault, scope: &SecretScope, name: &str, value: &str) {
    let value = SecretString::from(value.to_owned());
    vault.set(scope, name, value, &[], &[], Some(Mode::Stdin)).await.expect("store a secret");
}

/// The vault's line of `nexbot-ctl status` (every scope: the operator's view).
pub fn status_line(vault: &Vault) -> String {
    let line = state_line(vault, &format!("{} stored", vault.list(None).len()));
    match vault.decoy_count() {
        0 => line,
        n => format!("{line}, {n} decoys planted"),
    }
}

/// The vault's line of a chat's `/status`: that chat's secrets only, never another scope's
/// count or names.
pub fn chat_status_line(vault: &Vault, chat: &ChatRef) -> String {
    let count = vault.list(Some(&SecretScope::Chat(chat.clone()))).len();
    state_line(vault, &format!("{count} stored for this chat"))
}

fn state_line(vault: &Vault, stored: &str) -> String {
    match vault.state() {
        VaultState::On => format!("vault on, {stored}"),
        VaultState::Off(why) => format!("vault off ({why}), {stored}"),
        VaultState::WrongKey => {
            format!("vault LOCKED: NEXBOT_MASTER_KEY does not open it, {stored}")
        }
    }
}

/// Re-encrypts every secret of `store` from `old` to `new` master key in one transaction:
/// a fresh salt and check value, a fresh nonce for each value. Nothing changes unless every
/// secret opens with `old`. The daemon must not be running (the caller holds the data
/// directory's lock), or it would go on with the old key. Returns how many were re-encrypted.
pub async fn rotate_master_key(
    store: &Store,
    old: &SecretString,
    new: &SecretString,
) -> Result<usize, VaultError> {
    if let Some(problem) = master_key_problem(Some(new)) {
        return Err(VaultError::Off(format!("the new key: {problem}")));
    }
    let (meta, rows) = store.vault_contents().await?;
    let Some(meta) = meta else {
        return Err(VaultError::Off("this database has no vault yet; nothing to rotate".into()));
    };
    let (old, new) = (old.clone(), new.clone());
    let rewritten = tokio::task::spawn_blocking(move || -> Result<_, VaultError> {
        let crypto = |e: CryptoError| VaultError::Crypto(e.to_string());
        let old_key = VaultKey::derive(&old, &meta.kdf, &meta.salt).map_err(crypto)?;
        if !old_key.opens_check(&meta.check_nonce, &meta.check_sealed) {
            return Err(VaultError::WrongKey);
        }
        let (new_key, new_meta) = fresh_meta(&new)?;
        let mut rewritten = Vec::new();
        for row in rows {
            let scope = SecretScope::parse(&row.scope).unwrap_or(SecretScope::Operator);
            let bound = binding(&row.mode, &row.hosts, row.confirm);
            let value = old_key
                .open(&row.scope, &row.name, &bound, &row.nonce, &row.sealed)
                .map_err(|_| VaultError::Corrupt { name: row.name.clone(), scope })?;
            let (nonce, sealed) = new_key
                .seal(&row.scope, &row.name, &bound, value.expose_secret().as_bytes())
                .map_err(crypto)?;
            rewritten.push(Resealed { scope: row.scope, name: row.name, nonce, sealed });
        }
        Ok((new_meta, rewritten))
    })
    .await
    .map_err(|e| VaultError::Crypto(e.to_string()))??;
    let (new_meta, rows) = rewritten;
    let count = rows.len();
    store.reseal_vault(new_meta, rows).await?;
    Ok(count)
}

#[cfg(test)]
mod tests;
