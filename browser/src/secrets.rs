//! `{{secret:NAME}}` typed into a page: filled in only where the secret's binding allows, and
//! never read back by the model.
//!
//! The model writes `browser_type` with the text `{{secret:NAME}}`; this filter makes it two
//! calls of the chat's browser: first where the field's page is (its document's address),
//! checked against the secret's binding as the egress proxy checks a request (host, port,
//! scheme, and the body among its places: a form sends what was typed in its body); then the
//! fill, in the page, which refuses if the field's page is no longer that address (a page that
//! navigated between the two calls gets nothing). Every answer of the browser is scanned for
//! the chat's secrets (and the operator's) in every encoding the redactor knows, so a page that
//! shows what was typed does not show it to the model.
//!
//! What the browser then holds: the value, in the page's memory and the field, for as long as
//! the page keeps it, and in what the page sends to its site. The image's policy turns
//! Chromium's password manager off and a password field never enters its form history, so the
//! profile holds no copy (the browser test hunts it for the value); the site itself may (a
//! "remember me" cookie is the site's).
//!
//! A picture of the page (a screenshot) cannot be scanned as text is, so it reaches the model
//! only when the chat's browser has typed no secret since the daemon started, and the page's
//! text and fields, read just after the picture was taken, hold none of the chat's secrets.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use nexbot_core::{BoxFuture, ChatRef};
use nexbot_mcp::answer::Answer;
use nexbot_mcp::{CallFilter, McpError, PlainCall};
use nexbot_redact::Redactor;
use nexbot_vault::{SecretScope, Vault};
use secrecy::ExposeSecret;
use serde_json::{json, Map, Value};

/// The browser's calls, for one chat's secrets.
#[derive(Debug)]
pub struct SecretTyping {
    vault: Arc<Vault>,
    /// Chats whose browser has typed a secret (since the daemon started): their pictures are
    /// not shown to the model (a page may draw what was typed where its text does not say it).
    typed: Mutex<HashSet<ChatRef>>,
}

/// What the page's text check reads: the visible text of the page and of each frame it can
/// read, and every field's value but a password field's (drawn masked); a frame it cannot read
/// (another site's) is marked.
const PAGE_TEXT: &str = "() => { const parts = []; const walk = (doc) => { \
     parts.push(doc.body ? doc.body.innerText : ''); \
     for (const el of doc.querySelectorAll('input, textarea, select')) { \
     if (el.type !== 'password') parts.push(el.value); } \
     for (const frame of doc.querySelectorAll('iframe, frame')) { let inner = null; \
     try { inner = frame.contentDocument; } catch (e) {} \
     if (inner) walk(inner); else parts.push('\\u0000unreadable frame'); } }; \
     walk(document); return parts.join('\\n'); }";
const UNREADABLE_FRAME: &str = "\u{0}unreadable frame";

impl SecretTyping {
    pub fn new(vault: Arc<Vault>) -> Self {
        Self { vault, typed: Mutex::default() }
    }

    /// The values `chat` may not read back, as one redactor.
    fn redactor(&self, chat: &ChatRef) -> Redactor {
        let watched = self.vault.watched(chat);
        Redactor::from_pairs(watched.iter().map(|(name, v)| (name.as_str(), v)))
    }

    /// `answer` with its pictures taken out, unless they may be shown: see the module's
    /// comment. The model reads why they were not.
    async fn screen(
        &self,
        chat: &ChatRef,
        redactor: &Redactor,
        mut answer: Answer,
        call: &PlainCall<'_>,
    ) -> Answer {
        if answer.images.is_empty() || redactor.is_empty() {
            return answer;
        }
        let typed = self.typed.lock().unwrap_or_else(|e| e.into_inner()).contains(chat);
        let why = if typed {
            "this chat's browser has typed a secret"
        } else {
            let read = call("browser_evaluate".to_owned(), object(json!({"function": PAGE_TEXT})));
            match read.await.ok().as_ref().and_then(evaluated_string) {
                None => "the page's text could not be read to check it for secrets",
                Some(text) if text.contains(UNREADABLE_FRAME) => {
                    "a frame of another site in the page could not be checked for secrets"
                }
                Some(text) if redactor.redact(&text) != text => {
                    "the page shows one of this chat's secrets"
                }
                Some(_) => return answer,
            }
        };
        answer.images.clear();
        answer.text.push_str(&format!("\n[its picture is not shown to the model: {why}]"));
        answer
    }

