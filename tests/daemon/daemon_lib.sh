# Sourced by the tests that run programs through uroced (issue 15): the
# daemon suite (daemon_test.sh) and the apps scripts' "daemon" mode.
#
#   daemon_up NAME NS DEVARGS SOCK LOG [UROCED_ARGS...]
#                 starts build/tools/uroced in network namespace NS on the
#                 DPDK port DEVARGS, serving SOCK; waits for its
#                 "uroced: ready" line (at most 20 s); its pid in
#                 DAEMON_PID[NAME]; returns 1 (and prints the log) when it
#                 does not come up
#   daemon_down NAME [SIGNAL]
#                 stops it (SIGTERM by default) and waits for it
#   daemon_alive NAME
#                 true while it runs
#   daemons_down  every daemon this script started (for the EXIT trap)
#   kernel_has_tcx
#                 true when the running kernel has tcx (Linux 6.6): a
#                 device on a shared netdev then attaches its ingress
#                 filter (drivers/ingress_filter.hpp), in uroced as in-process
#
# The caller sets BUILD (the meson build directory).

declare -A DAEMON_PID=()

kernel_has_tcx() {
  local v
  v=$(uname -r | awk -F. '{ printf "%d%03d", $1, $2 }')
  [ "$v" -ge 6006 ]
}

daemon_up() {
  local name=$1 ns=$2 devargs=$3 sock=$4 log=$5
  shift 5
  rm -f "$sock"
  # Not a verbs program: the shared EAL's mlx5 PMD must find the real
  # libibverbs, not the drop-ins a test's LD_LIBRARY_PATH points to.
  # DAEMON_OWN_SESSION=1: in a session of its own, as systemd starts it (a
  # scheduling group apart from the programs: autogroup).
  ${DAEMON_OWN_SESSION:+setsid} ip netns exec "$ns" env -u LD_LIBRARY_PATH UROCE_DEVICE="$devargs" UROCE_CONFIG=/dev/null \
    "$BUILD/tools/uroced" --socket "$sock" "$@" >"$log" 2>&1 </dev/null &
  DAEMON_PID[$name]=$!
  local i
  for i in $(seq 200); do
    grep -q '^uroced: ready' "$log" && return 0
    kill -0 "${DAEMON_PID[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "uroced $name did not come up:"
  sed 's/^/    /' "$log"
  return 1
}

# log_wait LOG PATTERN SECONDS [PID]: until LOG shows PATTERN, at most
# SECONDS, or until process PID (the log's writer) is gone.  Programs
# started with UROCE_TRACE=conn print "listening on port" once a server's
# rdma_listen has its port, and RDMA_CM_EVENT_ESTABLISHED once a
# connection is up.
log_wait() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null && return 1
    sleep 0.05
  done
  return 1
}

daemon_alive() { kill -0 "${DAEMON_PID[$1]}" 2>/dev/null; }

daemon_down() {
  local name=$1 sig=${2:-TERM} pid=${DAEMON_PID[$1]:-}
  [ -n "$pid" ] || return 0
  kill "-$sig" "$pid" 2>/dev/null
  local i
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "DAEMON_PID[$name]"
}

daemons_down() {
  local n
  for n in "${!DAEMON_PID[@]}"; do daemon_down "$n"; done
}
