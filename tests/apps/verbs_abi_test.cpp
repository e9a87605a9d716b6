// The drop-in libibverbs.so.1 through its C ABI, as a program built
// against rdma-core 44's headers uses it: the header's inline code (the
// ibv_query_port macro, ibv_poll_cq, ibv_post_send, ibv_wr_*, ibv_start_poll
// ...) calls into our objects.  Two sim devices in this process
// (sim2.toml, UROCE_CONFIG set by meson) share one in-memory wire, so RC and
// UD traffic flows between them.
#include <endian.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "signal_wait.hpp"

// rdma-core's private ABI (driver.h is not installed).
extern "C" int ibv_query_gid_type(ibv_context*, uint8_t, unsigned int, int*);

// uroce's private entry (UROCE_PRIVATE_1): the device's object counts.
extern "C" int uroce_shim_object_counts(ibv_context*, size_t*, size_t);

namespace {

constexpr uint8_t kPort = 1;
constexpr int kGidIndex = 0;  // ::ffff:10.9.0.x (sim devices have no link-local)
constexpr int kCqe = 64;
constexpr size_t kBuf = 8192;

class VerbsAbi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr);
    ASSERT_EQ(n, 2) << "sim2.toml configures two sim devices";
    for (int i = 0; i < 2; ++i) {
      ctx_[i] = ibv_open_device(list_[i]);
      ASSERT_NE(ctx_[i], nullptr);
    }
  }
  static void TearDownTestSuite() {
    for (ibv_context*& c : ctx_) {
      if (c != nullptr) ibv_close_device(c);
      c = nullptr;
    }
    ibv_free_device_list(list_);
  }
  static ibv_device** list_;
  static std::array<ibv_context*, 2> ctx_;
};
ibv_device** VerbsAbi::list_ = nullptr;
std::array<ibv_context*, 2> VerbsAbi::ctx_{};

// ibv_close_device frees what the program left on the context, in order
// (QPs before the CQs and PD they use), as the kernel does when a uverbs
// file closes; the device's other contexts keep theirs.
TEST_F(VerbsAbi, CloseDeviceFreesWhatTheProgramLeft) {
  constexpr size_t kKinds = 7;  // PDs, MRs, channels, CQs, SRQs, QPs, AHs
  std::array<size_t, kKinds> before{}, during{}, after{};
  ASSERT_EQ(uroce_shim_object_counts(ctx_[0], before.data(), kKinds), 0);
  ibv_context* c = ibv_open_device(list_[0]);
  ASSERT_NE(c, nullptr);
  ibv_pd* pd = ibv_alloc_pd(c);
  ASSERT_NE(pd, nullptr);
  static std::array<uint8_t, kBuf> buf;
  ASSERT_NE(ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), nullptr);
  ibv_comp_channel* ch = ibv_create_comp_channel(c);
  ASSERT_NE(ch, nullptr);
  ibv_cq* cq = ibv_create_cq(c, kCqe, nullptr, ch, 0);
  ASSERT_NE(cq, nullptr);
  ibv_srq_init_attr si{};
  si.attr.max_wr = 8;
  si.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &si);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr qi{};
  qi.send_cq = qi.recv_cq = cq;
  qi.qp_type = IBV_QPT_RC;
  qi.srq = srq;
  qi.cap.max_send_wr = 4;
  qi.cap.max_send_sge = 1;
  ASSERT_NE(ibv_create_qp(pd, &qi), nullptr);
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = kPort;
  ah.grh.sgid_index = kGidIndex;
  ah.grh.hop_limit = 64;
  ASSERT_EQ(ibv_query_gid(ctx_[1], kPort, kGidIndex, &ah.grh.dgid), 0);
  ASSERT_NE(ibv_create_ah(pd, &ah), nullptr);
  ASSERT_NE(ibv_alloc_mw(pd, IBV_MW_TYPE_2), nullptr);  // not counted; it holds the PD until freed
  ASSERT_EQ(uroce_shim_object_counts(c, during.data(), kKinds), 0);
  for (size_t k = 0; k < kKinds; ++k) EXPECT_EQ(during[k], before[k] + 1) << "kind " << k;

  ASSERT_EQ(ibv_close_device(c), 0);  // nothing destroyed by the program
  ASSERT_EQ(uroce_shim_object_counts(ctx_[0], after.data(), kKinds), 0);
  EXPECT_EQ(after, before);
}

TEST_F(VerbsAbi, DevicesAreTheConfiguredOnes) {
  EXPECT_STREQ(ibv_get_device_name(list_[0]), "uroce0");
  EXPECT_STREQ(ibv_get_device_name(list_[1]), "uroce1");
  EXPECT_EQ(list_[2], nullptr);
  EXPECT_EQ(list_[0]->node_type, IBV_NODE_CA);
  EXPECT_EQ(list_[0]->transport_type, IBV_TRANSPORT_IB);
  EXPECT_EQ(ibv_get_device_index(list_[1]), 1);
  // EUI-64 of 02:00:00:00:09:01, universal/local bit flipped.
  EXPECT_EQ(be64toh(ibv_get_device_guid(list_[0])), 0x000000fffe000901ULL);
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_[0], &attr), 0);
  EXPECT_EQ(attr.vendor_id, 0xFFFFFFu);
  EXPECT_EQ(attr.vendor_part_id, 0u);
  EXPECT_EQ(attr.phys_port_cnt, 1);
  EXPECT_GT(attr.max_qp_rd_atom, 0);
  EXPECT_EQ(attr.node_guid, ibv_get_device_guid(list_[0]));
}

