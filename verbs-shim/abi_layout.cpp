// The layouts compiled-in inline code of unmodified programs relies on
// (research/abi-shim.md §4, measured on x86-64 with rdma-core 44's
// headers).  The shim is built against the installed headers; if they ever
// differ from what the Debian binaries were built with, this file stops the
// build instead of a program crashing at run time.
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "verbs-shim/shim.hpp"

namespace uroce::shim {
namespace {

// ---- ibv_context and its legacy ops table (§4.1) ----------------------------------
static_assert(sizeof(ibv_context) == 328);
static_assert(offsetof(ibv_context, device) == 0);
static_assert(offsetof(ibv_context, ops) == 8);
static_assert(sizeof(ibv_context_ops) == 256);
static_assert(offsetof(ibv_context, cmd_fd) == 264);
static_assert(offsetof(ibv_context, async_fd) == 268);
static_assert(offsetof(ibv_context, num_comp_vectors) == 272);
static_assert(offsetof(ibv_context, mutex) == 280);
static_assert(offsetof(ibv_context, abi_compat) == 320);
// The slots inline code calls, as offsets from the ibv_context.
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, alloc_mw) == 0x40);
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, bind_mw) == 0x48);
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, dealloc_mw) == 0x50);
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, poll_cq) == 0x60);
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, req_notify_cq) == 0x68);
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, post_srq_recv) == 0xa8);
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, post_send) == 0xd0);
static_assert(offsetof(ibv_context, ops) + offsetof(ibv_context_ops, post_recv) == 0xd8);

// ---- verbs_context (§4.2): 648 bytes, the ibv_context last ------------------------
static_assert(sizeof(verbs_context) == 648);
static_assert(offsetof(verbs_context, context) == 320);
static_assert(offsetof(verbs_context, sz) == 312);
static_assert(offsetof(verbs_context, query_port) == 0);
static_assert(offsetof(verbs_context, advise_mr) == 8);
static_assert(offsetof(verbs_context, alloc_null_mr) == 16);
static_assert(offsetof(verbs_context, reg_dm_mr) == 56);
static_assert(offsetof(verbs_context, alloc_dm) == 64);
static_assert(offsetof(verbs_context, free_dm) == 72);
static_assert(offsetof(verbs_context, modify_cq) == 136);
static_assert(offsetof(verbs_context, query_rt_values) == 192);
static_assert(offsetof(verbs_context, create_cq_ex) == 200);
static_assert(offsetof(verbs_context, priv) == 208);
static_assert(offsetof(verbs_context, query_device_ex) == 216);
static_assert(offsetof(verbs_context, ibv_destroy_flow) == 224);
static_assert(offsetof(verbs_context, ABI_placeholder2) == 232);
static_assert(offsetof(verbs_context, ibv_create_flow) == 240);
static_assert(offsetof(verbs_context, ABI_placeholder1) == 248);
static_assert(offsetof(verbs_context, open_qp) == 256);
static_assert(offsetof(verbs_context, create_qp_ex) == 264);
static_assert(offsetof(verbs_context, get_srq_num) == 272);
static_assert(offsetof(verbs_context, create_srq_ex) == 280);
static_assert(offsetof(verbs_context, open_xrcd) == 288);
static_assert(offsetof(verbs_context, close_xrcd) == 296);
// Our Context begins with the verbs_context: the application's ibv_context
// is at +320 from the object we allocate.
static_assert(offsetof(Context, vctx) == 0);

// ---- QP (§4.4): every QP is ibv_qp_ex-headed --------------------------------------
static_assert(sizeof(ibv_qp) == 160);
static_assert(offsetof(ibv_qp, context) == 0);
static_assert(offsetof(ibv_qp, qp_context) == 8);
static_assert(offsetof(ibv_qp, pd) == 16);
static_assert(offsetof(ibv_qp, send_cq) == 24);
static_assert(offsetof(ibv_qp, recv_cq) == 32);
static_assert(offsetof(ibv_qp, srq) == 40);
static_assert(offsetof(ibv_qp, handle) == 48);
static_assert(offsetof(ibv_qp, qp_num) == 52);
static_assert(offsetof(ibv_qp, state) == 56);
static_assert(offsetof(ibv_qp, qp_type) == 60);
static_assert(offsetof(ibv_qp, mutex) == 64);
static_assert(offsetof(ibv_qp, cond) == 104);
static_assert(offsetof(ibv_qp, events_completed) == 152);
static_assert(sizeof(ibv_qp_ex) == 352);
static_assert(offsetof(ibv_qp_ex, qp_base) == 0);
static_assert(offsetof(ibv_qp_ex, comp_mask) == 160);
static_assert(offsetof(ibv_qp_ex, wr_id) == 168);
static_assert(offsetof(ibv_qp_ex, wr_flags) == 176);
static_assert(offsetof(ibv_qp_ex, wr_atomic_cmp_swp) == 184);
static_assert(offsetof(ibv_qp_ex, wr_start) == 320);
static_assert(offsetof(ibv_qp_ex, wr_complete) == 328);
static_assert(offsetof(ibv_qp_ex, wr_abort) == 336);
static_assert(offsetof(ibv_qp_ex, wr_atomic_write) == 344);
static_assert(offsetof(Qp, ex) == 0);
static_assert(offsetof(Qp, wr_flush) == 352);  // rdma-core 45+'s ibv_qp_ex::wr_flush

