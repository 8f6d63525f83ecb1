#!/usr/bin/env bash
# Builds the real Kubernetes components kube-anchor's tests run against, from Go modules:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubeadm and a kubemark kubelet (one
# multi-call binary from tools/kube), etcd (tools/etcd), helm and promtool (go install), and
# prometheus-operator's PrometheusRule CRD (from its module), which the charts' alerts are checked
# against.
#
# Idempotent: each binary is cached outside the repository under a key made of its version and
# the hash of its module files, so a warm run only re-creates the links in tools/bin.
# Cache location: $KUBE_ANCHOR_TOOLS_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/kube-anchor-tools.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KUBE_ANCHOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-anchor-tools}
bin="$here/bin"
mkdir -p "$cache" "$bin"

HELM_VERSION=v4.3.1
# Prometheus 3.x publishes its Go module as v0.3xx.y.
PROMETHEUS_VERSION=v0.316.0
PROMETHEUS_OPERATOR_VERSION=v0.85.0

kube_version() {
  local v
  v=$(cd "$here/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  [[ $v == v1.* ]] || { log "cannot read the k8s.io/kubernetes version from tools/kube/go.mod"; exit 1; }
  echo "$v"
}
module_key() { cat "$here/$1/go.mod" "$here/$1/go.sum" "$here"/"$1"/*.go | sha256sum | cut -c1-12; }

log() { printf 'tools/build.sh: %s\n' "$*" >&2; }

# build NAME OUTPUT COMMAND...: runs COMMAND only when OUTPUT is missing; builds into a temp
# name and renames, so an interrupted build never leaves a half-written binary in the cache.
build() {
  local name=$1 out=$2
  shift 2
  if [[ -x "$out" ]]; then
    log "$name: cached ($out)"
    return
  fi
  log "$name: building (a cold build takes minutes)"
  local start=$SECONDS
  "$@" "$out.partial"
  mv -f "$out.partial" "$out"
  log "$name: built in $((SECONDS - start))s"
}

build_kube() {
  local version
  version=$(kube_version)
  local minor=${version#v1.}
  minor=${minor%%.*}
  local ldflags=(
    "-X k8s.io/component-base/version.gitVersion=$version"
    "-X k8s.io/component-base/version.gitMajor=1"
    "-X k8s.io/component-base/version.gitMinor=$minor"
    "-X k8s.io/client-go/pkg/version.gitVersion=$version"
    "-X k8s.io/client-go/pkg/version.gitMajor=1"
    "-X k8s.io/client-go/pkg/version.gitMinor=$minor"
    "-s -w"
  )
  (cd "$here/kube" && go build -trimpath -ldflags "${ldflags[*]}" -o "$1" .)
}

build_etcd() { (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$1" .); }

# go_install PACKAGE@VERSION OUTPUT: `go install` of a module's command, moved to OUTPUT.
go_install() {
  local gobin name
  gobin=$(mktemp -d)
  name=${1%@*}
  name=${name##*/}
  GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "$1"
  mv "$gobin/$name" "$2"
  rmdir "$gobin"
}
build_helm() { go_install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" "$1"; }
build_promtool() { go_install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION" "$1"; }

# The CRD as the operator's module ships it (example/prometheus-operator-crd); nothing is built.
fetch_prometheusrule_crd() {
  local dir
  dir=$(cd "$cache" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n $dir ]] || { log "cannot download github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION"; exit 1; }
  cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml" "$1"
}

kube_bin="$cache/kube-$(kube_version)-$(module_key kube)"
etcd_bin="$cache/etcd-$(module_key etcd)"
helm_bin="$cache/helm-$HELM_VERSION"
promtool_bin="$cache/promtool-$PROMETHEUS_VERSION"
prometheusrule_crd="$cache/prometheusrules-crd-$PROMETHEUS_OPERATOR_VERSION.yaml"

build kube "$kube_bin" build_kube
build etcd "$etcd_bin" build_etcd
build helm "$helm_bin" build_helm
build promtool "$promtool_bin" build_promtool
if [[ ! -f $prometheusrule_crd ]]; then
  fetch_prometheusrule_crd "$prometheusrule_crd.partial"
  mv -f "$prometheusrule_crd.partial" "$prometheusrule_crd"
fi

for name in kube-apiserver kube-controller-manager kube-scheduler kubectl kubeadm kubelet; do
  ln -sfn "$kube_bin" "$bin/$name"
done
ln -sfn "$etcd_bin" "$bin/etcd"
ln -sfn "$helm_bin" "$bin/helm"
ln -sfn "$promtool_bin" "$bin/promtool"
ln -sfn "$prometheusrule_crd" "$bin/prometheusrules-crd.yaml"
log "ready: $(cd "$bin" && echo *)"
