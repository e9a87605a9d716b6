#!/usr/bin/env bash
# Two uroce processes on a real DPDK wire between network namespaces
# (scripts/netns-up), driven by `uroce node`:
#
#   afpacket  one net_af_packet port per namespace on a veth pair, sharing
#             the veth with the kernel: the nodes resolve each other by
#             ARP (and IPv6 ND) answered by the kernels, make RoCEv2 round
#             trips over IPv4 and IPv6 and ICMP echo with the peer kernel,
#             while TCP between the namespaces keeps working; then again
#             at MTU 9000 with 8900-byte payloads.
#   tap       one net_tap port per process on a bridge (their namespace
#             PREFIX-t), two kernel hosts on the same bridge: the engines
#             answer ARP and ICMP themselves; RoCEv2 round trips; a kernel
#             host pings an engine; a node pings a kernel host; TCP between
#             the kernel hosts keeps working.
#   memif     a memif pair between two namespaces, no kernel on the wire:
#             the engines answer each other's ARP, ND and ICMP echo.
#
# Every mode checks: the kernels sent no ICMP destination-unreachable
# (Icmp OutDestUnreachs in /proc/net/snmp of each namespace, and no ICMP
# type 3 / ICMPv6 type 1 in the captures), `uroce pcap-check` passes on
# every capture (UROCE_PCAP), tshark finds no malformed frame, `uroce
# stats` reads the echo side's counters through telemetry.
#
#   netns_wire_test.sh MODE UROCE SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip (not root, no namespaces, no tshark or
# python3).  Namespaces and processes are removed however it ends.
set -u

readonly EXIT_OK=0 EXIT_FAILED=1 EXIT_USAGE=2 EXIT_SKIP=77
readonly READY_TIMEOUT_S=10
readonly NODE_BOUND_S=25          # --seconds for every node: nothing outlives the test
readonly TCP_PORT=5001
readonly ROCE_COUNT=300 ROCE_INTERVAL_MS=3 V6_COUNT=50 ICMP_COUNT=20
readonly JUMBO_MTU=9000 JUMBO_PAYLOAD=8900 JUMBO_COUNT=100
readonly MEMIF_COUNT=1000 KERNEL_PINGS=3
# A tap node starts probing before its tap is on the bridge (DPDK creates
# the tap; the test attaches it after): on a loaded machine the attach can
# outlast one ARP sequence (3 requests, 1 s apart).
readonly TAP_RESOLVE_TRIES=4

[ $# -eq 3 ] || { echo "usage: $0 afpacket|tap|memif UROCE SCRIPTS_DIR" >&2; exit $EXIT_USAGE; }
MODE=$1 UROCE=$2 SCRIPTS=$3
case $MODE in afpacket|tap|memif) ;; *) echo "unknown mode $MODE" >&2; exit $EXIT_USAGE ;; esac

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, raw sockets)"
command -v tshark >/dev/null || skip "needs tshark (scripts/setup installs it)"
command -v python3 >/dev/null || skip "needs python3"
[ -x "$UROCE" ] || { echo "FAIL: $UROCE is not executable"; exit $EXIT_FAILED; }

PREFIX=$(printf 'uw%x' $$)
TMP=$(mktemp -d "/tmp/uroce-$MODE.XXXXXX")
PIDS=()
failed=0
# No /etc/uroce.toml: the environment alone configures every node.
CONFIG=$TMP/empty.toml
: >"$CONFIG"

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  "$SCRIPTS/netns-down" "$PREFIX" >/dev/null 2>&1
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs and captures kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit $EXIT_FAILED' INT TERM

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
show() { echo "---- $1"; sed 's/^/    /' "$1"; }

# ---- helpers ----------------------------------------------------------------------

