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
#   KUBE_ANCHOR_LIFECYCLE_JOBS=2 tools/lifecycle.sh OPS SEED...  two seeds at a time, each bed on
#                                     a network of its own (127.0.10.x, 127.0.11.x, ...), every
#                                     line prefixed with its seed
#   KUBE_ANCHOR_LIFECYCLE_NET_BASE=12 tools/lifecycle.sh ...   beds from 127.0.12.x on, so that a
#                                     second invocation (another budget) runs beside the first
# With several seeds, one run per seed, one after another (or JOBS at a time); exits 1 when any
# of them failed.
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
jobs=${KUBE_ANCHOR_LIFECYCLE_JOBS:-1}
net_base=${KUBE_ANCHOR_LIFECYCLE_NET_BASE:-10}
# The binary runs on its own, so that several runs can go at once.
bin=$(tools/test-binary.sh selfhosted)

# One seed's run on the bed's network NET (127.0.N: nodes NET.1 to NET.3).
run() {
  local seed=$1 net=$2
  # A directory of its own per seed: a test binary removes the directories of binaries no longer
  # running under its TMPDIR, which would take a failed seed's logs with them. (Short: the nodes'
  # unix sockets live below it.)
  local tmp=${TMPDIR:-/tmp}/kal-$seed
  mkdir -p "$tmp"
  TMPDIR=$tmp KUBE_ANCHOR_LIFECYCLE_NET=$net KUBE_ANCHOR_SCRIPTED=0 KUBE_ANCHOR_LIFECYCLE_OPS=$ops \
    KUBE_ANCHOR_LIFECYCLE_SEED=$seed "$bin" a_self_hosted_control_plane --nocapture 2>&1 |
    sed -un '/^lifecycle run\|^  *[0-9]*\. \|^\[\|^|\|^seed \|^replay\|^logs of\|^  \|^cluster dir/p' |
    if ((jobs > 1)); then sed -u "s/^/[seed $seed] /"; else cat; fi
}

rc=0
declare -A slot_of=() # running run's pid -> its slot
free=()
for ((slot = 0; slot < jobs; slot++)); do free+=("$slot"); done
finish_one() {
  local done_pid
  wait -n -p done_pid || rc=1
  free+=("${slot_of[$done_pid]}")
  unset "slot_of[$done_pid]"
}
for seed in "${seeds[@]}"; do
  while ((${#slot_of[@]} >= jobs)); do finish_one; done
  slot=${free[0]}
  free=("${free[@]:1}")
  run "$seed" "127.0.$((net_base + slot))" &
  slot_of[$!]=$slot
done
while ((${#slot_of[@]})); do finish_one; done
exit "$rc"
