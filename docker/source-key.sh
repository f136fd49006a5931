#!/bin/sh
# Prints what the images are built from, for their `nexbot.source` label: the commit's tree
# (`git rev-parse HEAD^{tree}`), or nothing when that does not say it — not a git checkout, or
# a change not committed (a tracked file edited, or a file git does not ignore added). `make
# up` rebuilds nothing when the engine's images carry this key (docker/images-current.sh): a
# fresh clone of a commit whose images are already on the engine need not compile for 20
# minutes to make the same ones again.
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 0
[ -z "$(git status --porcelain --untracked-files=normal 2>/dev/null)" ] || exit 0
git rev-parse 'HEAD^{tree}' 2>/dev/null || true
