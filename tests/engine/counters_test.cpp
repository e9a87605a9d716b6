#include "lib/util/counters.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace uroce {
namespace {

#define TEST_COUNTERS(X)          \
  X(rx_frames, "frames received") \
  X(icrc_error, "ICRC mismatch")  \
  X(unknown_qpn, "no such QP")

UROCE_COUNTER_ENUM(TestCtr, TEST_COUNTERS)
using TestCounters = CounterSet<TestCtr, kTestCtrInfo>;

TEST(Counters, NamesAndValues) {
  TestCounters c;
  static_assert(TestCounters::size() == 3);
  c.inc(TestCtr::rx_frames);
  c.add(TestCtr::icrc_error, 5);
  EXPECT_EQ(c.get(TestCtr::rx_frames), 1u);
  EXPECT_EQ(c.get(TestCtr::icrc_error), 5u);
  EXPECT_EQ(c.get(TestCtr::unknown_qpn), 0u);
  EXPECT_EQ(TestCounters::name(TestCtr::unknown_qpn), "unknown_qpn");
  std::set<std::string> seen;
  c.for_each([&](std::string_view name, std::string_view help, uint64_t) {
    EXPECT_FALSE(help.empty());
    seen.insert(std::string(name));
  });
  EXPECT_EQ(seen.size(), 3u);
  c.reset();
  EXPECT_EQ(c.get(TestCtr::icrc_error), 0u);
}

}  // namespace
}  // namespace uroce
