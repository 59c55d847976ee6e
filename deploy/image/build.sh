#!/usr/bin/env bash
# Builds the safewrite container image as an OCI image layout, with no container daemon
# and no image registry: no base image is pulled.
#
#   deploy/image/build.sh
#
# The image is one layer on an empty ("scratch") base:
#   /safewrite                 the release binary, statically linked (glibc, crt-static),
#                              stripped; owned by root, mode 0555
#   /etc/passwd, /etc/group    root and nonroot (65532), so tools show a name
#   /etc/nsswitch.conf         hosts: files dns (the binary's static glibc resolves
#                              kubeconfig and OTLP host names from the kubelet's
#                              /etc/hosts and /etc/resolv.conf; no NSS module is loaded)
# and runs as 65532:65532 with entrypoint ["/safewrite"] and cmd ["serve"], listening on
# loopback (127.0.0.1:50051 for gRPC, 127.0.0.1:9464 for /metrics): the containers of a
# pod share loopback, nothing else reaches it. It writes nothing, so it runs with a
# read-only root filesystem. deploy/image/Containerfile builds the same layout with
# docker or buildah.
#
# Output, under target/image/ (nothing else is written inside the checkout):
#   target/image/oci/          the OCI image layout (index.json names it by the crate's
#                              version), e.g. `skopeo copy oci:target/image/oci:VERSION
#                              docker://REGISTRY/safewrite:VERSION`
#   target/image/safewrite.tar the same layout as one archive, with a docker-style
#                              manifest.json too, for `docker load` / `podman load`
#   target/image/sbom/         the image's SBOM: safewrite.cdx.json (CycloneDX 1.5, by
#                              cargo-cyclonedx from Cargo.lock for the image's target,
#                              without dev- and build-dependencies) and safewrite.spdx.json
#                              (SPDX 2.3, converted from it), both naming the manifest digest
# The last line of stdout is the layout's directory; progress goes to stderr.
#
# The binary is built with `cargo auditable build` (cargo-auditable): the list of crates
# compiled into it, with versions and sources, is embedded in a `.dep-v0` section, so
# scanners (cargo audit bin, syft, trivy, grype) can tell what any copy of it was built
# from. tests/harness/cargo-tools.sh installs cargo-auditable and cargo-cyclonedx (once
# per machine, cached outside the checkout).
#
# With SAFEWRITE_IMAGE_PUSH=REGISTRY/REPOSITORY set, the image is then pushed by digest
# (and tagged with the crate's version) with deploy/image/push.sh; the pushed reference
# goes to stderr, the last line of stdout stays the layout.
#
# Needs: cargo (stable, target x86_64- or aarch64-unknown-linux-gnu, the host's), tar,
# gzip, sha256sum, jq. The static binary is built in its own target directory
# (target/image/cargo), so it never invalidates anyone's `cargo build --release`.
# SOURCE_DATE_EPOCH (default: the last commit's time) sets every timestamp, and the
# build remaps the checkout's and cargo's paths (--remap-path-prefix) out of the binary,
# so the same commit gives the same image digest in any directory (deploy/image/reproduce.sh
# checks it; docs/supply-chain.md says what it takes).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out="$root/target/image"
log() { echo "image: $*" >&2; }
die() { echo "image: $*" >&2; exit 1; }

for tool in cargo rustc tar gzip sha256sum jq readelf; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is needed to build the image"
done

triple=$(rustc -vV | sed -n 's/^host: //p')
case "$triple" in
  x86_64-unknown-linux-gnu) arch=amd64 ;;
  aarch64-unknown-linux-gnu) arch=arm64 ;;
  *) die "unsupported host $triple: build on x86_64 or aarch64 Linux with glibc" ;;
esac
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n 1)
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

# --- the binary ---------------------------------------------------------------------
# crt-static links glibc statically; with an explicit --target the flag applies to the
# binary only, not to build scripts and proc macros (which must stay dynamic). No debug
# info and stripped symbols: 109 MB with the default profile's line tables, about 20 MB
# here.
cargo_tools=$(bash "$root/tests/harness/cargo-tools.sh" cargo-auditable cargo-cyclonedx | tail -n 1)
# Run from a test (tests/harness/node.sh under `cargo test`), the environment carries
# what cargo sets for a crate and its build script (CARGO_MANIFEST_DIR, OUT_DIR and the
# like); build scripts that watch those (ring's watches both) would then see a change
# and rebuild most of the binary, and the next build from a shell would rebuild it back.
# The build runs as from a shell, wherever it is called from.
for var in $(compgen -e); do
  case "$var" in
    CARGO_MANIFEST_* | CARGO_PKG_* | CARGO_CRATE_* | CARGO_PRIMARY_PACKAGE | CARGO_TARGET_TMPDIR | \
      CARGO_BIN_* | CARGO_CFG_* | CARGO_FEATURE_* | CARGO_ENCODED_RUSTFLAGS | CARGO_MAKEFLAGS | \
      OUT_DIR | TARGET | HOST | PROFILE | OPT_LEVEL | DEBUG | NUM_JOBS | RUSTC_LINKER) unset "$var" ;;
  esac
