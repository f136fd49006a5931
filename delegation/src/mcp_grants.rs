//! MCP tools a delegation grants its task by name (`tools: ["mcp__everything__echo"]`): only
//! the tools of the delegating chat's MCP servers that its model is offered this turn. The
//! task's request carries their definitions (`execute.mcp_tools`); the subagent asks for each
//! call (`mcp_call`), and [`GrantedCalls`] makes it through the very tool the main agent would
//! call — the chat's own MCP instance, the same envelope, the same counters — or refuses a
//! name that was not granted (`docs/protocol.md#mcp-tools`).

use std::sync::Arc;

use nexbot_agent::tools::{Tool, ToolContext, ToolError, ToolSource};

use crate::seams::LlmAccess;
use nexbot_core::text::{clip, excerpt};
use nexbot_core::BoxFuture;
use nexbot_protocol::{is_subagent_tool, McpAnswer, McpCall, McpCalls, McpToolSpec, BLOCKED_TOOLS};
use serde_json::Value;

/// MCP tool names a refusal lists at most.
const NAMES_LISTED: usize = 20;

/// A delegation's `tools`, split.
#[derive(Debug, Default)]
pub struct Split {
    /// The subagent's own names, as asked (the delegation checks them).
    pub own: Vec<String>,
    /// The chat's MCP tools granted, each once.
    pub granted: Vec<Arc<dyn Tool>>,
}

/// Splits a delegation's `tools` into the subagent's own names and the MCP tools granted. A
/// name that is neither a subagent tool nor one of `offered` (the chat's MCP tools this turn)
/// but has the MCP form is refused, naming it; nothing has run then.
pub fn split(requested: &[String], offered: &[Arc<dyn Tool>]) -> Result<Split, ToolError> {
    let mut own = Vec::new();
    let mut granted: Vec<Arc<dyn Tool>> = Vec::new();
    let mut refused: Vec<&str> = Vec::new();
    for name in requested {
        if is_subagent_tool(name) || BLOCKED_TOOLS.contains(&name.as_str()) {
            own.push(name.clone());
        } else if let Some(tool) = offered.iter().find(|t| t.name() == name) {
            if !granted.iter().any(|t| t.name() == name) {
                granted.push(tool.clone());
            }
        } else if name.starts_with(nexbot_mcp::catalog::PREFIX) {
            if !refused.contains(&name.as_str()) {
                refused.push(name);
            }
        } else {
            own.push(name.clone());
        }
    }
    if refused.is_empty() {
        return Ok(Split { own, granted });
    }
    let names: Vec<&str> = offered.iter().map(|t| t.name()).collect();
    let theirs = match names.len() {
        0 => "this chat may use no MCP tool".to_owned(),
        n if n <= NAMES_LISTED => format!("this chat's MCP tools are {}", names.join(", ")),
        n => format!(
            "this chat's MCP tools are {} and {} more",
            names[..NAMES_LISTED].join(", "),
            n - NAMES_LISTED
        ),
    };
    let refused: Vec<String> = refused.iter().map(|n| clip(n, 80).into_owned()).collect();
    Err(ToolError::new(format!(
        "{} {} not an MCP tool this chat may use, so it cannot be granted; {theirs}; nothing \
         was run",
        refused.join(", "),
        if refused.len() == 1 { "is" } else { "are" },
    )))
}

/// The chat's MCP tools this turn: what `source` offers its model.
pub fn offered(source: Option<&Arc<dyn ToolSource>>, ctx: &ToolContext) -> Vec<Arc<dyn Tool>> {
    source.map(|s| s.tools(&ctx.chat, ctx.owner)).unwrap_or_default()
}

/// What the subagent is told of the granted tools: their names, descriptions and schemas, as
/// the main agent's model reads them.
pub fn specs(granted: &[Arc<dyn Tool>]) -> Vec<McpToolSpec> {
    granted
        .iter()
        .map(|t| McpToolSpec {
            name: t.name().to_owned(),
            description: t.description().to_owned(),
            input_schema: t.parameters(),
        })
        .collect()
}

