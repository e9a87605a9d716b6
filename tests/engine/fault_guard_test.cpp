// lib/util/fault_guard: a fault inside a region ends the region (false),
// counted; outside a region a fault still ends the process as it would
// without the guard.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>

#include "lib/util/fault_guard.hpp"

namespace uroce {
namespace {

// One page mapped, then unmapped: touching it faults.
volatile uint8_t* unmapped_page() {
  const long pg = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, static_cast<size_t>(pg), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  munmap(p, static_cast<size_t>(pg));
  return static_cast<volatile uint8_t*>(p);
}

TEST(FaultGuard, RegionThatFaultsReturnsFalse) {
  fault_guard::install();
  volatile uint8_t* bad = unmapped_page();
  const uint64_t before = fault_guard::faults();
  EXPECT_FALSE(fault_guard::run([](void* p) { *static_cast<volatile uint8_t*>(p) = 1; },
                                const_cast<uint8_t*>(bad)));
  EXPECT_EQ(fault_guard::faults(), before + 1);
  // The thread goes on: another region, a clean one, runs to its end.
  int x = 0;
  EXPECT_TRUE(fault_guard::run([](void* p) { *static_cast<int*>(p) = 7; }, &x));
  EXPECT_EQ(x, 7);
  EXPECT_EQ(fault_guard::faults(), before + 1);
  // And again a faulting one: nothing stayed blocked (SA_NODEFER).
  EXPECT_FALSE(fault_guard::run([](void* p) { (void)*static_cast<volatile uint8_t*>(p); }, const_cast<uint8_t*>(bad)));
  EXPECT_EQ(fault_guard::faults(), before + 2);
}

TEST(FaultGuardDeathTest, FaultOutsideARegionStillKills) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        fault_guard::install();
        volatile uint8_t* bad = unmapped_page();
        *bad = 1;
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

}  // namespace
}  // namespace uroce
