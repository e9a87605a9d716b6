#!/usr/bin/env bash
# The drop-in libraries against the real rdma-core 44 ones (objdump -T and
# readelf on the installed Debian libraries):
#   - libibverbs.so.1: same SONAME; every version node of the real library;
#     every exported symbol at its version, hidden compat versions included
#     (of the private IBVERBS_PRIVATE_34 node only ibv_query_gid_type, which
#     ibv_devinfo imports; the rest is the provider ABI we do not offer);
#   - libmlx5.so.1 / libefa.so.1: same SONAMEs, every version node of the
#     real ones, and every symbol the installed perftest binaries import;
#   - every IBVERBS/MLX5/EFA symbol any installed RDMA program imports;
#   - no DT_NEEDED on a real RDMA library or a shared DPDK library.
#
#   abi_compare.sh SHIM_DIR
#
# Exit 0 pass, 1 fail, 77 skip (the real libraries or binutils are absent).
set -u

readonly EXIT_SKIP=77
[ $# -eq 1 ] || { echo "usage: $0 SHIM_DIR" >&2; exit 2; }
SHIM=$1
SYSLIB=/usr/lib/x86_64-linux-gnu
command -v objdump >/dev/null && command -v readelf >/dev/null || { echo "SKIP: needs binutils"; exit $EXIT_SKIP; }
for l in libibverbs.so.1 libmlx5.so.1 libefa.so.1; do
  [ -e "$SYSLIB/$l" ] || { echo "SKIP: $SYSLIB/$l is not installed (scripts/setup installs ibverbs-utils, perftest)"; exit $EXIT_SKIP; }
done

failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

# "VERSION NAME" for every defined dynamic function/object; hidden versions
# keep objdump's parentheses.
exports() {
  objdump -T "$1" | awk '$0 !~ /\*UND\*/ && ($0 ~ / DF / || $0 ~ / DO /) && $NF !~ /^(IBVERBS|MLX5|EFA|UROCE)_/ {print $(NF-1), $NF}' | sort -u
}
# The version nodes a library defines.
nodes() { readelf -V "$1" | sed -n '/Version definition/,/Version needs/p' | awk '/Name:/ && !/Flags: BASE/ {print $NF}' | sort -u; }
soname() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
# What a binary imports from a versioned library: "VERSION NAME".
imports() { objdump -T "$1" 2>/dev/null | awk '/\*UND\*/ {v=$(NF-1); gsub(/[()]/, "", v); print v, $NF}' | grep -E "^($2)" ; }

missing() {  # missing WANT HAVE LABEL
  local m
  m=$(comm -23 "$1" "$2")
  if [ -z "$m" ]; then pass "$3"; else
    fail "$3: missing $(echo "$m" | wc -l):"
    echo "$m" | sed 's/^/    /' | head -40
  fi
}

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

for pair in libibverbs.so.1:libibverbs libmlx5.so.1:libmlx5 libefa.so.1:libefa; do
  lib=${pair%%:*}
  ours=$SHIM/$lib
  [ -e "$ours" ] || { fail "$ours was not built"; continue; }
  [ "$(soname "$ours")" = "$(soname "$SYSLIB/$lib")" ] && pass "$lib: SONAME $(soname "$ours")" ||
    fail "$lib: SONAME $(soname "$ours"), real $(soname "$SYSLIB/$lib")"
  nodes "$SYSLIB/$lib" >"$TMP/real-nodes"
  nodes "$ours" >"$TMP/our-nodes"
  missing "$TMP/real-nodes" "$TMP/our-nodes" "$lib: every version node of rdma-core 44 ($(wc -l <"$TMP/real-nodes"))"
  exports "$ours" >"$TMP/our-$lib"
done

# libibverbs: the whole public surface, and the one private symbol.
exports "$SYSLIB/libibverbs.so.1" | grep -v 'IBVERBS_PRIVATE_' >"$TMP/real-pub"
echo "IBVERBS_PRIVATE_34 ibv_query_gid_type" >>"$TMP/real-pub"
sort -o "$TMP/real-pub" "$TMP/real-pub"
missing "$TMP/real-pub" "$TMP/our-libibverbs.so.1" \
  "libibverbs.so.1: every public symbol at its version, hidden compat ones included ($(wc -l <"$TMP/real-pub"))"
# Nodes of later releases (IBVERBS_1.15 on) are apps-newer-abi's to check.
extra=$(comm -13 "$TMP/real-pub" "$TMP/our-libibverbs.so.1" |
  grep -vE 'IBVERBS_PRIVATE_|UROCE_(PRIVATE|XRC_LEGACY)_|IBVERBS_1\.(1[5-9]|[2-9][0-9]) ' || true)
[ -z "$extra" ] && pass "libibverbs.so.1: exports nothing rdma-core 44 does not (but later releases' nodes, uroce's own and the older API's XRC calls)" ||
  fail "libibverbs.so.1 exports more: $extra"

# Every versioned import of the installed RDMA programs resolves.
bins=$(ls /usr/bin/ibv_* /usr/bin/ib_* /usr/bin/rping /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/rdma_* 2>/dev/null)
for b in $bins; do imports "$b" 'IBVERBS_|MLX5_|EFA_'; done | sort -u >"$TMP/imports"
sort -u "$TMP/our-libibverbs.so.1" "$TMP/our-libmlx5.so.1" "$TMP/our-libefa.so.1" | tr -d '()' | sort -u >"$TMP/ours-all"
missing "$TMP/imports" "$TMP/ours-all" "every IBVERBS/MLX5/EFA import of $(echo "$bins" | wc -w) installed programs ($(wc -l <"$TMP/imports"))"

# Nothing that would load the real RDMA stack or a shared DPDK (and its
# mlx PMDs) into the process.
bad=$(readelf -d "$SHIM/libibverbs.so.1" "$SHIM/libmlx5.so.1" "$SHIM/libefa.so.1" |
  sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -E '^(libibverbs|librdmacm|libmlx|libefa|librte_)' || true)
[ -z "$bad" ] && pass "no NEEDED real RDMA or shared DPDK library" || fail "NEEDED: $bad"
readelf -d "$SHIM/libibverbs.so.1" | grep -q 'BIND_NOW' && pass "libibverbs.so.1 is BIND_NOW (every symbol resolves at load)" ||
  fail "libibverbs.so.1 is not BIND_NOW"

[ $failed -eq 0 ] && { echo "abi: all checks passed"; exit 0; }
echo "abi: $failed checks failed"
exit 1
