#!/usr/bin/env bash
# A real, throwaway Kubernetes control plane on loopback: etcd + kube-apiserver.
#
#   tests/harness/controlplane.sh run
#
# Builds (or takes from the cache) the pinned binaries, starts etcd and kube-apiserver
# on free 127.0.0.1 ports in a fresh temporary directory, with generated serving
# certificates and token authentication for two identities:
#   admin      - group system:masters (admin.kubeconfig)
#   restricted - RBAC allows only get/list/watch on configmaps (restricted.kubeconfig)
#   writer     - RBAC cluster-admin but not system:masters, so API Priority and
#                Fairness limits apply to it (writer.kubeconfig)
# When /readyz answers ok it prints one line on stdout:
#
#   ready <dir>
#
# <dir> holds admin.kubeconfig, restricted.kubeconfig, env (KEY=VALUE lines: ports,
# pids, tokens, server URL; rewritten after every stop and start command below, so its
# pids are the running processes') and the logs. The control plane lives until this script's
# standard input reaches end-of-file or it gets SIGTERM/SIGINT/SIGHUP; then both
# processes are stopped and <dir> is removed. Whoever starts it keeps a pipe to its
# stdin: when that process ends, however it ends (panic, SIGKILL), the pipe closes and
# nothing is left behind.
#
# For tests/harness/node.sh, which runs it inside a network namespace of its own:
# SAFEWRITE_APISERVER_FLAGS adds flags to kube-apiserver (the last of a repeated flag
# wins), and SAFEWRITE_APISERVER_SANS adds subjectAltName entries (e.g.
# "IP:10.96.0.1,DNS:kubernetes.default.svc") to its serving certificate.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  echo "usage: $0 run    (start a control plane; stops when stdin closes)" >&2
  exit 2
}
[ "${1:-}" = run ] || usage

bindir=$("$here/binaries.sh" | tail -n 1)
dir=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-cp.XXXXXX")
etcd_pid=""
apiserver_pid=""

teardown() {
  trap - EXIT INT TERM HUP
  # The API server first (it needs etcd to shut down quickly), then etcd.
  for pid in $apiserver_pid $etcd_pid; do
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
}
trap teardown EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

fail() {
  echo "controlplane: $*" >&2
  for log in "$dir"/etcd.log "$dir"/kube-apiserver.log; do
    if [ -f "$log" ]; then
      echo "--- last lines of $(basename "$log")" >&2
      tail -n 20 "$log" >&2
    fi
  done
  exit 1
}

# shellcheck source=tests/harness/ports.sh
. "$here/ports.sh"

# --- credentials -------------------------------------------------------------------
pki="$dir/pki"
mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=safewrite-test-ca" \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
  -keyout "$pki/serving.key" -out "$pki/serving.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost%s\nextendedKeyUsage=serverAuth\n' \
  "${SAFEWRITE_APISERVER_SANS:+,$SAFEWRITE_APISERVER_SANS}" > "$pki/ext.cnf"
openssl x509 -req -in "$pki/serving.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
  -CAcreateserial -days 2 -extfile "$pki/ext.cnf" -out "$pki/serving.crt" 2>/dev/null
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

admin_token=$(openssl rand -hex 24)
restricted_token=$(openssl rand -hex 24)
writer_token=$(openssl rand -hex 24)
cat > "$pki/tokens.csv" <<CSV
$admin_token,admin,admin-uid,"system:masters"
$restricted_token,restricted,restricted-uid
$writer_token,writer,writer-uid
CSV

# --- etcd --------------------------------------------------------------------------
etcd_port=$(free_port)
peer_port=$(free_port)
start_etcd() {
"$bindir/etcd" \
  --name default \
  --data-dir "$dir/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" \
  --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "default=http://127.0.0.1:$peer_port" \
  --unsafe-no-fsync \
  --log-level warn \
  </dev/null >>"$dir/etcd.log" 2>&1 &
etcd_pid=$!
for i in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1 && break
  kill -0 "$etcd_pid" 2>/dev/null || fail "etcd exited during start-up"
  [ "$i" = 100 ] && fail "etcd did not become healthy within 20s"
  sleep 0.2
done
}
# stop_etcd: stops etcd (its data stays on disk); the API server answers errors meanwhile.
stop_etcd() {
  [ -n "$etcd_pid" ] || return 0
  kill "$etcd_pid" 2>/dev/null || true
  wait "$etcd_pid" 2>/dev/null || true
  etcd_pid=""
}
start_etcd

# --- kube-apiserver ----------------------------------------------------------------
api_port=$(free_port)
start_apiserver() {
"$bindir/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 \
  --advertise-address 127.0.0.1 \
  --secure-port "$api_port" \
  --cert-dir "$dir/apiserver-certs" \
  --tls-cert-file "$pki/serving.crt" \
  --tls-private-key-file "$pki/serving.key" \
  --token-auth-file "$pki/tokens.csv" \
  --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$pki/sa.pub" \
  --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 \
  --endpoint-reconciler-type none \
  --profiling=false \
  ${SAFEWRITE_APISERVER_FLAGS:-} \
  </dev/null >>"$dir/kube-apiserver.log" 2>&1 &
apiserver_pid=$!
}

