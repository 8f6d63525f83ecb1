#!/usr/bin/env bash
# Runs every test: builds the real Kubernetes components (cached after the first run), then the
# Rust unit, integration, crash, control-plane and chart tests.
#
# With arguments, they go to one `cargo test` of every target (`./test.sh --test fleet`).
# Without, the self-hosted bed's one long test (tests/selfhosted.rs: reboots, pushes and a seeded
# lifecycle run, about 25 minutes spent mostly waiting on trials, boots and settling) runs beside
# the other tests instead of after them, its lines prefixed with [selfhosted]. The beds of the
# two never share an address (docs/testing.md, "Running beside each other").
set -euo pipefail
cd "$(dirname "$0")"
tools/build.sh
if (($#)); then
  exec cargo test --locked --workspace --all-targets "$@"
fi

long=a_self_hosted_control_plane_survives
cargo test --locked --workspace --all-targets --no-run
# tests/adopt.rs runs kubeadm's own defaults, whose API server listens on port 6443 of every
# address, the self-hosted bed's too: it runs before that bed starts, not beside it.
adopt=a_running_kubeadm_control_plane_is_taken_over
status=0
mkdir -p target
cargo test --locked --workspace --test adopt "$adopt" 2>&1 | tee target/adopt-test.log || status=$?
# A filter that matches nothing passes too: each test picked by name must have run.
ran_one() { grep -q '^test result: ok\. 1 passed' "$1"; }
ran_one target/adopt-test.log || status=1
# Its binary runs on its own, from the package root as under `cargo test`.
selfhosted=$(tools/test-binary.sh selfhosted)
long_log=target/selfhosted-test.log
("$selfhosted" "$long" 2>&1 | tee "$long_log" | sed -u 's/^/[selfhosted] /') &
long_pid=$!
# Stopped, stop everything started here (the long test runs in a pipeline of its own).
trap 'trap - INT TERM; kill 0' INT TERM

cargo test --locked --workspace --all-targets -- --skip "$long" --skip "$adopt" || status=$?
if ! wait "$long_pid" || ! ran_one "$long_log"; then
  echo "test.sh: tests/selfhosted.rs failed (its lines above start with [selfhosted])" >&2
  status=1
fi
exit "$status"
