//! The secrets vault's endpoints (`nexbot-ctl secrets set|ls|rm`): thin handlers over
//! [`Vault`]'s own calls.
//!
//! Why the care with errors: the set request carries a value, so no answer may quote the
//! request. A body that does not parse gets a fixed message (serde's own can quote what it
//! could not read), and the vault's errors never hold a value. Nothing here logs; the vault
//! logs what it stored by name.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use nexbot_control::{
    secrets_paths, Done, SecretEntry, SecretList, SecretRemove, SecretSet, OPERATOR_SCOPE,
};
use secrecy::SecretString;
use serde::Deserialize;

use super::{ApiError, ControlState};
use nexbot_vault::{
    status_line, Bind, Mode, SecretInfo, SecretScope, Vault, VaultError, VaultState,
};

pub fn routes() -> Router<ControlState> {
    Router::new()
        .route(secrets_paths::SECRETS, get(list).post(set))
        .route(secrets_paths::SECRETS_REMOVE, post(remove))
}

/// A vault error as an answer: the operator's mistakes are 400, a vault that cannot store
/// (no or wrong master key) is 409, an unknown secret 404.
fn vault_error(e: VaultError) -> ApiError {
    let status = match &e {
        VaultError::BadName(_)
        | VaultError::BadValue(_)
        | VaultError::BadBinding(_)
        | VaultError::NeedsHost(_)
        | VaultError::TooManyHosts
        | VaultError::BadMode(_)
        | VaultError::ProxyNeedsHost(_)
        | VaultError::ConfirmNeedsProxy(_) => StatusCode::BAD_REQUEST,
        VaultError::Off(_)
        | VaultError::WrongKey
        | VaultError::Corrupt { .. }
        | VaultError::LegacyBinding { .. }
        | VaultError::TooMany { .. } => StatusCode::CONFLICT,
        VaultError::NotFound { .. } => StatusCode::NOT_FOUND,
        VaultError::Crypto(_) | VaultError::Store(_) | VaultError::Decoy(_) => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    ApiError::new(status, e.to_string())
}

fn scope(text: &str) -> Result<SecretScope, ApiError> {
    SecretScope::parse(text).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid scope {text:?}: {e}; use {OPERATOR_SCOPE} or a chat (telegram:<id>, \
             console:<name>)"
        ))
    })
}

/// A secret without its value, as the control API shows it.
pub fn entry(info: &SecretInfo) -> SecretEntry {
    SecretEntry {
        scope: info.scope.key(),
        name: info.name.clone(),
        mode: info.mode.as_str().to_owned(),
        hosts: info.hosts.clone(),
        updated_at: info.updated_at,
        unreadable: info.unreadable.clone(),
        confirm: info.confirm,
    }
}

/// The listing of `scope` (every scope with `None`) and the vault's state.
pub fn listing(vault: &Vault, scope: Option<&SecretScope>) -> SecretList {
    SecretList {
        vault: status_line(vault),
        vault_on: *vault.state() == VaultState::On,
        secrets: vault.list(scope).iter().map(entry).collect(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    scope: Option<String>,
}

async fn list(
    State(s): State<ControlState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<SecretList>, ApiError> {
    let Query(query) = query?;
    let scope = query.scope.as_deref().map(scope).transpose()?;
    Ok(Json(listing(&s.0.vault, scope.as_ref())))
}

/// Why a body was refused, without serde's detail: it may quote the value.
fn body_refused(e: &JsonRejection) -> ApiError {
    ApiError::new(
        e.status(),
        "bad JSON body for a secret: give {\"scope\", \"name\", \"value\"} and optionally \
         \"hosts\" (a list), \"places\" (a list), \"mode\" (proxy or stdin) and \"confirm\" \
         (true or false); the details \
         are withheld because \
         they could quote the value",
    )
}

async fn set(
    State(s): State<ControlState>,
    body: Result<Json<SecretSet>, JsonRejection>,
) -> Result<Json<SecretEntry>, ApiError> {
    let Json(request) = body.map_err(|e| body_refused(&e))?;
    let scope = scope(&request.scope)?;
    let mode = request.mode.as_deref().map(Mode::parse).transpose().map_err(vault_error)?;
    let value = SecretString::from(request.value.expose());
    let bind =
        Bind { hosts: &request.hosts, places: &request.places, mode, confirm: request.confirm };
    let info =
        s.0.vault.set_bound(&scope, &request.name, value, bind).await.map_err(vault_error)?;
    Ok(Json(entry(&info)))
}

async fn remove(
    State(s): State<ControlState>,
    body: Result<Json<SecretRemove>, JsonRejection>,
) -> Result<Json<Done>, ApiError> {
    let Json(request) = body?;
    let scope = scope(&request.scope)?;
    let vault = &s.0.vault;
    if vault.delete(&scope, &request.name).await.map_err(vault_error)? {
        return Ok(Json(Done { message: format!("secret {} of {scope} deleted", request.name) }));
    }
    let available = vault.list(Some(&scope)).into_iter().map(|i| i.name).collect();
    Err(vault_error(VaultError::NotFound { name: request.name, scope, available }))
}
