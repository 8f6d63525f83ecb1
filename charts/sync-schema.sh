#!/usr/bin/env bash
# The component charts share one values schema: copy charts/common/values.schema.json into each.
set -euo pipefail
cd "$(dirname "$0")"
for chart in kube-apiserver kube-controller-manager kube-scheduler etcd; do
  cp common/values.schema.json "$chart/values.schema.json"
done
