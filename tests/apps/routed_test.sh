#!/usr/bin/env bash
# RoCE through routers (issue 42): uroce reaches a peer behind a gateway as
# rxe does (the kernel's route through the port's interface names the next
# hop, whose MAC carries the frames), and on two equal-cost routed paths a
# congested QP moves to the other one.
#
#   routed     ibv_rc_pingpong and ib_write_bw between two hosts on
#              different subnets, two routers apart (bench/multipath/run's
#              wire: S - R1 = two links = R2 - D, ECMP on L4 at R1), with
#              no proxy ARP anywhere: both exit 0 with their reports
#   uroce qp   mid-transfer, both ends' QPs in-process (telemetry): the
#              sender's in RTS with a round trip and a RoCEv2 source port,
#              the two QPs each other's destination
#   repath     bench/multipath/run, short: once the link the QP uses turns
#              congested (a shaped, ECN-marking port), with repath on the
#              QP's data leaves it (at most half the quarter-second samples
#              after the turn on it, the last second wholly on the other
#              link); with repath off it stays on it throughout
#   spray      bench/multipath/run --spray, short: both links congested,
#              both ends with selective repeat; with one UDP source port
#              the QP's data takes one link (at least 95% of the bytes),
#              sprayed over 64 ports both (each at least 20%), and
#              requests went out on other ports than the QP's own
#
#   routed_test.sh SHIM_BUILD_DIR SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip (not root; no perftest, clang, tc; a kernel
# without multipath routes).
set -u

