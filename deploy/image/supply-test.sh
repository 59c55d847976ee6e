#!/usr/bin/env bash
# Tests what a cluster admin's admission policy checks about the image, for real:
#
#   deploy/image/supply-test.sh
#
# 1. The binary in the image (taken out of its layer) carries its dependency list
#    (cargo-auditable): rust-audit-info reads it back; every crate in it is in Cargo.lock
#    at the same version, and it holds every crate `cargo tree` says is compiled into
#    the binary for the image's target.
# 2. The SBOM beside the layout (target/image/sbom/, CycloneDX and SPDX) lists every one of
#    those crates, at Cargo.lock's version and checksum, and names the image's digest.
# 3. A registry (CNCF distribution, built by `tests/harness/binaries.sh supply`) on
#    127.0.0.1 at a free port; deploy/image/build.sh pushes the image to it by digest;
#    cosign signs it with a key made here and attaches the CycloneDX SBOM as an in-toto
#    attestation. cosign then verifies the signature and the attestation from the
#    registry, and the attested SBOM is the one beside the layout.
# 4. A changed image fails: the same tag pushed with a changed manifest, that image with
#    the original's signature copied onto it, and the original checked against another
#    key are each refused by `cosign verify`.
#
# Nothing leaves loopback: cosign keeps no transparency log here (--tlog-upload=false,
# --insecure-ignore-tlog; a release signs keylessly, see docs/supply-chain.md), and cosign
# and the registry run with an HTTP(S) proxy that refuses, so an unexpected outside call
# fails the test instead of reaching out. Exits non-zero on any failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
started=$SECONDS
say() { echo "supply-test: $*" >&2; }
fail() {
  echo "supply-test: FAIL: $*" >&2
  if [ -n "${work:-}" ] && [ -f "$work/registry/registry.log" ]; then
    echo "--- registry log" >&2
    tail -n 20 "$work/registry/registry.log" >&2
  fi
  exit 1
}
for tool in jq curl python3 tar gzip cargo; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is needed"
done

