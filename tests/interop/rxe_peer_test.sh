#!/usr/bin/env bash
# uroce's engine and the Linux kernel's Soft-RoCE (rdma_rxe) in a VM, on one
# wire: one VM (scripts/rxe-vm) on a bridge, uroce's net_af_packet port on
# the veth peer0 into that bridge, sharing it with the namespace's kernel
# (peer0 holds NET.100 and NET6::100, so the device takes them).
#
#   - the VM is up: rxe0 port 1 ACTIVE, GID index 1 = ::ffff:<guest IPv4>,
#     a RoCE v2 GID for the guest's IPv6 address;
#   - neighbours: `uroce node --ping --icmp` resolves the guest by ARP and by
#     ND and gets the guest kernel's echo replies; the guest's ping of
#     uroce's IPv4 and IPv6 addresses is answered exactly once per request,
#     by the namespace kernel that owns peer0 (an af_packet port shares its
#     netdev: the engine sees the requests, counts them and must not answer
#     too), and the guest's neighbour entries carry the device's MAC;
#   - RoCEv2 from rxe to the engine: unmodified ibv_ud_pingpong and
#     ibv_rc_pingpong clients in the guest (over IPv4 and IPv6 GIDs, RC with
#     a 4 KiB message = FIRST/MIDDLE/LAST at path MTU 1024) are told by
#     pingpong_peer.py that the server QP is `uroce node`'s test QP; the
#     engine takes every packet only after its ICRC verified (rx_roce, no
#     drop_icrc), an rping client's CM REQ reaches it on QP1
#     (drop_unknown_qpn: no CM yet); rxe's RC retransmissions, unanswered,
#     repeat the same PSNs; every capture passes `uroce pcap-check` and
#     tshark; the namespace kernel sent no ICMP port unreachable (the
#     engine claims UDP 4791).
#
#   rxe_peer_test.sh UROCE SCRIPTS_DIR
#
# Exit 0 pass, 1 fail, 77 skip when qemu cannot start (no qemu, no kernel
# image, not root).  The VM and the namespace are removed however it ends.
set -u

