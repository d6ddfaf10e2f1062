#!/bin/bash
# What the queue controls cost, an earlier revision against this checkout, alternating, in
# one run:
#
#     bench/ab_controls.sh REVISION [ROUNDS] [queue_controls.py arguments ...]
#
# Checks REVISION out in a scratch worktree, then runs each tree's own bench/queue_controls.py
# (one round each, so every case's ratio is to the plain claim of the same round) in that tree
# and in this one, alternately, ROUNDS times (default 3). Compare the medians of the ratios.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
revision=${1:?usage: bench/ab_controls.sh REVISION [ROUNDS] [ARGS ...]}
rounds=${2:-3}
shift $(( $# >= 2 ? 2 : 1 ))
base=$(mktemp -d /tmp/pgdrain-ab.XXXXXX)
trap 'git -C "$here" worktree remove --force "$base" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach -f "$base" "$revision" >/dev/null
# Both trees run this checkout's driver (same cases, same session settings).
cp "$here/bench/queue_controls.py" "$base/bench/"
for round in $(seq "$rounds"); do
  for tree in "$base" "$here"; do
    label=$([ "$tree" = "$here" ] && echo "this checkout" || echo "$revision")
    echo "== round $round: $label"
    (cd "$tree" && PYTHONPATH="$tree/layers/pgdrain:$tree/dev:$tree" \
       "$here/.venv/bin/python" bench/queue_controls.py --rounds 1 "$@" 2>/dev/null \
       | grep '^| [a-z0-9]')
  done
done
