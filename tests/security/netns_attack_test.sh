#!/usr/bin/env bash
# Attacks on unmodified RDMA programs over uroce, from a third host on
# their Ethernet segment (suite 'security', root).  Three network
# namespaces — server S (10.77.0.1), client C (10.77.0.2), attacker X
# (10.77.0.9) — on one bridge that floods every frame to every port (ageing
# 0: a hub), so X reads all of S's and C's traffic, as on a shared segment.
# S and C run Debian's rping and perftest through the drop-ins over
# net_af_packet; X is tests/security/attacker.cpp.
#
#   forged-dreq    X sniffs the CM handshake of a running `rping -V` and sends
#                  DREQs with its comm IDs to both ends: the transfer goes on
#                  and verifies; S counts rx_wrong_source
#   unknown-dreq   X sends DREQs for IDs nobody has: none is answered
#   spoofed-write  X sniffs an RDMA READ/WRITE of a running `rping -V` and
#                  writes into the target MR itself, from its own address,
#                  at the PSNs around the sniffed one: dropped (drop_src_addr),
#                  the transfer verifies
#   mad-flood      20,000 CM MADs from as many spoofed addresses: S lives,
#                  keeps at most 1,024 address handles, and still connects
#   rsocket-flood  20,000 datagram-rsocket rendezvous datagrams to a
#                  `udpong` server, half from spoofed addresses nobody
#                  answers ARP for, each from a new port: the server lives,
#                  its memory stays bounded, and a client's udpong run then
#                  completes within 30 s (each spoofed peer cost the server
#                  a 2 s address resolution in its receive call before)
#   peer-term      the rping client is stopped by SIGTERM mid-transfer: it
#                  ends by that signal, the server hears DISCONNECTED and ends
#   peer-vanish    the receiving side of ib_write_bw is killed (SIGKILL)
#                  mid-run: the sender ends in "retry exceeded" within its
#                  QP's retry budget, not never
#
#   netns_attack_test.sh BUILD_DIR SCRIPTS_DIR ATTACKER UROCE [CASE...]
# Exit 0 pass, 1 fail, 77 skip.
set -u

readonly EXIT_SKIP=77
readonly SPOOF_PINGS=20000
[ $# -ge 4 ] || { echo "usage: $0 BUILD_DIR SCRIPTS_DIR ATTACKER UROCE [CASE...]" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2 ATTACKER=$(readlink -f "$3") UROCE=$(readlink -f "$4")
shift 4

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, DPDK ports)"
for p in rping udpong ib_write_bw ip ss timeout stdbuf; do
  command -v $p >/dev/null || skip "needs $p (scripts/setup installs rdmacm-utils, perftest, iproute2)"
done

P=$(printf 'sx%x' $$)
NS_S=$P-s NS_C=$P-c NS_X=$P-x NS_W=$P-w
IP_S=10.77.0.1 IP_C=10.77.0.2 IP_X=10.77.0.9
TMP=$(mktemp -d /tmp/uroce-attack.XXXXXX)
CONFIG=$TMP/empty.toml
: >"$CONFIG"
RUN=("$SCRIPTS/uroce-run" --build "$BUILD" --config "$CONFIG")
PIDS=()
failed=0

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  for ns in "$NS_S" "$NS_C" "$NS_X" "$NS_W"; do ip netns del "$ns" 2>/dev/null; done
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
show() { echo "---- $1"; sed 's/^/    /' "$1" | tail -30; }

# ---- the segment -------------------------------------------------------------
ip netns add "$NS_W" || skip "cannot make network namespaces"
ip netns exec "$NS_W" ip link add br0 type bridge forward_delay 0 stp_state 0 ageing_time 0
ip netns exec "$NS_W" ip link set br0 up
for side in s c x; do
  ns=$P-$side
  ip netns add "$ns"
  ip link add "$P-$side" netns "$ns" type veth peer name "p$side" netns "$NS_W"
  ip netns exec "$NS_W" ip link set "p$side" master br0 up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip link set "$P-$side" up
