#!/usr/bin/env bash
# The fleet simulation's long mode: RUNS generated runs per node count (1 and 3 nodes), split
# over JOBS processes on disjoint seeds, merged into one table: how many runs show each
# invariant and its first seed (docs/simulation.md keeps the table). A seed replays alone:
#   cargo run --release --bin fleet-sim -- --runs 1 --seed SEED --nodes N --shrink
#
#   tools/fleet-long.sh [RUNS] [JOBS] [FIRST_SEED]     (defaults: 1000000, the CPUs, 1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-1000000} jobs=${2:-$(nproc)} first=${3:-1}
((runs > 0 && jobs > 0)) || { echo "tools/fleet-long.sh: RUNS and JOBS must be positive" >&2; exit 2; }
(cd "$root" && cargo build --release --locked -p kube-anchor-sim --bin fleet-sim)
bin=$root/target/release/fleet-sim
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chunk=$(((runs + jobs - 1) / jobs))
started=$(date +%s)
pids=()
for ((j = 0; j < jobs && j * chunk < runs; j++)); do
  n=$((runs - j * chunk < chunk ? runs - j * chunk : chunk))
  "$bin" --runs "$n" --seed $((first + j * chunk)) >"$work/$j.out" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
elapsed=$(($(date +%s) - started))
echo "$((2 * runs)) runs (seeds $first..$((first + runs - 1)) on 1 and on 3 nodes), $jobs processes, ${elapsed} s"
echo "| nodes | invariant | runs showing it | first seed |"
echo "|---|---|---|---|"
# Each process prints rows `| nodes | invariant | count | first seed |`: counts add up, the
# lowest first seed wins.
cat "$work"/*.out | awk -F'|' '
  $2 ~ /^ *[0-9]+ *$/ {
    key = $2 "|" $3
    count[key] += $4
    if (!(key in seen) || $5 + 0 < seen[key]) seen[key] = $5 + 0
  }
  END { for (k in count) print "|" k "| " count[k] " | " seen[k] " |" }' | sort -t'|' -k2,2n -k3,3
