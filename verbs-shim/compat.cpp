// The rest of libibverbs' public surface: strings, rate conversions, fork
// support, sysfs helpers, the kernel-structure copies, object import (no
// kernel to import from), and the hidden IBVERBS_1.0 versions of the
// pre-2006 ABI, which fail cleanly (ENOSYS) instead of misreading their
// old structures.
#include <fcntl.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <infiniband/sa.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "verbs-shim/shim.hpp"

using namespace uroce;
using namespace uroce::shim;

namespace {

template <size_t N>
const char* name_of(const std::array<const char*, N>& names, size_t i) noexcept {
  return i < names.size() && names[i] != nullptr ? names[i] : "unknown";
}

// The man pages' strings (ibv_wc_status_str(3), ibv_event_type_str(3)).
constexpr std::array<const char*, IBV_WC_TM_RNDV_INCOMPLETE + 1> kWcStatus = {
    "success", "local length error", "local QP operation error", "local EE context operation error",
    "local protection error", "Work Request Flushed Error", "memory management operation error",
    "bad response error", "local access error", "remote invalid request error", "remote access error",
    "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
    "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
    "invalid EE context state", "fatal error", "response timeout error", "general error",
    "TM error", "TM software rendezvous",
};

constexpr std::array<const char*, IBV_EVENT_WQ_FATAL + 1> kEventType = {
    "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
    "local access violation work queue error", "communication established", "send queue drained",
    "path migrated", "path migration request error", "local catastrophic error", "port active",
    "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
    "SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
    "WQ fatal",
};

constexpr std::array<const char*, IBV_PORT_ACTIVE_DEFER + 1> kPortState = {
    "PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER",
};

// ibv_rate -> (multiple of 2.5 Gb/s, Mb/s), indexed by the enum value.
struct Rate {
  int mult;
  int mbps;
};
constexpr std::array<Rate, IBV_RATE_1200_GBPS + 1> kRates = {{
    {-1, -1},      // MAX
    {-1, -1},      // 1 unused
    {1, 2500},     // 2.5
    {4, 10000},    // 10
    {12, 30000},   // 30
    {2, 5000},     // 5
    {8, 20000},    // 20
    {16, 40000},   // 40
    {24, 60000},   // 60
    {32, 80000},   // 80
    {48, 120000},  // 120
    {5, 14062},    // 14
    {22, 56250},   // 56
    {45, 112500},  // 112
    {67, 168750},  // 168
    {10, 25781},   // 25
    {40, 103125},  // 100
    {80, 206250},  // 200
    {120, 309375}, // 300
    {11, 28125},   // 28
    {20, 53125},   // 50
    {160, 425000}, // 400
    {240, 637500}, // 600
    {320, 850000}, // 800
    {480, 1275000},  // 1200
}};

}  // namespace

// ---- strings -----------------------------------------------------------------------------

UROCE_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) noexcept {
  return name_of(kWcStatus, static_cast<size_t>(status));
}
UROCE_EXPORT const char* ibv_event_type_str(ibv_event_type event) noexcept {
  return name_of(kEventType, static_cast<size_t>(event));
}
UROCE_EXPORT const char* ibv_port_state_str(ibv_port_state state) noexcept {
  return name_of(kPortState, static_cast<size_t>(state));
}
UROCE_EXPORT const char* ibv_node_type_str(ibv_node_type type) noexcept {
  switch (type) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED: return "unspecified";
    case IBV_NODE_UNKNOWN: return "unknown";
  }
  return "unknown";
}

// ---- rates -------------------------------------------------------------------------------

