#!/usr/bin/env bash
# The whole test suite, as README.md tells a newcomer to run it (and as .ci/run runs it):
# formatting and lints, the proto lint, unit tests, integration tests and the client
# libraries' suites against a real kube-apiserver and etcd that the harness builds (cached outside the checkout) and starts.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# Each section's time is kept and printed at the end, so that a slow run says where
# its minutes went.
timings=()
section_name=""
section_started=$SECONDS
section_done() {
  [ -n "$section_name" ] && timings+=("$(printf '%5ss  %s' $((SECONDS - section_started)) "$section_name")")
  return 0
}
section() {
  section_done
  section_name=$1
  section_started=$SECONDS
  printf '\n== %s\n' "$*"
}
started=$SECONDS

section "test tools (kube-apiserver, etcd, grpcurl, buf; built once per machine)"
# The default Kubernetes here; tests/matrix.sh below builds the matrix's other minors.
tools=$(bash tests/harness/binaries.sh | tail -n 1)
echo "$tools"

section "deployment tools (kustomize, helm, promtool; built once per machine)"
bash tests/harness/binaries.sh deploy | tail -n 1

section "proto lint (buf: STANDARD + COMMENTS) and breaking (WIRE_JSON, against the last release)"
# proto/baseline.json is the image of the last released proto (cd proto && buf build
# --exclude-source-info -o baseline.json, at each release); v1 only grows.
(cd proto && "$tools/buf" lint && "$tools/buf" breaking --against baseline.json)
echo "proto lint and breaking: ok"

section "cargo fmt --check"
cargo fmt --all -- --check

section "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings

section "dependency policy (cargo deny: licences, bans, sources of deny.toml)"
# cargo-deny is built once per machine (tests/harness/cargo-tools.sh).
cargo_tools=$(bash tests/harness/cargo-tools.sh cargo-deny | tail -n 1)
PATH="$cargo_tools:$PATH" cargo deny --locked check --hide-inclusion-graph licenses bans sources
bash tests/supply/advisories.sh "$cargo_tools"

section "container image, built before the tests that run it (deploy/image/build.sh)"
# The node's pods run this image, and deploy/image/test.sh checks it below. Built here,
# on its own, a release build of the static binary does not take the cores from the
# integration suite's timed tests (deadlines, the API server's own counts) while they run.
bash deploy/image/build.sh >/dev/null

section "one version everywhere (deploy/version.sh check: VERSION, the crates, --version, the image, chart, manifests, clients, CHANGELOGs)"
cargo build --quiet --bin safewrite
bash deploy/version.sh check

section "cargo test (unit + integration against the real control plane, and pods on a real node)"
cargo test

section "version matrix: the contract subset on every other Kubernetes minor (tests/matrix.sh)"
# docs/versions.md: the full suites above ran on the default (the newest minor); each other
# minor of tests/harness/versions.env runs tests/matrix.tests (its binaries built once per
# machine, like the default's).
bash tests/matrix.sh

section "linearizability checker (tests/linearizability: gofmt, go vet, go test)"
# The integration suite's tests/integration/linearizability.rs records histories of real
# calls under faults and checks them with this checker; its own tests prove it catches
# answers that are not serial (a simulated group commit with the bugs it must find).
(
  cd tests/linearizability
  unformatted=$(gofmt -l .)
  [ -z "$unformatted" ] || { echo "gofmt: not formatted: $unformatted" >&2; exit 1; }
  go vet ./...
  go test ./...
)

section "fuzz smoke (fuzz/smoke.sh: each cargo-fuzz target for a few seconds)"
bash fuzz/smoke.sh 10

section "container image: built without a daemon, run as its user (deploy/image/test.sh)"
bash deploy/image/test.sh

section "supply chain: auditable binary, SBOM, registry, cosign signature and attestation (deploy/image/supply-test.sh)"
bash deploy/image/supply-test.sh

section "Python client against the real sidecar (clients/python/test.sh)"
bash clients/python/test.sh

section "Go client against the real sidecar (clients/go/test.sh)"
bash clients/go/test.sh

section "TypeScript client against the real sidecar (clients/typescript/test.sh)"
bash clients/typescript/test.sh

section "Java client against the real sidecar (clients/java/test.sh)"
bash clients/java/test.sh

section "skew: today's clients against the 0.1.0 sidecar and 0.1.0's clients against today's (tests/skew.sh)"
# docs/compatibility.md: the skew policy; the earlier sidecar is built once per machine.
bash tests/skew.sh

section "release: made twice, the same bytes, installed into new projects, README examples against its image (tests/release.sh)"
bash tests/release.sh

section "client libraries' licences (tests/supply/client-licences.sh)"
bash tests/supply/client-licences.sh

section_done
echo
echo "time by section:"
printf '%s\n' "${timings[@]}"
echo "all suites passed in $((SECONDS - started))s"
