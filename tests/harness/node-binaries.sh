# shellcheck shell=bash
# `binaries.sh node`: the pieces of a node, sourced by tests/harness/binaries.sh (it uses
# that script's build_k8s, go_install, tool_path, log, $cache and $tools). Each
# piece is cached under $cache/bin/<name>-<version>/, built once per machine:
#   kubelet, kube-controller-manager, kube-scheduler, kube-proxy
#                                 k8s.io/kubernetes at KUBERNETES_VERSION (like kube-apiserver)
#   containerd, containerd-shim-runc-v2, ctr
#                                 containerd's Go module at CONTAINERD_VERSION, static,
#                                 without the btrfs, devmapper and zfs snapshotters
#   runc                          runc's Go module at RUNC_VERSION, with cgo and seccomp
#                                 (a RuntimeDefault seccomp profile needs it)
#   bridge, host-local, loopback, portmap
#                                 the CNI plugins' Go module at CNI_PLUGINS_VERSION
#   pause-oci/                    the sandbox image: tests/harness/pause.c, static, as an
#                                 OCI layout named safewrite.test/pause:<hash of pause.c>

# Debian packages the node needs: cgo headers for runc's seccomp, iptables, and socat
# (node.sh's way into the node's network namespace from the machine's loopback).
need_packages=()
command -v pkg-config >/dev/null 2>&1 || need_packages+=(pkg-config)
[ -f /usr/include/seccomp.h ] || need_packages+=(libseccomp-dev)
command -v iptables >/dev/null 2>&1 || need_packages+=(iptables)
command -v socat >/dev/null 2>&1 || need_packages+=(socat)
command -v gcc >/dev/null 2>&1 || need_packages+=(gcc libc6-dev)
if [ "${#need_packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "binaries: the node needs the Debian packages ${need_packages[*]}; install them" >&2
    exit 1
  fi
  log "installing ${need_packages[*]} from Debian (the node needs them)"
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q "${need_packages[@]}" >&2
fi

node_started=$SECONDS
for tool in kubelet kube-controller-manager kube-scheduler kube-proxy; do
  output=$(tool_path "$tool" "$KUBERNETES_VERSION")
  build_k8s "$tool" "$KUBERNETES_VERSION" "$output"
  tools+=("$output")
done
# build_from_module cleans up in a RETURN trap, which would fire again when this sourced
# file returns.
trap - RETURN

containerd_ldflags="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
for tool in containerd containerd-shim-runc-v2 ctr; do
  output=$(tool_path "$tool" "$CONTAINERD_VERSION")
  go_install "github.com/containerd/containerd/v2/cmd/$tool" "$CONTAINERD_VERSION" "$output" \
    "$containerd_ldflags" "no_btrfs no_devmapper no_zfs"
  tools+=("$output")
done

runc=$(tool_path runc "$RUNC_VERSION")
GO_INSTALL_CGO=1 go_install github.com/opencontainers/runc "$RUNC_VERSION" "$runc" \
  "-X main.version=${RUNC_VERSION#v}" seccomp
tools+=("$runc")

for plugin in main/bridge ipam/host-local main/loopback meta/portmap; do
  output=$(tool_path "$(basename "$plugin")" "cni-$CNI_PLUGINS_VERSION")
  go_install "github.com/containernetworking/plugins/plugins/$plugin" "$CNI_PLUGINS_VERSION" \
    "$output" "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
  tools+=("$output")
done

# The pause image: one static file in one layer, keyed by its source's hash.
pause_hash=$(sha256sum "$here/pause.c" | cut -c1-16)
pause_dir="$cache/bin/pause-$pause_hash"
if [ ! -f "$pause_dir/pause-oci/index.json" ]; then
  mkdir -p "$pause_dir"
  exec {pause_lock}>"$pause_dir.lock"
  flock "$pause_lock"
  if [ ! -f "$pause_dir/pause-oci/index.json" ]; then
    log "building the pause image"
    gcc -static -Os -s -o "$pause_dir/pause" "$here/pause.c"
    bash "$here/file-image.sh" "$pause_dir/pause" "safewrite.test/pause:$pause_hash" \
      65535:65535 "$pause_dir/pause-oci"
  fi
  exec {pause_lock}>&-
fi
tools+=("$pause_dir/pause-oci")
log "node pieces ready in $((SECONDS - node_started))s"
