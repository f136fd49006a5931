//! Per-task secrets and their redaction.
//!
//! A secret travels from the host to a subagent inside one `execute` request and nowhere else.
//! This module makes the unsafe things hard: values are [`SecretString`]s (zeroized on drop,
//! never in `Debug`), the spec's limits are checked in one place, and [`Redactor`] scrubs every
//! value — and its base64 and URL-encoded forms — out of text before anyone sees it.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;
use zeroize::Zeroizing;

/// At most this many secrets in one task.
pub const MAX_SECRETS: usize = 50;
/// A secret's name is at most this many characters.
pub const MAX_SECRET_NAME_LEN: usize = 64;
/// A secret's value is at most this many bytes.
pub const MAX_SECRET_VALUE_BYTES: usize = 64 * 1024;

/// Why a set of secrets was refused. Never carries a value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SecretsError {
    #[error("too many secrets: {count} (at most {MAX_SECRETS})")]
    TooMany { count: usize },
    #[error("invalid secret name {name:?}: must match [A-Z_][A-Z0-9_]* and be at most {MAX_SECRET_NAME_LEN} characters")]
    InvalidName { name: String },
    #[error("secret {name} is too large: {len} bytes (at most {MAX_SECRET_VALUE_BYTES})")]
    ValueTooLarge { name: String, len: usize },
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

    /// Checks the spec's limits: count, name syntax and length, value size.
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

/// Serializes an optional secret string as its plain value: for wire fields such as
/// `llm_api_key` whose whole purpose is to carry a secret to the peer.
pub(crate) fn serialize_opt_secret<S: Serializer>(
    value: &Option<SecretString>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(secret) => serializer.serialize_some(secret.expose_secret()),
        None => serializer.serialize_none(),
    }
}

/// Replaces every secret value (and its base64 and URL-encoded forms) with
/// `[REDACTED:NAME]`.
///
/// Needles are held in [`Zeroizing`] buffers so a dropped redactor leaves no copy behind.
/// Longer needles are replaced first so that a value that contains another is not half-redacted.
#[derive(Default)]
pub struct Redactor {
    needles: Vec<(Zeroizing<String>, String)>,
}

impl Redactor {
    pub fn new(secrets: &SecretMap) -> Self {
        let mut needles: Vec<(Zeroizing<String>, String)> = Vec::new();
        for (name, value) in secrets.iter() {
            let value = value.expose_secret();
            if value.is_empty() {
                continue;
            }
            let label = format!("[REDACTED:{name}]");
            let forms = [
                Zeroizing::new(value.to_owned()),
                Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(value)),
                Zeroizing::new(base64::engine::general_purpose::STANDARD_NO_PAD.encode(value)),
                Zeroizing::new(base64::engine::general_purpose::URL_SAFE.encode(value)),
                Zeroizing::new(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value)),
                Zeroizing::new(utf8_percent_encode(value, NON_ALPHANUMERIC).to_string()),
                Zeroizing::new(form_urlencode(value)),
            ];
            for form in forms {
                if !needles.iter().any(|(n, _)| **n == *form) {
                    needles.push((form, label.clone()));
                }
            }
        }
        needles.sort_by_key(|(needle, _)| std::cmp::Reverse(needle.len()));
        Self { needles }
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// The text with every known secret form replaced by its label.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (needle, label) in &self.needles {
            if out.contains(needle.as_str()) {
                out = out.replace(needle.as_str(), label);
            }
        }
        out
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor").field("needles", &self.needles.len()).finish()
    }
}

/// `application/x-www-form-urlencoded` form (space as `+`), which query strings often use.
fn form_urlencode(value: &str) -> String {
    utf8_percent_encode(value, NON_ALPHANUMERIC).to_string().replace("%20", "+")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> SecretMap {
        let mut m = SecretMap::new();
        for (k, v) in pairs {
            m.insert(*k, SecretString::from(v.to_string()));
        }
        m
    }

    #[test]
    fn names_follow_the_spec() {
        for good in ["A", "_", "API_KEY", "TOKEN2", "_X_1", &"A".repeat(64)] {
            assert!(is_valid_secret_name(good), "{good}");
        }
        for bad in ["", "a", "1ABC", "API-KEY", "API KEY", "ÄPI", &"A".repeat(65)] {
            assert!(!is_valid_secret_name(bad), "{bad}");
        }
    }

    #[test]
    fn validate_rejects_bad_name_with_the_name() {
        let err = map(&[("bad-name", "v")]).validate().unwrap_err();
        assert!(err.to_string().contains("bad-name"), "{err}");
    }

    #[test]
    fn validate_rejects_too_many() {
        let mut m = SecretMap::new();
        for i in 0..=MAX_SECRETS {
            m.insert(format!("S{i}"), SecretString::from("v".to_string()));
        }
        assert_eq!(m.validate(), Err(SecretsError::TooMany { count: 51 }));
        m.0.pop_first();
        assert_eq!(m.validate(), Ok(()));
    }

    #[test]
    fn validate_rejects_oversize_value_without_echoing_it() {
        let big = "x".repeat(MAX_SECRET_VALUE_BYTES + 1);
        let err = map(&[("BIG", &big)]).validate().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("BIG") && text.contains("65537"), "{text}");
        assert!(!text.contains("xxxx"));
        assert_eq!(map(&[("OK", &"x".repeat(MAX_SECRET_VALUE_BYTES))]).validate(), Ok(()));
    }

    #[test]
    fn debug_shows_names_only() {
        let m = map(&[("API_KEY", "hunter2-value")]);
        let dbg = format!("{m:?}");
        assert!(dbg.contains("API_KEY"));
        assert!(!dbg.contains("hunter2"));
    }

    #[test]
    fn redactor_replaces_value_and_encoded_forms() {
        let value = "s3cr3t value/+?&";
        let r = Redactor::new(&map(&[("TOKEN", value)]));
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value);
        let pct = utf8_percent_encode(value, NON_ALPHANUMERIC).to_string();
        let form = form_urlencode(value);
        let text = format!("a {value} b {b64} c {b64url} d {pct} e {form} f");
        let out = r.redact(&text);
        assert_eq!(out.matches("[REDACTED:TOKEN]").count(), 5, "{out}");
        assert!(!out.contains("s3cr3t"));
        assert!(out.starts_with("a ") && out.ends_with(" f"));
    }

    #[test]
    fn redactor_prefers_longer_secret() {
        let r = Redactor::new(&map(&[("SHORT", "abc"), ("LONG", "abcdef")]));
        assert_eq!(r.redact("xabcdefx abc"), "x[REDACTED:LONG]x [REDACTED:SHORT]");
    }

    #[test]
    fn redactor_debug_hides_needles() {
        let r = Redactor::new(&map(&[("K", "topsecretvalue")]));
        assert!(!format!("{r:?}").contains("topsecret"));
    }
}
