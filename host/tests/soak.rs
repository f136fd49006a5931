//! The soak run with faults (`nexbot_tests::soak`) against this build's `nexbot`: CI's short
//! form (3 minutes), or `make soak DURATION=… SEED=…` for longer. It runs in network and mount
//! namespaces of its own (it starts a Docker engine of its own, and mounts a tmpfs), so the
//! test re-runs itself there through `unshare`; it needs root.

use std::path::Path;

const NAME: &str = "a_soak_with_faults_loses_doubles_and_leaves_nothing";

#[test]
fn a_soak_with_faults_loses_doubles_and_leaves_nothing() {
    if std::env::var_os(nexbot_tests::engine::INSIDE).is_none() {
        if !rustix::process::geteuid().is_root() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the soak needs root under CI=true (it starts an engine and mounts a tmpfs)"
            );
            eprintln!("\n!!! SKIPPED the soak: it needs root !!!\n");
            return;
        }
        assert!(
            nexbot_tests::engine::in_own_namespaces(NAME, &[]),
            "the soak failed (its output is above)"
        );
        return;
    }
    let config = nexbot_tests::soak::SoakConfig::from_env(Path::new(env!("CARGO_BIN_EXE_nexbot")));
    let seed = config.seed;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let report = runtime.block_on(nexbot_tests::soak::run(config));
    assert!(
        report.problems.is_empty(),
        "the soak (seed {seed}; replay with `make soak SEED={seed}`) found:\n{}",
        report.problems.join("\n")
    );
}
