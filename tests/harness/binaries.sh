#!/usr/bin/env bash
# Builds real kube-apiserver and etcd binaries with the machine's Go, plus the test
# tools grpcurl (Go) and buf (npm), at the versions pinned in tests/harness/versions.env,
# and caches each outside the checkout, keyed by its version:
#   ${SAFEWRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite}/bin/<tool>-<version>/<tool>
# Only the first run on a machine pays the build. Prints, on the last line of stdout, a
# directory of links to the pinned set (progress goes to stderr).
#
#   binaries.sh           # the control plane and test tools
#   binaries.sh jaeger    # also jaeger (Jaeger v2, the tracing backend of
#                         # tests/harness/jaeger.sh; a long first build, so only on demand)
#   binaries.sh deploy    # also kustomize, helm and promtool, which render and check
#                         # deploy/ (tests/integration/deploy.rs); only on demand
#   binaries.sh node      # also a node (tests/harness/node-binaries.sh): kubelet,
#                         # kube-controller-manager, kube-scheduler, containerd (+ its runc
#                         # shim and ctr), runc, the CNI plugins bridge/host-local/loopback/
#                         # portmap and a pause image (an OCI layout, pause-oci/ in the
#                         # directory), for tests/harness/node.sh. runc is built with cgo
#                         # and seccomp: as root, libseccomp-dev and pkg-config are
#                         # installed from Debian when missing (and iptables and socat,
#                         # which node.sh uses)
#   binaries.sh supply    # also the supply-chain tools (docs/supply-chain.md): the CNCF
#                         # distribution registry and cosign (Go), and cargo-deny,
#                         # cargo-auditable, cargo-cyclonedx, rust-audit-info
#                         # (tests/harness/cargo-tools.sh); only on demand
#   binaries.sh matrix    # kube-apiserver and etcd of every entry of KUBERNETES_MATRIX
#                         # (the version matrix, docs/versions.md); prints nothing more
#
# Which Kubernetes: KUBERNETES_VERSION of versions.env (the newest minor), unless
# SAFEWRITE_KUBERNETES names another entry of KUBERNETES_MATRIX, by its minor ("1.32")
# or its version ("v1.32.13"); then kube-apiserver, etcd (and a node's components) are
# that entry's. Every script and test that starts a control plane goes through here, so
# `SAFEWRITE_KUBERNETES=1.32 cargo test ...` runs those tests against 1.32.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/harness/versions.env
. "$here/versions.env"

# matrix_entry WANTED: the matrix entry ("vX.Y.Z=vETCD") WANTED names, by minor or version.
matrix_entry() {
  local wanted=${1#v} entry version
  for entry in $KUBERNETES_MATRIX; do
    version=${entry%%=*}
    case "${version#v}" in
      "$wanted" | "$wanted".*) echo "$entry"; return 0 ;;
    esac
  done
  return 1
}
if [ -n "${SAFEWRITE_KUBERNETES:-}" ]; then
  if ! entry=$(matrix_entry "$SAFEWRITE_KUBERNETES"); then
    known=$(for e in $KUBERNETES_MATRIX; do printf '%s ' "${e%%=*}"; done)
    echo "binaries: SAFEWRITE_KUBERNETES=$SAFEWRITE_KUBERNETES is not in the version matrix of tests/harness/versions.env (${known% }); name one of those, by minor (1.32) or version" >&2
    exit 2
  fi
  KUBERNETES_VERSION=${entry%%=*}
  ETCD_VERSION=${entry##*=}
fi

cache=${SAFEWRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite}
bindir="$cache/bin/set-k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-grpcurl-$GRPCURL_VERSION-buf-$BUF_VERSION"
with_jaeger=false
with_deploy=false
with_node=false
with_supply=false
with_matrix=false
case "${1:-}" in
  "") ;;
  matrix) with_matrix=true ;;
  jaeger) with_jaeger=true; bindir="$bindir-jaeger-$JAEGER_VERSION" ;;
  deploy)
    with_deploy=true
    bindir="$bindir-kustomize-$KUSTOMIZE_VERSION-helm-$HELM_VERSION-promtool-$PROMTOOL_VERSION"
    ;;
  node)
    with_node=true
    bindir="$bindir-node-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION-cni-$CNI_PLUGINS_VERSION"
    ;;
  supply)
    with_supply=true
    bindir="$bindir-supply-registry-$REGISTRY_VERSION-cosign-$COSIGN_VERSION-deny-$CARGO_DENY_VERSION-auditable-$CARGO_AUDITABLE_VERSION-cyclonedx-$CARGO_CYCLONEDX_VERSION"
    ;;
  *) echo "usage: $0 [jaeger|deploy|node|supply|matrix]" >&2; exit 2 ;;
