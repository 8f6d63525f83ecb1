#!/usr/bin/env bash
# Runs the randomized lifecycle run (tests/selfhosted/lifecycle.rs) alone, without the scripted
# scenarios it follows in CI, on three process nodes: OPS seeded
# operations (default 40) from SEED (default 3), invariants checked throughout; prints the plan,
# each operation as it is applied, and the table. A failing run prints its seed, the operation's
# index and the command that replays it, and keeps the logs of every process of every node.
#   tools/lifecycle.sh [OPS] [SEED...]
#   tools/lifecycle.sh --plan [OPS] [SEED...]   only print each seed's plan
#   KUBE_ANCHOR_LIFECYCLE_ONLY=5,6 tools/lifecycle.sh OPS SEED   only those operations of the plan
#   KUBE_ANCHOR_LIFECYCLE_MINUTES=120 tools/lifecycle.sh OPS SEED  end at the first operation
#                                     that settles after 120 minutes, and print the table
#   KUBE_ANCHOR_LIFECYCLE_NODES=1 tools/lifecycle.sh OPS SEED   on one control-plane node
# With several seeds, one run per seed, one after another; exits 1 when any of them failed.
# CI runs a short sequence (15 operations of seed 3, after the scripted self-hosted scenarios on
# the same bed, tests/selfhosted.rs) as part of ./test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --plan ]]; then
  export KUBE_ANCHOR_LIFECYCLE_PLAN_ONLY=1
  shift
fi
tools/build.sh >/dev/null
ops=${1:-40}
shift || true
seeds=("${@:-3}")
rc=0
for seed in "${seeds[@]}"; do
  # A directory of its own per seed: a test binary removes the directories of binaries no longer
  # running under its TMPDIR, which would take a failed seed's logs with them. (Short: the nodes'
  # unix sockets live below it.)
  tmp=${TMPDIR:-/tmp}/kal-$seed
  mkdir -p "$tmp"
  if ! TMPDIR=$tmp KUBE_ANCHOR_SCRIPTED=0 KUBE_ANCHOR_LIFECYCLE_OPS=$ops KUBE_ANCHOR_LIFECYCLE_SEED=$seed \
    cargo test --locked --test selfhosted -- a_self_hosted_control_plane --nocapture 2>&1 |
    sed -un '/^lifecycle run\|^  *[0-9]*\. \|^\[\|^|\|^seed \|^replay\|^logs of\|^  \|^cluster dir/p'; then
    rc=1
  fi
done
exit "$rc"
