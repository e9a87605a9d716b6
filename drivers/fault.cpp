#include "drivers/fault.hpp"

#include <rte_mbuf.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "lib/util/mix64.hpp"

namespace uroce::drivers {

namespace {

__extension__ using u128 = unsigned __int128;

// Hashing: mix64, splitmix64 (lib/util/mix64.hpp).

constexpr uint64_t kNsPerUs = 1000;
constexpr uint64_t kBpsPerMbps = 1'000'000;
constexpr uint64_t kNsPerS = 1'000'000'000;
constexpr uint64_t kBitsPerByte = 8;

// ---- parsing -------------------------------------------------------------------

using Reason = std::optional<std::string>;  // why a value is bad; nullopt: fine

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

std::string quoted(std::string_view v) { return "'" + std::string(v) + "'"; }

// A fixed-point decimal: `v / scale` with the trailing zeros dropped.
std::string decimal(uint64_t v, uint64_t scale) {
  std::string s = std::to_string(v / scale);
  uint64_t frac = v % scale;
  if (frac == 0) return s;
  std::string digits;
  for (uint64_t d = scale / 10; d > 0; d /= 10) {
    digits += static_cast<char>('0' + frac / d);
    frac %= d;
  }
  return s + "." + digits.substr(0, digits.find_last_not_of('0') + 1);
}

std::string range_text(std::string_view lo, std::string_view hi) {
  return "[" + std::string(lo) + ", " + std::string(hi) + "]";
}

Reason parse_real(std::string_view v, double& out) {
  const char* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, out);
  if (ec != std::errc() || p != end || !std::isfinite(out)) return quoted(v) + " is not a number";
  return std::nullopt;
}

Reason parse_real_in(std::string_view v, double lo, double hi, std::string_view range, double& out) {
  if (auto r = parse_real(v, out)) return r;
  if (!(out >= lo && out <= hi)) return quoted(v) + " is outside " + std::string(range);
  return std::nullopt;
}

template <double FaultSpec::*F>
Reason set_probability(std::string_view v, FaultSpec& s) {
  return parse_real_in(v, 0.0, 1.0, "[0, 1]", s.*F);
}

template <class T, T FaultSpec::*F, uint64_t Lo, uint64_t Hi>
Reason set_whole(std::string_view v, FaultSpec& s) {
  uint64_t x = 0;
  const char* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, x);
  const std::string range = range_text(std::to_string(Lo), std::to_string(Hi));
  if (ec == std::errc::result_out_of_range) return quoted(v) + " is outside " + range;
  if (ec != std::errc() || p != end) return quoted(v) + " is not a whole number";
  if (x < Lo || x > Hi) return quoted(v) + " is outside " + range;
  s.*F = static_cast<T>(x);
  return std::nullopt;
}

// A time in microseconds, stored in nanoseconds.
template <uint64_t FaultSpec::*F, uint64_t LoNs, uint64_t HiNs>
Reason set_micros(std::string_view v, FaultSpec& s) {
  const std::string range = range_text(decimal(LoNs, kNsPerUs), decimal(HiNs, kNsPerUs));
  double us = 0;
  if (auto r = parse_real(v, us)) return r;
  const double ns = std::round(us * kNsPerUs);
  if (!(ns >= static_cast<double>(LoNs) && ns <= static_cast<double>(HiNs))) {
    return quoted(v) + " is outside " + range;
  }
  s.*F = static_cast<uint64_t>(ns);
  return std::nullopt;
}

Reason set_rate(std::string_view v, FaultSpec& s) {
  double mbps = 0;
  const double max_mbps = static_cast<double>(kMaxRateBps / kBpsPerMbps);
  if (auto r = parse_real_in(v, 0.0, max_mbps, range_text("0", std::to_string(kMaxRateBps / kBpsPerMbps)), mbps)) {
    return r;
  }
  s.rate_bps = static_cast<uint64_t>(std::llround(mbps * kBpsPerMbps));
  return std::nullopt;
}

Reason set_dir(std::string_view v, FaultSpec& s) {
  if (v == "rx") {
    s.dir = FaultDir::kRx;
  } else if (v == "tx") {
    s.dir = FaultDir::kTx;
  } else if (v == "both") {
    s.dir = FaultDir::kBoth;
  } else {
    return quoted(v) + " is not rx, tx or both";
  }
  return std::nullopt;
}