TEST_F(VerbsAbi, ContextIsAFullVerbsContext) {
  ibv_context* c = ctx_[0];
  verbs_context* v = verbs_get_ctx(c);
  ASSERT_NE(v, nullptr) << "abi_compat must be __VERBS_ABI_IS_EXTENDED";
  EXPECT_EQ(v->sz, sizeof(verbs_context));
  EXPECT_NE(verbs_get_ctx_op(c, query_port), nullptr);
  EXPECT_NE(verbs_get_ctx_op(c, query_device_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(c, create_cq_ex), nullptr);
  EXPECT_NE(verbs_get_ctx_op(c, create_qp_ex), nullptr);
  for (auto* op : {reinterpret_cast<void*>(verbs_get_ctx_op(c, open_xrcd)),
                   reinterpret_cast<void*>(verbs_get_ctx_op(c, close_xrcd)),
                   reinterpret_cast<void*>(verbs_get_ctx_op(c, get_srq_num)),
                   reinterpret_cast<void*>(verbs_get_ctx_op(c, open_qp))}) {
    EXPECT_NE(op, nullptr);  // XRC
  }
  for (auto* op : {reinterpret_cast<void*>(c->ops.poll_cq), reinterpret_cast<void*>(c->ops.req_notify_cq),
                   reinterpret_cast<void*>(c->ops.post_send), reinterpret_cast<void*>(c->ops.post_recv),
                   reinterpret_cast<void*>(c->ops.post_srq_recv)}) {
    EXPECT_NE(op, nullptr);
  }
  for (auto* op : {reinterpret_cast<void*>(c->ops.alloc_mw), reinterpret_cast<void*>(c->ops.bind_mw),
                   reinterpret_cast<void*>(c->ops.dealloc_mw)}) {
    EXPECT_NE(op, nullptr);  // memory windows
  }
  EXPECT_GE(c->num_comp_vectors, 1);
  EXPECT_GE(fcntl(c->async_fd, F_GETFL), 0) << "the async fd is a real fd";
  // cmd_fd: a real fd a program can dup (pyverbs does), its own per context.
  const int d = dup(c->cmd_fd);
  EXPECT_GE(d, 0) << "cmd_fd " << c->cmd_fd;
  if (d >= 0) close(d);
  EXPECT_NE(c->cmd_fd, ctx_[1]->cmd_fd);
}

TEST_F(VerbsAbi, PortQueryHonoursTheCallersSize) {
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_[0], kPort, &pa), 0);  // the header's inline: 52 bytes
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pa.phys_state, 5);
  EXPECT_GE(pa.gid_tbl_len, 1);
  EXPECT_EQ(pa.pkey_tbl_len, 1);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);
  // The exported compat entry point writes 48 bytes, never more.
  std::array<uint8_t, 64> buf;
  buf.fill(0xAA);
  ASSERT_EQ((ibv_query_port)(ctx_[0], kPort, reinterpret_cast<_compat_ibv_port_attr*>(buf.data())), 0);
  ibv_port_attr compat{};
  std::memcpy(&compat, buf.data(), 48);
  EXPECT_EQ(compat.state, IBV_PORT_ACTIVE);
  for (size_t i = 48; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xAA) << "byte " << i;
  // The op with a smaller size (an older caller) writes exactly that much.
  buf.fill(0xAA);
  verbs_context* v = verbs_get_ctx(ctx_[0]);
  ASSERT_EQ(v->query_port(ctx_[0], kPort, reinterpret_cast<ibv_port_attr*>(buf.data()), 20), 0);
  for (size_t i = 20; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xAA) << "byte " << i;
  EXPECT_NE(ibv_query_port(ctx_[0], 2, &pa), 0) << "one port";
}

TEST_F(VerbsAbi, GidTableAndBothTypeEnums) {
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_[0], kPort, kGidIndex, &gid), 0);
  const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 1};
  EXPECT_EQ(std::memcmp(gid.raw, v4, 16), 0);
  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(ctx_[0], kPort, kGidIndex, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);  // enum ibv_gid_type: 2
  EXPECT_EQ(e.gid_index, 0u);
  EXPECT_EQ(e.port_num, kPort);
  int sysfs_type = -1;
  ASSERT_EQ(ibv_query_gid_type(ctx_[0], kPort, kGidIndex, &sysfs_type), 0);
  EXPECT_EQ(sysfs_type, 1);  // IBV_GID_TYPE_SYSFS_ROCE_V2
  // An empty slot: a zero GID from ibv_query_gid, ENODATA from the _ex form.
  const unsigned empty = 5;
  ASSERT_EQ(ibv_query_gid(ctx_[0], kPort, empty, &gid), 0);
  const uint8_t zero[16] = {};
  EXPECT_EQ(std::memcmp(gid.raw, zero, 16), 0);
  EXPECT_EQ(ibv_query_gid_ex(ctx_[0], kPort, empty, &e, 0), ENODATA);
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_[0], kPort, &pa), 0);
  EXPECT_EQ(ibv_query_gid(ctx_[0], kPort, pa.gid_tbl_len, &gid), -1) << "past the table";
  std::array<ibv_gid_entry, 16> table{};
  EXPECT_EQ(ibv_query_gid_table(ctx_[0], table.data(), table.size(), 0), 2) << "IPv4 and fd09::1";
  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(ctx_[0], kPort, 0, &pkey), 0);
  EXPECT_EQ(be16toh(pkey), 0xFFFF);
}

TEST_F(VerbsAbi, DeviceQueryExHonoursTheCallersSize) {
  std::array<uint8_t, sizeof(ibv_device_attr_ex) + 16> buf;
  buf.fill(0xAA);
  verbs_context* v = verbs_get_ctx(ctx_[0]);
  const size_t len = sizeof(ibv_device_attr) + 8;
  ASSERT_EQ(v->query_device_ex(ctx_[0], nullptr, reinterpret_cast<ibv_device_attr_ex*>(buf.data()), len), 0);
  for (size_t i = len; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xAA) << "byte " << i;
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_[0], nullptr, &ex), 0);
  EXPECT_EQ(ex.orig_attr.vendor_id, 0xFFFFFFu);
  EXPECT_EQ(ex.phys_port_cnt_ex, 1u);
  ibv_query_device_ex_input in{};
  in.comp_mask = 1;
  EXPECT_EQ(ibv_query_device_ex(ctx_[0], &in, &ex), EINVAL);
}

