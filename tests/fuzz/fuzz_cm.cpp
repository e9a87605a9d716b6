// Fuzz target: the IB CM's MAD parser and state machine (cm/cm.*).  Each
// input runs against a fresh CM with a listener and one connection attempt
// of its own under way, fed a sequence of records:
//
//   [op][flags][pick][bytes ...]
//     op 0..3   a MAD from one of four addresses (0: the peer our REQ went
//               to); up to 256 bytes follow (zero-padded).  flags bit 0:
//               the MAD header is made valid for the CM (attribute chosen by
//               `pick`); bit 1: the message's remote comm ID is set to one
//               of our live ids (`pick`), so that it reaches a connection
//     op 4      the clock moves `pick` ms on (timers: retries, TimeWait)
//     op 5      a consumer call on one of the ids events named (`pick`):
//               accept, reject, RTU, MRA, disconnect, destroy, by `flags`
//
// Nothing may crash or trip a sanitizer, and the bounds of CmConfig hold.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "cm/cm.hpp"
#include "cm/cma_hdr.hpp"

namespace {

using namespace uroce;
using namespace uroce::cm;

constexpr uint64_t kMs = 1'000'000;
constexpr std::array<wire::CmAttr, 11> kAttrs = {
    wire::CmAttr::Req,  wire::CmAttr::Mra,     wire::CmAttr::Rej,     wire::CmAttr::Rep,
    wire::CmAttr::Rtu,  wire::CmAttr::Dreq,    wire::CmAttr::Drep,    wire::CmAttr::SidrReq,
    wire::CmAttr::SidrRep, wire::CmAttr::Lap,  wire::CmAttr::ClassPortInfo,
};

struct Sink final : MadPort {
  size_t sent = 0;
  bool send(const MadAddr&, std::span<const uint8_t> mad) override {
    if (mad.size() != kMadSize) std::abort();  // the CM always sends whole MADs
    ++sent;
    return true;
  }
};

MadAddr addr(uint32_t ip) {
  MadAddr a;
  a.gid = ipv4_mapped_gid(ip);
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t now = 1'000'000'000;
  TimerWheel wheel(now);
  Sink port;
  CmConfig cfg;
  cfg.ca_guid = 0x0002c9fffe000002ull;
  cfg.seed = 42;  // the same ids for the same input
  cfg.max_pending_requests = 8;
  cfg.max_timewait = 8;
  cfg.ended_memory = 8;
  std::vector<uint32_t> ids;  // comm IDs of ours events named (the ids themselves may be gone)
  std::unique_ptr<Cm> cm;
  cm = std::make_unique<Cm>(port, wheel, [&now] { return now; }, cfg, [&ids](const CmEvent& e) {
    if (e.id != nullptr && ids.size() < 64) ids.push_back(e.id->local_id);
  });
  const std::array<MadAddr, 4> from = {addr(0x0A000002), addr(0x0A000009), addr(0x0A00000A), addr(0x0B000001)};

  CmId* listener = cm->create_id();
  cm->listen(listener, cma_service_id(PortSpace::Tcp, 7471));
  CmId* active = cm->create_id();
  ids.push_back(active->local_id);
  ConnectParams p;
  p.dest = from[0];
  p.service_id = cma_service_id(PortSpace::Tcp, 9000);
  p.path.local_gid = ipv4_mapped_gid(0x0A000001);
  p.path.remote_gid = from[0].gid;
  p.qpn = Qpn(0x15);
  p.starting_psn = Psn(0x100);
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.remote_cm_response_timeout = 10;
  p.local_cm_response_timeout = 10;
  p.max_cm_retries = 2;
  cm->connect(active, p);

  size_t at = 0;
  while (at + 3 <= size) {
    const uint8_t op = data[at] % 6;
    const uint8_t flags = data[at + 1];
    const uint8_t pick = data[at + 2];
    at += 3;
    if (op <= 3) {
      MadBuf mad{};
      const size_t n = std::min<size_t>(kMadSize, size - at);
      std::memcpy(mad.data(), data + at, n);
      at += n;
      if ((flags & 1) != 0) {
        wire::MadHdr h(mad.data());
        h.set_base_version(1);
        h.set_mgmt_class(wire::kMgmtClassCm);
        h.set_class_version(2);
        h.set_method(0x03);
        h.set_attr_id(static_cast<uint16_t>(kAttrs[pick % kAttrs.size()]));
      }
      if ((flags & 2) != 0 && !ids.empty()) {
        // Most messages name the receiver's comm ID at body offset 4 (REJ,
        // MRA, REP, RTU, DREQ, DREP); SIDR_REP at offset 0.
        wire::store_be<uint32_t>(mad.data() + kMadHdrSize + 4, ids[pick % ids.size()]);
      }
      cm->on_mad(from[op], mad);
    } else if (op == 4) {
      now += uint64_t{pick} * kMs;
      wheel.advance(now);
    } else if (!ids.empty()) {
      CmId* id = cm->find(ids[pick % ids.size()]);
      if (id == nullptr || id->destroyed) continue;  // gone
      switch (flags % 6) {
        case 0: {
          AcceptParams a;
          a.qpn = Qpn(0x200 + pick);
          a.starting_psn = Psn(0x300);
          cm->accept(id, a);
          break;
        }
        case 1: cm->reject(id, RejReason::ConsumerReject); break;
        case 2: cm->send_rtu(id); break;
        case 3: cm->send_mra(id, 10); break;
        case 4: cm->disconnect(id); break;
        default: cm->destroy_id(id); break;
      }
    }
    if (cm->pending_requests() > cfg.max_pending_requests || cm->timewait_count() > cfg.max_timewait) {
      std::fprintf(stderr, "fuzz-cm: a bound of CmConfig did not hold\n");
      std::abort();
    }
  }
  cm.reset();
  return 0;
}