struct KeyDef {
  std::string_view name;
  Reason (*apply)(std::string_view value, FaultSpec& spec);
};

constexpr KeyDef kKeys[] = {
    {"drop", &set_probability<&FaultSpec::drop>},
    {"dup", &set_probability<&FaultSpec::dup>},
    {"reorder", &set_probability<&FaultSpec::reorder>},
    {"reorder_window", &set_whole<uint32_t, &FaultSpec::reorder_window, 1, kMaxReorderWindow>},
    {"reorder_hold_us", &set_micros<&FaultSpec::reorder_hold_ns, 1, kMaxFaultTimeNs>},
    {"corrupt", &set_probability<&FaultSpec::corrupt>},
    {"corrupt_bits", &set_whole<uint32_t, &FaultSpec::corrupt_bits, 1, kMaxCorruptBits>},
    {"delay_us", &set_micros<&FaultSpec::delay_ns, 0, kMaxFaultTimeNs>},
    {"jitter_us", &set_micros<&FaultSpec::jitter_ns, 0, kMaxFaultTimeNs>},
    {"rate_mbps", &set_rate},
    {"ce", &set_probability<&FaultSpec::ce>},
    {"ecn_mark_us", &set_micros<&FaultSpec::ecn_mark_ns, 0, kMaxFaultTimeNs>},
    {"dir", &set_dir},
    {"seed", &set_whole<uint64_t, &FaultSpec::seed, 0, std::numeric_limits<uint64_t>::max()>},
};
constexpr size_t kKeyCount = std::size(kKeys);

std::string known_keys() {
  std::string s;
  for (const auto& k : kKeys) s += (s.empty() ? "" : ", ") + std::string(k.name);
  return s;
}

Error spec_error(std::string_view key, std::string_view reason) {
  return Error{EINVAL, std::string(key) + ": " + std::string(reason)};
}

std::string shortest(double v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, p) : std::string("nan");
}

const char* dir_name(FaultDir d) {
  switch (d) {
    case FaultDir::kRx: return "rx";
    case FaultDir::kTx: return "tx";
    case FaultDir::kBoth: return "both";
  }
  return "?";
}

Reason check_probability(double p) {
  if (!(p >= 0.0 && p <= 1.0)) return shortest(p) + " is outside [0, 1]";
  return std::nullopt;
}

Reason check_range(uint64_t v, uint64_t lo, uint64_t hi, const std::string& range) {
  if (v < lo || v > hi) return std::to_string(v) + " is outside " + range;
  return std::nullopt;
}

}  // namespace

// ---- FaultSpec --------------------------------------------------------------------

Status validate(const FaultSpec& s) {
  const std::string time_range = range_text("0", std::to_string(kMaxFaultTimeNs)) + " ns";
  const std::pair<std::string_view, Reason> checks[] = {
      {"drop", check_probability(s.drop)},
      {"dup", check_probability(s.dup)},
      {"reorder", check_probability(s.reorder)},
      {"reorder_window", check_range(s.reorder_window, 1, kMaxReorderWindow,
                                     range_text("1", std::to_string(kMaxReorderWindow)))},
      {"reorder_hold_us", check_range(s.reorder_hold_ns, 1, kMaxFaultTimeNs,
                                      range_text("1", std::to_string(kMaxFaultTimeNs)) + " ns")},
      {"corrupt", check_probability(s.corrupt)},
      {"corrupt_bits", check_range(s.corrupt_bits, 1, kMaxCorruptBits,
                                   range_text("1", std::to_string(kMaxCorruptBits)))},
      {"delay_us", check_range(s.delay_ns, 0, kMaxFaultTimeNs, time_range)},
      {"jitter_us", check_range(s.jitter_ns, 0, kMaxFaultTimeNs, time_range)},
      {"rate_mbps", check_range(s.rate_bps, 0, kMaxRateBps, range_text("0", std::to_string(kMaxRateBps)) + " bit/s")},
      {"ce", check_probability(s.ce)},
      {"ecn_mark_us", s.ecn_mark_ns != 0 && s.rate_bps == 0
                          ? Reason{"marks frames that wait for the link: it needs rate_mbps"}
                          : check_range(s.ecn_mark_ns, 0, kMaxFaultTimeNs, time_range)},
      {"dir", s.dir == FaultDir::kRx || s.dir == FaultDir::kTx || s.dir == FaultDir::kBoth
                  ? Reason{}
                  : Reason{std::to_string(static_cast<unsigned>(s.dir)) + " is not rx, tx or both"}},
  };
  for (const auto& [key, reason] : checks) {
    if (reason) return spec_error(key, *reason);
  }
  return {};
}

