//! What a container writes into a request (a CONNECT host, a bad URL) can end up in an audit
//! line, a `tracing` event and a task summary. This scrubs the credentials the egress knows
//! out of such text before it is kept anywhere: the provider keys (by value, with
//! `nexbot_redact::Redactor`, which also catches its base64 and URL-encoded forms, and in
//! any letter case, since host names are lower-cased on the way), relay tokens and egress
//! credentials (by their shape, `nxr_`/`nxp_` and the random part, so every task's token is
//! caught, live or not).

use nexbot_redact::{Redactor, SecretMap};
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

use super::tokens::{PROXY_TOKEN_PREFIX, TOKEN_PREFIX};

/// The label a provider key is replaced with (every provider's).
const KEY_LABEL: &str = "[REDACTED:LLM_PROVIDER_KEY]";
/// The label a relay token is replaced with.
const TOKEN_LABEL: &str = "[REDACTED:relay_token]";
/// The label an egress credential is replaced with.
const PROXY_TOKEN_LABEL: &str = "[REDACTED:egress_token]";
/// The shortest random part taken for a relay token (real ones have 43 characters).
const MIN_TOKEN_BODY: usize = 16;

/// Scrubs secrets out of text from containers.
#[derive(Default)]
pub(crate) struct Scrubber {
    redactor: Redactor,
    /// The provider keys in lower case, for a case-blind search.
    keys_lower: Vec<Zeroizing<String>>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber").field("keys", &self.keys_lower.len()).finish()
    }
}

impl Scrubber {
    pub(crate) fn new<'a>(provider_keys: impl IntoIterator<Item = &'a SecretString>) -> Self {
        let keys: Vec<&SecretString> =
            provider_keys.into_iter().filter(|k| !k.expose_secret().is_empty()).collect();
        if keys.is_empty() {
            return Self::default();
        }
        let mut secrets = SecretMap::new();
        for (i, key) in keys.iter().enumerate() {
            // One label for every provider's key; the map needs distinct names.
            secrets.insert(format!("LLM_PROVIDER_KEY{i}"), (*key).clone());
        }
        Self {
            redactor: Redactor::new(&secrets),
            keys_lower: keys
                .iter()
                .map(|k| Zeroizing::new(k.expose_secret().to_ascii_lowercase()))
                .collect(),
        }
    }

    /// `text` with the provider keys and every relay token replaced by a label.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out =
            if self.redactor.is_empty() { text.to_owned() } else { self.redactor.redact(text) };
        for key in &self.keys_lower {
            out = replace_ignoring_case(&out, key, KEY_LABEL);
        }
        // The redactor's own label names the map entry; every provider key reads the same.
        for i in 0..self.keys_lower.len() {
            out = out.replace(&format!("[REDACTED:LLM_PROVIDER_KEY{i}]"), KEY_LABEL);
        }
        let out = replace_tokens(&out, TOKEN_PREFIX, TOKEN_LABEL);
        replace_tokens(&out, PROXY_TOKEN_PREFIX, PROXY_TOKEN_LABEL)
    }
}

/// Replaces every ASCII-case-insensitive occurrence of `needle` (lower case).
fn replace_ignoring_case(text: &str, needle: &str, label: &str) -> String {
    if needle.is_empty() {
        return text.to_owned();
    }
    // Lower-casing ASCII keeps byte offsets, so matches found in the copy cut the original.
    let lowered = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lowered[at..].find(needle) {
        out.push_str(&text[at..at + found]);
        out.push_str(label);
        at += found + needle.len();
    }
    out.push_str(&text[at..]);
    out
}

/// Replaces `prefix` (any case) followed by at least [`MIN_TOKEN_BODY`] base64url characters.
fn replace_tokens(text: &str, prefix: &str, label: &str) -> String {
    let lowered = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = lowered[at..].find(prefix) {
        let start = at + found;
        let body_start = start + prefix.len();
        let body = text[body_start..]
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
            .count();
        if body >= MIN_TOKEN_BODY {
            out.push_str(&text[at..start]);
            out.push_str(label);
        } else {
            out.push_str(&text[at..body_start + body]);
        }
        at = body_start + body;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn the_provider_key_and_relay_tokens_are_replaced_in_any_form() {
        let key = "sk-Test-PLANTED-0123456789abcdef";
        let other = SecretString::from("sk-other-SECOND-key-9876543210");
        let scrubber = Scrubber::new([&SecretString::from(key), &other]);
        let token = format!("{TOKEN_PREFIX}{}", "A".repeat(43));
        let encoded = base64::engine::general_purpose::STANDARD.encode(key);
        let text = format!(
            "connect {key}.example:443 lower {} upper {} token {token}.x b64 {encoded} short nxr_abc",
            key.to_ascii_lowercase(),
            key.to_ascii_uppercase()
        );
        let clean = scrubber.scrub(&text);
        assert!(!clean.to_ascii_lowercase().contains("planted"), "{clean}");
        let second = scrubber.scrub("x sk-other-SECOND-key-9876543210 y");
        assert_eq!(second, format!("x {KEY_LABEL} y"));
        assert!(!clean.contains(&token[4..]), "{clean}");
        assert!(!clean.contains(&encoded), "{clean}");
        assert_eq!(clean.matches(KEY_LABEL).count(), 4, "{clean}");
        assert!(clean.contains("[REDACTED:relay_token].x"), "{clean}");
        assert!(clean.ends_with("short nxr_abc"), "a word that only starts alike stays: {clean}");
        let upper = format!("NXR_{}", "b".repeat(20));
        assert_eq!(Scrubber::default().scrub(&upper), TOKEN_LABEL);
        let credential = format!("{PROXY_TOKEN_PREFIX}{}", "Zq-_".repeat(11));
        assert_eq!(
            Scrubber::default().scrub(&format!("task:{credential}@gw")),
            format!("task:{PROXY_TOKEN_LABEL}@gw")
        );
        assert_eq!(Scrubber::default().scrub("plain.example.com"), "plain.example.com");
    }
}
