#!/usr/bin/env bash
# A real Kubernetes node in the harness: containerd + runc + kubelet + kube-proxy,
# registered with a control plane of its own (tests/harness/controlplane.sh, plus
# kube-controller-manager and kube-scheduler), running real pods, all of it inside a
# network namespace of the harness's own, the way a kind node runs inside its container.
#
#   tests/harness/node.sh run
#
# Needs root (a container runtime does). Builds (or takes from the cache) the node's
# binaries (`binaries.sh node`) and the safewrite image (deploy/image/build.sh), starts
# a control plane, containerd and a kubelet in a fresh temporary directory, imports the
# pause image, the safewrite image and a second image of it (another version label, so
# another manifest digest: what the upgrade test moves a running pod to), and when the
# node is Ready prints one line:
#
#   ready <dir>
#
# <dir>/env holds the control plane's KEY=VALUE lines (their addresses are the node's
# namespace's) plus NODE_NAME, NETNS (the node's network namespace), ADMIN_KUBECONFIG
# (the admin identity, reaching the API server from outside the namespace), CP_DIR,
# SAFEWRITE_IMAGE (the image name pods use, with imagePullPolicy: Never) and
# SAFEWRITE_IMAGE_DIGEST and SAFEWRITE_IMAGE_ID (its manifest's and its config's
# digests), SAFEWRITE_NEXT_IMAGE, SAFEWRITE_NEXT_IMAGE_DIGEST and SAFEWRITE_NEXT_IMAGE_ID
# (the second image: the same binary, other digests), POD_CIDR,
# SERVICE_HOST, KUBELET_PORT, POD_LOGS (the kubelet's containers' logs: the API server
# cannot ask it for them, the node publishing no address). Everything lives until
# stdin reaches end-of-file (or SIGTERM/SIGINT/SIGHUP), then every process (pods,
# shims, containerd, kubelet, the control plane), mount, network namespace, cgroup,
# interface, route and iptables rule this script made is removed, with <dir> (and the
# kubelet's own iptables chains, when no other kubelet runs here).
#
# The node, and what is not real about it:
# - kubelet with `failCgroupV1: false`: kubelet 1.35+ refuses cgroup v1 unless told, and
#   the machines this runs on have only cgroup v1. cgroupfs driver (no systemd), pods
#   under a cgroup root of this node's own. The node's address is 127.0.0.1: its
#   kubelet listens on loopback only, and the API server reaches it there (logs).
# - containerd with `restrict_oom_score_adj = true`: here processes lack
#   CAP_SYS_RESOURCE, so runc cannot lower a sandbox's oom_score_adj.
# - The kubelet authenticates with the control plane's admin token (no TLS bootstrap,
#   no Node authorizer: the control plane authorizes with RBAC only).
# - The network: every process of the node and its control plane runs in a network
#   namespace made here (NETNS), which has loopback, one bridge and the pods' veths, and
#   no link to the machine's own network: nothing in it can send a packet anywhere else.
#   Pods run on the bridge with a pod CIDR (a /24 of 10.244.0.0/16, CNI bridge +
#   host-local) in network namespaces containerd makes under <dir>; a pod has no default
#   route, only its /24 and the service range (via the bridge address). The API server
#   listens on all of the namespace's addresses and advertises the bridge address; its
#   serving certificate names the `kubernetes` Service's address too, so a pod reaches
#   it the in-cluster way: KUBERNETES_SERVICE_HOST, DNATed by kube-proxy (iptables mode,
#   in the namespace) to the endpoint the API server published. Tests outside the
#   namespace reach the API server through a forwarder on the machine's loopback
#   (socat, one `nsenter` per connection into the namespace), named by
#   ADMIN_KUBECONFIG.
# - kube-controller-manager (Deployments, ReplicaSets, Jobs, service accounts, the
#   garbage collector, kube-root-ca.crt with both CAs) and kube-scheduler run with the
#   admin identity too, without leader election, serving on loopback only.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
log() { echo "node: $*" >&2; }

