#!/usr/bin/env bash
# Tests of `uroce pcap-check` as a command: the shared captures pass, broken
# inputs fail with the right exit status and a one-line error, derived
# captures (Linux cooked v1/v2, 802.1Q, IPv6, pcapng, snaplen cuts) check
# the same as their source, and --json output parses.
#
#   test-pcap-check.sh UROCE VECTORS_DIR
#
# Exit 0 when every check passes, 1 otherwise, 77 (skipped) when
# VECTORS_DIR or python3 is missing.  Each check prints PASS or FAIL.

set -u

readonly EXIT_OK=0 EXIT_FAILED=1 EXIT_ERROR=2 EXIT_SKIP=77

if [ $# -ne 2 ]; then
  echo "usage: $0 UROCE VECTORS_DIR" >&2
  exit $EXIT_ERROR
fi
UROCE=$1
VECTORS=$2
FIXTURES="$(dirname "$0")/pcap-fixtures.py"

if [ ! -d "$VECTORS" ]; then
  echo "SKIP: vectors directory $VECTORS is absent (set -Dvectors_dir)"
  exit $EXIT_SKIP
fi
if ! command -v python3 >/dev/null; then
  echo "SKIP: python3 is needed to make the test inputs"
  exit $EXIT_SKIP
fi
if [ ! -x "$UROCE" ]; then
  echo "FAIL: $UROCE is not an executable" >&2
  exit $EXIT_FAILED
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

passed=0
failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }

# run CMD...: run it with stdout in $TMP/out and stderr in $TMP/err; sets $rc.
run() {
  "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}

# expect NAME WANT_RC PATTERN CMD...: the exit status is WANT_RC and, when
# PATTERN is not empty, stdout or stderr contains it.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 3
  run "$@"
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit $rc, expected $want"
    sed 's/^/    /' "$TMP/err" | head -5
  elif [ -n "$pattern" ] && ! grep -qF -- "$pattern" "$TMP/out" "$TMP/err"; then
    fail "$name: output lacks '$pattern'"
  else
    pass "$name"
  fi
}

# expect_unreadable NAME FILE PATTERN: exit 2, and stderr is one line naming
# FILE and containing PATTERN.
expect_unreadable() {
  local name=$1 file=$2 pattern=$3
  run "$UROCE" pcap-check "$file"
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ "$rc" -ne $EXIT_ERROR ]; then
    fail "$name: exit $rc, expected $EXIT_ERROR"
  elif [ "$lines" -ne 1 ]; then
    fail "$name: $lines lines on stderr, expected one"
  elif ! grep -qF -- "$file" "$TMP/err" || ! grep -qF -- "$pattern" "$TMP/err"; then
    fail "$name: error line '$(cat "$TMP/err")' lacks the file name or '$pattern'"
  else
    pass "$name ($(cat "$TMP/err"))"
  fi
}

# json_field FILE... -- EXPR: evaluate EXPR on the parsed --json document `d`.
json_field() {
  local expr=$1
  shift
  "$UROCE" pcap-check --json --allow-truncated "$@" 2>/dev/null |
    python3 -c "import json, sys; d = json.load(sys.stdin); print($expr)"
}

# ---- 1. every shared capture passes ------------------------------------------

