#!/bin/sh
# What `make up` checks before it builds or starts anything.
#
#   docker/preflight.sh tools COMPOSE BUSYBOX
#       Every program the build and the deployment need, each missing one named with the command
#       that installs it; exits 2 when one is missing (nothing was built or started then).
#   docker/preflight.sh env COMPOSE_FILE ENV_FILE
#       Each NEXBOT_* setting with a value in ENV_FILE (compose's `.env`) that COMPOSE_FILE does
#       not pass to the daemon, said on stderr; exits 0 (the rest of the settings still apply).
#   docker/preflight.sh busybox BUSYBOX
#       Whether BUSYBOX is a statically linked busybox (the subagent image's shell).
set -u

# static_busybox PATH: true when PATH is a statically linked busybox.
static_busybox() {
  [ -x "$1" ] || return 1
  file -L "$1" 2>/dev/null | grep -q 'statically linked' && return 0
  ldd "$1" 2>&1 | grep -q 'not a dynamic'
}

tools() {
  compose=$1
  busybox=$2
  missing=""
  packages=""
  need() { # need WHAT PACKAGE: records a missing program and the Debian package holding it
    missing="$missing
  - $1"
    [ -z "$2" ] || packages="$packages $2"
  }
  if ! command -v docker >/dev/null 2>&1; then
    need "Docker (the docker client and engine): apt-get install docker.io" docker.io
  elif ! info=$(docker info 2>&1 >/dev/null); then
    if printf '%s' "$info" | grep -qi 'permission denied'; then
      need "access to the Docker engine: this user may not use /var/run/docker.sock; run as \
root, or: usermod -aG docker \"\$USER\" (then log in again)" ""
    else
      need "a running Docker engine: docker is installed but the engine does not answer on \
${DOCKER_HOST:-/var/run/docker.sock}; start it (systemctl start docker, or: setsid nohup dockerd >dockerd.log 2>&1 &)" ""
    fi
  fi
  # shellcheck disable=SC2086 # COMPOSE is a command with its arguments ("docker compose").
  if ! $compose version >/dev/null 2>&1; then
    need "docker-compose ('$compose version' does not run): apt-get install docker-compose" \
      docker-compose
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    need "a Rust toolchain (cargo, Rust 1.85 or later): curl --proto '=https' --tlsv1.2 -sSf \
https://sh.rustup.rs | sh   (then open a new shell, or: . \$HOME/.cargo/env)" ""
  fi
  if ! command -v cc >/dev/null 2>&1 || [ ! -e /usr/lib/x86_64-linux-gnu/libc.a ]; then
    need "a C linker and glibc's static libraries (the images' binaries are static): \
apt-get install gcc libc6-dev" "gcc libc6-dev"
  fi
  if ! static_busybox "$busybox"; then
    need "a static busybox at $busybox (the sandbox's shell): apt-get install busybox-static" \
      busybox-static
  fi
  # Where docker/stage-host-image.sh takes it from.
  if ! command -v iptables >/dev/null 2>&1 && [ ! -x /usr/sbin/iptables ]; then
    need "iptables (the host image carries this machine's, for the egress firewall): \
apt-get install iptables" iptables
  fi
  [ -z "$missing" ] && return 0
  echo "make up: missing on this machine, so nothing was built or started:$missing" >&2
  if [ -n "$packages" ]; then
    echo "as root: apt-get update && apt-get install -y$packages" >&2
  fi
  echo "then run 'make up' again" >&2
  return 2
}

env_check() {
  compose_file=$1
  env_file=$2
  [ -f "$env_file" ] || return 0
  # .env holds the model's key, the bot's token and the vault's master key.
  mode=$(stat -c %a "$env_file")
  case $mode in
    *0) ;;
    *) echo "make up: $(basename "$env_file") can be read by every user of this machine \
(mode $mode) and holds your keys: chmod 600 $env_file" >&2 ;;
  esac
  # The variables compose.yaml reads: `${NAME:-}` on the right of its environment entries.
  passed=$(grep -o '\${NEXBOT_[A-Za-z0-9_]*' "$compose_file" | cut -c3- | sort -u)
  # Settings with a value (an empty one means unset), comments and blank lines skipped.
  sed -n 's/^[[:space:]]*\(NEXBOT_[A-Za-z0-9_]*\)[[:space:]]*=[[:space:]]*\([^[:space:]].*\)$/\1/p' \
    "$env_file" | sort -u | while read -r name; do
    if ! printf '%s\n' "$passed" | grep -qx "$name"; then
      # The daemon's own name of a setting compose passes under a short one.
      alias=$(sed -n "s/^[[:space:]]*- $name=\${\(NEXBOT_[A-Za-z0-9_]*\).*/\1/p" "$compose_file" \
        | head -n 1)
      hint=""
      [ -z "$alias" ] || hint=" (compose passes it from $alias: write that name in $(basename "$env_file"))"
      echo "make up: $name in $(basename "$env_file") is not passed to the daemon; set it in \
config.toml or add it to compose.yaml$hint" >&2
    fi
  done
  return 0
}

case "${1:-}" in
  tools) tools "$2" "$3" ;;
  env) env_check "$2" "$3" ;;
  busybox) static_busybox "$2" || {
    echo "make image: $2 is not a static busybox; apt-get install busybox-static" >&2
    exit 2
  } ;;
  *) echo "usage: $0 tools COMPOSE BUSYBOX | env COMPOSE_FILE ENV_FILE | busybox BUSYBOX" >&2; exit 2 ;;
esac
