#!/usr/bin/env bash
# Brings up a control plane from nothing with kube-anchor, the charts being the one source of
# truth from the first boot: the PKI, the chart values, `helm template` of every component chart,
# `kube-anchor bootstrap` on each node (no API server anywhere yet), then `helm install` of the
# same charts with the same values, whose anchors adopt what bootstrap wrote.
#
#   cluster.sh pki      DIR NAME=IP...   certificates, keys and kubeconfigs (openssl) in DIR/pki
#   cluster.sh values   DIR              DIR/values/<chart>.yaml from DIR/pki
#   cluster.sh template DIR              DIR/cluster.yaml: helm template of every component chart
#   cluster.sh node     DIR NAME IP      on the node: kube-anchor bootstrap, the kubelet's
#                                        kubeconfig in /etc/kubernetes/kubelet.conf, and its
#                                        pre-start step (kube-anchor kubelet-pre-start --install)
#   cluster.sh install  DIR              label the nodes, helm install every component chart
#   cluster.sh upgrade  DIR CHART ARGS…  helm upgrade CHART with the same values and ARGS (e.g.
#                                        --set component.extraArgs.v=2); the release is named
#                                        RELEASE (default: the chart)
#   cluster.sh rename   DIR CHART FROM TO ARGS…
#                                        the release FROM renamed TO: helm install TO with the
#                                        same values and ARGS, then helm uninstall FROM (the old
#                                        anchors' hooks keep every file: the new DaemonSets select
#                                        their nodes); run again after a failure, it goes on
#   cluster.sh join    DIR NAME IP      on a fresh node of a running cluster (its PKI made by `pki`
#                                        with the others, e.g. a machine replaced in place): the
#                                        kubelet's kubeconfig, then kube-anchor bootstrap from what
#                                        the deployed releases hold now (helm get manifest), so
#                                        etcd joins as a learner (promoted before kube-apiserver
#                                        starts) and each component starts at the version the
#                                        cluster runs; label the Node afterwards, as install does
#                                        (the anchors then adopt what it wrote)
#
# Run `node` on every control-plane node at about the same time: etcd's health endpoint answers
# only once a quorum of the initial members runs, so the first node waits for the others.
# Environment: HOST_ROOT (default /) for `node` and `join`; ADMIN_KUBECONFIG (default
# DIR/admin.conf, whose server is the first node's) for the verbs that use the API; HELM,
# KUBECTL, KUBE_ANCHOR (default: from PATH);
# OVERRIDES, directories (colon-separated) of extra values files <chart>.yaml, applied in order
# (e.g. examples/bootstrap/one-host for several nodes sharing one network namespace); DAYS, certificate lifetime (default 365).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
charts=$(cd "$here/../../charts" && pwd)
helm=${HELM:-helm}
kubectl=${KUBECTL:-kubectl}
kube_anchor=${KUBE_ANCHOR:-kube-anchor}
days=${DAYS:-365}
components=(etcd kube-apiserver kube-controller-manager kube-scheduler)

die() { echo "cluster.sh: $*" >&2; exit 1; }
# admin DIR: the kubeconfig the API verbs use.
admin() { echo "${ADMIN_KUBECONFIG:-$1/admin.conf}"; }

# ---------------------------------------------------------------------------------------------
# PKI, with openssl: present on every distribution, and each certificate's profile stays visible
# here (kubeadm's layout and subjects, so RBAC's defaults know every identity).

# new_ca OUT CN
new_ca() {
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days "$days" \
    -subj "/CN=$2" -keyout "$1.key" -out "$1.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# issue OUT CA CN ORG USAGE [SANS]: USAGE is serverAuth, clientAuth or both.
issue() {
  local out=$1 ca=$2 cn=$3 org=$4 usage=$5 sans=${6:-}
  local subject="/CN=$cn"
  [[ -n $org ]] && subject+="/O=$org"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$subject" \
    -keyout "$out.key" -out "$out.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n $sans ]] && echo "subjectAltName=$sans"
  } >"$out.ext"
  openssl x509 -req -in "$out.csr" -CA "$ca.crt" -CAkey "$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days "$days" -sha256 -extfile "$out.ext" -out "$out.crt" 2>/dev/null
  rm -f "$out.csr" "$out.ext"
}

