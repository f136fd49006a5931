#!/bin/sh
# `make test-run` / `make lint-test-run`: every test binary of `cargo test --workspace`, run as
# cargo runs them (each in its package's folder, RUST_TEST_THREADS from the environment), but
# not all one after another: the host's end-to-end suite, the longest (~107 s), runs while the
# light ones do (the unit tests; the ctl, LLM, egress and subagent suites: ~35 s together, few
# containers); the Docker suite (`nexbot-tests`) runs after it. All three at once measured no
# faster (165 and 169 s against 166-168 s this way, 2026-11-27: the two cores are busy either
# way) and loads the engine twice as hard. (Side by side the two suites once made a pool
# container die during its first ping; the cause was the Docker suite's clean-up of dead runs,
# which took the `service-reap` test's live pool for a dead run of the `service` test, whose
# name begins it: fixed in `pool_common::process_of_run`, and clean side by side 4 times of 4.)
#
#   tests/run-suites.sh
#       Builds nothing: the binaries come from `cargo test --workspace --no-run` (a no-op after
#       `make test-build` / `make lint-build`, with the same environment). Exits 1 when a test
#       binary failed (after running all of them), 0 when all passed.
#
# Why not `cargo test -p …` per group: cargo resolves dependencies' features for the packages
# selected, so a group builds some dependencies again with other features (31 crates for the
# host suite alone here), which costs more than running the groups at once saves.
set -u
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cargo test --workspace --no-run --message-format=json > "$work/artifacts" || {
  echo "run-suites: cargo test --no-run failed" >&2
  exit 1
}
# One line per test binary (built in test mode: its profile says `"test":true`; the others are
# the programs the tests start): its package's folder, then the binary.
grep -F '"test":true},"features"' "$work/artifacts" |
  sed -n 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*"executable":"\([^"]*\)".*/\1 \2/p' \
    > "$work/binaries"
[ -s "$work/binaries" ] || { echo "run-suites: no test binaries found" >&2; exit 1; }
root=$(pwd)
# The two Docker-heavy suites: `host/tests/suite` and `tests/tests/suite`.
host_suite=$(grep "^$root/host .*/deps/suite-" "$work/binaries" || true)
# The soak run (host/tests/soak.rs: 3 minutes of chats and faults on an engine of its own):
# it mostly waits, so it runs beside everything else, from the end of the light binaries
# (not from the start, when the host suite's first tests start their daemons and browsers:
# two CI runs failed tests of that rush; the soak still ends well before the suites do).
soak=$(grep "^$root/host .*/deps/soak-" "$work/binaries" || true)
docker_suite=$(grep "^$root/tests .*/deps/suite-" "$work/binaries" || true)
[ -n "$host_suite" ] && [ -n "$docker_suite" ] && [ -n "$soak" ] || {
  echo "run-suites: the host suite, the Docker suite or the soak is not among the test binaries" >&2
  exit 1
}

failed=
# logged NAME DIR COMMAND...: COMMAND run in DIR, its output shown and also kept
# ($work/logs), so that the end can say again why a test failed (CI shows only the run's last
# lines, and a failure's own lines are minutes above them); NAME is counted when it fails.
mkdir "$work/logs"
logged() {
  name=$1 dir=$2
  shift 2
  log="$work/logs/$(basename "$name").$(ls "$work/logs" | wc -l)"
  { (cd "$dir" && "$@" < /dev/null) || : > "$log.failed"; } 2>&1 | tee "$log"
  [ -e "$log.failed" ] && failed="$failed $name"
  return 0
}
# run DIR BINARY: one test binary, as cargo runs it.
run() {
  echo "     Running $2"
  logged "$2" "$1" "$2"
}

# The host suite with its own count of tests at once (HOST_SUITE_THREADS, the Makefile says why).
(cd "${host_suite% *}" && RUST_TEST_THREADS="${HOST_SUITE_THREADS:-${RUST_TEST_THREADS:-4}}" \
  "${host_suite#* }" < /dev/null) > "$work/host-suite.log" 2>&1 &
host_pid=$!
grep -v -e "^$host_suite\$" -e "^$docker_suite\$" -e "^$soak\$" "$work/binaries" > "$work/others"
# The light ones run one by one in this list's order: the tree's and the documentation's checks first
# (`tests/tests/tidy.rs`, `tests/tests/docs.rs`): they need no Docker and take about a second,
# so a stale ARCHITECTURE.md, a doubled type name or a broken link shows within seconds of the
# start, not after the minutes the other suites take.
{ grep "^$root/tests .*/deps/tidy-" "$work/others"; grep "^$root/tests .*/deps/docs-" "$work/others"; } > "$work/first"
{ cat "$work/first"; grep -v -x -F -f "$work/first" "$work/others"; } > "$work/light"
while read -r dir binary; do run "$dir" "$binary"; done < "$work/light"
(cd "${soak% *}" && "${soak#* }" < /dev/null) > "$work/soak.log" 2>&1 &
soak_pid=$!
echo "     Running ${host_suite#* } (beside the above)"
wait "$host_pid" || failed="$failed ${host_suite#* }"
cat "$work/host-suite.log"
# The gVisor leg: the pool's isolation suites again, the same test code, with every container
# under `runsc` (NEXBOT_TEST_RUNTIME; docker/register-runsc.sh registers it). Where gVisor
# differs the tests say so and check what holds instead (docs/runtimes.md). Left out: the
# Podman test (it starts an engine of its own). The daemon's part runs beside the Docker
# suite (both mostly wait on containers: 140 s and 79 s alone, 2026-12-02), the pool's part
# after it.
gvisor=
if docker/register-runsc.sh --check; then
  gvisor=yes
  # The daemon end to end under runsc: egress from inside a container (only the proxy and
  # the relay), DNS only after an allow, two chats never sharing a container, the rooms, the
  # wall named in ps/health/status/metrics, doctor's probe and a missing runtime refused,
  # the MCP servers' containers (the whole MCP suite), approvals, and the secrets hunt (gVisor's memory file read
  # from the host).
  echo "     Running ${host_suite#* } under runsc (the gVisor leg, beside the next)"
  (cd "${host_suite% *}" && NEXBOT_TEST_RUNTIME=runsc "${host_suite#* }" \
    egress_docker:: egress_dns:: egress_pool:: rooms:: host_delegation::two_chats \
    control::subagents_ps host_cli::doctor_probes mcp_grants:: mcp_room_owner:: \
    host_approvals:: host_secrets:: mcp:: < /dev/null) > "$work/gvisor-host.log" 2>&1 &
  gvisor_host_pid=$!
