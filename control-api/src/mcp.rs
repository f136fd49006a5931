//! The MCP servers' endpoints (`nexbot-ctl mcp ls|tools|restart|logs`): thin handlers over
//! plain functions of [`McpServers`], which runs them in the sandbox. Without a sandbox
//! (delegation off) there is no server to show, and every answer says why.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use nexbot_control::{
    mcp_paths, Done, LogLines, McpInstance, McpServer, McpServerList, McpSkippedTool, McpTool,
    McpToolList,
};
use nexbot_mcp::ServerConfig;

use super::{ApiError, ControlState, LogsQuery};
use nexbot_mcp_host::{InstanceView, McpServers};

pub fn routes() -> Router<ControlState> {
    Router::new()
        .route(
            mcp_paths::MCP,
            get(|State(s): State<ControlState>| async move { list(&s).await.map(Json) }),
        )
        .route(
            "/v1/mcp/{server}/tools",
            get(|State(s): State<ControlState>, UrlPath(server): UrlPath<String>| async move {
                tools(&s, &server).map(Json)
            }),
        )
        .route(
            "/v1/mcp/{server}/restart",
            post(|State(s): State<ControlState>, UrlPath(server): UrlPath<String>| async move {
                restart(&s, &server).await.map(Json)
            }),
        )
        .route("/v1/mcp/{server}/logs", get(logs_handler))
}

async fn logs_handler(
    State(s): State<ControlState>,
    UrlPath(server): UrlPath<String>,
    query: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Json<LogLines>, ApiError> {
    let Query(query) = query?;
    logs(&s, &server, query.n).await.map(Json)
}

/// The servers, or why there are none: they run in the sandbox.
fn servers(state: &ControlState) -> Result<&McpServers, ApiError> {
    state.0.mcp.as_deref().ok_or_else(|| {
        let why = state.0.delegation_off.as_deref().unwrap_or("no sandbox");
        ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "MCP servers run in the sandbox, and it is not running: delegation is off ({why})"
            ),
        )
    })
}

/// `server`'s configuration, or a 404 naming it (and the configured ones).
fn known<'a>(mcp: &'a McpServers, server: &str) -> Result<&'a ServerConfig, ApiError> {
    mcp.config(server).map_err(|e| ApiError::not_found(e.to_string()))
}

/// `GET /v1/mcp`: every configured server, with its instances (none yet: an empty list).
pub async fn list(state: &ControlState) -> Result<McpServerList, ApiError> {
    let mcp = servers(state)?;
    let views = mcp.instances().await;
    let tool_counts = |server: &str| mcp.tool_list(server).map_or(0, |(tools, _)| tools.len());
    Ok(server_list(mcp.servers(), &views, tool_counts))
}

/// The answer of `GET /v1/mcp` from the configuration, the instances and the tool counts.
pub fn server_list(
    configs: &[ServerConfig],
    views: &[InstanceView],
    tool_counts: impl Fn(&str) -> usize,
) -> McpServerList {
    let servers = configs
        .iter()
        .map(|config| McpServer {
            name: config.name.clone(),
            scope: config.scope.as_str().to_owned(),
            image: match config.is_remote() {
                true => String::new(),
                false => config.image().to_owned(),
            },
            command: config.command_line(),
            url: config.url.clone(),
            tools: tool_counts(&config.name),
            instances: views.iter().filter(|v| v.server == config.name).map(instance).collect(),
        })
        .collect();
    McpServerList { servers }
}

fn instance(v: &InstanceView) -> McpInstance {
    McpInstance {
        serves: v.serves.clone(),
        state: v.state.to_owned(),
        container: v.container.clone(),
        tools: v.tools,
        restarts: v.restarts,
        last_error: v.last_error.clone(),
        up_secs: v.up_secs,
        idle_secs: v.idle_secs,
    }
}

/// `GET /v1/mcp/{server}/tools`: the tools offered, and the ones left out with why.
pub fn tools(state: &ControlState, server: &str) -> Result<McpToolList, ApiError> {
    let mcp = servers(state)?;
    known(mcp, server)?;
    let (offered, skipped) =
        mcp.tool_list(server).map_err(|e| ApiError::not_found(e.to_string()))?;
    Ok(McpToolList {
        server: server.to_owned(),
        tools: offered
            .into_iter()
            .map(|t| McpTool { function: t.function, tool: t.tool, description: t.description })
            .collect(),
        skipped: skipped.into_iter().map(|s| McpSkippedTool { tool: s.tool, why: s.why }).collect(),
    })
}