Result<FaultSpec> parse_fault_spec(std::string_view text) {
  FaultSpec spec;
  std::array<bool, kKeyCount> seen{};
  if (trim(text).empty()) return spec;
  size_t item_no = 0;
  while (true) {
    ++item_no;
    const size_t comma = text.find(',');
    const std::string_view item = trim(text.substr(0, comma));
    if (item.empty()) return spec_error("item " + std::to_string(item_no), "empty (two commas in a row?)");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return spec_error(item, "expected key=value");
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    const auto* def = std::find_if(std::begin(kKeys), std::end(kKeys), [&](const KeyDef& k) { return k.name == key; });
    if (def == std::end(kKeys)) return spec_error(key, "unknown key (known: " + known_keys() + ")");
    const size_t index = static_cast<size_t>(def - std::begin(kKeys));
    if (seen[index]) return spec_error(key, "given twice");
    seen[index] = true;
    if (value.empty()) return spec_error(key, "empty value");
    if (Reason r = def->apply(value, spec)) return spec_error(key, *r);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (Status st = validate(spec); !st) return st.error();  // rules across keys (ecn_mark_us needs rate_mbps)
  return spec;
}

std::string to_string(const FaultSpec& s) {
  return "drop=" + shortest(s.drop) + ",dup=" + shortest(s.dup) + ",reorder=" + shortest(s.reorder) +
         ",reorder_window=" + std::to_string(s.reorder_window) +
         ",reorder_hold_us=" + decimal(s.reorder_hold_ns, kNsPerUs) + ",corrupt=" + shortest(s.corrupt) +
         ",corrupt_bits=" + std::to_string(s.corrupt_bits) + ",delay_us=" + decimal(s.delay_ns, kNsPerUs) +
         ",jitter_us=" + decimal(s.jitter_ns, kNsPerUs) + ",rate_mbps=" + decimal(s.rate_bps, kBpsPerMbps) +
         ",ce=" + shortest(s.ce) + ",ecn_mark_us=" + decimal(s.ecn_mark_ns, kNsPerUs) + ",dir=" + dir_name(s.dir) + ",seed=" + std::to_string(s.seed);
}

std::optional<Result<FaultSpec>> fault_spec_from_env() {
  const char* v = std::getenv(std::string(kFaultsEnv).c_str());
  if (v == nullptr) return std::nullopt;
  return parse_fault_spec(v);
}

// ---- FaultInjector -------------------------------------------------------------------

FaultInjector::Chance FaultInjector::chance(double p) noexcept {
  if (p >= 1.0) return Chance{0, true};
  if (!(p > 0.0)) return Chance{};
  return Chance{static_cast<uint64_t>(std::ldexp(p, 64)), false};
}

uint64_t FaultInjector::draw(Stream s, uint64_t seq, uint64_t j) const noexcept {
  return mix64(keys_[static_cast<size_t>(s)] ^ mix64(seq ^ mix64(j + kGolden64)));
}

bool FaultInjector::roll(Stream s, uint64_t seq, Chance c) const noexcept {
  if (c.always) return true;
  return c.threshold != 0 && draw(s, seq) < c.threshold;
}

uint64_t FaultInjector::uniform(Stream s, uint64_t seq, uint64_t j, uint64_t bound) const noexcept {
  return static_cast<uint64_t>((static_cast<u128>(draw(s, seq, j)) * bound) >> 64);
}

Status FaultInjector::configure(const FaultSpec& spec, uint64_t stream) {
  if (held_n_ != 0) return Error{EBUSY, "FaultInjector::configure: frames are held; release_all() first"};
  if (Status st = validate(spec); !st) return st;
  spec_ = spec;
  active_ = spec.active();
  uint64_t state = spec.seed ^ mix64(stream + kGolden64);
  for (auto& k : keys_) k = splitmix64(state);
  drop_ = chance(spec.drop);
  dup_ = chance(spec.dup);
  reorder_ = chance(spec.reorder);
  corrupt_ = chance(spec.corrupt);
  ce_ = chance(spec.ce);
  held_.assign(reorder_.never() ? 0 : spec.reorder_window, Held{});
  next_seq_ = 0;
  // link_free_ns_ and last_due_ns_ stay: frames already queued keep their order.
  return {};
}

void FaultInjector::submit(rte_mbuf* m, uint64_t now_ns, rte_mempool* copy_pool, DelayQueue& out) noexcept {
  const uint64_t seq = next_seq_++;
  if (!active_) {
    schedule(m, seq, 0, now_ns, out);
    return;
  }
  if (roll(Stream::kDrop, seq, drop_)) {
    rte_pktmbuf_free(m);
    ++counters_[FaultCounter::kDropped];
    return;
  }
  if (roll(Stream::kCorrupt, seq, corrupt_)) {
    corrupt(m, seq);
    ++counters_[FaultCounter::kCorrupted];
  }
  if (roll(Stream::kCe, seq, ce_) && mark_ce(m)) ++counters_[FaultCounter::kCeMarked];
  rte_mbuf* twin = nullptr;
  if (roll(Stream::kDup, seq, dup_)) {
    twin = rte_pktmbuf_copy(m, copy_pool, 0, UINT32_MAX);
    ++counters_[twin != nullptr ? FaultCounter::kDuplicated : FaultCounter::kNoMbuf];
  }
  if (roll(Stream::kReorder, seq, reorder_) && held_n_ < held_.size()) {
    hold(m, seq, now_ns);
  } else {
    emit(m, seq, 0, now_ns, out);
  }
  if (twin != nullptr) emit(twin, seq, 1, now_ns, out);
}

void FaultInjector::corrupt(rte_mbuf* m, uint64_t seq) noexcept {
  const uint64_t nbits = uint64_t{m->pkt_len} * kBitsPerByte;
  const uint64_t want = std::min<uint64_t>(spec_.corrupt_bits, nbits);
  std::array<uint64_t, kMaxCorruptBits> chosen{};
  uint64_t k = 0;
  for (uint64_t j = 0; k < want; ++j) {
    const uint64_t bit = uniform(Stream::kCorruptBit, seq, j, nbits);
    if (std::find(chosen.begin(), chosen.begin() + static_cast<ptrdiff_t>(k), bit) != chosen.begin() + static_cast<ptrdiff_t>(k)) {
      continue;
    }
    chosen[k++] = bit;
    uint64_t off = bit / kBitsPerByte;
    rte_mbuf* seg = m;
    while (off >= seg->data_len) {
      off -= seg->data_len;
      seg = seg->next;
    }
    *rte_pktmbuf_mtod_offset(seg, uint8_t*, off) ^= static_cast<uint8_t>(1u << (bit % kBitsPerByte));
  }
}

void FaultInjector::hold(rte_mbuf* m, uint64_t seq, uint64_t now_ns) noexcept {
  const auto overtakers = static_cast<uint32_t>(1 + uniform(Stream::kReorderDepth, seq, 0, spec_.reorder_window));
  held_[held_n_++] = Held{m, seq, overtakers, now_ns + spec_.reorder_hold_ns};
  ++counters_[FaultCounter::kReordered];
}

void FaultInjector::emit(rte_mbuf* m, uint64_t seq, uint64_t copy, uint64_t now_ns, DelayQueue& out) noexcept {
  schedule(m, seq, copy, now_ns, out);
  if (held_n_ == 0) return;
  pass_held(seq);
  release_ready(now_ns, out);
}

// A frame newer than a held one has gone by it.
void FaultInjector::pass_held(uint64_t seq) noexcept {
  for (uint32_t i = 0; i < held_n_; ++i) {
    if (held_[i].seq < seq && held_[i].remaining > 0) --held_[i].remaining;
  }
}

// Sends on held frames that have been overtaken enough, oldest first: a
// released frame may itself overtake an older held frame, so each release
// passes the rest before the next oldest ready one is chosen.  A frame
// held for K is thus overtaken by exactly K newer frames (fewer if its
// hold time ran out).
void FaultInjector::release_ready(uint64_t now_ns, DelayQueue& out) noexcept {
  while (true) {
    uint32_t pick = held_n_;
    for (uint32_t i = 0; i < held_n_; ++i) {
      if (held_[i].remaining == 0 && (pick == held_n_ || held_[i].seq < held_[pick].seq)) pick = i;
    }
    if (pick == held_n_) return;
    const Held h = held_[pick];
    held_[pick] = held_[--held_n_];
    schedule(h.m, h.seq, 0, now_ns, out);
    pass_held(h.seq);
  }
}

void FaultInjector::release_expired(uint64_t now_ns, DelayQueue& out) noexcept {
  if (held_n_ == 0) return;
  for (uint32_t i = 0; i < held_n_; ++i) {
    if (held_[i].deadline_ns <= now_ns) held_[i].remaining = 0;
  }
  release_ready(now_ns, out);
}

void FaultInjector::release_all(uint64_t now_ns, DelayQueue& out) noexcept {
  for (uint32_t i = 0; i < held_n_; ++i) held_[i].remaining = 0;
  release_ready(now_ns, out);
}

void FaultInjector::discard_held() noexcept {
  for (uint32_t i = 0; i < held_n_; ++i) rte_pktmbuf_free(held_[i].m);
  held_n_ = 0;
}

// Timing: wait for the link (rate cap), then the fixed delay plus jitter;
// never due before the frame ahead, so the queue stays in order.
void FaultInjector::schedule(rte_mbuf* m, uint64_t seq, uint64_t copy, uint64_t now_ns, DelayQueue& out) noexcept {
  if (out.full()) {
    rte_pktmbuf_free(m);
    ++counters_[FaultCounter::kQueueFull];
    return;
  }
  uint64_t due = now_ns;
  if (spec_.rate_bps != 0) {
    const uint64_t start = std::max(now_ns, link_free_ns_);
    if (start > now_ns) ++counters_[FaultCounter::kRateLimited];
    if (spec_.ecn_mark_ns != 0 && start - now_ns > spec_.ecn_mark_ns && mark_ce(m)) ++counters_[FaultCounter::kCeMarked];
    const u128 bits_ns = static_cast<u128>(m->pkt_len) * kBitsPerByte * kNsPerS;
    link_free_ns_ = start + static_cast<uint64_t>((bits_ns + spec_.rate_bps - 1) / spec_.rate_bps);
    due = link_free_ns_;
  }
  uint64_t extra = spec_.delay_ns;
  if (spec_.jitter_ns != 0) extra += uniform(Stream::kJitter, seq, copy, spec_.jitter_ns + 1);
  if (extra != 0) {
    due += extra;
    ++counters_[FaultCounter::kDelayed];
  }
  due = std::max(due, last_due_ns_);
  last_due_ns_ = due;
  out.push(m, due);
}

// ECN (RFC 3168) CE on an ECN-capable IPv4 or IPv6 frame (behind up to two
// 802.1Q tags); false when it is not one (not IP, Not-ECT) or already CE.
// IPv4's header checksum is updated (RFC 1624).
bool FaultInjector::mark_ce(rte_mbuf* m) noexcept {
  constexpr size_t kEthTypeOff = 12, kVlanLen = 4, kIpv4MinLen = 20, kIpv6HdrLen = 40;
  constexpr uint16_t kIpv4 = 0x0800, kIpv6 = 0x86DD, kVlan = 0x8100, kQinQ = 0x88A8;
  constexpr uint8_t kEcnMask = 0x03, kCe = 0x03;
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  const size_t len = m->data_len;
  size_t off = kEthTypeOff;
  for (int tags = 0; tags <= 2; ++tags) {
    if (off + 2 > len) return false;
    const uint16_t type = static_cast<uint16_t>(f[off] << 8 | f[off + 1]);
    if (type == kVlan || type == kQinQ) {
      off += kVlanLen;
      continue;
    }
    uint8_t* ip = f + off + 2;
    const size_t room = len - off - 2;
    if (type == kIpv4 && room >= kIpv4MinLen) {
      const uint8_t ecn = ip[1] & kEcnMask;
      if (ecn == 0 || ecn == kCe) return false;
      const uint16_t old_word = static_cast<uint16_t>(ip[0] << 8 | ip[1]);
      ip[1] |= kCe;
      const uint16_t new_word = static_cast<uint16_t>(ip[0] << 8 | ip[1]);
      // HC' = ~(~HC + ~m + m') (RFC 1624 eqn. 3)
      uint32_t sum = static_cast<uint16_t>(~(ip[10] << 8 | ip[11])) + static_cast<uint16_t>(~old_word) + new_word;
      sum = (sum & 0xFFFF) + (sum >> 16);
      sum = (sum & 0xFFFF) + (sum >> 16);
      const uint16_t csum = static_cast<uint16_t>(~sum);
      ip[10] = static_cast<uint8_t>(csum >> 8);
      ip[11] = static_cast<uint8_t>(csum);
      return true;
    }
    if (type == kIpv6 && room >= kIpv6HdrLen) {
      const uint8_t ecn = (ip[1] >> 4) & kEcnMask;  // traffic class = version:4 | tc:8 | flow:20
      if (ecn == 0 || ecn == kCe) return false;
      ip[1] |= kCe << 4;
      return true;
    }
    return false;
  }
  return false;
}

// ---- FaultPort ---------------------------------------------------------------------------

FaultPort::FaultPort(Port& inner, const FaultSpec& spec, const FaultPortConfig& config)
    : inner_(inner), spec_(spec), clock_(config.clock != nullptr ? config.clock : &own_clock_) {
  rx_q_.reset(config.queue_frames);
  tx_q_.reset(config.queue_frames);
}

Result<std::unique_ptr<FaultPort>> FaultPort::create(Port& inner, const FaultSpec& spec,
                                                     const FaultPortConfig& config) {
  if (Status st = validate(spec); !st) return st.error();
  if (config.queue_frames == 0) return Error{EINVAL, "queue_frames: must be at least 1"};
  std::unique_ptr<FaultPort> p(new FaultPort(inner, spec, config));
  const FaultSpec none{};
  if (Status st = p->rx_.configure(applies(spec.dir, FaultDir::kRx) ? spec : none, kRxStream); !st) return st.error();
  if (Status st = p->tx_.configure(applies(spec.dir, FaultDir::kTx) ? spec : none, kTxStream); !st) return st.error();
  return Result<std::unique_ptr<FaultPort>>(std::move(p));
}

FaultPort::~FaultPort() {
  rx_.discard_held();
  tx_.discard_held();
}

uint16_t FaultPort::rx_burst(rte_mbuf** pkts, uint16_t n) {
  const uint64_t now = now_ns();
  flush_tx(now);
  if (!rx_.active() && rx_q_.empty()) return inner_.rx_burst(pkts, n);
  pull_rx(now);
  rx_.release_expired(now, rx_q_);
  return rx_q_.pop_due(now, pkts, n);
}

uint16_t FaultPort::tx_burst(rte_mbuf** pkts, uint16_t n) {
  const uint64_t now = now_ns();
  if (!tx_.active() && tx_q_.empty()) return inner_.tx_burst(pkts, n);
  for (uint16_t i = 0; i < n; ++i) tx_.submit(pkts[i], now, inner_.pool(), tx_q_);
  flush_tx(now);
  return n;
}

void FaultPort::pull_rx(uint64_t now_ns) noexcept {
  rte_mbuf* buf[kBurst];
  const uint16_t k = inner_.rx_burst(buf, kBurst);
  for (uint16_t i = 0; i < k; ++i) rx_.submit(buf[i], now_ns, inner_.pool(), rx_q_);
}

// Hands due frames to the inner port; what it refuses stays queued, in order.
void FaultPort::flush_tx(uint64_t now_ns) noexcept {
  if (tx_q_.empty() && tx_.held() == 0) return;
  tx_.release_expired(now_ns, tx_q_);
  rte_mbuf* buf[kBurst];
  while (true) {
    const uint16_t k = tx_q_.peek_due(now_ns, buf, kBurst);
    if (k == 0) return;
    const uint16_t sent = inner_.tx_burst(buf, k);
    tx_q_.consume(sent);
    if (sent < k) return;
  }
}

PortStats FaultPort::stats() const {
  PortStats s = inner_.stats();
  s.rx_dropped += rx_.counters().lost();
  s.tx_dropped += tx_.counters().lost();
  return s;
}

const FaultCounters& FaultPort::counters(FaultDir d) const noexcept {
  return d == FaultDir::kTx ? tx_.counters() : rx_.counters();
}

uint32_t FaultPort::queued(FaultDir d) const noexcept {
  return d == FaultDir::kTx ? tx_q_.size() + tx_.held() : rx_q_.size() + rx_.held();
}

}  // namespace uroce::drivers
