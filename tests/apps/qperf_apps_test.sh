#!/usr/bin/env bash
# Unmodified Debian qperf over the drop-ins, its connections set up by
# rdma_cm (-cm1), server in one network namespace and client in the other
# (scripts/netns-up --veth, one net_af_packet port each).  Every RC test:
# bandwidth both ways, latency of SEND, WRITE and READ, and both atomics.
# qperf's own TCP exchange carries no GID, so without -cm1 it cannot run on
# RoCE at all (on any device); its UD tests with -cm1 create an AH from the
# SIDR event's zeroed ah_attr, which the kernel's rdma_cm leaves zeroed as
# well, so they are not run.
#
#   qperf_apps_test.sh SHIM_BUILD_DIR SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip (not root, qperf not installed).
set -u

readonly EXIT_SKIP=77
[ $# -ge 2 ] || { echo "usage: $0 SHIM_BUILD_DIR SCRIPTS_DIR" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
command -v qperf >/dev/null || skip "needs qperf (scripts/setup installs it)"

PREFIX=$(printf 'qp%x' $$)
TMP=$(mktemp -d /tmp/uroce-qperf.XXXXXX)
failed=0
SPID=
CONFIG=$TMP/empty.toml
: >"$CONFIG"
RUN=("$SCRIPTS/uroce-run" --build "$BUILD" --config "$CONFIG")

cleanup() {
  [ -n "$SPID" ] && kill -TERM "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
  "$SCRIPTS/netns-down" "$PREFIX" >/dev/null 2>&1
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
  [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
  echo "FAIL netns-up"; cat "$TMP/netns.err"; failed=1; exit 1
}
eval "$out"

# The server serves one test after another (each opens the device anew).
ip netns exec "$NS_B" env UROCE_DEVICE="$DEVARGS_B" timeout 300 "${RUN[@]}" qperf >"$TMP/server.log" 2>&1 &
SPID=$!
sleep 2

# test | what its result line starts with
TESTS=(
  "rc_bw|bw +="
  "rc_bi_bw|bw +="
  "rc_lat|latency +="
  "rc_rdma_write_bw|bw +="
  "rc_rdma_write_lat|latency +="
  "rc_rdma_read_bw|bw +="
  "rc_rdma_read_lat|latency +="
  "rc_compare_swap_mr|msg_rate +="
  "rc_fetch_add_mr|msg_rate +="
)
for entry in "${TESTS[@]}"; do
  IFS='|' read -r name want <<<"$entry"
  ip netns exec "$NS_A" env UROCE_DEVICE="$DEVARGS_A" timeout 60 "${RUN[@]}" qperf -cm1 -t 1 "$IP_B" "$name" \
    >"$TMP/$name.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -qE "^ *$want" "$TMP/$name.log"; then
    echo "PASS $name: $(grep -E "^ *$want" "$TMP/$name.log" | tr -s ' ')"
  else
    echo "FAIL $name: exit $rc"
    sed 's/^/    /' "$TMP/$name.log" | grep -v TELEMETRY | head -20
    failed=$((failed + 1))
  fi
done
if [ $failed -eq 0 ]; then
  echo "apps-qperf: all ${#TESTS[@]} tests passed"
  exit 0
fi
echo "apps-qperf: $failed of ${#TESTS[@]} failed"
exit 1
