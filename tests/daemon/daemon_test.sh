#!/usr/bin/env bash
# uroced, the shared device (issue 15), with unmodified programs: two
# network namespaces joined by a veth, a daemon in each on its end
# (net_af_packet), every program a client of its namespace's daemon
# (UROCE_SOCKET) through the drop-ins (scripts/uroce-run).
#
#   same-ns      rping -V, and ib_send_lat with -R, server and client in one
#                namespace: to the device's own address and to 127.0.0.1
#                (the daemon carries them between the two processes)
#   pairs        three program pairs at once across the namespaces
#                (ibv_rc_pingpong, rping -V, ib_write_bw -R)
#   non-root     rping server and client as user nobody
#   tools        uroce dev / client / qp / daemon-stats, text and --json,
#                while a program runs
#   kill-client  kill -9 of a client mid-transfer: its peer ends within a
#                second (the daemon sends the DREQ), the daemon still runs,
#                the next run works; both directions
#   hostile      a client that forges frames and records and sends garbage
#                (hostile_client) beside a legitimate transfer, as nobody
#   polling      an idle daemon sleeps (its wake-ups come from its timers,
#                about a hundred a second); while a client spins on a CQ
#                (ib_send_lat) the daemon polls for it (busy_polls), and a
#                daemon started with --no-busy-poll never does, nor one in
#                a session of its own (another scheduling group, as under
#                systemd); with such daemons on both ends ib_send_lat
#                without rdma_cm (ACK timeout 14: 67 ms, 7 retries) makes
#                its 20,000 round trips
#   fork         a program opens the device, then forks a passive and an
#                active child that connect through rdma_cm and exchange a
#                message (pyverbs' rdma_cm tests do this): each child is a
#                client of its own, and the parent's device still works
#                after (fork_pair); with an in-process device the child
#                finds none
#   sysfs        uroce-run --sysfs: the program sees
#                /sys/class/infiniband/uroce0/device/net/<the veth> (the
#                daemon's device, and an in-process one), the host does not
#   term-signal  apps-term-signal's cases through uroced: SIGTERM, SIGINT
#                and SIGHUP end a client by that signal, never seen by it
#                (no EINTR from the call it was blocked in); a program's
#                own handler and signalfd keep theirs
#   restart      the daemon stops under a client: IBV_EVENT_DEVICE_FATAL,
#                RDMA_CM_EVENT_DEVICE_REMOVAL and the flush, never a hang
#                (fatal_watch); a program mid-transfer when the daemon is
#                killed ends; a new daemon serves the next program
#
#   daemon_test.sh BUILD SCRIPTS HOSTILE_CLIENT FATAL_WATCH FORK_PAIR TERM_SIGNAL [CASE...]
#
# Exit 0 pass, 1 fail, 77 skip (not root, programs missing).
set -u

