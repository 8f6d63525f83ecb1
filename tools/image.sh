#!/usr/bin/env bash
# Builds the kube-anchor container image without a container engine: an OCI image layout and an
# OCI archive, from the release binary and only the shared libraries it links, plus CA
# certificates. The same commit gives the same image digest: one layer made with GNU tar (sorted
# entries, fixed mtimes and owners), assembled by umoci, every timestamp the commit's time.
#
#   tools/image.sh [--binary PATH] [--out DIR] [--tag TAG]
#
# Writes DIR/layout (OCI image layout), DIR/kube-anchor-TAG.oci.tar (skopeo's oci-archive) and
# DIR/kube-anchor-TAG.digest (the manifest digest, sha256:…). Default binary: a fresh
# `cargo build --release --locked`; default DIR: target/image; default TAG: the crate version.
# The files are staged by tools/rootfs.sh (the Containerfile uses it too). Needs umoci, skopeo,
# GNU tar and ldd (Debian: umoci skopeo tar libc-bin ca-certificates).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary= out=$root/target/image tag=
while (($#)); do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) echo "tools/image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { printf 'tools/image.sh: %s\n' "$*" >&2; }
for tool in umoci skopeo tar ldd; do
  command -v "$tool" >/dev/null || { log "needs $tool (apt-get install umoci skopeo tar libc-bin)"; exit 1; }
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
tag=${tag:-$version}
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
# Every timestamp in the image: the commit's time (reproducible), as SOURCE_DATE_EPOCH does.
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
if [[ -z $binary ]]; then
  (cd "$root" && cargo build --release --locked --bin kube-anchor)
  binary=$root/target/release/kube-anchor
fi
[[ -x $binary ]] || { log "$binary: not an executable"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
"$root/tools/rootfs.sh" "$binary" "$rootfs"

tar --create --file "$work/layer.tar" --directory "$rootfs" \
  --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime --format=posix .

rm -rf "$out/layout"
mkdir -p "$out"
layout=$out/layout
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci raw add-layer --image "$layout:$tag" \
  --history.created "$created" --history.created_by "tools/image.sh" "$work/layer.tar"
umoci config --image "$layout:$tag" \
  --created "$created" --author "kube-anchor" \
  --architecture amd64 --os linux \
  --config.user 65532:65532 --config.workingdir / \
  --config.entrypoint /usr/local/bin/kube-anchor --config.cmd --help \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --config.label "org.opencontainers.image.title=kube-anchor" \
  --config.label "org.opencontainers.image.description=Keeps Kubernetes control-plane static pods, and their credentials, on the node" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$commit" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0" \
  --config.label "org.opencontainers.image.created=$created" \
  --no-history
umoci gc --layout "$layout"

digest=$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$layout/index.json" | head -1)
[[ -n $digest ]] || { log "no manifest digest in $layout/index.json"; exit 1; }
archive=$out/kube-anchor-$tag.oci.tar
rm -f "$archive"
skopeo copy --quiet "oci:$layout:$tag" "oci-archive:$archive:$tag"
echo "$digest" >"$out/kube-anchor-$tag.digest"
log "image kube-anchor:$tag $digest ($archive)"
echo "$digest"
