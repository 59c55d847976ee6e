# Ports for the harness's listeners, sourced by the scripts that start them. Two rules
# keep a port from being taken between its choice and its bind:
#
# - A listener that reports its address (the sidecar) binds port 0, and the script reads
#   the address from its log: listening_address.
# - One that must be told a port (etcd, kube-apiserver, Jaeger, a registry) gets one below
#   the kernel's ephemeral range: free_port. A port chosen inside that range (by binding
#   port 0 and closing) can be handed, before the listener binds it, to any other bind of
#   port 0 or to the local end of any outgoing connection on the machine, and the tests
#   make thousands of both.

# free_port: prints a port on 127.0.0.1 that is free now and outside the ephemeral range.
free_port() {
  python3 - <<'PY'
import random, socket
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = map(int, f.read().split())
except OSError:  # not Linux: the IANA range, macOS's default
    low, high = 49152, 65535
ports = range(10000, low) if low - 10000 >= 1000 else range(high + 1, 65536)
for _ in range(1000):
    port = random.choice(ports)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("free_port: no free port outside the ephemeral range")
PY
}

# listening_address LOG PID TRANSPORT
#   Waits up to 20 s for the sidecar PID to log, in LOG (text format), the address it
#   bound for TRANSPORT ("tcp" for gRPC, "http" for metrics, "unix" for its socket) and
#   prints it. Returns 1 if PID exits first or the time runs out.
listening_address() {
  local log=$1 pid=$2 transport=$3 line
  for _ in $(seq 1 400); do
    if line=$(grep -m1 -E "listening address=[^ ]+ transport=\"$transport\"" "$log" 2>/dev/null); then
      line=${line##*listening address=}
      printf '%s\n' "${line%% *}"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