readonly EXIT_SKIP=77
readonly T=30  # seconds any one program may run
[ $# -ge 5 ] || { echo "usage: $0 BUILD SCRIPTS HOSTILE_CLIENT FATAL_WATCH FORK_PAIR [CASE...]" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2 HOSTILE=$3 FATAL_WATCH=$4 FORK_PAIR=$5 TERM_SIGNAL=$6
shift 6

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
for p in rping ib_send_lat ib_write_bw ibv_rc_pingpong ibv_devinfo runuser; do
  command -v $p >/dev/null || skip "needs $p (scripts/setup installs rdmacm-utils, perftest, ibverbs-utils)"
done
[ -x "$BUILD/tools/uroced" ] || skip "no $BUILD/tools/uroced"

PREFIX=$(printf 'ud%x' $$)
TMP=$(mktemp -d "/tmp/uroce-daemon.XXXXXX")
chmod 755 "$TMP"  # the non-root case's sockets and logs live here
PIDS=()
failed=0
CONFIG=$TMP/empty.toml
: >"$CONFIG"
RUN=("$SCRIPTS/uroce-run" --build "$BUILD")
UROCE=(env -u LD_LIBRARY_PATH "$BUILD/tools/uroce")

# shellcheck source=daemon_lib.sh
. "$(dirname "$0")/daemon_lib.sh"

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  daemons_down
  "$SCRIPTS/netns-down" "$PREFIX" >/dev/null 2>&1
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
show() { echo "---- $1"; tail -25 "$1" | sed 's/^/    /'; }
want() { grep -qE -- "$2" "$1"; }  # LOG PATTERN

out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
  [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
  echo "FAIL netns-up"; cat "$TMP/netns.err"; exit 1
}
eval "$out"
SOCK_A=$TMP/a.sock SOCK_B=$TMP/b.sock
start_daemons() {
  daemon_up a "$NS_A" "$DEVARGS_A" "$SOCK_A" "$TMP/uroced-a.log" || { fail "uroced in $NS_A"; exit 1; }
  daemon_up b "$NS_B" "$DEVARGS_B" "$SOCK_B" "$TMP/uroced-b.log" || { fail "uroced in $NS_B"; exit 1; }
}
start_daemons
IN_A=(ip netns exec "$NS_A" env UROCE_SOCKET="$SOCK_A")
IN_B=(ip netns exec "$NS_B" env UROCE_SOCKET="$SOCK_B")
# The non-root user's view of namespace A (ip netns exec needs root; the
# program then drops to nobody).
AS_NOBODY_A=(ip netns exec "$NS_A" runuser -u nobody -- env UROCE_SOCKET="$SOCK_A")

# start_bg LOG CMD...: in the background, its pid in BG
start_bg() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  BG=$!
  PIDS+=("$BG")
}

# rping_pair NAME SERVER_PREFIX CLIENT_PREFIX SERVER_ADDR CONNECT_ADDR PORT [COUNT]
rping_pair() {
  local name=$1 count=${7:-50}
  local -n spre=$2 cpre=$3
  start_bg "$TMP/$name.server.log" "${spre[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -s -a "$4" -p "$6" -V -C "$count"
  local spid=$BG
  log_wait "$TMP/$name.server.log" "listening on port" 3 "$spid"
  "${cpre[@]}" timeout $T "${RUN[@]}" rping -c -a "$5" -p "$6" -V -C "$count" -v >"$TMP/$name.client.log" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  if [ $crc -eq 0 ] && [ $src -eq 0 ] && want "$TMP/$name.client.log" "ping data: rdma-ping-$((count - 1)):"; then
    pass "$name: $count pings verified, both sides exit 0"
  else
    fail "$name: client exit $crc, server exit $src"
    show "$TMP/$name.server.log"
    show "$TMP/$name.client.log"
  fi
}

# perftest_pair NAME SERVER_PREFIX CLIENT_PREFIX CONNECT_ADDR PORT PROGRAM ARGS...: -R (rdma_cm)
perftest_pair() {
  local name=$1 addr=$4 port=$5
  local -n spre=$2 cpre=$3
  shift 5
  start_bg "$TMP/$name.server.log" "${spre[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" "$@" -R -p "$port"
  local spid=$BG
  log_wait "$TMP/$name.server.log" "listening on port" 3 "$spid"
  "${cpre[@]}" timeout $T "${RUN[@]}" "$@" -R -p "$port" "$addr" >"$TMP/$name.client.log" 2>&1
  local crc=$?
  wait "$spid"
  perftest_result "$name" $crc $?
}

# perftest_result NAME CLIENT_EXIT SERVER_EXIT [WHAT]: both exited 0 and the
# client printed a result row under "#bytes".
perftest_result() {
  local name=$1 crc=$2 src=$3 what=${4:-} row
  row=$(grep -A1 '#bytes' "$TMP/$name.client.log" | tail -1 | tr -s ' ')
  if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ] && [[ "$row" =~ ^\ ?[0-9]+\ +[0-9]+\ +[0-9.]+ ]]; then
    pass "$name$what:$row"
  else
    fail "$name: client exit $crc, server exit $src"
    show "$TMP/$name.server.log"
    show "$TMP/$name.client.log"
  fi
}

