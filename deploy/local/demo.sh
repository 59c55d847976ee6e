#!/usr/bin/env bash
# The main job: a local demo on an embedded default. Starts a real control plane
# (etcd + kube-apiserver on loopback, from tests/harness), runs the safewrite sidecar
# against it, shows its health and API, then runs contending writers through it
# (deploy/local/contend.rs): naive writers that lose updates, then safewrite on the same
# load, and prints a summary. Everything it starts is stopped when it
# ends, however it ends.
#
#   bash deploy/local/demo.sh [WRITERS] [INCREMENTS]     (default 16 x 25)
#
# With SAFEWRITE_DEMO_TRACES=1 it also starts a real Jaeger v2 (tests/harness/jaeger.sh;
# its first build takes about twelve minutes), exports the sidecar's traces to it over
# OTLP, and waits for Enter at the end so the traces can be browsed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

step() { printf '\n== %s\n' "$*"; }

writers=${1:-16}
increments=${2:-25}

step "building safewrite and the demo writers (release)"
cargo build --release --bin safewrite --example contend
bin="$root/target/release/safewrite"
tools=$(bash tests/harness/binaries.sh | tail -n 1)
grpcurl="$tools/grpcurl"

step "starting a local control plane (etcd + kube-apiserver on 127.0.0.1)"
# The control plane lives while this script holds its stdin open (coprocess pipe).
coproc CONTROLPLANE { exec bash tests/harness/controlplane.sh run; }
read -r ready cpdir <&"${CONTROLPLANE[0]}" || { echo "control plane failed to start" >&2; exit 1; }
[ "$ready" = ready ] || { echo "control plane failed to start" >&2; exit 1; }
. "$cpdir/env"
echo "kube-apiserver at $SERVER"

if [ "${SAFEWRITE_DEMO_TRACES:-0}" = 1 ]; then
  step "starting Jaeger v2, the tracing backend (built on first use: minutes)"
  coproc JAEGER { exec bash tests/harness/jaeger.sh run; }
  read -r jready jdir <&"${JAEGER[0]}" || { echo "jaeger failed to start" >&2; exit 1; }
  [ "$jready" = ready ] || { echo "jaeger failed to start" >&2; exit 1; }
  . "$jdir/env"
  export OTEL_EXPORTER_OTLP_ENDPOINT=$OTLP_GRPC_ENDPOINT OTEL_EXPORTER_OTLP_PROTOCOL=grpc
  export OTEL_SERVICE_NAME=safewrite-demo
  echo "Jaeger query API at $QUERY_URL; the sidecar exports to $OTLP_GRPC_ENDPOINT"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-demo.XXXXXX")
sidecar_pid=""
cleanup() {
  [ -n "$sidecar_pid" ] && kill -TERM "$sidecar_pid" 2>/dev/null && wait "$sidecar_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

step "starting the safewrite sidecar"
# Ports the kernel picks as the sockets are bound; the sidecar logs them.
# shellcheck source=tests/harness/ports.sh
. "$root/tests/harness/ports.sh"
# A local control plane takes more than the default --qps 100 (a shared production API
# server is another matter): the demo shows contention, not the rate limiter.
"$bin" serve --kubeconfig "$cpdir/admin.kubeconfig" --listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 --qps 1000 --burst 1000 \
  --readiness-interval 200ms 2>"$work/sidecar.log" &
sidecar_pid=$!
addr=$(listening_address "$work/sidecar.log" "$sidecar_pid" tcp) &&
  metrics_addr=$(listening_address "$work/sidecar.log" "$sidecar_pid" http) ||
  { echo "demo: the sidecar did not start; its log:" >&2; cat "$work/sidecar.log" >&2; exit 1; }
health=""
for _ in $(seq 1 100); do
  health=$("$grpcurl" -plaintext "$addr" grpc.health.v1.Health/Check 2>/dev/null || true)
  case "$health" in *SERVING*) [[ "$health" != *NOT_SERVING* ]] && break ;; esac
  sleep 0.1
done
echo "sidecar on $addr, health: $(echo "$health" | tr -d '\n ')"

step "the API, through gRPC server reflection"
"$grpcurl" -plaintext "$addr" list safewrite.v1.WriterService

step "one call with grpcurl: UpdateWithRetry with a merge patch (created if missing)"
"$grpcurl" -plaintext -d '{
  "target": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "demo-hello"},
  "mutation": {"mergePatch": {"patchJson": "{\"data\": {\"hello\": \"world\"}}"}},
  "options": {"createIfMissingJson": "{}"}
}' "$addr" safewrite.v1.WriterService/UpdateWithRetry | grep -E '"(outcome|resourceVersion|attempts)"'

step "contending writers: naive read-modify-write, then read-dependent increments through the sidecar"
"$root/target/release/examples/contend" "$addr" default "$cpdir/admin.kubeconfig" "$writers" "$increments"

step "the sidecar's metrics (http://$metrics_addr/metrics), a few of them"
curl -fsS "http://$metrics_addr/metrics" |
  grep -E '^safewrite_(rpcs_total|conflicts_total|api_requests_total|rpc_attempts_(sum|count)|batch_size_(sum|count)|breaker_state|ratelimit_wait_seconds_count)' || true

step "sidecar log (warnings and above)"
grep -vE ' (INFO|DEBUG|TRACE) ' "$work/sidecar.log" || echo "(none)"

if [ "${SAFEWRITE_DEMO_TRACES:-0}" = 1 ]; then
  step "traces in Jaeger"
  sleep 2 # the exporter sends batches every few seconds
  curl -fsS "$QUERY_URL/api/traces?service=safewrite-demo&limit=2000" |
    python3 -c 'import json, sys
traces = json.load(sys.stdin)["data"] or []
spans = sum(len(t["spans"]) for t in traces)
print("%d traces, %d spans from service safewrite-demo" % (len(traces), spans))
most = max(traces, key=lambda t: len(t["spans"]), default=None)
if most:
    attempts = sum(1 for s in most["spans"] if s["operationName"] == "attempt")
    print("the busiest write: trace %s with %d attempts" % (most["traceID"], attempts))'
  echo "browse:  curl $QUERY_URL/api/traces/<trace id>   or   $QUERY_URL/api/traces?service=safewrite-demo"
  if [ -t 0 ]; then
    read -r -p "press Enter to stop Jaeger, the sidecar and the control plane "
  fi
fi
