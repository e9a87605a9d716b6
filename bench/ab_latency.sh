#!/usr/bin/env bash
# A/B latency of two builds of the drop-ins, in one run, on one wire:
# unmodified perftest latency programs between two network namespaces over
# net_af_packet on a veth pair, alternating build A and build B round by
# round so that the machine's noise falls on both alike.  Prints the median
# of each round's typical latency (t_typical) per build and program, and
# B/A as a ratio.
#
#   bench/ab_latency.sh BUILD_A BUILD_B [ROUNDS] [PROGRAM...]
#       BUILD_*   meson build directories with verbs-shim/ built
#       ROUNDS    rounds per build and program (default 7)
#       PROGRAM   ib_send_lat ib_write_lat ib_read_lat (default: ib_send_lat)
#   environment: AB_SIZE (bytes, default 64), AB_ITERS (default 5000)
#
# Root (namespaces, DPDK ports).  Exit 0 when every run printed a figure.
set -u
[ $# -ge 2 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
A=$(readlink -f "$1") B=$(readlink -f "$2")
ROUNDS=${3:-7}
shift $(($# >= 3 ? 3 : 2))
PROGRAMS=("$@")
[ ${#PROGRAMS[@]} -gt 0 ] || PROGRAMS=(ib_send_lat)
SIZE=${AB_SIZE:-64} ITERS=${AB_ITERS:-5000}
HERE=$(cd "$(dirname "$0")" && pwd)
SCRIPTS=$HERE/../scripts
[ "$(id -u)" -eq 0 ] || { echo "ab_latency: needs root" >&2; exit 77; }

P=$(printf 'ab%x' $$)
TMP=$(mktemp -d /tmp/uroce-ab.XXXXXX)
CONFIG=$TMP/empty.toml
: >"$CONFIG"
cleanup() { "$SCRIPTS/netns-down" "$P" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
eval "$("$SCRIPTS/netns-up" --veth "$P")" || exit 1

# One run: server in B's namespace, client in A's; prints t_typical.
one() {  # BUILD PROGRAM
  local build=$1 prog=$2 port=$((18000 + RANDOM % 2000))
  ip netns exec "$NS_B" env UROCE_DEVICE="$DEVARGS_B" "$SCRIPTS/uroce-run" --build "$build" --config "$CONFIG" \
    "$prog" -d uroce0 -x 0 -F -p $port -n "$ITERS" -s "$SIZE" >"$TMP/s.log" 2>&1 &
  local spid=$!
  sleep 1.2
  ip netns exec "$NS_A" env UROCE_DEVICE="$DEVARGS_A" "$SCRIPTS/uroce-run" --build "$build" --config "$CONFIG" \
    "$prog" -d uroce0 -x 0 -F -p $port -n "$ITERS" -s "$SIZE" "$IP_B" >"$TMP/c.log" 2>&1
  wait "$spid"
  # The row under "#bytes": size, iterations, t_min, t_max, t_typical, ...
  awk '/^[[:space:]]*#bytes/ { on = 1; next } on && $1 ~ /^[0-9]+$/ && NF >= 5 { print $5; exit }' "$TMP/c.log"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

status=0
echo "| program | size | A: $A | B: $B | B/A |"
echo "|---|---|---|---|---|"
for prog in "${PROGRAMS[@]}"; do
  : >"$TMP/a.txt"
  : >"$TMP/b.txt"
  for ((r = 0; r < ROUNDS; r++)); do
    for side in a b; do
      build=$A
      [ $side = b ] && build=$B
      t=$(one "$build" "$prog")
      if [ -z "$t" ]; then status=1; echo "ab_latency: $prog on $build printed no figure" >&2; tail -5 "$TMP/c.log" >&2; continue; fi
      echo "$t" >>"$TMP/$side.txt"
    done
  done
  ma=$(median <"$TMP/a.txt") mb=$(median <"$TMP/b.txt")
  ratio=$(awk -v a="$ma" -v b="$mb" 'BEGIN { if (a > 0) printf "%.3f", b / a }')
  echo "| $prog | $SIZE B | $ma us ($(paste -sd' ' "$TMP/a.txt")) | $mb us ($(paste -sd' ' "$TMP/b.txt")) | $ratio |"
done
exit $status
