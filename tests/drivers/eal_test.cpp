// The EAL helper, in the process main_eal.cpp started it in.
#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "drivers/dpdk/eal.hpp"
#include "tests/drivers/eal_env.hpp"

namespace uroce::drivers::dpdk {
namespace {

TEST(Eal, StartsOnceAndReturnsTheSameResult) {
  const auto& first = eal_init();
  ASSERT_TRUE(first) << first.error().message;
  EalOptions other;
  other.core = 1;
  other.telemetry = false;
  const auto& again = eal_init(other);
  EXPECT_EQ(&first, &again);
  EXPECT_TRUE(eal_running());
  EXPECT_FALSE(first->hugepages);
  EXPECT_EQ(first->args[1], "--no-huge");
  EXPECT_NE(first->runtime_dir.find("uroce-" + std::to_string(getpid())), std::string::npos) << first->runtime_dir;
}

// rte_eal_init pinned main() to one core; eal_init undid that.
TEST(Eal, CallerKeepsItsCpuAffinity) {
  cpu_set_t now;
  CPU_ZERO(&now);
  ASSERT_EQ(sched_getaffinity(0, sizeof now, &now), 0);
  EXPECT_TRUE(CPU_EQUAL(&now, &testing::cpus_before_eal()))
      << CPU_COUNT(&now) << " CPUs now, " << CPU_COUNT(&testing::cpus_before_eal()) << " before";
  EXPECT_EQ(eal_init()->main_lcore, probe_host().lowest_cpu.value_or(0));
}

// Telemetry still works with --no-shconf: the socket is in our own
// runtime dir and answers a query.
TEST(Eal, TelemetryAnswersOnItsSocket) {
  const auto& eal = eal_init();
  ASSERT_TRUE(eal);
  ASSERT_FALSE(eal->telemetry_socket.empty());
  ASSERT_TRUE(std::filesystem::exists(eal->telemetry_socket)) << eal->telemetry_socket;

  const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, eal->telemetry_socket.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  char buf[16384];
  ssize_t n = read(fd, buf, sizeof buf);
  ASSERT_GT(n, 0);
  const std::string hello(buf, static_cast<size_t>(n));
  EXPECT_NE(hello.find("\"pid\":" + std::to_string(getpid())), std::string::npos) << hello;

  const std::string query = "/eal/params";
  ASSERT_EQ(write(fd, query.data(), query.size()), static_cast<ssize_t>(query.size()));
  n = read(fd, buf, sizeof buf);
  ASSERT_GT(n, 0);
  const std::string reply(buf, static_cast<size_t>(n));
  EXPECT_NE(reply.find("--file-prefix=uroce-" + std::to_string(getpid())), std::string::npos) << reply;
  close(fd);
}

TEST(Eal, PoolsGetUniqueNames) {
  auto a = create_pktmbuf_pool({.mbufs = 63, .data_room = 2048});
  auto b = create_pktmbuf_pool({.mbufs = 63, .data_room = 2048});
  ASSERT_TRUE(a) << a.error().message;
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_STRNE((*a)->name, (*b)->name);
  EXPECT_EQ((*a)->size, 63u);
  EXPECT_EQ(rte_pktmbuf_data_room_size(*a), 2048);
  rte_mempool_free(*a);
  rte_mempool_free(*b);
}

TEST(Eal, DefaultPoolHoldsAJumboFrameAfterTheHeadroom) {
  auto p = create_pktmbuf_pool({.mbufs = 31});
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(rte_pktmbuf_data_room_size(*p), kDefaultDataRoom);
  rte_mbuf* m = rte_pktmbuf_alloc(*p);
  ASSERT_NE(m, nullptr);
  EXPECT_GE(rte_pktmbuf_tailroom(m), kMaxFrameBytes);
  rte_pktmbuf_free(m);
  rte_mempool_free(*p);
}

// net_af_xdp (DPDK 22.11) registers as its UMEM the pool's objects as if
// they lay back to back from the first memory chunk's page: populated_size
// objects of the object size, plus the chunk's offset in its page.  A
// frame outside that range is an invalid descriptor the kernel drops.
// The page_frames pool keeps every object inside it, one per page.
TEST(Eal, PageFramesPoolLiesWhereAfXdpRegistersItsUmem) {
  const uint16_t room = page_frame_data_room(0);
  auto p = create_pktmbuf_pool({.name_prefix = "xdp", .mbufs = 4095, .data_room = room, .page_frames = true});
  ASSERT_TRUE(p) << p.error().message;
  rte_mempool* mp = *p;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const size_t obj = size_t{mp->header_size} + mp->elt_size + mp->trailer_size;
  EXPECT_EQ(obj, page);
  EXPECT_GE(room, RTE_PKTMBUF_HEADROOM + 1500 + 14) << "a 1500-byte link's frame fits";
  const auto first = reinterpret_cast<uintptr_t>(STAILQ_FIRST(&mp->mem_list)->addr);
  const uintptr_t base = first & ~(page - 1);
  const uintptr_t umem_end = base + uintptr_t{mp->populated_size} * obj + (first - base);
  struct Span {
    uintptr_t base, end, page;
    unsigned outside = 0, crossing = 0, seen = 0;
  } span{base, umem_end, page};
  rte_mempool_obj_iter(
      mp,
      [](rte_mempool* m, void* arg, void* o, unsigned) {
        auto& s = *static_cast<Span*>(arg);
        const uintptr_t start = reinterpret_cast<uintptr_t>(o) - m->header_size;
        const uintptr_t end = reinterpret_cast<uintptr_t>(o) + m->elt_size + m->trailer_size;
        ++s.seen;
        if (start < s.base || end > s.end) ++s.outside;
        if (start / s.page != (end - 1) / s.page) ++s.crossing;
      },
      &span);
  EXPECT_EQ(span.seen, 4095u);
  EXPECT_EQ(span.outside, 0u) << "objects past the UMEM the PMD registers";
  EXPECT_EQ(span.crossing, 0u) << "objects across a page boundary";
  rte_mempool_free(mp);

  // A data room that does not make a page is refused, not laid out wrong.
  auto wrong = create_pktmbuf_pool({.name_prefix = "xdp", .mbufs = 63, .data_room = 2048, .page_frames = true});
  EXPECT_FALSE(wrong);
}

TEST(Eal, PoolErrorsAreValues) {
  auto long_name = create_pktmbuf_pool({.name_prefix = "a_name_prefix_that_is_much_too_long", .mbufs = 7});
  ASSERT_FALSE(long_name);
  EXPECT_EQ(long_name.error().code, ENAMETOOLONG);
  EXPECT_NE(long_name.error().message.find("longer than"), std::string::npos) << long_name.error().message;

  auto too_big = create_pktmbuf_pool({.mbufs = 1'000'000});  // ~9 GB: more than -m 256 holds
  ASSERT_FALSE(too_big);
  EXPECT_NE(too_big.error().message.find("rte_pktmbuf_pool_create"), std::string::npos) << too_big.error().message;
}

}  // namespace
}  // namespace uroce::drivers::dpdk
