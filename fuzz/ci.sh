#!/usr/bin/env bash
# CI hook: runs every fuzz target briefly (FUZZ_SECONDS, default 20 s each) when the nightly
# toolchain and cargo-fuzz are installed; otherwise says it skipped and succeeds.
set -euo pipefail
cd "$(dirname "$0")"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: skipped (no nightly toolchain: rustup toolchain install nightly)"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: skipped (no cargo-fuzz: cargo install cargo-fuzz --locked)"
  exit 0
fi
exec ./run.sh "${FUZZ_SECONDS:-20}"
