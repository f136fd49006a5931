#!/bin/sh
# Usage: docker/reap-leftovers.sh POOL NETWORK
#
# `make down`'s last step: removes what a nexbot daemon that is gone left behind of pool POOL
# and network NETWORK — its pool containers (label nexbot.pool=POOL), the egress firewall rules
# on the network's bridge, and the network — and nothing that belongs to a daemon still
# running. Ownership is read from the nexbot.owner* labels, with the rules of
# docker/src/owner.rs:
#   another boot of the host                       -> gone
#   the same pid namespace as this shell           -> alive iff /proc/PID has the recorded start time
#   ran in a container (nexbot.owner.container)    -> alive iff that container is running
#   otherwise                                      -> alive iff one of its containers is running
# A container without owner labels (an older nexbot) is removed once it has stopped.
# Exits 1 when something of the pool remains.
set -u
pool=$1
network=$2
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || true)
pidns=$(readlink /proc/self/ns/pid 2>/dev/null | tr -dc 0-9)

# owner_alive INSTANCE PID START BOOT PIDNS CONTAINER ("-" for a missing label)
owner_alive() {
  [ "$4" = "-" ] || [ -z "$boot" ] || [ "$4" = "$boot" ] || return 1
  if [ "$5" = "$pidns" ]; then
    [ -r "/proc/$2/stat" ] || return 1
    [ "$(sed 's/.*) //' "/proc/$2/stat" | cut -d' ' -f20)" = "$3" ]
    return
  fi
  if [ "$6" != "-" ]; then
    [ "$(docker inspect -f '{{.State.Running}}' "$6" 2>/dev/null)" = true ]
    return
  fi
  [ -n "$(docker ps -q --filter "label=nexbot.owner=$1" --filter status=running)" ]
}

# A docker inspect template printing the owner labels of the map LABELS, "-" for a missing one.
owner_template() {
  out=
  for key in nexbot.owner nexbot.owner.pid nexbot.owner.start nexbot.owner.boot \
    nexbot.owner.pidns nexbot.owner.container; do
    out="$out{{or (index $1 \"$key\") \"-\"}} "
  done
  echo "$out"
}

kept=
for id in $(docker ps -aq --filter "label=nexbot.pool=$pool"); do
  fields=$(docker inspect -f "$(owner_template .Config.Labels){{.State.Running}}" "$id" 2>/dev/null) ||
    continue
  set -- $fields
  if [ "$1" = "-" ]; then
    [ "$7" = true ] && { kept="$kept $id"; echo "keeping running container $id of an older nexbot (no owner labels)"; continue; }
  elif owner_alive "$@"; then
    kept="$kept $id"; echo "keeping container $id: its daemon (pid $2) is still running"; continue
  fi
  docker rm -f "$id" >/dev/null && echo "removed leftover pool container $id"
done

fields=$(docker network inspect -f "$(owner_template .Labels){{index .Labels \"nexbot.network\"}}" \
  "$network" 2>/dev/null)
if [ -n "$fields" ]; then
  set -- $fields
  if [ "${7:-}" = "" ]; then
    echo "network $network was not made by nexbot; left alone"
  elif [ "$1" != "-" ] && owner_alive "$@"; then
    echo "keeping network $network: its daemon (pid $2) is still running"
  else
    bridge=br-$(docker network inspect "$network" --format '{{.Id}}' | cut -c1-12)
    iptables -S INPUT 2>/dev/null | grep -e "-i $bridge " | grep -e '--comment nexbot-egress' |
      sed 's/^-A /-D /' | while read -r rule; do
        iptables -w 5 $rule && echo "removed firewall rule: $rule"; done
    docker network rm "$network" >/dev/null && echo "removed network $network"
  fi
fi

[ -z "$(docker ps -aq --filter "label=nexbot.pool=$pool")" ] || {
  echo "make down: pool containers remain:$kept" >&2; exit 1; }
