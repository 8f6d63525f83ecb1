#!/usr/bin/env bash
# Boots a node of the test bed on containerd and runc. Run as PID 1 of a PID and mount namespace
# of its own (`unshare --pid --fork --kill-child --mount-proc`): when the kubelet, which this
# script becomes, dies, the kernel kills containerd, the shims and every container of the node at
# once, and every mount made here (the node's /run, container root filesystems) goes with the
# namespace, as at a power cut.
#
#   tools/containerd-node.sh ROOT RUNTIME_DIR KUBE CGROUP -- KUBELET_COMMAND KUBELET_ARGS...
#
# ROOT becomes the node's `/` (pivot_root): /etc/kubernetes, /var/lib/kubelet,
# /var/lib/containerd, /var/lib/kube-anchor, /var/log are the node's own, kept across reboots;
# /run and /tmp are fresh tmpfs at every boot; the machine's /usr (and the /etc files programs
# need to run) are shared read-only; /proc, /dev and /sys are the namespace's. RUNTIME_DIR
# (containerd, its shim, runc, CNI plugins) is bound read-only at /opt/bin, which leads PATH; its
# entries must be regular files, not links or mounts: runc re-executes itself from an overlayfs
# whose lower layer is the directory of its binary, and overlayfs sees neither. KUBE, the
# multi-call binary of tools/kube, is bound at /opt/kube/kube and runs KUBELET_COMMAND (its
# real kubelet, node-kubelet). containerd reads /etc/containerd/config.toml, the kubelet
# /var/lib/kubelet/config.yaml; the harness writes both.
#
# The kubelet sets six kernel tunables (vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
# kernel.panic_on_oops, kernel.keys.root_maxkeys and root_maxbytes), which are the machine's
# own: the node sees files of its own over them, holding the machine's values at boot, so the
# kubelet reads and writes those and the machine keeps its settings.
#
# The node's cgroup root: the script moves itself into a cgroup named CGROUP below its own in
# every cgroup v1 hierarchy and into a cgroup namespace rooted there, and mounts the hierarchies
# again inside the node, so the cgroups runc makes for containers (cgroupfs driver,
# /k8s.io/<container>) are the node's own: on the machine, <parent>/CGROUP/k8s.io/<container>.
set -euo pipefail
root=$1 bins=$2 kubelet=$3 cgroup=$4
shift 4
[[ ${1-} == -- ]] && shift

if [[ -z ${CONTAINERD_NODE_CGROUP_NS-} ]]; then
  # Read whole before moving: the file changes as the script moves.
  own=$(cat /proc/self/cgroup)
  while IFS=: read -r _ controllers path; do
    [[ -n $controllers ]] || continue # the cgroup v2 entry of a v1 machine
    parent=/sys/fs/cgroup/${controllers#name=}${path%/}
    mkdir -p "$parent/$cgroup"
    if [[ $controllers == cpuset ]]; then
      cat "$parent/cpuset.cpus" >"$parent/$cgroup/cpuset.cpus"
      cat "$parent/cpuset.mems" >"$parent/$cgroup/cpuset.mems"
    fi
    echo $$ >"$parent/$cgroup/cgroup.procs"
  done <<<"$own"
  # Same PID (no fork): the script stays PID 1 of the node.
  CONTAINERD_NODE_CGROUP_NS=1 exec unshare --cgroup "$BASH" "$0" "$root" "$bins" "$kubelet" "$cgroup" -- "$@"
fi

ro_bind() {
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mount -o remount,bind,ro "$2"
}

mount --make-rprivate /
mount --bind "$root" "$root"
ro_bind /usr "$root/usr"
for link in bin sbin lib lib64; do
  [[ -e $root/$link || -L $root/$link ]] || ln -s "usr/$link" "$root/$link"
done
mkdir -p "$root/etc" "$root/proc" "$root/dev" "$root/sys" "$root/run" "$root/tmp" "$root/opt/bin" "$root/var/log"
# What the dynamic loader, name resolution and TLS need; copied (not bound) so the node's /etc
# stays its own.
for file in passwd group hosts resolv.conf nsswitch.conf ld.so.cache ld.so.conf; do
  [[ -f /etc/$file ]] && cp -f "/etc/$file" "$root/etc/$file"
done
for dir in ld.so.conf.d ssl alternatives; do
  [[ -d /etc/$dir ]] && ro_bind "/etc/$dir" "$root/etc/$dir"
done
mount --rbind /proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
# The hierarchies again, mounted inside the cgroup namespace: their root is the node's cgroup.
hierarchies=$(awk '$3 == "cgroup" && $2 ~ "^/sys/fs/cgroup/" {print $2, $4}' /proc/mounts)
mount -t tmpfs -o mode=0755 tmpfs "$root/sys/fs/cgroup"
while read -r mountpoint options; do
  mkdir -p "$root$mountpoint"
  mount -t cgroup -o "$options" cgroup "$root$mountpoint"
done <<<"$hierarchies"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
ro_bind "$bins" "$root/opt/bin"
mkdir -p "$root/opt/kube"
: >>"$root/opt/kube/kube"
mount --bind "$kubelet" "$root/opt/kube/kube"
mkdir -p "$root/run/sysctl"
for tunable in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
  shadow=$root/run/sysctl/${tunable//\//.}
  cat "/proc/sys/$tunable" >"$shadow"
  mount --bind "$shadow" "$root/proc/sys/$tunable"
done

cd "$root"
mkdir -p .old-root
pivot_root . .old-root
cd /
umount -l /.old-root
rmdir /.old-root

export PATH=/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin
containerd --config /etc/containerd/config.toml >>/var/log/containerd.log 2>&1 &
for _ in $(seq 300); do
  [[ -S /run/containerd/containerd.sock ]] && break
  kill -0 $! 2>/dev/null || { echo "containerd exited; /var/log/containerd.log:" >&2; tail -20 /var/log/containerd.log >&2; exit 1; }
  sleep 0.1
done
[[ -S /run/containerd/containerd.sock ]] || { echo "containerd made no socket in 30 s" >&2; exit 1; }
exec /opt/kube/kube "$@"
