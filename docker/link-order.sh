#!/bin/sh
# The images' binaries are linked with their start-up code together (`make image-bins`).
#
#   docker/link-order.sh KEYS ORDER BIN...
#       Writes ORDER, the linker's symbol ordering file (lld's --symbol-ordering-file) for
#       BIN...: every function KEYS names, in KEYS' order, under each symbol name it has in
#       these binaries. Says how many of KEYS' functions the binaries have. When ORDER changed,
#       removes BIN... (and cargo's copies of them in deps/) so that the next `cargo build`
#       links them again with it; when it did not, leaves everything as it was.
#
# Why: the kernel maps a binary's code into memory in 64 KiB windows around each page touched
# (fault-around), so a daemon whose start-up touches a few thousand functions scattered over
# 31 MB of `.text` keeps most of `.text` resident. Placed together (first in `.text`), the same
# functions cost about their own size (docs/performance.md, "Host idle RSS").
#
# KEYS (docker/nexbot.order, written by docker/profile-order.sh) names functions by their
# symbol without LLVM's `.llvm.N` suffix, which changes with the code around them. A Rust
# symbol's hash (`17h…E`) stays the same in any clone and after most edits, but not with a new
# toolchain or dependency version: a name not found is then looked up without its hash, and
# taken when one function alone has that name (a generic function has one per type; ordering
# them all would put cold ones among the hot). A name found nowhere costs nothing; a function
# KEYS lacks stays where the linker puts it. So an old KEYS still links and runs; it only
# orders less (the counts printed say how much).
set -eu

[ $# -ge 3 ] || { echo "usage: $0 KEYS ORDER BIN..." >&2; exit 2; }
keys=$1 order=$2
shift 2
[ -f "$keys" ] || { echo "$0: $keys: no such file" >&2; exit 2; }
tmp="$order.tmp.$$"
trap 'rm -f "$tmp"' EXIT

for bin in "$@"; do
  [ -f "$bin" ] || { echo "$0: $bin: no such file (build it first)" >&2; exit 2; }
  nm --defined-only "$bin"
done | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u | awk -v keys="$keys" '
  function plain(s) { sub(/\.llvm\.[0-9]+$/, "", s); return s }
  function unhashed(s) { sub(/17h[0-9a-f]+E$/, "", s); return s }
  {
    k = plain($0)
    if (k in names) names[k] = names[k] "\n" $0
    else names[k] = $0
    u = unhashed(k); if (!((u, k) in seen)) { seen[u, k] = 1; instances[u]++; only[u] = k }
  }
  END {
    while ((getline line < keys) > 0) {
      if (line == "" || line ~ /^#/) continue
      if (line in printed) continue
      printed[line] = 1
      total++
      if (line in names) { exact++; print names[line]; continue }
      # Its hash changed (a new toolchain or dependency): the function under its new hash,
      # when exactly one has its name (a generic function has one per type, all alike here).
      u = unhashed(line)
      if (instances[u] == 1 && !(only[u] in printed)) {
        renamed++; printed[only[u]] = 1; print names[only[u]]
      }
    }
    printf "link-order: of the %d functions in %s, %d are in these binaries as named, %d under a new hash, %d not at all\n", \
      total, keys, exact, renamed, total - exact - renamed > "/dev/stderr"
  }' > "$tmp"

if [ -f "$order" ] && cmp -s "$tmp" "$order"; then
  exit 0
fi
mv "$tmp" "$order"
echo "link-order: $order changed: linking $* again"
for bin in "$@"; do
  dir=$(dirname "$bin")
  [ -d "$dir/deps" ] && find "$dir/deps" -maxdepth 1 -samefile "$bin" -exec rm -f {} +
  rm -f "$bin"
done