case_same_ns() {
  rping_pair same-ns-rping-own IN_A IN_A "$IP_A" "$IP_A" 7471
  rping_pair same-ns-rping-127 IN_A IN_A 127.0.0.1 127.0.0.1 7472
  perftest_pair same-ns-send-lat-own IN_A IN_A "$IP_A" 19001 ib_send_lat -n 500
  perftest_pair same-ns-send-lat-127 IN_A IN_A 127.0.0.1 19002 ib_send_lat -n 500
}

# The GID index of an IPv4 address in ibv_devinfo -v (RoCE v2).
gid_index() {  # PREFIX_ARRAY_NAME IP
  local -n pre=$1
  "${pre[@]}" timeout $T "${RUN[@]}" ibv_devinfo -v 2>/dev/null |
    sed -n "s/.*GID\[ *\([0-9]*\)\]:.*::ffff:$2, RoCE v2.*/\1/p" | head -1
}

case_pairs() {
  local ga gb
  ga=$(gid_index IN_A "$IP_A") gb=$(gid_index IN_B "$IP_B")
  [ -n "$ga" ] && [ -n "$gb" ] || { fail "pairs: no RoCE v2 GID for $IP_A / $IP_B"; return; }
  # Three servers in B, then their clients in A, all at once.
  start_bg "$TMP/pairs-pp.server.log" "${IN_B[@]}" timeout $T "${RUN[@]}" ibv_rc_pingpong -g "$gb" -n 500 -p 18601
  local s1=$BG
  start_bg "$TMP/pairs-rping.server.log" "${IN_B[@]}" timeout $T "${RUN[@]}" rping -s -a "$IP_B" -p 7473 -V -C 300
  local s2=$BG
  start_bg "$TMP/pairs-bw.server.log" "${IN_B[@]}" timeout $T "${RUN[@]}" ib_write_bw -R -p 19003 -n 2000
  local s3=$BG
  sleep 1.5
  start_bg "$TMP/pairs-pp.client.log" "${IN_A[@]}" timeout $T "${RUN[@]}" ibv_rc_pingpong -g "$ga" -n 500 -p 18601 "$IP_B"
  local c1=$BG
  start_bg "$TMP/pairs-rping.client.log" "${IN_A[@]}" timeout $T "${RUN[@]}" rping -c -a "$IP_B" -p 7473 -V -C 300 -v
  local c2=$BG
  start_bg "$TMP/pairs-bw.client.log" "${IN_A[@]}" timeout $T "${RUN[@]}" ib_write_bw -R -p 19003 -n 2000 "$IP_B"
  local c3=$BG
  local p rc all=0
  for p in $s1 $s2 $s3 $c1 $c2 $c3; do
    wait "$p"; rc=$?
    [ $rc -eq 0 ] || all=$rc
  done
  if [ $all -eq 0 ] && want "$TMP/pairs-pp.client.log" '500 iters in' &&
    want "$TMP/pairs-rping.client.log" 'rdma-ping-299:' && [ "$(grep -A1 '#bytes' "$TMP/pairs-bw.client.log" | wc -l)" -eq 2 ]; then
    pass "pairs: ibv_rc_pingpong, rping -V and ib_write_bw -R at once across the namespaces"
  else
    fail "pairs: an exit status $all"
    for f in "$TMP"/pairs-*.log; do show "$f"; done
  fi
}

case_non_root() {
  rping_pair non-root-rping AS_NOBODY_A AS_NOBODY_A "$IP_A" "$IP_A" 7474 20
  "${UROCE[@]}" client --socket "$SOCK_A" >"$TMP/clients.txt" 2>&1
  # Both gone by now; what the daemon saw is in its log.
  if grep -qE 'client [0-9]+ is rping \(pid [0-9]+, uid 65534(, our scheduling group)?\)$' "$TMP/uroced-a.log"; then
    pass "non-root: the daemon served uid 65534 without CAP_NET_RAW"
  else
    fail "non-root: the daemon's log does not show a uid 65534 client"
    show "$TMP/uroced-a.log"
  fi
}

