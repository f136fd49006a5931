//! The process-wide set of values that must never be printed.
//!
//! Secrets arrive with a task and the LLM key with a request, but they must be scrubbed from
//! every stdout line and every stderr log line, whoever writes it. The stdout writer and the
//! log layer both consult this one slot, as defence in depth behind the task's own redaction.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use nexbot_protocol::Redactor;

/// Holds the redactor for the secrets currently alive in the process (the task's secrets and
/// the LLM credentials), swapped as tasks start and end.
#[derive(Debug, Default)]
pub struct Redaction {
    current: RwLock<Option<Arc<Redactor>>>,
}

impl Redaction {
    /// Replaces the set of values to scrub.
    pub fn set(&self, redactor: Arc<Redactor>) {
        let redactor = if redactor.is_empty() { None } else { Some(redactor) };
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = redactor;
    }

    /// The redactor in force now, if any value must be scrubbed.
    pub fn get(&self) -> Option<Arc<Redactor>> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `text` with every live secret value (and its encoded forms) replaced by its label.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.get() {
            Some(redactor) => Cow::Owned(redactor.redact(text)),
            None => Cow::Borrowed(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexbot_protocol::SecretMap;
    use secrecy::SecretString;

    #[test]
    fn scrubs_only_while_set() {
        let slot = Redaction::default();
        assert_eq!(slot.redact("key=abc123"), "key=abc123");
        let mut map = SecretMap::new();
        map.insert("KEY", SecretString::from("abc123".to_owned()));
        slot.set(Arc::new(Redactor::new(&map)));
        assert_eq!(slot.redact("key=abc123"), "key=[REDACTED:KEY]");
        slot.set(Arc::new(Redactor::default()));
        assert!(slot.get().is_none());
    }
}
