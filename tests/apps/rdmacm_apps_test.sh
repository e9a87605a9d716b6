#!/usr/bin/env bash
# Unmodified Debian rdmacm-utils over the drop-in librdmacm.so.1 (and
# libibverbs.so.1), through scripts/uroce-run.  The connection is set up in
# band (the IB CM on QP 1), as between two kernel rdma_cm peers:
#
#   afpacket  server in one network namespace, client in the other
#             (scripts/netns-up --veth), one net_af_packet port each
#   memif     the same programs over a memif pair, both processes in one
#             private namespace; the client is given the server's uroce
#             address (memif has no kernel link, and rdma_cm needs none)
#   daemon    the afpacket programs through uroced (issue 15): a daemon in
#             each namespace, the programs its clients (UROCE_SOCKET)
#
#   rdmacm_apps_test.sh afpacket|memif|daemon SHIM_BUILD_DIR SCRIPTS_DIR [NAME...]
#
# NAME picks programs from the table below (default: all).  Each must exit
# 0 on both sides and print what shows its data went through; a case the
# table lists as expected to fail reports XFAIL with its reason, and fails
# the test once it passes (take it off the list then).
# Exit 0 pass, 1 fail, 77 skip (not root, programs not installed).
set -u

readonly EXIT_SKIP=77
readonly RUN_TIMEOUT_S=90
readonly LISTEN_GRACE_S=2
[ $# -ge 3 ] || { echo "usage: $0 afpacket|memif|daemon SHIM_BUILD_DIR SCRIPTS_DIR [NAME...]" >&2; exit 2; }
MODE=$1 BUILD=$2 SCRIPTS=$3
shift 3
case $MODE in afpacket|memif|daemon) ;; *) echo "$0: mode afpacket, memif or daemon" >&2; exit 2 ;; esac

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
for p in rping ucmatose udaddy mckey rdma_server rdma_client rdma_xserver rdma_xclient cmtime rstream riostream udpong \
  stdbuf; do
  command -v $p >/dev/null || skip "needs $p (scripts/setup installs rdmacm-utils)"
done

PREFIX=$(printf 'rc%x' $$)
TMP=$(mktemp -d "/tmp/uroce-rdmacm-$MODE.XXXXXX")
xfailed=0
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
show() { echo "---- $1"; sed 's/^/    /' "$1" | head -60; }

