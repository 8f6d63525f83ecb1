#!/usr/bin/env bash
# Stages the kube-anchor image's root filesystem in DIR: the binary without its debug info (it is
# pulled onto every control-plane node; its symbols stay, so a panic's backtrace names functions),
# only the shared libraries it links (and the dynamic loader) at the paths it looks for, CA
# certificates, and a user database with root and nonroot (65532). Used by tools/image.sh and the
# Containerfile, so both ship the same files. The debug info is released beside the image
# (tools/release.sh: kube-anchor.debug, which the binary's .gnu_debuglink names).
#
#   tools/rootfs.sh BINARY DIR
set -euo pipefail
binary=$1 rootfs=$2
ca=/etc/ssl/certs/ca-certificates.crt
[[ -x $binary ]] || { echo "tools/rootfs.sh: $binary: not an executable" >&2; exit 1; }
[[ -f $ca ]] || { echo "tools/rootfs.sh: $ca missing (apt-get install ca-certificates)" >&2; exit 1; }
command -v objcopy >/dev/null || { echo "tools/rootfs.sh: needs objcopy (apt-get install binutils)" >&2; exit 1; }
debug=$(mktemp -d)
trap 'rm -rf "$debug"' EXIT
"$(dirname "${BASH_SOURCE[0]}")/debug-info.sh" "$binary" "$debug/kube-anchor.debug"
mkdir -p "$rootfs/usr/local/bin"
objcopy --strip-debug --add-gnu-debuglink="$debug/kube-anchor.debug" "$binary" "$rootfs/usr/local/bin/kube-anchor"
chmod 0755 "$rootfs/usr/local/bin/kube-anchor"
ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done
install -D -m 0644 "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/:/usr/local/bin/kube-anchor\nnonroot:x:65532:65532:nonroot:/:/usr/local/bin/kube-anchor\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
install -d -m 1777 "$rootfs/tmp"
