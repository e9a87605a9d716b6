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

[ $# -ge 2 ] || { echo "usage: $0 SHIM_BUILD_DIR SCRIPTS_DIR" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2
# shellcheck source=veth_pair_lib.sh
. "$(dirname "$0")/veth_pair_lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
command -v qperf >/dev/null || skip "needs qperf (scripts/setup installs it)"

veth_pair_init qp qperf
veth_pair_up

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
    sed 's/^/    /' "$TMP/$name.log" | head -20
    failed=$((failed + 1))
  fi
done
if [ $failed -eq 0 ]; then
  echo "apps-qperf: all ${#TESTS[@]} tests passed"
  exit 0
fi
echo "apps-qperf: $failed of ${#TESTS[@]} failed"
exit 1