// ODP as a program finds it: the caps in query_device_ex, an implicit MR
// and ibv_advise_mr through the context op (NULL would be EOPNOTSUPP).
TEST_F(VerbsAbi, OnDemandPagingThroughTheVerbs) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_[0], nullptr, &ex), 0);
  EXPECT_NE(ex.odp_caps.general_caps & IBV_ODP_SUPPORT, 0u);
  EXPECT_NE(ex.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT, 0u);
  constexpr uint32_t kRc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                           IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  EXPECT_EQ(ex.odp_caps.per_transport_caps.rc_odp_caps & kRc, kRc);
  EXPECT_EQ(ex.xrc_odp_caps & kRc, kRc);  // XRC carries RC's operations
  EXPECT_NE(ex.device_cap_flags_ex & (uint64_t{1} << 40), 0u);  // IB_UVERBS_DEVICE_ATOMIC_WRITE
  // FLUSH and ATOMIC WRITE on ODP MRs too (IBV_ODP_SUPPORT_FLUSH, _ATOMIC_WRITE: rdma-core 47).
  EXPECT_EQ(ex.odp_caps.per_transport_caps.rc_odp_caps & (3u << 6), 3u << 6);
  ibv_pd* pd = ibv_alloc_pd(ctx_[0]);
  ASSERT_NE(pd, nullptr);
  ibv_mr* all = ibv_reg_mr(pd, nullptr, SIZE_MAX, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(all, nullptr) << std::strerror(errno);
  std::vector<uint8_t> buf(kBuf);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), static_cast<uint32_t>(buf.size()), all->lkey};
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 4, &sge, 1), EINVAL);
  EXPECT_EQ(ibv_dereg_mr(all), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// Memory windows as a program sees them: the device says it has them, and
// ibv_alloc_mw / ibv_bind_mw / ibv_dealloc_mw reach the device through
// ibv_context_ops (traffic through windows: tests/rnic/e2e_mw_test.cpp).
TEST_F(VerbsAbi, MemoryWindowsThroughTheVerbs) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_[0], &attr), 0);
  EXPECT_GT(attr.max_mw, 0);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, 0u);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, 0u);
  ibv_pd* pd = ibv_alloc_pd(ctx_[0]);
  ASSERT_NE(pd, nullptr);
  ibv_mw* m1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  ASSERT_NE(m1, nullptr) << std::strerror(errno);
  ibv_mw* m2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(m2, nullptr) << std::strerror(errno);
  EXPECT_EQ(m1->context, ctx_[0]);
  EXPECT_EQ(m1->pd, pd);
  EXPECT_EQ(m1->type, IBV_MW_TYPE_1);
  EXPECT_EQ(m2->type, IBV_MW_TYPE_2);
  EXPECT_NE(m1->rkey >> 8, m2->rkey >> 8);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "windows hold their PD";
  // ibv_bind_mw is for type 1 windows (a type 2 one is bound by a work request).
  ibv_cq* cq = ibv_create_cq(ctx_[0], kCqe, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {4, 4, 1, 1, 0};
  ibv_qp* qp = ibv_create_qp(pd, &qa);
  ASSERT_NE(qp, nullptr);
  ibv_mw_bind bind{};
  EXPECT_EQ(ibv_bind_mw(qp, m2, &bind), EINVAL);
  // A type 1 bind is a work request: posted to a QP in RESET it is taken
  // and dropped, as any send (ConnectX's behaviour); the window's key
  // advances at post time, as the providers write it, and nothing
  // completes.
  const uint32_t key = m1->rkey;
  EXPECT_EQ(ibv_bind_mw(qp, m1, &bind), 0);
  EXPECT_EQ(m1->rkey >> 8, key >> 8);
  ibv_wc wc{};
  EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_mw(m1), 0);
  EXPECT_EQ(ibv_dealloc_mw(m2), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(VerbsAbi, UnsupportedVerbsFailCleanly) {
  ibv_pd* pd = ibv_alloc_pd(ctx_[0]);
  ASSERT_NE(pd, nullptr);
  ibv_alloc_dm_attr dma{};
  dma.length = 64;
  EXPECT_EQ(ibv_alloc_dm(ctx_[0], &dma), nullptr);
  errno = 0;
  EXPECT_EQ(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Multicast is offered now (RoCEv2 groups on UD QPs): only the arguments fail.
  EXPECT_EQ(ibv_attach_mcast(nullptr, nullptr, 0), EINVAL);
  ibv_cq_init_attr_ex cqa{};
  cqa.cqe = kCqe;
  cqa.wc_flags = IBV_WC_EX_WITH_CVLAN;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_[0], &cqa), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // A QP type verbs knows and the device does not do: EOPNOTSUPP (as rxe).
  ibv_cq* cq = ibv_create_cq(ctx_[0], kCqe, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr raw{};
  raw.send_cq = raw.recv_cq = cq;
  raw.qp_type = IBV_QPT_RAW_PACKET;
  raw.cap = {4, 4, 1, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd, &raw), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Of the creation flags only BLOCK_SELF_MCAST_LB is taken; the raw
  // Ethernet ones fail.
  ibv_qp_init_attr_ex ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap = {4, 4, 1, 1, 0};
  ia.pd = pd;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  ia.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx_[0], &ia), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
  ibv_qp* blocked = ibv_create_qp_ex(ctx_[0], &ia);
  ASSERT_NE(blocked, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_qp(blocked), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(VerbsAbi, RegMrIgnoresOptionalAccessBits) {
  ibv_pd* pd = ibv_alloc_pd(ctx_[0]);
  ASSERT_NE(pd, nullptr);
  std::vector<uint8_t> buf(kBuf);
  volatile unsigned extra = IBV_ACCESS_RELAXED_ORDERING;  // not a constant: the iova2 path, as perftest
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | extra);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(mr->pd, pd);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "an MR still uses it";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// ---- traffic between the two sim devices --------------------------------------------

struct Side {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_cq_ex* cqx = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBuf);

  // With a parent domain (ibv_alloc_parent_domain(3)): `pd` is it, made
  // over `base_pd` with `parent_attr`'s allocators; the extended CQ takes it.
  ibv_pd* base_pd = nullptr;
  ibv_parent_domain_init_attr* parent_attr = nullptr;
  uint64_t extra_wc_flags = 0;  // for the extended CQ
  uint64_t send_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;  // for the extended QP
  int mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  unsigned qp_access = IBV_ACCESS_REMOTE_WRITE;
  void open(ibv_context* c, ibv_qp_type type, bool extended) {
    ctx = c;
    pd = ibv_alloc_pd(c);
    ASSERT_NE(pd, nullptr);
    if (parent_attr != nullptr) {
      base_pd = pd;
      parent_attr->pd = base_pd;
      pd = ibv_alloc_parent_domain(c, parent_attr);
      ASSERT_NE(pd, nullptr) << std::strerror(errno);
    }
    ch = ibv_create_comp_channel(c);
    ASSERT_NE(ch, nullptr);
    if (extended) {
      ibv_cq_init_attr_ex a{};
      a.cqe = kCqe;
      a.channel = ch;
      a.cq_context = this;
      a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | extra_wc_flags;
      if (base_pd != nullptr) {
        a.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
        a.parent_domain = pd;
      }
      cqx = ibv_create_cq_ex(c, &a);
      ASSERT_NE(cqx, nullptr);
      cq = ibv_cq_ex_to_cq(cqx);
    } else {
      cq = ibv_create_cq(c, kCqe, this, ch, 0);
      ASSERT_NE(cq, nullptr);
    }
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), mr_access);
    ASSERT_NE(mr, nullptr);
    ibv_qp_init_attr_ex ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = type;
    ia.cap = {16, 16, 1, 1, extended ? 64u : 0u};
    ia.pd = pd;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD;
    if (extended) {
      ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      ia.send_ops_flags = send_ops;
    }
    qp = ibv_create_qp_ex(c, &ia);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_qp_to_qp_ex(qp) != nullptr, extended);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = kPort;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (type == IBV_QPT_UD) {
      a.qkey = 0x11111111;
      mask |= IBV_QP_QKEY;
    } else {
      a.qp_access_flags = qp_access;
      mask |= IBV_QP_ACCESS_FLAGS;
    }
    ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
    EXPECT_EQ(qp->state, IBV_QPS_INIT);
  }

  ibv_gid gid() const {
    ibv_gid g{};
    EXPECT_EQ(ibv_query_gid(ctx, kPort, kGidIndex, &g), 0);
    return g;
  }

  void connect(const Side& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    int mask = IBV_QP_STATE;
    if (qp->qp_type != IBV_QPT_UD) {
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = peer.qp->qp_num;
      a.rq_psn = 0x100;
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 12;
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = peer.gid();
      a.ah_attr.grh.sgid_index = kGidIndex;
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.port_num = kPort;
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
              IBV_QP_MIN_RNR_TIMER;
    }
    ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0x100;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (qp->qp_type != IBV_QPT_UD) {
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 1;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
    EXPECT_EQ(qp->state, IBV_QPS_RTS);
  }

  void post_recv(uint64_t id, uint32_t len) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), len, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
  }

  // A signaled SEND of `len` bytes from the start of buf.
  void post_send(uint64_t id, uint32_t len) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), 0);
  }

  // Waits on the completion channel (a real fd, poll()ed) for one completion.
  // Returning through the poll right after arming leaves the CQ armed, and
  // the completion returned may still raise an event: a later call may meet
  // that one event before its own (ibv_req_notify_cq(3)'s arm-then-poll
  // pattern), and only that one, until an event is consumed.
  bool stale_event_possible = false;
  ibv_wc wait_one() {
    ibv_wc wc{};
    const int rounds = stale_event_possible ? 3 : 2;
    for (int round = 0; round < rounds; ++round) {
      if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
      EXPECT_EQ(ibv_req_notify_cq(cq, 0), 0);
      if (ibv_poll_cq(cq, 1, &wc) == 1) {
        stale_event_possible = true;
        return wc;
      }
      pollfd pfd{ch->fd, POLLIN, 0};
      EXPECT_EQ(poll(&pfd, 1, 5000), 1) << "no completion event within 5 s";
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
      EXPECT_EQ(ev_cq, cq);
      EXPECT_EQ(ev_ctx, this);
      ibv_ack_cq_events(cq, 1);
      stale_event_possible = false;  // the outstanding arm has fired
    }
    ADD_FAILURE() << "event without a completion";
    return wc;
  }

  void close() {
    if (qp != nullptr) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    if (mr != nullptr) {
      EXPECT_EQ(ibv_dereg_mr(mr), 0);
    }
    if (cq != nullptr) {
      EXPECT_EQ(ibv_destroy_cq(cq), 0);
    }
    if (ch != nullptr) {
      EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
    }
    if (pd != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    }
    if (base_pd != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(base_pd), 0);
    }
  }
};

