// The raw frames of uroce-wire-limit (bench/wire_limit/frame.hpp): where
// an initiator addresses them, and where a responder's answer goes.
#include "bench/wire_limit/frame.hpp"

#include <gtest/gtest.h>

#include <array>

#include "lib/wire/eth.hpp"
#include "lib/wire/ipv4.hpp"

namespace uroce::bench::wire_limit {
namespace {

constexpr wire::MacAddr kA{0x02, 0, 0, 0, 0, 0x0A};
constexpr wire::MacAddr kB{0x02, 0, 0, 0, 0, 0x0B};

TEST(WireLimitFrame, DefaultFramesGoToAMacNoInterfaceOwnsAndAnswersStayThere) {
  std::array<uint8_t, 122> f{};
  write_frame(f.data(), f.size(), kA, Addressing{});
  EXPECT_EQ(wire::EthC(f.data()).dst(), kNotOurMac);
  EXPECT_EQ(wire::EthC(f.data()).src(), kA);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).src(), kSenderIp);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).dst(), kResponderIp);
  ASSERT_TRUE(classify(f.data(), f.size()));
  turn_around(f.data(), FrameKind::kReply, kB);
  EXPECT_EQ(wire::EthC(f.data()).dst(), kNotOurMac) << "not addressed to B: the answer goes nowhere either";
  EXPECT_EQ(wire::EthC(f.data()).src(), kB);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).src(), kResponderIp);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).dst(), kSenderIp);
  EXPECT_EQ(classify(f.data(), f.size())->kind, FrameKind::kReply);
}

TEST(WireLimitFrame, FramesAddressedToTheHostAreAnsweredToTheSender) {
  std::array<uint8_t, 64> f{};
  const Addressing to{kB, 0x0A000001, 0x0A000002};
  write_frame(f.data(), f.size(), kA, to);
  EXPECT_EQ(wire::EthC(f.data()).dst(), kB);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).src(), 0x0A000001u);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).dst(), 0x0A000002u);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).compute_checksum(), 0) << "the header checksum holds";
  turn_around(f.data(), FrameKind::kReply, kB);
  EXPECT_EQ(wire::EthC(f.data()).dst(), kA);
  EXPECT_EQ(wire::EthC(f.data()).src(), kB);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).dst(), 0x0A000001u);
  EXPECT_EQ(wire::Ipv4C(f.data() + kIpv4Offset).compute_checksum(), 0) << "the header checksum holds";
}

}  // namespace
}  // namespace uroce::bench::wire_limit
