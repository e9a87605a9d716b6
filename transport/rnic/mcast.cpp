// The multicast group table and the group address rules (mcast.hpp).
#include "transport/rnic/mcast.hpp"

#include <algorithm>
#include <cerrno>

#include "transport/rnic/limits.hpp"

namespace uroce::rnic {

std::optional<wire::MacAddr> multicast_mac(const wire::Ipv6Addr& gid) noexcept {
  if (!is_multicast_gid(gid)) return std::nullopt;
  if (wire::is_ipv4_mapped(gid))  // RFC 1112 6.4: 01:00:5e, then the group's low 23 bits
    return wire::MacAddr{0x01, 0x00, 0x5e, static_cast<uint8_t>(gid[13] & 0x7f), gid[14], gid[15]};
  return wire::MacAddr{0x33, 0x33, gid[12], gid[13], gid[14], gid[15]};  // RFC 2464 7
}

int McastTable::attach(const wire::Ipv6Addr& mgid, Qp* qp) {
  if (qp == nullptr || !is_multicast_gid(mgid)) return EINVAL;
  auto it = groups_.find(mgid);
  if (it != groups_.end() && std::find(it->second.qps.begin(), it->second.qps.end(), qp) != it->second.qps.end())
    return 0;  // already attached: nothing changes (rxe)
  if (total_ >= kMaxTotalMcastQpAttach) return ENOMEM;
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxMcastGrp) return ENOMEM;
    it = groups_.emplace(mgid, McastGroup{}).first;
    it->second.qps.reserve(kMaxMcastQpAttach);
  } else if (it->second.qps.size() >= kMaxMcastQpAttach) {
    return ENOMEM;
  }
  it->second.qps.push_back(qp);
  ++total_;
  return 0;
}

int McastTable::detach(const wire::Ipv6Addr& mgid, Qp* qp) {
  auto it = groups_.find(mgid);
  if (it == groups_.end()) return EINVAL;
  std::vector<Qp*>& v = it->second.qps;
  const auto q = std::find(v.begin(), v.end(), qp);
  if (q == v.end()) return EINVAL;
  v.erase(q);
  --total_;
  if (v.empty()) groups_.erase(it);
  return 0;
}

void McastTable::detach_all(const Qp* qp) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    total_ -= static_cast<size_t>(std::erase(it->second.qps, qp));
    it = it->second.qps.empty() ? groups_.erase(it) : std::next(it);
  }
}

std::vector<wire::Ipv6Addr> McastTable::groups_of(const Qp* qp) const {
  std::vector<wire::Ipv6Addr> out;
  for (const auto& [mgid, g] : groups_)
    if (std::find(g.qps.begin(), g.qps.end(), qp) != g.qps.end()) out.push_back(mgid);
  return out;
}

const McastGroup* McastTable::find(const wire::Ipv6Addr& mgid) const noexcept {
  const auto it = groups_.find(mgid);
  return it != groups_.end() ? &it->second : nullptr;
}

}  // namespace uroce::rnic
