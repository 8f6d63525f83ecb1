#!/usr/bin/env bash
# Builds a release into DIR (default target/release-artifacts): the container image
# (tools/image.sh: OCI archive and digest), the charts packaged with helm and a chart repository
# index, shell completions and man pages generated from the CLI definition, and the binary's
# debug info (kube-anchor.debug; the image's binary is stripped of it).
#
#   tools/release.sh [--out DIR] [--binary PATH] [--no-image]
#
# The chart version and appVersion must equal the crate version (checked here and by the tests).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/target/release-artifacts binary= image=true
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --no-image) image=false; shift ;;
    *) echo "tools/release.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { printf 'tools/release.sh: %s\n' "$*" >&2; }
helm=${HELM:-$root/tools/bin/helm}
[[ -x $helm ]] || { log "no helm at $helm (run tools/build.sh)"; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
if [[ -z $binary ]]; then
  (cd "$root" && cargo build --release --locked --bin kube-anchor)
  binary=$root/target/release/kube-anchor
fi
rm -rf "$out"
mkdir -p "$out/charts" "$out/completions" "$out/man"

for chart in "$root"/charts/*/Chart.yaml; do
  dir=$(dirname "$chart")
  name=$(basename "$dir")
  chart_version=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart")
  app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart")
  if [[ $chart_version != "$version" || ( -n $app_version && $app_version != "$version" ) ]]; then
    log "charts/$name: version $chart_version, appVersion $app_version; the crate is $version"
    exit 1
  fi
  grep -q '^type: library' "$chart" && continue
  HELM=$helm "$root/tools/chart-deps.sh" "$name"
  "$helm" package "$dir" --destination "$out/charts" >/dev/null
done
"$helm" repo index "$out/charts"

for shell in bash zsh fish; do
  "$binary" completion "$shell" >"$out/completions/kube-anchor.$shell"
done
"$binary" man --out-dir "$out/man" >/dev/null
# The image ships the binary stripped; its debug info is this artifact.
"$root/tools/debug-info.sh" "$binary" "$out/kube-anchor.debug"

if $image; then
  "$root/tools/image.sh" --binary "$binary" --out "$out/image" --tag "$version" >/dev/null
fi
log "release $version in $out"
(cd "$out" && find . -type f ! -path './image/layout/*' | sort)
