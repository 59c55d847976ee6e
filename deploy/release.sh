#!/usr/bin/env bash
# Makes a release of safewrite, offline, from a clean tree: every artifact of the one
# version, pushed to a registry on loopback and verified from it (docs/releasing.md).
#
#   bash deploy/release.sh VERSION [OUTDIR]        # OUTDIR: target/release-VERSION
#   bash deploy/release.sh --tag VERSION [OUTDIR]  # and tag HEAD as Go and the image expect
#
# VERSION must be the VERSION file's (deploy/version.sh set X.Y.Z changes it everywhere).
# The tree must be clean (SAFEWRITE_RELEASE_ALLOW_DIRTY=1, for tests, releases the working
# tree's tracked and untracked files as they are). Every package is built from a copy of
# the tree whose files all carry the last commit's time (SOURCE_DATE_EPOCH), so the same
# commit gives the same bytes. OUTDIR gets:
#   image/safewrite-VERSION.oci.tar  the static image (deploy/image/build.sh), OCI layout
#   image/safewrite-VERSION.{cdx,spdx}.json  its SBOM
#   image/signed/                    the image with its cosign signature and CycloneDX
#                                    attestation, as pulled back (`cosign save`; an OCI
#                                    layout; `cosign load` pushes it anywhere)
#   image/cosign.pub                 the key they verify with
#   chart/safewrite-VERSION.tgz      the Helm chart (helm package)
#   python/                          wheel and sdist (python -m build)
#   npm/safewrite-client-VERSION.tgz the TypeScript package (npm pack)
#   java/                            jar, sources jar, javadoc jar and POM (mvn -Prelease)
#   goproxy/                         safewrite.dev/clients/go and .../ctrl as the Go module
#                                    proxy serves them (GOPROXY=file://OUTDIR/goproxy)
#   release.json, RELEASE_NOTES.md, SHA256SUMS
# The image is signed with $SAFEWRITE_COSIGN_KEY (a cosign key file; COSIGN_PASSWORD its
# password) or, without one, a key made for this run whose public half is image/cosign.pub.
# Signatures are not reproducible (ECDSA draws a nonce); everything else is.
#
# Needs what the parts need: cargo, go, python3 (3.9+, venv), node and npm, mvn and a JDK
# 17+, jq, curl, tar, gzip, sha256sum; helm, cosign and the registry come from
# tests/harness/binaries.sh (built once per machine). Python's build tools are installed
# once into a virtualenv in the user's cache; npm, Maven and Go use their usual caches.
# Nothing is sent anywhere but to loopback (package registries only fill those caches).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { echo "release: $*" >&2; }
die() { echo "release: $*" >&2; exit 1; }

tag=0
if [ "${1:-}" = --tag ]; then tag=1; shift; fi
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: bash deploy/release.sh [--tag] VERSION [OUTDIR]"
version=$1
[ -f "$root/VERSION" ] || die "no VERSION file at the repository's root"
current=$(tr -d '[:space:]' <"$root/VERSION")
[ "$version" = "$current" ] ||
  die "asked for $version, but VERSION says $current: run 'bash deploy/version.sh set $version' and commit it first"
for tool in git cargo rustc go python3 node npm mvn jq curl tar gzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is needed to make a release"
done
out=${2:-$root/target/release-$version}
mkdir -p "$out"
out=$(cd "$out" && pwd)

cd "$root"
dirty=$(git status --porcelain --untracked-files=normal)
if [ -n "$dirty" ]; then
  if [ "${SAFEWRITE_RELEASE_ALLOW_DIRTY:-0}" = 1 ]; then
    say "the tree has changes; releasing them as they are (SAFEWRITE_RELEASE_ALLOW_DIRTY=1)"
  else
    die "the tree has uncommitted changes; commit or stash them (git status), then run again:
$dirty"
  fi
fi
[ "$tag" = 0 ] || [ -z "$dirty" ] || die "--tag tags a commit: it needs a clean tree"
bash deploy/version.sh check >&2 || die "the version is not the same everywhere: run 'bash deploy/version.sh set $version'"