case_tools() {
  start_bg "$TMP/tools.server.log" "${IN_B[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -s -a "$IP_B" -p 7475 -V -C 0
  local spid=$BG
  log_wait "$TMP/tools.server.log" "listening on port" 3 "$spid"
  start_bg "$TMP/tools.client.log" "${IN_A[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -c -a "$IP_B" -p 7475 -V -C 0
  local cpid=$BG
  log_wait "$TMP/tools.client.log" RDMA_CM_EVENT_ESTABLISHED 5 "$cpid"
  sleep 0.5  # mid-transfer
  "${UROCE[@]}" dev --socket "$SOCK_A" >"$TMP/dev.txt" 2>&1
  "${UROCE[@]}" dev --socket "$SOCK_A" --json >"$TMP/dev.json" 2>&1
  "${UROCE[@]}" client --socket "$SOCK_A" --json >"$TMP/client.json" 2>&1
  "${UROCE[@]}" qp --socket "$SOCK_A" >"$TMP/qp.txt" 2>&1
  "${UROCE[@]}" qp --socket "$SOCK_A" --json >"$TMP/qp.json" 2>&1
  "${UROCE[@]}" daemon-stats --socket "$SOCK_A" --json >"$TMP/stats.json" 2>&1
  kill -TERM "$cpid" "$spid" 2>/dev/null
  wait "$cpid" "$spid" 2>/dev/null
  local ok=1
  # The daemon's af_packet ring: 4096 frames, not the PMD's 512.
  want "$TMP/dev.txt" "^uroce0: port $DEVARGS_A,blocksz=4096,framesz=2048,framecnt=4096 .*link up" || ok=0
  local want_filter=false
  kernel_has_tcx && want_filter=true
  python3 - "$TMP" "$IP_A" "$IP_B" "$want_filter" <<'PY' >"$TMP/tools.check" 2>&1 || ok=0
import json, sys
tmp, ip_a, ip_b = sys.argv[1], sys.argv[2], sys.argv[3]
want_filter = sys.argv[4] == "true"
dev = json.load(open(f"{tmp}/dev.json"))
assert dev[0]["link"] == "up" and any(a.startswith(ip_a + "/") for a in dev[0]["addresses"]), dev
# af_packet on a veth: the daemon's device spares the kernel's stack its
# RoCE frames where the kernel has tcx (6.6).
assert dev[0]["ingress_filter"] is want_filter, dev
clients = json.load(open(f"{tmp}/client.json"))
rp = [c for c in clients if c["program"] == "rping"]
assert rp and rp[0]["devices"][0]["qpns"] >= 1 and rp[0]["devices"][0]["tx_frames"] > 0, clients
qps = json.load(open(f"{tmp}/qp.json"))
rc = [q for c in qps["clients"] if c["program"] == "rping" for q in c["qps"] if q["type"] == "RC"]
assert rc and rc[0]["state"] == "RTS" and rc[0]["dest_gid"] == ip_b and rc[0]["sq_psn"] >= 0, qps
# Its path and congestion state (issue 42): a RoCEv2 source port, a round
# trip measured mid-transfer, not held back on a clean link, go-back-N by
# default, nothing lost.
q = rc[0]
assert 0xC000 <= q["udp_sport"] <= 0xFFFF and q["srtt_ns"] > 0 and q["rate_bps"] == 0, q
assert q["recovery"] == "go-back-N" and q["retrans_pkts"] == 0 and q["ack_timeouts"] == 0, q
assert q["cnps_sent"] == 0 and q["cnps_rcvd"] == 0 and q["path_changes"] == 0, q
own = [o for c in qps["clients"] if c["program"] == "rping" for o in c["daemon_view"] if "claim" in o]
assert own and own[0]["claim"]["gid"] == ip_b, qps
stats = json.load(open(f"{tmp}/stats.json"))
assert stats[0]["switch"]["tx_frames"] > 0 and "cm_router" in stats[0], stats
print("tools: json checks hold")
PY
  want "$TMP/qp.txt" 'qpn 0x[0-9a-f]{6} RC RTS sq_psn 0x[0-9a-f]{6} rq_psn 0x[0-9a-f]{6} dest' || ok=0
  want "$TMP/qp.txt" '^ +udp sport [0-9]+ rate line rate alpha [0-9.]+ srtt [0-9.]+ us cnps sent 0 rcvd 0 path changes 0$' || ok=0
  want "$TMP/qp.txt" '^ +recovery go-back-N retransmitted 0 \(selective 0\) ack timeouts 0' || ok=0
  if [ $ok -eq 1 ]; then
    pass "tools: uroce dev, client, qp (RTS, PSNs, destination, the daemon's claim) and daemon-stats, text and --json"
  else
    fail "tools"
    for f in dev.txt qp.txt tools.check; do show "$TMP/$f"; done
  fi
}