TEST_F(VerbsAbi, RcSendAndWriteThroughTheInlineOps) {
  Side a, b;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_RC, false));
  ASSERT_NO_FATAL_FAILURE(b.open(ctx_[1], IBV_QPT_RC, false));
  ASSERT_NO_FATAL_FAILURE(a.connect(b));
  ASSERT_NO_FATAL_FAILURE(b.connect(a));
  EXPECT_EQ(ibv_destroy_comp_channel(a.ch), EBUSY) << "a CQ uses it";

  const uint32_t len = 3000;  // three packets at MTU 1024
  for (uint32_t i = 0; i < len; ++i) a.buf[i] = static_cast<uint8_t>(i * 7);
  b.post_recv(77, kBuf);
  ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf.data()), len, a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  const ibv_wc rwc = b.wait_one();
  EXPECT_EQ(rwc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(rwc.status);
  EXPECT_EQ(rwc.wr_id, 77u);
  EXPECT_EQ(rwc.opcode, IBV_WC_RECV);
  EXPECT_EQ(rwc.byte_len, len);
  EXPECT_EQ(rwc.qp_num, b.qp->qp_num);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), len), 0);
  const ibv_wc swc = a.wait_one();
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(swc.wr_id, 5u);
  EXPECT_EQ(swc.opcode, IBV_WC_SEND);

  // RDMA WRITE into b's buffer at an offset; a bad WR comes back in bad_wr.
  std::memset(a.buf.data(), 0x5C, 512);
  wr.wr_id = 6;
  wr.opcode = IBV_WR_RDMA_WRITE;
  sge.length = 512;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data()) + 4096;
  wr.wr.rdma.rkey = b.mr->rkey;
  ibv_send_wr broken = wr;
  broken.num_sge = 1000;  // more than max_send_sge
  wr.next = &broken;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &broken);
  const ibv_wc wwc = a.wait_one();
  EXPECT_EQ(wwc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wwc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(b.buf[4096], 0x5C);
  EXPECT_EQ(b.buf[4096 + 511], 0x5C);

  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  ASSERT_EQ(ibv_query_qp(a.qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(qi.send_cq, a.cq) << "the application's CQ, not the RNIC's";
  a.close();
  b.close();
}

// A signal whose handler lacks SA_RESTART gets a thread out of a blocked
// ibv_get_cq_event with EINTR, as a kernel device's read(2) does (qperf
// ends every test with an alarm and must not hang in the wait); with
// SA_RESTART the wait goes on and returns the event that comes later.  In
// both progress modes (meson runs this binary with UROCE_PROGRESS=inline
// as well).
TEST_F(VerbsAbi, SignalInterruptsABlockedCqEventWait) {
  Side a, b;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_RC, false));
  ASSERT_NO_FATAL_FAILURE(b.open(ctx_[1], IBV_QPT_RC, false));
  ASSERT_NO_FATAL_FAILURE(a.connect(b));
  ASSERT_NO_FATAL_FAILURE(b.connect(a));
  ASSERT_EQ(ibv_req_notify_cq(b.cq, 0), 0);
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  auto get = [&] { return ibv_get_cq_event(b.ch, &ev_cq, &ev_ctx); };
  auto send_from_a = [&a] { a.post_send(9, 32); };
  b.post_recv(1, 64);
  uroce_test::SignalledWait w = uroce_test::signalled_wait(false, get, send_from_a);
  ASSERT_TRUE(w.installed);
  ASSERT_EQ(w.rc, -1) << "no event came within 100 ms: the signal must end the wait";
  EXPECT_EQ(w.err, EINTR);
  EXPECT_EQ(w.signals, 1);

  w = uroce_test::signalled_wait(true, get, send_from_a);
  ASSERT_TRUE(w.installed);
  EXPECT_EQ(w.rc, 0) << std::strerror(w.err);
  EXPECT_EQ(ev_cq, b.cq);
  EXPECT_EQ(w.signals, 1);
  ibv_ack_cq_events(b.cq, 1);
  ibv_wc wc{};
  ASSERT_EQ(ibv_poll_cq(b.cq, 1, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 32u);
  EXPECT_EQ(a.wait_one().status, IBV_WC_SUCCESS);
  a.close();
  b.close();
}

TEST_F(VerbsAbi, QpExBuildersAndCqExPolling) {
  Side a, b;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_RC, true));
  ASSERT_NO_FATAL_FAILURE(b.open(ctx_[1], IBV_QPT_RC, true));
  ASSERT_NO_FATAL_FAILURE(a.connect(b));
  ASSERT_NO_FATAL_FAILURE(b.connect(a));
  b.post_recv(91, kBuf);
  const char msg[] = "inline through ibv_wr_set_inline_data";
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(a.qp);
  ASSERT_NE(qx, nullptr);
  ibv_wr_start(qx);
  qx->wr_id = 42;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qx);
  char scratch[sizeof msg];
  std::memcpy(scratch, msg, sizeof msg);
  ibv_wr_set_inline_data(qx, scratch, sizeof msg);
  std::memset(scratch, 0, sizeof scratch);  // copied at the call
  ASSERT_EQ(ibv_wr_complete(qx), 0);

  ibv_poll_cq_attr pa{};
  int rc = ENOENT;
  for (int i = 0; i < 500000 && rc == ENOENT; ++i) rc = ibv_start_poll(b.cqx, &pa);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(b.cqx->status, IBV_WC_SUCCESS);  // read directly from the ibv_cq_ex
  EXPECT_EQ(b.cqx->wr_id, 91u);
  EXPECT_EQ(ibv_wc_read_opcode(b.cqx), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_byte_len(b.cqx), sizeof msg);
  EXPECT_EQ(ibv_wc_read_qp_num(b.cqx), b.qp->qp_num);
  EXPECT_EQ(ibv_next_poll(b.cqx), ENOENT);
  ibv_end_poll(b.cqx);
  EXPECT_STREQ(reinterpret_cast<const char*>(b.buf.data()), msg);

  rc = ENOENT;
  for (int i = 0; i < 500000 && rc == ENOENT; ++i) rc = ibv_start_poll(a.cqx, &pa);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(a.cqx->wr_id, 42u);
  EXPECT_EQ(ibv_wc_read_opcode(a.cqx), IBV_WC_SEND);
  ibv_end_poll(a.cqx);
  // A setter with no WR started is reported by wr_complete.
  ibv_wr_start(qx);
  ibv_wr_set_sge(qx, a.mr->lkey, reinterpret_cast<uintptr_t>(a.buf.data()), 8);
  EXPECT_EQ(ibv_wr_complete(qx), EINVAL);
  a.close();
  b.close();
}

