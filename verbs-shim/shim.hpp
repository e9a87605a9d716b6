// The drop-in libibverbs.so.1: the objects it hands to applications.
//
// Every object embeds the libibverbs ABI structure first (DESIGN.md, STYLE 9:
// `struct Qp { ibv_qp_ex ex; ... }`), so the pointer the application holds
// and ours are the same address and one helper per type converts between
// them.  Compiled-in inline code of the application reads these structures
// at fixed offsets (research/abi-shim.md §4); abi_layout.cpp asserts every
// offset against the installed rdma-core 44 headers.
//
// What each object wraps is the software RNIC's (transport/rnic/): the shim
// is a one-to-one translation, with libibverbs' conventions (errno, NULL,
// bad_wr) at the boundary.  Nothing here throws: every export is noexcept.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "transport/rnic/rnic.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::transport {
class Device;
}

// Every exported function: C linkage, default visibility (the version
// scripts decide what is really exported, and under which node).
#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::shim {

// ---- device ------------------------------------------------------------------------
// The ibv_device an application's ibv_get_device_list finds: one per
// configured uroce device that came up, for the life of the process
// (ibv_free_device_list frees only the array, as upstream).  The device
// itself — port, engine, RNIC — is transport::Device.
struct IbvDevice {
  ibv_device dev;                        // first: what the application holds
  transport::Device* tdev = nullptr;     // the device: port, engine, RNIC
  rnic::Rnic& rnic() const noexcept;     // tdev->rnic()
  bool inline_progress = false;          // UROCE_PROGRESS=inline: callers drive the loop
};

// ---- context -----------------------------------------------------------------------
// The verbs_context ends with the ibv_context the application holds; the
// extended ops are found by going back from it (verbs_get_ctx).
// What an application made on a context, by kind, in the order
// ibv_close_device destroys what is left (users before what they use).
enum class Owned : uint8_t { ImportedMr, Qp, Srq, Xrcd, Ah, Mw, Mr, Cq, Channel, ParentDomain, Td, ImportedPd, Pd, kCount };  // destroyed in this order

struct ContextObjects;  // objects.cpp

struct Context {
  verbs_context vctx;
  IbvDevice* dev = nullptr;
  ContextObjects* objects = nullptr;  // what ibv_close_device frees
  // Its async events (ibv_get_async_event; async_fd is this queue's): its
  // own objects' and the device's, never another context's.
  transport::EventQueue<rnic::AsyncEvent>* async = nullptr;
};
// The RNIC's async event sink (Rnic::set_async_sink): an event goes to the
// queue of the context that owns its QP, CQ or SRQ, a port's or the
// device's to every context open on the device.  `arg` is the IbvDevice.
void route_async_event(void* arg, const rnic::AsyncEvent& ev) noexcept;
// The events of `obj` (a Qp*, Cq* or Srq* of ours) not yet read go with it.
void drop_async_events(Context* ctx, const void* obj) noexcept;

// Records `obj` (the ABI pointer handed out) as made on `ctx`, or forgets
// it when destroyed.  ibv_close_device destroys whatever is still recorded,
// as closing the uverbs fd makes the kernel do (uverbs_destroy_ufile_hw):
// a closed context leaves no QP that still answers the wire, no MR that
// still admits RDMA into memory the program may reuse.
void own(ibv_context* ctx, Owned kind, void* obj) noexcept;
void disown(ibv_context* ctx, Owned kind, void* obj) noexcept;
// Whether `obj` is an object of `kind` that `ctx` made and still holds,
// under the handle it was given (its ABI structure's `handle`): 0, or
// ENOENT as the kernel's uverbs answers a handle its file does not hold
// (EINVAL for a null one).  Every verb that names an object checks it
// before it acts, so that a stale or garbled handle is an error, never a
// use of freed memory (a kind without a handle field is checked by
// address alone).
int check_handle(ibv_context* ctx, Owned kind, void* obj) noexcept;
// check_handle, and the record goes at once (under the same lock): for an
// object the RNIC frees itself, whose address a concurrent create may
// reuse before a disown after the free could run.  own() puts it back if
// the destroy then fails.
int take_handle(ibv_context* ctx, Owned kind, void* obj) noexcept;
ContextObjects* new_context_objects() noexcept;
// Destroys what is still recorded, then the record.
void close_context_objects(ibv_context* ctx) noexcept;

// ---- objects -----------------------------------------------------------------------
// A thread domain (ibv_alloc_td(3)): a hint that what is made with it is
// used by one thread.  Taken and kept; nothing here changes for it.
struct Td {
  ibv_td base;
  std::atomic<uint32_t> users{0};  // parent domains that name it
};

