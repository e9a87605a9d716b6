// The GSI binding of the CM: MADs as UD SENDs on QP 1 (see gsi_port.hpp).
#include "cm/gsi_port.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lib/wire/bytes.hpp"

namespace uroce::cm {
namespace {

constexpr uint64_t kRecvTag = 1ull << 63;  // wr_id: receive slots have it, send slots do not

}  // namespace

GsiPort::~GsiPort() { close(); }

int GsiPort::open() {
  int err = 0;
  pd_ = rnic_.alloc_pd(&err);
  if (pd_ == nullptr) return err;
  cq_ = rnic_.create_cq(static_cast<int>(kRecvSlots + kSendSlots), this, nullptr, 0, &err);
  if (cq_ == nullptr) return close(), err;
  ibv_qp_init_attr init{};
  init.send_cq = reinterpret_cast<ibv_cq*>(cq_);
  init.recv_cq = reinterpret_cast<ibv_cq*>(cq_);
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = kSendSlots;
  init.cap.max_recv_wr = kRecvSlots;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = rnic_.create_gsi_qp(pd_, init, &err);
  if (qp_ == nullptr) return close(), err;

  bufs_.assign(kRecvSlots + kSendSlots, Slot{});
  const auto addr = reinterpret_cast<uint64_t>(bufs_.data());
  mr_ = rnic_.reg_mr(pd_, bufs_.data(), bufs_.size() * sizeof(Slot), addr, IBV_ACCESS_LOCAL_WRITE, &err);
  if (mr_ == nullptr) return close(), err;

  // RESET -> INIT -> RTR -> RTS with the GSI Q_Key (IBA 13.4.6.1).
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.qkey = kGsiQkey.value();
  int rc = qp_->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_QKEY);  // QP 1 has no port attribute to set
  if (rc == 0) {
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    rc = qp_->modify(a, IBV_QP_STATE);
  }
  if (rc == 0) {
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    rc = qp_->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  if (rc != 0) return close(), rc;
  for (uint32_t i = 0; i < kRecvSlots; ++i) {
    if (!post_recv(i)) return close(), ENOMEM;
  }
  return 0;
}

void GsiPort::close() {
  if (qp_ != nullptr) rnic_.destroy_qp(qp_);
  qp_ = nullptr;
  backlog_.clear();
  if (mr_ != nullptr) rnic_.dereg_mr(mr_);
  mr_ = nullptr;
  if (cq_ != nullptr) rnic_.destroy_cq(cq_);
  cq_ = nullptr;
  for (auto& [gid, e] : ahs_) rnic_.destroy_ah(e.ah);
  ahs_.clear();
  ah_gauge_.store(0, std::memory_order_relaxed);
  if (pd_ != nullptr) rnic_.dealloc_pd(pd_);
  pd_ = nullptr;
}

bool GsiPort::post_recv(uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(bufs_[slot].data()), static_cast<uint32_t>(sizeof(Slot)),
              mr_->lkey.value()};
  ibv_recv_wr wr{};
  wr.wr_id = kRecvTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  return qp_->post_recv(&wr, &bad) == 0;
}

// The address handle of a peer: our GID of the same family as the peer's
// (the engine's source address toward it) and the peer's GID.  Made with
// Rnic::create_ah, whose engine part runs here at once (no lock is held
// across the engine: DESIGN.md "Threads").
rnic::Ah* GsiPort::ah_for(const MadAddr& to) {
  if (auto it = ahs_.find(to.gid); it != ahs_.end()) {
    it->second.used = ++use_clock_;
    return it->second.ah;
  }
  transport::IpAddr dst;
  std::memcpy(dst.bytes.data(), to.gid.data(), 16);
  const auto src = rnic_.engine().config().local.source_for(dst);
  if (!src) return nullptr;
  const int sgid = rnic_.find_gid(src->bytes);
  if (sgid < 0) return nullptr;
  ibv_ah_attr attr{};
  attr.is_global = 1;
  attr.port_num = 1;
  attr.grh.sgid_index = static_cast<uint8_t>(sgid);
  attr.grh.hop_limit = 64;
  std::memcpy(attr.grh.dgid.raw, to.gid.data(), 16);
  int err = 0;
  rnic::Ah* ah = rnic_.create_ah(pd_, attr, &err);
  if (ah == nullptr) return nullptr;
  if (ahs_.size() >= kMaxAhs) {
    auto oldest = ahs_.begin();
    for (auto it = ahs_.begin(); it != ahs_.end(); ++it)
      if (it->second.used < oldest->second.used) oldest = it;
    rnic_.destroy_ah(oldest->second.ah);
    ahs_.erase(oldest);
    ctr_.inc(GsiCtr::ah_evicted);
  }
  ahs_.emplace(to.gid, AhEntry{ah, ++use_clock_});
  ah_gauge_.store(ahs_.size(), std::memory_order_relaxed);
  return ah;
}

