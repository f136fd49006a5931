//! The task's secret store: values the model may *use* but never *see*.
//!
//! The model writes placeholders (`$NAME`, `${NAME}` or `{{secret:NAME}}`) in tool arguments;
//! tools substitute them at the last moment, just before the request or command runs. Values
//! live in `secrecy` types and zeroized buffers, expire after a TTL (a long task cannot keep
//! using a secret forever), and are dropped — zeroized — with the store when the task ends.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use nexbot_protocol::{proxy_placeholder, ProxySecret, SecretMap};
use regex::{Captures, Regex};
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

/// How long a task's secrets stay usable, from the task's start (`docs/protocol-files.md#secrets`).
pub const SECRET_TTL: Duration = Duration::from_secs(300);

static PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\{\{\s*secret:([A-Za-z0-9_]+)\s*\}\}|\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)",
    )
    .expect("placeholder regex")
});

/// Why a placeholder could not be filled. Names only, never values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("unknown secret {name} (available: {available})")]
    Unknown { name: String, available: String },
    #[error("secret {name} expired: secrets are usable for {} s after the task starts", SECRET_TTL.as_secs())]
    Expired { name: String },
}

/// One task's secrets with their expiry.
///
/// Two kinds (`docs/protocol-files.md#secrets`): values that came in the request (stdin mode),
/// filled in here; and proxy-mode secrets, of which this process knows only the name and the
/// hosts — their placeholders become `{{secret:NAME}}` for the egress proxy to fill in.
#[derive(Debug)]
pub struct SecretStore {
    secrets: SecretMap,
    /// Proxy-mode secrets: name → bound hosts.
    proxied: BTreeMap<String, Vec<String>>,
    expires_at: Instant,
}

/// What a placeholder stands for.
enum Filling<'a> {
    Value(&'a SecretString),
    /// Left for the egress proxy, as `{{secret:NAME}}`.
    Proxied,
}

impl SecretStore {
    pub fn new(secrets: SecretMap, ttl: Duration) -> Self {
        Self { secrets, proxied: BTreeMap::new(), expires_at: Instant::now() + ttl }
    }

    /// Adds the task's proxy-mode secrets.
    pub fn with_proxied(mut self, proxied: Vec<ProxySecret>) -> Self {
        self.proxied = proxied.into_iter().map(|p| (p.name, p.hosts)).collect();
        self
    }

    /// The names the model may use in placeholders.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.secrets.names().map(str::to_owned).collect();
        names.extend(self.proxied.keys().cloned());
        names.sort();
        names
    }

    /// The names for the system prompt: a proxy-mode secret with the hosts it works for.
    pub fn described(&self) -> Vec<String> {
        let mut names: Vec<String> = self.secrets.names().map(str::to_owned).collect();
        names.extend(
            self.proxied
                .iter()
                .map(|(name, hosts)| format!("{name} (http_request to {} only)", hosts.join(", "))),
        );
        names.sort();
        names
    }

    /// Whether the task has proxy-mode secrets: then its HTTP requests go to the egress
    /// proxy in absolute form (the proxy fills in and scrubs), never through a tunnel.
    pub fn has_proxied(&self) -> bool {
        !self.proxied.is_empty()
    }

    /// Whether `text` has a placeholder that this process fills with a value (stdin mode): a
    /// request carrying one must not follow a redirect to another host.
    pub fn fills_a_value(&self, text: &str) -> bool {
        PLACEHOLDER.captures_iter(text).any(|caps| {
            let (name, _) = placeholder_name(&caps);
            self.secrets.get(name).is_some()
        })
    }

    fn get(&self, name: &str) -> Result<Filling<'_>, SecretError> {
        if self.proxied.contains_key(name) {
            return Ok(Filling::Proxied);
        }
        let value = self.secrets.get(name).ok_or_else(|| SecretError::Unknown {
            name: name.to_owned(),
            available: self.names().join(", "),
        })?;
        if Instant::now() >= self.expires_at {
            return Err(SecretError::Expired { name: name.to_owned() });
        }
        Ok(Filling::Value(value))
    }

    /// `text` with every placeholder of a known secret replaced by its value. `$NAME` of an
    /// unknown name is left alone (it may be a shell variable); `{{secret:NAME}}` of an unknown
    /// name is an error, since it can only mean a secret.
    pub fn substitute(&self, text: &str) -> Result<Zeroizing<String>, SecretError> {
        let mut failure = None;
        let out = PLACEHOLDER.replace_all(text, |caps: &Captures<'_>| {
            let (name, explicit) = placeholder_name(caps);
            match self.get(name) {
                Ok(Filling::Value(value)) => value.expose_secret().to_owned(),
                Ok(Filling::Proxied) => proxy_placeholder(name),
                Err(SecretError::Unknown { .. }) if !explicit => caps[0].to_owned(),
                Err(err) => {
                    failure.get_or_insert(err);
                    caps[0].to_owned()
                }
            }
        });
        match failure {
            Some(err) => Err(err),
            None => Ok(Zeroizing::new(out.into_owned())),
        }
    }

    /// For a shell command: the command with `{{secret:NAME}}` rewritten to `"${NAME}"`, and
    /// the values of exactly the secrets it references, to be put into that child's
    /// environment only. The value never appears in the command line.
    #[allow(clippy::type_complexity)]
    pub fn for_command(
        &self,
        command: &str,
    ) -> Result<(String, Vec<(String, Zeroizing<String>)>), SecretError> {
        let mut env: Vec<(String, Zeroizing<String>)> = Vec::new();
        let mut failure = None;
        let rewritten = PLACEHOLDER.replace_all(command, |caps: &Captures<'_>| {
            let (name, explicit) = placeholder_name(caps);
            match self.get(name) {
                Ok(filling) => {
                    if !env.iter().any(|(n, _)| n == name) {
                        // A proxy-mode secret's variable holds its placeholder: a plain
                        // `http://` request through the proxy gets it filled in there.
                        let value = match filling {
                            Filling::Value(value) => value.expose_secret().to_owned(),
                            Filling::Proxied => proxy_placeholder(name),
                        };
                        env.push((name.to_owned(), Zeroizing::new(value)));
                    }
                    if explicit {
                        format!("\"${{{name}}}\"")
                    } else {
                        caps[0].to_owned()
                    }
                }
                Err(SecretError::Unknown { .. }) if !explicit => caps[0].to_owned(),
                Err(err) => {
                    failure.get_or_insert(err);
                    caps[0].to_owned()
                }
            }
        });
        match failure {
            Some(err) => Err(err),
            None => Ok((rewritten.into_owned(), env)),
        }
    }
}

