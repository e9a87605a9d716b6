// The golden ICRC vectors of research/wire-vectors.md section 5: whole
// frames taken from real captures, the masked ICRC input an independent
// checker built from them, and the CRC.
#pragma once

#include <cstdint>
#include <string_view>

namespace uroce::test {

struct GoldenFrame {
  std::string_view what;
  std::string_view frame;  // hex, the whole Ethernet frame
  std::string_view input;  // hex, the masked ICRC input
  uint32_t crc;            // CRC-32 of `input`; on the wire LSB first
};

// ConnectX RC ACK, vectors/connectx-magnate3/ibdump-send.pcap frame 5.
inline constexpr GoldenFrame kConnectxAck{
    "ConnectX RC ACK (ibdump-send.pcap #5)",
    "08c0ebdae2e608c0ebdae2ca0800456a00304f8c40004011ae3bac11f238ac11f22ff41212b7001c00001140ffff"
    "0000013a00424b7100000001147c0aa9",
    "ffffffffffffffff45ff00304f8c4000ff11ffffac11f238ac11f22ff41212b7001cffff1140ffffff00013a0042"
    "4b7100000001",
    0xa90a7c14u};

// rxe RC ACK, vectors/rxe-linlinw5/pingpong_rc.pcap frame 13.
inline constexpr GoldenFrame kRxeAck{
    "rxe RC ACK (pingpong_rc.pcap #13)",
    "005056a77d03005056a7129f08004500003069c5400040119c7b0a01103d0a01103ec42012b7001c00001100ffff"
    "000000210059dfd71f000001e61d8892",
    "ffffffffffffffff45ff003069c54000ff11ffff0a01103d0a01103ec42012b7001cffff1100ffffff0000210059"
    "dfd71f000001",
    0x92881de6u};

// Huawei HNS RC ACK, vectors/hns-oferby/roce.pcap frame 16.
inline constexpr GoldenFrame kHnsAck{
    "HNS RC ACK (roce.pcap #16)",
    "183d5ebf4371183d5ebf51920800450200300000400040112d60c0a84606c0a84604004812b7001c00001140ffff"
    "000000450000000006000001259cc216",
    "ffffffffffffffff45ff003000004000ff11ffffc0a84606c0a84604004812b7001cffff1140ffffff0000450000"
    "000006000001",
    0x16c29c25u};

// ConnectX RoCEv1 ACK (EtherType 0x8915, GRH instead of IP/UDP): the
// IPv6-style masking on real hardware traffic.
// vectors/connectx-magnate3/rocev1_rocev2_mixed_test.pcap frame 103.
inline constexpr GoldenFrame kConnectxRoceV1Ack{
    "ConnectX RoCEv1 ACK (rocev1_rocev2_mixed_test.pcap #103)",
    "08c0ebdae2ca08c0ebdae2e689156020000000141b4000000000000000000000ffffac11f22f0000000000000000"
    "0000ffffac11f2381140ffff0000012800fed2761f00000016b3cd16",
    "ffffffffffffffff6fffffff00141bff00000000000000000000ffffac11f22f00000000000000000000ffffac11"
    "f2381140ffffff00012800fed2761f000000",
    0x16cdb316u};

inline constexpr GoldenFrame kRoceV2Golden[] = {kConnectxAck, kRxeAck, kHnsAck};

}  // namespace uroce::test