struct Pd;
// The kind a PD handle is owned as: a plain PD, a parent domain, or
// another context's PD imported.
Owned pd_kind(const Pd* pd) noexcept;

struct Pd {
  ibv_pd base;
  rnic::Pd* impl = nullptr;
  // A parent domain (ibv_alloc_parent_domain(3), domains.cpp) stands for
  // its PD everywhere (`impl` is that PD's) and adds a thread domain and
  // the application's allocator for the queues made with it.
  bool parent = false;
  bool imported = false;  // ibv_import_pd: another context's PD; ibv_unimport_pd frees only this
  Td* td = nullptr;
  bool has_alloc = false;
  rnic::RingAllocator alloc{};
  std::atomic<uint32_t> users{0};  // parent domain: the QPs, CQs and SRQs made with it
  const rnic::RingAllocator* ring_allocator() const noexcept { return has_alloc ? &alloc : nullptr; }
};
inline Owned pd_kind(const Pd* pd) noexcept {
  return pd->parent ? Owned::ParentDomain : pd->imported ? Owned::ImportedPd : Owned::Pd;
}
// `pd` as the parent of a new object on `ctx`: 0, or EINVAL when it is
// not a PD that context holds under its handle (the kernel's lookup of
// the PD handle a create command names).
inline int check_pd(ibv_context* ctx, ibv_pd* pd) noexcept {
  if (pd == nullptr) return EINVAL;
  return check_handle(ctx, pd_kind(reinterpret_cast<const Pd*>(pd)), pd) == 0 ? 0 : EINVAL;
}

// A queue made with `pd` holds it when it is a parent domain, whose
// allocator frees the queue's rings; dealloc_pd is EBUSY until it lets go.
void hold_domain(ibv_pd* pd) noexcept;
void release_domain(ibv_pd* pd) noexcept;

// What goes with a QP or SRQ the device destroyed: its async events not
// yet read, its handle, its parent domain's reference, the ABI's
// condition variable.  The caller then frees its wrapper.
template <class Ibv, class Wrapper>
void forget_destroyed(Ibv* ib, Owned kind, Wrapper* w) noexcept {
  drop_async_events(w->ctx, w);
  disown(ib->context, kind, ib);
  release_domain(ib->pd);
  pthread_cond_destroy(&ib->cond);
  pthread_mutex_destroy(&ib->mutex);
}

struct Mr {
  ibv_mr base;
  rnic::Mr* impl = nullptr;
  bool imported = false;  // ibv_import_mr: another context's MR; ibv_unimport_mr frees only this
};

struct Channel {
  ibv_comp_channel base;
  rnic::CompChannel* impl = nullptr;
};

// Every CQ has the extended layout (ibv_cq_ex begins with ibv_cq's fields):
// ibv_start_poll / ibv_next_poll store status and wr_id in the ibv_cq_ex,
// and the read_* callbacks read `cur`.
struct Cq {
  ibv_cq_ex ex;
  rnic::Cq* impl = nullptr;
  Context* ctx = nullptr;
  ibv_pd* parent_domain = nullptr;  // IBV_CQ_INIT_ATTR_MASK_PD: its allocator holds the ring
  uint64_t wc_flags = 0;      // IBV_WC_EX_WITH_* asked at creation
  ibv_wc cur{};               // the completion start_poll/next_poll made current
  uint64_t cur_ts = 0;        // its device-clock time (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
  uint64_t cur_wall_ns = 0;   // its wall-clock time (..._WALLCLOCK)
};

struct Srq {
  ibv_srq base;
  rnic::Srq* impl = nullptr;
  Context* ctx = nullptr;
};

// An XRC domain handle (ibv_open_xrcd(3), xrc.cpp).
struct Xrcd {
  ibv_xrcd base;
  rnic::Xrcd* impl = nullptr;
};

// AHs need no wrapper: rnic::Ah begins with the ibv_ah that UD work
// requests name (wr.ud.ah), and the shim hands out exactly that.

// The work requests an ibv_wr_* batch builds between wr_start and
// wr_complete.  Storage grows with the largest batch and is then reused:
// SGE lists and inline bytes live in side arrays, referenced by index until
// wr_complete links them into a chain for Qp::post_send.
struct WrBatch {
  struct Entry {
    ibv_send_wr wr{};
    size_t sge_first = 0;     // into sges
    size_t inline_first = 0;  // into inline_bytes
    size_t inline_len = 0;
    bool is_inline = false;
  };
  std::vector<Entry> wrs;
  std::vector<ibv_sge> sges;
  std::vector<uint8_t> inline_bytes;
  std::vector<ibv_send_wr> chain;   // built at wr_complete
  std::vector<ibv_sge> inline_sges; // one per inline WR at wr_complete
  bool open = false;
  int error = 0;                    // the first builder error (EINVAL/ENOMEM), reported by wr_complete
};

