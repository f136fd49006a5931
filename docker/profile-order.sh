#!/bin/sh
# Writes docker/nexbot.order and docker/nexbot-subagent.order (`make order-file`): which
# functions the daemon and the sandbox's program run, in the order the images' binaries should
# hold them (docker/link-order.sh).
#
#   docker/profile-order.sh OUT BIN VAR BENCH...
#       Runs each BENCH (a bench's executable, which runs the binary the environment variable
#       VAR names: NEXBOT_BENCH_DAEMON, NEXBOT_BENCH_SUBAGENT) with BIN, unstripped, under
#       valgrind's callgrind, which records every function that ran. Writes OUT: the functions
#       the first BENCH ran, by their address in BIN, then those each next BENCH added, so that
#       what every start runs comes first; each named by its symbol without LLVM's `.llvm.N`
#       suffix (see docker/link-order.sh).
#
# Why callgrind: it sees every function that runs once (sampling would miss the start-up's
# many run-once functions, which are what costs resident pages). It runs the daemon about
# 20 times slower; the benches' limits allow it.
set -eu

[ $# -ge 4 ] || { echo "usage: $0 OUT BIN VAR BENCH..." >&2; exit 2; }
out=$1 bin=$2 var=$3
shift 3
command -v valgrind >/dev/null 2>&1 || {
  echo "$0: valgrind is not installed (apt-get install valgrind)" >&2
  exit 2
}
nm --defined-only "$bin" | grep -q ' main$' || {
  echo "$0: $bin has no symbols (the image profile keeps them: build it with make image-bins)" >&2
  exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

phase=0
for bench in "$@"; do
  phase=$((phase + 1))
  mkdir "$work/$phase"
  printf '%s\n' '#!/bin/sh' \
    "exec valgrind -q --tool=callgrind --dump-instr=no --demangle=no \\" \
    "  --callgrind-out-file=$work/$phase/cg.%p '$bin' \"\$@\"" > "$work/$phase/nexbot"
  chmod +x "$work/$phase/nexbot"
  echo "profile-order: $bench under callgrind"
  env "$var=$work/$phase/nexbot" "$bench" > "$work/$phase.log" 2>&1 || {
    echo "$0: $bench failed:" >&2
    tail -n 40 "$work/$phase.log" >&2
    exit 1
  }
  # Every function callgrind names (`fn=(id) name` where it first appears, `cfn=` for a
  # callee), without its `'N` recursion mark.
  sed -n "s/^c\{0,1\}fn=([0-9]*) //p" "$work/$phase"/cg.* | sed "s/'[0-9]*\$//" | sort -u \
    > "$work/$phase.fns"
done

{
  echo "# The functions \`$(basename "$bin")\` runs, in the order the images' binaries hold them"
  echo "# (docs/performance.md, \"Host idle RSS\"). Written by \`make order-file\` (docker/profile-order.sh) on $(date -u +%F)"
  echo "# from the benches: $(for b in "$@"; do basename "$b" | sed 's/-[0-9a-f]*$//'; done | tr '\n' ' ')"
  nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ { print $1, $3 }' > "$work/nm"
  i=0
  while [ "$i" -lt "$phase" ]; do
    i=$((i + 1))
    # This phase's functions that no earlier phase ran, by address.
    awk -v fns="$work/$i.fns" -v seen="$work/seen" '
      BEGIN {
        while ((getline l < fns) > 0) want[l] = 1
        while ((getline l < seen) > 0) done[l] = 1
      }
      ($2 in want) && !($2 in done) { print }' "$work/nm" | sort > "$work/$i.by-address"
    cut -d' ' -f2 "$work/$i.by-address" >> "$work/seen"
    cut -d' ' -f2 "$work/$i.by-address"
  done | awk '
    { k = $0; sub(/\.llvm\.[0-9]+$/, "", k) }
    !(k in done) { done[k] = 1; print k }'
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "profile-order: $out: $(grep -vc '^#' "$out") functions"
