//! `nexbot-llm`: the one client for OpenAI-compatible chat completions, used by the host's
//! main agent, the subagent inside every container, and the egress relay.
//!
//! Why one crate: providers differ in small ways (`null` where a list was expected, usage
//! missing, `Retry-After` as a date, a 429 that means "no credit left"), and every copy of the
//! wire types learned a different subset of them. Here they are learned once:
//!
//! - [`wire`]: messages, tool calls, tool specs, request bodies and completions — lenient in
//!   what they accept (absent, `null` or empty fields, extra fields, unknown finish reasons).
//! - [`stream`]: server-sent events decoded and accumulated into a completion; a stream that
//!   ends without its end marker is an error, never half an answer.
//! - [`error`]: errors classified from the raw status and body before any text is made of them.
//! - [`retry`]: capped exponential back-off with jitter, `Retry-After` in both forms.
//! - [`provider`] / [`chain`]: one endpoint, and the ordered list of them with per-provider
//!   circuit breakers and fallback.
//! - [`budget`]: reservation before a call, settlement after, so concurrent calls cannot all
//!   pass a cap.
//! - [`context`]: fitting a conversation into a model's context window.
//! - [`transcribe`]: speech to text over `/audio/transcriptions`, by the same provider code.
//! - [`speech`]: text to speech over `/audio/speech` (a chat's voice answers), the same way.
//! - [`usage`]: token accounting read off a response as it streams past (the relay).
//!
//! Nothing else in the workspace parses provider JSON.

pub mod budget;
pub mod chain;
pub mod context;
pub mod embeddings;
pub mod error;
pub mod provider;
pub mod retry;
pub mod speech;
pub mod stream;
pub mod transcribe;
pub mod usage;
pub mod wire;

pub use budget::{Allowance, Exceeded, Hold, TaskCost};
pub use chain::{CallOutcome, Chain, ChainStats, RetryPolicy, StreamEvent};
pub use embeddings::{cosine, Embedder, EmbeddingsSpec};
pub use error::{classify, parse_retry_after, ErrorClass, LlmError};
pub use provider::{Provider, ProviderSpec};
pub use speech::{Speaker, SpeechSpec};
pub use transcribe::{Transcriber, TranscriptionSpec};
pub use wire::{
    ChatMessage, ChatRequest, Completion, FunctionCall, FunctionSpec, Image, ToolCall, ToolSpec,
    Usage,
};