shopt -s nullglob
vectors=("$VECTORS"/*/*.pcap)
if [ ${#vectors[@]} -eq 0 ]; then
  echo "SKIP: no captures in $VECTORS"
  exit $EXIT_SKIP
fi
expect "shared vectors: ${#vectors[@]} files, exit 0" $EXIT_OK "" "$UROCE" pcap-check "${vectors[@]}"
tail -1 "$TMP/out" | sed 's/^/    /'

# ---- 2. --json parses ------------------------------------------------------------

run "$UROCE" pcap-check --json "${vectors[@]}"
if [ "$rc" -eq $EXIT_OK ] && python3 -m json.tool "$TMP/out" >/dev/null; then
  pass "shared vectors: --json parses"
else
  fail "shared vectors: --json (exit $rc) does not parse"
fi
files=$(python3 -c "import json; print(len(json.load(open('$TMP/out'))['files']))" 2>/dev/null)
if [ "$files" = "${#vectors[@]}" ]; then pass "--json lists ${#vectors[@]} files"; else fail "--json lists '$files' files"; fi

# The capture the derived inputs start from: an Ethernet one with RoCEv2
# and CM MADs (rxe-rping when it is there).
base="$VECTORS/rxe-vm/rxe-rping.pcap"
if [ ! -f "$base" ]; then
  base=$(python3 - "$TMP/out" <<'EOF'
import json, sys
for f in json.load(open(sys.argv[1]))["files"]:
    if f["link"] and f["link"]["type"] == 1 and f["roce_v2"] and f["cm_mads"]:
        print(f["path"])
        break
EOF
)
fi
if [ -z "$base" ]; then
  fail "no Ethernet capture with RoCEv2 CM traffic to derive inputs from"
  exit $EXIT_FAILED
fi
base_roce=$(json_field "d['totals']['roce_v2']" "$base")
echo "    derived inputs start from $base ($base_roce RoCEv2 packets)"

# ---- 3. broken inputs --------------------------------------------------------------

fixture() { python3 "$FIXTURES" "$@" >/dev/null; }

: >"$TMP/empty.pcap"
expect_unreadable "empty file" "$TMP/empty.pcap" "truncated dump file"

head -c 1000 /dev/urandom >"$TMP/random.pcap"
expect_unreadable "1000 random bytes" "$TMP/random.pcap" "unknown file format"

fixture truncate "$base" "$TMP/cut-record.pcap"
expect_unreadable "file cut in the middle of a record" "$TMP/cut-record.pcap" "truncated"

fixture bad-caplen "$base" "$TMP/bad-caplen.pcap"
expect_unreadable "record with caplen 0x7fffffff" "$TMP/bad-caplen.pcap" "2147483647"

expect_unreadable "missing file" "$TMP/no-such-file.pcap" "No such file"

fixture flip-icrc "$base" "$TMP/flipped-icrc.pcap"
expect "one ICRC bit flipped: exit 1" $EXIT_FAILED "ICRC failures 1" "$UROCE" pcap-check "$TMP/flipped-icrc.pcap"
expect "one ICRC bit flipped: -v lists the frame" $EXIT_FAILED "ICRC expected 0x" \
  "$UROCE" pcap-check -v "$TMP/flipped-icrc.pcap"

fixture bad-tver "$base" "$TMP/bad-tver.pcap"
expect "BTH TVer 1 to UDP 4791: malformed, exit 1" $EXIT_FAILED "bth_bad_tver 1 (1 to UDP port 4791)" \
  "$UROCE" pcap-check "$TMP/bad-tver.pcap"

fixture snap "$base" "$TMP/snap100.pcap" 100
expect "snaplen 100: RoCEv2 frames cut, exit 1" $EXIT_FAILED "snap-truncated" "$UROCE" pcap-check "$TMP/snap100.pcap"
expect "snaplen 100 with --allow-truncated: exit 0" $EXIT_OK "allowed by --allow-truncated" \
  "$UROCE" pcap-check --allow-truncated "$TMP/snap100.pcap"

expect "a bad file does not stop the others: exit 2" $EXIT_ERROR "$base: OK" \
  "$UROCE" pcap-check "$TMP/empty.pcap" "$base"

run "$UROCE" pcap-check --json "$TMP/flipped-icrc.pcap" "$TMP/random.pcap" "$base"
if [ "$rc" -eq $EXIT_ERROR ] && python3 -m json.tool "$TMP/out" >/dev/null; then
  pass "--json with failing and unreadable files parses, exit 2"
else
  fail "--json with failing and unreadable files: exit $rc, or it does not parse"
fi

# ---- 4. derived captures check like their source -------------------------------

fixture sll "$base" "$TMP/sll.pcap"
fixture sll2 "$base" "$TMP/sll2.pcap"
fixture vlan "$base" "$TMP/vlan1.pcap" 1
fixture vlan "$base" "$TMP/vlan2.pcap" 2
fixture ipv6 "$base" "$TMP/ipv6.pcap"
fixture vlan "$TMP/ipv6.pcap" "$TMP/ipv6-vlan2.pcap" 2
fixture sll2 "$TMP/ipv6-vlan2.pcap" "$TMP/ipv6-vlan2-sll2.pcap"
derived=(sll sll2 vlan1 vlan2 ipv6 ipv6-vlan2 ipv6-vlan2-sll2)
if command -v editcap >/dev/null; then
  editcap -F pcapng "$TMP/ipv6-vlan2.pcap" "$TMP/ipv6-vlan2-ng.pcap" && derived+=(ipv6-vlan2-ng)
else
  echo "    (editcap not found: no pcapng check)"
fi
for name in "${derived[@]}"; do
  file="$TMP/$name.pcap"
  expect "derived $name: exit 0" $EXIT_OK ": OK" "$UROCE" pcap-check "$file"
  roce=$(json_field "d['totals']['roce_v2']" "$file")
  if [ "$roce" = "$base_roce" ]; then
    pass "derived $name: $roce RoCEv2 packets, as the source"
  else
    fail "derived $name: '$roce' RoCEv2 packets, the source has $base_roce"
  fi
done

# ---- 5. usage ------------------------------------------------------------------------

expect "no subcommand: exit 2" $EXIT_ERROR "" "$UROCE"
expect "pcap-check without files: exit 2" $EXIT_ERROR "" "$UROCE" pcap-check
expect "unknown option: exit 2" $EXIT_ERROR "" "$UROCE" pcap-check --no-such-option "$base"
expect "--help: exit 0" $EXIT_OK "pcap-check" "$UROCE" pcap-check --help

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && exit $EXIT_OK
exit $EXIT_FAILED
