//! End-to-end tests across crates against the real Docker engine, one test binary: the
//! pool, the subagent image, the bundled skills, the compose deployment, the benches' cleanup,
//! the scripted LLM and the browser harness themselves.
//!
//! Every file here is a module of this one harness (`cargo test -p nexbot-tests --test suite`),
//! so the crate is linked once; helpers shared by several files are modules too.

mod pool_common;

mod bench_cleanup;
mod browser_harness;
mod bundled_skills;
mod compose_up;
mod docker_smoke;
mod egress_firewall_watch;
mod link_order;
mod make_up_preflight;
mod mcp_conformance;
mod pool_clean_room;
mod pool_clean_room_attacks;
mod pool_files;
mod pool_hardening;
mod pool_isolation;
mod pool_lifecycle;
mod pool_limits;
mod pool_mcp_calls;
mod pool_network;
mod pool_operator;
mod pool_ownership;
mod pool_recovery;
mod pool_recycling;
mod pool_rooms;
mod pool_service;
mod pool_tasks;
mod readme_setup;
mod remote_engine;
mod scripted_llm;
mod selftest_judges;
mod subagent_image;
mod telegram_fixture;