# bg NAME NS CMD...: runs CMD in NS in the background, output in $TMP/NAME.log;
# its pid in $LAST_PID.
bg() {
  local name=$1 ns=$2
  shift 2
  # Truncated here, not by the child: a wait_line right after must not find
  # the previous process's lines in a log the child has not yet reopened.
  : >"$TMP/$name.log"
  ip netns exec "$ns" "$@" >>"$TMP/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_line FILE PATTERN: until FILE has PATTERN (READY_TIMEOUT_S).
wait_line() {
  local i
  for ((i = 0; i < READY_TIMEOUT_S * 20; i++)); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# node NAME NS DEVARGS IPS PCAP ARGS...: `uroce node` in NS until it ends;
# sets $rc.  IPS is UROCE_IP ("" on a port that shares a netdev).  Run in
# the background and waited for, so that a signal to this script stops it
# at once (bash runs traps during `wait`, not during a foreground child).
node() {
  local name=$1 ns=$2 dev=$3 ips=$4 pcap=$5
  shift 5
  bg "$name" "$ns" env UROCE_CONFIG="$CONFIG" UROCE_DEVICE="$dev" UROCE_IP="$ips" UROCE_PCAP="$pcap" \
    "$UROCE" node --seconds $NODE_BOUND_S "$@"
  wait "$LAST_PID"
  rc=$?
}

# start_echo NAME NS DEVARGS IPS PCAP: `uroce node --echo` in the background; $ECHO_PID.
start_echo() {
  bg "$1" "$2" env UROCE_CONFIG="$CONFIG" UROCE_DEVICE="$3" UROCE_IP="$4" UROCE_PCAP="$5" \
    "$UROCE" node --echo --seconds $NODE_BOUND_S
  ECHO_PID=$LAST_PID
}

# stop NAME PID: SIGTERM, then its exit status in $rc.
stop() {
  kill -TERM "$2" 2>/dev/null
  wait "$2"
  rc=$?
}

# counter LOG NAME: a counter's value from a node's exit report (0 if absent).
counter() {
  local v
  v=$(sed -n "s/^  $2=\([0-9]*\) .*/\1/p" "$1" | head -1)
  echo "${v:-0}"
}

expect_ping() {
  local name=$1 want=$2
  if [ "$rc" -eq 0 ] && grep -q "$want sent, $want received, 0 lost" "$TMP/$name.log"; then
    pass "$name: $(grep -E '^rtt' "$TMP/$name.log")"
  else
    fail "$name: exit $rc, expected $want round trips"
    show "$TMP/$name.log"
  fi
}

# "IPv4/IPv6" destination-unreachables the kernel in NS has sent
# (Icmp OutDestUnreachs, Icmp6OutDestUnreachs; 0 where IPv6 is off).
dest_unreach() {
  local v4 v6
  v4=$(ip netns exec "$1" awk '$1 == "Icmp:" { if (!h) { for (i = 2; i <= NF; i++) k[i] = $i; h = 1 }
    else for (i = 2; i <= NF; i++) if (k[i] == "OutDestUnreachs") print $i }' /proc/net/snmp)
  v6=$(ip netns exec "$1" awk '$1 == "Icmp6OutDestUnreachs" { print $2 }' /proc/net/snmp6 2>/dev/null)
  echo "${v4:-0}/${v6:-0}"
}

declare -A UNREACH_BEFORE
record_unreach() {
  local ns
  for ns in "$@"; do UNREACH_BEFORE[$ns]=$(dest_unreach "$ns"); done
}

check_unreach() {
  local ns now
  for ns in "${!UNREACH_BEFORE[@]}"; do
    now=$(dest_unreach "$ns")
    if [ "$now" = "${UNREACH_BEFORE[$ns]}" ]; then
      pass "$ns: the kernel sent no ICMP destination unreachable (IPv4/IPv6: $now)"
    else
      fail "$ns: ICMP destination unreachables (IPv4/IPv6) went from ${UNREACH_BEFORE[$ns]} to $now"
    fi
  done
}

# A TCP echo server (python3) in NS on IP:PORT, in the background.
tcp_server() {
  bg tcp-server "$1" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16); print("listening", flush=True)
while True:
    c, _ = s.accept()
    with c:
        while (d := c.recv(4096)):
            c.sendall(d)
' "$2" "$TCP_PORT"
  wait_line "$TMP/tcp-server.log" listening
}

# A TCP client in NS: N connections to IP:PORT over about SECONDS, each
# echoing a message; exits 0 when every one came back.
tcp_client() {
  bg tcp-client "$1" python3 -c '
import socket, sys, time
ip, port, n, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ok = 0
for i in range(n):
    with socket.create_connection((ip, port), timeout=2) as c:
        msg = b"uroce tcp check %d" % i
        c.sendall(msg)
        got = b""
        while len(got) < len(msg):
            d = c.recv(4096)
            if not d: break
            got += d
        ok += got == msg
    time.sleep(secs / n)
print(f"tcp: {ok}/{n} echoed")
sys.exit(0 if ok == n else 1)
' "$2" "$TCP_PORT" 20 1.5
  TCP_PID=$LAST_PID
}

check_tcp() {
  wait "$TCP_PID"
  local r=$?
  if [ $r -eq 0 ]; then pass "TCP between the namespaces during the run: $(cat "$TMP/tcp-client.log")"; else
    fail "TCP between the namespaces: exit $r"
    show "$TMP/tcp-client.log"
  fi
}

# ICMP echo from a kernel (python3 raw socket) in NS to IP; 0 when answered.
kernel_ping() {
  ip netns exec "$1" python3 -c '
import os, socket, struct, sys, time
def csum(b):
    b += b"\0" * (len(b) % 2)
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
ident = os.getpid() & 0xffff
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); sock.settimeout(1)
n = int(sys.argv[2])
got = 0
for seq in range(n):
    body = b"uroce-kernel-ping"
    hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    pkt = struct.pack("!BBHHH", 8, 0, csum(hdr + body), ident, seq) + body
    sock.sendto(pkt, (sys.argv[1], 0))
    end = time.time() + 1
    while time.time() < end:
        try: d, a = sock.recvfrom(2048)
        except socket.timeout: break
        ihl = (d[0] & 15) * 4
        t, _, _, i, s = struct.unpack("!BBHHH", d[ihl:ihl + 8])
        if t == 0 and i == ident and s == seq and a[0] == sys.argv[1]: got += 1; break
print(f"kernel ping {sys.argv[1]}: {got}/{n} answered"); sys.exit(0 if got == n else 1)
' "$2" $KERNEL_PINGS >"$TMP/kernel-ping.log" 2>&1
}