# The programs: name | server command | client command (@S@: the server's
# address, @C@: the client's) | what the client log must show | what the
# server log must show (empty: nothing) | seconds after which a server that
# never exits on its own is stopped, its exit 124 then passing (empty: it
# must exit by itself; "after": stopped once the client is done, as the
# servers of cmtime and udpong never exit) | expected to fail: the reason
# (empty: must pass).
# mckey: the "server" receives, joined first; the "client" joins and sends
# (-s) to the group, 2 ids (-c 2) of 10 messages (-C 10) each; both print
# "data transfers complete" once every message is through.
PROGRAMS=(
  "rping|rping -s -v -V -C 100 -a @S@|rping -c -v -V -C 100 -a @S@|ping data: rdma-ping-99:|server ping data: rdma-ping-99:||"
  "rping-64k|rping -s -v -V -C 20 -S 65000 -a @S@|rping -c -v -V -C 20 -S 65000 -a @S@|ping data: rdma-ping-19:|server ping data: rdma-ping-19:||"
  "ucmatose|ucmatose -c 8 -C 20|ucmatose -s @S@ -c 8 -C 20|data transfers complete|data transfers complete||"
  "udaddy|udaddy|udaddy -s @S@|data transfers complete|data transfers complete||"
  "mckey|mckey -m 239.1.1.1 -b @S@ -c 2 -C 10|mckey -m 239.1.1.1 -s -b @C@ -c 2 -C 10|data transfers complete|data transfers complete||"
  "rdma_server|rdma_server|rdma_client -s @S@|rdma_client: end 0|rdma_server: end 0||"
  "rdma_xserver|rdma_xserver|rdma_xclient -s @S@|rdma_xclient: end 0|rdma_xserver: end 0||"
  "rdma_xserver-xrc|rdma_xserver -c x|rdma_xclient -s @S@ -c x|rdma_xclient: end 0|rdma_xserver: end 0||"
  "cmtime|cmtime|cmtime -s @S@ -c 100|^connect +:||after|"
  "rstream|rstream -b @S@|rstream -s @S@|^1m_bw|^1m_bw||"
  "rstream-blocking-verify|rstream -b @S@ -T b -T v -S 131072 -C 300|rstream -s @S@ -T b -T v -S 131072 -C 300|^custom +128k +300|^custom +128k +300||"
  "rstream-async-verify|rstream -b @S@ -T a -T v|rstream -s @S@ -T a -T v|^1m_bw|^1m_bw||"
  "riostream-verify|riostream -b @S@ -S 65536 -C 200 -T v|riostream -s @S@ -S 65536 -C 200 -T v|^custom +64k +200|^custom +64k +200||"
  "riostream-blocking|riostream -b @S@ -S 1000000 -C 20 -T b|riostream -s @S@ -S 1000000 -C 20 -T b|^custom +976k +20|^custom +976k +20||"
  # udpong: datagram rsockets; its server never exits (stopped once the
  # client is done: "after").  Sizes up to 1000 bytes: with its 8-byte
  # header a datagram is one UD message, and a 1500-byte link's RoCE path
  # MTU is 1024 (larger ones are refused, EMSGSIZE).  One test per run:
  # udpong's whole default sequence livelocks whenever its receiver drops a
  # control message after a bandwidth phase (it then resends the stale
  # reply it overwrote its message with), on any lossy transport.
  "udpong-lat|udpong -b @S@|udpong -s @S@ -T e -S 1000 -C 5000|^custom +1000 +10k||after|"
  "udpong-bw|udpong -b @S@|udpong -s @S@ -S 512 -C 100000|^custom +512 ||after|"
  "udpong-blocking|udpong -b @S@ -T b|udpong -s @S@ -T b -T e -S 64 -C 5000|^custom +64 +10k||after|"
  "udpong-async|udpong -b @S@ -T a|udpong -s @S@ -T a -T e -S 256 -C 5000|^custom +256 +10k||after|"
  "udpong-too-big|udpong -b @S@|udpong -s @S@ -S 1536 -C 10|rsend: Message too long||after|"
)

