#!/bin/sh
# The images' binaries are linked with their start-up code together (`make image-bins`).
#
#   NEXBOT_ORDER_KEYS=KEYS docker/link-order.sh ARGS...
#       rustc's linker for the images' binaries (`-C linker=docker/link-order.sh`): writes
#       OUT.order (OUT: the `-o` of ARGS), the linker's symbol ordering file (lld's
#       --symbol-ordering-file): every function KEYS names, in KEYS' order, under each symbol
#       name it has in the objects and archives this link reads. Says how many of KEYS'
#       functions it found (also in OUT.order.counts: rustc shows a linker's words only when
#       the link fails), then runs `cc` (NEXBOT_ORDER_CC: another, for the test) with ARGS
#       and that file.
#
# Why: the kernel maps a binary's code into memory in 64 KiB windows around each page touched
# (fault-around), so a daemon whose start-up touches a few thousand functions scattered over
# 31 MB of `.text` keeps most of `.text` resident. Placed together (first in `.text`), the same
# functions cost about their own size (docs/performance.md, "Host idle RSS").
#
# Why at link time: the names are read from what this very link reads, so one build links each
# binary once. Read from the linked binaries instead, they took a second link pass after every
# change (76 s of a cold 9 min 36 s `make image` here, 2026-12-03; 177 s on 2026-12-02).
#
# KEYS (docker/nexbot.order, written by docker/profile-order.sh) names functions by their
# symbol without LLVM's `.llvm.N` suffix, which changes with the code around them. The images'
# binaries use Rust's v0 mangling (the Makefile's IMAGE_RUSTFLAGS): a generic function's symbol
# spells out its type arguments, where the legacy one hides them in a hash (`17h…E`) that any
# change to those types, a closure's place or a feature changes. What still changes in a v0
# symbol is each crate's id (`Cs…_`, from cargo's metadata: a new crate in the workspace or a
# dependency's version or features): a name not found is then looked up without crate ids (a
# legacy one without its hash), and taken when one function alone has that name (two versions
# of one crate, or a legacy generic's copies, would be a guess). Measured between two commits a
# day of crate moves apart (2026-12-04): 59 % of the daemon's symbols kept their exact name
# either way; without crate ids 88 % of the v0 names are found, without hashes 64 % of the
# legacy ones. A name found nowhere costs nothing; a function KEYS lacks stays where the
# linker puts it. So an old KEYS still links and runs; it only orders less (the counts printed
# say how much).
set -eu

keys=${NEXBOT_ORDER_KEYS:?"$0: NEXBOT_ORDER_KEYS names no keys file (make image-bins sets it)"}
[ -f "$keys" ] || { echo "$0: $keys: no such file" >&2; exit 2; }
out= prev=
for arg in "$@"; do
  [ "$prev" = -o ] && out=$arg
  prev=$arg
done
[ -n "$out" ] || { echo "$0: no -o among the linker's arguments" >&2; exit 2; }
order="$out.order"

# The objects and archives the link reads, one per line; from rustc's `@file` too, when the
# command line was too long for it (one argument per line).
inputs() {
  for arg in "$@"; do
    case $arg in
      @*) inputs $(cat "${arg#@}") ;;
      *.o | *.rlib | *.a) printf '%s\n' "$arg" ;;
    esac
  done
}

# nm complains about an archive's metadata member (`lib.rmeta`); its symbols are all it gives.
inputs "$@" | xargs -r -d '\n' nm --defined-only 2>/dev/null | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u | awk -v keys="$keys" -v counts="$order.counts" '
  function plain(s) { sub(/\.llvm\.[0-9]+$/, "", s); return s }
  # A name without what changes between builds: crate ids (v0) or the hash (legacy).
  function unhashed(s) {
    if (s ~ /^_R/) gsub(/Cs[0-9A-Za-z]*_/, "C", s)
    else sub(/17h[0-9a-f]+E$/, "", s)
    return s
  }
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
      # Its crate ids or hash changed: the function under its new ones, when exactly one
      # has its name (a legacy generic function has one per type, all alike here).
      u = unhashed(line)
      if (instances[u] == 1 && !(only[u] in printed)) {
        renamed++; printed[only[u]] = 1; print names[only[u]]
      }
    }
    line = sprintf("link-order: of the %d functions in %s, %d are in this link as named, %d under a new hash, %d not at all", \
      total, keys, exact, renamed, total - exact - renamed)
    print line > "/dev/stderr"
    print line > counts
  }' > "$order"

exec "${NEXBOT_ORDER_CC:-cc}" "$@" -Wl,--symbol-ordering-file="$order" -Wl,--no-warn-symbol-ordering