// Every QP has the extended layout, so ibv_qp_to_qp_ex works on any QP
// created with send_ops_flags (upstream: NULL for the others).
struct Qp {
  ibv_qp_ex ex;
  // ibv_qp_ex's entries after rdma-core 44's last: a program built against
  // a newer verbs.h reads them right behind it (abi_layout.cpp).
  rnic::verbs_newer::WrFlushFn wr_flush = nullptr;
  rnic::Qp* impl = nullptr;
  Context* ctx = nullptr;
  bool extended = false;            // created by ibv_create_qp_ex with send ops
  uint64_t send_ops = 0;            // IBV_QP_EX_WITH_* allowed
  WrBatch* batch = nullptr;         // ibv_wr_* state (extended QPs)
};

// ---- downcasts ---------------------------------------------------------------------
// Each object begins with its ABI structure, so the conversion is the
// identity on the address (pointer-interconvertible, standard layout).
template <class Obj, class Abi>
Obj* from_abi(Abi* p) noexcept {
  static_assert(std::is_standard_layout_v<Obj>);
  return reinterpret_cast<Obj*>(p);
}

inline IbvDevice* to_dev(ibv_device* d) noexcept { return from_abi<IbvDevice>(d); }
inline Pd* to_pd(ibv_pd* p) noexcept { return from_abi<Pd>(p); }
inline Td* to_td(ibv_td* t) noexcept { return from_abi<Td>(t); }
inline Mr* to_mr(ibv_mr* m) noexcept { return from_abi<Mr>(m); }
inline Channel* to_channel(ibv_comp_channel* c) noexcept { return from_abi<Channel>(c); }
inline Cq* to_cq(ibv_cq* c) noexcept { return from_abi<Cq>(c); }
inline Cq* to_cq(ibv_cq_ex* c) noexcept { return from_abi<Cq>(c); }
inline Srq* to_srq(ibv_srq* s) noexcept { return from_abi<Srq>(s); }
inline Xrcd* to_xrcd(ibv_xrcd* x) noexcept { return from_abi<Xrcd>(x); }
inline Qp* to_qp(ibv_qp* q) noexcept { return from_abi<Qp>(q); }
inline Qp* to_qp(ibv_qp_ex* q) noexcept { return from_abi<Qp>(q); }

// The context: back from the embedded ibv_context (container_of).
inline Context* to_ctx(ibv_context* c) noexcept {
  auto* vctx = reinterpret_cast<verbs_context*>(reinterpret_cast<uint8_t*>(c) - offsetof(verbs_context, context));
  return from_abi<Context>(vctx);
}
inline IbvDevice* ctx_dev(ibv_context* c) noexcept { return to_ctx(c)->dev; }
inline rnic::Rnic& rnic_of(ibv_context* c) noexcept { return ctx_dev(c)->rnic(); }

inline ibv_cq* abi(Cq* c) noexcept { return reinterpret_cast<ibv_cq*>(&c->ex); }
inline ibv_qp* abi(Qp* q) noexcept { return &q->ex.qp_base; }

// ---- helpers shared by the files -------------------------------------------------
// errno = err, then `ret` (the man pages' "NULL and errno" convention).
template <class T>
T fail(int err, T ret) noexcept {
  errno = err;
  return ret;
}

// One iteration of the device's loop from the caller's thread when no other
// thread is in it: how the loop runs with UROCE_PROGRESS=inline, and an
// assist that keeps the engine thread off the caller's core otherwise.
void kick(IbvDevice* dev) noexcept;
// After a post: one iteration, without holding the engine thread back (the
// application may not call again for a while: it may spin on memory); or,
// within a burst of posts, none (Engine::post_kick).
void kick_post(IbvDevice* dev) noexcept;
// A blocking event wait: `take` reads `fd` (a CQ channel, the async fd).
// Under inline progress with `fd` blocking, nobody else would run the loop:
// it runs once here, then the backstop runs it while `take` sleeps in
// read(2), where a signal interrupts it (Engine::Sleeper).  take()'s result.
int wait_event(IbvDevice* dev, int fd, const std::function<int()>& take) noexcept;
// At exit, before the linger: disconnect the rdma_cm model's connections
// that are still up (nothing when the model never started).
void rdmacm_at_exit() noexcept;
// How many of those disconnects still wait for the peer's DREP (0 when
// the model never started).
size_t rdmacm_disconnects_pending() noexcept;
// The device of `rnic` went away (uroced stopped): the rdma_cm ids on it
// get RDMA_CM_EVENT_DEVICE_REMOVAL (nothing when the model never started).
void rdmacm_device_removed(const rnic::Rnic* rnic) noexcept;

