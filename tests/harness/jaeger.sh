#!/usr/bin/env bash
# A real, throwaway tracing backend on loopback: Jaeger v2 (the OpenTelemetry Collector
# based `jaeger` binary) with in-memory storage.
#
#   tests/harness/jaeger.sh run
#
# Builds (or takes from the cache) the pinned jaeger binary, writes its configuration into
# a fresh temporary directory and starts it with, each on a free 127.0.0.1 port:
#   - an OTLP receiver for gRPC and one for HTTP (POST /v1/traces, protobuf or JSON),
#   - the jaeger_query extension: the HTTP query API (GET /api/traces/<id>,
#     /api/traces?service=..., /api/services) and its gRPC API.
# Nothing else listens: the collector's own metrics endpoint (8888 by default) is turned
# off, the health-check, zpages, expvar, pprof and remote-sampling extensions and the
# jaeger and zipkin receivers are not configured, and jaeger does not trace itself.
# Spans are stored as they arrive (no batch processor), so they are queryable at once.
# When the query API and both receivers answer it prints one line on stdout:
#
#   ready <dir>
#
# <dir> holds config.yaml, jaeger.log and env (KEY=VALUE lines): OTLP_GRPC_ENDPOINT,
# OTLP_HTTP_ENDPOINT and QUERY_URL (each http://127.0.0.1:PORT), QUERY_GRPC_ENDPOINT
# (127.0.0.1:PORT) and JAEGER_PID. Jaeger lives until this script's standard input
# reaches end-of-file or it gets SIGTERM/SIGINT/SIGHUP; then it is stopped and <dir> is
# removed. Whoever starts it keeps a pipe to its stdin: when that process ends, however
# it ends (panic, SIGKILL), the pipe closes and nothing is left behind.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  echo "usage: $0 run    (start Jaeger; stops when stdin closes)" >&2
  exit 2
}
[ "${1:-}" = run ] || usage

bindir=$("$here/binaries.sh" jaeger | tail -n 1)
dir=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-jaeger.XXXXXX")
jaeger_pid=""

teardown() {
  trap - EXIT INT TERM HUP
  if [ -n "$jaeger_pid" ]; then
    kill -TERM "$jaeger_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$jaeger_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$jaeger_pid" 2>/dev/null || true
    wait "$jaeger_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap teardown EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

fail() {
  echo "jaeger: $*" >&2
  if [ -f "$dir/jaeger.log" ]; then
    echo "--- last lines of jaeger.log" >&2
    tail -n 20 "$dir/jaeger.log" >&2
  fi
  exit 1
}

# shellcheck source=tests/harness/ports.sh
. "$here/ports.sh"

# --- configuration -----------------------------------------------------------------
otlp_grpc_port=$(free_port)
otlp_http_port=$(free_port)
query_http_port=$(free_port)
query_grpc_port=$(free_port)
cat > "$dir/config.yaml" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:$query_http_port
    grpc:
      endpoint: 127.0.0.1:$query_grpc_port

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$otlp_grpc_port
      http:
        endpoint: 127.0.0.1:$otlp_http_port

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML

# --- jaeger ------------------------------------------------------------------------
# OTEL_* variables of the caller (exporter endpoints, resource attributes) are not
# jaeger's to read.
(
  for var in $(compgen -e OTEL_ || true); do unset "$var"; done
  exec "$bindir/jaeger" --config "file:$dir/config.yaml"
) </dev/null >"$dir/jaeger.log" 2>&1 &
jaeger_pid=$!

query_url="http://127.0.0.1:$query_http_port"
otlp_http="http://127.0.0.1:$otlp_http_port"
# Extensions start before the pipelines, so the query API answering is not enough: the
# OTLP/HTTP receiver must accept an (empty) export and the gRPC one a connection.
ready() {
  curl -fsS -o /dev/null "$query_url/api/services" 2>/dev/null &&
    curl -fsS -o /dev/null -X POST -H 'Content-Type: application/json' --data '{}' \
      "$otlp_http/v1/traces" 2>/dev/null &&
    (exec 3<>"/dev/tcp/127.0.0.1/$otlp_grpc_port") 2>/dev/null
}
for i in $(seq 1 300); do
  ready && break
  kill -0 "$jaeger_pid" 2>/dev/null || fail "jaeger exited during start-up"
  [ "$i" = 300 ] && fail "jaeger was not ready within 60s"
  sleep 0.2
done

cat > "$dir/env" <<ENV
OTLP_GRPC_ENDPOINT=http://127.0.0.1:$otlp_grpc_port
OTLP_HTTP_ENDPOINT=$otlp_http
QUERY_URL=$query_url
QUERY_GRPC_ENDPOINT=127.0.0.1:$query_grpc_port
JAEGER_PID=$jaeger_pid
ENV

echo "ready $dir"

# Live until stdin closes; stop early if jaeger dies, so nobody waits on a corpse.
# Jaeger takes no commands: lines on stdin are ignored.
# From here the script waits in `read -t`, whose timeout bash 5.2 implements with a jump
# that cuts a trap still running when it fires: a teardown run from a signal's trap (it
# takes seconds) was abandoned halfway and left its processes' directory behind (seen:
# every control plane stopped by SIGTERM). So a signal only notes itself, and the loop
# exits, running the teardown outside the read.
stop=""
trap 'stop=143' TERM
trap 'stop=130' INT
trap 'stop=129' HUP
while true; do
  [ -z "$stop" ] || exit "$stop"
  rc=0
  read -r -t 1 _ || rc=$?
  [ -z "$stop" ] || exit "$stop"
  if [ "$rc" -ne 0 ] && [ "$rc" -le 128 ]; then
    exit 0 # end of input: whoever started us is gone
  fi
  kill -0 "$jaeger_pid" 2>/dev/null || fail "jaeger exited unexpectedly"
done