server="https://127.0.0.1:$api_port"
admin_curl() {
  curl -sS --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token" "$@"
}
wait_apiserver_ready() {
  for i in $(seq 1 600); do
    [ "$(admin_curl "$server/readyz" 2>/dev/null || true)" = ok ] && return 0
    kill -0 "$apiserver_pid" 2>/dev/null || fail "kube-apiserver exited during start-up"
    [ "$i" = 600 ] && fail "kube-apiserver was not ready within 120s"
    sleep 0.2
  done
}
stop_apiserver() {
  kill -TERM "$apiserver_pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$apiserver_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$apiserver_pid" 2>/dev/null || true
  wait "$apiserver_pid" 2>/dev/null || true
  apiserver_pid=""
}
start_apiserver
wait_apiserver_ready

# --- RBAC for the restricted identity ------------------------------------------------
post() {
  local path=$1 body=$2 code
  code=$(admin_curl -o "$dir/rbac.out" -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' --data "$body" "$server$path")
  case "$code" in 201 | 409) ;; *) fail "POST $path answered $code: $(cat "$dir/rbac.out")" ;; esac
}
post /apis/rbac.authorization.k8s.io/v1/clusterroles '{
  "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
  "metadata": {"name": "safewrite-restricted"},
  "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]}'
post /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{
  "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
  "metadata": {"name": "safewrite-restricted"},
  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "safewrite-restricted"},
  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "restricted"}]}'

post /apis/rbac.authorization.k8s.io/v1/clusterrolebindings '{
  "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
  "metadata": {"name": "safewrite-writer"},
  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "writer"}]}'

# --- kubeconfigs -------------------------------------------------------------------
ca_data=$(base64 -w0 < "$pki/ca.crt")
kubeconfig() {
  local user=$1 token=$2
  cat <<YAML
apiVersion: v1
kind: Config
clusters:
- name: safewrite-test
  cluster:
    server: $server
    certificate-authority-data: $ca_data
users:
- name: $user
  user:
    token: $token
contexts:
- name: $user
  context:
    cluster: safewrite-test
    user: $user
current-context: $user
YAML
}
kubeconfig admin "$admin_token" > "$dir/admin.kubeconfig"
kubeconfig restricted "$restricted_token" > "$dir/restricted.kubeconfig"
kubeconfig writer "$writer_token" > "$dir/writer.kubeconfig"
# write_env: (re)writes <dir>/env whole, by a rename, so that a reader never sees half of
# it. Called again after every stop and start below: APISERVER_PID and ETCD_PID are the
# running processes' (empty while one is stopped), read afresh by whoever measures them.
write_env() {
cat > "$dir/env.new" <<ENV
SERVER=$server
API_PORT=$api_port
ETCD_PORT=$etcd_port
ETCD_PEER_PORT=$peer_port
APISERVER_PID=$apiserver_pid
ETCD_PID=$etcd_pid
ADMIN_TOKEN=$admin_token
RESTRICTED_TOKEN=$restricted_token
CA_FILE=$pki/ca.crt
ENV
mv "$dir/env.new" "$dir/env"
}
write_env

echo "ready $dir"

# Live until stdin closes; stop early if a component dies, so nobody waits on a corpse.
# Lines on stdin are commands, each answered with one line on stdout:
#   stop-apiserver   stops kube-apiserver (etcd keeps the data)  -> "apiserver stopped"
#   start-apiserver  starts it again on the same port, when ready -> "apiserver started"
#   stop-etcd        stops etcd (its data stays)                  -> "etcd stopped"
#   start-etcd       starts it again on the same ports, when healthy -> "etcd started"
# From here the script waits in `read -t`, whose timeout bash 5.2 implements with a jump
# that cuts a trap still running when it fires: a teardown run from a signal's trap (it
# takes seconds) was abandoned halfway and left its processes' directory behind (seen:
# every control plane stopped by SIGTERM). So a signal only notes itself, and the loop
# exits, running the teardown outside the read.
stop=""
trap 'stop=143' TERM
trap 'stop=130' INT
trap 'stop=129' HUP
partial=""
while true; do
  [ -z "$stop" ] || exit "$stop"
  rc=0
  chunk=""
  read -r -t 1 chunk || rc=$?
  [ -z "$stop" ] || exit "$stop"
  if [ "$rc" -ne 0 ] && [ "$rc" -le 128 ]; then
    exit 0 # end of input: whoever started us is gone
  fi
  if [ "$rc" -gt 128 ]; then
    # The timeout can fall in the middle of a line: keep what came, read on.
    partial+=$chunk
    command=""
  else
    command=$partial$chunk
    partial=""
  fi
  # The env file is rewritten before the answer, so it names the running pids once the
  # answer is read.
  case "$command" in
    stop-apiserver) stop_apiserver; write_env; echo "apiserver stopped" ;;
    start-apiserver)
      [ -n "$apiserver_pid" ] || { start_apiserver; wait_apiserver_ready; }
      write_env
      echo "apiserver started"
      ;;
    stop-etcd) stop_etcd; write_env; echo "etcd stopped" ;;
    start-etcd)
      [ -n "$etcd_pid" ] || start_etcd
      write_env
      echo "etcd started"
      ;;
    "") ;;
    *) echo "controlplane: unknown command: $command" >&2 ;;
  esac
  if [ -n "$etcd_pid" ]; then
    kill -0 "$etcd_pid" 2>/dev/null || fail "etcd exited unexpectedly"
  fi
  if [ -n "$apiserver_pid" ]; then
    kill -0 "$apiserver_pid" 2>/dev/null || fail "kube-apiserver exited unexpectedly"
  fi
done
