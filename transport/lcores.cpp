// Lcores: see lcores.hpp.
#include "transport/lcores.hpp"

#include <rte_mbuf.h>
#include <rte_pause.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "transport/engine.hpp"

namespace uroce::transport {
// ---- LanePort -------------------------------------------------------------------

LanePort::LanePort(drivers::Port& tx, unsigned index) : tx_(tx), index_(index) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

LanePort::~LanePort() {
  rte_mbuf* m = nullptr;
  while (ring_.pop(m)) rte_pktmbuf_free(m);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string LanePort::name() const { return tx_.name() + "/lane" + std::to_string(index_); }

unsigned LanePort::push(rte_mbuf* const* pkts, unsigned n) noexcept {
  unsigned took = 0;
  while (took < n && ring_.bounded_push(pkts[took])) ++took;
  if (took == 0) return 0;
  pushed_.fetch_add(took, std::memory_order_seq_cst);
  // Either the lane sees the frames before it waits, or we see it waiting.
  if (waiting_.load(std::memory_order_seq_cst)) wake();
  return took;
}

void LanePort::wake_if_waiting() noexcept {
  if (waiting_.load(std::memory_order_seq_cst)) wake();
}

void LanePort::wake() noexcept {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof(one));
}

uint16_t LanePort::rx_burst(rte_mbuf** pkts, uint16_t n) {
  uint16_t k = 0;
  while (k < n && ring_.pop(pkts[k])) ++k;
  taken_ += k;
  return k;
}

bool LanePort::prepare_wait() {
  waiting_.store(true, std::memory_order_seq_cst);
  return pushed_.load(std::memory_order_seq_cst) == taken_;
}

void LanePort::end_wait() {
  waiting_.store(false, std::memory_order_relaxed);
  uint64_t v;
  [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &v, sizeof(v));
}

// ---- Lcores -------------------------------------------------------------------

Lcores::Lcores(Engine& control, drivers::Port& tx, unsigned n)
    : control_(control), tx_(tx), n_(n), lanes_(new Lane[n]) {
  ports_.push_back(std::make_unique<LanePort>(tx_, 0));
  for (unsigned i = 1; i < n_; ++i) {
    ports_.push_back(std::make_unique<LanePort>(tx_, i));
    EngineConfig ec = control_.config();
    // A worker answers no host traffic, announces nothing, captures
    // nothing; its neighbours are lcore 0's (send_via_control).
    ec.answer_host = false;
    ec.announce = false;
    ec.pcap_path.clear();
    ec.kernel_neigh = {};
    ec.next_hop = {};
    ec.lcores = 1;
    workers_.push_back(std::make_unique<Engine>(*ports_.back(), std::move(ec)));
    workers_.back()->join_lcores(this, i, ports_.back().get());
  }
}

Lcores::~Lcores() {
  stop();
  workers_.clear();
  ports_.clear();
  ControlTx e{};
  while (control_tx_.pop(e)) rte_pktmbuf_free(e.m);
}

drivers::Status Lcores::init() {
  for (auto& p : ports_)
    if (!p->ok()) return drivers::Error{EMFILE, "engine_lcores: no eventfd for " + p->name()};
  for (auto& w : workers_)
    if (auto st = w->init(); !st) return st;
  return {};
}

Engine& Lcores::engine(unsigned i) noexcept { return i == 0 ? control_ : *workers_[i - 1]; }

void Lcores::start(const std::function<void()>& on_start, const std::function<void()>& on_exit) {
  for (auto& w : workers_) w->start(on_start, on_exit);
}

void Lcores::stop() {
  for (unsigned i = 1; i < n_; ++i) {
    workers_[i - 1]->stop();
    lanes_[i].running.store(false, std::memory_order_seq_cst);
  }
}

bool Lcores::hand_off(unsigned to, rte_mbuf* m) noexcept {
  if (ports_[to]->push(&m, 1) != 1) return false;
  if (to == 0) control_.progress().rung();  // a sleeping lcore 0 (idle_wait) waits on the port, not on this ring
  return true;
}

void Lcores::park(Lane& l) noexcept {
  do {
    l.running.store(false, std::memory_order_seq_cst);
    while (want_.load(std::memory_order_seq_cst)) rte_pause();
    l.running.store(true, std::memory_order_seq_cst);
  } while (want_.load(std::memory_order_seq_cst));
}

Lcores::Exclusive::Exclusive(Lcores* l) noexcept : l_(l) {
  if (l_ == nullptr) return;
  if (l_->exclusive_here()) {
    ++l_->depth_;
    return;
  }
  l_->excl_mu_.lock();
  l_->holder_.store(std::this_thread::get_id(), std::memory_order_release);
  l_->depth_ = 1;
  l_->want_.store(true, std::memory_order_seq_cst);
  for (unsigned i = 1; i < l_->n_; ++i) {
    Engine& w = l_->engine(i);
    // A worker that naps or sleeps reaches its checkpoint when it wakes:
    // wake it now.
    w.progress().rung();
    l_->ports_[i]->wake();
    while (l_->lanes_[i].running.load(std::memory_order_seq_cst)) rte_pause();
    w.resync_clock();
  }
}

Lcores::Exclusive::~Exclusive() {
  if (l_ == nullptr) return;
  if (--l_->depth_ != 0) return;
  l_->holder_.store(std::thread::id{}, std::memory_order_release);
  l_->want_.store(false, std::memory_order_seq_cst);
  l_->excl_mu_.unlock();
}

bool Lcores::send_via_control(const IpAddr& dst, rte_mbuf* m, TxKind kind) noexcept {
  if (!control_tx_.bounded_push(ControlTx{m, dst, kind})) return false;
  control_.progress().rung();
  return true;
}

unsigned Lcores::drain_control_tx() noexcept {
  ControlTx e{};
  unsigned total = 0;
  while (control_tx_.pop(e)) {
    control_.send_to(e.dst, e.m, e.kind);
    ++total;
  }
  return total;
}

}  // namespace uroce::transport
