#!/usr/bin/env bash
# Runs every test: builds the real Kubernetes components (cached after the first run), then the
# Rust unit, integration, crash, control-plane and chart tests.
set -euo pipefail
cd "$(dirname "$0")"
tools/build.sh
cargo test --locked --workspace --all-targets "$@"
