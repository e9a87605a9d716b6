#!/usr/bin/env bash
# Smoke test of uroce-wire-limit (meson suite 'wire'): pong and ping over
# memif between two processes, 1000 round trips, plainly and through a
# relay thread at each end (--relay); passes when ping reports a positive
# median RTT and, with the relays, every frame crossed them.  Then tx and
# rx streaming both ways at once (--duplex).  Exit 77
# (skip) when not root.
# Usage: wire-limit-smoke.sh <path to uroce-wire-limit>
set -euo pipefail

readonly ROUND_TRIPS=1000
readonly WARMUP=100
readonly MAX_SECONDS=20
readonly SOCKET_WAIT_TENTHS=50

bin=${1:?usage: wire-limit-smoke.sh <uroce-wire-limit>}
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: needs root (DPDK EAL and memif sockets)"
  exit 77
fi

dir=$(mktemp -d /tmp/uroce-wl-smoke.XXXXXX)
pong_pid=""
cleanup() {
  if [ -n "$pong_pid" ] && kill -0 "$pong_pid" 2>/dev/null; then
    kill "$pong_pid" 2>/dev/null || true
    wait "$pong_pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

# Two CPUs: one each.  One CPU: both share it (slow, still correct).
pong_core=0
[ "$(nproc)" -gt 1 ] && pong_core=1
# start_server NAME MODE [ARGS...]: the memif server end of pair NAME in
# the background (pong_pid), its output in $dir/NAME-MODE.{json,err};
# returns once its socket is there (or it died).
start_server() {
  local name=$1 mode=$2
  shift 2
  "$bin" --mode="$mode" --vdev="net_memif0,role=server,socket=$dir/$name.sock,socket-abstract=no" \
    --core="$pong_core" --seconds="$MAX_SECONDS" "$@" --json >"$dir/$name-$mode.json" 2>"$dir/$name-$mode.err" &
  pong_pid=$!
  for _ in $(seq "$SOCKET_WAIT_TENTHS"); do
    [ -S "$dir/$name.sock" ] && break
    kill -0 "$pong_pid" 2>/dev/null || break
    sleep 0.1
  done
}

# run_client NAME MODE SERVER_MODE [ARGS...]: the client end of pair NAME,
# output in $dir/NAME-MODE.{json,err}, then waits for the server; fails
# (saying why) when the client did.
run_client() {
  local name=$1 mode=$2 server=$3 status=0
  shift 3
  "$bin" --mode="$mode" --vdev="net_memif0,role=client,socket=$dir/$name.sock,socket-abstract=no" --core=0 \
    "$@" --json >"$dir/$name-$mode.json" 2>"$dir/$name-$mode.err" || status=$?
  wait "$pong_pid" || echo "$name: $server exited with $?"
  pong_pid=""
  if [ "$status" -ne 0 ]; then
    echo "FAIL: $name: $mode exited with $status"
    cat "$dir/$name-$mode.err" "$dir/$name-$server.err" >&2
    return 1
  fi
}

# run_pair NAME [ARGS...]: pong, then ping, both with ARGS, over a memif
# socket of their own; checks ping's report (and with --relay both relays').
run_pair() {
  local name=$1
  shift
  start_server "$name" pong "$@"
  run_client "$name" ping pong --count="$ROUND_TRIPS" --warmup="$WARMUP" --seconds="$MAX_SECONDS" "$@" || return 1
  local ping pong
  ping=$(grep '^{' "$dir/$name-ping.json" | tail -n 1)
  pong=$(grep '^{' "$dir/$name-pong.json" | tail -n 1)
  echo "$ping"
  python3 - "$name" "$ping" "$pong" "$ROUND_TRIPS" "$WARMUP" <<'PY'
import json, sys
name, ping, pong = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
want, warmup = int(sys.argv[4]), int(sys.argv[5])
assert ping["attempts"] == want, f"{name}: {ping['attempts']} of {want} round trips attempted"
assert ping["rtt_ns"]["median"] > 0, f"{name}: median RTT is not positive"
if name == "relay":
    # Every request and reply crossed each end's relay, both ways.
    for end, r in (("ping", ping), ("pong", pong)):
        relay = r["relay"]
        assert relay is not None, f"relay: {end} ran without its relay"
        assert relay["dropped"] == 0, f"relay: {end}'s relay dropped {relay['dropped']}"
    answered = ping["round_trips"] + warmup
    assert ping["relay"]["to_wire"] >= want + warmup, f"relay: ping's relay sent {ping['relay']['to_wire']}"
    assert ping["relay"]["from_wire"] >= answered, f"relay: ping's relay passed {ping['relay']['from_wire']}"
    assert pong["relay"]["from_wire"] >= pong["echoed"], f"relay: pong echoed more than its relay passed"
    assert pong["relay"]["to_wire"] >= pong["echoed"], f"relay: pong's relay sent {pong['relay']['to_wire']}"
else:
    assert ping["relay"] is None and pong["relay"] is None, f"{name}: a relay ran unasked"
print(f"PASS: {name}: {ping['round_trips']} round trips, median {ping['rtt_ns']['median']:.0f} ns, lost {ping['lost']}")
PY
}

# Both ends streaming at once (--duplex): each must receive the other's
# stream, and never more than the other says it sent.
run_duplex() {
  start_server duplex rx --duplex
  run_client duplex tx rx --duplex --seconds=1 || return 1
  python3 - "$(grep '^{' "$dir/duplex-tx.json" | tail -n 1)" "$(grep '^{' "$dir/duplex-rx.json" | tail -n 1)" <<'PY'
import json, sys
tx, rx = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert rx["done"], "duplex: the rx end never heard done"
assert rx["frames_received"] > 0 and tx["duplex_received"] > 0, f"duplex: a direction carried nothing: {tx} {rx}"
assert rx["frames_received"] <= tx["frames_sent"], "duplex: rx counted more than tx sent"
assert tx["duplex_received"] <= rx["duplex_sent"], "duplex: tx counted more than rx sent"
assert tx["duplex_rx_frames_per_s"] > 0 and rx["duplex_tx_frames_per_s"] > 0, "duplex: no rate"
print(f"PASS: duplex: {rx['frames_received']} frames one way, {tx['duplex_received']} the other")
PY
}

run_pair plain
run_pair relay --relay
run_duplex