done
log "building the static release binary ($triple; the first build takes minutes)"
started=$SECONDS
# --remap-path-prefix: panic messages and the few paths rustc keeps name the checkout as
# /safewrite and cargo's registry as /cargo, so where the build ran does not change a byte.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
PATH="$cargo_tools:$PATH" \
  RUSTFLAGS="-C target-feature=+crt-static --remap-path-prefix=$root=/safewrite --remap-path-prefix=$cargo_home=/cargo" \
  CARGO_TARGET_DIR="$out/cargo" \
  CARGO_PROFILE_RELEASE_DEBUG=false \
  CARGO_PROFILE_RELEASE_STRIP=symbols \
  nice -n 10 cargo auditable build --quiet --locked --release --target "$triple" --bin safewrite \
  --manifest-path "$root/Cargo.toml"
bin="$out/cargo/$triple/release/safewrite"
log "binary ready in $((SECONDS - started))s"
if readelf -lW "$bin" | grep -q 'Requesting program interpreter'; then
  die "$bin is dynamically linked; the image has no libc to load it with"
fi
if readelf -dW "$bin" | grep -q '(NEEDED)'; then
  die "$bin needs shared libraries: $(readelf -dW "$bin" | grep '(NEEDED)' | tr -s ' ')"
fi

# --- the root filesystem --------------------------------------------------------------
work="$out/staging"
rm -rf "$work"
mkdir -p "$work/tree/etc"
rootfs="$work/tree"
install -m 0555 "$bin" "$rootfs/safewrite"
for file in passwd group nsswitch.conf; do
  install -m 0444 "$root/deploy/image/etc/$file" "$rootfs/etc/$file"
done
chmod 0755 "$rootfs" "$rootfs/etc"

# --- the layer: a reproducible tar (sorted, root-owned, fixed times), gzip -n ----------
(cd "$rootfs" && find . -mindepth 1 | sed 's|^\./||' | LC_ALL=C sort) >"$work/files"
tar --create --file "$work/layer.tar" --directory "$rootfs" --no-recursion \
  --files-from "$work/files" --format=ustar --numeric-owner --owner=0 --group=0 \
  --mtime="@$epoch"
gzip -n -9 -c "$work/layer.tar" >"$work/layer.tar.gz"
sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
diff_id=$(sha "$work/layer.tar")
layer_digest=$(sha "$work/layer.tar.gz")

# --- config, manifest, index ------------------------------------------------------------
jq -n -c --arg created "$created" --arg arch "$arch" --arg version "$version" \
  --arg revision "$revision" --arg diff_id "sha256:$diff_id" '{
    created: $created, architecture: $arch, os: "linux",
    config: {
      User: "65532:65532",
      Env: ["PATH=/", "SAFEWRITE_LISTEN=127.0.0.1:50051", "SAFEWRITE_METRICS_LISTEN=127.0.0.1:9464"],
      Entrypoint: ["/safewrite"],
      Cmd: ["serve"],
      WorkingDir: "/",
      StopSignal: "SIGTERM",
      Labels: {
        "org.opencontainers.image.title": "safewrite",
        "org.opencontainers.image.description": "A gRPC sidecar that makes Kubernetes controller writes safe under concurrency",
        "org.opencontainers.image.version": $version,
        "org.opencontainers.image.revision": $revision,
        "org.opencontainers.image.licenses": "Apache-2.0"
      }
    },
    rootfs: {type: "layers", diff_ids: [$diff_id]},
    history: [{created: $created, created_by: "deploy/image/build.sh: /safewrite (static), /etc/passwd, /etc/group, /etc/nsswitch.conf"}]
  }' >"$work/config.json"
config_digest=$(sha "$work/config.json")
jq -n -c --arg config "sha256:$config_digest" --argjson config_size "$(size "$work/config.json")" \
  --arg layer "sha256:$layer_digest" --argjson layer_size "$(size "$work/layer.tar.gz")" \
  --arg version "$version" --arg revision "$revision" --arg created "$created" '{
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $config_size},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $layer, size: $layer_size}],
    annotations: {
      "org.opencontainers.image.created": $created,
      "org.opencontainers.image.version": $version,
      "org.opencontainers.image.revision": $revision
    }
  }' >"$work/manifest.json"