esac
mkdir -p "$bindir"
# tool_path NAME VERSION: where one tool's binary is cached.
tool_path() {
  mkdir -p "$cache/bin/$1-$2"
  echo "$cache/bin/$1-$2/$1"
}

log() { echo "binaries: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  echo "binaries: Go is needed to build kube-apiserver and etcd; install Go 1.24 or newer" >&2
  exit 1
fi

# build_from_module MODULE VERSION PACKAGE OUTPUT STAGING_VERSION [LDFLAGS]
# Builds PACKAGE from MODULE@VERSION through a throwaway wrapper module. Modules such as
# k8s.io/kubernetes and etcd's server replace their siblings with relative paths, which
# `go install pkg@version` refuses; the wrapper pins every such sibling to its published
# release instead (STAGING_VERSION, or VERSION itself when empty). A dependency's replace
# directives are ignored when it is built as a dependency, so the upstream module's
# replaces by a published version (such as jaeger's `X => X v1.33.0`) are copied as they are.
build_from_module() {
  local module=$1 version=$2 package=$3 output=$4 staging=${5:-$2} ldflags="-s -w ${6:-}"
  if [ -x "$output" ]; then
    return 0
  fi
  # Runs at the same time (several test binaries or shells) build once: the
  # others wait for the lock, then find the binary.
  local lock
  exec {lock}>"$output.lock"
  if command -v flock >/dev/null 2>&1; then
    flock "$lock"
  fi
  if [ -x "$output" ]; then
    exec {lock}>&-
    return 0
  fi
  local work
  work=$(mktemp -d)
  # The trap clears itself: a RETURN trap stays set after its function returns.
  trap 'rm -rf "$work"; exec {lock}>&-; trap - RETURN' RETURN
  log "building $package@$version (first run on this machine only; takes minutes)"
  local started=$SECONDS
  (
    cd "$work"
    go mod init safewrite.local/build >/dev/null 2>&1
    local info gomod
    info=$(go mod download -json "$module@$version")
    gomod=$(jq -r .GoMod <<<"$info")
    # Start from the upstream module's own go.sum: its dependencies are checked against
    # the checksums upstream committed, even those the checksum database cannot serve.
    if [ -f "$(jq -r .Dir <<<"$info")/go.sum" ]; then
      cp "$(jq -r .Dir <<<"$info")/go.sum" go.sum
      chmod u+w go.sum
    fi
    # Every `X => ./relative` replace of the upstream module becomes `X => X vR`, vR the
    # version upstream requires X at (etcd 3.5 requires its client/v2 at v2.305.N), or
    # the staging version where it requires v0.0.0 (Kubernetes' staging modules).
    # (Upstream also replaces modules it forbids with ./FORBIDDEN_DEPENDENCY: skip those.)
    awk '
      /^replace[ \t]*\(/ { inblock = 1; next }
      inblock && /^\)/   { inblock = 0; next }
      inblock            { print; next }
      /^replace[ \t]/    { sub(/^replace[ \t]+/, ""); print }
    ' "$gomod" | awk '$2 == "=>" && $3 ~ /^\.\.?\// && $3 !~ /FORBIDDEN/ { print $1 }' | sort -u |
      while read -r dep; do
        local required
        required=$(go mod edit -json "$gomod" |
          jq -r --arg dep "$dep" '[.Require[]? | select(.Path == $dep) | .Version][0] // ""')
        case "$required" in "" | v0.0.0) required=$staging ;; esac
        go mod edit -replace "$dep=$dep@$required"
      done
    # Every `X [vA] => Y vB` replace is kept: `X[@vA]=Y@vB`.
    awk '
      /^replace[ \t]*\(/ { inblock = 1; next }
      inblock && /^\)/   { inblock = 0; next }
      inblock            { print; next }
      /^replace[ \t]/    { sub(/^replace[ \t]+/, ""); print }
    ' "$gomod" | awk '
      $2 == "=>" && NF == 4 && $3 !~ /^\.\.?\// { print $1 "=" $3 "@" $4 }
      $3 == "=>" && NF == 5 && $4 !~ /^\.\.?\// { print $1 "@" $2 "=" $4 "@" $5 }
    ' | sort -u |
      while read -r replacement; do
        go mod edit -replace "$replacement"
      done
    go mod edit -require "$module@$version"
    printf 'package tools\n\nimport _ "%s"\n' "$package" > tools.go
    go mod tidy >/dev/null
    CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$output.tmp" "$package"
    mv "$output.tmp" "$output"
  )
  log "built $(basename "$output") in $((SECONDS - started))s"
}

