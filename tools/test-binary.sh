#!/usr/bin/env bash
# Builds tests/NAME.rs and prints the path of its test binary, for running it directly: `cargo
# test` holds the build directory's lock while its tests run, so two of them never run at once.
#   tools/test-binary.sh NAME
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: tools/test-binary.sh NAME}
# One JSON line per artifact; the integration test's names its target's kind and name (the
# kube-anchor binary it depends on is built too, and listed).
path=$(cargo test --locked --workspace --test "$name" --no-run --message-format=json |
  grep "\"kind\":\[\"test\"\],[^}]*\"name\":\"$name\"" |
  grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d '"' -f 4)
if [[ ! -x "$path" || "$(basename "$path")" != "${name//-/_}"-* ]]; then
  echo "tools/test-binary.sh: no test binary of tests/$name.rs built" >&2
  exit 1
fi
echo "$path"