check_captures() {
  local f files=("$@")
  if "$UROCE" pcap-check "${files[@]}" >"$TMP/pcap-check.log" 2>&1; then
    pass "uroce pcap-check: $(tail -1 "$TMP/pcap-check.log")"
  else
    fail "uroce pcap-check"
    show "$TMP/pcap-check.log"
  fi
  for f in "${files[@]}"; do
    local bad roce
    bad=$(tshark -r "$f" -Y '_ws.malformed || icmp.type == 3 || icmpv6.type == 1' 2>/dev/null | wc -l)
    roce=$(tshark -r "$f" -Y 'infiniband' 2>/dev/null | wc -l)
    if [ "$bad" -eq 0 ] && [ "$roce" -gt 0 ]; then
      pass "tshark $(basename "$f"): $roce RoCEv2 frames decoded, none malformed, no ICMP unreachable"
    else
      fail "tshark $(basename "$f"): $bad malformed or ICMP-unreachable frames, $roce RoCEv2"
      tshark -r "$f" -Y '_ws.malformed || icmp.type == 3 || icmpv6.type == 1' 2>/dev/null | head -5
    fi
  done
}

check_stats() {
  if "$UROCE" stats --pid "$1" --device uroce0 >"$TMP/stats.log" 2>&1 && grep -q "^  rx_roce=[1-9]" "$TMP/stats.log"; then
    pass "uroce stats --pid $1: $(grep -E '^  rx_roce=' "$TMP/stats.log" | awk '{print $1}') read through telemetry"
  else
    fail "uroce stats --pid $1"
    show "$TMP/stats.log"
  fi
}

