#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), one after another, at the lowest CPU
# priority, and prints executions and coverage per target. Needs `cargo +nightly` and cargo-fuzz
# (`cargo install cargo-fuzz --locked`). The corpus grows in fuzz/corpus/<target> (not
# committed), starting from the committed seeds in fuzz/seeds/<target>; crashes land in
# fuzz/artifacts/<target>. Exit 1 when a target found a crash or a hang.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(config render staticpod sanitize ledger watch_events credentials)

nice -n 19 cargo +nightly fuzz build
# The built targets are run directly: editing the crate while they run does not rebuild them.
bin=target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release
mkdir -p logs
failed=0
rows=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  status=ok
  # -timeout: one input taking longer is a hang; -rss_limit_mb: the default 2 GB.
  mkdir -p "artifacts/$t"
  if ! nice -n 19 "$bin/$t" -artifact_prefix="artifacts/$t/" -max_total_time="$seconds" -timeout=10 \
      -print_final_stats=1 "corpus/$t" "seeds/$t" >"logs/$t.log" 2>&1; then
    status=FAILED
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$t.log" | tail -1)
  line=$(grep -E '^#[0-9]+.*cov: ' "logs/$t.log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$line")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$line")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$line")
  rows+=("$(printf '%-13s %8ss %12s %8s %8s %8s  %s' "$t" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$status")")
done
printf '%-13s %9s %12s %8s %8s %8s  %s\n' target time execs cov features corpus result
printf '%s\n' "${rows[@]}"
if ((failed)); then
  echo "a target failed: see fuzz/logs/<target>.log and fuzz/artifacts/<target>/" >&2
fi
exit "$failed"
