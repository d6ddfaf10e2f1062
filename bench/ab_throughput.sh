#!/bin/bash
# No-op throughput of an earlier revision against this checkout, alternating, in one run:
#
#     bench/ab_throughput.sh REVISION [ROUNDS] [--only TEXT ...]
#
# Checks REVISION out in a scratch worktree, then runs bench/throughput.py (one round each)
# in that tree and in this one, alternately, ROUNDS times (default 4), so a noisy moment
# hits both alike. Compare the medians of each configuration across the rounds.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
revision=${1:?usage: bench/ab_throughput.sh REVISION [ROUNDS] [--only TEXT ...]}
rounds=${2:-4}
shift $(( $# >= 2 ? 2 : 1 ))
only=("$@")
[ ${#only[@]} -gt 0 ] || only=(--only "1 process, batch 100" --only "4 processes, batch 10"
                                --only "4 processes, batch 100")
base=$(mktemp -d /tmp/pgdrain-ab.XXXXXX)
trap 'git -C "$here" worktree remove --force "$base" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach -f "$base" "$revision" >/dev/null
# Both trees run this checkout's benchmark driver and worker (same configurations, same
# per-job cost columns, the worker's CPU reported alike); each tree's own drain function,
# migrations and library stay.
cp "$here/bench/throughput.py" "$here/bench/worker.py" "$base/bench/"
for round in $(seq "$rounds"); do
  for tree in "$base" "$here"; do
    label=$([ "$tree" = "$here" ] && echo "this checkout" || echo "$revision")
    echo "== round $round: $label"
    (cd "$tree" && PYTHONPATH="$tree/layers/pgdrain:$tree/dev:$tree" \
       "$here/.venv/bin/python" bench/throughput.py --rounds 1 "${only[@]}" 2>/dev/null \
       | grep '^| [a-z]')
  done
done
