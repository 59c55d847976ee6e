#!/usr/bin/env bash
# Tests a release as its users would take it (docs/releasing.md):
#
#   bash tests/release.sh        # the test command (tests/run-all.sh) runs it
#
# 1. deploy/release.sh makes the release twice, into two directories (with
#    SAFEWRITE_RELEASE_ALLOW_DIRTY=1: the tree under test may hold changes). Every artifact
#    is rebuilt the second time from a fresh copy of the tree (the chart, the wheel and
#    sdist, npm ci + build + pack, mvn package, the Go zips, the image's layer, config,
#    manifest and SBOM); only the static binary comes from cargo's cache, unchanged
#    sources giving the same binary (deploy/image/reproduce.sh, by hand, builds it from nothing in
#    two directories and compares). The two SHA256SUMS must be the same but for the
#    signatures (image/signed/, image/cosign.pub: each run signs with a new key, and
#    ECDSA draws a nonce); each SHA256SUMS must check.
# 2. The signed image is loaded from image/signed/ into a new registry on loopback, where
#    cosign verifies its signature and SBOM attestation with image/cosign.pub.
# 3. Each client is installed from the release into a new project in a temp dir: the wheel
#    into a new virtualenv; the npm tarball into a new npm project; the jar and POM into
#    a new Maven local repository, for a new project depending on it; the Go modules
#    through GOPROXY=file://OUTDIR/goproxy into a new module. Each client README's first
#    example is that project's program.
# 4. The sidecar binary is taken out of the released image's layer, and
#    tests/harness/with-sidecar.sh runs it (SAFEWRITE_BIN) against a real kube-apiserver
#    and etcd; the four examples run against it and must print CREATED or UPDATED (the
#    Go client spells them Created, Updated).
# Nothing but loopback is reached, except that package registries fill the usual caches
# (pip, npm, Maven, Go) the first time. Exits non-zero on any failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
say() { echo "release-test: $*" >&2; }
fail() { echo "release-test: FAIL: $*" >&2; exit 1; }
started=$SECONDS
version=$(tr -d '[:space:]' <VERSION)
work=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-release-test.XXXXXX")
registry_pid=""
cleanup() {
  if [ -n "$registry_pid" ]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- 1. twice, the same bytes ------------------------------------------------------------
out=$work/release-a
again=$work/release-b
t0=$SECONDS
SAFEWRITE_RELEASE_ALLOW_DIRTY=1 bash deploy/release.sh "$version" "$out" >/dev/null || fail "deploy/release.sh failed"
first=$((SECONDS - t0))
t0=$SECONDS
SAFEWRITE_RELEASE_ALLOW_DIRTY=1 bash deploy/release.sh "$version" "$again" >/dev/null || fail "deploy/release.sh failed the second time"
second=$((SECONDS - t0))
(cd "$out" && sha256sum --check --quiet SHA256SUMS) || fail "SHA256SUMS does not check in the first release"
(cd "$again" && sha256sum --check --quiet SHA256SUMS) || fail "SHA256SUMS does not check in the second release"
unsigned() { grep -v -E '  image/(signed/|cosign\.pub$)' "$1/SHA256SUMS"; }
if ! diff <(unsigned "$out") <(unsigned "$again") >"$work/sums.diff"; then
  cat "$work/sums.diff" >&2
  fail "two releases of the same tree differ (above: < first, > second)"
fi
files=$(unsigned "$out" | wc -l)
[ "$files" -ge 15 ] || fail "the release holds only $files files"
image_digest=$(jq -r .image.digest "$out/release.json")
say "released twice (${first}s, ${second}s): the same $files files, image $image_digest, chart $(jq -r .chart.manifest_digest "$out/release.json")"

# --- 2. the signed image, from the release directory -----------------------------------------
supply_tools=$(bash tests/harness/binaries.sh supply | tail -n 1)
mkdir -p "$work/home"
sealed=(env HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9
  https_proxy=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9
  NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
  HOME="$work/home" TUF_ROOT="$work/home/tuf" OTEL_TRACES_EXPORTER=none OTEL_SDK_DISABLED=true)
# shellcheck source=tests/harness/registry.sh
. "$root/tests/harness/registry.sh"
start_registry "$work/registry" "${sealed[@]}" "$supply_tools/registry" || fail "the registry did not start"
cosign=("${sealed[@]}" "$supply_tools/cosign")
ref="$registry/safewrite@$image_digest"
"${cosign[@]}" load --dir "$out/image/signed" --allow-http-registry "$registry/safewrite" >"$work/load.log" 2>&1 ||
  fail "cosign load of image/signed: $(tail -n 5 "$work/load.log")"
verify=(--key "$out/image/cosign.pub" --insecure-ignore-tlog --allow-http-registry)
"${cosign[@]}" verify "${verify[@]}" "$ref" >/dev/null 2>"$work/verify.log" ||
  fail "cosign verify of the released image: $(tail -n 5 "$work/verify.log")"
"${cosign[@]}" verify-attestation "${verify[@]}" --type cyclonedx "$ref" >/dev/null 2>"$work/verify.log" ||
  fail "cosign verify-attestation of the released image: $(tail -n 5 "$work/verify.log")"
kill "$registry_pid" 2>/dev/null || true
wait "$registry_pid" 2>/dev/null || true
registry_pid=""
say "image/signed/ loaded into a new registry: signature and SBOM attestation verify with image/cosign.pub"

# --- 3. each client from the release, in a new project ----------------------------------------
# first_block README LANG: the README's first ```LANG block.
first_block() {
  awk -v open="\`\`\`$2" '!inside && $0 == open { inside = 1; next } inside && /^```/ { exit } inside { print }' "$1"
}
t0=$SECONDS
# Python: a new virtualenv, the wheel (its dependencies from PyPI, through pip's cache).
py=$work/python
mkdir -p "$py"
python3 -m venv "$py/venv" || fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
"$py/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$out"/python/*.whl ||
  fail "pip install of the released wheel failed"
first_block clients/python/README.md python >"$py/main.py"
[ -s "$py/main.py" ] || fail "clients/python/README.md has no python block"

# TypeScript: a new npm project, the tarball (client-node, its peer, from npm's cache),
# compiled as the README's Install section says.
ts=$work/typescript
mkdir -p "$ts"
(
  cd "$ts"
  npm=(npm install --prefer-offline --no-audit --no-fund --loglevel=error)
  pinned() { node -p "require('$root/clients/typescript/package.json').devDependencies['$1']"; }
  npm init -y >/dev/null && npm pkg set type=module
  "${npm[@]}" "$out/npm/safewrite-client-$version.tgz"
  "${npm[@]}" --save-dev "typescript@$(pinned typescript)" "@types/node@$(pinned @types/node)"
  awk '$0 == "<!-- install: tsconfig.json -->" { seen = 1; next }
       seen && !inside && /^```json/ { inside = 1; next } inside && /^```/ { exit } inside { print }' \
    "$root/clients/typescript/README.md" >tsconfig.json
  [ -s tsconfig.json ] || { echo "clients/typescript/README.md has no tsconfig.json block" >&2; exit 1; }
  first_block "$root/clients/typescript/README.md" ts >main.ts
  npx tsc
) >"$work/ts.log" 2>&1 || { cat "$work/ts.log" >&2; fail "the TypeScript project on the released tarball did not build"; }

# Java: the jar and POM installed into a new local repository; the user's repository is a
# read-only source of the other dependencies and plugins (Maven Central the fallback), so
# only the released jar can be the client.
java=$work/java
mkdir -p "$java/src/main/java"
cat >"$java/settings.xml" <<EOF
<settings>
  <localRepository>$java/m2</localRepository>
  <profiles><profile><id>cache</id>
    <repositories><repository><id>cache</id><url>file://$HOME/.m2/repository</url></repository></repositories>
    <pluginRepositories><pluginRepository><id>cache</id><url>file://$HOME/.m2/repository</url></pluginRepository></pluginRepositories>
  </profile></profiles>
  <activeProfiles><activeProfile>cache</activeProfile></activeProfiles>
</settings>
EOF
mvn=(mvn -B -q -s "$java/settings.xml")
jar=$out/java/safewrite-client-$version
(
  cd "$java"
  "${mvn[@]}" org.apache.maven.plugins:maven-install-plugin:3.1.3:install-file -Dfile="$jar.jar" \
    -DpomFile="$jar.pom" -Dsources="$jar-sources.jar" -Djavadoc="$jar-javadoc.jar"
  [ -f "m2/dev/safewrite/safewrite-client/$version/safewrite-client-$version.jar" ] || exit 1
  awk -v marker="<!-- install: pom -->" '$0 == marker { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next } inside { print }' \
    "$root/clients/java/README.md" >pom.xml
  first_block "$root/clients/java/README.md" java >src/main/java/Example.java
  "${mvn[@]}" package
  cmp -s "$jar.jar" "m2/dev/safewrite/safewrite-client/$version/safewrite-client-$version.jar"
) >"$work/java.log" 2>&1 || { cat "$work/java.log" >&2; fail "the Java project on the released jar did not build"; }

# Go: a new module; safewrite.dev/... resolve from the release's file proxy (not in the
# checksum database: GONOSUMDB), the rest from the usual proxy and module cache. The go
# command keeps what it downloads in the module cache and never asks again for a version
# it holds, so the safewrite.dev modules (only ever downloaded from a release's file
# proxy: no public proxy serves them yet) are first removed from it; a separate module
# cache would instead rebuild every dependency (measured: almost 4 minutes).
modcache=$(go env GOMODCACHE)
drop_released() {
  local dir
  for dir in "$modcache/safewrite.dev" "$modcache/cache/download/safewrite.dev"; do
    if [ -d "$dir" ]; then chmod -R u+w "$dir" && rm -rf "$dir"; fi
  done
}
drop_released
gomod=$work/go
mkdir -p "$gomod"
# The go command also keeps an index of each module version's files in its build cache,
# trusting a version never to change; a release made again from a changed tree is the same
# version with other files (measured: a file added since the last run was not compiled),
# so the index is off here (GODEBUG=goindex=0).
goenv=(env GOPROXY="file://$out/goproxy,$(go env GOPROXY)" GONOSUMDB=safewrite.dev GOFLAGS=-mod=mod GOWORK=off GODEBUG=goindex=0)
(
  cd "$gomod"
  go mod init example.com/counter >/dev/null 2>&1
  first_block "$root/clients/go/README.md" go >main.go
  "${goenv[@]}" go get "safewrite.dev/clients/go@v$version"
  "${goenv[@]}" go mod tidy
  "${goenv[@]}" go build -o counter .
  # The ctrl module, as released, compiles against the released client.
  "${goenv[@]}" go get "safewrite.dev/clients/go/ctrl@v$version"
  "${goenv[@]}" go build safewrite.dev/clients/go/ctrl/...
  for m in safewrite.dev/clients/go safewrite.dev/clients/go/ctrl; do
    [ "$("${goenv[@]}" go list -m -f '{{.Version}}' "$m")" = "v$version" ]
  done
) >"$work/go.log" 2>&1 || { cat "$work/go.log" >&2; fail "the Go module on the released zips did not build"; }
# (errexit does not hold inside a subshell on the left of ||: check what it had to make.)
[ -x "$gomod/counter" ] || { cat "$work/go.log" >&2; fail "the Go example did not build on the released zips"; }
drop_released
say "installed from the release into new projects in $((SECONDS - t0))s: wheel (venv), tarball (npm), jar (local repo), zips (file proxy)"

# --- 4. the examples against the released image's binary ---------------------------------------
oci=$work/oci
mkdir -p "$oci/root"
tar -xf "$out/image/safewrite-$version.oci.tar" -C "$oci"
manifest=$(jq -r '.manifests[0].digest' "$oci/index.json")
layer=$(jq -r '.layers[0].digest' "$oci/blobs/sha256/${manifest#sha256:}")
tar -xzf "$oci/blobs/sha256/${layer#sha256:}" -C "$oci/root" safewrite
[ "$("$oci/root/safewrite" --version)" = "safewrite $version" ] || fail "the released image's binary is not $version"

t0=$SECONDS
export PY="$py" TS="$ts" JAVA="$java" GOMOD="$gomod" SETTINGS="$java/settings.xml"
SAFEWRITE_BIN="$oci/root/safewrite" bash tests/harness/with-sidecar.sh bash -c '
  set -euo pipefail
  check() { # NAME OUTPUT
    local last
    last=$(printf "%s\n" "$2" | sed $'"'"'s/\e\[[0-9;]*m//g'"'"' | grep -iE "^(CREATED|UPDATED)\b" | tail -n 1 || true)
    [ -n "$last" ] || { printf "%s\n" "$2" >&2; echo "release-test: FAIL: the $1 example printed no CREATED or UPDATED" >&2; exit 1; }
    echo "release-test: $1 README example: $last" >&2
  }
  check Python "$(cd "$PY" && venv/bin/python main.py 2>&1)"
  check TypeScript "$(cd "$TS" && node main.js 2>&1)"
  check Java "$(cd "$JAVA" && mvn -B -q -s "$SETTINGS" org.codehaus.mojo:exec-maven-plugin:3.6.4:java -Dexec.mainClass=Example 2>&1)"
  check Go "$(cd "$GOMOD" && ./counter 2>&1)"
' || fail "a README example failed against the released sidecar"
say "the four README examples ran against the released image's binary in $((SECONDS - t0))s"
echo "release test passed in $((SECONDS - started))s (releases ${first}s and ${second}s)"
