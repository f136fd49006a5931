//! The secrets vault's endpoints (`nexbot-ctl secrets set|ls|rm`): bodies and paths.
//!
//! Why a value type of its own: a secret's value crosses this crate on its way from the
//! operator's stdin to the daemon's vault, and every type that holds it may end up in a
//! `{:?}`. [`SecretValue`] prints `[redacted]` and wipes its bytes when dropped. Values travel
//! only in a request body, never in a path or query (which end up in logs and `ps`).

use std::fmt;

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The vault's paths.
pub mod secrets_paths {
    /// `GET ?scope=SCOPE`: the secrets (every scope without one), names and bindings only;
    /// `POST` a [`super::SecretSet`]: stores (or replaces) one.
    pub const SECRETS: &str = "/v1/secrets";
    /// `POST` a [`super::SecretRemove`]: deletes one.
    pub const SECRETS_REMOVE: &str = "/v1/secrets/remove";
}

/// The scope word for the operator's own secrets (the daemon's tool backends); any other
/// scope is a chat reference (`telegram:<id>`, `console:<name>`).
pub const OPERATOR_SCOPE: &str = "operator";

/// A secret's value: `Debug` never shows it, and its memory is zeroed on drop.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValue(Zeroizing<String>);

impl Serialize for SecretValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SecretValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::new)
    }
}

impl SecretValue {
    pub fn new(value: String) -> Self {
        Self(Zeroizing::new(value))
    }

    /// The value itself, for the one place that needs it (sealing it in the vault).
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// `POST /v1/secrets`: store `value` as `name` in `scope`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSet {
    /// [`OPERATOR_SCOPE`] or a chat reference.
    pub scope: String,
    pub name: String,
    pub value: SecretValue,
    /// Hosts the egress proxy may fill the value in for (`api.github.com`, `*.example.com`,
    /// `https://host:port`, `http://host:port`): over https on 443 unless named.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Where in those hosts' requests (`header:NAME`, `path:/PREFIX`, `query:NAME`, `body`);
    /// empty: the `Authorization` header only. Left out of the body when empty, so a daemon
    /// from before places existed (which refuses unknown fields) still takes the request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub places: Vec<String>,
    /// `proxy` or `stdin`; unset: proxy when bound to a host (no host and no mode is refused:
    /// a stdin-mode value is handed to the container, so it must be asked for).
    #[serde(default)]
    pub mode: Option<String>,
    /// `--confirm`: the egress fills the value into a task's request only once the chat's
    /// user allowed it for that task (proxy mode). Left out of the body when false, so a
    /// daemon from before the flag still takes the request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confirm: bool,
}

/// `POST /v1/secrets/remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRemove {
    pub scope: String,
    pub name: String,
}

/// A stored secret as `secrets ls` shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretEntry {
    /// [`OPERATOR_SCOPE`] or a chat reference.
    pub scope: String,
    pub name: String,
    /// `proxy` or `stdin`.
    pub mode: String,
    pub hosts: Vec<String>,
    /// Unix seconds.
    pub updated_at: i64,
    /// Why the value cannot be used (vault off, wrong master key, corrupt row), if it cannot.
    #[serde(default)]
    pub unreadable: Option<String>,
    /// Stored with `--confirm` (a daemon from before the flag sends none: false).
    #[serde(default)]
    pub confirm: bool,
}

/// `GET /v1/secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretList {
    /// The vault's state in a sentence (`vault on, 2 stored`, or why it is off).
    pub vault: String,
    /// Whether secrets can be stored and used now.
    pub vault_on: bool,
    pub secrets: Vec<SecretEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_never_in_debug_but_is_in_the_body() {
        let set = SecretSet {
            scope: OPERATOR_SCOPE.into(),
            name: "GITHUB_TOKEN".into(),
            value: SecretValue::new("ghp-very-secret-1234".into()),
            hosts: vec!["api.github.com".into()],
            places: vec![],
            mode: None,
            confirm: false,
        };
        let debug = format!("{set:?} {:?}", set.value);
        assert!(!debug.contains("very-secret"), "{debug}");
        assert!(debug.contains("[redacted]"), "{debug}");
        let body = serde_json::to_string(&set).unwrap();
        assert!(body.contains(r#""value":"ghp-very-secret-1234""#), "{body}");
        // Left out when false: a daemon from before `--confirm` refuses unknown fields.
        assert!(!body.contains("confirm"), "{body}");
        let back: SecretSet = serde_json::from_str(&body).unwrap();
        assert_eq!(back, set);
    }

    #[test]
    fn hosts_and_mode_may_be_left_out() {
        let set: SecretSet =
            serde_json::from_str(r#"{"scope":"telegram:1","name":"A_B","value":"xxxxxxxx"}"#)
                .unwrap();
        assert!(set.hosts.is_empty() && set.mode.is_none() && !set.confirm);
        assert_eq!(set.value.expose(), "xxxxxxxx");
    }
}
