#!/usr/bin/env bash
# Tests the container image the way a container runtime would run it, without one:
#
#   deploy/image/test.sh
#
# 1. Builds the image (deploy/image/build.sh: a no-op for cargo when nothing changed) and
#    checks the OCI layout: every blob's digest and size, the media types, the config
#    (numeric non-root user, entrypoint, cmd), a static binary and no shell.
# 2. Unpacks its one layer into a fresh root filesystem, adds what the kubelet would
#    (an /etc/hosts, the kubeconfig as a mounted file, /proc and /dev), mounts it
#    read-only in a private mount namespace, and runs the image's Entrypoint + Cmd with
#    the image's Env, chrooted, as the image's user (no capabilities, no supplementary
#    groups, no_new_privs: the restricted securityContext) against a real control plane
#    (tests/harness/controlplane.sh). The kubeconfig names the API server by host name
#    (localhost), so the static binary's name resolution is exercised too.
# 3. grpc.health.v1 answers SERVING (grpcurl), `safewrite health` in the image exits 0
#    when the binary has that subcommand, an UpdateWithRetry through reflection writes a
#    ConfigMap, /metrics answers, and SIGTERM stops it with status 0.
#
# Needs root (chroot, mounts), like a container runtime. Exits non-zero on any failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
started=$SECONDS
say() { echo "image-test: $*" >&2; }
fail() {
  echo "image-test: FAIL: $*" >&2
  if [ -n "${work:-}" ] && [ -f "$work/sidecar.log" ]; then
    echo "--- sidecar log" >&2
    tail -n 30 "$work/sidecar.log" >&2
  fi
  exit 1
}
[ "$(id -u)" = 0 ] || fail "needs root (chroot and mounts, as a container runtime does)"

layout=$(bash "$root/deploy/image/build.sh" | tail -n 1)
built=$SECONDS
tools=$(bash "$root/tests/harness/binaries.sh" | tail -n 1)

