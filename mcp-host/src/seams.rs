//! What the servers need from the rest of the daemon, as the two small traits the host
//! implements at the wiring. Why traits here and not the host's own: the questions belong to
//! delegation and the secrets to the vault, which this crate must not reach (it runs servers;
//! it neither delegates nor holds a key). A server asks for no more than it uses: that its
//! chat be asked before it reaches something new, and the operator's secrets its remote
//! headers name.

use nexbot_core::ChatRef;
use nexbot_egress::Binding;
use secrecy::SecretString;

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
/// (a server is the daemon's, not a chat's). The host hands the vault in through it; this
/// crate names no vault type, so it reaches no key and no other value.
pub trait OperatorSecrets: Send + Sync + std::fmt::Debug {
    /// The operator's secret `name`; an unknown name's error lists the names that exist.
    fn resolve_operator(&self, name: &str) -> Result<OperatorSecret, String>;
}

/// One operator secret as a remote server's door needs it.
#[derive(Debug)]
pub struct OperatorSecret {
    pub value: SecretString,
    /// Where the value may be sent (the egress proxy honours it).
    pub hosts: Vec<Binding>,
    /// Bound so that only the proxy fills it in (the vault's proxy mode): the only kind a
    /// remote server may name.
    pub proxy: bool,
    /// Stored with `--confirm`: filled in only once the user allowed it.
    pub confirm: bool,
    /// Kept while the instance runs: the value stays in the exit scan until then, even if it
    /// is changed or deleted meanwhile (the vault's hold).
    pub hold: Box<dyn std::fmt::Debug + Send + Sync>,
}
