#!/usr/bin/env bash
# Unmodified Debian ibverbs-utils over the drop-in libibverbs.so.1, run
# through scripts/uroce-run:
#
#   utils     ibv_devices and ibv_devinfo -v on a net_null device (the
#             device, port and GID table as a program sees them)
#   afpacket  ibv_rc_pingpong (also -e, -t, and -s 16384 at path MTU 256, 512
#             and the port's 1024), ibv_uc_pingpong, ibv_ud_pingpong,
#             ibv_srq_pingpong and ibv_xsrq_pingpong (XRC: its default path
#             MTU 2048, -e, large messages): server in one network namespace, client in
#             the other (scripts/netns-up --veth), one net_af_packet port
#             each, the TCP exchange over the same veth; and ibv_asyncwatch
#             seeing the link go down and up (the far end of the veth set
#             down, then up: IBV_EVENT_PORT_ERR, then _PORT_ACTIVE, once each)
#   memif     the same programs over a memif pair; the two processes share
#             a private namespace (memif has no kernel link for their TCP
#             exchange, which goes over its loopback)
#   daemon    the afpacket programs through uroced (issue 15): a daemon in
#             each namespace owns its end of the veth, the programs are its
#             clients (UROCE_SOCKET)
#
#   verbs_apps_test.sh MODE SHIM_BUILD_DIR SCRIPTS_DIR
#
# Each program must exit 0 on both sides and print its iteration report.
# Exit 0 pass, 1 fail, 77 skip (not root, programs not installed).
set -u