// FLUSH (IBA 1.5) as a program built against rdma-core 45 or later posts
// it: these values are its verbs.h's, and its ibv_wr_flush calls the
// ibv_qp_ex entry after wr_atomic_write.  The device offers FLUSH to global
// visibility and not to persistence (reg_mr refuses that right); only the
// builder posts a FLUSH, ibv_post_send has no fields for it.
constexpr int kAccessFlushGlobal = 1 << 8;                  // IBV_ACCESS_FLUSH_GLOBAL
constexpr int kAccessFlushPersistent = 1 << 9;              // IBV_ACCESS_FLUSH_PERSISTENT
constexpr uint64_t kQpExWithFlush = uint64_t{1} << 11;      // IBV_QP_EX_WITH_FLUSH
constexpr auto kWrFlush = static_cast<ibv_wr_opcode>(14);   // IBV_WR_FLUSH
constexpr int kWcFlush = 8;                                 // IBV_WC_FLUSH
constexpr uint8_t kFlushGlobal = 1, kFlushRange = 0, kFlushMr = 1;
using WrFlush = void (*)(ibv_qp_ex*, uint32_t, uint64_t, size_t, uint8_t, uint8_t);
WrFlush wr_flush_of(ibv_qp_ex* qx) {
  WrFlush f = nullptr;
  std::memcpy(&f, reinterpret_cast<const uint8_t*>(qx) + sizeof(ibv_qp_ex), sizeof f);
  return f;
}

TEST_F(VerbsAbi, FlushThroughTheNewerQpEx) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_[0], nullptr, &ex), 0);
  EXPECT_NE(ex.device_cap_flags_ex & (uint64_t{1} << 38), 0u);  // IB_UVERBS_DEVICE_FLUSH_GLOBAL
  EXPECT_EQ(ex.device_cap_flags_ex & (uint64_t{1} << 39), 0u);  // IB_UVERBS_DEVICE_FLUSH_PERSISTENT
  Side a, b;
  a.send_ops |= kQpExWithFlush;
  b.mr_access |= kAccessFlushGlobal;
  b.qp_access |= kAccessFlushGlobal;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_RC, true));
  ASSERT_NO_FATAL_FAILURE(b.open(ctx_[1], IBV_QPT_RC, true));
  ASSERT_NO_FATAL_FAILURE(a.connect(b));
  ASSERT_NO_FATAL_FAILURE(b.connect(a));
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(b.pd, b.buf.data(), 64, IBV_ACCESS_LOCAL_WRITE | kAccessFlushPersistent), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);

  ibv_qp_ex* qx = ibv_qp_to_qp_ex(a.qp);
  ASSERT_NE(qx, nullptr);
  const WrFlush wr_flush = wr_flush_of(qx);
  ASSERT_NE(wr_flush, nullptr);
  ibv_wr_start(qx);
  qx->wr_id = 5;
  qx->wr_flags = IBV_SEND_SIGNALED;
  wr_flush(qx, b.mr->rkey, reinterpret_cast<uintptr_t>(b.buf.data()), 256, kFlushGlobal, kFlushRange);
  qx->wr_id = 6;
  wr_flush(qx, b.mr->rkey, 0, 0, kFlushGlobal, kFlushMr);
  ASSERT_EQ(ibv_wr_complete(qx), 0);
  ibv_poll_cq_attr pa{};
  for (uint64_t id : {5u, 6u}) {
    int rc = ENOENT;
    for (int i = 0; i < 500000 && rc == ENOENT; ++i) rc = ibv_start_poll(a.cqx, &pa);
    ASSERT_EQ(rc, 0);
    EXPECT_EQ(a.cqx->status, IBV_WC_SUCCESS) << ibv_wc_status_str(a.cqx->status);
    EXPECT_EQ(a.cqx->wr_id, id);
    EXPECT_EQ(static_cast<int>(ibv_wc_read_opcode(a.cqx)), kWcFlush);
    ibv_end_poll(a.cqx);
  }
  // A bad placement type is reported by wr_complete.
  ibv_wr_start(qx);
  wr_flush(qx, b.mr->rkey, 0, 0, 0, kFlushMr);
  EXPECT_EQ(ibv_wr_complete(qx), EINVAL);
  // ibv_post_send: refused, from the FLUSH on.
  ibv_send_wr w{};
  w.opcode = kWrFlush;
  w.wr.rdma = {reinterpret_cast<uintptr_t>(b.buf.data()), b.mr->rkey};
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a.qp, &w, &bad), EINVAL);
  EXPECT_EQ(bad, &w);
  // A QP created without IBV_QP_EX_WITH_FLUSH has no builder for it.
  Side c;
  ASSERT_NO_FATAL_FAILURE(c.open(ctx_[0], IBV_QPT_RC, true));
  EXPECT_EQ(wr_flush_of(ibv_qp_to_qp_ex(c.qp)), nullptr);
  a.close();
  b.close();
  c.close();
}

