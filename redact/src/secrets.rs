//! The secrets a redactor is made from, as a task carries them: names mapped to values, with
//! the spec's limits (how many, a name's form, a value's size) checked in one place.

use std::collections::BTreeMap;
use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

/// At most this many secrets in one task.
pub const MAX_SECRETS: usize = 50;
/// A secret's name is at most this many characters.
pub const MAX_SECRET_NAME_LEN: usize = 64;
/// A secret's value is at most this many bytes.
pub const MAX_SECRET_VALUE_BYTES: usize = 64 * 1024;
/// A secret's value is at least this many bytes. A shorter value cannot be redacted without
/// destroying the output (every `e` of a text gone for a 1-byte secret) and protects little.
pub const MIN_SECRET_VALUE_BYTES: usize = 8;

/// Why a set of secrets was refused. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretsError {
    #[error("too many secrets: {count} (at most {MAX_SECRETS})")]
    TooMany { count: usize },
    #[error("invalid secret name {name:?}: must match [A-Z_][A-Z0-9_]* and be at most {MAX_SECRET_NAME_LEN} characters")]
    InvalidName { name: String },
    #[error("secret {name} is too large: {len} bytes (at most {MAX_SECRET_VALUE_BYTES})")]
    ValueTooLarge { name: String, len: usize },
    #[error("secret {name} is too short: {len} bytes (at least {MIN_SECRET_VALUE_BYTES}); a value that short cannot be redacted from output without destroying it")]
    ValueTooShort { name: String, len: usize },
}

/// Names mapped to secret values, in name order.
///
/// `Debug` lists names only. Serialization writes the values (it is the wire format between
/// host and subagent); never serialize a `SecretMap` into a log.
#[derive(Clone, Default)]
pub struct SecretMap(BTreeMap<String, SecretString>);

impl SecretMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a secret. Limits are checked by [`SecretMap::validate`], so that a
    /// request with a bad secret can still be answered with its id.
    pub fn insert(&mut self, name: impl Into<String>, value: SecretString) {
        self.0.insert(name.into(), value);
    }

    pub fn get(&self, name: &str) -> Option<&SecretString> {
        self.0.get(name)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &SecretString)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Drops (and so zeroizes) every value.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Checks the spec's limits: count, name syntax and length, value size (at least
    /// [`MIN_SECRET_VALUE_BYTES`], at most [`MAX_SECRET_VALUE_BYTES`]).
    pub fn validate(&self) -> Result<(), SecretsError> {
        if self.0.len() > MAX_SECRETS {
            return Err(SecretsError::TooMany { count: self.0.len() });
        }
        for (name, value) in &self.0 {
            if !is_valid_secret_name(name) {
                return Err(SecretsError::InvalidName { name: name.clone() });
            }
            let len = value.expose_secret().len();
            if len > MAX_SECRET_VALUE_BYTES {
                return Err(SecretsError::ValueTooLarge { name: name.clone(), len });
            }
            if len < MIN_SECRET_VALUE_BYTES {
                return Err(SecretsError::ValueTooShort { name: name.clone(), len });
            }
        }
        Ok(())
    }
}

/// `[A-Z_][A-Z0-9_]*`, at most [`MAX_SECRET_NAME_LEN`] characters.
pub fn is_valid_secret_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let Some(first) = bytes.next() else {
        return false;
    };
    name.len() <= MAX_SECRET_NAME_LEN
        && (first.is_ascii_uppercase() || first == b'_')
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

impl fmt::Debug for SecretMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Serialize for SecretMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, v.expose_secret())))
    }
}

impl<'de> Deserialize<'de> for SecretMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::<String, SecretString>::deserialize(deserializer).map(Self)
    }
}

impl PartialEq for SecretMap {
    /// Compares names and values; meant for tests of the wire format.
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((ka, va), (kb, vb))| ka == kb && va.expose_secret() == vb.expose_secret())
    }
}
