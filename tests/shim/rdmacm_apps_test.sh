#!/usr/bin/env bash
# Unmodified Debian rdmacm-utils over the drop-in librdmacm.so.1 (and
# libibverbs.so.1), through scripts/uroce-run: server in one network
# namespace, client in the other (scripts/netns-up --veth), one
# net_af_packet port each.  The connection is set up in band (the IB CM on
# QP 1), as between two kernel rdma_cm peers.
#
#   rdmacm_apps_test.sh SHIM_BUILD_DIR SCRIPTS_DIR [NAME...]
#
# NAME picks programs from the table below (default: all).  Each must exit
# 0 on both sides and print what shows its data went through.
# Exit 0 pass, 1 fail, 77 skip (not root, programs not installed).
set -u

readonly EXIT_SKIP=77
readonly RUN_TIMEOUT_S=90
[ $# -ge 2 ] || { echo "usage: $0 SHIM_BUILD_DIR SCRIPTS_DIR [NAME...]" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2
shift 2

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces)"
for p in rping ucmatose udaddy rdma_server rdma_client cmtime stdbuf; do
  command -v $p >/dev/null || skip "needs $p (scripts/setup installs rdmacm-utils)"
done

PREFIX=$(printf 'rc%x' $$)
TMP=$(mktemp -d /tmp/uroce-rdmacm.XXXXXX)
PIDS=()
failed=0
CONFIG=$TMP/empty.toml
: >"$CONFIG"
RUN=("$SCRIPTS/uroce-run" --build "$BUILD" --config "$CONFIG")

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  "$SCRIPTS/netns-down" "$PREFIX" >/dev/null 2>&1
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
show() { echo "---- $1"; sed 's/^/    /' "$1" | head -60; }

# The programs: name | server command | client command (@S@: the server's
# address) | what the client log must show | what the server log must show
# (empty: nothing)
# | [seconds after which a server that never exits on its own (cmtime) is
# stopped; its exit 124 then passes].
PROGRAMS=(
  "rping|rping -s -v -V -C 100 -a @S@|rping -c -v -V -C 100 -a @S@|ping data: rdma-ping-99:|server ping data: rdma-ping-99:"
  "rping-64k|rping -s -v -V -C 20 -S 65000 -a @S@|rping -c -v -V -C 20 -S 65000 -a @S@|ping data: rdma-ping-19:|server ping data: rdma-ping-19:"
  "ucmatose|ucmatose -c 8 -C 20|ucmatose -s @S@ -c 8 -C 20|data transfers complete|data transfers complete"
  "udaddy|udaddy|udaddy -s @S@|data transfers complete|data transfers complete"
  "rdma_server|rdma_server|rdma_client -s @S@|rdma_client: end 0|rdma_server: end 0"
  "cmtime|cmtime|cmtime -s @S@ -c 100|^connect +:||25"
)

run_one() {  # ENTRY
  local name srv cli want_c want_s stop_s
  IFS='|' read -r name srv cli want_c want_s stop_s <<<"$1"
  srv=${srv//@S@/$IP_B}
  cli=${cli//@S@/$IP_B}
  ip netns exec "$NS_B" env UROCE_DEVICE="$DEVARGS_B" timeout "${stop_s:-$RUN_TIMEOUT_S}" \
    stdbuf -oL "${RUN[@]}" $srv >"$TMP/$name-server.log" 2>&1 &
  local spid=$!
  PIDS+=("$spid")
  sleep 2  # the server starts its device and listens
  ip netns exec "$NS_A" env UROCE_DEVICE="$DEVARGS_A" timeout $RUN_TIMEOUT_S \
    stdbuf -oL "${RUN[@]}" $cli >"$TMP/$name-client.log" 2>&1
  local crc=$?
  wait "$spid"
  local src=$?
  [ -n "$stop_s" ] && [ $src -eq 124 ] && src=0
  if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -qE -- "$want_c" "$TMP/$name-client.log" &&
    { [ -z "$want_s" ] || grep -qE -- "$want_s" "$TMP/$name-server.log"; }; then
    pass "$name: $(grep -E -- "$want_c" "$TMP/$name-client.log" | tail -1 | cut -c1-80)"
  else
    fail "$name: client exit $crc, server exit $src (want /$want_c/ and /$want_s/)"
    show "$TMP/$name-server.log"
    show "$TMP/$name-client.log"
  fi
}

out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
  [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
  fail "netns-up"; show "$TMP/netns.err"; exit 1
}
eval "$out"
echo "shim-rdmacm: work in $TMP"
for entry in "${PROGRAMS[@]}"; do
  name=${entry%%|*}
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx -- "$name"; then continue; fi
  run_one "$entry"
done
if [ $failed -eq 0 ]; then
  echo "shim-rdmacm: all checks passed"
  exit 0
fi
echo "shim-rdmacm: $failed checks failed"
exit 1