# k8s_ldflags VERSION: the version stamp Kubernetes' own build gives its binaries
# (hack/lib/version.sh), so that /version and `--version` say VERSION, not v0.0.0-master.
k8s_ldflags() {
  local version=$1 minor flags="" pkg
  minor=$(cut -d. -f2 <<<"$version")
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean"
  done
  echo "$flags"
}
# build_k8s COMMAND VERSION OUTPUT: cmd/COMMAND of k8s.io/kubernetes at VERSION, stamped
# with it; a cached binary without the stamp (built before the stamp was given) is built
# again.
build_k8s() {
  local command=$1 version=$2 output=$3
  if [ -x "$output" ] && [ "$("$output" --version 2>/dev/null)" != "Kubernetes $version" ]; then
    log "$(basename "$output") $version in the cache does not say its version: building it again"
    rm -f "$output"
  fi
  build_from_module k8s.io/kubernetes "$version" "k8s.io/kubernetes/cmd/$command" "$output" \
    "v0.${version#v1.}" "$(k8s_ldflags "$version")"
}

# control_plane K8S ETCD: builds (once per machine) kube-apiserver K8S and etcd ETCD, and
# sets $apiserver and $etcd to them. A failed build ends the script with one line saying
# how to build that version alone (the EXIT trap below).
building=""
trap 'rc=$?; [ "$rc" = 0 ] || [ -z "$building" ] || echo "binaries: $building did not build (output above); build it alone with: SAFEWRITE_KUBERNETES=${building%% *} bash tests/harness/binaries.sh" >&2' EXIT
control_plane() {
  local k8s=$1 etcd_version=$2
  building="$k8s (kube-apiserver, with etcd $etcd_version)"
  apiserver=$(tool_path kube-apiserver "$k8s")
  build_k8s kube-apiserver "$k8s" "$apiserver"
  etcd=$(tool_path etcd "$etcd_version")
  build_from_module go.etcd.io/etcd/server/v3 "$etcd_version" go.etcd.io/etcd/server/v3 "$etcd"
  building=""
}
if $with_matrix; then
  for entry in $KUBERNETES_MATRIX; do
    control_plane "${entry%%=*}" "${entry##*=}"
    log "kube-apiserver ${entry%%=*} and etcd ${entry##*=} are built"
  done
  exit 0
fi
control_plane "$KUBERNETES_VERSION" "$ETCD_VERSION"
grpcurl=$(tool_path grpcurl "$GRPCURL_VERSION")
if [ ! -x "$grpcurl" ]; then
  log "installing grpcurl $GRPCURL_VERSION"
  GOBIN=$(dirname "$grpcurl") CGO_ENABLED=0 \
    go install "github.com/fullstorydev/grpcurl/cmd/grpcurl@$GRPCURL_VERSION"
