#!/usr/bin/env bash
# Builds a chart's dependencies (the library chart, charts/<name>/charts/*.tgz) when they are
# missing or older than the library's files, and leaves them alone otherwise.
#   tools/chart-deps.sh               every chart with dependencies
#   tools/chart-deps.sh CHART...      those charts (names under charts/)
# HELM: the helm binary (default tools/bin/helm).
#
# Why not `helm dependency build` every time: it stages into tmpcharts-<pid> inside the chart
# directory and removes it when done, and any helm loading that chart meanwhile (a template, an
# install, another build) walks into the vanishing directory and fails ("lstat
# …/tmpcharts-<pid>: no such file or directory"). Built once up front, the charts are only read
# afterwards; a build that is still needed runs under a lock on the chart directory.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
helm=${HELM:-$root/tools/bin/helm}
lib=$root/charts/kube-anchor-lib

# stale DIR: no built dependency, or a library file newer than it.
stale() {
  local built
  built=$(find "$1/charts" -maxdepth 1 -name '*.tgz' 2>/dev/null | head -n 1)
  [[ -z $built ]] && return 0
  [[ -n $(find "$lib" -newer "$built" -print -quit) ]]
}

build() {
  local dir=$1 lock
  stale "$dir" || return 0
  if command -v flock >/dev/null; then
    exec {lock}<"$dir"
    flock "$lock"
  fi
  # Whoever waited on the lock finds the work done.
  if stale "$dir"; then
    (cd "$dir" && "$helm" dependency build >/dev/null)
  fi
  [[ -n ${lock:-} ]] && exec {lock}<&-
  return 0
}

if (($#)); then
  charts=("$@")
else
  charts=()
  for chart in "$root"/charts/*/Chart.yaml; do
    grep -q '^dependencies:' "$chart" && charts+=("$(basename "$(dirname "$chart")")")
  done
fi
for name in "${charts[@]}"; do
  dir=$root/charts/$name
  [[ -f $dir/Chart.yaml ]] || { echo "chart-deps.sh: no chart $dir" >&2; exit 1; }
  grep -q '^dependencies:' "$dir/Chart.yaml" || continue
  build "$dir"
done