UROCE_EXPORT int ibv_rate_to_mult(ibv_rate rate) noexcept {
  const auto i = static_cast<size_t>(rate);
  return i < kRates.size() ? kRates[i].mult : -1;
}
UROCE_EXPORT ibv_rate mult_to_ibv_rate(int mult) noexcept {
  for (size_t i = 0; i < kRates.size(); ++i) {
    if (kRates[i].mult == mult) return static_cast<ibv_rate>(i);
  }
  return IBV_RATE_MAX;
}
UROCE_EXPORT int ibv_rate_to_mbps(ibv_rate rate) noexcept {
  const auto i = static_cast<size_t>(rate);
  return i < kRates.size() ? kRates[i].mbps : -1;
}
UROCE_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) noexcept {
  for (size_t i = 0; i < kRates.size(); ++i) {
    if (kRates[i].mbps == mbps) return static_cast<ibv_rate>(i);
  }
  return IBV_RATE_MAX;
}

// ---- fork ----------------------------------------------------------------------------------
// Registered memory is never pinned or DMA-mapped by a kernel: a child
// sees ordinary copy-on-write memory, so nothing needs protecting.
UROCE_EXPORT int ibv_fork_init() noexcept { return 0; }
UROCE_EXPORT ibv_fork_status ibv_is_fork_initialized() noexcept { return IBV_FORK_UNNEEDED; }
UROCE_EXPORT int ibv_dontfork_range(void*, size_t) noexcept { return 0; }
UROCE_EXPORT int ibv_dofork_range(void*, size_t) noexcept { return 0; }

// ---- sysfs -----------------------------------------------------------------------------------

UROCE_EXPORT const char* ibv_get_sysfs_path() noexcept { return "/sys"; }

// Reads dir/file into buf (NUL-terminated, a trailing newline removed):
// the byte count, or -1.  uroce devices have no sysfs entries, so callers
// asking about them (ibv_devinfo's board_id) get -1 and skip the line.
UROCE_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) noexcept {
  if (dir == nullptr || file == nullptr || buf == nullptr || size == 0) return -1;
  char path[IBV_SYSFS_PATH_MAX * 2];
  if (std::snprintf(path, sizeof path, "%s/%s", dir, file) >= static_cast<int>(sizeof path)) return -1;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, size);
  close(fd);
  if (n <= 0) return -1;
  size_t len = static_cast<size_t>(n);
  if (len == size) --len;
  if (len > 0 && buf[len - 1] == '\n') --len;
  buf[len] = '\0';
  return static_cast<int>(len);
}

// ---- kernel structure copies (infiniband/marshall.h) -----------------------------------------

UROCE_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, const ib_uverbs_ah_attr* src) noexcept {
  std::memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof dst->grh.dgid);
  dst->grh.flow_label = src->grh.flow_label;
  dst->grh.sgid_index = src->grh.sgid_index;
  dst->grh.hop_limit = src->grh.hop_limit;
  dst->grh.traffic_class = src->grh.traffic_class;
  dst->dlid = src->dlid;
  dst->sl = src->sl;
  dst->src_path_bits = src->src_path_bits;
  dst->static_rate = src->static_rate;
  dst->is_global = src->is_global;
  dst->port_num = src->port_num;
}

UROCE_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, const ib_uverbs_qp_attr* src) noexcept {
  dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
  dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
  dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
  dst->qkey = src->qkey;
  dst->rq_psn = src->rq_psn;
  dst->sq_psn = src->sq_psn;
  dst->dest_qp_num = src->dest_qp_num;
  dst->qp_access_flags = static_cast<unsigned>(src->qp_access_flags);
  dst->cap.max_send_wr = src->max_send_wr;
  dst->cap.max_recv_wr = src->max_recv_wr;
  dst->cap.max_send_sge = src->max_send_sge;
  dst->cap.max_recv_sge = src->max_recv_sge;
  dst->cap.max_inline_data = src->max_inline_data;
  ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
  ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
  dst->pkey_index = src->pkey_index;
  dst->alt_pkey_index = src->alt_pkey_index;
  dst->en_sqd_async_notify = src->en_sqd_async_notify;
  dst->sq_draining = src->sq_draining;
  dst->max_rd_atomic = src->max_rd_atomic;
  dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
  dst->min_rnr_timer = src->min_rnr_timer;
  dst->port_num = src->port_num;
  dst->timeout = src->timeout;
  dst->retry_cnt = src->retry_cnt;
  dst->rnr_retry = src->rnr_retry;
  dst->alt_port_num = src->alt_port_num;
  dst->alt_timeout = src->alt_timeout;
}

