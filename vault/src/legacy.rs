//! Legacy bindings: bare hosts stored before bindings named a place (`egress/src/binding.rs`).
//!
//! Why a module of its own: they are on their way out. This release honours them (an upgrade
//! breaks no install) except where they were never safe — a public suffix or `*`, which the
//! vault refuses at use ([`refused_use`]) — and names the release that refuses them all
//! ([`LEGACY_BINDINGS_REFUSED_FROM`]) wherever the operator looks: the daemon's start-up log
//! ([`warn_at_open`]) and `nexbot doctor` ([`Vault::legacy_bindings`]), each with the exact
//! command that narrows the secret. Setting the secret again replaces its bindings, so that
//! command is the whole migration. None of this ever holds a value.

use nexbot_egress::{Binding, LEGACY_BINDINGS_REFUSED_FROM};

use super::{Entry, Mode, SecretScope, Vault, VaultError};

/// One legacy binding of a stored secret, for doctor and the logs. Holds no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyBinding {
    pub scope: SecretScope,
    pub name: String,
    /// The stored bare host pattern.
    pub host: String,
    /// Why it is not honoured even in this release, if it is not ([`Binding::refusal`]).
    pub refused: Option<String>,
    /// The command that binds the secret to https and a place instead.
    pub narrow: String,
}

/// The command that sets `name` of `scope` again bound to `host` over https, in the
/// `Authorization` header unless `--in` says otherwise; `None` for `host` when the legacy
/// pattern cannot be kept (a public suffix): the operator names the service's own host.
/// `--confirm` is kept when the secret has it (setting again replaces every setting).
pub fn narrow_command(
    scope: &SecretScope,
    name: &str,
    host: Option<&str>,
    confirm: bool,
) -> String {
    let who = match scope {
        SecretScope::Chat(chat) => format!("--chat {chat}"),
        SecretScope::Operator => "--operator".to_owned(),
    };
    let host = match host {
        // An IPv6 address needs its brackets, or its last group reads as a port.
        Some(host) if host.contains(':') => format!("[{host}]"),
        Some(host) => host.to_owned(),
        None => "HOST".to_owned(),
    };
    let confirm = if confirm { " --confirm" } else { "" };
    format!(
        "printf %s \"$VALUE\" | nexbot-ctl secrets set {name} {who} --host {host}{confirm} \
         [--in PLACE]"
    )
}

fn describe(scope: &SecretScope, name: &str, binding: &Binding, confirm: bool) -> LegacyBinding {
    let refused = binding.refusal();
    let host = binding.to_string();
    let keep = refused.is_none().then_some(host.as_str());
    LegacyBinding {
        scope: scope.clone(),
        name: name.to_owned(),
        narrow: narrow_command(scope, name, keep, confirm),
        host,
        refused,
    }
}

/// The legacy bindings of one proxy-mode secret (a stdin-mode secret's hosts are never used).
fn of_entry(scope: &SecretScope, name: &str, entry: &Entry) -> Vec<LegacyBinding> {
    if entry.mode != Mode::Proxy {
        return Vec::new();
    }
    entry
        .hosts
        .iter()
        .filter(|b| b.is_legacy())
        .map(|b| describe(scope, name, b, entry.confirm))
        .collect()
}

/// Why a task may not use this secret, if it may not: a proxy-mode secret with a legacy
/// binding over a public suffix or `*`. Why the whole secret and not only that binding: a
/// silently dropped binding would surface as an obscure "not bound" at some later request;
/// refusing at use names the secret, the binding and the fix at once.
pub(super) fn refused_use(scope: &SecretScope, name: &str, entry: &Entry) -> Option<VaultError> {
    of_entry(scope, name, entry).into_iter().find_map(|legacy| {
        let reason = legacy.refused?;
        Some(VaultError::LegacyBinding {
            name: name.to_owned(),
            scope: scope.clone(),
            host: legacy.host,
            reason,
            command: legacy.narrow,
        })
    })
}

/// The start-up log line for a secret read with legacy bindings: an error for one not used
/// ([`refused_use`]), a warning with the deadline for the rest.
pub(super) fn warn_at_open(scope: &SecretScope, name: &str, entry: &Entry) {
    for legacy in of_entry(scope, name, entry) {
        match &legacy.refused {
            Some(reason) => tracing::error!(
                %scope,
                name,
                host = %legacy.host,
                fix = %legacy.narrow,
                "legacy binding refused: it {reason}, so this secret is not used; set it again \
                 bound to the service's own host name"
            ),
            None => tracing::warn!(
                %scope,
                name,
                host = %legacy.host,
                fix = %legacy.narrow,
                refused_from = LEGACY_BINDINGS_REFUSED_FROM,
                "legacy binding: this secret was stored before bindings named a place, so its \
                 value may still be filled in anywhere in a request to this host, on any port \
                 (plain http only to a LAN host); it is refused from release \
                 {LEGACY_BINDINGS_REFUSED_FROM}: set it again with --host (and optionally --in) \
                 to bind it to https and the Authorization header or the places you name"
            ),
        }
    }
}

impl Vault {
    /// Every legacy binding of a proxy-mode secret, in every scope: what `nexbot doctor`
    /// lists. Needs no master key (bindings are stored plain).
    pub fn legacy_bindings(&self) -> Vec<LegacyBinding> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.iter().flat_map(|((scope, name), entry)| of_entry(scope, name, entry)).collect()
    }
}

/// Writes `name` of `scope` as a release before places wrote it: `hosts` bare, sealed with
/// them. For tests of the migration here and in doctor.
#[cfg(any(test, feature = "test-support"))]
pub async fn store_legacy_row(
    store: &nexbot_store::Store,
    master: &secrecy::SecretString,
    scope: &SecretScope,
    name: &str,
    value: &str,
    hosts: &[&str],
) {
    use nexbot_store::vault::SealedRow;
    let vault = Vault::open(store.clone(), Some(master), None).await.expect("the vault opens");
    drop(vault);
    let meta = store.vault_contents().await.unwrap().0.expect("the vault's key is stored");
    let key = super::crypto::VaultKey::derive(master, &meta.kdf, &meta.salt).unwrap();
    let hosts_json = serde_json::to_string(hosts).unwrap();
    let bound = super::binding("proxy", &hosts_json, false);
    let (nonce, sealed) = key.seal(&scope.key(), name, &bound, value.as_bytes()).unwrap();
    let row = SealedRow {
        scope: scope.key(),
        name: name.to_owned(),
        nonce,
        sealed,
        hosts: hosts_json,
        mode: "proxy".to_owned(),
        updated_at: nexbot_store::unix_now(),
        confirm: false,
    };
    store.put_sealed(row).await.unwrap();
}