/// The secret name a placeholder match names, and whether it was the explicit
/// `{{secret:NAME}}` form.
fn placeholder_name<'t>(caps: &Captures<'t>) -> (&'t str, bool) {
    match (caps.get(1), caps.get(2), caps.get(3)) {
        (Some(explicit), _, _) => (explicit.as_str(), true),
        (_, Some(braced), _) => (braced.as_str(), false),
        (_, _, Some(bare)) => (bare.as_str(), false),
        _ => ("", false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(ttl: Duration) -> SecretStore {
        let mut map = SecretMap::new();
        map.insert("TOKEN", SecretString::from("tok-123".to_owned()));
        map.insert("API_KEY", SecretString::from("key-456".to_owned()));
        SecretStore::new(map, ttl)
    }

    #[test]
    fn proxy_mode_secrets_become_the_proxy_placeholder_and_never_a_value() {
        let store = store(Duration::from_secs(60)).with_proxied(vec![ProxySecret {
            name: "GH".into(),
            hosts: vec!["api.github.com".into()],
        }]);
        assert!(store.has_proxied());
        assert_eq!(store.names(), ["API_KEY", "GH", "TOKEN"]);
        assert!(store.described().contains(&"GH (http_request to api.github.com only)".to_owned()));
        let filled = store.substitute("Bearer $GH ${GH} {{secret:GH}} $TOKEN").unwrap();
        assert_eq!(filled.as_str(), "Bearer {{secret:GH}} {{secret:GH}} {{secret:GH}} tok-123");
        assert!(!store.fills_a_value("Bearer $GH"), "a proxied name carries no value");
        assert!(store.fills_a_value("Bearer $TOKEN"));
        // In a command the variable holds the placeholder, so plain-http requests through
        // the proxy get it filled in there.
        let (command, env) = store.for_command("curl -H \"x: $GH\" http://h/").unwrap();
        assert_eq!(command, "curl -H \"x: $GH\" http://h/");
        assert_eq!(env[0].0, "GH");
        assert_eq!(env[0].1.as_str(), "{{secret:GH}}");
    }

    #[test]
    fn all_placeholder_forms_are_filled() {
        let s = store(SECRET_TTL);
        let out = s
            .substitute("a $TOKEN b ${API_KEY} c {{secret:TOKEN}} d {{ secret:API_KEY }}")
            .unwrap();
        assert_eq!(out.as_str(), "a tok-123 b key-456 c tok-123 d key-456");
    }

    #[test]
    fn unknown_bare_names_are_left_and_longer_names_do_not_match() {
        let s = store(SECRET_TTL);
        assert_eq!(
            s.substitute("$HOME $TOKENS ${PATH}").unwrap().as_str(),
            "$HOME $TOKENS ${PATH}"
        );
        let err = s.substitute("{{secret:NOPE}}").unwrap_err();
        assert_eq!(err.to_string(), "unknown secret NOPE (available: API_KEY, TOKEN)");
    }

    #[test]
    fn expired_secrets_are_refused_by_name() {
        let s = store(Duration::ZERO);
        let err = s.substitute("x $TOKEN").unwrap_err();
        assert!(matches!(err, SecretError::Expired { ref name } if name == "TOKEN"));
        assert!(!err.to_string().contains("tok-123"));
    }

    #[test]
    fn commands_get_only_referenced_secrets_in_env_not_in_text() {
        let s = store(SECRET_TTL);
        let (cmd, env) = s.for_command("curl -H \"X: $TOKEN\" {{secret:TOKEN}}").unwrap();
        assert_eq!(cmd, "curl -H \"X: $TOKEN\" \"${TOKEN}\"");
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].0, "TOKEN");
        assert_eq!(env[0].1.as_str(), "tok-123");
        let (_, none) = s.for_command("echo hello $HOME").unwrap();
        assert!(none.is_empty());
    }
}
