#!/usr/bin/env bash
# Runs the differential test of the static-pod checks (tests/kubelet_rules.rs) long: CASES
# generated pods for each SEED, each judged by kube-anchor and by the test control plane's real
# kube-apiserver. Prints each seed's counts; a disagreement fails with its smallest form and
# leaves every one found in target/tmp/kubelet-rules-found.json (add them to
# tests/kubelet_rules/regressions.json once fixed).
#
#   tools/kubelet-rules.sh [CASES] [SEED...]      default: 10000 cases, seeds 1 2 3
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cases=${1:-10000}
shift || true
seeds=("$@")
((${#seeds[@]})) || seeds=(1 2 3)
tools/build.sh
for seed in "${seeds[@]}"; do
  KUBE_ANCHOR_RULES_CASES=$cases KUBE_ANCHOR_RULES_SEED=$seed \
    cargo test --locked --test kubelet_rules -- --nocapture 2>&1 | grep -E '^seed |disagreement|^generated|^regression|^single|test result'
done