commit=$(git rev-parse HEAD)
# The image is built with SOURCE_DATE_EPOCH only when the caller set it: build.sh takes
# the same time from git without it, and the cc crate's build scripts watch the variable,
# so its coming and going would rebuild most of the binary (about ten minutes) each time
# between the test command's image build and this one.
image_env=(env)
[ -n "${SOURCE_DATE_EPOCH:-}" ] || image_env=(env -u SOURCE_DATE_EPOCH)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
stamp=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
started=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-release.XXXXXX")
registry_pid=""
cleanup() {
  if [ -n "$registry_pid" ]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
# A new OUTDIR each time: nothing of an earlier run is kept or listed. A directory that
# holds something else is left alone.
if [ -n "$(ls -A "$out")" ]; then
  [ -f "$out/release.json" ] || die "$out is not empty and holds no earlier release (no release.json): name another OUTDIR"
  find "$out" -mindepth 1 -delete
fi
mkdir -p "$out"/{image,chart,python,npm,java,goproxy}
timing=()
mark() { timing+=("$1 $(($SECONDS - part_started))s"); part_started=$SECONDS; }
part_started=$SECONDS

# --- the tree to build from -----------------------------------------------------------------
# A copy of the committed files (or, when allowed, the working tree's), every file dated
# SOURCE_DATE_EPOCH: archives that keep file times (the chart, the sdist) are the same.
src="$work/src"
mkdir -p "$src"
if [ -z "$dirty" ]; then
  git archive --format=tar HEAD | tar -xf - -C "$src"
else
  git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done | tar --null -T - -cf - | tar -xf - -C "$src"
fi
find "$src" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# --- the image, its SBOM ---------------------------------------------------------------------
# deploy/image/build.sh builds in the checkout's target/image (its cargo cache is there);
# the image depends on nothing the tree copy has that the checkout has not.
say "image (deploy/image/build.sh)"
layout=$("${image_env[@]}" bash deploy/image/build.sh | tail -n 1)
image_digest=$(jq -r '.manifests[0].digest' "$layout/index.json")
[ "$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$layout/index.json")" = "$version" ] ||
  die "the image is not named $version (rebuild: deploy/image/build.sh)"
cp "$root/target/image/safewrite.tar" "$out/image/safewrite-$version.oci.tar"
cp "$root/target/image/sbom/safewrite.cdx.json" "$out/image/safewrite-$version.cdx.json"
cp "$root/target/image/sbom/safewrite.spdx.json" "$out/image/safewrite-$version.spdx.json"
mark image

# --- the chart -------------------------------------------------------------------------------
deploy_tools=$(bash tests/harness/binaries.sh deploy | tail -n 1)
supply_tools=$(bash tests/harness/binaries.sh supply | tail -n 1)
# helm, cosign and the registry: every outside call goes to a proxy that is not there
# (port 9), so it fails instead of leaving the machine; their config and caches go to the
# temp dir, never the user's.
mkdir -p "$work/home"
sealed=(env HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9
  https_proxy=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9
  NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
  HOME="$work/home" XDG_CONFIG_HOME="$work/home/.config" XDG_CACHE_HOME="$work/home/.cache"
  XDG_DATA_HOME="$work/home/.local" TUF_ROOT="$work/home/tuf" OTEL_TRACES_EXPORTER=none OTEL_SDK_DISABLED=true)
helm=("${sealed[@]}" "$deploy_tools/helm")
"${helm[@]}" package "$src/deploy/helm/safewrite" --destination "$out/chart" >/dev/null
chart="$out/chart/safewrite-$version.tgz"
[ -f "$chart" ] || die "helm package wrote no $chart (is the chart's version $version?)"
mark chart

# --- Python: wheel and sdist -----------------------------------------------------------------
# The build tools, pinned, in a virtualenv made once in the user's cache; --no-isolation
# uses them instead of fetching a build environment each time.
python=${PYTHON:-python3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/safewrite
mkdir -p "$cache"
build_tools="build==1.6.1 setuptools==84.2.1"
venv="$cache/venv-release-$({ echo "$build_tools"; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)"
if [ ! -f "$venv/.complete" ]; then
  say "python: making $venv ($build_tools)"
  rm -rf "$venv"
  "$python" -m venv "$venv" || die "'$python -m venv' failed (on Debian: apt-get install python3-venv)"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $build_tools ||
    die "could not install $build_tools into $venv"
  touch "$venv/.complete"
fi
say "python (python -m build)"
"$venv/bin/python" -m build --no-isolation --sdist --wheel --outdir "$out/python" "$src/clients/python" \
  >"$work/python.log" 2>&1 || { tail -n 30 "$work/python.log" >&2; die "python -m build failed"; }
# setuptools dates the files it writes into the sdist (PKG-INFO, the egg-info) and its
# gzip header with the time of the build: written again, entries sorted by name, every
# time clamped to SOURCE_DATE_EPOCH and a gzip header without one.
for sdist in "$out"/python/*.tar.gz; do
  python3 - "$sdist" "$SOURCE_DATE_EPOCH" <<'PY' || die "could not normalise $sdist"
import gzip, io, sys, tarfile
path, epoch = sys.argv[1], int(sys.argv[2])
with tarfile.open(path) as t:
    entries = [(m, t.extractfile(m).read() if m.isfile() else None) for m in t.getmembers()]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
    for m, data in sorted(entries, key=lambda e: e[0].name):
        m.mtime = min(int(m.mtime), epoch)
        m.pax_headers = {k: v for k, v in m.pax_headers.items() if k not in ("mtime", "atime", "ctime")}
        m.uid = m.gid = 0
        m.uname = m.gname = "root"
        out.addfile(m, io.BytesIO(data) if data is not None else None)
with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as z:
    z.write(buf.getvalue())
PY
done
ls "$out"/python/*-"$version"-*.whl "$out"/python/*-"$version".tar.gz >/dev/null 2>&1 ||
  die "python -m build made no wheel and sdist of $version"
mark python

# --- TypeScript: npm pack --------------------------------------------------------------------
say "typescript (npm ci, npm run build, npm pack)"
(
  cd "$src/clients/typescript"
  npm ci --prefer-offline --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1 ||
    { tail -n 30 "$work/npm.log" >&2; exit 1; }
  npm run --silent build >>"$work/npm.log" 2>&1 || { tail -n 30 "$work/npm.log" >&2; exit 1; }
  npm pack --silent --pack-destination "$out/npm" >/dev/null
) || die "the TypeScript package failed to build (log above)"
[ -f "$out/npm/safewrite-client-$version.tgz" ] || die "npm pack made no safewrite-client-$version.tgz"
mark typescript

# --- Java: jar, sources, javadoc, POM --------------------------------------------------------
say "java (mvn -Prelease package)"
(
  cd "$src/clients/java"
  mvn -B -q -Prelease -DskipTests -Dproject.build.outputTimestamp="$SOURCE_DATE_EPOCH" package \
    >"$work/mvn.log" 2>&1 || { tail -n 40 "$work/mvn.log" >&2; exit 1; }
) || die "the Java package failed to build (log above)"
for suffix in .jar -sources.jar -javadoc.jar; do
  cp "$src/clients/java/target/safewrite-client-$version$suffix" "$out/java/" ||
    die "mvn made no safewrite-client-$version$suffix"
done
cp "$src/clients/java/pom.xml" "$out/java/safewrite-client-$version.pom"
mark java

# --- Go: the modules as the proxy serves them ------------------------------------------------
say "go (deploy/release/gozip: safewrite.dev/clients/go and .../ctrl)"
(cd "$src/deploy/release/gozip" && go build -trimpath -o "$work/gozip" .) || die "could not build deploy/release/gozip"
grep -qE "^[[:space:]]*safewrite\.dev/clients/go v$version\$" "$src/clients/go/ctrl/go.mod" ||
  die "clients/go/ctrl/go.mod must require safewrite.dev/clients/go v$version (bash deploy/version.sh set $version)"
for dir in clients/go clients/go/ctrl; do
  "$work/gozip" -dir "$src/$dir" -version "v$version" -time "$stamp" -out "$out/goproxy" >/dev/null ||
    die "gozip failed for $dir"
done
go_tags=("clients/go/v$version" "clients/go/ctrl/v$version")
mark go

# --- the registry: push, sign, attest, verify -------------------------------------------------
# shellcheck source=tests/harness/registry.sh
. "$root/tests/harness/registry.sh"
start_registry "$work/registry" "${sealed[@]}" "$supply_tools/registry" || die "the registry did not start"
say "registry on $registry"

ref=$(bash deploy/image/push.sh "$layout" "$registry/safewrite" "$version" 2>/dev/null | tail -n 1)
[ "$ref" = "$registry/safewrite@$image_digest" ] || die "pushed $ref, expected $registry/safewrite@$image_digest"
cosign=("${sealed[@]}" COSIGN_YES=true "$supply_tools/cosign")
if [ -n "${SAFEWRITE_COSIGN_KEY:-}" ]; then
  [ -f "$SAFEWRITE_COSIGN_KEY" ] || die "SAFEWRITE_COSIGN_KEY=$SAFEWRITE_COSIGN_KEY is not a file"
  key=$SAFEWRITE_COSIGN_KEY
  "${cosign[@]}" public-key --key "$key" --outfile "$out/image/cosign.pub" >/dev/null 2>&1 ||
    die "cosign could not read $key (is COSIGN_PASSWORD its password?)"
else
  COSIGN_PASSWORD=$(head -c 24 /dev/urandom | base64)
  export COSIGN_PASSWORD
  (cd "$work" && "${cosign[@]}" generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair failed"
  key="$work/cosign.key"
  cp "$work/cosign.pub" "$out/image/cosign.pub"
fi
offline=(--allow-http-registry)
"${cosign[@]}" sign --key "$key" --tlog-upload=false "${offline[@]}" "$ref" >"$work/sign.log" 2>&1 ||
  die "cosign sign: $(tail -n 5 "$work/sign.log")"
"${cosign[@]}" attest --key "$key" --tlog-upload=false "${offline[@]}" --type cyclonedx \
  --predicate "$out/image/safewrite-$version.cdx.json" "$ref" >"$work/attest.log" 2>&1 ||
  die "cosign attest: $(tail -n 5 "$work/attest.log")"
verify=(--key "$out/image/cosign.pub" --insecure-ignore-tlog "${offline[@]}")
"${cosign[@]}" verify "${verify[@]}" --output json "$ref" >"$work/verified.json" 2>"$work/verify.log" ||
  die "cosign verify: $(tail -n 5 "$work/verify.log")"
[ "$(jq -r '.[0].critical.image["docker-manifest-digest"]' "$work/verified.json")" = "$image_digest" ] ||
  die "the verified signature does not name $image_digest"
"${cosign[@]}" verify-attestation "${verify[@]}" --type cyclonedx "$ref" >"$work/attestation.json" \
  2>"$work/verify-att.log" || die "cosign verify-attestation: $(tail -n 5 "$work/verify-att.log")"
statement=$(head -n 1 "$work/attestation.json" | jq -c '.payload | @base64d | fromjson')
[ "$(jq -r '.subject[0].digest.sha256' <<<"$statement")" = "${image_digest#sha256:}" ] ||
  die "the attestation's subject is not $image_digest"
[ "$(jq -S -c .predicate <<<"$statement" | sha256sum)" = "$(jq -S -c . "$out/image/safewrite-$version.cdx.json" | sha256sum)" ] ||
  die "the attested SBOM is not the release's"
"${cosign[@]}" save --dir "$out/image/signed" "${offline[@]}" "$ref" >"$work/save.log" 2>&1 ||
  die "cosign save: $(tail -n 5 "$work/save.log")"
say "image $ref: signed, attested, verified from the registry"

# The chart as an OCI artifact, pulled back: the same bytes.
"${helm[@]}" push "$chart" "oci://$registry/charts" --plain-http >"$work/helm-push.log" 2>&1 ||
  die "helm push: $(tail -n 5 "$work/helm-push.log")"
pushed_digest=$(sed -n 's/^Digest: //p' "$work/helm-push.log" | tr -d '[:space:]')
[ -n "$pushed_digest" ] || die "helm push printed no digest: $(cat "$work/helm-push.log")"
# helm dates the manifest it pushes (annotation org.opencontainers.image.created, the time
# of the push), so each push would have its own digest. The same manifest, dated by the
# commit, is put under the version's tag instead: same config and layer, one digest per
# commit.
oci_manifest=application/vnd.oci.image.manifest.v1+json
chart_api="http://$registry/v2/charts/safewrite"
curl -fsS -H "Accept: $oci_manifest" "$chart_api/manifests/$pushed_digest" |
  jq -c --arg created "$stamp" '.annotations["org.opencontainers.image.created"] = $created'     >"$work/chart-manifest.json" || die "could not read the chart's manifest back"
code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H "Content-Type: $oci_manifest"   --data-binary "@$work/chart-manifest.json" "$chart_api/manifests/$version")
[ "$code" = 201 ] || die "putting the chart's dated manifest: HTTP $code"
chart_digest="sha256:$(sha256sum "$work/chart-manifest.json" | cut -d' ' -f1)"
[ "$(curl -sS -o /dev/null -w '%header{docker-content-digest}' -I -H "Accept: $oci_manifest" \
  "$chart_api/manifests/$version" | tr -d '\r')" = "$chart_digest" ] ||
  die "the registry's chart $version is not $chart_digest"
mkdir -p "$work/pulled"
"${helm[@]}" pull "oci://$registry/charts/safewrite" --version "$version" --plain-http \
  --destination "$work/pulled" >"$work/helm-pull.log" 2>&1 || die "helm pull: $(tail -n 5 "$work/helm-pull.log")"
cmp -s "$chart" "$work/pulled/safewrite-$version.tgz" || die "the chart pulled back is not the one pushed"
chart_layer=$(jq -r '.layers[0].digest' "$work/chart-manifest.json")
[ "$chart_layer" = "sha256:$(sha256sum "$chart" | cut -d' ' -f1)" ] ||
  die "the chart's manifest names layer $chart_layer, not the packaged chart"
say "chart oci://$registry/charts/safewrite:$version@$chart_digest: pulled back, same bytes"
mark registry

# --- tags --------------------------------------------------------------------------------------
tags=("v$version" "${go_tags[@]}")
if [ "$tag" = 1 ]; then
  for t in "${tags[@]}"; do
    git tag -a "$t" -m "safewrite $version" "$commit" || die "could not create tag $t (does it exist already?)"
  done
  say "tagged $commit: ${tags[*]} (push them: git push origin ${tags[*]})"
fi

# --- release.json, notes, sums -------------------------------------------------------------------
jq -n --arg version "$version" --arg commit "$commit" --arg created "$stamp" \
  --arg image "$image_digest" --arg chart "$chart_digest" --arg chart_tgz "${chart_layer}" \
  --args '{version: $version, commit: $commit, created: $created,
    image: {name: "safewrite", tag: $version, digest: $image},
    chart: {name: "safewrite", version: $version, manifest_digest: $chart, archive_digest: $chart_tgz},
    go_modules: ["safewrite.dev/clients/go", "safewrite.dev/clients/go/ctrl"],
    tags: $ARGS.positional}' "${tags[@]}" >"$out/release.json"

section() { # FILE TITLE: the "## VERSION" section of a changelog, under TITLE
  awk -v v="## $version" '$0 == v { on = 1; next } on && /^## / { exit } on' "$1" >"$work/section"
  [ -s "$work/section" ] || die "$1 has no '## $version' section: write it before releasing"
  printf '## %s\n' "$2"
  cat "$work/section"
  echo
}
{
  printf '# safewrite %s\n\n' "$version"
  printf 'Commit %s, %s. How this release was made and how to check it: docs/releasing.md.\n\n' "$commit" "$stamp"
  printf '| artifact | digest |\n|---|---|\n'
  printf '| image `safewrite:%s` (manifest) | `%s` |\n' "$version" "$image_digest"
  printf '| Helm chart `safewrite` %s (OCI manifest) | `%s` |\n' "$version" "$chart_digest"
  printf '| Helm chart archive `safewrite-%s.tgz` | `%s` |\n\n' "$version" "$chart_layer"
  printf 'Tags (on %s): %s. The Go modules, in subdirectories, are versioned by `clients/go/v%s` and `clients/go/ctrl/v%s`.\n\n' \
    "${commit:0:12}" "$(printf '`%s` ' "${tags[@]}" | sed 's/ $//')" "$version" "$version"
  printf 'Every file and its SHA-256: SHA256SUMS.\n\n'
  section CHANGELOG.md "The sidecar, its image and its Helm chart"
  section clients/python/CHANGELOG.md "Python client (safewrite-client)"
  section clients/go/CHANGELOG.md "Go client (safewrite.dev/clients/go)"
  section clients/typescript/CHANGELOG.md "TypeScript client (@safewrite/client)"
  section clients/java/CHANGELOG.md "Java client (dev.safewrite:safewrite-client)"
} >"$out/RELEASE_NOTES.md"

(cd "$out" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort | xargs -d '\n' sha256sum >SHA256SUMS)
mark notes
say "done in $((SECONDS - started))s ($(printf '%s, ' "${timing[@]}" | sed 's/, $//'))"
say "image $image_digest, chart $chart_digest; tags ${tags[*]}"
echo "$out"