// XRC through the drop-in, as ibv_xsrq_pingpong uses it: a domain opened
// by file (twice: one domain), an XRC SRQ on it (ibv_create_srq_ex,
// ibv_get_srq_num), a receive QP (ibv_create_qp_ex with the domain) and a
// second handle on it (ibv_open_qp); a send QP on the other device whose
// requests name the SRQ, by ibv_post_send and by ibv_wr_set_xrc_srqn.
TEST_F(VerbsAbi, XrcDomainsSrqsAndQps) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_[1], &attr), 0);
  EXPECT_NE(attr.device_cap_flags & IBV_DEVICE_XRC, 0u);
  char file[] = "/tmp/uroce-xrcd.XXXXXX";
  const int fd = mkstemp(file);
  ASSERT_GE(fd, 0);
  unlink(file);
  ibv_xrcd_init_attr xa{};
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xa.fd = fd;
  xa.oflags = 0;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx_[1], &xa), nullptr) << "no domain for the file yet, and no O_CREAT";
  EXPECT_EQ(errno, EINVAL);
  xa.oflags = O_CREAT;
  ibv_xrcd* xrcd = ibv_open_xrcd(ctx_[1], &xa);
  ASSERT_NE(xrcd, nullptr) << std::strerror(errno);
  ibv_xrcd* again = ibv_open_xrcd(ctx_[1], &xa);
  ASSERT_NE(again, nullptr);
  xa.oflags = O_CREAT | O_EXCL;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx_[1], &xa), nullptr);
  EXPECT_EQ(errno, EINVAL);
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx_[1], &xa), nullptr) << "the flags are required";
  EXPECT_EQ(errno, EINVAL);

  ibv_pd* pd = ibv_alloc_pd(ctx_[1]);
  ASSERT_NE(pd, nullptr);
  ibv_cq* rcq = ibv_create_cq(ctx_[1], kCqe, nullptr, nullptr, 0);
  ASSERT_NE(rcq, nullptr);
  std::vector<uint8_t> rbuf(kBuf);
  ibv_mr* rmr = ibv_reg_mr(pd, rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(rmr, nullptr);
  ibv_srq_init_attr_ex sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
  sa.srq_type = IBV_SRQT_XRC;
  sa.xrcd = xrcd;
  sa.cq = rcq;
  sa.pd = pd;
  ibv_srq* srq = ibv_create_srq_ex(ctx_[1], &sa);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  uint32_t srqn = 0;
  ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
  EXPECT_NE(srqn, 0u);
  {
    ibv_srq_init_attr_ex no_cq = sa;
    no_cq.comp_mask &= ~IBV_SRQ_INIT_ATTR_CQ;
    errno = 0;
    EXPECT_EQ(ibv_create_srq_ex(ctx_[1], &no_cq), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }

  ibv_qp_init_attr_ex ra{};
  ra.qp_type = IBV_QPT_XRC_RECV;
  ra.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  ra.xrcd = again;  // the same domain by its other handle
  ibv_qp* tgt = ibv_create_qp_ex(ctx_[1], &ra);
  ASSERT_NE(tgt, nullptr) << std::strerror(errno);
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = tgt->qp_num;
  oa.xrcd = xrcd;
  oa.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp* opened = ibv_open_qp(ctx_[1], &oa);
  ASSERT_NE(opened, nullptr) << std::strerror(errno);
  EXPECT_EQ(opened->qp_num, tgt->qp_num);

  Side a;
  a.send_ops = IBV_QP_EX_WITH_SEND;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_XRC_SEND, true));
  ibv_gid gid_b{};
  ASSERT_EQ(ibv_query_gid(ctx_[1], kPort, kGidIndex, &gid_b), 0);
  auto path = [](const ibv_gid& to) {
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.grh.dgid = to;
    ah.grh.sgid_index = kGidIndex;
    ah.grh.hop_limit = 64;
    ah.port_num = kPort;
    return ah;
  };
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_INIT;
  m.port_num = kPort;
  m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(ibv_modify_qp(tgt, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  m = {};
  m.qp_state = IBV_QPS_RTR;
  m.path_mtu = IBV_MTU_1024;
  m.dest_qp_num = a.qp->qp_num;
  m.rq_psn = 0x100;
  m.min_rnr_timer = 12;
  m.ah_attr = path(a.gid());
  ASSERT_EQ(ibv_modify_qp(tgt, &m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  m = {};
  m.qp_state = IBV_QPS_RTS;
  m.timeout = 14;
  m.sq_psn = 0x100;
  ASSERT_EQ(ibv_modify_qp(tgt, &m, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN), 0);
  m = {};
  m.qp_state = IBV_QPS_RTR;
  m.path_mtu = IBV_MTU_1024;
  m.dest_qp_num = tgt->qp_num;
  m.rq_psn = 0x100;
  m.ah_attr = path(gid_b);
  ASSERT_EQ(ibv_modify_qp(a.qp, &m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN), 0);
  m = {};
  m.qp_state = IBV_QPS_RTS;
  m.timeout = 14;
  m.retry_cnt = 7;
  m.rnr_retry = 7;
  m.sq_psn = 0x100;
  ASSERT_EQ(ibv_modify_qp(a.qp, &m,
                          IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                              IBV_QP_MAX_QP_RD_ATOMIC),
            0);

  for (uint64_t i = 0; i < 2; ++i) {
    ibv_sge rs{reinterpret_cast<uintptr_t>(rbuf.data() + i * 256), 256, rmr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = 10 + i;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq, &rw, &rbad), 0);
  }
  std::memcpy(a.buf.data(), "by post_send", 12);
  ibv_sge ss{reinterpret_cast<uintptr_t>(a.buf.data()), 12, a.mr->lkey};
  ibv_send_wr sw{};
  sw.wr_id = 1;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  sw.qp_type.xrc.remote_srqn = srqn;
  ibv_send_wr* sbad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &sw, &sbad), 0);
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(a.qp);
  ASSERT_NE(qx, nullptr);
  std::memcpy(a.buf.data() + 64, "by wr_send", 10);
  ibv_wr_start(qx);
  qx->wr_id = 2;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qx);
  ibv_wr_set_xrc_srqn(qx, srqn);
  ibv_wr_set_sge(qx, a.mr->lkey, reinterpret_cast<uintptr_t>(a.buf.data() + 64), 10);
  ASSERT_EQ(ibv_wr_complete(qx), 0);

  std::vector<ibv_wc> got;
  for (int i = 0; i < 2000000 && got.size() < 2; ++i) {
    ibv_wc wc{};
    if (ibv_poll_cq(rcq, 1, &wc) == 1) got.push_back(wc);
  }
  ASSERT_EQ(got.size(), 2u);
  for (const ibv_wc& wc : got) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.qp_num, tgt->qp_num);
  }
  EXPECT_EQ(got[0].byte_len, 12u);
  EXPECT_EQ(got[1].byte_len, 10u);
  EXPECT_EQ(std::memcmp(rbuf.data(), "by post_send", 12), 0);
  EXPECT_EQ(std::memcmp(rbuf.data() + 256, "by wr_send", 10), 0);
  int sent = 0;
  ibv_poll_cq_attr pa{};
  for (int i = 0; i < 2000000 && sent < 2; ++i) {
    if (ibv_start_poll(a.cqx, &pa) != 0) continue;
    do {
      EXPECT_EQ(a.cqx->status, IBV_WC_SUCCESS);
      ++sent;
    } while (ibv_next_poll(a.cqx) == 0);
    ibv_end_poll(a.cqx);
  }
  EXPECT_EQ(sent, 2);

  // Teardown in the order the kernel asks: the domain is busy while its
  // SRQ and receive QP (both handles) live.
  EXPECT_EQ(ibv_close_xrcd(again), 0) << "another handle of the domain remains";
  EXPECT_EQ(ibv_close_xrcd(xrcd), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(tgt), 0);
  EXPECT_EQ(ibv_destroy_qp(opened), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_close_xrcd(xrcd), 0);
  a.close();
  EXPECT_EQ(ibv_dereg_mr(rmr), 0);
  EXPECT_EQ(ibv_destroy_cq(rcq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  close(fd);
}

// A parent domain's allocator as a program writes one: every block it
// hands out and takes back is recorded.  `mode` picks its answer:
// memory of its own, IBV_ALLOCATOR_USE_DEFAULT, or NULL (an error).
struct Arena {
  enum Mode { Own, UseDefault, Fail } mode = Own;
  int allocs = 0, frees = 0, defaults = 0;
  std::vector<void*> live;
  ibv_pd* pd_seen = nullptr;
  std::vector<uint64_t> types;
  bool aligned = true;

  static void* alloc(ibv_pd* pd, void* ctx, size_t size, size_t alignment, uint64_t type) {
    auto* a = static_cast<Arena*>(ctx);
    a->pd_seen = pd;
    a->types.push_back(type);
    if (a->mode == Fail) return nullptr;
    if (a->mode == UseDefault) {
      ++a->defaults;
      return IBV_ALLOCATOR_USE_DEFAULT;
    }
    void* p = nullptr;
    if (posix_memalign(&p, alignment, size) != 0) return nullptr;
    std::memset(p, 0, size);  // the man page: the callback zeroes
    a->aligned = a->aligned && reinterpret_cast<uintptr_t>(p) % alignment == 0 && alignment >= 16;
    ++a->allocs;
    a->live.push_back(p);
    return p;
  }
  static void free(ibv_pd*, void* ctx, void* ptr, uint64_t) {
    auto* a = static_cast<Arena*>(ctx);
    for (auto it = a->live.begin(); it != a->live.end(); ++it) {
      if (*it == ptr) {
        a->live.erase(it);
        ++a->frees;
        std::free(ptr);
        return;
      }
    }
    ADD_FAILURE() << "free of a block this allocator never gave: " << ptr;
  }
  ibv_parent_domain_init_attr attr(ibv_td* td = nullptr) {
    ibv_parent_domain_init_attr a{};
    a.td = td;
    a.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    a.alloc = &Arena::alloc;
    a.free = &Arena::free;
    a.pd_context = this;
    return a;
  }
};

// Parent domains (ibv_alloc_parent_domain(3)): the QP's, the CQ's and the
// SRQ's rings come from the application's allocator, which is told the
// parent domain and its context and gets every block back; RC traffic runs
// through them; a thread domain is taken; what was made with a parent
// domain goes before it, and it before its PD and thread domain (EBUSY).
TEST_F(VerbsAbi, ParentDomainRingsComeFromTheApplicationsAllocator) {
  Arena arena_a, arena_b;
  ibv_td_init_attr tda{};
  ibv_td* td = ibv_alloc_td(ctx_[0], &tda);
  ASSERT_NE(td, nullptr) << std::strerror(errno);
  ibv_parent_domain_init_attr pa = arena_a.attr(td), pb = arena_b.attr();
  Side a, b;
  a.parent_attr = &pa;
  b.parent_attr = &pb;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_RC, true));
  ASSERT_NO_FATAL_FAILURE(b.open(ctx_[1], IBV_QPT_RC, true));
  EXPECT_EQ(arena_a.allocs, 3) << "a CQ ring and a QP's send and receive rings";
  EXPECT_EQ(arena_a.pd_seen, a.pd) << "the allocator is told the parent domain";
  EXPECT_TRUE(arena_a.aligned);
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY) << "a parent domain names it";
  EXPECT_EQ(ibv_dealloc_pd(a.base_pd), EBUSY) << "a parent domain stands for it";
  EXPECT_EQ(ibv_dealloc_pd(a.pd), EBUSY) << "a QP and a CQ were made with it";

  // An SRQ on it too, and a resize of the CQ through the same allocator.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(b.pd, &sa);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(arena_b.allocs, 4);
  EXPECT_EQ(ibv_resize_cq(b.cq, 2 * kCqe), 0);
  EXPECT_EQ(arena_b.allocs, 5);
  EXPECT_EQ(arena_b.frees, 1) << "the old ring went back";

  ASSERT_NO_FATAL_FAILURE(a.connect(b));
  ASSERT_NO_FATAL_FAILURE(b.connect(a));
  for (uint64_t i = 0; i < 20; ++i) {  // more than the rings hold at once
    b.post_recv(100 + i, kBuf);
    const char msg[] = "through the parent domain's rings";
    std::memcpy(a.buf.data(), msg, sizeof msg);
    ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf.data()), sizeof msg, a.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
    ibv_wc wc{};
    int n = 0;
    for (int k = 0; k < 1000000 && n == 0; ++k) n = ibv_poll_cq(b.cq, 1, &wc);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 100 + i);
    EXPECT_STREQ(reinterpret_cast<const char*>(b.buf.data()), msg);
    n = 0;
    for (int k = 0; k < 1000000 && n == 0; ++k) n = ibv_poll_cq(a.cq, 1, &wc);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(wc.wr_id, i);
  }
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  a.close();
  b.close();
  EXPECT_EQ(arena_a.frees, arena_a.allocs) << "every block given back";
  EXPECT_EQ(arena_b.frees, arena_b.allocs);
  EXPECT_TRUE(arena_a.live.empty());
  EXPECT_EQ(ibv_dealloc_td(td), 0);

  // IBV_ALLOCATOR_USE_DEFAULT: the library's own memory; NULL: ENOMEM.
  Arena def, failing;
  def.mode = Arena::UseDefault;
  failing.mode = Arena::Fail;
  ibv_pd* pd = ibv_alloc_pd(ctx_[0]);
  ASSERT_NE(pd, nullptr);
  ibv_parent_domain_init_attr da = def.attr(), fa = failing.attr();
  da.pd = pd;
  fa.pd = pd;
  ibv_pd* pdd = ibv_alloc_parent_domain(ctx_[0], &da);
  ibv_pd* pdf = ibv_alloc_parent_domain(ctx_[0], &fa);
  ASSERT_NE(pdd, nullptr);
  ASSERT_NE(pdf, nullptr);
  sa.attr.max_wr = 16;
  srq = ibv_create_srq(pdd, &sa);
  ASSERT_NE(srq, nullptr) << std::strerror(errno);
  EXPECT_EQ(def.defaults, 1);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  errno = 0;
  EXPECT_EQ(ibv_create_srq(pdf, &sa), nullptr);
  EXPECT_EQ(errno, ENOMEM) << "the allocator's NULL";
  // Bad requests: no PD, a parent domain over a parent domain, an
  // allocator without its free, unknown bits; a CQ's PD that is no parent domain.
  ibv_parent_domain_init_attr bad = def.attr();
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_[0], &bad), nullptr);
  bad.pd = pdd;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_[0], &bad), nullptr);
  bad.pd = pd;
  bad.free = nullptr;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_[0], &bad), nullptr);
  bad = def.attr();
  bad.pd = pd;
  bad.comp_mask |= 1u << 7;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_[0], &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 4;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.parent_domain = pd;
  EXPECT_EQ(ibv_create_cq_ex(ctx_[0], &ca), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(pdd), 0);
  EXPECT_EQ(ibv_dealloc_pd(pdf), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// ibv_import_device / ibv_import_pd / ibv_import_mr within one process: a
// dup of a context's command fd opens another context on its device; the
// PD and MR come back by handle as other handles on the same objects;
// unimporting (or closing the importing context) frees only the handles,
// and the PD stays busy while an import holds it.
TEST_F(VerbsAbi, ImportSharesAContextsPdAndMr) {
  ibv_pd* pd = ibv_alloc_pd(ctx_[0]);
  ASSERT_NE(pd, nullptr);
  static std::array<uint8_t, kBuf> buf;
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_import_device(-1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  EXPECT_EQ(ibv_import_device(pipefd[0]), nullptr) << "not a context's fd";
  EXPECT_EQ(errno, EINVAL);
  close(pipefd[0]);
  close(pipefd[1]);

  for (int round = 0; round < 2; ++round) {
    ibv_context* ic = ibv_import_device(dup(ctx_[0]->cmd_fd));
    ASSERT_NE(ic, nullptr) << std::strerror(errno);
    EXPECT_EQ(ic->device, ctx_[0]->device);
    EXPECT_EQ(ibv_import_pd(ic, pd->handle + 1000), nullptr);
    ibv_pd* ipd = ibv_import_pd(ic, pd->handle);
    ASSERT_NE(ipd, nullptr);
    EXPECT_EQ(ipd->handle, pd->handle);
    EXPECT_EQ(ibv_import_mr(ipd, mr->handle ^ 0x1), nullptr);
    ibv_mr* imr = ibv_import_mr(ipd, mr->handle);
    ASSERT_NE(imr, nullptr);
    EXPECT_EQ(imr->lkey, mr->lkey);
    EXPECT_EQ(imr->rkey, mr->rkey);
    EXPECT_EQ(imr->addr, mr->addr);
    EXPECT_EQ(imr->length, mr->length);
    EXPECT_EQ(imr->pd, ipd);
    if (round == 0) {
      ibv_unimport_mr(imr);
      ibv_unimport_pd(ipd);
    }  // round 1: closing the importing context lets go of them
    EXPECT_EQ(ibv_close_device(ic), 0);
  }
  // The objects are the original context's, whole: the MR still
  // deregisters, and the PD, no import holding it any more, deallocates.
  ibv_pd* held = nullptr;
  {
    ibv_context* ic = ibv_import_device(dup(ctx_[0]->cmd_fd));
    ASSERT_NE(ic, nullptr);
    held = ibv_import_pd(ic, pd->handle);
    ASSERT_NE(held, nullptr);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY) << "an import holds it";
    ibv_unimport_pd(held);
    EXPECT_EQ(ibv_close_device(ic), 0);
  }
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

uint64_t now_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return uint64_t(t.tv_sec) * 1'000'000'000u + uint64_t(t.tv_nsec);
}

// Completion timestamps (ibv_create_cq_ex(3), ibv_query_rt_values_ex(3)):
// the device clock and its rate in query_device_ex, each completion's
// device-clock and wall-clock time between the clock read before the send
// and after the poll, in order.
TEST_F(VerbsAbi, CompletionTimestamps) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_[0], nullptr, &ex), 0);
  EXPECT_EQ(ex.hca_core_clock, 1'000'000u);  // kHz: the clock counts nanoseconds
  EXPECT_EQ(ex.completion_timestamp_mask, UINT64_MAX);
  ibv_values_ex v{};
  v.comp_mask = 1u << 5;  // not a value
  EXPECT_EQ(ibv_query_rt_values_ex(ctx_[0], &v), EINVAL);
  Side a, b;
  a.extra_wc_flags = b.extra_wc_flags =
      IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_RC, true));
  ASSERT_NO_FATAL_FAILURE(b.open(ctx_[1], IBV_QPT_RC, true));
  ASSERT_NO_FATAL_FAILURE(a.connect(b));
  ASSERT_NO_FATAL_FAILURE(b.connect(a));
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  ASSERT_EQ(ibv_query_rt_values_ex(ctx_[0], &v), 0);
  EXPECT_EQ(v.comp_mask, uint32_t{IBV_VALUES_MASK_RAW_CLOCK});
  const uint64_t dev_before = static_cast<uint64_t>(v.raw_clock.tv_nsec);
  const uint64_t wall_before = now_ns(CLOCK_REALTIME);
  uint64_t prev = 0;
  for (uint64_t i = 0; i < 3; ++i) {
    b.post_recv(100 + i, 64);
    ibv_qp_ex* qx = ibv_qp_to_qp_ex(a.qp);
    ASSERT_NE(qx, nullptr);
    ibv_wr_start(qx);
    qx->wr_id = i;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qx);
    ibv_wr_set_sge(qx, a.mr->lkey, reinterpret_cast<uintptr_t>(a.buf.data()), 16);
    ASSERT_EQ(ibv_wr_complete(qx), 0);
    ibv_poll_cq_attr pa{};
    int rc = ENOENT;
    for (int k = 0; k < 500000 && rc == ENOENT; ++k) rc = ibv_start_poll(b.cqx, &pa);
    ASSERT_EQ(rc, 0);
    const uint64_t ts = ibv_wc_read_completion_ts(b.cqx);
    const uint64_t wall = ibv_wc_read_completion_wallclock_ns(b.cqx);
    ibv_end_poll(b.cqx);
    v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    ASSERT_EQ(ibv_query_rt_values_ex(ctx_[1], &v), 0);
    EXPECT_GE(ts, dev_before) << i;
    EXPECT_LE(ts, static_cast<uint64_t>(v.raw_clock.tv_nsec)) << i;
    EXPECT_GE(ts, prev) << i;
    prev = ts;
    EXPECT_GE(wall, wall_before) << i;
    EXPECT_LE(wall, now_ns(CLOCK_REALTIME)) << i;
    rc = ENOENT;
    for (int k = 0; k < 500000 && rc == ENOENT; ++k) rc = ibv_start_poll(a.cqx, &pa);
    ASSERT_EQ(rc, 0);
    EXPECT_GE(ibv_wc_read_completion_ts(a.cqx), dev_before);
    ibv_end_poll(a.cqx);
  }
  a.close();
  b.close();
}

