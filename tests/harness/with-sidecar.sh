#!/usr/bin/env bash
# Runs a command against a real control plane and real safewrite sidecars, for the
# client libraries' test suites:
#
#   tests/harness/with-sidecar.sh COMMAND [ARGS...]
#
# Starts the control plane (tests/harness/controlplane.sh), installs the test CRD
# widgets.test.safewrite.dev (namespaced, status subresource), starts six sidecars and
# runs COMMAND with:
#   SAFEWRITE_ADDRESS          host:port of a sidecar with the admin identity (the one
#                              variable every client reads for the sidecar's address)
#   SAFEWRITE_UNIX_SOCKET      a unix socket path served by that same sidecar
#   SAFEWRITE_RESTRICTED_ADDR  host:port of a sidecar whose identity may only read
#                              configmaps (writes answer PERMISSION_DENIED)
#   SAFEWRITE_TOKEN_ADDR       host:port of an admin sidecar started with --token-file:
#                              calls must carry `authorization: Bearer $SAFEWRITE_TOKEN`
#   SAFEWRITE_TOKEN            that sidecar's token
#   SAFEWRITE_LOSSY_ADDR       host:port of an admin sidecar whose writes' answers are
#                              lost: it reaches the API server through
#                              tests/harness/faultproxy, which forwards every request and,
#                              for POST, PUT and PATCH, lets the API server answer (the
#                              write is committed) and then resets the stream instead of
#                              answering. Reads pass. A write through it without an
#                              idempotency key fails with UNKNOWN, reason
#                              WRITE_OUTCOME_UNKNOWN, its change applied; with a key the
#                              sidecar re-reads, finds the key and answers already_applied.
#                              Create objects through SAFEWRITE_ADDRESS: a create through
#                              this one is lost as well.
#   SAFEWRITE_PEER_ADDRS       two host:port of admin sidecars of their own, comma
#                              separated, for leadership tests: two replicas, each with
#                              its own sidecar, as in two pods
#   SAFEWRITE_PEER_PIDS        their process ids, in the same order: a test may SIGSTOP
#                              one (a paused pod: its Lease expires, the other replica's
#                              sidecar takes over) and must SIGCONT it before it ends
#   SAFEWRITE_NAMESPACE        a namespace created for this run
#   SAFEWRITE_CP_ENV           the control plane's env file (SERVER, ADMIN_TOKEN, CA_FILE)
# Everything is stopped when COMMAND ends; its exit code is returned.
# The sidecar binary is $SAFEWRITE_BIN, else target/debug/safewrite (built if missing).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

bin=${SAFEWRITE_BIN:-$root/target/debug/safewrite}
if [ ! -x "$bin" ]; then
  (cd "$root" && cargo build --quiet --bin safewrite)
fi
# Build (or find) the control plane's binaries before starting it (progress on stderr).
bash "$root/tests/harness/binaries.sh" >/dev/null