run_one() {  # ENTRY
  local name srv cli want_c want_s stop_s reason
  IFS='|' read -r name srv cli want_c want_s stop_s reason <<<"$1"
  srv=${srv//@S@/$ADDR_S}
  srv=${srv//@C@/$ADDR_C}
  cli=${cli//@S@/$ADDR_S}
  cli=${cli//@C@/$ADDR_C}
  local srv_timeout=${stop_s:-$RUN_TIMEOUT_S}
  [ "$stop_s" = after ] && srv_timeout=$RUN_TIMEOUT_S
  $SRV_ENV UROCE_TRACE=conn timeout "$srv_timeout" stdbuf -oL "${RUN[@]}" $srv >"$TMP/$name-server.log" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  # Until the server listens (log_wait, daemon_lib.sh); servers that never
  # call rdma_listen (mckey joins a group, udpong binds a UDP socket) get
  # LISTEN_GRACE_S to start their device instead.
  log_wait "$TMP/$name-server.log" "listening on port" $LISTEN_GRACE_S "$spid"
  $CLI_ENV timeout $RUN_TIMEOUT_S stdbuf -oL "${RUN[@]}" $cli >"$TMP/$name-client.log" 2>&1
  local crc=$?
  [ "$stop_s" = after ] && kill -TERM "$spid" 2>/dev/null  # timeout passes it on to the server
  wait "$spid"
  local src=$?
  [ -n "$stop_s" ] && { [ $src -eq 124 ] || { [ "$stop_s" = after ] && [ $src -eq 143 ]; }; } && src=0
  if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -qE -- "$want_c" "$TMP/$name-client.log" &&
    { [ -z "$want_s" ] || grep -qE -- "$want_s" "$TMP/$name-server.log"; }; then
    if [ -n "$reason" ]; then
      fail "$name: passes but is listed as expected to fail ($reason): take it off the list"
    else
      pass "$name: $(grep -E -- "$want_c" "$TMP/$name-client.log" | tail -1 | cut -c1-80)"
    fi
  elif [ -n "$reason" ]; then
    echo "XFAIL $name: $reason (client exit $crc, server exit $src; client: $(tail -1 "$TMP/$name-client.log" | cut -c1-80))"
    xfailed=$((xfailed + 1))
  else
    fail "$name: client exit $crc, server exit $src (want /$want_c/ and /$want_s/)"
    show "$TMP/$name-server.log"
    show "$TMP/$name-client.log"
  fi
}

setup_afpacket() {
  local out
  out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
    [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
    fail "netns-up"; show "$TMP/netns.err"; exit 1
  }
  eval "$out"
  SRV_ENV="ip netns exec $NS_B env UROCE_DEVICE=$DEVARGS_B"
  CLI_ENV="ip netns exec $NS_A env UROCE_DEVICE=$DEVARGS_A"
  ADDR_S=$IP_B ADDR_C=$IP_A
}

setup_daemon() {
  setup_afpacket
  daemon_up a "$NS_A" "$DEVARGS_A" "$TMP/a.sock" "$TMP/uroced-a.log" || { fail "uroced in $NS_A"; exit 1; }
  daemon_up b "$NS_B" "$DEVARGS_B" "$TMP/b.sock" "$TMP/uroced-b.log" || { fail "uroced in $NS_B"; exit 1; }
  SRV_ENV="ip netns exec $NS_B env UROCE_SOCKET=$TMP/b.sock"
  CLI_ENV="ip netns exec $NS_A env UROCE_SOCKET=$TMP/a.sock"
}

setup_memif() {
  # A namespace of this run's own: nothing of the host's in the way.
  ip netns add "$PREFIX-m" 2>"$TMP/netns.err" || { fail "ip netns add"; show "$TMP/netns.err"; exit 1; }
  ip netns exec "$PREFIX-m" ip link set lo up
  memif_env ""
  ADDR_S=10.48.0.1 ADDR_C=10.48.0.2
}
# The memif pair of one program: a socket of its own (as verbs_apps_test.sh
# does), so that a program's leftover socket file cannot keep the next
# server from starting.
memif_env() {  # NAME
  local ns="ip netns exec $PREFIX-m env" sock=$TMP/memif$1.sock
  SRV_ENV="$ns UROCE_DEVICE=net_memif0,role=server,socket=$sock,socket-abstract=no UROCE_IP=10.48.0.1/24"
  CLI_ENV="$ns UROCE_DEVICE=net_memif0,role=client,socket=$sock,socket-abstract=no UROCE_IP=10.48.0.2/24"
}

"setup_$MODE"
echo "apps-rdmacm-$MODE: work in $TMP"
for entry in "${PROGRAMS[@]}"; do
  name=${entry%%|*}
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx -- "$name"; then continue; fi
  if [ "$MODE" = memif ] && [[ $name == udpong* ]]; then
    # Not a pass: datagram rsockets meet over a kernel UDP socket (librdmacm's
    # protocol), and a memif port has no kernel link to carry it.
    echo "NOT RUN $name: datagram rsockets need a kernel-owned address; memif has none"
    continue
  fi
  [ "$MODE" = memif ] && memif_env "-$name"
  run_one "$entry"
done
if [ "$MODE" = daemon ]; then
  daemon_alive a && daemon_alive b && pass "both daemons still run" || fail "a daemon died"
fi
if [ $failed -eq 0 ]; then
  echo "apps-rdmacm-$MODE: all checks passed ($xfailed expected failures)"
  exit 0
fi
echo "apps-rdmacm-$MODE: $failed checks failed ($xfailed expected failures)"
exit 1
