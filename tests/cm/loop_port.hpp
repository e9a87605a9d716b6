// Two CMs back to back in memory: a MadPort per side that queues MADs on a
// shared in-memory wire, a fake clock and one timer wheel.  The wire can
// drop or duplicate chosen MADs ("the n-th REP", "every REQ") and logs
// every MAD offered to it, delivered or not.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "cm/cm.hpp"

namespace uroce::test {

using namespace uroce::cm;

enum class Fault : uint8_t { Drop, Duplicate };

struct FaultRule {
  std::optional<wire::CmAttr> attr;  // empty: any MAD
  unsigned nth = 1;                  // 1-based among matching MADs; 0: every one
  Fault action = Fault::Drop;
  unsigned seen = 0;
  unsigned hits = 0;
};

struct SentMad {
  int from = 0;  // side 0 (A) or 1 (B)
  MadAddr to;
  MadBuf mad{};
  bool dropped = false;
  uint16_t attr() const { return wire::MadHdrC(mad.data()).attr_id(); }
  const uint8_t* body() const { return mad.data() + kMadHdrSize; }
};

class LoopWire;

class LoopPort final : public MadPort {
 public:
  LoopPort(LoopWire& w, int side) : w_(w), side_(side) {}
  bool send(const MadAddr& to, std::span<const uint8_t> mad) override;

 private:
  LoopWire& w_;
  int side_;
};

class LoopWire {
 public:
  LoopWire() : port_{LoopPort(*this, 0), LoopPort(*this, 1)} {
    addr_[0].gid = ipv4_mapped_gid(0x0A5B000B);  // 10.91.0.11
    addr_[1].gid = ipv4_mapped_gid(0x0A5B000C);  // 10.91.0.12
  }

  MadPort& port(int side) { return port_[side]; }
  const MadAddr& addr(int side) const { return addr_[side]; }
  void attach(int side, Cm* cm) { cm_[side] = cm; }

  FaultRule& add_rule(FaultRule r) { return rules_.emplace_back(r); }
  void clear_rules() { rules_.clear(); }

  void submit(int from, const MadAddr& to, std::span<const uint8_t> mad) {
    SentMad s;
    s.from = from;
    s.to = to;
    std::copy(mad.begin(), mad.end(), s.mad.begin());
    unsigned copies = 1;
    for (FaultRule& r : rules_) {
      if (r.attr && static_cast<uint16_t>(*r.attr) != s.attr()) continue;
      ++r.seen;
      if (r.nth != 0 && r.seen != r.nth) continue;
      ++r.hits;
      copies = r.action == Fault::Drop ? 0 : 2;
    }
    s.dropped = copies == 0;
    log_.push_back(s);
    for (unsigned i = 0; i < copies; ++i) queue_.push_back(s);
  }

  // Rewrite the MAD sent last, before it is delivered (what a peer of
  // another kind would have sent).
  void tamper(const std::function<void(uint8_t* mad)>& f) {
    if (queue_.empty()) return;
    f(queue_.back().mad.data());
    log_.back().mad = queue_.back().mad;
  }

  // Deliver everything queued (and what the answers queue) in order.
  unsigned pump() {
    unsigned n = 0;
    while (!queue_.empty()) {
      SentMad s = queue_.front();
      queue_.pop_front();
      const int to = s.to.gid == addr_[0].gid ? 0 : s.to.gid == addr_[1].gid ? 1 : -1;
      EXPECT_NE(to, -1) << "MAD to an unknown GID";
      EXPECT_NE(to, s.from) << "a CM sent a MAD to itself";
      if (to < 0 || cm_[to] == nullptr) continue;
      EXPECT_EQ(s.to.qpn, kQp1);
      EXPECT_EQ(s.to.qkey, kGsiQkey);
      cm_[to]->on_mad(addr_[s.from], s.mad);
      ++n;
    }
    return n;
  }

  const std::vector<SentMad>& log() const { return log_; }
  unsigned count(wire::CmAttr a, int from = -1) const {
    unsigned n = 0;
    for (const SentMad& s : log_) n += s.attr() == static_cast<uint16_t>(a) && (from < 0 || s.from == from);
    return n;
  }
  void clear_log() { log_.clear(); }

 private:
  LoopPort port_[2];
  MadAddr addr_[2];
  Cm* cm_[2] = {nullptr, nullptr};
  std::vector<FaultRule> rules_;
  std::deque<SentMad> queue_;
  std::vector<SentMad> log_;
};

inline bool LoopPort::send(const MadAddr& to, std::span<const uint8_t> mad) {
  w_.submit(side_, to, mad);
  return true;
}

}  // namespace uroce::test
