#!/usr/bin/env bash
# Unmodified Debian libfabric (libfabric-bin 1.17) over the drop-ins: its
# verbs provider finds the uroce device (fi_info) and fi_pingpong runs
# between two network namespaces (scripts/netns-up --veth, one
# net_af_packet port each) on each endpoint type the provider offers:
# connected (verbs, FI_EP_MSG), reliable datagram (verbs;ofi_rxm, FI_EP_RDM,
# whose large messages go by RDMA READ) and datagram (verbs, FI_EP_DGRAM).
# fi_pingpong is given no local address: the provider binds "localhost"
# and, as on Linux's rdma_cm, gets no device from it and takes the
# device's own address instead.
#
#   libfabric_apps_test.sh SHIM_BUILD_DIR SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip (not root, libfabric-bin not installed).
set -u

readonly CTRL_PORT=47592  # fi_pingpong's out-of-band TCP port (its default)
[ $# -ge 2 ] || { echo "usage: $0 SHIM_BUILD_DIR SCRIPTS_DIR" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2
# shellcheck source=veth_pair_lib.sh
. "$(dirname "$0")/veth_pair_lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
command -v fi_pingpong >/dev/null && command -v fi_info >/dev/null ||
  skip "needs fi_pingpong and fi_info (libfabric-bin; scripts/setup installs it)"

veth_pair_init lf libfabric
veth_pair_up

# fi_info: the provider lists the device for all three endpoint types.
total=$((total + 1))
ip netns exec "$NS_A" env UROCE_DEVICE="$DEVARGS_A" timeout 60 "${RUN[@]}" fi_info -p verbs >"$TMP/fi_info.log" 2>&1
rc=$?
missing=
for want in "FI_EP_MSG" "FI_EP_RDM" "FI_EP_DGRAM" "domain: uroce0"; do
  grep -q "$want" "$TMP/fi_info.log" || missing="$missing '$want'"
done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then
  echo "PASS fi_info: verbs lists uroce0 for MSG, RDM and DGRAM endpoints"
else
  fail fi_info "exit $rc, missing$missing" "$TMP/fi_info.log"
fi

# name | provider | endpoint | the largest size whose row must appear
CASES=(
  "msg|verbs|msg|1m"
  "rdm|verbs;ofi_rxm|rdm|1m"
  "dgram|verbs|dgram|1k"
)
for entry in "${CASES[@]}"; do
  IFS='|' read -r name prov ep last <<<"$entry"
  total=$((total + 1))
  SERVER_CMD=(fi_pingpong -p "$prov" -e "$ep" -I 100)
  CLIENT_CMD=("${SERVER_CMD[@]}" "$IP_B")
  run_pair "$name" "$CTRL_PORT" 60
  # A row: size, 100 sent, =100 acknowledged.
  row="^$last +100 +=100 "
  if [ $CRC -eq 0 ] && [ $SRC -eq 0 ] && grep -qE "$row" "$TMP/$name.client.log" &&
    grep -qE "$row" "$TMP/$name.server.log"; then
    echo "PASS $name ($prov): $(grep -E "$row" "$TMP/$name.client.log" | tr -s ' ')"
  else
    fail "$name" "client exit $CRC, server exit $SRC" "$TMP/$name.client.log" "$TMP/$name.server.log"
  fi
done

if [ $failed -eq 0 ]; then
  echo "apps-libfabric: all $total passed"
  exit 0
fi
echo "apps-libfabric: $failed of $total failed"
exit 1
