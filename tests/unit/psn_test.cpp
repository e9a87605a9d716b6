// Psn: 24-bit modular arithmetic and order (IBA 9.7.1), and the other
// strong types' masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "lib/wire/types.hpp"
#include "tests/common/test_util.hpp"

namespace uroce::test {
namespace {

constexpr uint32_t kSpace = 1u << 24;
constexpr int32_t kHalf = 1 << 23;

TEST(Psn, WrapsAt2To24) {
  EXPECT_EQ(Psn(0xFFFFFF) + 1, Psn(0));
  EXPECT_EQ(Psn(0) - 1, Psn(0xFFFFFF));
  EXPECT_EQ(Psn(0xFFFFFE) + 5, Psn(3));
  Psn p(0xFFFFFF);
  ++p;
  EXPECT_EQ(p.value(), 0u);
  p += 0xFFFFFF;
  EXPECT_EQ(p.value(), 0xFFFFFFu);
  p += kSpace;  // a whole turn is the identity
  EXPECT_EQ(p.value(), 0xFFFFFFu);
  EXPECT_EQ(Psn(kSpace), Psn(0));
  EXPECT_EQ(Psn(0xFFFFFFFF).value(), 0xFFFFFFu);
  EXPECT_EQ(Psn(0x12345678).value(), 0x345678u);
  static_assert(Psn(0xFFFFFF) + 1 == Psn(0));
  static_assert(Psn::kMask == 0xFFFFFF && Psn::kHalf == 0x800000);
}

TEST(Psn, OrderAroundTheWrap) {
  EXPECT_LT(Psn(0xFFFFFF), Psn(0));
  EXPECT_GT(Psn(0), Psn(0xFFFFFF));
  EXPECT_LT(Psn(0xFFFFF0), Psn(5));
  EXPECT_GT(Psn(5), Psn(0xFFFFF0));
  EXPECT_LE(Psn(7), Psn(7));
  EXPECT_GE(Psn(7), Psn(7));
  EXPECT_FALSE(Psn(7) < Psn(7));
  EXPECT_LT(Psn(0x7FFFFF), Psn(0x800000));
  EXPECT_LT(Psn(0x800000), Psn(0xFFFFFF));
  // Plain integer order would say the opposite for these.
  EXPECT_LT(Psn(0xC00000), Psn(0x100000));
  EXPECT_GT(Psn(0x100000), Psn(0xC00000));
}

TEST(Psn, DistanceSignAndRange) {
  EXPECT_EQ(distance(Psn(0), Psn(0xFFFFFF)), 1);
  EXPECT_EQ(distance(Psn(0xFFFFFF), Psn(0)), -1);
  EXPECT_EQ(distance(Psn(5), Psn(5)), 0);
  EXPECT_EQ(distance(Psn(3), Psn(0xFFFFFE)), 5);
  EXPECT_EQ(distance(Psn(0x7FFFFF), Psn(0)), kHalf - 1);
  EXPECT_EQ(distance(Psn(0), Psn(0x7FFFFF)), -(kHalf - 1));
  // Exactly half the space apart: the range is [-2^23, 2^23), so both
  // directions read as -2^23 (as Linux rxe's psn_compare does).
  EXPECT_EQ(distance(Psn(0x800000), Psn(0)), -kHalf);
  EXPECT_EQ(distance(Psn(0), Psn(0x800000)), -kHalf);
}

TEST(Psn, DistanceIsTheInverseOfAddition) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (int i = 0; i < 200000; ++i) {
    const Psn a(rng.u32());
    // n in [-2^23, 2^23), edges included often.
    int32_t n;
    switch (i % 8) {
      case 0: n = -kHalf; break;
      case 1: n = kHalf - 1; break;
      case 2: n = static_cast<int32_t>(rng.range(0, 4)) - 2; break;
      default: n = static_cast<int32_t>(rng.range(0, kSpace - 1)) - kHalf; break;
    }
    const Psn b = a + static_cast<uint32_t>(n);
    ASSERT_EQ(distance(b, a), n) << a.value() << " + " << n;
    ASSERT_GE(distance(b, a), -kHalf);
    ASSERT_LT(distance(b, a), kHalf);
    ASSERT_EQ(a + static_cast<uint32_t>(distance(b, a)), b);
    // Order agrees with the sign of the distance.
    ASSERT_EQ(b > a, n > 0);
    ASSERT_EQ(b < a, n < 0);
    ASSERT_EQ(b == a, n == 0);
    // Antisymmetry everywhere but exactly half the space apart.
    if (n != -kHalf) {
      ASSERT_EQ(distance(a, b), -n);
      ASSERT_EQ(a < b, b > a);
    }
  }
}

// Within half the space, the modular order is a strict total order on a
// window: sorting a window that straddles the wrap gives PSN order.
TEST(Psn, OrderAcrossHalfTheSpace) {
  for (uint32_t start : {0u, 0xFFFF00u, 0x7FFFF0u, 0xC00000u, 0xFFFFFFu}) {
    const Psn a(start);
    for (uint32_t k : {1u, 2u, 64u, 0x1000u, 0x400000u, 0x7FFFFEu, 0x7FFFFFu}) {
      EXPECT_LT(a, a + k) << start << "+" << k;
      EXPECT_GT(a + k, a) << start << "+" << k;
      EXPECT_GT(a, a - k) << start << "-" << k;
      EXPECT_EQ(distance(a + k, a), static_cast<int32_t>(k));
    }
    // One more than half: the later PSN now reads as behind.
    EXPECT_GT(a, a + 0x800001u);
    EXPECT_EQ(distance(a + 0x800001u, a), -kHalf + 1);
  }
  std::vector<Psn> window;
  for (uint32_t k = 0; k < 1000; ++k) window.push_back(Psn(0xFFFE00u) + k * 7919u % 1000u);
  std::sort(window.begin(), window.end());
  for (size_t i = 1; i < window.size(); ++i) {
    EXPECT_EQ(distance(window[i], window[i - 1]), 1) << i;
  }
  EXPECT_EQ(window.front(), Psn(0xFFFE00u));
  EXPECT_EQ(window.back(), Psn(0xFFFE00u) + 999);
}

TEST(StrongTypes, Masks) {
  EXPECT_EQ(Qpn(0x12345678).value(), 0x345678u);
  EXPECT_EQ(Msn(0x1000000).value(), 0u);
  Msn m(0xFFFFFF);
  ++m;
  EXPECT_EQ(m, Msn(0));
  EXPECT_EQ(Rkey(0xFFFFFFFF).value(), 0xFFFFFFFFu);
  EXPECT_EQ(kGsiQkey.value(), 0x80010000u);
  EXPECT_EQ(kDefaultPkey.value(), 0xFFFF);
  EXPECT_EQ(kQp1, Qpn(1));
}

}  // namespace
}  // namespace uroce::test