fi
run "${docker_suite% *}" "${docker_suite#* }"
# The remote leg: the pool's rooms, clean-room and isolation suites again, the same test code,
# with every pool on an engine on "another machine" (a `dockerd` in a network namespace,
# mutual TLS: NEXBOT_TEST_ENGINE=remote, tests/src/remote.rs), beside the gVisor leg (its
# own engine). Left out: the one test there that runs its container with the local CLI.
remote=
if [ "$(id -u)" = 0 ]; then
  echo "     Running ${docker_suite#* } against a remote engine (the remote leg, beside the next)"
  (cd "${docker_suite% *}" && NEXBOT_TEST_ENGINE=remote "${docker_suite#* }" \
    pool_rooms:: pool_clean_room:: pool_clean_room_attacks:: pool_isolation::pool_containers \
    --skip docker_stop_still < /dev/null) > "$work/remote.log" 2>&1 &
  remote=$!
elif [ "${CI:-}" = true ]; then
  echo "run-suites: the remote leg makes a network namespace, which needs root" >&2
  failed="$failed remote-leg"
else
  echo "!!! SKIPPED the remote leg: making a network namespace needs root !!!"
fi
if [ -n "$gvisor" ]; then
  echo "     Running ${docker_suite#* } under runsc (the gVisor leg)"
  logged gvisor-leg "${docker_suite% *}" env NEXBOT_TEST_RUNTIME=runsc "${docker_suite#* }" \
    pool_lifecycle:: pool_tasks:: pool_rooms:: pool_files:: pool_clean_room:: \
    pool_clean_room_attacks:: pool_service:: \
    pool_isolation::pool_containers pool_isolation::a_pool_network pool_network:: \
    pool_ownership:: pool_recycling:: pool_mcp_calls:: pool_limits:: pool_hardening:: \
    pool_operator:: pool_recovery::
  echo "     Running ${host_suite#* } under runsc (beside the above)"
  wait "$gvisor_host_pid" || failed="$failed gvisor-leg-host"
  cat "$work/gvisor-host.log"
elif [ "${CI:-}" = true ]; then
  echo "run-suites: the engine has no runsc for the gVisor leg (docker/register-runsc.sh)" >&2
  failed="$failed gvisor-leg"
else
  echo "!!! SKIPPED the gVisor leg: the engine has no runsc (apt-get install runsc; docker/register-runsc.sh) !!!"
fi
if [ -n "$remote" ]; then
  wait "$remote" || failed="$failed remote-leg"
  cat "$work/remote.log"
fi
# The pool bench's short form (tests/benches/pool.rs, NEXBOT_BENCH_SHORT): the warm path
# against the floor of the same run, printed (the figures of a debug build on a busy machine:
# a trend, not the release figures of `make bench`); it fails only if the bench cannot run.
cargo test --workspace --benches --no-run --message-format=json > "$work/benches" || {
  echo "run-suites: cargo test --benches --no-run failed" >&2
  exit 1
}
bench=$(sed -n 's/.*"executable":"\([^"]*\/deps\/pool-[^"]*\)".*/\1/p' "$work/benches" | head -n 1)
if [ -n "$bench" ]; then
  echo "     Running $bench (the pool bench's short form)"
  (cd tests && NEXBOT_BENCH_SHORT=1 "$bench" < /dev/null) || failed="$failed pool-bench-short"
else
  echo "run-suites: the pool bench is not among the built benches" >&2
  failed="$failed pool-bench-short"
fi
echo "     Running ${soak#* } (beside the above)"
wait "$soak_pid" || failed="$failed ${soak#* }"
cat "$work/soak.log"

if [ -n "$failed" ]; then
  echo "run-suites: why, again (each failed test's panic, from every log of the run):"
  # Why, again: every failed test's own output (libtest's "failures:" block, up to its list
  # of names), from every log of the run.
  for log in "$work"/logs/* "$work"/*.log; do
    case "$log" in *.failed) continue ;; esac
    [ -f "$log" ] || continue
    # Each failed test's name, then its panic and up to 30 lines after it, not its backtrace
    # (cut to 300 characters each: an assertion may print a whole daemon log).
    awk '/^failures:$/ { n++ } n == 1 && /^---- / { print; left = 0 }
         n == 1 && /^stack backtrace:/ { left = 0 }
         n == 1 && /panicked at/ { left = 31 }
         n == 1 && left > 0 { print substr($0, 1, 300); left-- }' "$log"
  done
  echo "run-suites: failed:$failed" >&2
  exit 1
fi
echo "run-suites: all $(wc -l < "$work/binaries") test binaries passed"
