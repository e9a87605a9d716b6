#!/usr/bin/env bash
# Unmodified Debian UCX 1.13 (ucx-utils) over the drop-ins: ucx_info lists
# uroce0 for rc_verbs and ud_verbs, and ucx_perftest runs between two
# network namespaces (scripts/netns-up --veth, one net_af_packet port each):
# UCT tests on each transport and UCP tests with UCX_TLS=rc (rc_verbs, with
# ud_verbs for wire-up) and UCX_TLS=ud_verbs.
# UCX lists a verbs device only when /dev/infiniband/<dev_name> is a
# character device it may open (lib/util/devnode.hpp): the test makes those
# nodes with `uroce devnode` when they are missing and removes what it made.
#
#   ucx_apps_test.sh SHIM_BUILD_DIR SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip (not root, ucx-utils not installed).
set -u

readonly EXIT_SKIP=77
readonly CTRL_PORT=13337  # ucx_perftest's out-of-band TCP port (its default)
[ $# -ge 2 ] || { echo "usage: $0 SHIM_BUILD_DIR SCRIPTS_DIR" >&2; exit 2; }
BUILD=$1 SCRIPTS=$2
UROCE=$BUILD/tools/uroce

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }
[ "$(id -u)" -eq 0 ] || skip "needs root (DPDK ports, network namespaces, device nodes)"
command -v ucx_perftest >/dev/null && command -v ucx_info >/dev/null ||
  skip "needs ucx_perftest and ucx_info (ucx-utils; scripts/setup installs it)"
[ -x "$UROCE" ] || { echo "FAIL: $UROCE not built"; exit 1; }

PREFIX=$(printf 'ux%x' $$)
TMP=$(mktemp -d /tmp/uroce-ucx.XXXXXX)
failed=0 total=0
SPID=
MADE_NODES=0
CONFIG=$TMP/empty.toml
: >"$CONFIG"
RUN=("$SCRIPTS/uroce-run" --build "$BUILD" --config "$CONFIG")

cleanup() {
  [ -n "$SPID" ] && kill -TERM "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
  "$SCRIPTS/netns-down" "$PREFIX" >/dev/null 2>&1
  [ $MADE_NODES -eq 1 ] && "$UROCE" devnode --count 1 --remove
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [ ! -c /dev/infiniband/uroce-uverbs0 ]; then
  "$UROCE" devnode --count 1 >/dev/null || { echo "FAIL: uroce devnode"; failed=1; exit 1; }
  MADE_NODES=1
fi

out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
  [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
  echo "FAIL netns-up"; cat "$TMP/netns.err"; failed=1; exit 1
}
eval "$out"

fail() {  # NAME WHY LOG...
  local name=$1 why=$2
  shift 2
  echo "FAIL $name: $why"
  for f in "$@"; do
    echo "  -- ${f##*/}"
    grep -v TELEMETRY "$f" | grep -v '^[|+]' | tail -15 | sed 's/^/    /'
  done
  failed=$((failed + 1))
}

total=$((total + 1))
ip netns exec "$NS_A" env UROCE_DEVICE="$DEVARGS_A" timeout 60 "${RUN[@]}" ucx_info -d >"$TMP/ucx_info.log" 2>&1
rc=$?
missing=
for tl in rc_verbs ud_verbs; do
  grep -A1 -E "Transport: $tl\$" "$TMP/ucx_info.log" | grep -q "Device: uroce0:1" || missing="$missing $tl"
done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then
  echo "PASS ucx_info: rc_verbs and ud_verbs on uroce0:1"
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
  envs=()
  [ "$tls" != "-" ] && envs=(UCX_TLS="$tls" UCX_NET_DEVICES=uroce0:1)
  # shellcheck disable=SC2086  # $args is a list of arguments
  ip netns exec "$NS_B" env "${envs[@]}" UROCE_DEVICE="$DEVARGS_B" timeout 90 "${RUN[@]}" ucx_perftest \
    >"$TMP/$name.server.log" 2>&1 &
  SPID=$!
  # The client's out-of-band connection needs the server listening.
  for _ in $(seq 100); do
    ip netns exec "$NS_B" ss -Hltn "sport = :$CTRL_PORT" 2>/dev/null | grep -q . && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  ip netns exec "$NS_A" env "${envs[@]}" UROCE_DEVICE="$DEVARGS_A" timeout 90 "${RUN[@]}" ucx_perftest $args "$IP_B" \
    >"$TMP/$name.client.log" 2>&1
  crc=$?
  wait "$SPID"
  src=$?
  SPID=
  if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -qE "^Final: +[0-9]+ " "$TMP/$name.client.log"; then
    echo "PASS $name: $(grep -E '^Final:' "$TMP/$name.client.log" | tr -s ' ')"
  else
    fail "$name" "client exit $crc, server exit $src" "$TMP/$name.client.log" "$TMP/$name.server.log"
  fi
done

if [ $failed -eq 0 ]; then
  echo "apps-ucx: all $total passed"
  exit 0
fi
echo "apps-ucx: $failed of $total failed"
exit 1