bool GsiPort::send(const MadAddr& to, std::span<const uint8_t> mad) {
  UROCE_ASSERT_ENGINE(rnic_.engine());
  if (qp_ == nullptr || mad.size() > wire::kMadSize) return false;
  if (send_busy_ >= kSendSlots || !backlog_.empty()) {  // behind the ones already waiting
    if (backlog_.size() >= kMaxBacklog) {
      ctr_.inc(GsiCtr::tx_no_slot);
      return false;
    }
    Queued& q = backlog_.emplace_back();
    q.to = to;
    std::copy(mad.begin(), mad.end(), q.mad.begin());
    q.len = static_cast<uint16_t>(mad.size());
    ctr_.inc(GsiCtr::tx_queued);
    return true;
  }
  return post_send(to, mad);
}

bool GsiPort::post_send(const MadAddr& to, std::span<const uint8_t> mad) {
  rnic::Ah* ah = ah_for(to);
  if (ah == nullptr) {
    ctr_.inc(GsiCtr::tx_no_ah);
    return false;
  }
  const uint32_t slot = kRecvSlots + send_next_;
  send_next_ = (send_next_ + 1) % kSendSlots;
  std::memcpy(bufs_[slot].data(), mad.data(), mad.size());
  ibv_sge sge{reinterpret_cast<uint64_t>(bufs_[slot].data()), static_cast<uint32_t>(mad.size()), mr_->lkey.value()};
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = &ah->ibv;
  wr.wr.ud.remote_qpn = to.qpn.value();
  wr.wr.ud.remote_qkey = to.qkey.value();
  const ibv_send_wr* bad = nullptr;
  if (qp_->post_send(&wr, &bad) != 0) {
    ctr_.inc(GsiCtr::tx_post_failed);
    return false;
  }
  ++send_busy_;
  ctr_.inc(GsiCtr::tx_posted);
  return true;
}

void GsiPort::on_completion(rnic::Cq::PushHook wake, void* arg) noexcept {
  UROCE_ASSERT_ENGINE(rnic_.engine());
  if (cq_ != nullptr) cq_->set_push_hook(wake, arg);
}

unsigned GsiPort::poll(const Receiver& rx) {
  UROCE_ASSERT_ENGINE(rnic_.engine());
  if (cq_ == nullptr) return 0;
  std::array<ibv_wc, 32> wcs;
  unsigned total = 0;
  for (;;) {
    const int n = cq_->poll(static_cast<int>(wcs.size()), wcs.data());
    if (n <= 0) break;
    total += static_cast<unsigned>(n);
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if ((wc.wr_id & kRecvTag) == 0) {  // a send slot is free again: the oldest waiting MAD takes it
        if (send_busy_ > 0) --send_busy_;
        if (wc.status != IBV_WC_SUCCESS) ctr_.inc(GsiCtr::tx_errors);
        while (send_busy_ < kSendSlots && !backlog_.empty()) {
          const Queued& q = backlog_.front();
          post_send(q.to, std::span(q.mad).first(q.len));
          backlog_.pop_front();
        }
        continue;
      }
      const auto slot = static_cast<uint32_t>(wc.wr_id & ~kRecvTag);
      if (wc.status != IBV_WC_SUCCESS) {
        ctr_.inc(GsiCtr::rx_errors);
        if (wc.status != IBV_WC_WR_FLUSH_ERR) post_recv(slot);
        continue;
      }
      const uint8_t* buf = bufs_[slot].data();
      MadAddr from;
      if (wc.byte_len < kGrhBytes + wire::kMadSize) {
        ctr_.inc(GsiCtr::rx_short);
      } else if (!wire::GrhAreaC(buf).sgid(from.gid)) {  // the sender, from the GRH area (IBA 11.4.1.2)
        ctr_.inc(GsiCtr::rx_bad_grh);
      } else {
        ctr_.inc(GsiCtr::rx_mads);
        from.qpn = Qpn(wc.src_qp);
        // A copy: the callback may send (and the slot is reposted below).
        std::array<uint8_t, wire::kMadSize> mad;
        std::memcpy(mad.data(), buf + kGrhBytes, mad.size());
        post_recv(slot);
        if (rx) rx(from, mad);
        continue;
      }
      post_recv(slot);
    }
  }
  return total;
}

}  // namespace uroce::cm
