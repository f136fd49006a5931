#!/bin/sh
# Whether every IMAGE on the engine was built from KEY (its `nexbot.source` label, written by
# `make image` from docker/source-key.sh): exit 0 and say so, or exit 1 (build them). An empty
# KEY (uncommitted changes, no git) is never current.
#
# Usage: docker/images-current.sh KEY IMAGE...
set -eu
key=$1
shift
case "$key" in -* | "" ) exit 1 ;; esac
for image in "$@"; do
  label=$(docker image inspect -f '{{ index .Config.Labels "nexbot.source" }}' "$image" 2>/dev/null) || exit 1
  [ "$label" = "$key" ] || exit 1
done
echo "make up: $* are built from this commit's sources (${key%%-*}): not building them again"