// ---- CQ: every CQ is ibv_cq_ex-headed, ibv_cq's fields first -----------------------
static_assert(sizeof(ibv_cq) == 128);
static_assert(offsetof(ibv_cq, context) == 0);
static_assert(offsetof(ibv_cq, channel) == 8);
static_assert(offsetof(ibv_cq, cq_context) == 16);
static_assert(offsetof(ibv_cq, handle) == 24);
static_assert(offsetof(ibv_cq, cqe) == 28);
static_assert(offsetof(ibv_cq, mutex) == 32);
static_assert(offsetof(ibv_cq, cond) == 72);
static_assert(offsetof(ibv_cq, comp_events_completed) == 120);
static_assert(offsetof(ibv_cq, async_events_completed) == 124);
static_assert(sizeof(ibv_cq_ex) == 288);
static_assert(offsetof(ibv_cq_ex, context) == offsetof(ibv_cq, context));
static_assert(offsetof(ibv_cq_ex, channel) == offsetof(ibv_cq, channel));
static_assert(offsetof(ibv_cq_ex, cq_context) == offsetof(ibv_cq, cq_context));
static_assert(offsetof(ibv_cq_ex, cqe) == offsetof(ibv_cq, cqe));
static_assert(offsetof(ibv_cq_ex, mutex) == offsetof(ibv_cq, mutex));
static_assert(offsetof(ibv_cq_ex, cond) == offsetof(ibv_cq, cond));
static_assert(offsetof(ibv_cq_ex, comp_events_completed) == offsetof(ibv_cq, comp_events_completed));
static_assert(offsetof(ibv_cq_ex, async_events_completed) == offsetof(ibv_cq, async_events_completed));
static_assert(offsetof(ibv_cq_ex, comp_mask) == 128);
static_assert(offsetof(ibv_cq_ex, status) == 132);
static_assert(offsetof(ibv_cq_ex, wr_id) == 136);
static_assert(offsetof(ibv_cq_ex, start_poll) == 144);
static_assert(offsetof(ibv_cq_ex, next_poll) == 152);
static_assert(offsetof(ibv_cq_ex, end_poll) == 160);
static_assert(offsetof(ibv_cq_ex, read_opcode) == 168);
static_assert(offsetof(ibv_cq_ex, read_completion_ts) == 248);
static_assert(offsetof(Cq, ex) == 0);

// ---- the other objects ---------------------------------------------------------------
static_assert(sizeof(ibv_srq) == 128);
static_assert(offsetof(ibv_srq, context) == 0);
static_assert(offsetof(ibv_srq, srq_context) == 8);
static_assert(offsetof(ibv_srq, pd) == 16);
static_assert(offsetof(ibv_srq, handle) == 24);
static_assert(sizeof(ibv_pd) == 16);
static_assert(offsetof(ibv_pd, context) == 0);
static_assert(offsetof(ibv_pd, handle) == 8);
static_assert(sizeof(ibv_mr) == 48);
static_assert(offsetof(ibv_mr, context) == 0);
static_assert(offsetof(ibv_mr, pd) == 8);
static_assert(offsetof(ibv_mr, addr) == 16);
static_assert(offsetof(ibv_mr, length) == 24);
static_assert(offsetof(ibv_mr, handle) == 32);
static_assert(offsetof(ibv_mr, lkey) == 36);
static_assert(offsetof(ibv_mr, rkey) == 40);
static_assert(sizeof(ibv_comp_channel) == 16);
static_assert(offsetof(ibv_comp_channel, context) == 0);
static_assert(offsetof(ibv_comp_channel, fd) == 8);
static_assert(offsetof(ibv_comp_channel, refcnt) == 12);
static_assert(sizeof(ibv_device) == 664);
static_assert(offsetof(ibv_device, node_type) == 16);
static_assert(offsetof(ibv_device, transport_type) == 20);
static_assert(offsetof(ibv_device, name) == 24);
static_assert(offsetof(ibv_device, dev_name) == 88);
static_assert(offsetof(ibv_device, dev_path) == 152);
static_assert(offsetof(ibv_device, ibdev_path) == 408);
static_assert(offsetof(IbvDevice, dev) == 0);
static_assert(offsetof(Pd, base) == 0 && offsetof(Mr, base) == 0 && offsetof(Channel, base) == 0);
static_assert(offsetof(Srq, base) == 0);
static_assert(offsetof(rnic::Ah, ibv) == 0);  // wr.ud.ah is the rnic::Ah itself

// ---- caller-allocated structures ----------------------------------------------------
// ibv_query_port's three sizes (§4.3): the exported compat struct ends at
// `flags` (48), v44's inline passes 52 (port_cap_flags2), v50+ 56.
static_assert(offsetof(ibv_port_attr, port_cap_flags2) == 48);  // the compat export's size
static_assert(sizeof(ibv_port_attr) == 52);
static_assert(sizeof(ibv_device_attr) == 232);
static_assert(sizeof(ibv_device_attr_ex) == 400);
static_assert(sizeof(ibv_wc) == 48);
static_assert(sizeof(ibv_send_wr) == 128);
static_assert(sizeof(ibv_recv_wr) == 32);
static_assert(sizeof(ibv_qp_attr) == 144);
static_assert(sizeof(ibv_ah_attr) == 32);
static_assert(sizeof(ibv_gid_entry) == 32);

// Both GID-type enums (§3.2): ibv_gid_entry.gid_type uses enum ibv_gid_type
// (RoCE v2 = 2); ibv_query_gid_type's sysfs enum has RoCE v2 = 1.
static_assert(IBV_GID_TYPE_ROCE_V2 == 2);

}  // namespace
}  // namespace uroce::shim