done
ip netns exec "$NS_S" ip addr add $IP_S/24 dev "$P-s"
ip netns exec "$NS_C" ip addr add $IP_C/24 dev "$P-c"
ip netns exec "$NS_X" ip addr add $IP_X/24 dev "$P-x"
for side in s c x; do ip netns exec "$P-$side" sysctl -qw net.ipv6.conf.all.disable_ipv6=1; done
sleep 1
MAC_S=$(ip netns exec "$NS_S" cat /sys/class/net/"$P-s"/address)
MAC_C=$(ip netns exec "$NS_C" cat /sys/class/net/"$P-c"/address)

S_ENV=(ip netns exec "$NS_S" env UROCE_DEVICE=net_af_packet0,iface=$P-s)
C_ENV=(ip netns exec "$NS_C" env UROCE_DEVICE=net_af_packet0,iface=$P-c)
X=(ip netns exec "$NS_X" "$ATTACKER" "$P-x")

# The counter NAME of set SET of the uroce process PID (0 when absent).
counter() {  # PID SET NAME
  "$UROCE" stats --pid "$1" --json 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); p=d['processes'];
print(next(iter(p[0]['devices'].values()))['$2'].get('$3',0) if p and p[0]['devices'] else 0)" 2>/dev/null || echo 0
}

# The pid of the newest process running PROGRAM in namespace NS.
pid_of() {  # NS PROGRAM
  local pid
  for pid in $(ip netns pids "$1"); do
    [ "$(cat /proc/$pid/comm 2>/dev/null)" = "$2" ] && echo "$pid"
  done | tail -1
}

# Waits up to S seconds for PID to end; its status in $rc (124: did not end).
wait_pid() {  # PID S
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2>/dev/null || { wait "$1"; rc=$?; return 0; }
    sleep 0.1
  done
  rc=124
  return 1
}

start_rping() {  # NAME COUNT SIZE: server and client in the background
  "${S_ENV[@]}" stdbuf -oL "${RUN[@]}" rping -s -v -V -C "$2" -S "$3" -a $IP_S >"$TMP/$1-s.log" 2>&1 &
  SPID=$!
  PIDS+=("$SPID")
  sleep 1.5
  "${C_ENV[@]}" stdbuf -oL "${RUN[@]}" rping -c -v -V -C "$2" -S "$3" -a $IP_S >"$TMP/$1-c.log" 2>&1 &
  CPID=$!
  PIDS+=("$CPID")
}

# Both rping ends exit 0 and the client saw its last ping verified.
rping_ok() {  # NAME COUNT
  local want="ping data: rdma-ping-$(($2 - 1)):"
  wait_pid "$CPID" 120
  local crc=$rc
  wait_pid "$SPID" 20
  local src=$rc
  if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -q -- "$want" "$TMP/$1-c.log" && ! grep -qi "verify failed\|mismatch" "$TMP/$1-c.log"; then
    return 0
  fi
  echo "rping: client exit $crc, server exit $src"
  show "$TMP/$1-s.log"
  show "$TMP/$1-c.log"
  return 1
}

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" "$2" | tail -1; }

# ---- the cases ------------------------------------------------------------------

