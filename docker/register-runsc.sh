#!/bin/sh
# Registers gVisor's `runsc` with the local Docker engine, for `sandbox.runtime = "runsc"`:
# adds it to /etc/docker/daemon.json's "runtimes" (keeping whatever else the file says) and
# reloads the engine with SIGHUP (running containers are not touched). Run as root; `.ci/run`
# runs it for the tests' gVisor leg. Idempotent.
#
#   docker/register-runsc.sh            # DOCKER_DAEMON_JSON names another file
#   docker/register-runsc.sh --check    # only whether the running engine lists runsc (exit 0/1)
#
# The arguments, measured on Debian 12's runsc (2022-12) under engine 20.10: gVisor's default
# network mode refuses a container on a bridge network ("cannot run with network enabled in
# root network namespace"), `--network=host` uses the namespace the engine made for the
# container (still the pool's internal network); `ptrace` is the platform that ran (`kvm` hung).
set -eu
# Whether the running engine lists runsc among its runtimes.
engine_has_runsc() {
  docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}' 2>/dev/null |
    grep -qw runsc
}
if [ "${1:-}" = --check ]; then
  engine_has_runsc
  exit
fi
conf=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
runsc=$(command -v runsc) || { echo "register-runsc: runsc is not installed (apt-get install runsc)" >&2; exit 1; }
mkdir -p "$(dirname "$conf")"
changed=$(python3 - "$conf" "$runsc" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
conf = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        conf = json.load(f)
want = {"path": runsc, "runtimeArgs": ["--platform=ptrace", "--network=host"]}
if conf.get("runtimes", {}).get("runsc") == want:
    print("no")
    sys.exit(0)
conf.setdefault("runtimes", {})["runsc"] = want
with open(path + ".tmp", "w") as f:
    json.dump(conf, f, indent=2)
os.replace(path + ".tmp", path)
print("yes")
PY
)
if [ "$changed" = yes ] && pid=$(pidof dockerd); then
  kill -HUP $pid
fi
# The engine lists it once the reload is done (a stopped engine reads the file when it starts).
if pidof dockerd >/dev/null; then
  for _ in $(seq 30); do
    engine_has_runsc && { echo "register-runsc: the engine has runsc ($conf)"; exit 0; }
    sleep 1
  done
  echo "register-runsc: the engine did not list runsc after the reload; see its log" >&2
  exit 1
fi
echo "register-runsc: $conf names runsc; the engine reads it when it starts"
