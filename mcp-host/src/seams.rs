//! What the servers need from the rest of the daemon, as the two small traits the host
//! implements at the wiring. Why traits here and not the host's own: the questions and the
//! secrets belong to delegation and the vault's chat scope, which this crate must not reach
//! (it runs servers; it does not delegate). A server asks for no more than it uses: that its
//! chat be asked before it reaches something new, and the operator's secrets its remote
//! headers name.

use nexbot_core::ChatRef;
use nexbot_vault::{Resolved, SecretScope, Vault};

/// Asks a chat before its server reaches a new destination (`egress.mode = "ask"`): a chat's
/// server instance is, for the egress, a task of its chat under the instance's identity.
/// The host binds the approvals to it ([`crate::McpServers::set_questions`]).
pub trait ServerQuestions: Send + Sync + std::fmt::Debug {
    /// The instance `identity` of a chat-scoped server (`what`: "MCP server NAME") runs for
    /// `chat`: its new destinations are asked there (never unattended, no member but the
    /// owner).
    fn server_started(&self, identity: &str, chat: &ChatRef, what: &str);
    /// The instance ended: what it was allowed goes, its waiting questions expire.
    fn server_ended(&self, identity: &str);
}

/// Where a remote server's `{{secret:NAME}}` values come from: the operator's secrets only
/// (a server is the daemon's, not a chat's).
pub trait OperatorSecrets: Send + Sync + std::fmt::Debug {
    /// The operator's secret `name`; an unknown name's error lists the names that exist.
    fn resolve_operator(&self, name: &str) -> Result<Resolved, String>;
}

impl OperatorSecrets for Vault {
    fn resolve_operator(&self, name: &str) -> Result<Resolved, String> {
        Vault::resolve(self, &SecretScope::Operator, name).map_err(|e| e.to_string())
    }
}