[ $# -eq 2 ] || { echo "usage: $0 UROCE SCRIPTS_DIR" >&2; exit 2; }
UROCE=$1 SCRIPTS=$2 NAME=peer
export UROCE NAME
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/interop/lib.sh
. "$HERE/lib.sh"

readonly PP_PORT=18515
readonly NODE_QPN=0xC0DE          # tools/uroce/node_msg.hpp kNodeQpn
readonly ICMP_COUNT=5 GUEST_PINGS=3
readonly RC_RUN_S=3               # an unanswered RC client retransmits this long (rxe: retry 7 = forever)

interop_init
vm_up --vms a --host-veth
DEVARGS="net_af_packet0,iface=$PEER_IF"

# node LOG ARGS...: `uroce node` on peer0 in the foreground; status in $rc.
node() {
  local log=$1
  shift
  bg "$log" env UROCE_CONFIG="$CONFIG" UROCE_DEVICE="$DEVARGS" UROCE_IP= UROCE_PCAP="${PCAP:-}" \
    "$UROCE" node --seconds $NODE_BOUND_S --no-telemetry "$@"
  wait "$LAST_PID"
  rc=$?
}

# echo_start LOG PCAP: `uroce node --echo` (attaches the test QP) in the background.
echo_start() {
  bg "$1" env UROCE_CONFIG="$CONFIG" UROCE_DEVICE="$DEVARGS" UROCE_IP= UROCE_PCAP="$2" \
    "$UROCE" node --echo --seconds $NODE_BOUND_S --no-telemetry
  ECHO_PID=$LAST_PID
  wait_line "$1" "echo ready" || { fail "uroce node --echo never got ready"; show "$1"; return 1; }
}

# ---- the VM --------------------------------------------------------------------------
check_vm() {
  in_vm a 'ibv_devinfo -v -d rxe0' >"$TMP/devinfo.txt" 2>&1
  if grep -q 'state:.*PORT_ACTIVE' "$TMP/devinfo.txt" &&
    grep -Eq "GID\[ *1\]:[[:space:]]*::ffff:$IP_A, RoCE v2" "$TMP/devinfo.txt"; then
    pass "guest rxe0: PORT_ACTIVE, GID[1] = ::ffff:$IP_A RoCE v2, GID[$GIDX6_A] = $IP6_A, active_mtu $ACTIVE_MTU_A"
  else
    fail "guest rxe0 is not ready as expected"
    show "$TMP/devinfo.txt"
  fi
  [ "$GIDX_A" = 1 ] || fail "the IPv4-mapped GID is at index $GIDX_A, not 1"
}

# ---- ARP / ND / ICMP both ways ------------------------------------------------------
check_neighbours() {
  local ip mac
  for ip in "$IP_A" "$IP6_A"; do
    node "$TMP/icmp-$ip.log" --ping "$ip" --icmp --count $ICMP_COUNT
    if [ "$rc" -eq 0 ] && grep -q "$ICMP_COUNT sent, $ICMP_COUNT received, 0 lost" "$TMP/icmp-$ip.log" &&
      grep -qi "resolved $ip at $MAC_A" "$TMP/icmp-$ip.log"; then
      pass "uroce node resolved $ip ($(grep -o 'resolved .*' "$TMP/icmp-$ip.log")); the guest kernel answered $ICMP_COUNT ICMP echoes"
    else
      fail "uroce node --ping $ip --icmp: exit $rc"
      show "$TMP/icmp-$ip.log"
    fi
  done
  # The guest pings uroce's addresses while the engine runs.
  echo_start "$TMP/guest-ping.log" "$TMP/guest-ping.pcap" || return
  mac=$(sed -n 's/.*: mac \([0-9a-f:]*\),.*/\1/p' "$TMP/guest-ping.log" | head -1)
  in_vm a "ip neigh flush dev eth0; ping -c $GUEST_PINGS -W 2 $PEER_IP; ping -c $GUEST_PINGS -W 2 $PEER_IP6;
           ip neigh show $PEER_IP; ip -6 neigh show $PEER_IP6" 60 >"$TMP/guest-ping.out" 2>&1
  local grc=$?
  stop_pid "$ECHO_PID"
  if [ $grc -eq 0 ] && [ "$(grep -c "$GUEST_PINGS packets transmitted, $GUEST_PINGS packets received" "$TMP/guest-ping.out")" -eq 2 ] &&
    ! grep -q DUP "$TMP/guest-ping.out"; then
    pass "the guest's ping of $PEER_IP and $PEER_IP6: every request answered once"
  else
    fail "the guest's ping of uroce's addresses (exit $grc)"
    show "$TMP/guest-ping.out"
  fi
  if [ -n "$mac" ] && grep -q "^$PEER_IP .*lladdr $mac" "$TMP/guest-ping.out" &&
    grep -q "^$PEER_IP6 .*lladdr $mac" "$TMP/guest-ping.out"; then
    pass "the guest resolved $PEER_IP (ARP) and $PEER_IP6 (ND) to the device's MAC $mac"
  else
    fail "the guest's neighbour entries for uroce's addresses do not carry the device's MAC '$mac'"
    show "$TMP/guest-ping.out"
  fi
  # Shared netdev: the kernel answers, the engine sees the requests and stays quiet.
  local icmp icmp6
  icmp=$(counter "$TMP/guest-ping.log" rx_icmp)
  icmp6=$(counter "$TMP/guest-ping.log" rx_icmp6)
  if [ "$icmp" -ge $GUEST_PINGS ] && [ "$icmp6" -ge $GUEST_PINGS ] &&
    [ "$(counter "$TMP/guest-ping.log" tx_icmp_reply)" -eq 0 ] && [ "$(counter "$TMP/guest-ping.log" tx_icmp6_reply)" -eq 0 ] &&
    [ "$(counter "$TMP/guest-ping.log" tx_arp_reply)" -eq 0 ] && [ "$(counter "$TMP/guest-ping.log" tx_nd_advert)" -eq 0 ]; then
    pass "on the shared af_packet netdev the kernel answered; the engine saw rx_icmp=$icmp rx_icmp6=$icmp6 and sent no reply, ARP or NA"
  else
    fail "engine during the guest's pings: rx_icmp=$icmp rx_icmp6=$icmp6 tx_icmp_reply=$(counter "$TMP/guest-ping.log" tx_icmp_reply) tx_icmp6_reply=$(counter "$TMP/guest-ping.log" tx_icmp6_reply) tx_arp_reply=$(counter "$TMP/guest-ping.log" tx_arp_reply) tx_nd_advert=$(counter "$TMP/guest-ping.log" tx_nd_advert)"
  fi
  local req
  req=$(tshark_count "$TMP/guest-ping.pcap" "(icmp.type == 8 && ip.src == $IP_A) || (icmpv6.type == 128 && ipv6.src == $IP6_A)")
  local rep
  rep=$(tshark_count "$TMP/guest-ping.pcap" "(icmp.type == 0 && ip.dst == $IP_A) || (icmpv6.type == 129 && ipv6.dst == $IP6_A)")
  if [ "$req" -eq $((2 * GUEST_PINGS)) ] && [ "$rep" -eq "$req" ]; then
    pass "uroce's capture: $req echo requests from the guest, $rep replies (one each)"
  else
    fail "uroce's capture: $req echo requests from the guest, $rep replies"
  fi
}

# ---- RoCEv2 from rxe ---------------------------------------------------------------
# roce_case NAME MIN_ROCE CLIENT_CMD: runs CLIENT_CMD in the guest while the
# engine's test QP listens; checks the engine's counters and the capture.
roce_case() {
  local name=$1 min=$2 cmd=$3 log=$TMP/$1.log pcap=$TMP/$1.pcap
  echo_start "$log" "$pcap" || return
  in_vm a "$cmd" 60 >"$TMP/$name.client" 2>&1
  stop_pid "$ECHO_PID"
  [ "$rc" -eq 0 ] || { fail "$name: uroce node --echo exit $rc"; show "$log"; }
  expect_counter "$log" rx_roce ge "$min" "$name: packets of rxe that the engine took (ICRC verified)"
  expect_counter "$log" drop_icrc eq 0 "$name"
  expect_counter "$log" drop_malformed eq 0 "$name"
  local seen took
  seen=$(tshark_count "$pcap" "udp.dstport == 4791 && infiniband.bth.destqp == $NODE_QPN")
  took=$(counter "$log" rx_roce)
  if [ "$seen" -eq "$took" ]; then pass "$name: the engine took all $seen RoCEv2 packets of rxe in its capture"; else
    fail "$name: $seen RoCEv2 packets to QPN $NODE_QPN in the capture, the engine took $took"
  fi
  check_pcap "$pcap" "$name" "$min"
}

# The client got pingpong_peer.py's address (QPN 0xC0DE): the N-th exchange
# of the run went through (the client's own stdout is lost when timeout
# kills it).
client_saw_exchange() {
  local name=$1 n=$2 client=$3 line
  line=$(grep -- '-> qpn' "$TMP/pingpong-peer.log" | sed -n "${n}p")
  if [[ $line == "client $client "*"-> qpn 0x00c0de "*"(done)" ]]; then
    pass "$name: the guest's client (${line#client }) took QPN 0x00c0de"
  else
    fail "$name: exchange $n of the client at $client did not go through: '$line'"
    show "$TMP/pingpong-peer.log"
  fi
}

check_roce_from_rxe() {
  bg "$TMP/pingpong-peer.log" python3 "$HERE/pingpong_peer.py" $PP_PORT $NODE_QPN "::ffff:$PEER_IP" "$PEER_IP6"
  wait_line "$TMP/pingpong-peer.log" listening || { fail "pingpong_peer.py did not start"; show "$TMP/pingpong-peer.log"; return; }
  local before
  before=$(dest_unreach)

  # UD: the client sends one SEND and waits for a reply that never comes.
  roce_case ud4 1 "timeout 4 ibv_ud_pingpong -d rxe0 -g $GIDX_A -n 1 -s 512 $PEER_IP"
  client_saw_exchange ud4 1 "::ffff:$IP_A"
  pcap_has "$TMP/ud4.pcap" ud4 UD_SEND_ONLY
  [ "$(tshark_count "$TMP/ud4.pcap" "ip.dst == $PEER_IP && udp.dstport == 4791 && infiniband.deth.q_key == 0x11111111")" -ge 1 ] &&
    pass "ud4: UD SEND to $PEER_IP with the client's Q_Key 0x11111111" || fail "ud4: no UD SEND to $PEER_IP with Q_Key 0x11111111"

  roce_case ud6 1 "timeout 4 ibv_ud_pingpong -d rxe0 -g $GIDX6_A -n 1 -s 512 $PEER_IP6"
  client_saw_exchange ud6 2 "$IP6_A"
  [ "$(tshark_count "$TMP/ud6.pcap" "ipv6.dst == $PEER_IP6 && udp.dstport == 4791")" -ge 1 ] &&
    pass "ud6: RoCEv2 over IPv6 to $PEER_IP6" || fail "ud6: no RoCEv2 over IPv6 to $PEER_IP6"

  # RC, 4 KiB at path MTU 1024: FIRST, 2 MIDDLE, LAST, never ACKed, so rxe
  # retransmits the message from its first PSN every local ACK timeout.
  roce_case rc4 8 "timeout $RC_RUN_S ibv_rc_pingpong -d rxe0 -g $GIDX_A -n 1 -s 4096 $PEER_IP"
  client_saw_exchange rc4 3 "::ffff:$IP_A"
  pcap_has "$TMP/rc4.pcap" rc4 RC_SEND_FIRST RC_SEND_MIDDLE RC_SEND_LAST
  local first copies
  first=$(tshark -r "$TMP/rc4.pcap" -Y 'infiniband.bth.opcode == 0' -T fields -e infiniband.bth.psn 2>/dev/null | head -1)
  copies=$(tshark_count "$TMP/rc4.pcap" "infiniband.bth.opcode == 0 && infiniband.bth.psn == ${first:-0}")
  if [ -n "$first" ] && [ "$copies" -ge 2 ]; then
    pass "rc4: unanswered, rxe resent SEND_FIRST PSN $first $copies times (go-back-N from the oldest unacknowledged PSN)"
  else
    fail "rc4: no retransmission of SEND_FIRST seen (PSN '${first}', $copies copies)"
  fi

  roce_case rc6 2 "timeout $RC_RUN_S ibv_rc_pingpong -d rxe0 -g $GIDX6_A -n 1 -s 64 $PEER_IP6"
  client_saw_exchange rc6 4 "$IP6_A"
  pcap_has "$TMP/rc6.pcap" rc6 RC_SEND_ONLY
  [ "$(tshark_count "$TMP/rc6.pcap" "ipv6.dst == $PEER_IP6 && infiniband.bth.opcode == 4")" -ge 2 ] &&
    pass "rc6: RC SEND_ONLY over IPv6 to $PEER_IP6, retransmitted" || fail "rc6: no RC SEND_ONLY over IPv6 to $PEER_IP6"

  # RDMA CM: the REQ goes to QP1, which the engine has not attached yet.
  local name=cm-req log=$TMP/cm-req.log
  echo_start "$log" "$TMP/cm-req.pcap" || return
  in_vm a "timeout 5 rping -c -a $PEER_IP -C 1 -v" 60 >"$TMP/cm-req.client" 2>&1
  stop_pid "$ECHO_PID"
  expect_counter "$log" drop_unknown_qpn ge 1 "$name: the CM REQ to QP1 (no CM attached yet)"
  check_pcap "$TMP/cm-req.pcap" "$name" 1
  pcap_has "$TMP/cm-req.pcap" "$name" REQ

  local after
  after=$(dest_unreach)
  if [ "$after" = "$before" ]; then pass "the namespace kernel sent no ICMP destination unreachable (v4/v6: $after)"; else
    fail "ICMP destination unreachables (v4/v6) went from $before to $after: UDP 4791 was not claimed"
  fi
}

check_vm
check_neighbours
check_roce_from_rxe
check_pcap "$TMP/guest-ping.pcap" "guest-ping capture" 0
interop_finish