case_forged_dreq() {
  "${X[@]}" sniff-cm 8000 >"$TMP/dreq-sniff.log" 2>&1 &
  local xpid=$!
  sleep 0.3
  start_rping dreq 3000 512
  wait "$xpid"
  local req_comm rep_comm req_qpn rep_qpn
  req_comm=$(field req_comm "$TMP/dreq-sniff.log") rep_comm=$(field rep_comm "$TMP/dreq-sniff.log")
  req_qpn=$(field req_qpn "$TMP/dreq-sniff.log") rep_qpn=$(field rep_qpn "$TMP/dreq-sniff.log")
  if [ -z "$req_comm" ] || [ -z "$rep_comm" ]; then
    fail "forged-dreq: the attacker saw no REQ/REP"; show "$TMP/dreq-sniff.log"; return
  fi
  local spid
  spid=$(pid_of "$NS_S" rping)
  # To the server as if from the client, and to the client as if from the server.
  "${X[@]}" dreq $IP_X $IP_S "$MAC_S" "$req_comm" "$rep_comm" "$rep_qpn"
  "${X[@]}" dreq $IP_X $IP_C "$MAC_C" "$rep_comm" "$req_comm" "$req_qpn"
  sleep 0.3
  local wrong
  wrong=$(counter "$spid" cm rx_wrong_source)
  if rping_ok dreq 3000 && [ "${wrong:-0}" -ge 1 ]; then
    pass "forged-dreq: rping -V ran on and verified; the server dropped $wrong forged DREQ(s) (rx_wrong_source)"
  else
    fail "forged-dreq: rx_wrong_source=$wrong"
  fi
}

case_unknown_dreq() {
  "${S_ENV[@]}" "${RUN[@]}" rping -s -a $IP_S -C 1 >"$TMP/unk-s.log" 2>&1 &
  local s=$!
  PIDS+=("$s")
  sleep 1.5
  local spid
  spid=$(pid_of "$NS_S" rping)
  "${X[@]}" unknown-dreq $IP_S "$MAC_S" 100 >"$TMP/unk.log" 2>&1
  local dreps dropped
  dreps=$(field dreps "$TMP/unk.log")
  dropped=$(counter "$spid" cm rx_dreq_unknown)
  kill -TERM "$s" 2>/dev/null
  wait_pid "$s" 5
  if [ "$dreps" = 0 ] && [ "${dropped:-0}" -ge 100 ]; then
    pass "unknown-dreq: 100 DREQs for unknown IDs, 0 DREPs back, rx_dreq_unknown=$dropped"
  else
    fail "unknown-dreq: dreps=$dreps rx_dreq_unknown=$dropped"; show "$TMP/unk.log"
  fi
}

case_spoofed_write() {
  # Long enough that the QP outlives the sniff and the attack: WRITEs to a
  # QP already gone are dropped as unknown QPN, not by the source check.
  # (4000 pings ended within the 1.5 s sniff with an engine whose naps
  # were shorter.)
  start_rping write $SPOOF_PINGS 512
  sleep 1
  "${X[@]}" sniff-rc 1500 >"$TMP/write-sniff.log" 2>&1
  local dst qpn psn va rkey len
  dst=$(field rc_dst "$TMP/write-sniff.log") qpn=$(field rc_qpn "$TMP/write-sniff.log")
  psn=$(field rc_psn "$TMP/write-sniff.log") va=$(field rc_va "$TMP/write-sniff.log")
  rkey=$(field rc_rkey "$TMP/write-sniff.log") len=$(field rc_len "$TMP/write-sniff.log")
  if [ -z "$qpn" ]; then fail "spoofed-write: the attacker saw no RDMA READ/WRITE"; show "$TMP/write-sniff.log"; return; fi
  local victim_ns victim_mac
  if [ "$dst" = $IP_C ]; then victim_ns=$NS_C victim_mac=$MAC_C; else victim_ns=$NS_S victim_mac=$MAC_S; fi
  local vpid
  vpid=$(pid_of "$victim_ns" rping)
  "${X[@]}" write $IP_X "$dst" "$victim_mac" "$qpn" "$psn" "$va" "$rkey" "$len"
  # The victim counts them as its engine gets to them (later on a loaded
  # machine, where a telemetry read can also time out): read for up to 3 s.
  local dropped=0 try
  for try in $(seq 30); do
    sleep 0.1
    dropped=$(counter "$vpid" rnic drop_src_addr)
    [ "${dropped:-0}" -ge 1 ] && break
  done
  if rping_ok write $SPOOF_PINGS && [ "${dropped:-0}" -ge 1 ]; then
    pass "spoofed-write: 64 WRITEs into the sniffed MR from $IP_X dropped (drop_src_addr=$dropped); rping -V verified"
  else
    fail "spoofed-write: drop_src_addr=$dropped"
  fi
}