fi
buf=$(tool_path buf "$BUF_VERSION")
if [ ! -x "$buf" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "binaries: npm is needed to install buf (the proto linter); install Node.js" >&2
    exit 1
  fi
  log "installing buf $BUF_VERSION"
  npm install --silent --no-audit --no-fund --prefix "$(dirname "$buf")/npm" \
    "@bufbuild/buf@$BUF_VERSION" >&2
  ln -sf "$(dirname "$buf")/npm/node_modules/.bin/buf" "$buf"
fi
tools=("$apiserver" "$etcd" "$grpcurl" "$buf")
if $with_jaeger; then
  jaeger=$(tool_path jaeger "$JAEGER_VERSION")
  build_from_module github.com/jaegertracing/jaeger "$JAEGER_VERSION" \
    github.com/jaegertracing/jaeger/cmd/jaeger "$jaeger"
  tools+=("$jaeger")
fi

# go_install PACKAGE VERSION OUTPUT [LDFLAGS [TAGS]]: `go install PACKAGE@VERSION` for a
# module without replace directives (its own go.sum is used as it is), built once per
# machine; runs at the same time wait for the lock, then find the binary. Static
# (CGO_ENABLED=0) unless GO_INSTALL_CGO=1.
go_install() {
  local package=$1 version=$2 output=$3 ldflags="-s -w ${4:-}" tags=${5:-}
  [ -x "$output" ] && return 0
  local lock
  exec {lock}>"$output.lock"
  if command -v flock >/dev/null 2>&1; then
    flock "$lock"
  fi
  if [ ! -x "$output" ]; then
    log "building $package@$version (first run on this machine only; takes minutes)"
    local started=$SECONDS gobin
    gobin=$(mktemp -d)
    GOBIN=$gobin CGO_ENABLED=${GO_INSTALL_CGO:-0} nice -n 10 \
      go install -trimpath -ldflags="$ldflags" -tags="$tags" "$package@$version"
    mv "$gobin/$(basename "$output")" "$output"
    rm -rf "$gobin"
    log "built $(basename "$output") in $((SECONDS - started))s"
  fi
  exec {lock}>&-
}
if $with_deploy; then
  kustomize=$(tool_path kustomize "$KUSTOMIZE_VERSION")
  go_install sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION" "$kustomize"
  helm=$(tool_path helm "$HELM_VERSION")
  go_install helm.sh/helm/v4/cmd/helm "$HELM_VERSION" "$helm" \
    "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.metadata="
  promtool=$(tool_path promtool "$PROMTOOL_VERSION")
  # Without Prometheus' service discovery plugins (its `remove_all_sd` build tag):
  # rule checks need none, and some (nomad's) are not on the module proxy.
  go_install github.com/prometheus/prometheus/cmd/promtool "$PROMTOOL_VERSION" "$promtool" \
    "" remove_all_sd
  tools+=("$kustomize" "$helm" "$promtool")
fi

if $with_node; then
  # shellcheck source=tests/harness/node-binaries.sh
  . "$here/node-binaries.sh"
fi

if $with_supply; then
  # The registry serves the image on loopback in deploy/image/supply-test.sh; cosign signs
  # it and attaches the SBOM as an attestation. Both are plain `go install`s.
  registry=$(tool_path registry "$REGISTRY_VERSION")
  go_install github.com/distribution/distribution/v3/cmd/registry "$REGISTRY_VERSION" "$registry" \
    "-X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION"
  cosign=$(tool_path cosign "$COSIGN_VERSION")
  go_install github.com/sigstore/cosign/v2/cmd/cosign "$COSIGN_VERSION" "$cosign" \
    "-X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION"
  cargo_tools=$(bash "$here/cargo-tools.sh" | tail -n 1)
  tools+=("$registry" "$cosign")
  for tool in "$cargo_tools"/*; do tools+=("$(readlink "$tool")"); done
fi

for tool in "${tools[@]}"; do
  ln -sfn "$tool" "$bindir/$(basename "$tool")"
done

echo "$bindir"
