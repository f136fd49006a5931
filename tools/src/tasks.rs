//! The `manage_tasks` tool: a todo list per session, kept in SQLite so it survives restarts
//! and starts empty with `/new`.

use serde::Deserialize;
use serde_json::{json, Value};

use nexbot_agent::tools::{success, ToolContext, ToolError, ToolResult, TypedTool};
use nexbot_store::Store;

#[derive(Debug)]
pub struct ManageTasks {
    store: Store,
}

impl ManageTasks {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase", tag = "action")]
pub enum Args {
    List,
    Add { text: String },
    Complete { id: i64 },
    Remove { id: i64 },
    Clear,
}

impl TypedTool for ManageTasks {
    type Args = Args;
    const NAME: &'static str = "manage_tasks";
    // Its answer is the turn's own todo list, nothing from outside the chat.
    const READS_OUTSIDE: bool = false;
    const DESCRIPTION: &'static str =
        "The todo list of this conversation. action=list|add (text)|complete (id)|remove (id)|clear.";
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["list", "add", "complete", "remove", "clear"]},
            "text": {"type": "string"}, "id": {"type": "integer"}}, "required": ["action"]})
    }
    async fn run(&self, args: Args, ctx: &ToolContext) -> ToolResult {
        let session = ctx.session_id;
        let store_error = |e: nexbot_store::StoreError| ToolError::new(e.to_string());
        let missing = |id| ToolError::new(format!("no todo with id {id}"));
        match args {
            Args::Add { text } if text.trim().is_empty() => Err(ToolError::new("text is empty")),
            Args::Add { text } => {
                let id = self.store.add_todo(session, text.trim()).await.map_err(store_error)?;
                Ok(success(json!({"id": id})))
            }
            Args::List => {
                let todos = self.store.todos(session).await.map_err(store_error)?;
                let list: Vec<Value> = todos
                    .into_iter()
                    .map(|t| json!({"id": t.id, "text": t.text, "done": t.done}))
                    .collect();
                Ok(success(list))
            }
            Args::Complete { id } => match self.store.complete_todo(session, id).await {
                Ok(true) => Ok(success(format!("todo {id} done"))),
                Ok(false) => Err(missing(id)),
                Err(e) => Err(store_error(e)),
            },
            Args::Remove { id } => match self.store.remove_todo(session, id).await {
                Ok(true) => Ok(success(format!("todo {id} removed"))),
                Ok(false) => Err(missing(id)),
                Err(e) => Err(store_error(e)),
            },
            Args::Clear => {
                let n = self.store.clear_todos(session).await.map_err(store_error)?;
                Ok(success(format!("{n} todo(s) removed")))
            }
        }
    }
}