UROCE_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, const ib_user_path_rec* src) noexcept {
  std::memcpy(dst->dgid.raw, src->dgid, sizeof dst->dgid);
  std::memcpy(dst->sgid.raw, src->sgid, sizeof dst->sgid);
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<int>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = static_cast<int>(src->reversible);
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = static_cast<uint8_t>(src->mtu);
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

UROCE_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, const ibv_sa_path_rec* src) noexcept {
  std::memcpy(dst->dgid, src->dgid.raw, sizeof dst->dgid);
  std::memcpy(dst->sgid, src->sgid.raw, sizeof dst->sgid);
  dst->dlid = src->dlid;
  dst->slid = src->slid;
  dst->raw_traffic = static_cast<uint32_t>(src->raw_traffic);
  dst->flow_label = src->flow_label;
  dst->hop_limit = src->hop_limit;
  dst->traffic_class = src->traffic_class;
  dst->reversible = static_cast<uint32_t>(src->reversible);
  dst->numb_path = src->numb_path;
  dst->pkey = src->pkey;
  dst->sl = src->sl;
  dst->mtu_selector = src->mtu_selector;
  dst->mtu = src->mtu;
  dst->rate_selector = src->rate_selector;
  dst->rate = src->rate;
  dst->packet_life_time_selector = src->packet_life_time_selector;
  dst->packet_life_time = src->packet_life_time;
  dst->preference = src->preference;
}

// ---- import (import.cpp has devices, PDs and MRs) --------------------------------------------
// No device memory here, so none to import.
UROCE_EXPORT ibv_dm* ibv_import_dm(ibv_context*, uint32_t) noexcept { return fail(EOPNOTSUPP, static_cast<ibv_dm*>(nullptr)); }
UROCE_EXPORT void ibv_unimport_dm(ibv_dm*) noexcept {}

// ---- rdma-core 45 and later (IBVERBS_1.15 .. 1.18) ----------------------------------------------
// Entry points of releases newer than the headers this is built against,
// so that a program built against them loads.  Their objects (DMA handles,
// ibv_buf, completion counters) exist only as pointers here.  None is
// offered: each fails as rdma-core's own fallbacks for a provider without
// the operation do (EOPNOTSUPP: NULL with errno, or the error returned).

struct ibv_dmah;
struct ibv_dmah_init_attr;
struct ibv_mr_init_attr;
struct ibv_buf;
struct ibv_comp_cntr;
struct ibv_comp_cntr_caps;
struct ibv_comp_cntr_init_attr;
struct ibv_qp_attach_comp_cntr_attr;