case_mad_flood() {
  "${S_ENV[@]}" stdbuf -oL "${RUN[@]}" rping -s -v -V -C 10 -a $IP_S >"$TMP/flood-s.log" 2>&1 &
  SPID=$!
  PIDS+=("$SPID")
  # Past the CM's start-up grace (3 s: REQs for no listener are forgotten,
  # not rejected, so they would make no address handles): the flood then
  # meets the REJ path, which keeps a handle per source.
  sleep 4
  local spid rss0 rss1
  spid=$(pid_of "$NS_S" rping)
  rss0=$(awk '/VmRSS/ {print $2}' /proc/"$spid"/status)
  "${X[@]}" mad-flood $IP_S "$MAC_S" 20000
  sleep 1
  rss1=$(awk '/VmRSS/ {print $2}' /proc/"$spid"/status 2>/dev/null)
  local ahs evicted
  ahs=$(counter "$spid" gsi address_handles)
  evicted=$(counter "$spid" gsi ah_evicted)
  "${C_ENV[@]}" stdbuf -oL "${RUN[@]}" rping -c -v -V -C 10 -a $IP_S >"$TMP/flood-c.log" 2>&1 &
  CPID=$!
  PIDS+=("$CPID")
  if rping_ok flood 10 && [ -n "$ahs" ] && [ "$ahs" -le 1024 ] && [ "${evicted:-0}" -gt 0 ]; then
    pass "mad-flood: 20000 MADs from spoofed sources: address handles $ahs (evicted $evicted), RSS ${rss0} -> ${rss1} kB; rping works after"
  else
    fail "mad-flood: address_handles=$ahs ah_evicted=$evicted RSS ${rss0} -> ${rss1} kB"
  fi
}

# UDP datagrams the kernel of namespace NS delivered to a socket so far.
udp_in() {  # NS
  ip netns exec "$1" awk '/^Udp:/ && $2 ~ /^[0-9]+$/ {print $2}' /proc/net/snmp
}

case_rsocket_flood() {
  "${S_ENV[@]}" stdbuf -oL "${RUN[@]}" udpong -b $IP_S >"$TMP/rsflood-s.log" 2>&1 &
  SPID=$!
  PIDS+=("$SPID")
  local i
  for ((i = 0; i < 100; i++)); do  # udpong binds its UDP socket, then waits
    ip netns exec "$NS_S" ss -Huln "sport = :7174" | grep -q . && break
    sleep 0.1
  done
  # A first client run opens the server's device (its pools are most of
  # its memory), so that what the flood adds shows.
  timeout 30 "${C_ENV[@]}" "${RUN[@]}" udpong -s $IP_S -S 64 -C 100 >"$TMP/rsflood-c0.log" 2>&1
  local spid rss0 rss1
  spid=$(pid_of "$NS_S" udpong)
  rss0=$(awk '/VmRSS/ {print $2}' /proc/"$spid"/status)
  local in0 in1
  in0=$(udp_in "$NS_S")
  "${X[@]}" rsocket-flood $IP_S "$MAC_S" 7174 20000
  sleep 2  # the server works through what reached its socket
  in1=$(udp_in "$NS_S")
  local t0=$SECONDS
  timeout 30 "${C_ENV[@]}" stdbuf -oL "${RUN[@]}" udpong -s $IP_S -S 64 -C 1000 >"$TMP/rsflood-c.log" 2>&1
  local crc=$? dt=$((SECONDS - t0))
  rss1=$(awk '/VmRSS/ {print $2}' /proc/"$spid"/status 2>/dev/null)
  local alive=no
  kill -0 "$spid" 2>/dev/null && alive=yes
  kill -KILL "$SPID" 2>/dev/null
  # A bounded peer table: 1,024 peers and their address handles are well
  # under 16 MB (20,000 were not).
  # More than 1,024 peers must have reached it for the bound to be tested.
  if [ $crc -eq 0 ] && grep -q "^custom" "$TMP/rsflood-c.log" && [ $alive = yes ] && [ -n "$rss1" ] &&
    [ $((in1 - in0)) -gt 1024 ] &&
    [ $((rss1 - rss0)) -lt 16384 ]; then
    pass "rsocket-flood: 20000 rendezvous datagrams (half spoofed), $((in1 - in0)) taken by the server: it lives, RSS ${rss0} -> ${rss1} kB; udpong -C 1000 then ran in ${dt}s"
  else
    fail "rsocket-flood: $((in1 - in0)) datagrams taken; client exit $crc (124: not done in 30 s) after ${dt}s, server alive: $alive, RSS ${rss0} -> ${rss1} kB"
    show "$TMP/rsflood-s.log"
    show "$TMP/rsflood-c.log"
  fi
}

