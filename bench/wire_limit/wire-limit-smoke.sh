#!/usr/bin/env bash
# Smoke test of uroce-wire-limit (meson suite 'wire'): pong and ping over
# memif between two processes, 1000 round trips; passes when ping reports
# a positive median RTT.  Exit 77 (skip) when not root.
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
memif="socket=$dir/memif.sock,socket-abstract=no"

"$bin" --mode=pong --vdev="net_memif0,role=server,$memif" --core="$pong_core" \
  --seconds="$MAX_SECONDS" --json >"$dir/pong.json" 2>"$dir/pong.err" &
pong_pid=$!
for _ in $(seq "$SOCKET_WAIT_TENTHS"); do
  [ -S "$dir/memif.sock" ] && break
  kill -0 "$pong_pid" 2>/dev/null || break
  sleep 0.1
done

status=0
"$bin" --mode=ping --vdev="net_memif0,role=client,$memif" --core=0 \
  --count="$ROUND_TRIPS" --warmup="$WARMUP" --seconds="$MAX_SECONDS" --json >"$dir/ping.json" 2>"$dir/ping.err" ||
  status=$?
wait "$pong_pid" || echo "pong exited with $?"
pong_pid=""

if [ "$status" -ne 0 ]; then
  echo "FAIL: ping exited with $status"
  cat "$dir/ping.err" "$dir/pong.err" >&2
  exit 1
fi
line=$(grep '^{' "$dir/ping.json" | tail -n 1)
echo "$line"
python3 - "$line" "$ROUND_TRIPS" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
want = int(sys.argv[2])
done = r["attempts"]
assert done == want, f"{done} of {want} round trips attempted"
assert r["rtt_ns"]["median"] > 0, "median RTT is not positive"
print(f"PASS: {r['round_trips']} round trips, median {r['rtt_ns']['median']:.0f} ns, lost {r['lost']}")
PY
