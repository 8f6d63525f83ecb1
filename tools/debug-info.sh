#!/usr/bin/env bash
# Writes the debug info of a kube-anchor binary to OUT: what tools/rootfs.sh strips from the
# image's binary, released as kube-anchor.debug (the name the stripped binary's .gnu_debuglink
# gives; gdb and addr2line find it beside the binary or under /usr/lib/debug).
#
#   tools/debug-info.sh BINARY OUT
set -euo pipefail
binary=$1 out=$2
objcopy --only-keep-debug "$binary" "$out"
chmod 0644 "$out"