/// Answers one task's `mcp_call`s: a granted tool is called as the delegating chat's model
/// would call it (its context: its chat's instance, its cancel), anything else refused.
#[derive(Debug)]
pub struct GrantedCalls {
    task_id: String,
    granted: Vec<Arc<dyn Tool>>,
    /// The delegation's context; its `cancel` ends the task's calls with it.
    ctx: ToolContext,
    /// Lends a server's egress to the task while a call of its runs ([`LlmAccess::lend`]).
    egress: Option<Arc<dyn LlmAccess>>,
}

impl GrantedCalls {
    pub fn new(task_id: &str, granted: Vec<Arc<dyn Tool>>, ctx: ToolContext) -> Self {
        Self { task_id: task_id.to_owned(), granted, ctx, egress: None }
    }

    /// What a call's server reaches through the egress while it runs counts for the task
    /// (its receipt names it).
    pub fn lending(mut self, egress: Arc<dyn LlmAccess>) -> Self {
        self.egress = Some(egress);
        self
    }
}

impl McpCalls for GrantedCalls {
    fn call(&self, call: McpCall) -> BoxFuture<'static, McpAnswer> {
        let tool = self.granted.iter().find(|t| t.name() == call.tool).cloned();
        let Some(tool) = tool.filter(|_| call.task_id == self.task_id) else {
            tracing::warn!(
                task_id = %self.task_id,
                tool = %excerpt(&call.tool),
                "the subagent called an MCP tool it was not granted; refused"
            );
            let refusal = format!(
                "the tool {} was not granted to this task; nothing was called",
                clip(&call.tool, 80)
            );
            return Box::pin(std::future::ready(McpAnswer::Error(refusal)));
        };
        // Its own token: the call ends, telling its server, when the task stops waiting for it
        // (the task ended, the delegation was cancelled) — not merely dropped mid-request.
        let ctx = ToolContext { cancel: self.ctx.cancel.child_token(), ..self.ctx.clone() };
        let stop = ctx.cancel.clone().drop_guard();
        let arguments = Value::Object(call.arguments);
        let lent = self.egress.as_ref().and_then(|egress| {
            egress.lend(nexbot_mcp::catalog::server_of(&call.tool)?, &self.ctx.chat, &self.task_id)
        });
        let running = tokio::spawn(async move {
            let answer = tool.call(arguments, &ctx).await;
            drop(lent);
            answer
        });
        Box::pin(async move {
            let _stop = stop;
            match running.await {
                Ok(Ok(output)) if output.images().is_empty() => McpAnswer::Result(output.text()),
                Ok(Ok(output)) => McpAnswer::Result(format!(
                    "{}\n[its pictures are not passed to a delegated task]",
                    output.text()
                )),
                Ok(Err(error)) => McpAnswer::Error(error.message().to_owned()),
                Err(e) => McpAnswer::Error(format!("{}: the call failed: {e}", call.tool)),
            }
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nexbot_agent::tools::{success, ToolResult};
    use serde_json::json;

    /// A tool that answers with its name and arguments.
    #[derive(Debug)]
    pub(crate) struct Named(pub &'static str);

    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "d"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn call<'a>(&'a self, args: Value, _: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
            Box::pin(async move { Ok(success(format!("{} got {args}", self.0))) })
        }
    }

    /// A tool that answers with a picture (a browser's screenshot).
    #[derive(Debug)]
    struct Pictured;

    impl Tool for Pictured {
        fn name(&self) -> &str {
            "mcp__a__shot"
        }
        fn description(&self) -> &str {
            "d"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn call<'a>(&'a self, _: Value, _: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
            let image = nexbot_agent::llm::Image { mime: "image/png".into(), data: Arc::default() };
            Box::pin(async move { Ok(success("saved shot.png").with_images(vec![image])) })
        }
    }

    #[tokio::test]
    async fn a_delegated_task_reads_that_an_answers_pictures_were_not_passed() {
        let calls = GrantedCalls::new("t1", vec![Arc::new(Pictured)], ToolContext::for_tests());
        let call = McpCall {
            task_id: "t1".into(),
            call_id: "c1".into(),
            tool: "mcp__a__shot".into(),
            arguments: Default::default(),
        };
        assert_eq!(
            calls.call(call).await,
            McpAnswer::Result(
                "saved shot.png\n[its pictures are not passed to a delegated task]".into()
            )
        );
    }

    /// A tool that runs until its call is stopped, then says so.
    #[derive(Debug)]
    struct UntilStopped(tokio::sync::mpsc::UnboundedSender<&'static str>);

    impl Tool for UntilStopped {
        fn name(&self) -> &str {
            "mcp__a__slow"
        }
        fn description(&self) -> &str {
            "d"
        }
        fn parameters(&self) -> Value {
            json!({"type": "object"})
        }
        fn call<'a>(&'a self, _: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
            Box::pin(async move {
                let _ = self.0.send("started");
                ctx.cancel.cancelled().await;
                let _ = self.0.send("stopped");
                Err(nexbot_agent::tools::ToolError::new("the call was stopped"))
            })
        }
    }

    #[tokio::test]
    async fn a_call_the_task_stops_waiting_for_is_stopped_not_left_running() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let granted: Vec<Arc<dyn Tool>> = vec![Arc::new(UntilStopped(tx))];
        let calls = GrantedCalls::new("t1", granted, ToolContext::for_tests());
        let call = McpCall {
            task_id: "t1".into(),
            call_id: "c1".into(),
            tool: "mcp__a__slow".into(),
            arguments: Default::default(),
        };
        let answer = calls.call(call);
        assert_eq!(rx.recv().await, Some("started"));
        drop(answer); // the task ended, or its delegation was cancelled
        assert_eq!(rx.recv().await, Some("stopped"), "the call saw its stop");
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_chats_mcp_tools_are_granted_and_the_rest_left_to_the_subagent_check() {
        let offered: Vec<Arc<dyn Tool>> =
            vec![Arc::new(Named("mcp__a__echo")), Arc::new(Named("mcp__a__sum"))];
        let asked = names(&["web_fetch", "mcp__a__echo", "fetch_url", "mcp__a__echo", "spawn"]);
        let Split { own, granted } = split(&asked, &offered).unwrap();
        assert_eq!(own, ["web_fetch", "fetch_url", "spawn"]);
        assert_eq!(granted.iter().map(|t| t.name()).collect::<Vec<_>>(), ["mcp__a__echo"]);
        let err = split(&names(&["mcp__b__secret", "mcp__a__sum"]), &offered).unwrap_err();
        assert_eq!(
            err.message(),
            "mcp__b__secret is not an MCP tool this chat may use, so it cannot be granted; this \
             chat's MCP tools are mcp__a__echo, mcp__a__sum; nothing was run"
        );
        let err = split(&names(&["mcp__b__x", "mcp__b__y"]), &[]).unwrap_err();
        assert!(err.message().starts_with("mcp__b__x, mcp__b__y are not an MCP tool"), "{err}");
        assert!(err.message().contains("this chat may use no MCP tool"), "{err}");
    }

    #[tokio::test]
    async fn only_granted_tools_are_called_for_the_task_that_was_granted_them() {
        let granted: Vec<Arc<dyn Tool>> = vec![Arc::new(Named("mcp__a__echo"))];
        let calls = GrantedCalls::new("t1", granted, ToolContext::for_tests());
        let call = |task: &str, tool: &str| McpCall {
            task_id: task.into(),
            call_id: "c1".into(),
            tool: tool.into(),
            arguments: json!({"m": 1}).as_object().unwrap().clone(),
        };
        let ok = calls.call(call("t1", "mcp__a__echo")).await;
        assert_eq!(ok, McpAnswer::Result(r#"mcp__a__echo got {"m":1}"#.into()));
        for (task, tool) in [("t1", "mcp__a__sum"), ("t2", "mcp__a__echo")] {
            let McpAnswer::Error(refused) = calls.call(call(task, tool)).await else {
                panic!("{task} {tool} was called")
            };
            assert!(refused.contains("was not granted to this task"), "{refused}");
        }
    }
}
