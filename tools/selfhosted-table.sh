#!/usr/bin/env bash
# Runs the self-hosted scenarios (tests/selfhosted.rs) on three process nodes and prints their
# table: full-cluster hard reboots (TRIALS, default 20; boot delays 0..MAX_DELAY s, seeded),
# a bad push with its rollback, a rolling upgrade of kube-apiserver polled round-robin, and
# decommission (relabel, helm uninstall) on kube-scheduler.
#   tools/selfhosted-table.sh [TRIALS] [MAX_DELAY] [SEED]
# CI runs the same test with 1 reboot trial as part of ./test.sh, with the lifecycle run (which
# adds reboots of its own) between the rolling upgrade and decommission; here it is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/build.sh >/dev/null
export KUBE_ANCHOR_LIFECYCLE_OPS=0 KUBE_ANCHOR_REBOOT_TRIALS=${1:-20} KUBE_ANCHOR_REBOOT_MAX_DELAY=${2:-60} KUBE_ANCHOR_REBOOT_SEED=${3:-1}
cargo test --locked --test selfhosted -- a_self_hosted_control_plane --nocapture 2>&1 | sed -n '/^reboot trial\|^rolling upgrade\|^bad push\|^decommission\|^self-hosted control plane\|^|/p'