TEST_F(VerbsAbi, UdWithGrhAndAhFromWc) {
  Side a, b;
  ASSERT_NO_FATAL_FAILURE(a.open(ctx_[0], IBV_QPT_UD, false));
  ASSERT_NO_FATAL_FAILURE(b.open(ctx_[1], IBV_QPT_UD, false));
  ASSERT_NO_FATAL_FAILURE(a.connect(b));
  ASSERT_NO_FATAL_FAILURE(b.connect(a));
  constexpr uint32_t kGrh = 40, kLen = 256;
  b.post_recv(3, kGrh + kLen);
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.grh.dgid = b.gid();
  aa.grh.sgid_index = kGidIndex;
  aa.grh.hop_limit = 64;
  aa.port_num = kPort;
  ibv_ah* ah = ibv_create_ah(a.pd, &aa);
  ASSERT_NE(ah, nullptr) << std::strerror(errno);
  for (uint32_t i = 0; i < kLen; ++i) a.buf[i] = static_cast<uint8_t>(255 - i);
  ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf.data()), kLen, a.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 9;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud = {ah, b.qp->qp_num, 0x11111111};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  ibv_wc wc = b.wait_one();
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
  EXPECT_EQ(wc.byte_len, kGrh + kLen);
  EXPECT_EQ(wc.src_qp, a.qp->qp_num);
  EXPECT_EQ(std::memcmp(b.buf.data() + kGrh, a.buf.data(), kLen), 0);
  // The reply address, from the GRH area (IPv4 header in its last 20 bytes).
  ibv_ah_attr back{};
  ASSERT_EQ(ibv_init_ah_from_wc(b.ctx, kPort, &wc, reinterpret_cast<ibv_grh*>(b.buf.data()), &back), 0);
  EXPECT_EQ(back.is_global, 1);
  EXPECT_EQ(std::memcmp(back.grh.dgid.raw, a.gid().raw, 16), 0);
  EXPECT_EQ(back.grh.sgid_index, kGidIndex);
  ibv_ah* reply = ibv_create_ah_from_wc(b.pd, &wc, reinterpret_cast<ibv_grh*>(b.buf.data()), kPort);
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(ibv_destroy_ah(reply), 0);
  const ibv_wc swc = a.wait_one();
  EXPECT_EQ(swc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  a.close();
  b.close();
}

}  // namespace