# kill_client NAME VICTIM_SIDE: rping -C 0 (for ever) across; kill -9 one
# side once connected and mid-transfer; the other must exit within 1.5 s.
kill_one() {
  local name=$1 victim=$2
  start_bg "$TMP/$name.server.log" "${IN_B[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -s -a "$IP_B" -p 7476 -C 0
  local spid=$BG
  log_wait "$TMP/$name.server.log" "listening on port" 3 "$spid"
  start_bg "$TMP/$name.client.log" "${IN_A[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -c -a "$IP_B" -p 7476 -C 0
  local cpid=$BG
  log_wait "$TMP/$name.client.log" RDMA_CM_EVENT_ESTABLISHED 5 "$cpid"
  sleep 0.5  # mid-transfer
  local dead=$spid survivor=$cpid
  [ "$victim" = client ] && dead=$cpid survivor=$spid
  # The program itself, not timeout or the wrapper: the drop-in's process.
  local prog
  prog=$(pgrep -P "$(pgrep -P "$dead" | head -1)" -x rping | head -1)
  [ -n "$prog" ] || prog=$(pgrep -P "$dead" -x rping | head -1)
  if [ -z "$prog" ]; then
    fail "$name: no rping to kill"; show "$TMP/$name.server.log"; show "$TMP/$name.client.log"; return
  fi
  kill -KILL "$prog"
  local t0 gone=0
  t0=$(date +%s%N)
  for _ in $(seq 150); do
    kill -0 "$survivor" 2>/dev/null || { gone=1; break; }
    sleep 0.02
  done
  local ms=$((($(date +%s%N) - t0) / 1000000))
  wait "$dead" 2>/dev/null
  wait "$survivor" 2>/dev/null
  if [ $gone -eq 1 ] && daemon_alive a && daemon_alive b; then
    pass "$name: kill -9 of the $victim: its peer ended in $ms ms; both daemons run"
  else
    fail "$name: after kill -9 of the $victim the peer ran on ($ms ms), or a daemon died"
    show "$TMP/$name.server.log"; show "$TMP/$name.client.log"
    kill -KILL "$survivor" 2>/dev/null
  fi
}

case_kill_client() {
  kill_one kill-client client
  kill_one kill-server server
  rping_pair kill-next-run IN_B IN_A "$IP_B" "$IP_B" 7477 20
}

