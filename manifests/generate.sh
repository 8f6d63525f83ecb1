#!/usr/bin/env bash
# Renders the plain manifests in this directory from the charts with the example values
# (examples/values/*.yaml). The tests fail when the checked-in files differ from a fresh render.
#   manifests/generate.sh          rewrite the files
#   manifests/generate.sh --check  only compare
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
helm=${HELM:-$root/tools/bin/helm}
out=$root/manifests
check=false
[[ ${1:-} == --check ]] && check=true

render() { # name chart args...
  local name=$1 chart=$2
  shift 2
  HELM=$helm "$root/tools/chart-deps.sh" "$chart"
  {
    echo "# Rendered from charts/$chart by manifests/generate.sh; do not edit."
    "$helm" template "$@" "$root/charts/$chart" --namespace kube-system
  }
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# RBAC of an anchor, under the plain name the examples use.
render rbac kube-scheduler kube-anchor -f "$root/examples/values/kube-scheduler.yaml" \
  --set fullnameOverride=kube-anchor --set serviceAccount.name=kube-anchor \
  --show-only templates/rbac.yaml > "$tmp/rbac.yaml"
for chart in kube-apiserver kube-controller-manager kube-scheduler etcd; do
  render "$chart" "$chart" "$chart" -f "$root/examples/values/$chart.yaml" > "$tmp/$chart.yaml"
done
render pod-checkpointer pod-checkpointer pod-checkpointer > "$tmp/pod-checkpointer.yaml"
# The CRD the charts install from their crds/ (helm template leaves it out).
{
  echo "# Copied from charts/kube-anchor-lib/crds by manifests/generate.sh; do not edit."
  cat "$root/charts/kube-anchor-lib/crds/anchorstatuses.yaml"
} > "$tmp/anchorstatuses-crd.yaml"

status=0
for f in "$tmp"/*.yaml; do
  name=$(basename "$f")
  if $check; then
    if ! diff -u "$out/$name" "$f" >/dev/null; then
      echo "manifests/$name differs from a fresh render of its chart: run manifests/generate.sh" >&2
      status=1
    fi
  else
    cp "$f" "$out/$name"
  fi
done
exit $status