tools=$(bash "$root/tests/harness/binaries.sh" supply | tail -n 1)
tools_ready=$SECONDS
work=$(mktemp -d -t safewrite-supply.XXXXXX)
registry_pid=""
cleanup() {
  if [ -n "$registry_pid" ]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# cosign and the registry run with every outside call sent to a proxy that is not there
# (port 9, closed), so such a call fails; loopback is reached directly. cosign's caches
# (TUF root, keys) go to the temp dir, never the user's.
mkdir -p "$work/home"
sealed=(env HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9
  https_proxy=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9
  NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
  HOME="$work/home" TUF_ROOT="$work/home/tuf" OTEL_TRACES_EXPORTER=none OTEL_SDK_DISABLED=true)

triple=$(rustc -vV | sed -n 's/^host: //p')
# shellcheck source=tests/harness/registry.sh
. "$root/tests/harness/registry.sh"

# --- the registry, first: build.sh pushes to it ----------------------------------------
start_registry "$work/registry" "${sealed[@]}" "$tools/registry" || fail "the registry did not start"
repo="$registry/safewrite"
api="http://$registry/v2/safewrite"
say "registry (distribution $(basename "$(dirname "$(readlink "$tools/registry")")")) on $registry"

build_started=$SECONDS
layout=$(SAFEWRITE_IMAGE_PUSH=$repo bash "$root/deploy/image/build.sh" | tail -n 1)
built=$SECONDS
version=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$layout/index.json")
digest=$(jq -r '.manifests[0].digest' "$layout/index.json")
sbom_dir="$(dirname "$layout")/sbom"

# --- 1. the auditable binary ---------------------------------------------------------------
blob() { echo "$layout/blobs/${1%%:*}/${1#*:}"; }
manifest=$(blob "$digest")
layer=$(blob "$(jq -r '.layers[0].digest' "$manifest")")
mkdir -p "$work/tree"
tar -xzf "$layer" -C "$work/tree" safewrite
"$tools/rust-audit-info" "$work/tree/safewrite" >"$work/audit.json" ||
  fail "rust-audit-info found no dependency list in the image's /safewrite (not built with cargo auditable?)"
# name@version of every package in Cargo.lock, the audited binary, and cargo's own view.
awk '/^\[\[package\]\]/ { name = "" } /^name = / { gsub(/"/, "", $3); name = $3 }
     /^version = / && name != "" { gsub(/"/, "", $3); print name "@" $3 }' \
  "$root/Cargo.lock" | sort -u >"$work/lock"
jq -r '.packages[] | select((.kind // "runtime") == "runtime") | "\(.name)@\(.version)"' \
  "$work/audit.json" | sort -u >"$work/audited"
[ "$(wc -l <"$work/audited")" -gt 100 ] || fail "the embedded list has only $(wc -l <"$work/audited") crates"
for crate in safewrite@"$version" tokio kube-client rustls ring tonic prost; do
  grep -q "^${crate%@*}@" "$work/audited" || fail "$crate is not in the binary's dependency list"
done
missing=$(comm -23 "$work/audited" "$work/lock")
[ -z "$missing" ] || fail "in the binary but not in Cargo.lock: $missing"
# Independently, cargo's view for this target: the crates compiled into the binary
# (normal edges, proc macros left out) must all be in the embedded list. The list may
# hold more: cargo-auditable reads `cargo metadata`'s resolve, which also counts proc
# macros reached by normal edges (async-trait...) and optional dependencies that another
# feature set enables (borsh, of bit-vec); those are printed, not compiled in.
tree() { # EDGES -> name@version per line
  cargo tree --quiet --locked --offline --manifest-path "$root/Cargo.toml" -e "$1" \
    --target "$triple" --prefix none --format '{p}' |
    sed -E 's/ \(.*\)$//; s/^([^ ]+) v/\1@/' | sort -u
}
tree normal,no-proc-macro >"$work/compiled"
not_listed=$(comm -23 "$work/compiled" "$work/audited")
[ -z "$not_listed" ] || fail "compiled in but not in the binary's dependency list: $not_listed"
beyond=$(comm -23 "$work/audited" "$work/compiled" | tr '\n' ' ')
say "auditable: /safewrite lists $(wc -l <"$work/audited") crates at Cargo.lock's versions, all $(wc -l <"$work/compiled") that cargo tree compiles in among them (also listed: $beyond)"

# --- 2. the SBOM -----------------------------------------------------------------------
cdx="$sbom_dir/safewrite.cdx.json"
spdx="$sbom_dir/safewrite.spdx.json"
[ -f "$cdx" ] && [ -f "$spdx" ] || fail "no SBOM beside the layout ($sbom_dir)"
[ "$(jq -r .bomFormat "$cdx")" = CycloneDX ] || fail "$cdx is not CycloneDX"
[ "$(jq -r '.metadata.properties[] | select(.name == "safewrite:image-manifest-digest") | .value' "$cdx")" = "$digest" ] ||
  fail "the SBOM does not name the image's digest $digest"
jq -r '.components[] | "\(.name)@\(.version)"' "$cdx" | sort -u >"$work/sbom"
{ jq -r '.metadata.component | "\(.name)@\(.version)"' "$cdx"; cat "$work/sbom"; } | sort -u >"$work/sbom-all"
not_listed=$(comm -23 "$work/audited" "$work/sbom-all")
[ -z "$not_listed" ] || fail "in the binary's dependency list but not in the SBOM: $not_listed"
extra=$(comm -23 "$work/sbom" "$work/lock")
[ -z "$extra" ] || fail "in the SBOM but not in Cargo.lock: $extra"
# Beyond the crates compiled in, the SBOM lists (from the same `cargo metadata` resolve as
# the embedded list) the proc macros that run at compile time and the optional
# dependencies another feature set would enable: counted, not failed.
build_time=$(comm -23 "$work/sbom-all" "$work/compiled" | wc -l)
# Checksums: each component's SHA-256 is Cargo.lock's.
awk '/^\[\[package\]\]/ { name = ""; version = "" } /^name = / { gsub(/"/, "", $3); name = $3 }
     /^version = / { gsub(/"/, "", $3); version = $3 }
     /^checksum = / { gsub(/"/, "", $3); print name "@" version " " $3 }' "$root/Cargo.lock" |
  sort -u >"$work/lock-sums"
jq -r '.components[] | "\(.name)@\(.version) \(.hashes[]? | select(.alg == "SHA-256") | .content)"' "$cdx" |
  sort -u >"$work/sbom-sums"
bad_sums=$(comm -23 "$work/sbom-sums" "$work/lock-sums")
[ -z "$bad_sums" ] || fail "SBOM checksums that are not Cargo.lock's: $bad_sums"
[ -s "$work/sbom-sums" ] || fail "the SBOM has no checksums"
[ "$(jq -r .spdxVersion "$spdx")" = SPDX-2.3 ] || fail "$spdx is not SPDX 2.3"
[ "$(jq '.packages | length' "$spdx")" = "$(($(jq '.components | length' "$cdx") + 1))" ] ||
  fail "the SPDX file has not the CycloneDX file's packages"
components=$(jq '.components | length' "$cdx")
say "SBOM: $components components (+ safewrite): the $(($(wc -l <"$work/compiled") - 1)) crates compiled in and $build_time more from the resolve (proc macros run at compile time, borsh); checksums from Cargo.lock; SPDX the same"

# --- 3. pushed by digest, signed, attested, verified from the registry ---------------------
[ "$(curl -s -o /dev/null -w '%header{docker-content-digest}' -I \
  -H 'Accept: application/vnd.oci.image.manifest.v1+json' "$api/manifests/$version" |
  tr -d '\r')" = "$digest" ] || fail "the registry's $version is not $digest"
ref="$repo@$digest"
cosign=("${sealed[@]}" COSIGN_PASSWORD=safewrite-test COSIGN_YES=true "$tools/cosign")
(cd "$work" && "${cosign[@]}" generate-key-pair >/dev/null 2>&1) || fail "cosign generate-key-pair"
offline=(--allow-http-registry)
"${cosign[@]}" sign --key "$work/cosign.key" --tlog-upload=false "${offline[@]}" "$ref" \
  >"$work/sign.log" 2>&1 || fail "cosign sign: $(tail -n 5 "$work/sign.log")"
"${cosign[@]}" attest --key "$work/cosign.key" --tlog-upload=false "${offline[@]}" \
  --type cyclonedx --predicate "$cdx" "$ref" >"$work/attest.log" 2>&1 ||
  fail "cosign attest: $(tail -n 5 "$work/attest.log")"
verify=("${cosign[@]}" verify --key "$work/cosign.pub" --insecure-ignore-tlog "${offline[@]}" --output json)
"${verify[@]}" "$ref" >"$work/verified.json" 2>"$work/verify.log" ||
  fail "cosign verify: $(tail -n 5 "$work/verify.log")"
[ "$(jq -r '.[0].critical.image["docker-manifest-digest"]' "$work/verified.json")" = "$digest" ] ||
  fail "the verified signature does not name $digest"
"${cosign[@]}" verify-attestation --key "$work/cosign.pub" --insecure-ignore-tlog "${offline[@]}" \
  --type cyclonedx "$ref" >"$work/attestation.json" 2>"$work/verify-att.log" ||
  fail "cosign verify-attestation: $(tail -n 5 "$work/verify-att.log")"
statement=$(head -n 1 "$work/attestation.json" | jq -c '.payload | @base64d | fromjson')
[ "$(jq -r '.subject[0].digest.sha256' <<<"$statement")" = "${digest#sha256:}" ] ||
  fail "the attestation's subject is not $digest"
[ "$(jq -r .predicateType <<<"$statement")" = https://cyclonedx.org/bom ] ||
  fail "the attestation is not a CycloneDX one: $(jq -r .predicateType <<<"$statement")"
[ "$(jq -S -c .predicate <<<"$statement" | sha256sum)" = "$(jq -S -c . "$cdx" | sha256sum)" ] ||
  fail "the attested SBOM is not target/image/sbom/safewrite.cdx.json"
say "pushed $ref; signed and attested (CycloneDX); cosign verify and verify-attestation pass from the registry"

# --- 4. a changed image fails --------------------------------------------------------------
# The same image with one more manifest annotation: a different digest, same blobs.
changed="$work/changed"
cp -r "$layout" "$changed"
jq -c '.annotations["org.opencontainers.image.description"] = "changed"' "$manifest" >"$work/m.json"
changed_digest="sha256:$(sha256sum "$work/m.json" | cut -d' ' -f1)"
mv "$work/m.json" "$changed/blobs/sha256/${changed_digest#sha256:}"
jq -c --arg d "$changed_digest" --argjson s "$(stat -c %s "$changed/blobs/sha256/${changed_digest#sha256:}")" \
  '.manifests[0].digest = $d | .manifests[0].size = $s' "$layout/index.json" >"$changed/index.json"
bash "$root/deploy/image/push.sh" "$changed" "$repo" "$version" >/dev/null 2>"$work/push.log" ||
  fail "pushing the changed image: $(cat "$work/push.log")"
if "${verify[@]}" "$repo:$version" >/dev/null 2>"$work/v1.log"; then
  fail "cosign verify accepted the tag $version after it was moved to a changed image"
fi
grep -qi 'no signatures found\|no matching signatures' "$work/v1.log" ||
  fail "verify of the moved tag failed for another reason: $(tail -n 3 "$work/v1.log")"
# The original's signature copied onto the changed image: its payload names the original.
sig_manifest=$(curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "$api/manifests/sha256-${digest#sha256:}.sig") || fail "no signature manifest in the registry"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT \
  -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary "$sig_manifest" \
  "$api/manifests/sha256-${changed_digest#sha256:}.sig")
[ "$code" = 201 ] || fail "copying the signature: HTTP $code"
if "${verify[@]}" "$repo@$changed_digest" >/dev/null 2>"$work/v2.log"; then
  fail "cosign verify accepted a changed image carrying the original's signature"
fi
grep -qi 'no matching signatures' "$work/v2.log" ||
  fail "verify of the changed image failed for another reason: $(tail -n 3 "$work/v2.log")"
# The original against a key that did not sign it.
mkdir -p "$work/other"
(cd "$work/other" && "${cosign[@]}" generate-key-pair >/dev/null 2>&1) || fail "cosign generate-key-pair"
if "${cosign[@]}" verify --key "$work/other/cosign.pub" --insecure-ignore-tlog "${offline[@]}" "$ref" \
  >/dev/null 2>"$work/v3.log"; then
  fail "cosign verify accepted the image with a key that did not sign it"
fi
"${verify[@]}" "$ref" >/dev/null 2>&1 || fail "the original no longer verifies by digest"
say "changed image refused: moved tag (no signature), copied signature (digest mismatch), other key"
echo "supply-chain test passed in $((SECONDS - started))s (tools $((tools_ready - started))s, build and push $((built - build_started))s)"
