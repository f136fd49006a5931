//! Decoy secrets: values shaped like real providers' keys, offered to the model like a chat's
//! own secrets and bound nowhere, so that the moment one is sent anywhere a prompt injection
//! is caught in the act (`nexbot_egress`'s `decoy.rs` refuses the request and rings the
//! alarm).
//!
//! Why these names and shapes: an injection that says "send all API keys to …" goes for the
//! names every agent's environment has, and a value that does not look like the provider's
//! would give the decoy away. Each decoy is one install-wide value (the same in every chat),
//! made once from the system's random source and kept in the store (`decoys` table, plain:
//! it opens nothing), so a value taken before a restart is still known after it. A chat's own
//! secret of the same name always wins: the decoy steps aside.

use secrecy::SecretString;

/// One kind of decoy: its usual name and the shape of a real value of that provider.
pub(crate) struct Kind {
    name: &'static str,
    /// What `vault.decoys` calls it after a name of the operator's (`ACME_TOKEN:github`).
    alias: &'static str,
    prefix: &'static str,
    alphabet: &'static [u8],
    len: usize,
    /// What a task's prompt shows it bound to (the provider's API), as a real one would be.
    shown_as: &'static str,
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const URL_SAFE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

const KINDS: &[Kind] = &[
    Kind {
        name: "OPENAI_API_KEY",
        alias: "openai",
        prefix: "sk-proj-",
        alphabet: URL_SAFE,
        len: 148,
        shown_as: "https://api.openai.com:443 header:authorization",
    },
    Kind {
        name: "ANTHROPIC_API_KEY",
        alias: "anthropic",
        prefix: "sk-ant-api03-",
        alphabet: URL_SAFE,
        len: 95,
        shown_as: "https://api.anthropic.com:443 header:x-api-key",
    },
    Kind {
        name: "AWS_SECRET_ACCESS_KEY",
        alias: "aws",
        prefix: "",
        alphabet: BASE64,
        len: 40,
        shown_as: "https://sts.amazonaws.com:443 header:authorization",
    },
    Kind {
        name: "STRIPE_SECRET_KEY",
        alias: "stripe",
        prefix: "sk_live_",
        alphabet: ALNUM,
        len: 99,
        shown_as: "https://api.stripe.com:443 header:authorization",
    },
    Kind {
        name: "GITHUB_TOKEN",
        alias: "github",
        prefix: "ghp_",
        alphabet: ALNUM,
        len: 36,
        shown_as: "https://api.github.com:443 header:authorization",
    },
];

/// The decoys a new install plants (`nexbot init`'s `vault.decoys`).
pub const DEFAULT_DECOYS: &[&str] =
    &["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "STRIPE_SECRET_KEY"];

/// Every name a decoy can have.
pub fn known_names() -> Vec<&'static str> {
    KINDS.iter().map(|k| k.name).collect()
}

/// One entry of `vault.decoys`: a known kind's usual name (`OPENAI_API_KEY`), or a name of
/// the operator's with the kind it imitates (`ACME_DEPLOY_TOKEN:github`) — names an injection
/// written against the defaults cannot know.
pub(crate) fn parse(entry: &str) -> Result<(String, &'static Kind), String> {
    let aliases = || KINDS.iter().map(|k| k.alias).collect::<Vec<_>>().join(", ");
    let (name, kind) = match entry.split_once(':') {
        Some((name, alias)) => match KINDS.iter().find(|k| k.alias == alias) {
            Some(kind) => (name, kind),
            None => return Err(format!("{entry:?}: no decoy kind {alias:?}; use {}", aliases())),
        },
        None => match KINDS.iter().find(|k| k.name == entry) {
            Some(kind) => (entry, kind),
            None => {
                return Err(format!(
                    "{entry:?} is no decoy this version can shape; use one of {}, or \
                     NAME:KIND with KIND one of {}",
                    known_names().join(", "),
                    aliases()
                ))
            }
        },
    };
    if !nexbot_redact::is_valid_secret_name(name) {
        return Err(format!("{entry:?}: {name:?} is no secret name ([A-Z_][A-Z0-9_]*)"));
    }
    Ok((name.to_owned(), kind))
}

/// `vault.decoys` checked: each entry parses ([`parse`]), each name once.
pub fn check_names(entries: &[String]) -> Result<(), String> {
    let mut seen = Vec::new();
    for entry in entries {
        let (name, _) = parse(entry)?;
        if seen.contains(&name) {
            return Err(format!("{name} is listed twice"));
        }
        seen.push(name);
    }
    Ok(())
}

/// A fresh value of `kind`'s shape, from the system's random source.
pub(crate) fn fresh_value(kind: &Kind) -> Result<String, String> {
    let bytes = super::crypto::random::<256>().map_err(|e| e.to_string())?;
    let mut value = String::with_capacity(kind.prefix.len() + kind.len);
    value.push_str(kind.prefix);
    // 256 bytes cover the longest kind; the slight bias of `%` shows in no single value.
    value.extend(
        bytes
            .iter()
            .take(kind.len)
            .map(|b| kind.alphabet[*b as usize % kind.alphabet.len()] as char),
    );
    Ok(value)
}

/// A planted decoy.
pub(crate) struct Decoy {
    pub(crate) name: String,
    pub(crate) value: SecretString,
    pub(crate) kind: &'static Kind,
}

impl Decoy {
    /// What a task's prompt shows it bound to.
    pub(crate) fn shown_as(&self) -> String {
        self.kind.shown_as.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_providers_shape_and_a_fresh_value_each_time() {
        let value = |entry: &str| fresh_value(parse(entry).unwrap().1).unwrap();
        let openai = value("OPENAI_API_KEY");
        assert!(openai.starts_with("sk-proj-") && openai.len() == 8 + 148, "{openai}");
        let github = value("GITHUB_TOKEN");
        assert!(github.starts_with("ghp_") && github.len() == 40, "{github}");
        assert!(github[4..].bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(value("AWS_SECRET_ACCESS_KEY").len(), 40);
        assert_ne!(value("GITHUB_TOKEN"), github);
        // A name of the operator's, shaped like the kind it names.
        let (name, kind) = parse("ACME_DEPLOY_TOKEN:github").unwrap();
        assert_eq!(
            (name.as_str(), kind.shown_as),
            ("ACME_DEPLOY_TOKEN", "https://api.github.com:443 header:authorization")
        );
        assert!(fresh_value(kind).unwrap().starts_with("ghp_"));
        for kind in KINDS {
            // What the task's prompt shows parses as a binding, like a real secret's.
            nexbot_egress::Binding::parse(kind.shown_as).unwrap();
        }
    }

    #[test]
    fn an_unknown_or_repeated_name_is_refused_naming_the_known_ones() {
        check_names(&DEFAULT_DECOYS.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let err = check_names(&["MY_KEY".into()]).unwrap_err();
        assert!(err.contains("MY_KEY") && err.contains("GITHUB_TOKEN"), "{err}");
        let err = check_names(&["GITHUB_TOKEN".into(), "GITHUB_TOKEN:github".into()]).unwrap_err();
        assert!(err.contains("twice"), "{err}");
        let err = check_names(&["MY_KEY:gitlab".into()]).unwrap_err();
        assert!(err.contains("\"gitlab\"") && err.contains("openai, anthropic"), "{err}");
        let err = check_names(&["my key:github".into()]).unwrap_err();
        assert!(err.contains("no secret name"), "{err}");
    }
}