case_hostile() {
  # A legitimate transfer, then the hostile client beside it, as nobody.
  start_bg "$TMP/hostile-victim.server.log" "${IN_B[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -s -a "$IP_B" -p 7478 -V -C 400
  local spid=$BG
  log_wait "$TMP/hostile-victim.server.log" "listening on port" 3 "$spid"
  start_bg "$TMP/hostile-victim.client.log" "${IN_A[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -c -a "$IP_B" -p 7478 -V -C 400 -v
  local cpid=$BG
  log_wait "$TMP/hostile-victim.client.log" RDMA_CM_EVENT_ESTABLISHED 5 "$cpid"
  sleep 0.2  # mid-transfer
  local vqpn
  vqpn=$("${UROCE[@]}" qp --socket "$SOCK_A" --json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(next(q["qpn"] for c in d["clients"] for q in c["qps"] if q["type"]=="RC"))' 2>/dev/null)
  [ -n "$vqpn" ] || vqpn=1234
  "${AS_NOBODY_A[@]}" "$HOSTILE" "$SOCK_A" "$IP_A" "$IP_B" "$vqpn" >"$TMP/hostile.log" 2>&1
  local hrc=$?
  wait "$cpid"; local crc=$?
  wait "$spid"; local src=$?
  if [ $hrc -eq 0 ]; then
    pass "hostile: every forgery refused and counted, garbage dropped, the client ended for its ring"
  else
    fail "hostile: hostile_client exit $hrc"
    show "$TMP/hostile.log"
  fi
  if [ $crc -eq 0 ] && [ $src -eq 0 ] && want "$TMP/hostile-victim.client.log" 'rdma-ping-399:' && daemon_alive a; then
    pass "hostile: the legitimate rping beside it verified its 400 pings; the daemon runs"
  else
    fail "hostile: the victim's rping (client exit $crc, server exit $src) or the daemon suffered"
    show "$TMP/hostile-victim.client.log"
  fi
}

case_restart() {
  # A client holding a device when the daemon stops.
  start_bg "$TMP/fatal.log" "${IN_A[@]}" "$SCRIPTS/uroce-run" --build "$BUILD" "$FATAL_WATCH" "$IP_A"
  local fpid=$BG i
  for i in $(seq 100); do grep -q '^ready' "$TMP/fatal.log" && break; sleep 0.1; done
  daemon_down a TERM
  wait "$fpid"
  local frc=$?
  if [ $frc -eq 0 ]; then
    pass "restart: the daemon stopped under a client: $(grep -c 'event' "$TMP/fatal.log") events, DEVICE_FATAL, DEVICE_REMOVAL, flush"
  else
    fail "restart: fatal_watch exit $frc"
    show "$TMP/fatal.log"
  fi
  daemon_up a "$NS_A" "$DEVARGS_A" "$SOCK_A" "$TMP/uroced-a2.log" || { fail "uroced did not start again"; return; }
  # A transfer when the daemon is killed outright: the program ends.
  start_bg "$TMP/kill9d.server.log" "${IN_B[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -s -a "$IP_B" -p 7479 -C 0
  local spid=$BG
  log_wait "$TMP/kill9d.server.log" "listening on port" 3 "$spid"
  start_bg "$TMP/kill9d.client.log" "${IN_A[@]}" UROCE_TRACE=conn timeout $T "${RUN[@]}" rping -c -a "$IP_B" -p 7479 -C 0
  local cpid=$BG
  log_wait "$TMP/kill9d.client.log" RDMA_CM_EVENT_ESTABLISHED 5 "$cpid"
  sleep 0.5  # mid-transfer
  daemon_down a KILL
  local gone=0
  for i in $(seq 250); do kill -0 "$cpid" 2>/dev/null || { gone=1; break; }; sleep 0.02; done
  if [ $gone -eq 1 ]; then
    pass "restart: a client mid-transfer when its daemon was killed ended in $((i * 20)) ms"
  else
    fail "restart: the client ran on 5 s after its daemon was killed"
    show "$TMP/kill9d.client.log"
    kill -KILL "$cpid" 2>/dev/null
  fi
  kill -KILL "$spid" 2>/dev/null
  wait "$cpid" "$spid" 2>/dev/null
  daemon_up a "$NS_A" "$DEVARGS_A" "$SOCK_A" "$TMP/uroced-a3.log" || { fail "uroced did not start a third time"; return; }
  rping_pair restart-next-run IN_A IN_A "$IP_A" "$IP_A" 7480 20
}

# engine_counter SOCK NAME: the daemon's engine counter NAME (daemon-stats --json)
engine_counter() {
  "${UROCE[@]}" daemon-stats --socket "$1" --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["engine"][sys.argv[1]])' "$2" 2>/dev/null
}