readonly EXIT_SKIP=77
readonly RUN_TIMEOUT_S=60
[ $# -eq 2 ] || { echo "usage: $0 SHIM_BUILD_DIR SCRIPTS_DIR" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2
ROOT=$(cd "$SCRIPTS/.." && pwd)

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
for p in ibv_rc_pingpong ib_write_bw clang tc; do
  command -v $p >/dev/null || skip "needs $p (scripts/setup installs it)"
done

P=$(printf 'rt%x' $$)
NS_S=$P-s NS_R1=$P-r1 NS_R2=$P-r2 NS_D=$P-d
N=10.$((RANDOM % 200 + 20))
TMP=$(mktemp -d /tmp/uroce-routed.XXXXXX)
: >"$TMP/empty.toml"
RUN=("$SCRIPTS/uroce-run" --build "$BUILD" --config "$TMP/empty.toml")
failed=0
cleanup() {
  jobs -p | xargs -r kill 2>/dev/null
  wait 2>/dev/null
  for ns in "$NS_S" "$NS_D" "$NS_R1" "$NS_R2"; do ip netns del "$ns" 2>/dev/null; done
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=1; }

link() {
  ip link add "$2" netns "$1" type veth peer name "$5" netns "$4" &&
    ip -n "$1" addr add "$3" dev "$2" && ip -n "$4" addr add "$6" dev "$5" &&
    ip -n "$1" link set "$2" up && ip -n "$4" link set "$5" up
}
wire_up() {
  for ns in "$NS_S" "$NS_R1" "$NS_R2" "$NS_D"; do ip netns add "$ns" && ip -n "$ns" link set lo up || return 1; done
  link "$NS_S" v0 "$N.1.2/24" "$NS_R1" s0 "$N.1.1/24" &&
    link "$NS_R1" l1 "$N.2.1/24" "$NS_R2" l1 "$N.2.2/24" &&
    link "$NS_R1" l2 "$N.3.1/24" "$NS_R2" l2 "$N.3.2/24" &&
    link "$NS_R2" d0 "$N.4.1/24" "$NS_D" v0 "$N.4.2/24" || return 1
  for r in "$NS_R1" "$NS_R2"; do
    ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1 \
      net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 || return 1
  done
  ip -n "$NS_R1" route add "$N.4.0/24" nexthop via "$N.2.2" dev l1 nexthop via "$N.3.2" dev l2 &&
    ip -n "$NS_R2" route add "$N.1.0/24" nexthop via "$N.2.1" dev l1 nexthop via "$N.3.1" dev l2 &&
    ip -n "$NS_S" route add default via "$N.1.1" && ip -n "$NS_D" route add default via "$N.4.1" || return 1
  ip netns exec "$NS_S" sysctl -qw net.ipv6.conf.v0.disable_ipv6=1 &&
    ip netns exec "$NS_D" sysctl -qw net.ipv6.conf.v0.disable_ipv6=1
}
if ! wire_up >"$TMP/wire.log" 2>&1; then
  grep -qi "nexthop\|multipath" "$TMP/wire.log" && skip "this kernel cannot route over several next hops"
  fail "could not build the routed wire"
  cat "$TMP/wire.log"
  exit 1
fi

# start_end NS LOG PROGRAM...: PROGRAM in NS through its own af_packet
# device, in the background ($! is its pid).
start_end() {
  local ns=$1 log=$2
  shift 2
  ip netns exec "$ns" env UROCE_DEVICE="net_af_packet0,iface=v0" timeout $RUN_TIMEOUT_S "${RUN[@]}" "$@" >"$log" 2>&1 &
}

# pair NAME SERVER_CMD... -- CLIENT_CMD...: the server in D, the client in
# S (given D's address last); both must exit 0.
pair() {
  local name=$1
  shift
  local server=() client=()
  while [ "$1" != "--" ]; do server+=("$1"); shift; done
  shift
  client=("$@")
  start_end "$NS_D" "$TMP/$name.server.log" "${server[@]}"
  local spid=$!
  sleep 2
  start_end "$NS_S" "$TMP/$name.client.log" "${client[@]}" "$N.4.2"
  local cpid=$!
  wait $cpid
  local crc=$?
  wait $spid
  local src=$?
  [ $crc -eq 0 ] && [ $src -eq 0 ]
}

# ---- routed: a peer two routers away ----
if pair pingpong ibv_rc_pingpong -g 0 -n 200 -- ibv_rc_pingpong -g 0 -n 200 &&
  grep -q "200 iters" "$TMP/pingpong.client.log"; then
  pass "routed: ibv_rc_pingpong through two routers, no proxy ARP (the gateway's MAC)"
else
  fail "routed: ibv_rc_pingpong"
  tail -5 "$TMP/pingpong.client.log" "$TMP/pingpong.server.log"
fi
port=$((18000 + RANDOM % 1000))
if pair writebw ib_write_bw -d uroce0 -x 0 -F -s 65536 -D 2 -p $port -- ib_write_bw -d uroce0 -x 0 -F -s 65536 -D 2 -p $port &&
  grep -qE "^ *65536 +[0-9]+" "$TMP/writebw.client.log"; then
  pass "routed: ib_write_bw through two routers"
else
  fail "routed: ib_write_bw"
  tail -5 "$TMP/writebw.client.log" "$TMP/writebw.server.log"
fi

# ---- uroce qp: the in-process QPs of both ends, mid-transfer ----
port=$((18000 + RANDOM % 1000))
start_end "$NS_D" "$TMP/qp.server.log" ib_write_bw -d uroce0 -x 0 -F -s 65536 -D 4 -p $port
qspid=$!
sleep 2
start_end "$NS_S" "$TMP/qp.client.log" ib_write_bw -d uroce0 -x 0 -F -s 65536 -D 4 -p $port "$N.4.2"
qcpid=$!
sleep 2.5
"$BUILD/tools/uroce" qp --json >"$TMP/qp.json" 2>"$TMP/qp.err"
"$BUILD/tools/uroce" qp >"$TMP/qp.txt" 2>&1
wait $qcpid $qspid
if python3 - "$TMP/qp.json" "$N" >"$TMP/qp.check" 2>&1 <<'PY'; then
import json, sys
doc, net = json.load(open(sys.argv[1])), sys.argv[2]
mine = [c for c in doc["clients"] if c.get("in_process") and c["program"] == "ib_write_bw"]
assert len(mine) == 2, doc
rc = {q["dest_gid"]: q for c in mine for q in c["qps"] if q["type"] == "RC" and q["state"] in ("RTR", "RTS")}
sender = rc[f"{net}.4.2"]   # S's QP, toward D
receiver = rc[f"{net}.1.2"]
assert sender["state"] == "RTS" and sender["srtt_ns"] > 0 and 0xC000 <= sender["udp_sport"] <= 0xFFFF, sender
assert sender["recovery"] == "go-back-N" and sender["rate_bps"] == 0, sender
assert receiver["dest_qpn"] == sender["qpn"] and sender["dest_qpn"] == receiver["qpn"], (sender, receiver)
print(f"uroce qp: both ends' QPs, S's at srtt {sender['srtt_ns'] / 1000:.0f} us on UDP port {sender['udp_sport']}")
PY
  pass "$(cat "$TMP/qp.check")"
else
  fail "uroce qp (in-process)"
  cat "$TMP/qp.check" "$TMP/qp.err" "$TMP/qp.txt"
fi
for ns in "$NS_S" "$NS_D" "$NS_R1" "$NS_R2"; do ip netns del "$ns" 2>/dev/null; done

# ---- repath: the QP leaves a path that turned congested ----
"$ROOT/bench/multipath/run" --build "$BUILD" --warmup 2 --seconds 5 --out "$TMP/mp" >"$TMP/multipath.log" 2>&1
rc=$?
[ $rc -eq $EXIT_SKIP ] && { echo "repath: $(tail -1 "$TMP/multipath.log")"; skip "bench/multipath cannot run here"; }
if [ $rc -ne 0 ] || [ ! -s "$TMP/mp/multipath.csv" ]; then
  fail "repath: bench/multipath/run gave no figures (exit $rc)"
  cat "$TMP/multipath.log"
else
  if python3 - "$TMP/mp/multipath.csv" >"$TMP/repath.check" 2>&1 <<'PY'; then
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def quarters(run):
    q = [r for r in rows if r["repath"] == run]
    assert q, f"no samples for repath {run}"
    bad = q[0]["bad_link"]
    good = "l2" if bad == "l1" else "l1"
    # The bad link was made bad after the warm-up: 2 s + the second the
    # sampling runs ahead of ib_write_bw's first figure (quarter 12).
    after = [r for r in q if int(r["quarter"]) > 12]
    on_bad = [int(r[f"{bad}_bytes"]) > int(r[f"{good}_bytes"]) for r in after]
    return on_bad
on = quarters("on")
share_on = sum(on) / len(on)
assert share_on <= 0.5 and not any(on[-4:]), f"repath on: {share_on:.2f} of the quarters on the bad link, last second {on[-4:]}"
off = quarters("off")
share_off = sum(off) / len(off)
assert share_off >= 0.9, f"repath off: only {share_off:.2f} of the quarters on the bad link (it should stay)"
print(f"repath on: {share_on:.2f} of the quarters after the turn on the bad link; off: {share_off:.2f}")
PY
    pass "repath: $(cat "$TMP/repath.check")"
  else
    fail "repath"
    cat "$TMP/repath.check" "$TMP/mp/multipath.md"
  fi
fi

# ---- spray: one QP's requests over both links ----
"$ROOT/bench/multipath/run" --build "$BUILD" --spray "1 64" --warmup 1 --seconds 3 --red "5 50 20" \
  --cc-tables "$ROOT/bench/incast/slow-link.toml" --out "$TMP/sp" >"$TMP/spray.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$TMP/sp/spray.csv" ]; then
  fail "spray: bench/multipath/run --spray gave no figures (exit $rc)"
  cat "$TMP/spray.log"
