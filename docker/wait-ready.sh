#!/bin/sh
# Waits until the compose service's daemon says it is serving, for `make up`.
#
# Why the log line: `nexbot serve` logs "nexbot is serving" only after the store is open and
# the whole warm pool answered its first ping, and the image has no shell for a healthcheck.
# Only the log since the container's current start counts, so an earlier run cannot fake it;
# a container that stops, restarts or crash-loops meanwhile fails the wait at once, with its log.
#
# Usage: docker/wait-ready.sh "COMPOSE COMMAND" SERVICE TIMEOUT_SECS
set -eu

compose=$1
service=$2
timeout=$3

cid=$($compose ps -q "$service")
if [ -z "$cid" ]; then
  echo "make up: compose has no container for the service '$service'" >&2
  exit 1
fi

fail() {
  echo "make up: $1; its last log lines:" >&2
  docker logs --tail 40 "$cid" >&2 2>&1 || true
  exit 1
}

started=$(docker inspect -f '{{.State.StartedAt}}' "$cid")
deadline=$(( $(date +%s) + timeout ))
while :; do
  state=$(docker inspect -f '{{.State.Status}} {{.State.StartedAt}}' "$cid") ||
    fail "the container $cid disappeared"
  status=${state%% *}
  [ "$status" = running ] || fail "the host container is $status"
  [ "${state#* }" = "$started" ] || fail "the host container restarted"
  if docker logs --since "$started" "$cid" 2>&1 | grep -q 'nexbot is serving'; then
    break
  fi
  [ "$(date +%s)" -lt "$deadline" ] || fail "the host did not report ready within ${timeout}s"
  sleep 1
done

pool=$(docker ps -q --filter "label=nexbot.pool=${NEXBOT_POOL_NAME:-nexbot}" | wc -l)
echo "nexbot is up: host container ${cid%"${cid#????????????}"} serving, $pool subagent container(s) warm"