/// `POST /v1/mcp/{server}/restart`: every instance stops; a shared server starts again now
/// (the answer names its new container), a chat's at its next call.
pub async fn restart(state: &ControlState, server: &str) -> Result<Done, ApiError> {
    let mcp = servers(state)?;
    let scope = known(mcp, server)?.scope;
    let restarted = mcp.restart(server).await.map_err(|e| {
        ApiError::new(StatusCode::BAD_GATEWAY, format!("MCP server {server} did not restart: {e}"))
    })?;
    let stopped = restarted.stopped;
    tracing::info!(server, stopped, "MCP server restarted by the operator");
    let message = match scope {
        nexbot_mcp::ServerScope::Shared => format!(
            "MCP server {server} restarted: container {}",
            restarted.container.as_deref().unwrap_or("-")
        ),
        nexbot_mcp::ServerScope::Chat => format!(
            "MCP server {server}: {stopped} instance(s) stopped; each chat's starts again at its \
             next call"
        ),
    };
    Ok(Done { message })
}

/// `GET /v1/mcp/{server}/logs?n=N`: the stderr lines of its running instances.
pub async fn logs(
    state: &ControlState,
    server: &str,
    n: Option<usize>,
) -> Result<LogLines, ApiError> {
    let mcp = servers(state)?;
    known(mcp, server)?;
    let mut lines = mcp.logs(server).await.map_err(|e| ApiError::not_found(e.to_string()))?;
    super::ops::keep_last(&mut lines, n);
    Ok(LogLines { id: server.to_owned(), lines })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, scope: &str) -> ServerConfig {
        serde_json::from_value(serde_json::json!({
            "name": name, "command": "mcp-server-everything", "args": ["stdio"], "scope": scope
        }))
        .unwrap()
    }

    fn view(server: &str, serves: &str, state: &'static str) -> InstanceView {
        InstanceView {
            server: server.into(),
            serves: serves.into(),
            state,
            container: (state == "running").then(|| format!("nxb-mcp-{server}-1")),
            tools: 13,
            restarts: 2,
            last_error: Some("exited with 1".into()),
            up_secs: Some(30),
            idle_secs: Some(5),
        }
    }

    #[test]
    fn every_configured_server_is_listed_with_its_own_instances_only() {
        let configs =
            [config("everything", "shared"), config("fs", "chat"), config("idle", "chat")];
        let views = [
            view("everything", "shared", "running"),
            view("fs", "probe", "stopped"),
            view("fs", "telegram:7", "failed"),
        ];
        let list = server_list(&configs, &views, |s| if s == "everything" { 13 } else { 0 });
        let names: Vec<&str> = list.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["everything", "fs", "idle"]);
        let everything = &list.servers[0];
        assert_eq!(everything.scope, "shared");
        assert_eq!(everything.image, nexbot_mcp::config::DEFAULT_IMAGE);
        assert_eq!(everything.command, ["mcp-server-everything", "stdio"]);
        assert_eq!(everything.tools, 13);
        assert_eq!(everything.instances.len(), 1);
        assert_eq!(everything.instances[0].serves, "shared");
        assert_eq!(everything.instances[0].container.as_deref(), Some("nxb-mcp-everything-1"));
        assert_eq!(everything.instances[0].restarts, 2);
        // A chat-scoped server's instance without a chat is its probe (`McpServers::instances`
        // says so).
        let serves: Vec<&str> =
            list.servers[1].instances.iter().map(|i| i.serves.as_str()).collect();
        assert_eq!(serves, ["probe", "telegram:7"]);
        assert_eq!(list.servers[1].instances[1].state, "failed");
        // Configured, never started: listed with no instance.
        assert!(list.servers[2].instances.is_empty());
        assert_eq!(list.servers[2].tools, 0);
        // A remote server runs no image: it names its URL.
        let remote: ServerConfig = serde_json::from_value(serde_json::json!({
            "name": "tracker", "url": "https://mcp.example.com/mcp"
        }))
        .unwrap();
        let list = server_list(&[remote], &[], |_| 0);
        assert_eq!(list.servers[0].image, "");
        assert_eq!(list.servers[0].url.as_deref(), Some("https://mcp.example.com/mcp"));
    }
}
