# Sourced by the apps tests that run one unmodified program pair between two
# network namespaces joined by a veth (scripts/netns-up --veth, one
# net_af_packet port each): qperf, libfabric and UCX.  The caller sets
# BUILD (the meson build directory) and SCRIPTS (scripts/) first.
#
#   skip MSG                  print SKIP and exit 77
#   veth_pair_init TAG NAME   PREFIX, TMP (/tmp/uroce-NAME.*), an empty
#                             configuration, RUN (scripts/uroce-run with it),
#                             failed/total counters; on exit the server still
#                             running (SPID) is stopped, the namespaces
#                             removed, veth_pair_cleanup_extra run if the
#                             caller defines it, and TMP kept when a case
#                             failed
#   veth_pair_up              the namespaces: NS_A/NS_B, IP_A/IP_B,
#                             DEVARGS_A/DEVARGS_B (skips when they cannot be
#                             made)
#   fail NAME WHY LOG...      a FAIL line and each log's tail, without
#                             lines matching FAIL_LOG_DROP (a regex; none
#                             by default)
#   run_pair NAME PORT SECS   SERVER_CMD in NS_B, then, once it listens on
#                             TCP PORT (its out-of-band exchange), or with
#                             PAIR_LISTEN=cm once it called rdma_listen
#                             (its UROCE_TRACE=conn line), CLIENT_CMD in
#                             NS_A, both with PAIR_ENV and at most SECS;
#                             logs TMP/NAME.server.log and .client.log, exit
#                             statuses in CRC and SRC; when the client
#                             failed, the server is stopped 5 s later

readonly EXIT_SKIP=77
FAIL_LOG_DROP=
PAIR_ENV=()
PAIR_LISTEN=tcp
SERVER_CMD=()
CLIENT_CMD=()

skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }

veth_pair_cleanup() {
  [ -n "$SPID" ] && kill -TERM "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
  "$SCRIPTS/netns-down" "$PREFIX" >/dev/null 2>&1
  if declare -F veth_pair_cleanup_extra >/dev/null; then veth_pair_cleanup_extra; fi
  if [ "$failed" -eq 0 ]; then rm -rf "$TMP"; else echo "logs kept in $TMP"; fi
}

veth_pair_init() {
  PREFIX=$(printf '%s%x' "$1" $$)
  TMP=$(mktemp -d "/tmp/uroce-$2.XXXXXX")
  failed=0 total=0
  SPID=
  CONFIG=$TMP/empty.toml
  : >"$CONFIG"
  RUN=("$SCRIPTS/uroce-run" --build "$BUILD" --config "$CONFIG")
  trap veth_pair_cleanup EXIT
  trap 'exit 1' INT TERM
}

veth_pair_up() {
  local out
  out=$("$SCRIPTS/netns-up" --veth "$PREFIX" 2>"$TMP/netns.err") || {
    [ $? -eq $EXIT_SKIP ] && skip "$(cat "$TMP/netns.err")"
    echo "FAIL netns-up"; cat "$TMP/netns.err"; failed=1; exit 1
  }
  eval "$out"
}

fail() {  # NAME WHY LOG...
  local name=$1 why=$2 f
  shift 2
  echo "FAIL $name: $why"
  for f in "$@"; do
    echo "  -- ${f##*/}"
    { if [ -n "$FAIL_LOG_DROP" ]; then grep -vE "$FAIL_LOG_DROP" "$f"; else cat "$f"; fi; } |
      tail -15 | sed 's/^/    /'
  done
  failed=$((failed + 1))
}

run_pair() {  # NAME PORT SECS
  local name=$1 port=$2 secs=$3 trace=()
  [ "$PAIR_LISTEN" = cm ] && trace=(UROCE_TRACE=conn)
  ip netns exec "$NS_B" env "${PAIR_ENV[@]}" "${trace[@]}" UROCE_DEVICE="$DEVARGS_B" timeout "$secs" \
    "${RUN[@]}" "${SERVER_CMD[@]}" >"$TMP/$name.server.log" 2>&1 &
  SPID=$!
  for _ in $(seq 300); do
    kill -0 "$SPID" 2>/dev/null || break
    if [ "$PAIR_LISTEN" = cm ]; then
      grep -q "listening on port $port" "$TMP/$name.server.log" && break
    else
      ip netns exec "$NS_B" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    fi
    sleep 0.1
  done
  ip netns exec "$NS_A" env "${PAIR_ENV[@]}" UROCE_DEVICE="$DEVARGS_A" timeout "$secs" "${RUN[@]}" "${CLIENT_CMD[@]}" \
    >"$TMP/$name.client.log" 2>&1
  CRC=$?
  # A client that failed leaves a server that may wait for it to its own
  # timeout: it gets a few seconds to notice, then is stopped.
  if [ $CRC -ne 0 ]; then
    for _ in $(seq 50); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$SPID" 2>/dev/null
  fi
  wait "$SPID"
  SRC=$?
  SPID=
}