// A child of fork() (DESIGN.md "Process and threading model", fork): the
// devices its parent started are the parent's.  The first entry point that
// reaches the devices in the child (ibv_get_device_list, the rdma_cm model,
// the exit handlers) calls this: the parent's devices, registry and rdma_cm
// model are dropped (never touched again) and the next
// ibv_get_device_list starts the child's own, as a client of uroced.  A
// child of a process whose devices are in-process gets no device (its
// parent owns the port), with a message saying so.  Nothing when this
// process did not fork since its devices started.
void adopt_fork() noexcept;
// adopt_fork's part in the rdma_cm model: the parent's model is forgotten
// (called under the device list's lock).
void rdmacm_forget_after_fork() noexcept;

// The devices that came up (ibv_get_device_list starts them on first use).
std::vector<IbvDevice*>& devices() noexcept;

// Context ops (device.cpp, objects.cpp, qp.cpp) that open_device installs.
int query_port_op(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) noexcept;
int query_device_ex_op(ibv_context* ctx, const ibv_query_device_ex_input* in, ibv_device_attr_ex* attr,
                       size_t attr_size) noexcept;
int poll_cq_op(ibv_cq* cq, int n, ibv_wc* wc) noexcept;
int req_notify_cq_op(ibv_cq* cq, int solicited_only) noexcept;
ibv_cq_ex* create_cq_ex_op(ibv_context* ctx, ibv_cq_init_attr_ex* attr) noexcept;
// Memory windows (ibv_context_ops; ibv_alloc_mw(3), ibv_bind_mw(3)).
ibv_mw* alloc_mw_op(ibv_pd* pd, ibv_mw_type type) noexcept;
int dealloc_mw_op(ibv_mw* mw) noexcept;
int bind_mw_op(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) noexcept;
int query_rt_values_op(ibv_context* ctx, ibv_values_ex* values) noexcept;
int advise_mr_op(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                 uint32_t num_sge) noexcept;
int post_srq_recv_op(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept;
int post_send_op(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) noexcept;
int post_recv_op(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept;
ibv_qp* create_qp_ex_op(ibv_context* ctx, ibv_qp_init_attr_ex* attr) noexcept;
ibv_pd* alloc_parent_domain_op(ibv_context* ctx, ibv_parent_domain_init_attr* attr) noexcept;
ibv_td* alloc_td_op(ibv_context* ctx, ibv_td_init_attr* attr) noexcept;
int dealloc_td_op(ibv_td* td) noexcept;
int dealloc_parent_domain(Pd* pd) noexcept;
ibv_srq* create_srq_ex_op(ibv_context* ctx, ibv_srq_init_attr_ex* attr) noexcept;
// An SRQ on `pd` (ibv_create_srq; `xrc`: an XRC SRQ of that domain and CQ).
ibv_srq* make_srq(ibv_pd* pd, ibv_srq_init_attr* init, const rnic::Rnic::XrcSrq* xrc) noexcept;
// XRC (xrc.cpp; annex A14, ibv_open_xrcd(3), ibv_create_srq_ex(3),
// ibv_create_qp_ex(3), ibv_open_qp(3), ibv_get_srq_num(3)).
ibv_xrcd* open_xrcd_op(ibv_context* ctx, ibv_xrcd_init_attr* attr) noexcept;
int close_xrcd_op(ibv_xrcd* xrcd) noexcept;
ibv_srq* create_xrc_srq(ibv_context* ctx, ibv_srq_init_attr_ex* attr) noexcept;
int get_srq_num_op(ibv_srq* srq, uint32_t* srq_num) noexcept;
ibv_qp* create_xrc_recv_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr) noexcept;
ibv_qp* open_qp_op(ibv_context* ctx, ibv_qp_open_attr* attr) noexcept;
// ibv_destroy_qp of one handle on an XRC receive QP: forgets it, and names
// another live handle (nullptr: none) to receive the QP's async events.
void* forget_xrc_handle(Qp* qp) noexcept;
// A context on `dev` whose command fd is `cmd_fd` (-1: a new memfd of its
// own); ibv_open_device and ibv_import_device.  Open contexts are
// registered for ibv_import_device to find by their fd.
ibv_context* open_context(IbvDevice* dev, int cmd_fd) noexcept;
void remember_context(Context* c) noexcept;
void forget_context(Context* c) noexcept;

}  // namespace uroce::shim
