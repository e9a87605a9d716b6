#!/usr/bin/env bash
# Kernel rxe <-> kernel rxe in two VMs (scripts/rxe-vm), captured on VM a's
# tap: every capture must pass `uroce pcap-check` (each RoCEv2 packet's ICRC
# verifies and it re-serializes byte for byte) and tshark.  This is the
# traffic uroce must speak, live from the reference implementation,
# including what no public capture shows: RoCEv2 over IPv6 GIDs, and an
# RDMA CM connection over IPv6.
#
#   rc-pingpong(-v6)    ibv_rc_pingpong 4 KiB at path MTU 1024 (SEND FIRST/MIDDLE/LAST + ACK)
#   ud-pingpong(-v6)    ibv_ud_pingpong 512 B (UD SEND with DETH)
#   rping(-v6)          rping -V (CM REQ/REP/RTU, SEND, RDMA READ/WRITE, DREQ/DREP), data verified
#   udaddy              SIDR_REQ/SIDR_REP, then UD SEND with immediate
#   cm-reject           rping to a port nobody listens on: REJ, both sides see it fail
#   rc-pingpong-mtu4096 netdev MTU 4200: path MTU 4096, 8 KiB messages
#
#   rxe_pair_test.sh UROCE SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip when qemu cannot start (no qemu, no kernel
# image, not root).  The VMs and the namespace are removed however it ends.
# UROCE_INTEROP_KEEP=DIR keeps the captures and logs in DIR.
set -u

[ $# -eq 2 ] || { echo "usage: $0 UROCE SCRIPTS_DIR" >&2; exit 2; }
UROCE=$1 SCRIPTS=$2 NAME=pair
export UROCE NAME
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/interop/lib.sh
. "$HERE/lib.sh"

readonly CASE_TIMEOUT_S=60
readonly TCP_READY='netstat -ltn | grep -q :18515'
readonly CM_READY='rdma res show cm_id | grep -q LISTEN'
readonly BIG_MTU=4200             # rxe: path MTU = the largest IB MTU <= netdev MTU - 80

interop_init
vm_up --vms a,b

# pair_case NAME EXPECT(ok|fail) 'SERVER_CMD' 'READY_CHECK' 'CLIENT_CMD' MIN_ROCE FAMILY(4|6) PATTERN...
#   the server in VM b, the client in VM a, captured on tap-a; EXPECT ok:
#   both exit 0; fail: the client fails (and the server, if any, too).
pair_case() {
  local name=$1 expect=$2 scmd=$3 ready=$4 ccmd=$5 min=$6 fam=$7 pcap=$TMP/$1.pcap i sid crc=0 src=0
  shift 7
  capture_start "$pcap" tap-a || { fail "$name: capture did not start"; return; }
  sid=
  if [ -n "$scmd" ]; then
    sid=$(vm_spawn b "timeout $CASE_TIMEOUT_S $scmd")
    for i in $(seq 100); do in_vm b "$ready" 10 >/dev/null 2>&1 && break; sleep 0.1; done
  fi
  in_vm a "timeout $CASE_TIMEOUT_S $ccmd" $((CASE_TIMEOUT_S + 10)) >"$TMP/$name.client" 2>&1 || crc=$?
  if [ -n "$sid" ]; then vm_wait b "$sid" $((CASE_TIMEOUT_S + 10)) >"$TMP/$name.server" 2>&1 || src=$?; fi
  sleep 0.3
  capture_stop
  case $expect in
    ok)
      if [ $crc -eq 0 ] && [ $src -eq 0 ]; then pass "$name: client and server exit 0"; else
        fail "$name: client exit $crc, server exit $src"
        show "$TMP/$name.client"
        [ -n "$sid" ] && show "$TMP/$name.server"
      fi ;;
    fail)
      if [ $crc -ne 0 ] && [ $crc -ne 124 ]; then pass "$name: the client failed as it must (exit $crc)"; else
        fail "$name: client exit $crc, expected a failure of its own (not a timeout)"
        show "$TMP/$name.client"
      fi ;;
  esac
  check_pcap "$pcap" "$name" "$min"
  [ $# -gt 0 ] && pcap_has "$pcap" "$name" "$@"
  local v4 v6
  v4=$(tshark_count "$pcap" 'ip && udp.dstport == 4791')
  v6=$(tshark_count "$pcap" 'ipv6 && udp.dstport == 4791')
  if [ "$fam" = 6 ]; then
    [ "$v6" -ge "$min" ] && [ "$v4" -eq 0 ] && pass "$name: $v6 RoCEv2 packets over IPv6, none over IPv4" ||
      fail "$name: RoCEv2 over IPv6 $v6, over IPv4 $v4"
  else
    [ "$v4" -ge "$min" ] && [ "$v6" -eq 0 ] || fail "$name: RoCEv2 over IPv4 $v4, over IPv6 $v6"
  fi
}

