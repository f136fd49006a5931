//! The egress listener over real sockets, one test binary: the forward proxy, the LLM
//! relay, and the hunt for the provider key in everything the listener emits.
//!
//! Every file here is a module of this one harness (`cargo test -p nexbot-egress --test suite`),
//! so the crate is linked once; helpers shared by several files are modules too.

mod egress_approval;
mod egress_attribution;
mod egress_audit;
mod egress_decoys;
mod egress_doors;
mod egress_host;
mod egress_proxy;
mod egress_relay;
mod egress_relay_chain;
mod egress_secret_hunt;
mod egress_secrets;
mod egress_tasks;
