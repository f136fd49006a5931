//! `search_web`: a query to the operator's search backend, results as title, URL, snippet.
//!
//! Why through the request's backend and not a built-in engine: the operator chooses the
//! backend (`[search]` on the host: a self-hosted SearXNG by default, or the Brave Search
//! API) and it is reached like any request of the task — through the egress proxy, under its
//! allow/deny rules. A backend's API key is an operator secret in proxy mode: the request
//! carries `{{secret:NAME}}` and the proxy fills it in for the backend's host only.

use serde::Deserialize;
use serde_json::Value;

use super::web::{send, Outgoing, FETCH_TIMEOUT};
use super::{ToolEnv, ToolError, ToolOutput};
use crate::secrets::SecretStore;

/// At most this many results, whatever is asked.
pub const MAX_RESULTS: usize = 10;
const DEFAULT_RESULTS: usize = 5;
/// A snippet is cut to this many characters.
const MAX_SNIPPET_CHARS: usize = 300;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    pub query: String,
    #[serde(default)]
    pub max_results: Option<usize>,
}

/// One result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

pub async fn search_web(
    env: &ToolEnv,
    secrets: &SecretStore,
    args: SearchArgs,
) -> Result<ToolOutput, ToolError> {
    let Some(backend) = &env.search else {
        return Err(ToolError::Failed(
            "search_web is not configured on this Nexbot: the operator sets [search] url in \
             config.toml (a SearXNG instance or the Brave Search API)"
                .into(),
        ));
    };
    let query = args.query.trim();
    if query.is_empty() {
        return Err(ToolError::Invalid("query is empty".into()));
    }
    let wanted = args.max_results.unwrap_or(DEFAULT_RESULTS).clamp(1, MAX_RESULTS);
    let mut url = reqwest::Url::parse(&backend.url).map_err(|e| {
        ToolError::Failed(format!("the search backend's URL {:?} is invalid: {e}", backend.url))
    })?;
    let mut headers = Vec::new();
    match backend.kind.as_str() {
        "brave" => {
            url.query_pairs_mut().append_pair("q", query).append_pair("count", &wanted.to_string());
            let name = backend.key_secret.as_deref().ok_or_else(|| {
                ToolError::Failed("the brave search backend has no API key configured".into())
            })?;
            let key = secrets
                .substitute(&format!("{{{{secret:{name}}}}}"))
                .map_err(|e| ToolError::Failed(format!("the search backend's key: {e}")))?;
            let mut value = reqwest::header::HeaderValue::from_str(key.as_str())
                .map_err(|_| ToolError::Failed("the search key is not a valid header".into()))?;
            value.set_sensitive(true);
            headers.push((reqwest::header::HeaderName::from_static("x-subscription-token"), value));
            headers.push((
                reqwest::header::ACCEPT,
                reqwest::header::HeaderValue::from_static("application/json"),
            ));
        }
        _ => {
            url.query_pairs_mut().append_pair("q", query).append_pair("format", "json");
        }
    }
    let outgoing =
        Outgoing { method: reqwest::Method::GET, url, headers, body: None, timeout: FETCH_TIMEOUT };
    let fetched = send(secrets, outgoing, false, "search_web").await?;
    if !fetched.status.is_success() {
        let body = String::from_utf8_lossy(&fetched.body.bytes);
        return Err(ToolError::Failed(format!(
            "search_web: the backend answered HTTP {}: {}",
            fetched.status,
            body.chars().take(300).collect::<String>()
        )));
    }
    let json: Value = serde_json::from_slice(&fetched.body.bytes).map_err(|e| {
        ToolError::Failed(format!(
            "search_web: the backend's answer is not JSON ({e}); a SearXNG instance must \
             allow `format=json` (search.formats in its settings.yml)"
        ))
    })?;
    let hits = parse(&backend.kind, &json, wanted);
    Ok(ToolOutput::external(format!("search_web {query}"), render(query, &hits)))
}

/// The results of a backend's JSON answer, at most `wanted`.
pub fn parse(kind: &str, json: &Value, wanted: usize) -> Vec<Hit> {
    let (list, snippet_key) = match kind {
        "brave" => (&json["web"]["results"], "description"),
        _ => (&json["results"], "content"),
    };
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or_default().trim().to_owned();
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter(|item| item["url"].is_string())
                .take(wanted)
                .map(|item| Hit {
                    title: text(item, "title"),
                    url: text(item, "url"),
                    snippet: cut(&strip_tags(&text(item, snippet_key)), MAX_SNIPPET_CHARS),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn render(query: &str, hits: &[Hit]) -> String {
    if hits.is_empty() {
        return format!("No results for {query:?}.");
    }
    let mut out = format!("{} results for {query:?}:\n", hits.len());
    for (i, hit) in hits.iter().enumerate() {
        out.push_str(&format!("{}. {}\n   {}\n", i + 1, hit.title, hit.url));
        if !hit.snippet.is_empty() {
            out.push_str(&format!("   {}\n", hit.snippet));
        }
    }
    out
}

/// Brave marks matches with `<strong>`: snippets are shown without tags.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn searxng_and_brave_answers_become_title_url_snippet() {
        let searxng = json!({"results": [
            {"title": "Rust", "url": "https://www.rust-lang.org/", "content": "A language"},
            {"title": "no url"},
            {"title": "Docs", "url": "https://doc.rust-lang.org/", "content": "x".repeat(400)}
        ]});
        let hits = parse("searxng", &searxng, 5);
        assert_eq!(hits.len(), 2, "an entry without a URL is skipped");
        assert_eq!(
            hits[0],
            Hit {
                title: "Rust".into(),
                url: "https://www.rust-lang.org/".into(),
                snippet: "A language".into()
            }
        );
        assert_eq!(hits[1].snippet.chars().count(), MAX_SNIPPET_CHARS + 1, "cut with an ellipsis");
        assert_eq!(parse("searxng", &searxng, 1).len(), 1);
        let brave = json!({"web": {"results": [
            {"title": "Tokio", "url": "https://tokio.rs/", "description": "An <strong>async</strong> runtime"}
        ]}});
        assert_eq!(parse("brave", &brave, 5)[0].snippet, "An async runtime");
        assert!(parse("searxng", &json!({"unexpected": true}), 5).is_empty());
        let text = render("rust", &parse("searxng", &searxng, 5));
        assert!(
            text.starts_with("2 results for \"rust\":\n1. Rust\n   https://www.rust-lang.org/\n"),
            "{text}"
        );
        assert_eq!(render("zz", &[]), "No results for \"zz\".");
    }

    #[tokio::test]
    async fn an_unconfigured_backend_and_an_empty_query_are_clear_errors() {
        let store = SecretStore::new(Default::default(), std::time::Duration::from_secs(60));
        let env = ToolEnv { scratch: "/tmp".into(), skills: "/tmp".into(), ..ToolEnv::default() };
        let args = SearchArgs { query: "x".into(), max_results: None };
        let err = search_web(&env, &store, args).await.unwrap_err().to_string();
        assert!(err.contains("[search] url"), "{err}");
        let env = ToolEnv {
            search: Some(nexbot_protocol::SearchBackend {
                kind: "searxng".into(),
                url: "http://127.0.0.1:9/search".into(),
                key_secret: None,
            }),
            ..env
        };
        let args = SearchArgs { query: "  ".into(), max_results: None };
        assert!(search_web(&env, &store, args).await.unwrap_err().to_string().contains("empty"));
    }
}