[ "${1:-}" = run ] || { echo "usage: $0 run    (start a node; stops when stdin closes)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { log "needs root (a container runtime does)"; exit 1; }
# The cgroup handling below (a cgroup root of the node's own in every v1 hierarchy, pods'
# processes found there at teardown) is written for cgroup v1, what these machines have.
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  log "this host has cgroup v2 (unified); this harness only knows cgroup v1 so far"
  exit 1
fi

started=$SECONDS
bindir=$("$here/binaries.sh" node | tail -n 1)
# deploy/image/build.sh stages in one directory of target/image: runs at the same time
# (another checkout user's deploy/image/test.sh) can spoil each other's, so a failed
# build is tried once more.
image_layout=$(bash "$root/deploy/image/build.sh" | tail -n 1) ||
  image_layout=$(bash "$root/deploy/image/build.sh" | tail -n 1) ||
  { log "deploy/image/build.sh failed"; exit 1; }
built=$SECONDS

dir=$(mktemp -d "${TMPDIR:-/tmp}/safewrite-node.XXXXXX")
chmod 0755 "$dir"
id=$(basename "$dir" | tr -dc 'a-zA-Z0-9' | tail -c 6 | tr 'A-Z' 'a-z')
node_name="safewrite-node-$id"
bridge="swbr$id"
cgroup_root="/safewrite-node-$id"
containerd_pid=""
kubelet_pid=""
kcm_pid=""
scheduler_pid=""
proxy_pid=""
forward_pid=""
cp_pid=""
netns="swnode$id"
# A command prefix that runs a command in the node's network namespace (only that: `ip
# netns exec` would also remount /sys, hiding the cgroup hierarchies from the kubelet and
# runc). nsenter execs the command, so `$!` of `"${in_node[@]}" cmd &` is cmd's pid.
in_node=(nsenter --net="/run/netns/$netns" --)
inns() { "${in_node[@]}" "$@"; }

# --- teardown ------------------------------------------------------------------------
stop_pid() { # PID: TERM, up to 10 s, then KILL
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cgroup_dirs() { # every cgroup v1 hierarchy's directory for this node's cgroup root
  local mount
  for mount in /sys/fs/cgroup/*/; do
    [ -d "$mount${cgroup_root#/}" ] && echo "$mount${cgroup_root#/}"
  done
  return 0
}
teardown() {
  trap - EXIT INT TERM HUP
  # Best effort, every step: under `set -e` one failing command (a cgroup removed while
  # find walks it) would end the script here and leave the rest running.
  set +e +o pipefail
  stop_pid "$forward_pid"
  stop_pid "$proxy_pid"
  stop_pid "$scheduler_pid"
  stop_pid "$kcm_pid"
  stop_pid "$kubelet_pid"
  # Every process in the pods' cgroups (containers, pause), until none is left.
  for _ in $(seq 1 50); do
    local pids
    pids=$(cgroup_dirs | while read -r d; do find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done | sort -u)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  # The shims serving this containerd, then containerd.
  local shim
  for shim in $(pgrep -f "containerd-shim-runc-v2 .*-address $dir/" 2>/dev/null || true); do
    kill -KILL "$shim" 2>/dev/null || true
  done
  stop_pid "$containerd_pid"
  # Mounts under <dir> (rootfs overlays, network namespaces, volumes), deepest first.
  awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
  # Cgroups, deepest first.
  cgroup_dirs | while read -r d; do find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; done
  # The control plane stops when its stdin closes.
  if [ -n "$cp_pid" ]; then
    local cp_in=${CONTROLPLANE[1]:-}
    [ -z "$cp_in" ] || exec {cp_in}>&-
    wait "$cp_pid" 2>/dev/null || true
  fi
  # Whatever still runs in the node's namespace, then the namespace, with its bridge,
  # routes and iptables rules (kube-proxy's, the kubelet's and ours): nothing of them
  # was ever in the machine's own.
  local left
  left=$(ip netns pids "$netns" 2>/dev/null || true)
  # shellcheck disable=SC2086
  [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
  ip netns del "$netns" 2>/dev/null || true
  rm -rf "$dir"
}
trap teardown EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

fail() {
  log "$*"
  for f in "$dir"/containerd.log "$dir"/kubelet.log "$dir"/kube-controller-manager.log \
    "$dir"/kube-scheduler.log "$dir"/kube-proxy.log; do
    if [ -f "$f" ]; then
      echo "--- last lines of $(basename "$f")" >&2
      tail -n 25 "$f" >&2
    fi
  done
  exit 1
}
# shellcheck source=tests/harness/ports.sh
. "$root/tests/harness/ports.sh"
node_port() { # on the node's namespace's loopback
  inns python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# --- network: the node's namespace, a bridge, a pod CIDR ---------------------------------
# Inside a namespace of its own any /24 of 10.244.0.0/16 is free; 10.244.0.0/16 and the
# service range get blackhole routes there, so only the bridge's /24 leads anywhere: to
# the pods. The `kubernetes` Service takes the first address of the service range.
ip netns add "$netns"
inns ip link set lo up
pod_cidr="10.244.$((RANDOM % 250 + 1)).0/24"
gateway="${pod_cidr%.0/24}.1"
service_range=10.96.0.0/16 # controlplane.sh's --service-cluster-ip-range
service_host=10.96.0.1
inns ip route add blackhole 10.244.0.0/16
inns ip route add blackhole "$service_range"
# The bridge exists before the CNI plugin sees it, so its address is ours.
inns ip link add "$bridge" type bridge
inns ip addr add "$gateway/24" dev "$bridge"
inns ip link set "$bridge" up
# Nothing from the pods is forwarded anywhere (IP forwarding stays off in the namespace).
inns iptables -w 5 -I FORWARD -i "$bridge" ! -o "$bridge" -j DROP
inns iptables -w 5 -I FORWARD -o "$bridge" ! -i "$bridge" -j DROP

# --- the control plane, in the namespace ------------------------------------------------
# The API server reaches the kubelet at its InternalIP (127.0.0.1, the namespace's
# loopback): never by host name. It listens on every address of the namespace and
# publishes the bridge address as the `kubernetes` Service's endpoint (the default lease
# reconciler), which kube-proxy then routes the Service address to.
coproc CONTROLPLANE {
  SAFEWRITE_APISERVER_FLAGS="--kubelet-preferred-address-types InternalIP --bind-address 0.0.0.0 --advertise-address $gateway --endpoint-reconciler-type lease ${SAFEWRITE_APISERVER_FLAGS:-}" \
    SAFEWRITE_APISERVER_SANS="IP:$gateway,IP:$service_host,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    exec nsenter --net="/run/netns/$netns" -- bash "$here/controlplane.sh" run
}
cp_pid=$CONTROLPLANE_PID
read -r ready cp_dir <&"${CONTROLPLANE[0]}" || fail "the control plane did not start"
[ "$ready" = ready ] || fail "the control plane did not start"
# shellcheck disable=SC1091
. "$cp_dir/env"
started_node=$SECONDS
admin() {
  inns curl -sS --max-time 10 --cacert "$CA_FILE" -H "Authorization: Bearer $ADMIN_TOKEN" \
    -H 'Content-Type: application/json' "$@"
}
# The API server's bootstrap controller creates the `kubernetes` Service soon after the
# server is ready, later on a loaded machine: wait for it (at most 30 s).
found=null
for _ in $(seq 150); do
  found=$(admin "$SERVER/api/v1/namespaces/default/services/kubernetes" | jq -r .spec.clusterIP) ||
    found=null
  [ "$found" = null ] || break
  sleep 0.2
done
[ "$found" = "$service_host" ] || fail "the kubernetes Service is at $found, not $service_host (waited 30 s)"

# The way in from outside the namespace, for the tests: a forwarder on the machine's
# loopback that enters the namespace per connection.
forward_port=$(free_port)
printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s -- socat STDIO TCP:127.0.0.1:%s\n' \
  "$netns" "$API_PORT" >"$dir/into-node"
chmod +x "$dir/into-node"
socat "TCP-LISTEN:$forward_port,bind=127.0.0.1,reuseaddr,fork" "EXEC:$dir/into-node" \
  </dev/null >>"$dir/forward.log" 2>&1 &
forward_pid=$!
sed "s|https://127.0.0.1:$API_PORT|https://127.0.0.1:$forward_port|" "$cp_dir/admin.kubeconfig" \
  >"$dir/admin.kubeconfig"

# --- containerd -------------------------------------------------------------------------
mkdir -p "$dir/cni/net.d" "$dir/cni/bin" "$dir/opt"
for plugin in bridge host-local loopback portmap; do
  ln -s "$(readlink -f "$bindir/$plugin")" "$dir/cni/bin/$plugin"
done
cat >"$dir/cni/net.d/10-safewrite.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "safewrite-pods",
  "plugins": [
    {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr", "gateway": "$gateway"}]],
              "routes": [{"dst": "$service_range"}], "dataDir": "$dir/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
pause_image=$(jq -r '.manifests[0].annotations["io.containerd.image.name"]' "$bindir/pause-oci/index.json")
cat >"$dir/containerd.toml" <<TOML
version = 3
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$dir/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$pause_image"
[plugins.'io.containerd.cri.v1.runtime']
  # Processes here lack CAP_SYS_RESOURCE: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  # Network namespaces under the state directory, so teardown finds them all.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "$(readlink -f "$bindir/runc")"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$dir/cni/bin"]
    conf_dir = "$dir/cni/net.d"
TOML
# The shim is found on PATH.
PATH="$bindir:$PATH" "${in_node[@]}" "$bindir/containerd" --config "$dir/containerd.toml" \
  </dev/null >>"$dir/containerd.log" 2>&1 &
containerd_pid=$!
ctr() { "$bindir/ctr" --address "$dir/containerd.sock" --namespace k8s.io "$@"; }
for i in $(seq 1 100); do
  ctr version >/dev/null 2>&1 && break
  kill -0 "$containerd_pid" 2>/dev/null || fail "containerd exited during start-up"
  [ "$i" = 100 ] && fail "containerd did not answer within 20s"
  sleep 0.2
done

# --- images: pause and safewrite, from OCI layouts ----------------------------------------
tar --create --file "$dir/pause.tar" --directory "$bindir/pause-oci/" .
ctr images import --local "$dir/pause.tar" >/dev/null || fail "import the pause image"
# The safewrite images' layouts, each named in its index the way `ctr images import`
# reads it (the archive build.sh writes also carries a docker-style manifest.json, whose
# tag would give the image a second, unqualified name).
import_layout() { # LAYOUT NAME
  local layout=$1 name=$2
  rm -rf "$dir/safewrite-oci"
  mkdir -p "$dir/safewrite-oci"
  cp -r "$layout/blobs" "$layout/oci-layout" "$dir/safewrite-oci/"
  jq -c --arg name "$name" '.manifests[0].annotations["io.containerd.image.name"] = $name' \
    "$layout/index.json" >"$dir/safewrite-oci/index.json"
  tar --create --file "$dir/safewrite.tar" --directory "$dir/safewrite-oci" .
  ctr images import --local "$dir/safewrite.tar" >/dev/null || fail "import $name"
  rm -rf "$dir/safewrite-oci" "$dir/safewrite.tar"
}
version=$(jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$image_layout/index.json")
safewrite_image="safewrite.test/safewrite:$version"
# Each image's manifest digest, and its ID (its config's digest: what the runtime
# reports as a container's imageID when the image has no repo digest, as imported ones).
manifest_digest() { jq -r '.manifests[0].digest' "$1/index.json"; }
image_id() { jq -r .config.digest "$1/blobs/sha256/$(manifest_digest "$1" | cut -d: -f2)"; }
safewrite_digest=$(manifest_digest "$image_layout")
safewrite_id=$(image_id "$image_layout")
# The image the upgrade test (tests/integration/node/upgrade.rs) moves a running pod to:
# the same layer (the same binary) under a config labelled version "$version-next", so
# its config and manifest digests differ, as a next release's would. (Building the image
# again at another SOURCE_DATE_EPOCH would differ too, but rebuilds the binary twice,
# about 5 minutes each here: ring's and psm's build scripts watch that variable.)
next_version="$version-next"
next_image="safewrite.test/safewrite:$next_version"
next_layout="$dir/safewrite-next-oci"
mkdir -p "$next_layout/blobs/sha256"
cp "$image_layout/oci-layout" "$next_layout/"
first_manifest="$image_layout/blobs/sha256/$(manifest_digest "$image_layout" | cut -d: -f2)"
layer=$(jq -r '.layers[0].digest' "$first_manifest" | cut -d: -f2)
cp "$image_layout/blobs/sha256/$layer" "$next_layout/blobs/sha256/"
jq -c --arg v "$next_version" '.config.Labels["org.opencontainers.image.version"] = $v' \
  "$image_layout/blobs/sha256/$(image_id "$image_layout" | cut -d: -f2)" >"$next_layout/config.json"
config=$(sha256sum "$next_layout/config.json" | cut -d' ' -f1)
jq -c --arg c "sha256:$config" --argjson size "$(stat -c %s "$next_layout/config.json")" \
  --arg v "$next_version" '.config.digest = $c | .config.size = $size
    | .annotations["org.opencontainers.image.version"] = $v' \
  "$first_manifest" >"$next_layout/manifest.json"
manifest=$(sha256sum "$next_layout/manifest.json" | cut -d' ' -f1)
mv "$next_layout/config.json" "$next_layout/blobs/sha256/$config"
jq -c --arg m "sha256:$manifest" --argjson size "$(stat -c %s "$next_layout/manifest.json")" \
  --arg v "$next_version" '.manifests[0].digest = $m | .manifests[0].size = $size
    | .manifests[0].annotations["org.opencontainers.image.ref.name"] = $v' \
  "$image_layout/index.json" >"$next_layout/index.json"
mv "$next_layout/manifest.json" "$next_layout/blobs/sha256/$manifest"
next_digest=$(manifest_digest "$next_layout")
next_id=$(image_id "$next_layout")
[ "$next_digest" != "$safewrite_digest" ] ||
  fail "the second image has the first one's manifest digest $next_digest"
import_layout "$image_layout" "$safewrite_image"
import_layout "$next_layout" "$next_image"
rm -rf "$next_layout" "$dir/pause.tar"

# The controller image: tests/harness/node-controller, a static program of the Go client
# (clients/go as committed at HEAD, so that work in progress in the checkout cannot break
# it), built in a throwaway module; Go's build cache makes a rebuild a link step.
controller_work="$dir/node-controller"
mkdir -p "$controller_work/src"
cp "$here"/node-controller/*.go "$controller_work/"
git -C "$root" archive HEAD clients/go | tar -x -C "$controller_work/src" ||
  fail "take clients/go from HEAD"
(
  cd "$controller_work"
  go mod init safewrite.test/node-controller >/dev/null 2>&1
  go mod edit -require safewrite.dev/clients/go@v0.0.0 \
    -replace "safewrite.dev/clients/go=$controller_work/src/clients/go"
  cp src/clients/go/go.sum go.sum
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o controller .
) >&2 || fail "build tests/harness/node-controller"
controller_image="safewrite.test/node-controller:$(sha256sum "$controller_work/controller" | cut -c1-16)"
bash "$here/file-image.sh" "$controller_work/controller" "$controller_image" 65532:65532 \
  "$controller_work/oci"
tar --create --file "$controller_work/oci.tar" --directory "$controller_work/oci" .
ctr images import --local "$controller_work/oci.tar" >/dev/null || fail "import the controller image"
images=$(ctr images ls -q)
for image in "$pause_image" "$safewrite_image" "$next_image" "$controller_image"; do
  grep -qx "$image" <<<"$images" || fail "no image $image after the imports: $images"
done

# --- kubelet --------------------------------------------------------------------------------
for d in /sys/fs/cgroup/*/; do
  [ -L "${d%/}" ] && continue # cpu,cpuacct style links to a joint hierarchy
  mkdir -p "$d${cgroup_root#/}"
  if [ -f "${d}cpuset.cpus" ]; then
    cat "${d}cpuset.cpus" >"$d${cgroup_root#/}/cpuset.cpus"
    cat "${d}cpuset.mems" >"$d${cgroup_root#/}/cpuset.mems"
  fi
done
kubelet_port=$(node_port)
healthz_port=$(node_port)
: >"$dir/resolv.conf" # pods get no name server: nothing to ask outside
cp "$cp_dir/admin.kubeconfig" "$dir/kubelet.kubeconfig"
cat >"$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# kubelet 1.35+ refuses to start on cgroup v1 unless this says false; the machines this
# harness runs on have cgroup v1 only (kubelet warns that v1 support is deprecated).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $cgroup_root
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
# On loopback only: the API server asks it for logs without client credentials.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
resolvConf: $dir/resolv.conf
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
containerRuntimeEndpoint: unix://$dir/containerd.sock
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
serializeImagePulls: false
localStorageCapacityIsolation: false
# Container logs under <dir> too (the default is /var/log/pods).
podLogsDir: $dir/pod-logs
YAML
"${in_node[@]}" "$bindir/kubelet" \
  --config "$dir/kubelet.yaml" \
  --kubeconfig "$dir/kubelet.kubeconfig" \
  --root-dir "$dir/kubelet" \
  --cert-dir "$dir/kubelet/pki" \
  --hostname-override "$node_name" \
  --node-ip 127.0.0.1 \
  --v 2 \
  </dev/null >>"$dir/kubelet.log" 2>&1 &
kubelet_pid=$!

for i in $(seq 1 300); do
  ready_status=$(admin "$SERVER/api/v1/nodes/$node_name" 2>/dev/null |
    jq -r '.status.conditions // [] | map(select(.type == "Ready")) | .[0].status // ""' 2>/dev/null || true)
  [ "$ready_status" = True ] && break
  kill -0 "$kubelet_pid" 2>/dev/null || fail "kubelet exited during start-up"
  kill -0 "$containerd_pid" 2>/dev/null || fail "containerd exited during start-up"
  [ "$i" = 300 ] && fail "node $node_name was not Ready within 60s"
  sleep 0.2
done

# --- kube-controller-manager and kube-scheduler -----------------------------------------
"${in_node[@]}" "$bindir/kube-controller-manager" \
  --kubeconfig "$cp_dir/admin.kubeconfig" \
  --authentication-kubeconfig "$cp_dir/admin.kubeconfig" \
  --authorization-kubeconfig "$cp_dir/admin.kubeconfig" \
  --leader-elect=false \
  --bind-address 127.0.0.1 \
  --secure-port "$(node_port)" \
  --root-ca-file "$CA_FILE" \
  --use-service-account-credentials=false \
  --controllers '*' \
  --concurrent-job-syncs 5 \
  </dev/null >>"$dir/kube-controller-manager.log" 2>&1 &
kcm_pid=$!
"${in_node[@]}" "$bindir/kube-scheduler" \
  --kubeconfig "$cp_dir/admin.kubeconfig" \
  --authentication-kubeconfig "$cp_dir/admin.kubeconfig" \
  --authorization-kubeconfig "$cp_dir/admin.kubeconfig" \
  --leader-elect=false \
  --bind-address 127.0.0.1 \
  --secure-port "$(node_port)" \
  </dev/null >>"$dir/kube-scheduler.log" 2>&1 &
scheduler_pid=$!
# kube-proxy, iptables mode, in the namespace: the Service addresses, the
# `kubernetes` one included, DNATed to their endpoints. It leaves conntrack's sysctls as
# they are (maxPerCore 0, timeouts 0) and serves health and metrics on loopback.
cat >"$dir/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $cp_dir/admin.kubeconfig}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: 10.244.0.0/16
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:$(node_port)
metricsBindAddress: 127.0.0.1:$(node_port)
nodePortAddresses: ["$pod_cidr"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
PATH="/usr/sbin:/sbin:$PATH" "${in_node[@]}" "$bindir/kube-proxy" --config "$dir/kube-proxy.yaml" --v 2 \
  </dev/null >>"$dir/kube-proxy.log" 2>&1 &
proxy_pid=$!
# Ready for pods once the default service account exists (the controller-manager made it)
# and the node is schedulable (the controller-manager took the not-ready taint off).
for i in $(seq 1 300); do
  sa=$(admin -o /dev/null -w '%{http_code}' "$SERVER/api/v1/namespaces/default/serviceaccounts/default" || true)
  taints=$(admin "$SERVER/api/v1/nodes/$node_name" | jq -c '.spec.taints // []' 2>/dev/null || echo '?')
  [ "$sa" = 200 ] && [ "$taints" = '[]' ] && break
  kill -0 "$kcm_pid" 2>/dev/null || fail "kube-controller-manager exited during start-up"
  kill -0 "$scheduler_pid" 2>/dev/null || fail "kube-scheduler exited during start-up"
  [ "$i" = 300 ] && fail "no default service account or an untainted node within 60s (taints: $taints)"
  sleep 0.2
done
# ... and once kube-proxy routes the API server's Service address.
for i in $(seq 1 300); do
  inns iptables -w 5 -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-d $service_host/32" && break
  kill -0 "$proxy_pid" 2>/dev/null || fail "kube-proxy exited during start-up"
  [ "$i" = 300 ] && fail "kube-proxy did not route $service_host within 60s"
  sleep 0.2
done

{
  cat "$cp_dir/env"
  echo "CP_DIR=$cp_dir"
  echo "NODE_NAME=$node_name"
  echo "SAFEWRITE_IMAGE=$safewrite_image"
  echo "SAFEWRITE_IMAGE_DIGEST=$safewrite_digest"
  echo "SAFEWRITE_IMAGE_ID=$safewrite_id"
  echo "SAFEWRITE_NEXT_IMAGE=$next_image"
  echo "SAFEWRITE_NEXT_IMAGE_DIGEST=$next_digest"
  echo "SAFEWRITE_NEXT_IMAGE_ID=$next_id"
  echo "PAUSE_IMAGE=$pause_image"
  echo "CONTROLLER_IMAGE=$controller_image"
  echo "POD_CIDR=$pod_cidr"
  echo "SERVICE_HOST=$service_host"
  echo "NETNS=$netns"
  echo "ADMIN_KUBECONFIG=$dir/admin.kubeconfig"
  echo "KUBELET_PORT=$kubelet_port"
  echo "KUBELET_PID=$kubelet_pid"
  echo "CONTAINERD_PID=$containerd_pid"
  echo "CONTAINERD_ADDRESS=$dir/containerd.sock"
  echo "NODE_BIN=$bindir"
  echo "POD_LOGS=$dir/pod-logs"
  echo "KCM_PID=$kcm_pid"
  echo "APISERVER_PID=$APISERVER_PID"
  echo "ETCD_PID=$ETCD_PID"
  echo "SCHEDULER_PID=$scheduler_pid"
  echo "CGROUP_ROOT=$cgroup_root"
  echo "BRIDGE=$bridge"
} >"$dir/env"
log "node $node_name ready for pods in $((SECONDS - started_node))s (control plane $((started_node - built))s, binaries and image $((built - started))s); pods on $pod_cidr via $bridge"
echo "ready $dir"

# Live until stdin closes; stop early if a component dies.
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
    exit 0
  fi
  kill -0 "$kubelet_pid" 2>/dev/null || fail "kubelet exited unexpectedly"
  kill -0 "$containerd_pid" 2>/dev/null || fail "containerd exited unexpectedly"
  kill -0 "$kcm_pid" 2>/dev/null || fail "kube-controller-manager exited unexpectedly"
  kill -0 "$scheduler_pid" 2>/dev/null || fail "kube-scheduler exited unexpectedly"
  kill -0 "$proxy_pid" 2>/dev/null || fail "kube-proxy exited unexpectedly"
  kill -0 "$forward_pid" 2>/dev/null || fail "the forwarder into the namespace exited unexpectedly"
  kill -0 "$cp_pid" 2>/dev/null || fail "the control plane exited unexpectedly"
done