elif python3 - "$TMP/sp/spray.csv" "$TMP/sp/spray.md" >"$TMP/spray.check" 2>&1 <<'PY'; then
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def shares(n):
    # After the warm-up second and the second before ib_write_bw's first figure.
    q = [r for r in rows if r["spray_ports"] == n and int(r["quarter"]) > 8]
    assert q, f"no samples for {n} ports"
    a = sum(int(r["l1_bytes"]) for r in q)
    b = sum(int(r["l2_bytes"]) for r in q)
    assert a + b > 0, f"{n} ports: nothing crossed the links"
    return a / (a + b), b / (a + b)
one = shares("1")
assert max(one) >= 0.95, f"one port: the QP's data split {one[0]:.2f} / {one[1]:.2f} (one path expected)"
many = shares("64")
assert min(many) >= 0.2, f"64 ports: the QP's data split {many[0]:.2f} / {many[1]:.2f} (both links expected)"
row = [l for l in open(sys.argv[2]) if l.startswith("| 64 |")]
assert row, "no 64-port row in the report"
sprayed = int(row[0].split("|")[5])
assert sprayed > 0, "no packet counted as sprayed"
print(f"one port {one[0]:.2f} / {one[1]:.2f}, 64 ports {many[0]:.2f} / {many[1]:.2f}, {sprayed} packets sprayed")
PY
  pass "spray: $(cat "$TMP/spray.check")"
else
  fail "spray"
  cat "$TMP/spray.check" "$TMP/sp/spray.md"
fi
exit $failed