# `uroce trace` switches a running process's trace categories through
# telemetry: on, shown, off again; a word it does not know is refused.
check_trace() {
  if "$UROCE" trace --pid "$1" qp conn=on >"$TMP/trace.log" 2>&1 && grep -q "^uroce-$1 qp=on conn=on progress=off cc=off$" "$TMP/trace.log" &&
     "$UROCE" trace --pid "$1" none >"$TMP/trace.log" 2>&1 && grep -q "^uroce-$1 qp=off conn=off progress=off cc=off$" "$TMP/trace.log"; then
    pass "uroce trace --pid $1: categories switched on and off through telemetry"
  else
    fail "uroce trace --pid $1"
    show "$TMP/trace.log"
  fi
  local rc=0
  "$UROCE" trace --pid "$1" bogus >"$TMP/trace.log" 2>&1 || rc=$?
  if [ $rc -eq 2 ] && grep -q "'bogus' refused" "$TMP/trace.log"; then
    pass "uroce trace refuses an unknown category (exit 2)"
  else
    fail "uroce trace bogus: exit $rc"
    show "$TMP/trace.log"
  fi
}

expect_echo_exit() {
  stop echo "$ECHO_PID"
  if [ "$rc" -eq 0 ] && grep -q "^echoed $1 pings" "$TMP/echo.log"; then
    pass "echo side answered $1 pings and exited cleanly"
  else
    fail "echo side: exit $rc, expected 'echoed $1 pings'"
    show "$TMP/echo.log"
  fi
}

# ---- the modes ---------------------------------------------------------------------

