# Sourced by the scripts that push an image to a registry of their own: the CNCF
# distribution registry on 127.0.0.1, its storage under a directory of the caller's.
# shellcheck source=tests/harness/ports.sh
. "$(dirname "${BASH_SOURCE[0]}")/ports.sh"

# start_registry DIR COMMAND...
#   Starts COMMAND (the registry binary, after any `env ...` prefix) serving a registry
#   whose storage, configuration and log are in DIR, on a free port; waits until /v2/
#   answers. Sets `registry` (127.0.0.1:PORT) and `registry_pid` (the caller stops it).
#   On failure prints why, with the end of its log, and returns 1.
start_registry() {
  local dir=$1 port
  shift
  port=$(free_port) || return 1
  mkdir -p "$dir"
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:%s\n' \
    "$dir/storage" "$port" >"$dir/registry.yml"
  "$@" serve "$dir/registry.yml" >"$dir/registry.log" 2>&1 &
  registry_pid=$!
  registry="127.0.0.1:$port"
  for _ in $(seq 1 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$registry/v2/" || true)" = 200 ] && return 0
    kill -0 "$registry_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "the registry never answered on $registry; its log ends:" >&2
  tail -n 5 "$dir/registry.log" >&2
  return 1
}
