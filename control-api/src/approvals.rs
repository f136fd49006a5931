//! The egress approvals' endpoints: thin handlers over [`Approvals`] and the store's rules.
//! An answer from here is the operator's (`nexbot-ctl`), good for a question of any chat.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use nexbot_control::{
    approvals_paths, ApprovalAnswer, ApprovalList, Done, EgressRule, EgressRuleList,
    EgressRuleRemove,
};
use serde::Deserialize;

use super::{ApiError, ControlState};
use nexbot_approvals::{AnswerError, Choice};

pub fn routes() -> Router<ControlState> {
    Router::new()
        .route(approvals_paths::APPROVALS, get(list))
        .route(approvals_paths::APPROVALS_ANSWER, post(answer))
        .route(approvals_paths::EGRESS_RULES, get(rules))
        .route(approvals_paths::EGRESS_RULES_REMOVE, post(remove))
}

/// Who answers from the control API, as the question's record and message name it.
pub const OPERATOR: &str = "nexbot-ctl";
/// Who answers from the web dashboard.
pub const DASHBOARD: &str = "dashboard";

async fn list(State(s): State<ControlState>) -> Result<Json<ApprovalList>, ApiError> {
    Ok(Json(pending(&s)))
}

/// `approvals ls`: the egress mode and the questions waiting.
pub fn pending(s: &ControlState) -> ApprovalList {
    let mode = s.0.egress_mode.clone();
    let pending = match &s.0.approvals {
        Some(approvals) => approvals.pending(),
        None => Vec::new(),
    };
    ApprovalList { mode, pending }
}

async fn answer(
    State(s): State<ControlState>,
    body: Result<Json<ApprovalAnswer>, JsonRejection>,
) -> Result<Json<Done>, ApiError> {
    let Json(request) = body?;
    answer_question(&s, &request, OPERATOR).await.map(Json)
}

/// `approvals allow|deny ID`: the operator's answer to a question of any chat, recorded as
/// given `by` (`nexbot-ctl`, `dashboard`).
pub async fn answer_question(
    s: &ControlState,
    request: &ApprovalAnswer,
    by: &str,
) -> Result<Done, ApiError> {
    let Some(choice) = Choice::parse(&request.answer) else {
        return Err(ApiError::bad_request(format!(
            "unknown answer {:?}: use once (allow), task, chat or deny",
            request.answer
        )));
    };
    let Some(approvals) = &s.0.approvals else {
        return Err(ApiError::not_found(
            "no egress questions here: the sandbox is not running (see `nexbot-ctl status`)",
        ));
    };
    match approvals.answer(request.id, choice, by, None) {
        Ok(kind) => Ok(Done {
            message: format!("{} question {}: {}", kind.as_str(), request.id, choice.as_str()),
        }),
        Err(e @ AnswerError::NotWaiting(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e) => Err(ApiError::bad_request(e.to_string())),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesQuery {
    chat: Option<String>,
}

async fn rules(
    State(s): State<ControlState>,
    query: Result<Query<RulesQuery>, QueryRejection>,
) -> Result<Json<EgressRuleList>, ApiError> {
    let Query(query) = query?;
    let rows = s.0.store.egress_rules(query.chat.as_deref()).await.map_err(ApiError::internal)?;
    let rules = rows
        .into_iter()
        .map(|r| EgressRule {
            chat: r.chat,
            host: r.host,
            port: r.port,
            created_at: r.created_at,
            created_by: r.created_by,
        })
        .collect();
    Ok(Json(EgressRuleList { rules }))
}

async fn remove(
    State(s): State<ControlState>,
    body: Result<Json<EgressRuleRemove>, JsonRejection>,
) -> Result<Json<Done>, ApiError> {
    let Json(request) = body?;
    let (chat, host, port) = (&request.chat, request.host.to_ascii_lowercase(), request.port);
    let removed =
        s.0.store.remove_egress_rule(chat, &host, port).await.map_err(ApiError::internal)?;
    if !removed {
        return Err(ApiError::not_found(format!(
            "{chat} has no egress rule for {host}:{port}; `nexbot-ctl egress rules ls` lists them"
        )));
    }
    Ok(Json(Done { message: format!("egress rule {host}:{port} of {chat} removed") }))
}
