#!/usr/bin/env bash
# Runs a command against a real control plane and real safewrite sidecars, for the
# client libraries' test suites:
#
#   tests/harness/with-sidecar.sh COMMAND [ARGS...]
#
# Starts the control plane (tests/harness/controlplane.sh), installs the test CRD
# widgets.test.safewrite.dev (namespaced, status subresource), starts three sidecars and
# runs COMMAND with:
#   SAFEWRITE_ADDRESS          host:port of a sidecar with the admin identity (the one
#                              variable every client reads for the sidecar's address)
#   SAFEWRITE_UNIX_SOCKET      a unix socket path served by that same sidecar
#   SAFEWRITE_RESTRICTED_ADDR  host:port of a sidecar whose identity may only read
#                              configmaps (writes answer PERMISSION_DENIED)
#   SAFEWRITE_TOKEN_ADDR       host:port of an admin sidecar started with --token-file:
#                              calls must carry `authorization: Bearer $SAFEWRITE_TOKEN`
#   SAFEWRITE_TOKEN            that sidecar's token
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

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
start_sidecar() { # KUBECONFIG ADDR [EXTRA...]
  local kubeconfig=$1 addr=$2
  shift 2
  "$bin" serve --kubeconfig "$kubeconfig" --listen "$addr" --readiness-interval 200ms "$@" \
    2>>"$work/sidecar.log" &
  pids+=($!)
  for _ in $(seq 1 100); do
    "$bin" health --address "$addr" --timeout 1s >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "with-sidecar: sidecar on $addr never became SERVING; log:" >&2
  cat "$work/sidecar.log" >&2
  exit 1
}
admin_addr="127.0.0.1:$(free_port)"
restricted_addr="127.0.0.1:$(free_port)"
token_addr="127.0.0.1:$(free_port)"
socket="$work/safewrite.sock"
token="test-token-$RANDOM$RANDOM"
printf '%s\n' "$token" >"$work/token"
start_sidecar "$cpdir/admin.kubeconfig" "$admin_addr" --unix-socket "$socket"
start_sidecar "$cpdir/restricted.kubeconfig" "$restricted_addr"
start_sidecar "$cpdir/admin.kubeconfig" "$token_addr" --token-file "$work/token"

export SAFEWRITE_ADDRESS=$admin_addr
export SAFEWRITE_UNIX_SOCKET=$socket
export SAFEWRITE_RESTRICTED_ADDR=$restricted_addr
export SAFEWRITE_TOKEN_ADDR=$token_addr SAFEWRITE_TOKEN=$token
export SAFEWRITE_NAMESPACE=$namespace
export SAFEWRITE_CP_ENV=$cpdir/env
status=0
"$@" || status=$?
exit "$status"
