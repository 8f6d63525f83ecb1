#!/usr/bin/env bash
# Builds the OCI image of one test component without a container engine, for the containerd
# nodes of the test bed: BINARY at /usr/local/bin/NAME (its entrypoint), the shared libraries it
# links and the dynamic loader, a /tmp. Reproducible: one layer made with GNU tar (sorted
# entries, fixed mtimes and owners), assembled by umoci.
#
#   tools/component-image.sh NAME BINARY LAYOUT
#
# Writes an OCI image layout at LAYOUT with the image tagged `latest`. Needs umoci, GNU tar, ldd.
set -euo pipefail
name=$1 binary=$2 layout=$3
[[ -x $binary ]] || { echo "tools/component-image.sh: $binary: not an executable" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
install -D -m 0755 "$binary" "$rootfs/usr/local/bin/$name"
# ldd fails on a static binary: it then links nothing.
{ ldd "$binary" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
  while read -r lib; do install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"; done
install -d -m 1777 "$rootfs/tmp"
tar --create --file "$work/layer.tar" --directory "$rootfs" \
  --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime .
rm -rf "$layout"
umoci init --layout "$layout"
umoci new --image "$layout:latest"
umoci raw add-layer --image "$layout:latest" --history.created 1970-01-01T00:00:00Z "$work/layer.tar"
umoci config --image "$layout:latest" --created 1970-01-01T00:00:00Z \
  --architecture amd64 --os linux --config.workingdir / \
  --config.entrypoint "/usr/local/bin/$name" \
  --config.env PATH=/usr/local/bin:/usr/bin:/bin --no-history
umoci gc --layout "$layout"