case_polling() {
  local s0 s1 b0 b1
  # Idle: the engine sleeps until its next timer, at most
  # params::kIdleWaitMaxNs (10 ms): about 230 sleeps in 2 s (the 10 ms
  # bound and the daemon's own timers), where a wake-up per level-0 turn
  # of the timer wheel (256 us) made ~7800.
  s0=$(engine_counter "$SOCK_A" idle_sleeps)
  sleep 2
  s1=$(engine_counter "$SOCK_A" idle_sleeps)
  if [ -n "$s0" ] && [ -n "$s1" ] && [ $((s1 - s0)) -lt 600 ]; then
    pass "polling: the idle daemon woke $((s1 - s0)) times in 2 s"
  else
    fail "polling: the idle daemon woke ${s0:-?} -> ${s1:-?} times in 2 s (expected fewer than 600)"
  fi
  b0=$(engine_counter "$SOCK_A" busy_polls)
  perftest_pair polling-send-lat IN_B IN_A "$IP_B" 19010 ib_send_lat -n 2000
  b1=$(engine_counter "$SOCK_A" busy_polls)
  if [ -n "$b0" ] && [ -n "$b1" ] && [ "$b1" -gt "$b0" ]; then
    pass "polling: the daemon polled for its spinning client ($((b1 - b0)) idle turns)"
  else
    fail "polling: busy_polls ${b0:-?} -> ${b1:-?} across ib_send_lat (expected it to grow)"
  fi
  daemon_down a
  daemon_up a "$NS_A" "$DEVARGS_A" "$SOCK_A" "$TMP/uroced-a-nopoll.log" --no-busy-poll || { fail "uroced --no-busy-poll"; start_daemons_a; return; }
  perftest_pair polling-off-send-lat IN_B IN_A "$IP_B" 19011 ib_send_lat -n 2000
  b1=$(engine_counter "$SOCK_A" busy_polls)
  if [ "$b1" = 0 ]; then
    pass "polling: with --no-busy-poll the daemon never polled"
  else
    fail "polling: with --no-busy-poll busy_polls is ${b1:-?}"
  fi
  daemon_down a
  # Daemons in sessions of their own, as systemd starts them: the programs
  # are another scheduling group, busy polling's sched_yield would not
  # hand them the CPU, and the daemons must not poll (a polling daemon
  # then went without its CPU for up to 0.5 s, and this ib_send_lat ended
  # in RETRY_EXC_ERR in most runs).
  daemon_down b
  DAEMON_OWN_SESSION=1 daemon_up a "$NS_A" "$DEVARGS_A" "$SOCK_A" "$TMP/uroced-a-session.log" ||
    { fail "uroced in a session of its own"; start_daemons; return; }
  DAEMON_OWN_SESSION=1 daemon_up b "$NS_B" "$DEVARGS_B" "$SOCK_B" "$TMP/uroced-b-session.log" ||
    { fail "uroced in a session of its own"; daemon_down a; start_daemons; return; }
  local name=own-session-send-lat port=19020 crc spid
  start_bg "$TMP/$name.server.log" "${IN_B[@]}" timeout $T "${RUN[@]}" ib_send_lat -x 0 -F -n 20000 -p $port
  spid=$BG
  log_wait "$TMP/$name.server.log" "Waiting for client" 3 "$spid"
  "${IN_A[@]}" timeout $T "${RUN[@]}" ib_send_lat -x 0 -F -n 20000 -p $port "$IP_B" >"$TMP/$name.client.log" 2>&1
  crc=$?
  wait "$spid"
  perftest_result "$name" $crc $? ": 20000 round trips at ACK timeout 14"
  b1=$(engine_counter "$SOCK_A" busy_polls)
  if [ "$b1" = 0 ] && grep -q 'is ib_send_lat' "$TMP/uroced-a-session.log" &&
      ! grep -q 'our scheduling group' "$TMP/uroced-a-session.log"; then
    pass "polling: a daemon in a session of its own never polled for a program of another group"
  else
    fail "polling: a daemon in a session of its own: busy_polls ${b1:-?}"
    show "$TMP/uroced-a-session.log"
  fi
  daemon_down a
  daemon_down b
  start_daemons
}
case_fork() {
  local log=$TMP/fork.log
  if "${IN_A[@]}" timeout $T "${RUN[@]}" "$FORK_PAIR" "$IP_A" 7481 >"$log" 2>&1 && want "$log" '^fork_pair: ok'; then
    pass "fork: two children of one parent connect through rdma_cm, the parent's device still works"
  else
    fail "fork: through uroced"
    show "$log"
  fi
  log=$TMP/fork-in-process.log
  if ip netns exec "$NS_B" timeout $T "${RUN[@]}" --config "$CONFIG" --device net_null0 --ip 10.99.0.1/24 \
      "$FORK_PAIR" --in-process >"$log" 2>&1 && want "$log" '^fork_pair: ok' &&
      want "$log" 'child of one whose uroce devices are in-process'; then
    pass "fork: a child of an in-process parent has no device, and is told why"
  else
    fail "fork: in-process"
    show "$log"
  fi
}