setup() {
  local out
  if ! out=$("$SCRIPTS/netns-up" "$@" "$PREFIX" 2>"$TMP/netns-up.err"); then
    local r=$?
    [ $r -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns-up.err")"
    fail "netns-up $*: exit $r"
    show "$TMP/netns-up.err"
    exit $EXIT_FAILED
  fi
  eval "$out"
}

run_afpacket() {
  setup --veth --ipv6
  record_unreach "$NS_A" "$NS_B"
  tcp_server "$NS_B" "$IP_B"
  start_echo echo "$NS_B" "$DEVARGS_B" "" "$TMP/b.pcap"
  wait_line "$TMP/echo.log" "echo ready" || { fail "echo side never got ready"; show "$TMP/echo.log"; return; }
  tcp_client "$NS_A" "$IP_B"
  node ping4 "$NS_A" "$DEVARGS_A" "" "$TMP/a.pcap" --ping "$IP_B" --count $ROCE_COUNT --interval-ms $ROCE_INTERVAL_MS
  expect_ping ping4 $ROCE_COUNT
  check_tcp
  # No UROCE_IP: the address came from the veth, and its kernel answers for it.
  grep -q "mtu [0-9]*, $IP_A/$PREFIX_LEN .*; the kernel answers ARP" "$TMP/ping4.log" &&
    pass "the device took $IF_A's addresses; the kernel answers ARP" ||
    fail "the device on $IF_A does not share the kernel's addresses: $(grep 'uroce node: uroce0' "$TMP/ping4.log")"
  node ping6 "$NS_A" "$DEVARGS_A" "" "$TMP/a6.pcap" --ping "$IP6_B" --count $V6_COUNT
  expect_ping ping6 $V6_COUNT
  node icmp "$NS_A" "$DEVARGS_A" "" "$TMP/icmp.pcap" --ping "$IP_B" --icmp --count $ICMP_COUNT
  expect_ping icmp $ICMP_COUNT
  check_stats "$ECHO_PID"
  check_trace "$ECHO_PID"
  expect_echo_exit $((ROCE_COUNT + V6_COUNT))
  # The peer's kernel answered the ICMP echo; its engine saw the requests and left them alone.
  if [ "$(counter "$TMP/echo.log" rx_icmp)" -ge $ICMP_COUNT ] && [ "$(counter "$TMP/echo.log" tx_icmp_reply)" -eq 0 ]; then
    pass "ICMP echo answered by the peer kernel, not its engine (rx_icmp=$(counter "$TMP/echo.log" rx_icmp), tx_icmp_reply=0)"
  else
    fail "echo engine: rx_icmp=$(counter "$TMP/echo.log" rx_icmp) tx_icmp_reply=$(counter "$TMP/echo.log" tx_icmp_reply)"
  fi
  run_afpacket_jumbo
  check_unreach
  check_captures "$TMP/a.pcap" "$TMP/a6.pcap" "$TMP/b.pcap" "$TMP/jumbo.pcap"
}

# MTU 9000 on the veths: the ports get a ring for it (framesz/blocksz) and
# carry payloads of nearly 9000 bytes.
run_afpacket_jumbo() {
  ip netns exec "$NS_A" ip link set dev "$IF_A" mtu $JUMBO_MTU
  ip netns exec "$NS_B" ip link set dev "$IF_B" mtu $JUMBO_MTU
  start_echo echo "$NS_B" "$DEVARGS_B" "" ""
  wait_line "$TMP/echo.log" "echo ready" || { fail "jumbo echo side never got ready"; show "$TMP/echo.log"; return; }
  node jumbo "$NS_A" "$DEVARGS_A" "" "$TMP/jumbo.pcap" --ping "$IP_B" --count $JUMBO_COUNT --size $JUMBO_PAYLOAD
  expect_ping jumbo $JUMBO_COUNT
  grep -q "framesz=.*mtu $JUMBO_MTU," "$TMP/jumbo.log" && pass "jumbo: the af_packet ring was sized for MTU $JUMBO_MTU" ||
    fail "jumbo: no ring geometry for MTU $JUMBO_MTU in: $(grep 'uroce node: uroce0' "$TMP/jumbo.log")"
  expect_echo_exit $JUMBO_COUNT
}

# attach_when_up NAME TAP: once node NAME has brought its device up (the
# tap PMD sets the tap's kernel-side MAC while it starts the port), give the
# tap a MAC of its own and put it on the bridge.  Attached earlier, the
# start could undo the MAC and the bridge would drop the node's frames.
attach_when_up() {
  wait_line "$TMP/$1.log" "uroce node: uroce0 on" || { fail "$1: the device never came up"; show "$TMP/$1.log"; return; }
  # A tap being torn down and made again under the same name (the previous
  # node's) can refuse the first `ip link set`: try again briefly.
  local try
  for try in 1 2 3; do
    "$SCRIPTS/netns-up" --attach-tap "$PREFIX" "$2" 2>"$TMP/attach.err" && return
    sleep 0.5
  done
  fail "attach $2 for $1"
  show "$TMP/attach.err"
}

run_tap() {
  setup --tap
  record_unreach "$NS_A" "$NS_B" "$NS_T"
  tcp_server "$NS_B" "$HOST_B"
  start_echo echo "$NS_T" "$DEVARGS_B" "$IP_B/$PREFIX_LEN" "$TMP/b.pcap"
  attach_when_up echo "$TAP_B"
  wait_line "$TMP/echo.log" "echo ready" || { fail "echo side never got ready"; show "$TMP/echo.log"; return; }
  tcp_client "$NS_A" "$HOST_B"
  bg ping4 "$NS_T" env UROCE_CONFIG="$CONFIG" UROCE_DEVICE="$DEVARGS_A" UROCE_IP="$IP_A/$PREFIX_LEN" \
    UROCE_PCAP="$TMP/a.pcap" "$UROCE" node --seconds $NODE_BOUND_S --ping "$IP_B" --count $ROCE_COUNT \
    --interval-ms $ROCE_INTERVAL_MS --resolve-tries $TAP_RESOLVE_TRIES
  local ping_pid=$LAST_PID
  attach_when_up ping4 "$TAP_A"
  wait "$ping_pid"
  rc=$?
  expect_ping ping4 $ROCE_COUNT
  check_tcp
  if kernel_ping "$NS_A" "$IP_B"; then pass "$(cat "$TMP/kernel-ping.log") (the engine answers on a tap)"; else
    fail "a kernel host's ICMP echo to the engine"
    show "$TMP/kernel-ping.log"
  fi
  bg icmp "$NS_T" env UROCE_CONFIG="$CONFIG" UROCE_DEVICE="$DEVARGS_A" UROCE_IP="$IP_A/$PREFIX_LEN" \
    UROCE_PCAP="$TMP/icmp.pcap" "$UROCE" node --seconds $NODE_BOUND_S --ping "$HOST_B" --icmp --count $ICMP_COUNT \
    --resolve-tries $TAP_RESOLVE_TRIES
  ping_pid=$LAST_PID
  attach_when_up icmp "$TAP_A"
  wait "$ping_pid"
  rc=$?
  expect_ping icmp $ICMP_COUNT
  check_stats "$ECHO_PID"
  expect_echo_exit $ROCE_COUNT
  [ "$(counter "$TMP/echo.log" tx_icmp_reply)" -eq $KERNEL_PINGS ] && pass "echo engine: tx_icmp_reply=$KERNEL_PINGS" ||
    fail "echo engine: tx_icmp_reply=$(counter "$TMP/echo.log" tx_icmp_reply), expected $KERNEL_PINGS"
  check_unreach
  check_captures "$TMP/a.pcap" "$TMP/b.pcap"
}

run_memif() {
  setup --memif
  record_unreach "$NS_A" "$NS_B"
  # The server (echo) first: a memif client cannot start without one.
  start_echo echo "$NS_A" "$DEVARGS_A" "$IP_A/$PREFIX_LEN,fd47::1/64" "$TMP/a.pcap"
  wait_line "$TMP/echo.log" "echo ready" || { fail "echo side never got ready"; show "$TMP/echo.log"; return; }
  local ips="$IP_B/$PREFIX_LEN,fd47::2/64"
  node ping4 "$NS_B" "$DEVARGS_B" "$ips" "$TMP/b.pcap" --ping "$IP_A" --count $MEMIF_COUNT
  expect_ping ping4 $MEMIF_COUNT
  node ping6 "$NS_B" "$DEVARGS_B" "$ips" "$TMP/b6.pcap" --ping fd47::1 --count $V6_COUNT
  expect_ping ping6 $V6_COUNT
  node icmp "$NS_B" "$DEVARGS_B" "$ips" "$TMP/icmp.pcap" --ping "$IP_A" --icmp --count $ICMP_COUNT
  expect_ping icmp $ICMP_COUNT
  node icmp6 "$NS_B" "$DEVARGS_B" "$ips" "" --ping fd47::1 --icmp --count $ICMP_COUNT
  expect_ping icmp6 $ICMP_COUNT
  check_stats "$ECHO_PID"
  expect_echo_exit $((MEMIF_COUNT + V6_COUNT))
  # Two IPv4 and two IPv6 clients resolved the server; the ICMP echoes were
  # all answered by its engine.
  local item name op want got
  for item in tx_arp_reply:ge:2 tx_nd_advert:ge:2 tx_icmp_reply:eq:$ICMP_COUNT tx_icmp6_reply:eq:$ICMP_COUNT; do
    IFS=: read -r name op want <<<"$item"
    got=$(counter "$TMP/echo.log" "$name")
    if [ "$got" -"$op" "$want" ]; then pass "echo engine answered itself: $name=$got"; else
      fail "echo engine: $name=$got, expected -$op $want"
    fi
  done
  check_unreach
  check_captures "$TMP/a.pcap" "$TMP/b.pcap" "$TMP/b6.pcap"
}

echo "netns-$MODE: prefix $PREFIX, work in $TMP"
"run_$MODE"
if [ $failed -eq 0 ]; then
  echo "netns-$MODE: all checks passed"
  exit $EXIT_OK
fi
echo "netns-$MODE: $failed checks failed"
exit $EXIT_FAILED
