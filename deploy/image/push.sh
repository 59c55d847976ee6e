#!/usr/bin/env bash
# Pushes an OCI image layout's image (the one deploy/image/build.sh writes) to a registry
# by digest, speaking the OCI distribution API with curl: each blob is uploaded once
# (skipped when the registry has it), then the manifest is put by its digest and, when a
# tag is given, under that tag too. The digest is the layout's: nothing is re-encoded.
#
#   deploy/image/push.sh LAYOUT REGISTRY/REPOSITORY [TAG]
#   e.g. deploy/image/push.sh target/image/oci 127.0.0.1:5000/safewrite "$(cat VERSION)"
#
# The last line of stdout is the pushed reference, REGISTRY/REPOSITORY@sha256:...
# (progress goes to stderr). Speaks plain HTTP to loopback registries (127.0.0.1,
# localhost, [::1]) and HTTPS to any other, without authentication: it is for the
# registry the tests start and for lab registries. For a registry that needs a login, use
# `skopeo copy oci:LAYOUT:TAG docker://REGISTRY/REPOSITORY:TAG`, which keeps the digest
# too (see docs/supply-chain.md).
set -euo pipefail

log() { echo "push: $*" >&2; }
die() { echo "push: $*" >&2; exit 1; }
[ $# -ge 2 ] || die "usage: $0 LAYOUT REGISTRY/REPOSITORY [TAG]"
layout=$1 target=$2 tag=${3:-}
for tool in curl jq; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is needed to push"
done
[ -f "$layout/index.json" ] || die "$layout is not an OCI image layout (no index.json)"
registry=${target%%/*}
repository=${target#*/}
[ "$registry" != "$target" ] && [ -n "$repository" ] || die "expected REGISTRY/REPOSITORY, got '$target'"
case "$registry" in
  127.0.0.1:* | localhost:* | "[::1]":*) base="http://$registry/v2/$repository" ;;
  *) base="https://$registry/v2/$repository" ;;
esac

[ "$(jq '.manifests | length' "$layout/index.json")" = 1 ] ||
  die "$layout/index.json must name one image manifest"
manifest_digest=$(jq -r '.manifests[0].digest' "$layout/index.json")
media_type=$(jq -r '.manifests[0].mediaType' "$layout/index.json")
blob_path() { echo "$layout/blobs/${1%%:*}/${1#*:}"; }
manifest=$(blob_path "$manifest_digest")
[ -f "$manifest" ] || die "manifest $manifest_digest missing from $layout"

# One blob: HEAD, else POST an upload session and PUT the bytes to it (a monolithic upload).
push_blob() {
  local digest=$1 file location code
  file=$(blob_path "$digest")
  [ -f "$file" ] || die "blob $digest missing from $layout"
  code=$(curl -sS -o /dev/null -w '%{http_code}' -I "$base/blobs/$digest")
  if [ "$code" = 200 ]; then
    return 0
  fi
  location=$(curl -sS -o /dev/null -w '%header{location}' -X POST "$base/blobs/uploads/")
  [ -n "$location" ] || die "the registry opened no upload for $digest"
  case "$location" in
    http://* | https://*) ;;
    *) location="${base%%/v2/*}$location" ;;
  esac
  case "$location" in
    *\?*) location="$location&digest=$digest" ;;
    *) location="$location?digest=$digest" ;;
  esac
  code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT \
    -H 'Content-Type: application/octet-stream' --data-binary "@$file" "$location")
  [ "$code" = 201 ] || die "uploading $digest: HTTP $code"
}

for digest in $(jq -r '.config.digest, .layers[].digest' "$manifest"); do
  push_blob "$digest"
done
put_manifest() {
  local reference=$1 code
  code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H "Content-Type: $media_type" \
    --data-binary "@$manifest" "$base/manifests/$reference")
  [ "$code" = 201 ] || die "putting the manifest as $reference: HTTP $code"
}
put_manifest "$manifest_digest"
[ -z "$tag" ] || put_manifest "$tag"
# The registry names the manifest by the digest of the bytes it stored: ours.
stored=$(curl -sS -o /dev/null -w '%header{docker-content-digest}' -I \
  -H "Accept: $media_type" "$base/manifests/$manifest_digest")
[ "$stored" = "$manifest_digest" ] || die "the registry stored $stored, not $manifest_digest"
log "pushed $target@$manifest_digest${tag:+ (tag $tag)}"
echo "$target@$manifest_digest"