# kubeconfig OUT SERVER CERT_PREFIX CA
kubeconfig() {
  local b64='base64 -w0'
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: kubernetes
    cluster: {server: "$2", certificate-authority-data: $($b64 <"$4.crt")}
users:
  - name: user
    user: {client-certificate-data: $($b64 <"$3.crt"), client-key-data: $($b64 <"$3.key")}
contexts:
  - name: default
    context: {cluster: kubernetes, user: user}
current-context: default
EOF
  chmod 600 "$1"
}

cmd_pki() {
  local dir=$1
  shift
  (($#)) || die "pki: name the nodes, NAME=IP..."
  local pki=$dir/pki
  [[ -e $pki ]] && die "$pki exists; not overwriting a PKI"
  umask 077
  mkdir -p "$pki/etcd" "$pki/nodes"
  new_ca "$pki/ca" kubernetes-ca
  new_ca "$pki/etcd/ca" etcd-ca
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
  issue "$pki/apiserver-kubelet-client" "$pki/ca" kube-apiserver-kubelet-client system:masters clientAuth
  issue "$pki/apiserver-etcd-client" "$pki/etcd/ca" kube-apiserver-etcd-client "" clientAuth
  # The etcd anchor's own client identity, for membership changes (never written to the host).
  issue "$pki/etcd/anchor-client" "$pki/etcd/ca" kube-anchor-etcd-client "" clientAuth
  issue "$pki/admin" "$pki/ca" kubernetes-admin system:masters clientAuth
  issue "$pki/controller-manager" "$pki/ca" system:kube-controller-manager "" clientAuth
  issue "$pki/scheduler" "$pki/ca" system:kube-scheduler "" clientAuth
  printf 'apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aescbc: {keys: [{name: key1, secret: %s}]}\n      - identity: {}\n' \
    "$(openssl rand -base64 32)" >"$pki/encryption-config.yaml"
  local first=""
  for node in "$@"; do
    local name=${node%%=*} ip=${node#*=}
    [[ $name != "$node" && -n $ip ]] || die "pki: $node: want NAME=IP"
    first=${first:-$ip}
    local n=$pki/nodes/$name
    mkdir -p "$n"
    echo "$ip" >"$n/ip"
    issue "$n/apiserver" "$pki/ca" kube-apiserver "" serverAuth \
      "IP:$ip,IP:127.0.0.1,IP:10.96.0.1,DNS:$name,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    issue "$n/etcd-server" "$pki/etcd/ca" "$name" "" serverAuth,clientAuth "IP:$ip,IP:127.0.0.1,DNS:localhost,DNS:$name"
    issue "$n/etcd-peer" "$pki/etcd/ca" "$name" "" serverAuth,clientAuth "IP:$ip,IP:127.0.0.1,DNS:localhost,DNS:$name"
    issue "$n/kubelet" "$pki/ca" "system:node:$name" system:nodes clientAuth
    kubeconfig "$n/kubelet.conf" "https://$ip:6443" "$n/kubelet" "$pki/ca"
  done
  kubeconfig "$dir/admin.conf" "https://$first:6443" "$pki/admin" "$pki/ca"
  # The components reach the API server of their own node: the anchor renders ${NODE_IP}.
  kubeconfig "$pki/controller-manager.conf" 'https://${NODE_IP}:6443' "$pki/controller-manager" "$pki/ca"
  kubeconfig "$pki/scheduler.conf" 'https://${NODE_IP}:6443' "$pki/scheduler" "$pki/ca"
  echo "cluster.sh: PKI for $# node(s) in $pki; admin kubeconfig $dir/admin.conf"
}

# ---------------------------------------------------------------------------------------------
# Values: credentials every node shares under `credentials`, a node's own under `perNode`.

# entry KEY FILE INDENT: a YAML block scalar holding FILE.
entry() {
  printf '%*s%s: |\n' "$3" '' "$1"
  sed "s/^/$(printf '%*s' $(($3 + 2)) '')/" "$2"
}

nodes_of() { ls "$1/pki/nodes"; }

cmd_values() {
  local dir=$1 pki=$1/pki out=$1/values
  [[ -d $pki ]] || die "values: no PKI in $pki (run: cluster.sh pki $dir NAME=IP...)"
  umask 077
  mkdir -p "$out"
  local nodes initial="" endpoints="" apiservers=""
  nodes=$(nodes_of "$dir")
  for name in $nodes; do
    local ip
    ip=$(cat "$pki/nodes/$name/ip")
    initial+="${initial:+,}$name=https://$ip:2380"
    endpoints+="${endpoints:+, }https://$ip:2379"
    apiservers+="${apiservers:+, }https://$ip:6443"
  done
  # Every anchor may also use any node's API server: where pods reach the API through their
  # own node's (no kube-proxy yet, or a node-local address), a broken local one must not blind
  # them. Each node's serving certificate names its address.
  local anchor="anchor: {apiServers: [$apiservers]}"
  {
    echo "$anchor"
    echo "component: {initialCluster: \"$initial\", initialClusterState: new}"
    echo "membership: {enabled: true, endpoints: [$endpoints]}"
    echo "credentials:"
    entry etcd-ca.crt "$pki/etcd/ca.crt" 2
    entry anchor-client.crt "$pki/etcd/anchor-client.crt" 2
    entry anchor-client.key "$pki/etcd/anchor-client.key" 2
    echo "perNode:"
    for name in $nodes; do
      echo "  $name:"
      echo "    credentials:"
      entry server.crt "$pki/nodes/$name/etcd-server.crt" 6
      entry server.key "$pki/nodes/$name/etcd-server.key" 6
      entry peer.crt "$pki/nodes/$name/etcd-peer.crt" 6
      entry peer.key "$pki/nodes/$name/etcd-peer.key" 6
    done
  } >"$out/etcd.yaml"
  {
    echo "$anchor"
    echo "credentials:"
    entry ca.crt "$pki/ca.crt" 2
    entry apiserver-kubelet-client.crt "$pki/apiserver-kubelet-client.crt" 2
    entry apiserver-kubelet-client.key "$pki/apiserver-kubelet-client.key" 2
    entry etcd-ca.crt "$pki/etcd/ca.crt" 2
    entry apiserver-etcd-client.crt "$pki/apiserver-etcd-client.crt" 2
    entry apiserver-etcd-client.key "$pki/apiserver-etcd-client.key" 2
    entry sa.pub "$pki/sa.pub" 2
    entry sa.key "$pki/sa.key" 2
    entry encryption-config.yaml "$pki/encryption-config.yaml" 2
    echo "perNode:"
    for name in $nodes; do
      echo "  $name:"
      echo "    credentials:"
      entry apiserver.crt "$pki/nodes/$name/apiserver.crt" 6
      entry apiserver.key "$pki/nodes/$name/apiserver.key" 6
    done
  } >"$out/kube-apiserver.yaml"
  {
    echo "$anchor"
    echo "files:"
    echo '  - {name: controller-manager.conf, path: /etc/kubernetes/controller-manager.conf, mode: "0600", template: true}'
    echo '  - {name: ca.crt, path: /etc/kubernetes/pki/ca.crt, mode: "0644"}'
    echo '  - {name: ca.key, path: /etc/kubernetes/pki/ca.key, mode: "0600"}'
    echo '  - {name: sa.key, path: /etc/kubernetes/pki/sa.key, mode: "0600"}'
    echo "credentials:"
    entry controller-manager.conf "$pki/controller-manager.conf" 2
    entry ca.crt "$pki/ca.crt" 2
    entry ca.key "$pki/ca.key" 2
    entry sa.key "$pki/sa.key" 2
  } >"$out/kube-controller-manager.yaml"
  {
    echo "$anchor"
    echo "files:"
    echo '  - {name: scheduler.conf, path: /etc/kubernetes/scheduler.conf, mode: "0600", template: true}'
    echo "credentials:"
    entry scheduler.conf "$pki/scheduler.conf" 2
  } >"$out/kube-scheduler.yaml"
  echo "cluster.sh: values for ${components[*]} in $out (they hold keys: mode 0600)"
}

# values_args DIR CHART: sets `values` to the -f arguments of a chart: the generated values,
# then the overrides, if any.
values_args() {
  values=(-f "$1/values/$2.yaml")
  local dirs dir
  IFS=: read -ra dirs <<<"${OVERRIDES:-}"
  for dir in "${dirs[@]}"; do
    if [[ -n $dir && -f $dir/$2.yaml ]]; then
      values+=(-f "$dir/$2.yaml")
    fi
  done
}

cmd_template() {
  local dir=$1
  [[ -d $dir/values ]] || die "template: no values in $dir/values (run: cluster.sh values $dir)"
  umask 077
  : >"$dir/cluster.yaml.partial"
  for chart in "${components[@]}"; do
    HELM=$helm "$charts/../tools/chart-deps.sh" "$chart"
    values_args "$dir" "$chart"
    "$helm" template "$chart" "$charts/$chart" --namespace kube-system "${values[@]}" >>"$dir/cluster.yaml.partial"
  done
  mv "$dir/cluster.yaml.partial" "$dir/cluster.yaml"
  echo "cluster.sh: $dir/cluster.yaml (what helm install will create; it holds keys: mode 0600)"
}

cmd_node() {
  local dir=$1 name=$2 ip=$3 root=${HOST_ROOT:-/}
  [[ -f $dir/cluster.yaml ]] || die "node: no $dir/cluster.yaml (run: cluster.sh template $dir)"
  [[ -f $dir/pki/nodes/$name/kubelet.conf ]] || die "node: $name has no kubelet kubeconfig in $dir/pki"
  install -d -m 0755 "$root/etc/kubernetes"
  install -m 0600 "$dir/pki/nodes/$name/kubelet.conf" "$root/etc/kubernetes/kubelet.conf"
  "$kube_anchor" bootstrap --from "$dir/cluster.yaml" --node-name "$name" --node-ip "$ip" --host-root "$root" \
    ${BOOTSTRAP_ARGS:-}
  pre_start "$root"
}

# pre_start ROOT: the kubelet's pre-start step (a systemd drop-in): a version of etcd or
# kube-apiserver left on trial by a reboot or a kubelet restart goes back to last-known-good
# before the kubelet starts. systemd reads the drop-in at the next boot or daemon-reload.
pre_start() {
  "$kube_anchor" kubelet-pre-start --install --host-root "$1"
  if [[ $1 == / ]] && command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload || true
  fi
}

cmd_join() {
  local dir=$1 name=$2 ip=$3 root=${HOST_ROOT:-/}
  [[ -f $dir/pki/nodes/$name/kubelet.conf ]] || die "join: $name has no kubelet kubeconfig in $dir/pki"
  local kubeconfig releases unsettled release manifest manifests="" taken=()
  kubeconfig=$(admin "$dir")
  releases=$("$helm" list --namespace kube-system --kubeconfig "$kubeconfig" --deployed --short) ||
    die "join: cannot list the releases through $kubeconfig"
  unsettled=$("$helm" list --namespace kube-system --kubeconfig "$kubeconfig" --failed --pending --short) ||
    die "join: cannot list the releases through $kubeconfig"
  # Every manifest is read before anything is written; they hold keys, so they stay in memory
  # and reach bootstrap through a pipe, never a file. Only kube-anchor's releases, each deployed.
  for release in $unsettled $releases; do
    manifest=$("$helm" get manifest "$release" --namespace kube-system --kubeconfig "$kubeconfig") ||
      die "join: helm get manifest $release failed"
    [[ $manifest == *"app.kubernetes.io/name: kube-anchor"* ]] || continue
    if grep -qx -- "$release" <<<"$unsettled"; then
      die "join: release $release is not deployed (helm status $release); finish or roll back its upgrade first"
    fi
    manifests+="$manifest"$'\n---\n'
    taken+=("$release")
  done
  ((${#taken[@]})) || die "join: no kube-anchor release in kube-system"
  echo "cluster.sh: joining $name from the releases ${taken[*]}"
  install -d -m 0755 "$root/etc/kubernetes"
  install -m 0600 "$dir/pki/nodes/$name/kubelet.conf" "$root/etc/kubernetes/kubelet.conf"
  printf '%s\n' "$manifests" |
    "$kube_anchor" bootstrap --join --from - --node-name "$name" --node-ip "$ip" --host-root "$root" ${BOOTSTRAP_ARGS:-}
  pre_start "$root"
}

cmd_install() {
  local dir=$1
  local nodes
  nodes=$(nodes_of "$dir")
  for name in $nodes; do
    # What kubeadm does: the charts' nodeSelector (the kubelet may not set this label itself).
    "$kubectl" --kubeconfig "$(admin "$dir")" label node "$name" node-role.kubernetes.io/control-plane= --overwrite >/dev/null
  done
  for chart in "${components[@]}"; do
    values_args "$dir" "$chart"
    "$helm" install "$chart" "$charts/$chart" --namespace kube-system --kubeconfig "$(admin "$dir")" "${values[@]}" >/dev/null
    echo "cluster.sh: installed $chart"
  done
}

# upgrade_release DIR RELEASE CHART [HELM ARGS...]: helm upgrade, once more after unsticking a
# release a cut-off upgrade left pending. An upgrade whose API server goes away mid-way (an etcd
# rollout restarts the member under that server) can leave its revision pending-upgrade, and
# every later upgrade then fails with "another operation (install/upgrade/rollback) is in
# progress" (helm/helm#4558). What an operator does, done only once the revision has been
# pending for more than a minute (no helm still at work on it: an upgrade without --wait takes
# seconds): roll back to the revision before it, the deployed one, and upgrade again.
upgrade_release() {
  local dir=$1 release=$2 chart=$3 err
  shift 3
  err=$("$helm" upgrade "$release" "$chart" --namespace kube-system --kubeconfig "$(admin "$dir")" "$@" 2>&1 >/dev/null) && return
  if [[ $err == *"another operation (install/upgrade/rollback) is in progress"* ]] && unstick "$dir" "$release"; then
    "$helm" upgrade "$release" "$chart" --namespace kube-system --kubeconfig "$(admin "$dir")" "$@" >/dev/null
    return
  fi
  echo "$err" >&2
  return 1
}

# unstick DIR RELEASE: roll RELEASE back from a revision left pending for more than a minute.
unstick() {
  local dir=$1 release=$2 last status updated revision
  last=$("$helm" history "$release" --namespace kube-system --kubeconfig "$(admin "$dir")" --max 1 -o json 2>/dev/null) || return 1
  status=$(grep -o '"status":"[^"]*"' <<<"$last" | tail -n 1 | cut -d '"' -f 4)
  updated=$(grep -o '"updated":"[^"]*"' <<<"$last" | tail -n 1 | cut -d '"' -f 4)
  revision=$(grep -o '"revision":[0-9]*' <<<"$last" | tail -n 1 | cut -d : -f 2)
  [[ $status == pending-* && ${revision:-1} -gt 1 && -n $updated ]] || return 1
  (($(date +%s) - $(date -d "$updated" +%s) > 60)) || return 1
  echo "cluster.sh: $release revision $revision was left $status at $updated; rolling back to revision $((revision - 1))" >&2
  "$helm" rollback "$release" "$((revision - 1))" --namespace kube-system --kubeconfig "$(admin "$dir")" >/dev/null
}

cmd_upgrade() {
  local dir=$1 chart=$2
  shift 2
  values_args "$dir" "$chart"
  upgrade_release "$dir" "${RELEASE:-$chart}" "$charts/$chart" "${values[@]}" "$@"
  echo "cluster.sh: upgraded ${RELEASE:-$chart}"
}

cmd_rename() {
  local dir=$1 chart=$2 from=$3 to=$4
  shift 4
  [[ $from != "$to" ]] || die "rename: $from and $to are the same release"
  values_args "$dir" "$chart"
  # upgrade --install: a second run after a failed uninstall finds TO installed.
  upgrade_release "$dir" "$to" "$charts/$chart" --install "${values[@]}" "$@"
  "$helm" uninstall "$from" --namespace kube-system --kubeconfig "$(admin "$dir")" --ignore-not-found >/dev/null
  echo "cluster.sh: renamed $from to $to (the kept RBAC objects of $from stay until deleted, see the chart's NOTES)"
}

verb=${1:-}
(($# >= 2)) || die "usage: cluster.sh pki|values|template|node|install|upgrade|rename DIR ..."
shift
case $verb in
  pki) cmd_pki "$@" ;;
  values) cmd_values "$@" ;;
  template) cmd_template "$@" ;;
  node) (($# == 3)) || die "usage: cluster.sh node DIR NAME IP"; cmd_node "$@" ;;
  join) (($# == 3)) || die "usage: cluster.sh join DIR NAME IP"; cmd_join "$@" ;;
  install) cmd_install "$@" ;;
  upgrade) (($# >= 2)) || die "usage: cluster.sh upgrade DIR CHART [HELM ARGS...]"; cmd_upgrade "$@" ;;
  rename) (($# >= 4)) || die "usage: cluster.sh rename DIR CHART FROM TO [HELM ARGS...]"; cmd_rename "$@" ;;
  *) die "unknown verb $verb" ;;
esac
