//! A chat's long-term memory for the operator: list, search, forget (thin handlers over the
//! plain functions the dashboard calls too).

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use nexbot_control::{memory_paths, Done, MemoryEntry, MemoryForget, MemoryList};
use nexbot_core::memory::Memory;
use nexbot_core::ChatRef;
use serde::Deserialize;

use super::{ApiError, ControlState};

/// Most entries one listing returns.
const MAX_ROWS: usize = 500;

pub fn routes() -> Router<ControlState> {
    Router::new()
        .route(memory_paths::MEMORY, get(list))
        .route(memory_paths::MEMORY_FORGET, post(forget_route))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    chat: String,
    q: Option<String>,
    limit: Option<usize>,
}

fn chat(text: &str) -> Result<ChatRef, ApiError> {
    text.parse().map_err(|e: nexbot_core::ChatRefError| ApiError::bad_request(e.to_string()))
}

fn entry(m: &Memory) -> MemoryEntry {
    MemoryEntry {
        id: m.id,
        text: m.text.clone(),
        trust: m.trust().as_str().to_owned(),
        source: m.source.describe(),
        created_at: m.created_at,
        uses: m.uses,
    }
}

async fn list(
    State(s): State<ControlState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<MemoryList>, ApiError> {
    let Query(query) = query?;
    entries(&s, &query.chat, query.q.as_deref(), query.limit).await.map(Json)
}

/// `memory ls|search --chat CHAT`: the newest entries, or those matching `query` best first.
/// A search does not count as a use (the operator looking is not the agent recalling).
pub async fn entries(
    s: &ControlState,
    chat_text: &str,
    query: Option<&str>,
    limit: Option<usize>,
) -> Result<MemoryList, ApiError> {
    let chat = chat(chat_text)?;
    let limit = limit.unwrap_or(50).clamp(1, MAX_ROWS);
    let store = &s.0.store;
    let found = match query.map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => store.recall(&chat, q, limit, false).await,
        None => store.recent_memories(&chat, limit).await,
    }
    .map_err(ApiError::internal)?;
    let stats = store.memory_stats(&chat).await.map_err(ApiError::internal)?;
    Ok(MemoryList {
        chat: chat.to_string(),
        entries: found.iter().map(entry).collect(),
        total: stats.entries,
        bytes: stats.bytes,
        outside: stats.outside,
    })
}

async fn forget_route(
    State(s): State<ControlState>,
    body: Result<Json<MemoryForget>, JsonRejection>,
) -> Result<Json<Done>, ApiError> {
    let Json(body) = body?;
    forget(&s, &body).await.map(Json)
}

/// `memory rm --chat CHAT ID|--all`.
pub async fn forget(s: &ControlState, body: &MemoryForget) -> Result<Done, ApiError> {
    let chat = chat(&body.chat)?;
    let store = &s.0.store;
    match (body.id, body.all) {
        (None, true) => {
            let n = store.forget_all(&chat).await.map_err(ApiError::internal)?;
            tracing::info!(%chat, entries = n, "the operator emptied a chat's memory");
            Ok(Done { message: format!("forgot all {n} entries of {chat}") })
        }
        (Some(id), false) => {
            if store.forget(&chat, id).await.map_err(ApiError::internal)? {
                tracing::info!(%chat, id, "the operator removed a memory");
                Ok(Done { message: format!("forgot #{id} of {chat}") })
            } else {
                Err(ApiError::not_found(format!("{chat}'s memory has no entry #{id}")))
            }
        }
        _ => Err(ApiError::bad_request("give either an entry's id or all = true, not both")),
    }
}
