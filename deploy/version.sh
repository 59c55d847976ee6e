#!/usr/bin/env bash
# The product's one version: VERSION at the repository's root is its source, and every
# artifact carries it (docs/releasing.md).
#
#   bash deploy/version.sh check        # every place agrees with VERSION (the test command runs it)
#   bash deploy/version.sh set X.Y.Z    # writes X.Y.Z into VERSION and every place below
#
# The places: the Rust workspace (so `safewrite --version`, the image's labels and the
# injection's default image, which read it when they are built), the Helm chart (version,
# appVersion, the sidecar's image tag), the plain, kustomize and injection manifests'
# image references, the Containerfile's label, the four clients' package versions (the Go
# client's Version constant and its next tag in clients/go/test.sh) and the image
# references in the docs. `check` also needs a `## X.Y.Z` section in CHANGELOG.md and in
# each client's CHANGELOG.md, and, when they are built, the binary's `--version` and the
# image's labels (target/image, deploy/image/build.sh) to say the same.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

semver='[0-9]+\.[0-9]+\.[0-9]+'

# Each place: FILE<TAB>a Python regex (multi-line mode, over the whole file) in which
# (V) stands for the version. It must match at least once in FILE, and every match must
# carry VERSION; `set` replaces the version inside each match.
places() {
  cat <<'EOF'
Cargo.toml	^\[workspace\.package\]\nversion = "(V)"$
deploy/helm/safewrite/Chart.yaml	^version: (V)$
deploy/helm/safewrite/Chart.yaml	^appVersion: "(V)"$
deploy/helm/safewrite/values.yaml	^    tag: "(V)"$
deploy/helm/safewrite/templates/_helpers.tpl	"AppVersion" "(V)"
deploy/helm/safewrite/ci/injection-values.yaml	^  tag: (V)$
deploy/image/Containerfile	org\.opencontainers\.image\.version="(V)"
deploy/image/Containerfile	-t safewrite:(V) \.$
deploy/kubernetes/sidecar.yaml	image: example\.invalid/safewrite:(V)$
deploy/kubernetes/kustomize/base/deployment.yaml	image: example\.invalid/safewrite:(V)$
deploy/kubernetes/kustomize/overlays/example/kustomization.yaml	name: example\.invalid/safewrite\n.*\n    newTag: (V)$
deploy/kubernetes/kustomize/overlays/injection/kustomization.yaml	safewrite:(V)'\)"$
deploy/kubernetes/injection/policy.yaml	safewrite:(V)'\)"$
docs/deployment.md	safewrite:(V)
docs/deployment.md	oci:target/image/oci:(V)
clients/python/pyproject.toml	^version = "(V)"$
clients/python/src/safewrite_client/__init__.py	^__version__ = "(V)"$
clients/typescript/package.json	^  "version": "(V)",$
clients/typescript/package-lock.json	^  "name": "@safewrite/client",\n  "version": "(V)",$
clients/typescript/package-lock.json	^    "": {\n      "name": "@safewrite/client",\n      "version": "(V)",$
clients/typescript/README.md	safewrite-client-(V)\.tgz
clients/java/pom.xml	<artifactId>safewrite-client</artifactId>\n  <version>(V)</version>$
clients/java/examples/operator/pom.xml	<artifactId>safewrite-operator-example</artifactId>\n  <version>(V)</version>$
clients/java/examples/operator/pom.xml	<artifactId>safewrite-client</artifactId>\n      <version>(V)</version>$
clients/java/README.md	<artifactId>safewrite-client</artifactId>\n *<version>(V)</version>$
clients/java/README.md	version `(V)`
clients/go/safewrite/version.go	^const Version = "(V)"$
clients/go/test.sh	^release_version=v(V)$
clients/go/README.md	for the next version \(`v(V)`\)
clients/go/README.md	-require=safewrite\.dev/clients/go(?:/ctrl)?@v(V) 
clients/go/ctrl/go.mod	^\tsafewrite\.dev/clients/go v(V)$
EOF
}

changelogs=(CHANGELOG.md clients/python/CHANGELOG.md clients/go/CHANGELOG.md clients/typescript/CHANGELOG.md clients/java/CHANGELOG.md)

# places_py check|set VERSION: reads the places on stdin; check prints one line per place
# that is wrong, set rewrites them.
places_py() {
  python3 -c '
import re, sys
action, version = sys.argv[1:]
semver = r"([0-9]+\.[0-9]+\.[0-9]+)"
for line in sys.stdin.read().splitlines():
    path, regex = line.split("\t")
    pattern = re.compile(regex.replace("(V)", semver), re.M)
    text = open(path, encoding="utf-8").read()
    found = [m.group(1) for m in pattern.finditer(text)]
    if action == "check":
        if not found:
            print(f"{path}: nothing matches /{regex}/ (the place moved? update deploy/version.sh)")
        elif set(found) != {version}:
            wrong = ",".join(sorted(set(found) - {version}))
            print(f"{path}: /{regex}/ carries {wrong}, VERSION is {version} (bash deploy/version.sh set {version})")
    else:
        def put(m):
            a, b = m.start(1) - m.start(0), m.end(1) - m.start(0)
            return m.group(0)[:a] + version + m.group(0)[b:]
        open(path, "w", encoding="utf-8").write(pattern.sub(put, text))
' "$@"
}

check() {
  local version found problems file
  version=$(cat VERSION)
  [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "version.sh: VERSION holds '$version', not X.Y.Z" >&2; exit 1; }
  problems=$(places | places_py check "$version")
  for file in "${changelogs[@]}"; do
    grep -qx "## $version" "$file" || problems+=$'\n'"$file: no '## $version' section (what this version changed)"
  done
  found=$(cargo metadata --format-version 1 --no-deps --offline | jq -r '.packages[] | select(.name | startswith("safewrite")) | "\(.name) \(.version)"' | grep -v " $version\$" || true)
  [ -z "$found" ] || problems+=$'\n'"the workspace's crates: $(paste -sd, <<<"$found")"
  for file in Cargo.lock fuzz/Cargo.lock; do
    found=$(grep -A1 -E '^name = "safewrite(-(api|client|engine|mutation))?"$' "$file" | grep '^version' | grep -v "\"$version\"" || true)
    [ -z "$found" ] || problems+=$'\n'"$file: the workspace's crates at $(sort -u <<<"$found" | paste -sd, -) (bash deploy/version.sh set $version)"
  done
  if [ -x target/debug/safewrite ]; then
    found=$(target/debug/safewrite --version)
    [ "$found" = "safewrite $version" ] || problems+=$'\n'"target/debug/safewrite --version says '$found' (rebuild it)"
  fi
  if [ -f target/image/oci/index.json ]; then
    found=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' target/image/oci/index.json)
    [ "$found" = "$version" ] || problems+=$'\n'"target/image/oci is tagged '$found' (rebuild it: bash deploy/image/build.sh)"
  fi
  problems=$(sed '/^$/d' <<<"$problems")
  if [ -n "$problems" ]; then
    sed 's/^/version.sh: /' <<<"$problems" >&2
    exit 1
  fi
  echo "version.sh: every place carries $version"
}

set_version() {
  local version=$1
  [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "usage: deploy/version.sh set X.Y.Z" >&2; exit 2; }
  printf '%s\n' "$version" >VERSION
  places | places_py set "$version"
  cargo update --workspace --offline --quiet
  (cd fuzz && cargo update --offline --quiet -p safewrite -p safewrite-api -p safewrite-engine -p safewrite-mutation -p safewrite-client)
  echo "version.sh: set $version; add a '## $version' section to each CHANGELOG.md, then: bash deploy/version.sh check"
}

case ${1:-} in
check) check ;;
set) set_version "${2:-}" ;;
*) echo "usage: deploy/version.sh check | set X.Y.Z" >&2; exit 2 ;;
esac
