#!/usr/bin/env bash
# Unmodified Debian UCX 1.13 (ucx-utils) over the drop-ins: ucx_info lists
# uroce0 for rc_verbs and ud_verbs, and ucx_perftest runs between two
# network namespaces (scripts/netns-up --veth, one net_af_packet port each):
# UCT tests on each transport and UCP tests with UCX_TLS=rc (rc_verbs, with
# ud_verbs for wire-up) and UCX_TLS=ud_verbs.
# UCX lists a verbs device only when /dev/infiniband/<dev_name> is a
# character device it may open (lib/util/devnode.hpp): nobody makes it by
# hand here. The test removes uroce's nodes if some are there, so that the
# drop-in (root) must make them itself, and puts back what it found.
#
#   ucx_apps_test.sh SHIM_BUILD_DIR SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip (not root, ucx-utils not installed).
set -u

readonly CTRL_PORT=13337  # ucx_perftest's out-of-band TCP port (its default)
[ $# -ge 2 ] || { echo "usage: $0 SHIM_BUILD_DIR SCRIPTS_DIR" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2
UROCE=$BUILD/tools/uroce
# shellcheck source=veth_pair_lib.sh
. "$(dirname "$0")/veth_pair_lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces, device nodes)"
command -v ucx_perftest >/dev/null && command -v ucx_info >/dev/null ||
  skip "needs ucx_perftest and ucx_info (ucx-utils; scripts/setup installs it)"
[ -x "$UROCE" ] || { echo "FAIL: $UROCE not built"; exit 1; }

veth_pair_init ux ucx
FAIL_LOG_DROP='^[|+]'  # ucx_perftest's table
HAD_NODES=0
[ -c /dev/infiniband/uroce-uverbs0 ] && HAD_NODES=1
veth_pair_cleanup_extra() {
  if [ $HAD_NODES -eq 1 ]; then "$UROCE" devnode >/dev/null; else "$UROCE" devnode --remove; fi
}
"$UROCE" devnode --remove || { echo "FAIL: uroce devnode --remove"; failed=1; exit 1; }

veth_pair_up

total=$((total + 1))
ip netns exec "$NS_A" env UROCE_DEVICE="$DEVARGS_A" timeout 60 "${RUN[@]}" ucx_info -d >"$TMP/ucx_info.log" 2>&1
rc=$?
missing=
for tl in rc_verbs ud_verbs; do
  grep -A1 -E "Transport: $tl\$" "$TMP/ucx_info.log" | grep -q "Device: uroce0:1" || missing="$missing $tl"
done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then
  echo "PASS ucx_info: rc_verbs and ud_verbs on uroce0:1, no device node made by hand"
else
  fail ucx_info "exit $rc, missing:$missing" "$TMP/ucx_info.log"
fi

# name | UCX_TLS (UCP tests; '-' for UCT) | ucx_perftest arguments
CASES=(
  "uct-rc-am_lat|-|-t am_lat -d uroce0:1 -x rc_verbs -n 2000"
  "uct-rc-put_lat|-|-t put_lat -d uroce0:1 -x rc_verbs -n 2000"
  "uct-rc-am_bw|-|-t am_bw -d uroce0:1 -x rc_verbs -n 10000"
  "uct-rc-put_bw-64k|-|-t put_bw -d uroce0:1 -x rc_verbs -D zcopy -s 65536 -n 500"
  "uct-rc-get-64k|-|-t get -d uroce0:1 -x rc_verbs -D zcopy -s 65536 -n 500"
  "uct-rc-fadd|-|-t fadd -d uroce0:1 -x rc_verbs -n 2000"
  "uct-ud-am_lat|-|-t am_lat -d uroce0:1 -x ud_verbs -n 2000"
  "uct-ud-am_bw|-|-t am_bw -d uroce0:1 -x ud_verbs -n 10000"
  "ucp-rc-tag_lat|rc|-t tag_lat -n 2000"
  "ucp-rc-tag_bw-64k|rc|-t tag_bw -s 65536 -n 500"
  "ucp-rc-put_bw-64k|rc|-t ucp_put_bw -s 65536 -n 500"
  "ucp-ud-tag_lat|ud_verbs|-t tag_lat -n 2000"
  "ucp-ud-tag_bw-64k|ud_verbs|-t tag_bw -s 65536 -n 200"
)
for entry in "${CASES[@]}"; do
  IFS='|' read -r name tls args <<<"$entry"
  total=$((total + 1))
  PAIR_ENV=()
  [ "$tls" != "-" ] && PAIR_ENV=(UCX_TLS="$tls" UCX_NET_DEVICES=uroce0:1)
  SERVER_CMD=(ucx_perftest)
  # shellcheck disable=SC2206  # $args is a list of arguments
  CLIENT_CMD=(ucx_perftest $args "$IP_B")
  run_pair "$name" "$CTRL_PORT" 90
  if [ $CRC -eq 0 ] && [ $SRC -eq 0 ] && grep -qE "^Final: +[0-9]+ " "$TMP/$name.client.log"; then
    echo "PASS $name: $(grep -E '^Final:' "$TMP/$name.client.log" | tr -s ' ')"
  else
    fail "$name" "client exit $CRC, server exit $SRC" "$TMP/$name.client.log" "$TMP/$name.server.log"
  fi
done

if [ $failed -eq 0 ]; then
  echo "apps-ucx: all $total passed"
  exit 0
fi
echo "apps-ucx: $failed of $total failed"
exit 1
