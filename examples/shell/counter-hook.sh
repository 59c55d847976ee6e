#!/bin/sh
# A shell-operator hook that counts the ConfigMap events it is given in the ConfigMap
# `hook-counter` (data.n), with `safewrite update`: the read-modify-write is
# conflict-safe, so several hooks (or several operators) may run at once without losing
# a count.
#
#   --config               print the hook's binding configuration (shell-operator asks)
#   otherwise              read $BINDING_CONTEXT_PATH (a JSON list of binding contexts)
#                          and add its events to data.n
#
# Needs safewrite and jq on PATH. Writes in-process with the pod's service account, or
# through the sidecar when SAFEWRITE_ADDRESS is set. COUNTER_NAMESPACE names the
# ConfigMap's namespace (default: the service account's, or the kubeconfig context's).
set -eu

if [ "${1:-}" = "--config" ]; then
  cat <<'YAML'
configVersion: v1
kubernetes:
- name: counted-configmaps
  apiVersion: v1
  kind: ConfigMap
  executeHookOnEvent: ["Added", "Modified", "Deleted"]
  labelSelector:
    matchLabels:
      counted: "yes"
YAML
  exit 0
fi

# One event per Event context; a Synchronization context carries every object at once.
events=$(jq '[.[] | if .type == "Synchronization" then (.objects | length) elif .type == "Event" then 1 else 0 end] | add // 0' "$BINDING_CONTEXT_PATH")
if [ "$events" -eq 0 ]; then
  exit 0
fi

# Created with n=0 when missing; then n += events. jq runs again on every conflict,
# each time on the fresh object.
namespace=${COUNTER_NAMESPACE:+-n $COUNTER_NAMESPACE}
# shellcheck disable=SC2086
safewrite update cm/hook-counter $namespace \
  --create-if-missing - \
  --exec "jq --argjson k $events '.data.n = ((.data.n // \"0\" | tonumber) + \$k | tostring)'" <<'JSON'
{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hook-counter"}, "data": {"n": "0"}}
JSON
