#!/usr/bin/env bash
# Builds the real Kubernetes components kube-anchor's tests run against, from Go modules:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubeadm and a kubemark kubelet (one
# multi-call binary from tools/kube), etcd (tools/etcd), the etcd linearizability check
# (tools/linearizability: porcupine over etcd's client), helm and promtool (go install),
# prometheus-operator's PrometheusRule CRD (from its module), which the charts' alerts are checked
# against, and the real container runtime of the containerd nodes: containerd and its runc shim,
# runc (with seccomp: cgo and Debian's libseccomp-dev), the CNI loopback plugin, a pause binary
# (tools/pause) and the OCI registry the nodes pull from (distribution).
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
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.2
CNI_PLUGINS_VERSION=v1.10.0
DISTRIBUTION_VERSION=v3.1.2

kube_version() {
  local v
  v=$(cd "$here/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  [[ $v == v1.* ]] || { log "cannot read the k8s.io/kubernetes version from tools/kube/go.mod"; exit 1; }
  echo "$v"
}
module_key() {
  local files=("$here/$1/go.mod")
  [[ -f $here/$1/go.sum ]] && files+=("$here/$1/go.sum")
  files+=("$here/$1"/*.go)
  cat "${files[@]}" | sha256sum | cut -c1-12
}

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
# The outside linearizability check of the etcd membership tests (porcupine over etcd's client).
build_linearizability() { (cd "$here/linearizability" && go build -trimpath -ldflags "-s -w" -o "$1" .); }

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
# containerd and its shim without cgo (which leaves out the btrfs, devmapper and zfs snapshotters);
# runc with cgo, for seccomp (it links libseccomp).
build_containerd() { CGO_ENABLED=0 GOFLAGS="-tags=no_btrfs,no_devmapper,no_zfs" go_install "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" "$1"; }
build_shim() { CGO_ENABLED=0 go_install "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$1"; }
build_runc() { CGO_ENABLED=1 GOFLAGS="-tags=seccomp" go_install "github.com/opencontainers/runc@$RUNC_VERSION" "$1"; }
build_loopback() { CGO_ENABLED=0 go_install "github.com/containernetworking/plugins/plugins/main/loopback@$CNI_PLUGINS_VERSION" "$1"; }
build_registry() { CGO_ENABLED=0 go_install "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION" "$1"; }
build_pause() { (cd "$here/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1" .); }
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
linearizability_bin="$cache/etcd-linearizability-$(module_key linearizability)"
helm_bin="$cache/helm-$HELM_VERSION"
promtool_bin="$cache/promtool-$PROMETHEUS_VERSION"
prometheusrule_crd="$cache/prometheusrules-crd-$PROMETHEUS_OPERATOR_VERSION.yaml"
# The containerd nodes' /opt/bin: regular files in one directory (see tools/containerd-node.sh).
runtime_dir="$cache/runtime-$CONTAINERD_VERSION-$RUNC_VERSION-$CNI_PLUGINS_VERSION-$(module_key pause)"
registry_bin="$cache/registry-$DISTRIBUTION_VERSION"

build kube "$kube_bin" build_kube
build etcd "$etcd_bin" build_etcd
build etcd-linearizability "$linearizability_bin" build_linearizability
build helm "$helm_bin" build_helm
build promtool "$promtool_bin" build_promtool
mkdir -p "$runtime_dir"
build containerd "$runtime_dir/containerd" build_containerd
build containerd-shim-runc-v2 "$runtime_dir/containerd-shim-runc-v2" build_shim
build runc "$runtime_dir/runc" build_runc
build loopback "$runtime_dir/loopback" build_loopback
build pause "$runtime_dir/pause" build_pause
build registry "$registry_bin" build_registry
if [[ ! -f $prometheusrule_crd ]]; then
  fetch_prometheusrule_crd "$prometheusrule_crd.partial"
  mv -f "$prometheusrule_crd.partial" "$prometheusrule_crd"
fi

for name in kube-apiserver kube-controller-manager kube-scheduler kubectl kubeadm kubelet; do
  ln -sfn "$kube_bin" "$bin/$name"
done
ln -sfn "$etcd_bin" "$bin/etcd"
ln -sfn "$linearizability_bin" "$bin/etcd-linearizability"
ln -sfn "$helm_bin" "$bin/helm"
ln -sfn "$promtool_bin" "$bin/promtool"
ln -sfn "$prometheusrule_crd" "$bin/prometheusrules-crd.yaml"
ln -sfn "$runtime_dir" "$bin/runtime"
ln -sfn "$registry_bin" "$bin/registry"
# Built here, before any test reads the charts (tools/chart-deps.sh says why).
HELM=$bin/helm "$here/chart-deps.sh"
log "ready: $(cd "$bin" && echo *)"