manifest_digest=$(sha "$work/manifest.json")

layout="$out/oci"
rm -rf "$layout"
mkdir -p "$layout/blobs/sha256"
cp "$work/layer.tar.gz" "$layout/blobs/sha256/$layer_digest"
cp "$work/config.json" "$layout/blobs/sha256/$config_digest"
cp "$work/manifest.json" "$layout/blobs/sha256/$manifest_digest"
printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
jq -n -c --arg digest "sha256:$manifest_digest" --argjson size "$(size "$work/manifest.json")" \
  --arg version "$version" --arg arch "$arch" '{
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{
      mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $digest, size: $size,
      platform: {architecture: $arch, os: "linux"},
      annotations: {"org.opencontainers.image.ref.name": $version}
    }]
  }' >"$layout/index.json"
# What `docker load` reads (docker save writes both this and the OCI files since 25.0).
jq -n -c --arg config "blobs/sha256/$config_digest" --arg layer "blobs/sha256/$layer_digest" \
  --arg tag "safewrite:$version" '[{Config: $config, RepoTags: [$tag], Layers: [$layer]}]' \
  >"$layout/manifest.json"
tar --create --file "$out/safewrite.tar" --directory "$layout" --format=ustar \
  --numeric-owner --owner=0 --group=0 --mtime="@$epoch" --sort=name .
uncompressed=$(size "$work/layer.tar")
rm -rf "$work"

# --- the SBOM ---------------------------------------------------------------------------
# cargo-cyclonedx reads the same resolved graph cargo built from (Cargo.lock, the image's
# target, default features) and writes beside Cargo.toml; the file is moved out at once.
# Its random serial number and wall-clock timestamp are replaced by ones derived from the
# manifest digest and SOURCE_DATE_EPOCH, and the checkout's path in safewrite's own
# references by /safewrite (as in the binary), so the SBOM is as reproducible as the image.
sbom="$out/sbom"
rm -rf "$sbom"
mkdir -p "$sbom"
sbom_name=".safewrite-sbom-$$"
PATH="$cargo_tools:$PATH" cargo cyclonedx --quiet --manifest-path "$root/Cargo.toml" \
  --format json --spec-version 1.5 --target "$triple" --no-build-deps \
  --override-filename "$sbom_name" >&2
mv "$root/$sbom_name.json" "$sbom/raw.cdx.json"
# It writes one beside every crate of the workspace too; the image's binary is the root
# package's, whose SBOM lists those crates among its components.
rm -f "$root"/crates/*/"$sbom_name.json"
serial=$(printf '%s' "${manifest_digest:0:32}" | sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12})$/\1-\2-\3-\4-\5/')
jq --arg serial "urn:uuid:$serial" --arg created "$created" --arg digest "sha256:$manifest_digest" \
  --arg version "$version" --arg root "$root" '
  walk(if type == "string" then split("file://" + $root) | join("file:///safewrite") else . end)
  | .serialNumber = $serial
  | .metadata.timestamp = $created
  | .metadata.properties = ((.metadata.properties // []) + [
      {name: "safewrite:image", value: ("safewrite:" + $version)},
      {name: "safewrite:image-manifest-digest", value: $digest}])' \
  "$sbom/raw.cdx.json" >"$sbom/safewrite.cdx.json"
rm "$sbom/raw.cdx.json"
jq -f "$root/deploy/image/cdx-to-spdx.jq" --arg created "$created" \
  --arg digest "sha256:$manifest_digest" "$sbom/safewrite.cdx.json" >"$sbom/safewrite.spdx.json"
log "SBOM: $(jq '.components | length' "$sbom/safewrite.cdx.json") components, $sbom/safewrite.cdx.json and .spdx.json"

if [ -n "${SAFEWRITE_IMAGE_PUSH:-}" ]; then
  bash "$root/deploy/image/push.sh" "$layout" "$SAFEWRITE_IMAGE_PUSH" "$version" >/dev/null
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
log "image safewrite:$version ($arch), manifest sha256:$manifest_digest"
log "  binary $(mib "$(size "$bin")"); layer $(mib "$(size "$layout/blobs/sha256/$layer_digest")") compressed, $(mib "$uncompressed") uncompressed"
log "  layout $layout, archive $out/safewrite.tar"
echo "$layout"
