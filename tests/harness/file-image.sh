#!/usr/bin/env bash
# Makes an OCI image layout of one static program: one layer holding /<basename of
# PROGRAM>, which is the entrypoint, run as USER. No base image, nothing pulled; fixed
# timestamps, so the same program gives the same digest.
#
#   tests/harness/file-image.sh PROGRAM NAME USER OUTPUT_DIR
#
# NAME (e.g. safewrite.test/pause:1) is recorded in index.json, where `ctr images
# import` reads it (io.containerd.image.name).
set -euo pipefail
[ $# = 4 ] || { echo "usage: $0 PROGRAM NAME USER OUTPUT_DIR" >&2; exit 2; }
program=$1 name=$2 user=$3 out=$4
file=$(basename "$program")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tree" "$work/oci/blobs/sha256"
install -m 0555 "$program" "$work/tree/$file"
tar --create --file "$work/layer.tar" --directory "$work/tree" --format=ustar \
  --numeric-owner --owner=0 --group=0 --mtime=@0 "$file"
gzip -n -9 "$work/layer.tar"
digest() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
layer=$(digest "$work/layer.tar.gz")
diff_id=$(gzip -dc "$work/layer.tar.gz" | sha256sum | cut -d' ' -f1)
cp "$work/layer.tar.gz" "$work/oci/blobs/sha256/$layer"
arch=$(go env GOARCH 2>/dev/null || echo amd64)
jq -n -c --arg diff_id "sha256:$diff_id" --arg arch "$arch" --arg user "$user" \
  --arg entry "/$file" '{architecture: $arch, os: "linux",
    config: {User: $user, Entrypoint: [$entry], WorkingDir: "/"},
    rootfs: {type: "layers", diff_ids: [$diff_id]}}' >"$work/config.json"
config=$(digest "$work/config.json")
cp "$work/config.json" "$work/oci/blobs/sha256/$config"
jq -n -c --arg config "sha256:$config" --argjson config_size "$(size "$work/config.json")" \
  --arg layer "sha256:$layer" --argjson layer_size "$(size "$work/layer.tar.gz")" '{
    schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $layer, size: $layer_size}]}' \
  >"$work/manifest.json"
manifest=$(digest "$work/manifest.json")
cp "$work/manifest.json" "$work/oci/blobs/sha256/$manifest"
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
jq -n -c --arg digest "sha256:$manifest" --argjson size "$(size "$work/manifest.json")" \
  --arg name "$name" --arg arch "$arch" '{schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $digest,
      size: $size, platform: {architecture: $arch, os: "linux"},
      annotations: {"io.containerd.image.name": $name,
                    "org.opencontainers.image.ref.name": ($name | split(":") | last)}}]}' \
  >"$work/oci/index.json"
rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$work/oci" "$out"
