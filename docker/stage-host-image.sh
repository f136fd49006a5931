#!/bin/sh
# Stages the build context of the host image (docker/host.Dockerfile) into $1.
#
# Why a script: the image is FROM scratch (nothing can be pulled here), so everything in it is
# copied from this machine: `nexbot` and `nexbot-ctl`, and the `iptables` the egress
# firewall runs. iptables is dynamically linked, so it comes with exactly the shared libraries
# `ldd` lists for it and for its extension modules, plus the loader, at the paths they have
# here. The backend (nft or legacy) is the one this machine's `iptables` points at, which is
# the one dockerd uses to write its own rules.
#
# Usage: docker/stage-host-image.sh CONTEXT_DIR BINARY_DIR
set -eu

ctx=$1
bins=$2
root=$ctx/rootfs

iptables=$(command -v iptables || true)
[ -n "$iptables" ] || iptables=/usr/sbin/iptables
if [ ! -x "$iptables" ]; then
  echo "stage-host-image: no iptables on this machine (apt-get install iptables)" >&2
  exit 2
fi
multi=$(readlink -f "$iptables")
case $(basename "$multi") in
  xtables-nft-multi | xtables-legacy-multi) ;;
  *) echo "stage-host-image: $iptables -> $multi is not xtables-nft-multi or xtables-legacy-multi" >&2; exit 2 ;;
esac
# Where iptables looks for its extensions (compiled in; Debian's multiarch path).
xtlibs=/usr/lib/x86_64-linux-gnu/xtables
[ -d "$xtlibs" ] || { echo "stage-host-image: $xtlibs not found" >&2; exit 2; }

rm -rf "$ctx"
mkdir -p "$root/bin" "$root/sbin" "$root/etc" "$root/data" "$root/tmp" "$root/run" "$root/skills" \
  "$root$xtlibs"
chmod 1777 "$root/tmp"
# Stripped: the test build's binaries (`IMAGE_FROM=test`) carry line tables; the release ones
# are stripped already.
for bin in nexbot nexbot-ctl; do strip -o "$root/bin/$bin" "$bins/$bin"; done

cp "$multi" "$root/sbin/"
ln -s "$(basename "$multi")" "$root/sbin/iptables"
cp "$xtlibs"/*.so "$root$xtlibs/"

# Every shared object the binary and its extensions need, each at the path ldd resolved it to
# (symlinks followed, so the file lands under its soname's path), and the loader.
# The daemon's binaries are static in a release build (ldd lists nothing for them) and dynamic
# in the test build's (`make image IMAGE_FROM=test`).
libs=$( { ldd "$multi"; for ext in "$xtlibs"/*.so; do ldd "$ext"; done
  for bin in nexbot nexbot-ctl; do ldd "$root/bin/$bin" 2>/dev/null || true; done; } |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# The dynamic loader may be listed under /lib64 as a symlink into the multiarch directory;
# keep that shape so the interpreter path in the binary's header resolves.
loader=$(readlink -f /lib64/ld-linux-x86-64.so.2)
mkdir -p "$root$(dirname "$loader")" "$root/lib64"
cp "$loader" "$root$loader"
rm -f "$root/lib64/ld-linux-x86-64.so.2"
ln -s "$loader" "$root/lib64/ld-linux-x86-64.so.2"

# `-p tcp` is looked up by name; name resolution of the daemon's own lookups follows nsswitch.
cp /etc/protocols "$root/etc/protocols"
printf 'hosts: files dns\nprotocols: files\n' > "$root/etc/nsswitch.conf"
printf 'root:x:0:0:root:/data:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"

# Checks that the staged iptables runs with nothing but the staged files (chroot needs root).
if [ "$(id -u)" = 0 ] && ! chroot "$root" /sbin/iptables -V >/dev/null 2>&1; then
  echo "stage-host-image: the staged iptables does not run in a bare root:" >&2
  chroot "$root" /sbin/iptables -V >&2 || true
  exit 2
fi
echo "staged $(basename "$multi") with $(echo "$libs" | wc -w) shared libraries"
