// Counter sets: one counter per event and per drop reason (STYLE 13), with
// a name table so that every counter is visible to users (`uroce stats`,
// DPDK telemetry).
//
// A set is declared with an X-macro list of (identifier, description):
//
//   #define MY_COUNTERS(X) X(rx_frames, "frames received") X(...)
//   UROCE_COUNTER_ENUM(MyCtr, MY_COUNTERS)
//   using MyCounters = CounterSet<MyCtr, kMyCtrInfo>;
//
// Threads: one writer (the thread that drives the engine) and any number
// of readers.  Each counter is an atomic written with relaxed
// load+store by its single writer (no read-modify-write needed) and read
// relaxed; readers see each counter's value tear-free, not a snapshot
// across counters.  A set several threads write (set_shared: an RNIC
// whose QPs run on several lcores) adds with fetch_add.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce {

struct CounterInfo {
  std::string_view name;
  std::string_view help;
};

#define UROCE_COUNTER_ENUM_ITEM(name, help) name,
#define UROCE_COUNTER_INFO_ITEM(name, help) ::uroce::CounterInfo{#name, help},

// Declares `enum class Enum` and `kEnumInfo`, the name table.
#define UROCE_COUNTER_ENUM(Enum, LIST)                                      \
  enum class Enum : uint16_t { LIST(UROCE_COUNTER_ENUM_ITEM) };             \
  inline constexpr auto k##Enum##Info = std::to_array<::uroce::CounterInfo>( \
      {LIST(UROCE_COUNTER_INFO_ITEM)});

template <class Enum, const auto& Info>
class CounterSet {
 public:
  static constexpr size_t kSize = std::tuple_size_v<std::remove_cvref_t<decltype(Info)>>;

  // Writer side.
  void add(Enum c, uint64_t n = 1) noexcept {
    auto& v = v_[static_cast<size_t>(c)];
    if (shared_) {
      v.fetch_add(n, std::memory_order_relaxed);
    } else {
      v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
  }
  // Several writer threads (a device's engine on several lcores): each
  // add is one atomic read-modify-write instead of a load and a store.
  // Set before any writer runs.
  void set_shared(bool on) noexcept { shared_ = on; }
  void inc(Enum c) noexcept { add(c, 1); }
  void reset() noexcept {
    for (auto& v : v_) v.store(0, std::memory_order_relaxed);
  }

  // Reader side.
  uint64_t get(Enum c) const noexcept { return v_[static_cast<size_t>(c)].load(std::memory_order_relaxed); }
  uint64_t at(size_t i) const noexcept { return v_[i].load(std::memory_order_relaxed); }
  static constexpr size_t size() noexcept { return kSize; }
  static constexpr const CounterInfo& info(size_t i) noexcept { return Info[i]; }
  static constexpr std::string_view name(Enum c) noexcept { return Info[static_cast<size_t>(c)].name; }

  // Calls f(name, help, value) for every counter, in declaration order.
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < kSize; ++i) f(Info[i].name, Info[i].help, at(i));
  }

 private:
  std::array<std::atomic<uint64_t>, kSize> v_{};
  bool shared_ = false;
};

}  // namespace uroce