work=$(mktemp -d -t safewrite-image.XXXXXX)
sidecar_pid=""
pid=""
cleanup() {
  if [ -n "$sidecar_pid" ]; then
    kill -KILL ${pid:+"$pid"} "$sidecar_pid" 2>/dev/null || true
    wait "$sidecar_pid" 2>/dev/null || true
  fi
  if [ -n "${CONTROLPLANE_PID:-}" ]; then
    # End of its stdin: controlplane.sh stops etcd and kube-apiserver and removes its
    # directory (its SIGTERM path can lose the directory).
    local cp_in=${CONTROLPLANE[1]:-}
    [ -z "$cp_in" ] || exec {cp_in}>&-
    wait "$CONTROLPLANE_PID" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- 1. the layout ---------------------------------------------------------------------
blob() { # DIGEST -> path, after checking the digest
  local digest=$1 path="$layout/blobs/${1%%:*}/${1#*:}"
  [ -f "$path" ] || fail "blob $digest missing"
  [ "sha256:$(sha256sum "$path" | cut -d' ' -f1)" = "$digest" ] || fail "blob $digest: digest mismatch"
  echo "$path"
}
check_size() { # DESCRIPTOR_JSON
  local digest size
  digest=$(jq -r .digest <<<"$1")
  size=$(jq -r .size <<<"$1")
  [ "$(stat -c %s "$(blob "$digest")")" = "$size" ] || fail "blob $digest: size mismatch"
}
[ "$(jq -r .imageLayoutVersion "$layout/oci-layout")" = 1.0.0 ] || fail "oci-layout"
[ "$(jq '.manifests | length' "$layout/index.json")" = 1 ] || fail "index.json: one manifest expected"
descriptor=$(jq -c '.manifests[0]' "$layout/index.json")
[ "$(jq -r .mediaType <<<"$descriptor")" = application/vnd.oci.image.manifest.v1+json ] || fail "manifest media type"
check_size "$descriptor"
manifest=$(blob "$(jq -r .digest <<<"$descriptor")")
check_size "$(jq -c .config "$manifest")"
[ "$(jq -r .config.mediaType "$manifest")" = application/vnd.oci.image.config.v1+json ] || fail "config media type"
config=$(blob "$(jq -r .config.digest "$manifest")")
[ "$(jq '.layers | length' "$manifest")" = 1 ] || fail "one layer expected"
layer_descriptor=$(jq -c '.layers[0]' "$manifest")
check_size "$layer_descriptor"
[ "$(jq -r .mediaType <<<"$layer_descriptor")" = application/vnd.oci.image.layer.v1.tar+gzip ] || fail "layer media type"
layer=$(blob "$(jq -r .digest <<<"$layer_descriptor")")
[ "sha256:$(gzip -dc "$layer" | sha256sum | cut -d' ' -f1)" = "$(jq -r '.rootfs.diff_ids[0]' "$config")" ] ||
  fail "the layer's diff_id does not match the config"

user=$(jq -r .config.User "$config")
[[ "$user" =~ ^([0-9]+):([0-9]+)$ ]] || fail "User must be numeric uid:gid, is '$user'"
uid=${BASH_REMATCH[1]}
gid=${BASH_REMATCH[2]}
[ "$uid" != 0 ] || fail "the image runs as root"
mapfile -t command < <(jq -r '(.config.Entrypoint // []) + (.config.Cmd // []) | .[]' "$config")
[ "${command[*]}" = "/safewrite serve" ] || fail "entrypoint + cmd is '${command[*]}', expected '/safewrite serve'"
mapfile -t image_env < <(jq -r '.config.Env // [] | .[]' "$config")

rootfs="$work/tree"
mkdir -p "$rootfs"
tar -xzf "$layer" -C "$rootfs" --numeric-owner
for shell in bin/sh bin/bash usr/bin/sh; do
  [ ! -e "$rootfs/$shell" ] || fail "the image has a shell ($shell)"
done
readelf -lW "$rootfs/safewrite" | grep -q 'Requesting program interpreter' && fail "/safewrite is not static"
[ "$(stat -c %u:%g:%a "$rootfs/safewrite")" = 0:0:555 ] || fail "/safewrite must be root-owned, mode 555"
if find "$rootfs" -perm /6000 | grep -q .; then fail "setuid/setgid files in the image"; fi
size_compressed=$(stat -c %s "$layer")
size_uncompressed=$(gzip -dc "$layer" | wc -c)
say "layout ok: $(jq -r .digest <<<"$descriptor"), layer $((size_compressed / 1024)) KiB compressed, $((size_uncompressed / 1024)) KiB uncompressed; runs '${command[*]}' as $uid:$gid"

# --- 2. a control plane, and what the kubelet adds to the root filesystem ---------------
coproc CONTROLPLANE { exec bash "$root/tests/harness/controlplane.sh" run; }
read -r ready cpdir <&"${CONTROLPLANE[0]}" || fail "the control plane did not start"
[ "$ready" = ready ] || fail "the control plane did not start"
# shellcheck disable=SC1091
. "$cpdir/env"

# The kubeconfig as a read-only file of a mounted volume, naming the server by host name.
mkdir -p "$rootfs/var/run/kube" "$rootfs/proc" "$rootfs/dev"
sed "s|https://127.0.0.1:|https://localhost:|" "$cpdir/admin.kubeconfig" >"$rootfs/var/run/kube/config"
chmod 0444 "$rootfs/var/run/kube/config"
grep -q 'server: https://localhost:' "$rootfs/var/run/kube/config" || fail "kubeconfig rewrite"
printf '127.0.0.1\tlocalhost\n' >"$rootfs/etc/hosts"
for node in null zero random urandom; do : >"$rootfs/dev/$node"; done

# The image's environment, plus what a pod spec would set: the kubeconfig, and ports the
# kernel picks as the sockets are bound (the image's defaults, 50051 and 9464, may be
# taken on a shared machine); the sidecar logs them.
env_vars=("${image_env[@]}" "SAFEWRITE_KUBECONFIG=/var/run/kube/config"
  "SAFEWRITE_LISTEN=127.0.0.1:0" "SAFEWRITE_METRICS_LISTEN=127.0.0.1:0" "SAFEWRITE_READINESS_INTERVAL=200ms")

# env -i clears PATH: the tools are named by their paths on this machine.
setpriv=$(command -v setpriv) || fail "setpriv (util-linux) is needed"
chroot=$(command -v chroot) || fail "chroot (coreutils) is needed"

# run_in_image ARGS...: ARGS chrooted into the image as its user, with its environment.
# In a private mount namespace the root filesystem is read-only, with /proc and the
# usual /dev nodes; without one (no CAP_SYS_ADMIN) it is only root-owned.
if unshare --mount --propagation private true 2>/dev/null; then
  isolation="read-only root, private mount namespace"
  run_in_image() {
    # shellcheck disable=SC2016 # the inner script's variables are its own
    unshare --mount --propagation private -- bash -c '
      set -e
      rootfs=$1; shift
      mount --bind "$rootfs" "$rootfs"
      mount -t proc proc "$rootfs/proc"
      for node in null zero random urandom; do mount --bind "/dev/$node" "$rootfs/dev/$node"; done
      mount -o remount,bind,ro "$rootfs"
      exec "$@"' run_in_image "$rootfs" \
      env -i "${env_vars[@]}" "$setpriv" --no-new-privs -- \
      "$chroot" --userspec="$uid:$gid" --groups="$gid" "$rootfs" "$@"
  }
else
  isolation="root-owned root (no mount namespace available)"
  run_in_image() {
    env -i "${env_vars[@]}" "$setpriv" --no-new-privs -- \
      "$chroot" --userspec="$uid:$gid" --groups="$gid" "$rootfs" "$@"
  }
fi

# --- 3. serve, health, a write ------------------------------------------------------------
run_in_image "${command[@]}" >"$work/sidecar.log" 2>&1 &
sidecar_pid=$!
# shellcheck source=tests/harness/ports.sh
. "$root/tests/harness/ports.sh"
addr=$(listening_address "$work/sidecar.log" "$sidecar_pid" tcp) &&
  metrics=$(listening_address "$work/sidecar.log" "$sidecar_pid" http) ||
  fail "the sidecar did not log its addresses: $(cat "$work/sidecar.log")"
health=""
for _ in $(seq 1 150); do
  health=$("$tools/grpcurl" -plaintext "$addr" grpc.health.v1.Health/Check 2>/dev/null || true)
  grep -q '"SERVING"' <<<"$health" && break
  kill -0 "$sidecar_pid" 2>/dev/null || fail "the sidecar exited"
  sleep 0.2
done
grep -q '"SERVING"' <<<"$health" || fail "health never said SERVING: $health"
say "serving on $addr ($isolation); health: SERVING"

# The process is the image's user, with no capabilities and no way to gain any.
pid=$(pgrep -f -n "^/safewrite serve" -P "$sidecar_pid" 2>/dev/null || echo "$sidecar_pid")
status=$(cat "/proc/$pid/status")
grep -Eq "^Uid:\s+$uid\s+$uid\s+$uid\s+$uid$" <<<"$status" || fail "uid: $(grep ^Uid <<<"$status")"
grep -Eq "^Gid:\s+$gid\s+$gid\s+$gid\s+$gid$" <<<"$status" || fail "gid: $(grep ^Gid <<<"$status")"
grep -Eq "^Groups:\s*($gid)?\s*$" <<<"$status" || fail "groups: $(grep ^Groups <<<"$status")"
grep -Eq "^CapEff:\s+0+$" <<<"$status" || fail "capabilities: $(grep ^CapEff <<<"$status")"
grep -Eq "^NoNewPrivs:\s+1$" <<<"$status" || fail "no_new_privs is not set"

# The probe command of deploy/kubernetes/, once the binary has it.
if run_in_image /safewrite health --help >/dev/null 2>&1; then
  run_in_image /safewrite health --address "$addr" >"$work/health.out" 2>&1 ||
    fail "safewrite health exited $?: $(cat "$work/health.out")"
  say "safewrite health --address $addr: exit 0"
else
  say "safewrite health: not in this binary yet (skipped)"
fi

api() {
  curl -sS --cacert "$CA_FILE" -H "Authorization: Bearer $ADMIN_TOKEN" \
    -H 'Content-Type: application/json' "$@"
}
ns="image-$$"
api -o /dev/null -X POST --data "{\"metadata\":{\"name\":\"$ns\"}}" "$SERVER/api/v1/namespaces"
api -o /dev/null -X POST --data '{"metadata":{"name":"counter"},"data":{"n":"0"}}' \
  "$SERVER/api/v1/namespaces/$ns/configmaps"
request=$(jq -n -c --arg ns "$ns" '{
  target: {apiVersion: "v1", kind: "ConfigMap", namespace: $ns, name: "counter"},
  mutation: {cel: {expression: "{\"data\": {\"n\": string(int(object.data.n) + 1)}}"}}
}')
answer=$("$tools/grpcurl" -plaintext -d "$request" "$addr" \
  safewrite.v1.WriterService/UpdateWithRetry 2>&1) || fail "UpdateWithRetry: $answer"
[ "$(jq -r .result.outcome <<<"$answer")" = OUTCOME_UPDATED ] || fail "UpdateWithRetry answered $answer"
value=$(api "$SERVER/api/v1/namespaces/$ns/configmaps/counter" | jq -r .data.n)
[ "$value" = 1 ] || fail "the ConfigMap holds n=$value after one increment"
say "UpdateWithRetry: OUTCOME_UPDATED, the ConfigMap holds n=1"

scrape=$(curl -fsS "http://$metrics/metrics") || fail "GET /metrics failed"
grep -q '^safewrite_rpcs_total{' <<<"$scrape" || fail "/metrics has no safewrite_rpcs_total"
rss=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
say "/metrics ok; peak RSS so far $((rss / 1024)) MiB"

kill -TERM "$pid"
code=0
wait "$sidecar_pid" || code=$?
sidecar_pid=""
[ "$code" = 0 ] || fail "exit status $code after SIGTERM"
grep -q . "$work/sidecar.log" || fail "the sidecar logged nothing"
say "stopped on SIGTERM with status 0"
echo "image test passed in $((SECONDS - started))s (build $((built - started))s)"