case_peer_term() {
  start_rping term 100000 512
  sleep 3
  local cpid
  cpid=$(pid_of "$NS_C" rping)
  kill -TERM "$cpid"
  local t0=$SECONDS
  wait_pid "$CPID" 10
  local crc=$rc
  wait_pid "$SPID" 10
  local src=$rc dt=$((SECONDS - t0))
  # 143: ended by the SIGTERM itself, as without uroce (the shim's handler
  # disconnects first, but the program never sees the signal).
  if [ $crc -eq 143 ] && [ $src -ne 124 ] && grep -qi "DISCONNECT" "$TMP/term-s.log"; then
    pass "peer-term: client stopped by SIGTERM (exit $crc); the server heard DISCONNECTED and ended (exit $src) within ${dt}s"
  else
    fail "peer-term: client exit $crc (want 143), server exit $src (124: still running 10 s later)"; show "$TMP/term-s.log"; show "$TMP/term-c.log"
  fi
}

case_peer_vanish() {
  # ib_write_bw's sender keeps WRITEs in flight; its receiver only waits.
  "${S_ENV[@]}" stdbuf -oL "${RUN[@]}" ib_write_bw -d uroce0 -x 0 -n 2000000 -s 4096 >"$TMP/vanish-s.log" 2>&1 &
  SPID=$!
  PIDS+=("$SPID")
  sleep 1.5
  "${C_ENV[@]}" stdbuf -oL "${RUN[@]}" ib_write_bw -d uroce0 -x 0 -n 2000000 -s 4096 $IP_S >"$TMP/vanish-c.log" 2>&1 &
  CPID=$!
  PIDS+=("$CPID")
  sleep 3
  local spid
  spid=$(pid_of "$NS_S" ib_write_bw)
  kill -KILL "$spid"
  local t0=$SECONDS
  wait_pid "$CPID" 15
  local crc=$rc dt=$((SECONDS - t0))
  if [ $crc -ne 124 ] && [ $crc -ne 0 ] && grep -qi "retry\|error" "$TMP/vanish-c.log"; then
    pass "peer-vanish: receiver killed; the sender ended in ${dt}s (exit $crc): $(grep -i -m1 "retry\|status" "$TMP/vanish-c.log" | cut -c1-80)"
  else
    fail "peer-vanish: sender exit $crc (124: still running 15 s later)"; show "$TMP/vanish-c.log"
  fi
}

CASES=(forged_dreq unknown_dreq spoofed_write mad_flood rsocket_flood peer_term peer_vanish)
echo "security-netns: work in $TMP"
for c in "${CASES[@]}"; do
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | tr - _ | grep -qx -- "$c"; then continue; fi
  "case_$c"
done
if [ $failed -eq 0 ]; then
  echo "security-netns: all checks passed"
  exit 0
fi
echo "security-netns: $failed checks failed"
exit 1