readonly EXIT_SKIP=77
readonly RUN_TIMEOUT_S=60
readonly LISTEN_GRACE_S=3
readonly ITERS=50
[ $# -eq 3 ] || { echo "usage: $0 utils|afpacket|memif|daemon SHIM_BUILD_DIR SCRIPTS_DIR" >&2; exit 2; }
MODE=$1 BUILD=$2 SCRIPTS=$3

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
for p in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_xsrq_pingpong \
  ibv_asyncwatch; do
  command -v $p >/dev/null || skip "needs $p (scripts/setup installs ibverbs-utils)"
done

PREFIX=$(printf 'us%x' $$)
TMP=$(mktemp -d "/tmp/uroce-apps-$MODE.XXXXXX")
PIDS=()
failed=0
CONFIG=$TMP/empty.toml
: >"$CONFIG"
RUN=("$SCRIPTS/uroce-run" --build "$BUILD" --config "$CONFIG")

# shellcheck source=../daemon/daemon_lib.sh
. "$(dirname "$0")/../daemon/daemon_lib.sh"

cleanup() {
  daemons_down
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  "$SCRIPTS/netns-down" "$PREFIX" >/dev/null 2>&1
  ip netns del "$PREFIX-m" 2>/dev/null
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
# A log as a failure shows it: ibv_srq_pingpong's 16 QPs print 32 address
# lines; two of each kind are kept, so that the error after them is seen.
show() {
  echo "---- $1"
  awk '/(local|remote) address:/ { if (++seen[$1] > 2) next } 1' "$1" | sed 's/^/    /'
}

# expect LOG PATTERN LABEL
expect() {
  if grep -qE -- "$2" "$1"; then pass "$3"; else
    fail "$3: no /$2/"
    show "$1"
  fi
}

run_utils() {
  local dev=(env UROCE_DEVICE=net_null0 UROCE_IP=10.0.0.1/24,fd00::1/64)
  "${dev[@]}" timeout $RUN_TIMEOUT_S "${RUN[@]}" ibv_devices >"$TMP/devices.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] && pass "ibv_devices exit 0" || fail "ibv_devices exit $rc"
  expect "$TMP/devices.log" '^[[:space:]]+uroce0[[:space:]]+[0-9a-f]{16}$' "ibv_devices lists uroce0 with its node GUID"
  "${dev[@]}" timeout $RUN_TIMEOUT_S "${RUN[@]}" ibv_devinfo -v >"$TMP/devinfo.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] && pass "ibv_devinfo -v exit 0" || { fail "ibv_devinfo -v exit $rc"; show "$TMP/devinfo.log"; }
  expect "$TMP/devinfo.log" 'hca_id:.uroce0' "devinfo: hca_id uroce0"
  expect "$TMP/devinfo.log" 'transport:.*InfiniBand \(0\)' "devinfo: transport InfiniBand"
  expect "$TMP/devinfo.log" 'vendor_id:.*0xffffff' "devinfo: vendor_id 0xffffff, as rxe"
  expect "$TMP/devinfo.log" 'state:.*PORT_ACTIVE \(4\)' "devinfo: port ACTIVE"
  expect "$TMP/devinfo.log" 'link_layer:.*Ethernet' "devinfo: Ethernet link layer"
  expect "$TMP/devinfo.log" 'active_mtu:.*1024 \(3\)' "devinfo: active MTU 1024 on a 1500-byte port"
  expect "$TMP/devinfo.log" 'GID\[ *[0-9]+\]:.*::ffff:10\.0\.0\.1, RoCE v2' "devinfo: IPv4-mapped GID, RoCE v2"
  expect "$TMP/devinfo.log" 'GID\[ *[0-9]+\]:.*fd00::1, RoCE v2' "devinfo: IPv6 GID, RoCE v2"
  expect "$TMP/devinfo.log" 'num_comp_vectors:.*1' "devinfo -v: query_device_ex answered"
  # No configured device: an empty list, not a failure to load.
  timeout $RUN_TIMEOUT_S "${RUN[@]}" ibv_devinfo >"$TMP/none.log" 2>&1
  expect "$TMP/none.log" 'No IB devices found' "no device configured: 'No IB devices found'"
}

# wait_listen PID PREFIX: until the server listens on its TCP port (the
# pingpongs' 18515) for the address exchange, which it opens once its
# device (and a memif server its socket) is up; at most LISTEN_GRACE_S.
wait_listen() {
  local i
  for ((i = 0; i < LISTEN_GRACE_S * 20; i++)); do
    kill -0 "$1" 2>/dev/null || return
    $2 ss -ltnH "sport = :18515" 2>/dev/null | grep -q . && return
    sleep 0.05
  done
}

# pair NAME SERVER_PREFIX CLIENT_PREFIX SERVER_ADDR -- PROGRAM ARGS...: the
# program as server (its prefix command first), then as client.  Each side
# reports its iterations (ibv_xsrq_pingpong: "success", after checking
# every completion).
pair() {
  local name=$1 srv_pre=$2 cli_pre=$3 addr=$4
  shift 5
  local ok="$ITERS iters in"
  [ "$1" = ibv_xsrq_pingpong ] && ok='^success$'
  : >"$TMP/$name-server.log"
  $srv_pre timeout $RUN_TIMEOUT_S "${RUN[@]}" "$@" >"$TMP/$name-server.log" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  wait_listen "$spid" "$srv_pre"
  $cli_pre timeout $RUN_TIMEOUT_S "${RUN[@]}" "$@" "$addr" >"$TMP/$name-client.log" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -q "$ok" "$TMP/$name-client.log" &&
    grep -q "$ok" "$TMP/$name-server.log"; then
    pass "$name: $(grep "$ok" "$TMP/$name-client.log")"
    # A program on rxe prints only its own lines: DPDK's start-up notes
    # (TELEMETRY:, EAL:) must not reach its stderr at the default log level.
    if grep -qE '^(TELEMETRY|EAL): ' "$TMP/$name-client.log" "$TMP/$name-server.log"; then
      fail "$name: the stack wrote to the program's stderr"
      grep -hE '^(TELEMETRY|EAL): ' "$TMP/$name-client.log" "$TMP/$name-server.log" | sort -u | sed 's/^/    /'
    fi
  else
    fail "$name: client exit $crc, server exit $src"
    show "$TMP/$name-client.log"
    show "$TMP/$name-server.log"
  fi
}

# The programs: name, progress mode, arguments.
PROGRAMS=(
  "rc thread ibv_rc_pingpong -g 0 -n $ITERS"
  "rc-inline inline ibv_rc_pingpong -g 0 -n $ITERS"
  "rc-events thread ibv_rc_pingpong -g 0 -n $ITERS -e"
  "rc-ts thread ibv_rc_pingpong -g 0 -n $ITERS -t"
  "rc-16k inline ibv_rc_pingpong -g 0 -n $ITERS -s 16384"
  "rc-16k-mtu256 inline ibv_rc_pingpong -g 0 -n $ITERS -s 16384 -m 256"
  "rc-16k-mtu512 thread ibv_rc_pingpong -g 0 -n $ITERS -s 16384 -m 512"
  "uc inline ibv_uc_pingpong -g 0 -n $ITERS"
  "ud inline ibv_ud_pingpong -g 0 -n $ITERS"
  "srq inline ibv_srq_pingpong -g 0 -n $ITERS"
  "xsrq thread ibv_xsrq_pingpong -g 0 -n $ITERS"
  "xsrq-events-64k inline ibv_xsrq_pingpong -g 0 -n $ITERS -e -s 65536 -m 1024"
)

run_programs() {  # SERVER_ENV CLIENT_ENV SERVER_ADDR (env prefixes as words)
  local entry name progress extra
  for entry in "${PROGRAMS[@]}"; do
    read -r name progress cmd <<<"$entry"
    # Engine lcores (UROCE_ENGINE_LCORES, the suite's 2-lcore run) need
    # engine threads, which inline progress has none of: a program run
    # inline runs one (an empty variable is no override).
    extra=""
    [ "$progress" = inline ] && extra=" UROCE_ENGINE_LCORES="
    pair "$name" "$1 UROCE_PROGRESS=$progress$extra" "$2 UROCE_PROGRESS=$progress$extra" "$3" -- $cmd
  done
}

# asyncwatch A_PREFIX PEER_NS PEER_IF: ibv_asyncwatch on device uroce0 while
# the peer's end of the link goes down and comes back.
asyncwatch() {
  local log=$TMP/asyncwatch.log
  $1 timeout $RUN_TIMEOUT_S "${RUN[@]}" ibv_asyncwatch -d uroce0 >"$log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  sleep 2  # the device is open and its first link poll has run
  ip -n "$2" link set "$3" down
  sleep 1
  ip -n "$2" link set "$3" up
  sleep 1.5
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  local err act
  err=$(grep -c 'IBV_EVENT_PORT_ERR' "$log")
  act=$(grep -c 'IBV_EVENT_PORT_ACTIVE' "$log")
  if [ "$err" -eq 1 ] && [ "$act" -eq 1 ] &&
    [ "$(grep -n 'IBV_EVENT_PORT_ERR' "$log" | cut -d: -f1)" -lt "$(grep -n 'IBV_EVENT_PORT_ACTIVE' "$log" | cut -d: -f1)" ]; then
    pass "ibv_asyncwatch: PORT_ERR then PORT_ACTIVE, once each"
  else
    fail "ibv_asyncwatch: $err PORT_ERR, $act PORT_ACTIVE (want one of each, in that order)"
    show "$log"
  fi
}

run_afpacket() {
  local out
  out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
    [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
    fail "netns-up"; show "$TMP/netns.err"; return
  }
  eval "$out"
  run_programs "ip netns exec $NS_B env UROCE_DEVICE=$DEVARGS_B" "ip netns exec $NS_A env UROCE_DEVICE=$DEVARGS_A" "$IP_B"
  asyncwatch "ip netns exec $NS_A env UROCE_DEVICE=$DEVARGS_A" "$NS_B" "$PREFIX-vb"
}

run_daemon() {
  local out
  out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
    [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
    fail "netns-up"; show "$TMP/netns.err"; return
  }
  eval "$out"
  daemon_up a "$NS_A" "$DEVARGS_A" "$TMP/a.sock" "$TMP/uroced-a.log" || { fail "uroced in $NS_A"; return; }
  daemon_up b "$NS_B" "$DEVARGS_B" "$TMP/b.sock" "$TMP/uroced-b.log" || { fail "uroced in $NS_B"; return; }
  run_programs "ip netns exec $NS_B env UROCE_SOCKET=$TMP/b.sock" "ip netns exec $NS_A env UROCE_SOCKET=$TMP/a.sock" "$IP_B"
  asyncwatch "ip netns exec $NS_A env UROCE_SOCKET=$TMP/a.sock" "$NS_B" "$PREFIX-vb"
  daemon_alive a && daemon_alive b && pass "both daemons still run" || fail "a daemon died"
}

run_memif() {
  local sock=$TMP/memif.sock ns="ip netns exec $PREFIX-m env"
  # A namespace of this run's own, for its loopback and the TCP port
  # (18515) the programs use.
  ip netns add "$PREFIX-m" 2>"$TMP/netns.err" || { fail "ip netns add"; show "$TMP/netns.err"; return; }
  ip netns exec "$PREFIX-m" ip link set lo up
  # A fresh socket per program: the server side of each pair owns it.
  run_programs "$ns UROCE_DEVICE=net_memif0,role=server,socket=$sock,socket-abstract=no UROCE_IP=10.48.0.1/24" \
    "$ns UROCE_DEVICE=net_memif0,role=client,socket=$sock,socket-abstract=no UROCE_IP=10.48.0.2/24" 127.0.0.1
}

NAME=apps-$MODE
[ "$MODE" = utils ] || NAME=apps-pingpong-$MODE
echo "$NAME: work in $TMP"
"run_$MODE"
if [ $failed -eq 0 ]; then
  echo "$NAME: all checks passed"
  exit 0
fi
echo "$NAME: $failed checks failed"
exit 1