    async fn type_secret(
        &self,
        chat: &ChatRef,
        name: &str,
        arguments: &Map<String, Value>,
        call: &PlainCall<'_>,
    ) -> Result<Answer, McpError> {
        let refused = |why: String| Ok(Answer::text(why, true));
        let secret = match self.vault.resolve(&SecretScope::Chat(chat.clone()), name) {
            Ok(secret) => secret,
            Err(e) => return refused(format!("the secret {name} is not typed: {e}")),
        };
        if secret.decoy.is_some() || secret.hosts.is_empty() {
            return refused(format!(
                "the secret {name} is bound to no site, so it is typed into none (store it with \
                 --host https://SITE --in body)"
            ));
        }
        if secret.confirm {
            return refused(format!(
                "the secret {name} needs a yes for each task; the browser does not ask yet"
            ));
        }
        let (Some(target), element) = (arguments.get("target"), arguments.get("element")) else {
            return refused("browser_type needs a target".to_owned());
        };
        let element = element.cloned().unwrap_or_else(|| json!("the field"));
        let whereabouts = json!({
            "element": element, "target": target,
            "function": "(element) => element.ownerDocument.location.href",
        });
        let found = call("browser_evaluate".to_owned(), object(whereabouts)).await?;
        let Some(page) = evaluated_string(&found) else {
            return refused(format!("the secret {name} is not typed: the field was not found"));
        };
        if !secret.hosts.iter().any(|binding| binding.allows_page(&page)) {
            let origin = page.split('/').take(3).collect::<Vec<_>>().join("/");
            return refused(format!(
                "the secret {name} is not typed into this page ({origin}): it is bound elsewhere"
            ));
        }
        let submit = match arguments.get("submit") {
            Some(Value::Bool(true)) => "if (element.form) element.form.requestSubmit();",
            _ => "",
        };
        let fill = format!(
            "(element) => {{ if (element.ownerDocument.location.href !== {page}) throw new \
             Error('the page changed before the secret was typed'); const setter = \
             Object.getOwnPropertyDescriptor(Object.getPrototypeOf(element), 'value')?.set; \
             if (!setter) throw new Error('not a text field'); setter.call(element, {value}); \
             element.dispatchEvent(new Event('input', {{ bubbles: true }})); \
             element.dispatchEvent(new Event('change', {{ bubbles: true }})); {submit} return \
             'typed'; }}",
            page = Value::String(page.clone()),
            value = Value::String(secret.value.expose_secret().to_owned()),
        );
        let filled = json!({"element": element, "target": target, "function": fill});
        let answer = call("browser_evaluate".to_owned(), object(filled)).await?;
        if !answer.is_error {
            self.typed.lock().unwrap_or_else(|e| e.into_inner()).insert(chat.clone());
        }
        match answer.is_error {
            true => Ok(answer),
            false => Ok(Answer {
                text: format!("Typed the secret {name} into {element}.\n{}", answer.text),
                ..answer
            }),
        }
    }
}

impl CallFilter for SecretTyping {
    fn call<'a>(
        &'a self,
        chat: &'a ChatRef,
        tool: &'a str,
        arguments: Map<String, Value>,
        call: &'a PlainCall<'a>,
    ) -> BoxFuture<'a, Result<Answer, McpError>> {
        Box::pin(async move {
            let answer = match placeholder(tool, &arguments) {
                Placeholder::None => call(tool.to_owned(), arguments).await?,
                Placeholder::Typed(name) => self.type_secret(chat, &name, &arguments, call).await?,
                Placeholder::Elsewhere => Answer::text(
                    format!(
                        "{tool} was not run: a {{{{secret:NAME}}}} is typed only with \
                         browser_type, alone in its text, into a page its binding allows"
                    ),
                    true,
                ),
            };
            // The value's names in place of the values, in the text the model reads.
            let redactor = self.redactor(chat);
            let mut answer = self.screen(chat, &redactor, answer, call).await;
            answer.text = redactor.redact(&answer.text);
            Ok(answer)
        })
    }
}

/// Where a call's arguments name a secret.
#[derive(Debug, PartialEq, Eq)]
enum Placeholder {
    None,
    /// `browser_type` whose text is exactly `{{secret:NAME}}`.
    Typed(String),
    /// Anywhere else, or beside other text: refused (it would be typed as it is, or sent to
    /// a page's script).
    Elsewhere,
}

fn placeholder(tool: &str, arguments: &Map<String, Value>) -> Placeholder {
    let text = arguments.get("text").and_then(Value::as_str);
    let alone = text
        .and_then(|t| t.strip_prefix("{{secret:"))
        .and_then(|t| t.strip_suffix("}}"))
        .filter(|name| nexbot_redact::is_valid_secret_name(name));
    match (tool, alone) {
        ("browser_type", Some(name)) => Placeholder::Typed(name.to_owned()),
        _ if Value::Object(arguments.clone()).to_string().contains("{{secret:") => {
            Placeholder::Elsewhere
        }
        _ => Placeholder::None,
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The string an evaluation returned (Playwright answers `### Result` then the value as JSON).
fn evaluated_string(answer: &Answer) -> Option<String> {
    if answer.is_error {
        return None;
    }
    let after = answer.text.split("### Result").nth(1)?;
    let line = after.lines().map(str::trim).find(|l| !l.is_empty())?;
    serde_json::from_str::<String>(line).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(value: Value) -> Map<String, Value> {
        object(value)
    }

    #[test]
    fn a_placeholder_is_typed_only_alone_in_browser_type() {
        let typed = args(json!({"target": "e5", "text": "{{secret:BANK_PW}}"}));
        assert_eq!(placeholder("browser_type", &typed), Placeholder::Typed("BANK_PW".into()));
        let beside = args(json!({"target": "e5", "text": "pw {{secret:BANK_PW}}"}));
        assert_eq!(placeholder("browser_type", &beside), Placeholder::Elsewhere);
        let script = args(json!({"function": "() => '{{secret:BANK_PW}}'"}));
        assert_eq!(placeholder("browser_evaluate", &script), Placeholder::Elsewhere);
        let url = args(json!({"url": "https://x.example/?k={{secret:BANK_PW}}"}));
        assert_eq!(placeholder("browser_navigate", &url), Placeholder::Elsewhere);
        let plain = args(json!({"target": "e5", "text": "alice"}));
        assert_eq!(placeholder("browser_type", &plain), Placeholder::None);
    }

    #[test]
    fn an_evaluations_string_is_read_from_its_answer() {
        let answer = |text: &str, is_error| Answer::text(text, is_error);
        let page = answer("### Result\n\"https://bank.example/login\"\n", false);
        assert_eq!(evaluated_string(&page).as_deref(), Some("https://bank.example/login"));
        assert_eq!(evaluated_string(&answer("### Error\nno such element", true)), None);
        assert_eq!(evaluated_string(&answer("### Result\n42", false)), None);
    }
}
