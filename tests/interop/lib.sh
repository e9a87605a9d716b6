# shellcheck shell=bash
# Shared by the interop test scripts (sourced, not run): the rxe VMs'
# lifetime, verdicts, engine counters and capture checks.
#
# The sourcing script sets UROCE (the uroce tool), SCRIPTS (scripts/), NAME
# (a short test name) and calls interop_init; then vm_up (once), then its
# checks, then interop_finish.  Exit: 0 pass, 1 fail, 77 skip (only when
# qemu cannot start here: scripts/rxe-vm check says why).

readonly EXIT_OK=0 EXIT_FAILED=1 EXIT_SKIP=77
# --seconds of every `uroce node`: nothing outlives the test.
readonly NODE_BOUND_S=120

failed=0
PIDS=()

pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
show() { echo "---- $1"; sed 's/^/    /' "$1"; }
skip() { echo "SKIP: $*"; exit $EXIT_SKIP; }

interop_cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  "$SCRIPTS/rxe-vm" stop --ns "$RXE_NS" >/dev/null 2>&1
  if [ -n "${UROCE_INTEROP_KEEP:-}" ]; then
    mkdir -p "$UROCE_INTEROP_KEEP" && cp -r "$TMP"/. "$UROCE_INTEROP_KEEP"/ && echo "captures and logs copied to $UROCE_INTEROP_KEEP"
  fi
  if [ $failed -eq 0 ]; then rm -rf "$TMP"; else echo "logs and captures kept in $TMP"; fi
}

# interop_init: the skip checks, the work folder and the EXIT trap.
interop_init() {
  [ -x "$UROCE" ] || { echo "FAIL: $UROCE is not executable"; exit $EXIT_FAILED; }
  local why
  if ! why=$("$SCRIPTS/rxe-vm" check 2>&1); then
    skip "${why#rxe-vm: }"
  fi
  command -v tshark >/dev/null || { echo "FAIL: no tshark (scripts/setup installs it)"; exit $EXIT_FAILED; }
  command -v python3 >/dev/null || { echo "FAIL: no python3"; exit $EXIT_FAILED; }
  RXE_NS=$(printf 'urxe-%s-%x' "$NAME" $$)
  TMP=$(mktemp -d "/tmp/uroce-interop-$NAME.XXXXXX")
  CONFIG=$TMP/empty.toml    # no /etc/uroce.toml: the environment configures
  : >"$CONFIG"
  trap interop_cleanup EXIT
  trap 'exit $EXIT_FAILED' INT TERM
  echo "interop-$NAME: namespace $RXE_NS, work in $TMP"
}

# vm_up ARGS...: scripts/rxe-vm start ARGS in RXE_NS, then its env.  Once
# qemu exists every failure fails (never a skip).
vm_up() {
  local t0=$SECONDS
  if ! "$SCRIPTS/rxe-vm" start --ns "$RXE_NS" "$@" >"$TMP/rxe-vm-start.log" 2>&1; then
    fail "rxe-vm start $*"
    show "$TMP/rxe-vm-start.log"
    exit $EXIT_FAILED
  fi
  eval "$("$SCRIPTS/rxe-vm" env --ns "$RXE_NS")"
  pass "VMs up in $((SECONDS - t0)) s ($(grep -o 'VM . ready after [0-9.]* s' "$TMP/rxe-vm-start.log" | tr '\n' ' ')accel $RXE_ACCEL)"
}

# in_vm VM CMD [TIMEOUT_S]: the command's output on stdout, its status returned.
in_vm() { "$SCRIPTS/rxe-vm" exec --ns "$RXE_NS" "$@"; }
vm_spawn() { "$SCRIPTS/rxe-vm" spawn --ns "$RXE_NS" "$@"; }
vm_wait() { "$SCRIPTS/rxe-vm" wait --ns "$RXE_NS" "$@"; }
capture_start() { "$SCRIPTS/rxe-vm" capture --ns "$RXE_NS" start "$@"; }
capture_stop() { "$SCRIPTS/rxe-vm" capture --ns "$RXE_NS" stop; }