UROCE_EXPORT ibv_dmah* ibv_alloc_dmah(ibv_context*, ibv_dmah_init_attr*) noexcept {
  return fail(EOPNOTSUPP, static_cast<ibv_dmah*>(nullptr));
}
UROCE_EXPORT int ibv_dealloc_dmah(ibv_dmah*) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT ibv_mr* ibv_reg_mr_ex(ibv_pd*, ibv_mr_init_attr*) noexcept {
  return fail(EOPNOTSUPP, static_cast<ibv_mr*>(nullptr));
}
UROCE_EXPORT int ibv_dm_export_dmabuf_fd(ibv_dm*) noexcept { return fail(EOPNOTSUPP, -1); }
UROCE_EXPORT int ibv_query_port_speed(ibv_context*, uint32_t, uint64_t*) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT void* ibv_alloc_buf(ibv_pd*, size_t, ibv_buf**) noexcept { return fail(EOPNOTSUPP, static_cast<void*>(nullptr)); }
UROCE_EXPORT void ibv_free_buf(ibv_buf*) noexcept {}
UROCE_EXPORT ibv_mr* ibv_reg_buf_mr(ibv_pd*, ibv_buf*, void*, size_t, int) noexcept {
  return fail(EOPNOTSUPP, static_cast<ibv_mr*>(nullptr));
}
UROCE_EXPORT int ibv_export_buf_dmabuf_fd(ibv_buf*) noexcept { return fail(EOPNOTSUPP, -1); }
UROCE_EXPORT int _ibv_query_comp_cntr_caps(ibv_context*, ibv_comp_cntr_caps*, size_t) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT ibv_comp_cntr* ibv_create_comp_cntr(ibv_context*, ibv_comp_cntr_init_attr*) noexcept {
  return fail(EOPNOTSUPP, static_cast<ibv_comp_cntr*>(nullptr));
}
UROCE_EXPORT int ibv_destroy_comp_cntr(ibv_comp_cntr*) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_qp_attach_comp_cntr(ibv_qp*, ibv_comp_cntr*, ibv_qp_attach_comp_cntr_attr*) noexcept {
  return EOPNOTSUPP;
}
UROCE_EXPORT int ibv_set_comp_cntr(ibv_comp_cntr*, uint64_t) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_set_err_comp_cntr(ibv_comp_cntr*, uint64_t) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_inc_comp_cntr(ibv_comp_cntr*, uint64_t) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_inc_err_comp_cntr(ibv_comp_cntr*, uint64_t) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_read_comp_cntr(ibv_comp_cntr*, uint64_t*) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_read_err_comp_cntr(ibv_comp_cntr*, uint64_t*) noexcept { return EOPNOTSUPP; }

// ---- the hidden compat versions -----------------------------------------------------------------
// IBVERBS_1.0 (the libibverbs 1.0 ABI, whose objects had another layout) and
// ibv_register_driver@IBVERBS_1.1 (the old provider registration).  Each is
// bound under its hidden version with .symver; none can serve the old ABI,
// so each fails: NULL or -1 with errno ENOSYS, or ENOSYS returned.
#define UROCE_COMPAT(ret, name, fail_value, version)                                        \
  extern "C" __attribute__((visibility("default"))) ret uroce_compat_##name() noexcept {     \
    errno = ENOSYS;                                                                          \
    return fail_value;                                                                       \
  }                                                                                          \
  __asm__(".symver uroce_compat_" #name ", " #name "@" version);

#define UROCE_COMPAT_VOID(name, version)                                                     \
  extern "C" __attribute__((visibility("default"))) void uroce_compat_##name() noexcept {    \
    errno = ENOSYS;                                                                          \
  }                                                                                          \
  __asm__(".symver uroce_compat_" #name ", " #name "@" version);

UROCE_COMPAT_VOID(ibv_ack_async_event, "IBVERBS_1.0")
UROCE_COMPAT_VOID(ibv_ack_cq_events, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_alloc_pd, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_attach_mcast, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_close_device, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_create_ah, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_create_cq, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_create_qp, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_create_srq, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_dealloc_pd, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_dereg_mr, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_destroy_ah, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_destroy_cq, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_destroy_qp, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_destroy_srq, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_detach_mcast, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT_VOID(ibv_free_device_list, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_get_async_event, -1, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_get_cq_event, -1, "IBVERBS_1.0")
UROCE_COMPAT(uint64_t, ibv_get_device_guid, 0, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_get_device_list, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(const char*, ibv_get_device_name, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_modify_qp, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_modify_srq, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_open_device, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_query_device, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_query_gid, -1, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_query_pkey, -1, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_query_port, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_query_qp, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_query_srq, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT(void*, ibv_reg_mr, nullptr, "IBVERBS_1.0")
UROCE_COMPAT(int, ibv_resize_cq, ENOSYS, "IBVERBS_1.0")
UROCE_COMPAT_VOID(ibv_register_driver, "IBVERBS_1.1")
