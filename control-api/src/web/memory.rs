//! The dashboard's Memory page: a chat's entries (newest, or those matching a search), each
//! with where it came from, and forgetting one.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{html, Markup};
use nexbot_control::human::utc_time;
use nexbot_control::{MemoryForget, MemoryList};
use serde::Deserialize;

use super::pages::{self, csrf_field, problem};
use super::{done, page, Action, ActionForm, Viewer};
use crate::{ApiError, ControlState};

#[derive(Debug, Deserialize)]
pub(super) struct MemoryQuery {
    #[serde(default)]
    chat: String,
    #[serde(default)]
    q: String,
}

pub(super) async fn memory(
    State(s): State<ControlState>,
    viewer: Viewer,
    Query(query): Query<MemoryQuery>,
) -> Response {
    let chat = query.chat.trim();
    let list = match chat {
        "" => None,
        chat => Some(crate::memory::entries(&s, chat, Some(&query.q), Some(100)).await),
    };
    let body = view(chat, &query.q, list, &viewer.session.csrf);
    page(&s, "Memory", pages::Nav::Memory, &viewer, body)
}

#[derive(Debug, Deserialize)]
pub(super) struct ForgetForm {
    #[serde(default)]
    csrf: String,
    chat: String,
    id: i64,
}

impl ActionForm for ForgetForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub(super) async fn forget(
    State(s): State<ControlState>,
    Action { viewer, form }: Action<ForgetForm>,
) -> Response {
    let body = MemoryForget { chat: form.chat.clone(), id: Some(form.id), all: false };
    let result = crate::memory::forget(&s, &body).await;
    let back = format!("/memory?chat={}", nexbot_control::encode(&form.chat));
    done(&s, &viewer, &back, result)
}

fn view(chat: &str, query: &str, list: Option<Result<MemoryList, ApiError>>, csrf: &str) -> Markup {
    html! {
        form.inline method="get" action="/memory" {
            label { "Chat " input type="text" name="chat" value=(chat) placeholder="telegram:123 or console:name" required; }
            " "
            label { "Search " input type="search" name="q" value=(query); }
            " "
            button type="submit" { "Show" }
        }
        p { "Entries marked " strong { "data" } " came from outside the chat's own words (a \
             page, a file, a tool's or MCP server's result): the agent is told they are \
             information, never instructions." }
        @match list {
            None => p { "Choose a chat." },
            Some(Err(e)) => (problem(&e.message)),
            Some(Ok(list)) => {
                p #memory-summary { (list.chat) ": " (list.total) " entries, " (list.outside) " from outside" }
                @if list.entries.is_empty() { p { "Nothing to show." } } @else {
                    div.scroll { table #memory-table {
                        thead { tr { th scope="col" { "id" } th scope="col" { "stored" } th scope="col" { "trust" } th scope="col" { "source" } th scope="col" { "text" } th scope="col" { "" } } }
                        tbody { @for e in &list.entries {
                            tr {
                                td { (e.id) } td { (utc_time(e.created_at)) }
                                td { span class=(format!("state state-{}", e.trust)) { (e.trust) } }
                                td { (e.source) } td { (e.text) }
                                td {
                                    form.inline method="post" action="/memory/forget" {
                                        (csrf_field(csrf))
                                        input type="hidden" name="chat" value=(list.chat);
                                        input type="hidden" name="id" value=(e.id);
                                        button.danger type="submit" aria-label=(format!("Forget entry {}", e.id)) { "Forget" }
                                    }
                                }
                            }
                        } }
                    } }
                }
            },
        }
    }
}
