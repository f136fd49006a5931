#!/bin/sh
# Waits until the compose service is healthy, for `make up`, then says what is degraded.
#
# Healthy is the service's own healthcheck (`nexbot-ctl health`: store open, pool warm). A
# container that stops, restarts or turns unhealthy meanwhile fails the wait at once, with its
# log. Once healthy, `nexbot-ctl health` lists what works less than it could (no model key, the
# model unreachable, no Telegram token, delegation off): `make up` says "up, degraded" then.
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

# The log of the container's last run only: in a crash loop, earlier runs' errors printed
# above the current one were read first. A run's first lines can be stamped a few
# microseconds before its StartedAt, and the engine waits at least 100 ms before a restart:
# the log from 50 ms before the last start is that run's whole. A run that starts while the
# log is read would add its lines: the start is read again after the log, and the log read
# again if it moved.
fail() {
  echo "make up: $1; the log of its last run:" >&2
  log=
  for _ in 1 2 3 4 5; do
    since=
    started_at=$(docker inspect -f '{{.State.StartedAt}}' "$cid" 2>/dev/null) &&
      ns=$(date -d "$started_at" +%s%N 2>/dev/null) &&
      ns=$((ns - 50000000)) &&
      since=$(printf '%d.%09d' $((ns / 1000000000)) $((ns % 1000000000))) || since=
    if [ -z "$since" ]; then
      log=$(docker logs --tail 40 "$cid" 2>&1 || true)
      break
    fi
    log=$(docker logs --since "$since" --tail 40 "$cid" 2>&1 || true)
    [ "$(docker inspect -f '{{.State.StartedAt}}' "$cid" 2>/dev/null)" = "$started_at" ] && break
  done
  printf '%s\n' "$log" >&2
  exit 1
}

started=$(docker inspect -f '{{.State.StartedAt}}' "$cid")
deadline=$(( $(date +%s) + timeout ))
while :; do
  state=$(docker inspect -f '{{.State.Status}} {{.State.StartedAt}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$cid") ||
    fail "the container $cid disappeared"
  set -- $state
  [ "$1" = running ] || fail "the host container is $1"
  [ "$2" = "$started" ] || fail "the host container restarted"
  case "$3" in
    healthy) break ;;
    unhealthy) fail "the host container is unhealthy" ;;
    none) fail "the host container has no health check (an older image? run make image)" ;;
  esac
  [ "$(date +%s)" -lt "$deadline" ] || fail "the host did not become healthy within ${timeout}s"
  sleep 1
done

report=$(docker exec "$cid" /bin/nexbot-ctl health 2>&1 || true)
if echo "$report" | grep -q 'degraded:'; then
  echo "nexbot is up, DEGRADED:"
  echo "$report" | grep 'degraded:' | sed 's/^ *degraded: /  - /'
else
  echo "nexbot is up"
fi