# The *_pingpong servers listen on IPv4 only (the first getaddrinfo answer),
# so their TCP exchange stays on IPv4; -g picks the IPv6 GID for RoCE.
# Warm the neighbour caches: rdma_cm with a cold one waits out its resolve timeout.
in_vm a "ping -c 1 -W 2 $IP_B; ping -c 1 -W 2 $IP6_B" 30 >"$TMP/warm.log" 2>&1 ||
  { fail "VM a cannot ping VM b"; show "$TMP/warm.log"; }

G4=$GIDX_A G6=$GIDX6_A
[ "$GIDX_B" = "$G4" ] && [ "$GIDX6_B" = "$G6" ] || fail "the VMs' GID indexes differ: a $GIDX_A/$GIDX6_A, b $GIDX_B/$GIDX6_B"

pair_case rc-pingpong ok "ibv_rc_pingpong -d rxe0 -g $G4 -n 8 -s 4096" "$TCP_READY" \
  "ibv_rc_pingpong -d rxe0 -g $G4 -n 8 -s 4096 $IP_B" 64 4 RC_SEND_FIRST RC_SEND_MIDDLE RC_SEND_LAST RC_ACKNOWLEDGE
pair_case rc-pingpong-v6 ok "ibv_rc_pingpong -d rxe0 -g $G6 -n 8 -s 4096" "$TCP_READY" \
  "ibv_rc_pingpong -d rxe0 -g $G6 -n 8 -s 4096 $IP_B" 64 6 RC_SEND_FIRST RC_SEND_MIDDLE RC_SEND_LAST RC_ACKNOWLEDGE
pair_case ud-pingpong ok "ibv_ud_pingpong -d rxe0 -g $G4 -n 8 -s 512" "$TCP_READY" \
  "ibv_ud_pingpong -d rxe0 -g $G4 -n 8 -s 512 $IP_B" 16 4 UD_SEND_ONLY
pair_case ud-pingpong-v6 ok "ibv_ud_pingpong -d rxe0 -g $G6 -n 8 -s 512" "$TCP_READY" \
  "ibv_ud_pingpong -d rxe0 -g $G6 -n 8 -s 512 $IP_B" 16 6 UD_SEND_ONLY
pair_case rping ok "rping -s -a $IP_B -V -C 4 -S 64 -v" "$CM_READY" \
  "rping -c -a $IP_B -V -C 4 -S 64 -v" 20 4 REQ REP RTU DREQ DREP RC_RDMA_READ_REQUEST RC_RDMA_WRITE_ONLY
pair_case rping-v6 ok "rping -s -a $IP6_B -V -C 4 -S 64 -v" "$CM_READY" \
  "rping -c -a $IP6_B -V -C 4 -S 64 -v" 20 6 REQ REP RTU DREQ DREP RC_RDMA_READ_REQUEST RC_RDMA_WRITE_ONLY
pair_case udaddy ok "udaddy -b $IP_B -c 1 -C 4" "$CM_READY" "udaddy -s $IP_B -c 1 -C 4" 4 4 SIDR_REQ SIDR_REP
pair_case cm-reject fail "" "" "rping -c -a $IP_B -C 1 -S 64 -v" 2 4 REQ REJ
if in_vm a "ibv_devinfo -d rxe0" 30 2>&1 | grep -q 'active_mtu:.*1024'; then
  "$SCRIPTS/rxe-vm" mtu --ns "$RXE_NS" $BIG_MTU >/dev/null 2>&1 || fail "rxe-vm mtu $BIG_MTU"
  if in_vm a "ibv_devinfo -d rxe0" 30 2>&1 | grep -q 'active_mtu:.*4096'; then
    pass "netdev MTU $BIG_MTU: rxe0 active_mtu 4096"
  else
    fail "netdev MTU $BIG_MTU: rxe0 active_mtu is not 4096"
  fi
  pair_case rc-pingpong-mtu4096 ok "ibv_rc_pingpong -d rxe0 -g $G4 -n 4 -s 8192 -m 4096" "$TCP_READY" \
    "ibv_rc_pingpong -d rxe0 -g $G4 -n 4 -s 8192 -m 4096 $IP_B" 16 4 RC_SEND_FIRST RC_SEND_LAST
  big=$(tshark_count "$TMP/rc-pingpong-mtu4096.pcap" 'udp.dstport == 4791 && frame.len == 4154')
  [ "$big" -ge 16 ] && pass "rc-pingpong-mtu4096: $big frames of 4154 bytes (4096-byte payloads)" ||
    fail "rc-pingpong-mtu4096: $big frames of 4154 bytes, expected 16"
else
  fail "rxe0 active_mtu at netdev MTU 1500 is not 1024"
fi
interop_finish