# The fault proxy (tests/harness/faultproxy, standard library only): built once per
# version of its source and of Go, and cached beside the other tools.
faultproxy_binary() {
  local src="$root/tests/harness/faultproxy" cache key out lock
  cache=${SAFEWRITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safewrite}
  key=$({ cat "$src/go.mod" "$src"/*.go; go version; } | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16)
  out="$cache/bin/faultproxy-$key/faultproxy"
  if [ ! -x "$out" ]; then
    mkdir -p "$(dirname "$out")"
    exec {lock}>"$out.lock"
    if command -v flock >/dev/null 2>&1; then flock "$lock"; fi
    if [ ! -x "$out" ]; then
      echo "with-sidecar: building tests/harness/faultproxy" >&2
      (cd "$src" && CGO_ENABLED=0 GOWORK=off go build -trimpath -o "$out.tmp" .) &&
        mv "$out.tmp" "$out" ||
        { echo "with-sidecar: could not build tests/harness/faultproxy" >&2; exit 1; }
    fi
    exec {lock}>&-
  fi
  echo "$out"
}
faultproxy=$(faultproxy_binary)

coproc CONTROLPLANE { exec bash "$root/tests/harness/controlplane.sh" run; }
read -r ready cpdir <&"${CONTROLPLANE[0]}" || { echo "with-sidecar: control plane failed to start" >&2; exit 1; }
[ "$ready" = ready ] || { echo "with-sidecar: control plane failed to start" >&2; exit 1; }
# shellcheck disable=SC1091
. "$cpdir/env"

# Sidecars here (and any the command starts itself) run side by side: each takes a
# free port for its metrics endpoint instead of the default one.
export SAFEWRITE_METRICS_LISTEN=127.0.0.1:0

work=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-clients.XXXXXX")
pids=()
cleanup() {
  # A peer sidecar a test paused and left paused would never see SIGTERM.
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

api() {
  curl -sS --cacert "$CA_FILE" -H "Authorization: Bearer $ADMIN_TOKEN" \
    -H 'Content-Type: application/json' "$@"
}
namespace="clients-$$"
api -o /dev/null -X POST --data "{\"metadata\":{\"name\":\"$namespace\"}}" "$SERVER/api/v1/namespaces"
api -o /dev/null -X POST "$SERVER/apis/apiextensions.k8s.io/v1/customresourcedefinitions" --data '{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.test.safewrite.dev"},
  "spec": {"group": "test.safewrite.dev", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}}'
for _ in $(seq 1 100); do
  api "$SERVER/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.safewrite.dev" |
    grep -q '"type": "Established"' && break
  sleep 0.1
done

# shellcheck source=tests/harness/ports.sh
. "$root/tests/harness/ports.sh"
# start_sidecar KUBECONFIG [EXTRA...]: a sidecar on a port the kernel picks as it binds
# (none chosen in advance, which another sidecar's metrics could take first), its log
# its own; sets `started` to its gRPC address once it answers SERVING.
started=""
start_sidecar() {
  local kubeconfig=$1 log
  shift
  log="$work/sidecar-${#pids[@]}.log"
  "$bin" serve --kubeconfig "$kubeconfig" --listen 127.0.0.1:0 --readiness-interval 200ms "$@" \
    2>>"$log" &
  pids+=($!)
  if started=$(listening_address "$log" "${pids[-1]}" tcp); then
    for _ in $(seq 1 100); do
      "$bin" health --address "$started" --timeout 1s >/dev/null 2>&1 && return 0
      sleep 0.1
    done
  fi
  echo "with-sidecar: a sidecar (${started:-no address}) never became SERVING; its log:" >&2
  cat "$log" >&2
  exit 1
}
socket="$work/safewrite.sock"
token="test-token-$RANDOM$RANDOM"
printf '%s\n' "$token" >"$work/token"
start_sidecar "$cpdir/admin.kubeconfig" --unix-socket "$socket"
admin_addr=$started
start_sidecar "$cpdir/restricted.kubeconfig"
restricted_addr=$started
start_sidecar "$cpdir/admin.kubeconfig" --token-file "$work/token"
token_addr=$started

# The lossy sidecar: the admin identity through the fault proxy, which terminates TLS
# with the API server's own serving certificate (valid for 127.0.0.1, signed by the same
# CA), so the kubeconfig differs from admin's in its server alone.
"$faultproxy" -upstream "$SERVER" -ca "$CA_FILE" -cert "$cpdir/pki/serving.crt" \
  -key "$cpdir/pki/serving.key" -addr-file "$work/faultproxy.addr" 2>>"$work/faultproxy.log" &
pids+=($!)
for _ in $(seq 1 100); do
  [ -s "$work/faultproxy.addr" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || break
  sleep 0.1
done
if [ ! -s "$work/faultproxy.addr" ]; then
  echo "with-sidecar: the fault proxy did not start; log:" >&2
  cat "$work/faultproxy.log" >&2
  exit 1
fi
proxy_addr=$(cat "$work/faultproxy.addr")
sed "s#^\( *server:\) .*#\1 https://$proxy_addr#" "$cpdir/admin.kubeconfig" >"$work/lossy.kubeconfig"
grep -q "server: https://$proxy_addr\$" "$work/lossy.kubeconfig" ||
  { echo "with-sidecar: could not point a kubeconfig at the fault proxy" >&2; exit 1; }
# Lost answers are faults to the circuit breaker: a run of them must not open it, so
# that every write reaches the proxy. A request cut by the proxy fails at once; the
# request timeout only bounds a hang, should one happen.
start_sidecar "$work/lossy.kubeconfig" --breaker-failures 1000 --request-timeout 5s
lossy_addr=$started

# The peers: two more admin sidecars, nothing else shares them.
peer_addrs=() peer_pids=()
for _ in 1 2; do
  start_sidecar "$cpdir/admin.kubeconfig"
  peer_addrs+=("$started") peer_pids+=("${pids[-1]}")
done

export SAFEWRITE_ADDRESS=$admin_addr
export SAFEWRITE_PEER_ADDRS="${peer_addrs[0]},${peer_addrs[1]}"
export SAFEWRITE_PEER_PIDS="${peer_pids[0]},${peer_pids[1]}"
export SAFEWRITE_UNIX_SOCKET=$socket
export SAFEWRITE_RESTRICTED_ADDR=$restricted_addr
export SAFEWRITE_TOKEN_ADDR=$token_addr SAFEWRITE_TOKEN=$token
export SAFEWRITE_LOSSY_ADDR=$lossy_addr
export SAFEWRITE_NAMESPACE=$namespace
export SAFEWRITE_CP_ENV=$cpdir/env
status=0
"$@" || status=$?
exit "$status"