# bg LOG CMD...: CMD in the namespace in the background, output in LOG
# (truncated first); its pid in LAST_PID.
bg() {
  local log=$1
  shift
  : >"$log"
  ip netns exec "$RXE_NS" "$@" >>"$log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_line FILE PATTERN [TIMEOUT_S]
wait_line() {
  local i
  for ((i = 0; i < ${3:-20} * 20; i++)); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# stop_pid PID: SIGTERM and wait; its status in $rc.
stop_pid() {
  kill -TERM "$1" 2>/dev/null
  wait "$1"
  rc=$?
}

# counter LOG NAME: a counter from `uroce node`'s exit report (0 if absent).
counter() {
  local v
  v=$(sed -n "s/^  $2=\([0-9]*\) .*/\1/p" "$1" | head -1)
  echo "${v:-0}"
}

# expect_counter LOG NAME eq|ge|le VALUE WHAT
expect_counter() {
  local got
  got=$(counter "$1" "$2")
  local ok=0
  case $3 in
    eq) [ "$got" -eq "$4" ] && ok=1 ;;
    ge) [ "$got" -ge "$4" ] && ok=1 ;;
    le) [ "$got" -le "$4" ] && ok=1 ;;
  esac
  if [ $ok = 1 ]; then pass "$5: $2=$got"; else fail "$5: $2=$got, expected $3 $4"; fi
}

# ICMP destination unreachables the namespace's kernel sent, "v4/v6".
dest_unreach() {
  local v4 v6
  v4=$(ip netns exec "$RXE_NS" awk '$1 == "Icmp:" { if (!h) { for (i = 2; i <= NF; i++) k[i] = $i; h = 1 }
    else for (i = 2; i <= NF; i++) if (k[i] == "OutDestUnreachs") print $i }' /proc/net/snmp)
  v6=$(ip netns exec "$RXE_NS" awk '$1 == "Icmp6OutDestUnreachs" { print $2 }' /proc/net/snmp6 2>/dev/null)
  echo "${v4:-0}/${v6:-0}"
}

# tshark_count PCAP FILTER: frames matching a display filter.
tshark_count() { tshark -r "$1" -Y "$2" 2>/dev/null | wc -l; }

# check_pcap PCAP WHAT [MIN_ROCE]: `uroce pcap-check` passes, at least
# MIN_ROCE (1) RoCEv2 packets in it, tshark finds nothing malformed and no
# ICMP unreachable.
check_pcap() {
  local f=$1 what=$2 min=${3:-1} log roce bad
  log=$f.check
  if "$UROCE" pcap-check "$f" >"$log" 2>&1; then
    roce=$(sed -n 's/.*RoCEv2 \([0-9]*\),.*/\1/p' "$log" | head -1)
    if [ "${roce:-0}" -ge "$min" ]; then
      pass "$what: pcap-check OK, $(sed -n '2p;3p;4p' "$log" | sed 's/^ *//' | tr '\n' ';' | sed 's/;$//')"
    else
      fail "$what: pcap-check found ${roce:-0} RoCEv2 packets, expected at least $min"
      show "$log"
    fi
  else
    fail "$what: uroce pcap-check"
    show "$log"
  fi
  # Wireshark's guesses at what an RC SEND's payload is are not ours to
  # judge: RPCoRDMA's heuristic claims small SENDs (perftest's 2-byte ones),
  # and the Ethernet-over-IB one reads the first two payload bytes as an
  # EtherType, so perftest's random 0xc023 became "PPP PAP, malformed".
  # Both are off here; the RoCEv2 headers are still checked.
  bad=$(tshark -r "$f" --disable-protocol rpcordma --disable-heuristic eth_over_ib \
    -Y '_ws.malformed || icmp.type == 3 || icmpv6.type == 1' 2>/dev/null | wc -l)
  [ "$bad" -eq 0 ] || fail "$what: tshark: $bad malformed or ICMP-unreachable frames"
}

# pcap_has PCAP WHAT PATTERN...: each PATTERN (e.g. "RC_SEND_FIRST", "REQ")
# appears in the pcap-check report's opcode or CM MAD line.
pcap_has() {
  local f=$1 what=$2 p missing=
  shift 2
  for p in "$@"; do
    grep -Eq "^  (opcodes|CM MADs):.* $p [0-9]+" "$f.check" || missing+=" $p"
  done
  if [ -z "$missing" ]; then pass "$what: the capture holds $*"; else fail "$what: not in the capture:$missing"; fi
}

interop_finish() {
  if [ $failed -eq 0 ]; then
    echo "interop-$NAME: all checks passed"
    exit $EXIT_OK
  fi
  echo "interop-$NAME: $failed checks failed"
  exit $EXIT_FAILED
}
