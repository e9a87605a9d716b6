// lib/util/stamps: the first stamp of each point after arm() is kept, later
// ones are not; nothing is kept while disarmed; arm() clears.
#include <gtest/gtest.h>

#include "lib/util/stamps.hpp"

namespace uroce::stamps {
namespace {

TEST(Stamps, DisarmedKeepsNothing) {
  disarm();
  arm();
  disarm();
  UROCE_STAMP(Built);
  EXPECT_EQ(snapshot()[static_cast<size_t>(Point::Built)], 0u);
}

TEST(Stamps, FirstAfterArmWins) {
  arm();
  UROCE_STAMP(Sent);
  const uint64_t first = snapshot()[static_cast<size_t>(Point::Sent)];
  EXPECT_NE(first, 0u);
  for (int i = 0; i < 1000; ++i) UROCE_STAMP(Sent);
  UROCE_STAMP(Received);
  const Snapshot s = snapshot();
  EXPECT_EQ(s[static_cast<size_t>(Point::Sent)], first) << "a later stamp of the same point is not kept";
  EXPECT_GE(s[static_cast<size_t>(Point::Received)], first);
  EXPECT_EQ(s[static_cast<size_t>(Point::Polled)], 0u) << "a point not reached stays 0";
  arm();
  EXPECT_EQ(snapshot()[static_cast<size_t>(Point::Sent)], 0u) << "arm() clears";
  disarm();
}

TEST(Stamps, EveryStageHasAName) {
  EXPECT_EQ(stage_name(0), "");
  for (size_t p = 1; p < kPoints; ++p) EXPECT_FALSE(stage_name(p).empty()) << p;
  EXPECT_EQ(stage_name(static_cast<size_t>(Point::Sent)), "tx");
  EXPECT_EQ(stage_name(static_cast<size_t>(Point::Received)), "wire");
  EXPECT_EQ(point_name(Point::Polled), "polled");
}

}  // namespace
}  // namespace uroce::stamps