case_term_signal() {
  local log=$TMP/term-signal.log
  if "${IN_A[@]}" timeout $T "${RUN[@]}" "$TERM_SIGNAL" >"$log" 2>&1 && want "$log" '^\[  PASSED  \] [1-9][0-9]* tests'; then
    pass "term-signal: $(grep -c '^\[       OK' "$log") cases through uroced: clients end by the signal, unseen"
  else
    fail "term-signal: through uroced"
    show "$log"
  fi
}

case_sysfs() {
  local iface=${DEVARGS_A##*iface=} iface_b=${DEVARGS_B##*iface=}
  iface=${iface%%,*} iface_b=${iface_b%%,*}
  local log=$TMP/sysfs.log
  if "${IN_A[@]}" timeout $T "${RUN[@]}" --sysfs sh -c 'ls /sys/class/infiniband/uroce0/device/net; cat /sys/class/infiniband/uroce0/ports/1/link_layer; ls /sys/class/net' >"$log" 2>&1 &&
      want "$log" "^$iface\$" && want "$log" '^Ethernet$' && want "$log" '^lo$' && [ ! -e /sys/class/infiniband/uroce0 ]; then
    pass "sysfs: through uroced the program finds the device's netdev ($iface), the host's /sys is unchanged"
  else
    fail "sysfs: through uroced"
    show "$log"
  fi
  log=$TMP/sysfs-in-process.log
  if ip netns exec "$NS_B" timeout $T "${RUN[@]}" --config "$CONFIG" --device "$DEVARGS_B" --sysfs \
      sh -c 'ls /sys/class/infiniband/uroce0/device/net' >"$log" 2>&1 && want "$log" "^$iface_b\$"; then
    pass "sysfs: an in-process af_packet device's netdev"
  else
    fail "sysfs: in-process"
    show "$log"
  fi
}

start_daemons_a() {
  daemon_up a "$NS_A" "$DEVARGS_A" "$SOCK_A" "$TMP/uroced-a-polled.log" || { fail "uroced in $NS_A again"; exit 1; }
}

CASES=(same_ns pairs non_root tools kill_client hostile polling fork term_signal sysfs restart)
echo "daemon: work in $TMP"
for c in "${CASES[@]}"; do
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | tr - _ | grep -qx -- "$c"; then continue; fi
  "case_$c"
done
if [ $failed -eq 0 ]; then
  echo "daemon: all checks passed"
  exit 0
fi
echo "daemon: $failed checks failed"
exit 1
