// Devices and contexts: ibv_get_device_list (which starts the EAL and the
// engines, DESIGN.md "Process and threading model"), ibv_open_device with a
// full verbs_context, and the queries — device, port, GID, P_Key — with
// libibverbs' size-aware conventions (research/abi-shim.md §4.3).
#include <endian.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "drivers/daemon/link.hpp"
#include "drivers/daemon/msg_socket.hpp"
#include "drivers/devnode.hpp"
#include "lib/util/devnode.hpp"
#include "lib/util/log.hpp"
#include "lib/util/quiet_threads.hpp"
#include "transport/device.hpp"
#include "transport/rnic/rnic.hpp"
#include "verbs-shim/process.hpp"
#include "verbs-shim/shim.hpp"

// verbs.h defines function-like macros over these names; the exported
// functions are defined here with their exact prototypes.
#undef ibv_query_port
#undef ibv_get_device_list

namespace uroce::shim {
namespace {

// driver.h (not installed): ibv_query_gid_type's sysfs enum — not enum
// ibv_gid_type, where RoCE v2 is 2 (research/abi-shim.md §3.2).
enum GidTypeSysfs : int { kGidTypeSysfsIbRoceV1 = 0, kGidTypeSysfsRoceV2 = 1 };

constexpr int kNumCompVectors = 1;

void set_str(char* dst, size_t cap, const std::string& s) noexcept {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// Whether this process is a client of uroced, and at which socket
// (drivers/daemon/msg_socket.hpp client_socket).
std::optional<std::string> daemon_socket() { return drivers::daemon::client_socket(config::kEnvDevice, config::kEnvConfig); }

// The client's QPs on a device, as JSON (the daemon's `uroce qp`): each
// QP's row (Rnic::qp_row; its texts are names and addresses, nothing to
// escape).
std::string qp_dump_json(uint32_t index) {
  std::string out = "[";
  const auto& link = transport::Devices::instance().daemon();
  if (!link || index >= link->devices().size()) return "[]";
  const std::string name = link->devices()[index].name;
  for (IbvDevice* d : devices()) {
    if (d->tdev->name() != name) continue;
    for (const rnic::Rnic::QpSnapshot& q : d->rnic().qp_snapshots()) {
      out += out.size() > 1 ? ",{" : "{";
      bool first = true;
      for (const transport::TableCell& c : rnic::Rnic::qp_row(q)) {
        out += first ? "\"" : ",\"";
        first = false;
        out += c.name;
        out += "\":";
        out += c.is_text ? "\"" + c.text + "\"" : std::to_string(c.number);
      }
      out += "}";
    }
  }
  return out + "]";
}

// Brings every configured device up (first call only).  A device that
// does not start is reported on stderr and left out, so the others still
// serve (upstream likewise lists only the devices it could match).
void start_devices_locked() {
  ProcessState& p = process();
  if (p.started) return;
  p.started = true;
  if (p.parent_in_process) {
    log_line(LogType::Shim, LogLevel::Error,
             "this process is a child of one whose uroce devices are in-process (they own the port): "
             "it has no device; with uroced, parent and child each get their own");
    return;
  }
  auto& reg = transport::Devices::instance();
  install_process_hooks();
  std::shared_ptr<drivers::daemon::Link> link;
  if (const auto sock = daemon_socket()) {
    p.daemon_client = true;
    auto l = drivers::daemon::Link::connect(*sock, program_invocation_short_name);
    if (!l) {
      log_line(LogType::Shim, LogLevel::Error, "%s", l.error().message.c_str());
      return;  // no device: the program sees an empty list
    }
    link = *l;
    if (const drivers::Status st = reg.use_daemon(link); !st) {
      log_line(LogType::Shim, LogLevel::Error, "uroced: %s", st.error().message.c_str());
      return;
    }
  }
  auto names = reg.names();
  if (!names) {
    log_line(LogType::Shim, LogLevel::Error, "configuration: %s", names.error().message.c_str());
    return;
  }
  for (const std::string& name : *names) {
    auto opened = reg.open(name);
    if (!opened) {
      log_line(LogType::Shim, LogLevel::Error, "device %s did not start: %s", name.c_str(), opened.error().message.c_str());
      continue;
    }
    transport::Device* tdev = *opened;
    auto* d = new (std::nothrow) IbvDevice{};
    if (d == nullptr) return;
    const size_t index = devices().size();
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    set_str(d->dev.name, sizeof d->dev.name, name);
    // dev_name names the node `uroce devnode` makes (lib/util/devnode.hpp).
    set_str(d->dev.dev_name, sizeof d->dev.dev_name, dev_node_name(index));
    set_str(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/" + dev_node_name(index));
    set_str(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/" + name);
    d->tdev = tdev;
    d->inline_progress = tdev->info().progress == transport::ProgressKind::Inline;
    tdev->rnic().set_async_sink(&route_async_event, d);
    devices().push_back(d);
  }
  if (link) link->start_events(drivers::daemon::Link::Handlers{&qp_dump_json, &daemon_gone});
  // UCX lists a verbs device only when its dev_name node exists
  // (lib/util/devnode.hpp): made here when this process may, so that no
  // one has to run `uroce devnode`; a process that may not goes without
  // (the package's tmpfiles rule makes them at boot, uroced at its start).
  if (!devices().empty() && drivers::may_make_dev_nodes()) {
    const drivers::DevNodeReport r = drivers::make_dev_nodes(kDevNodeDir, static_cast<unsigned>(devices().size()));
    for (const std::string& e : r.errors) log_line(LogType::Shim, LogLevel::Info, "device node: %s", e.c_str());
  }
}

bool valid_port(uint32_t port) noexcept { return port == rnic::kPortNum; }

// Copies min(len, sizeof full) bytes of `full` into `out` and zeroes the
// rest of `out` up to len: a caller built against newer headers passes a
// larger struct, an older one a smaller (never written past).
void copy_sized(void* out, size_t len, const void* full, size_t full_size) noexcept {
  const size_t n = std::min(len, full_size);
  std::memcpy(out, full, n);
  if (len > n) std::memset(static_cast<uint8_t*>(out) + n, 0, len - n);
}

}  // namespace

rnic::Rnic& IbvDevice::rnic() const noexcept { return tdev->rnic(); }

void kick(IbvDevice* dev) noexcept {
  // Inline mode: the loop runs here.  With an engine thread: this caller
  // assists it, and the thread stays off the core while calls keep coming.
  dev->tdev->progress();
}

void kick_post(IbvDevice* dev) noexcept { dev->tdev->post_progress(); }

int wait_event(IbvDevice* dev, int fd, const std::function<int()>& take) noexcept {
  if (!dev->inline_progress || (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0) return take();
  kick(dev);  // the event may be one iteration away
  const transport::Progress::Sleeper asleep(dev->tdev->engine().progress());
  return take();
}

// ---- context ops -------------------------------------------------------------------

int query_port_op(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) noexcept {
  if (attr == nullptr) return EINVAL;
  ibv_port_attr full{};
  const int rc = ctx_dev(ctx)->rnic().query_port(port, &full);
  if (rc != 0) return rc;
  copy_sized(attr, len, &full, sizeof full);
  return 0;
}

int query_device_ex_op(ibv_context* ctx, const ibv_query_device_ex_input* in, ibv_device_attr_ex* attr,
                       size_t attr_size) noexcept {
  if (in != nullptr && in->comp_mask != 0) return EINVAL;
  if (attr == nullptr || attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex full{};
  full.orig_attr = ctx_dev(ctx)->rnic().device_attr();
  // Bits past 31 exist only here (rdma-core 45's kernel header; rxe since
  // Linux 6.2): ATOMIC WRITE, and FLUSH to global visibility.  Not FLUSH to
  // persistence: no memory here is known to be persistent (reg_mr refuses
  // the right, EOPNOTSUPP).
  namespace v = rnic::verbs_newer;
  full.device_cap_flags_ex = full.orig_attr.device_cap_flags | v::kDeviceAtomicWrite | v::kDeviceFlushGlobal;
  full.phys_port_cnt_ex = full.orig_attr.phys_port_cnt;
  full.odp_caps = rnic::Rnic::odp_caps();
  // XRC carries RC's operations into SRQs, and every MR may be on demand.
  full.xrc_odp_caps = full.odp_caps.per_transport_caps.rc_odp_caps;
  // Completion timestamps: a 64-bit clock of 1 GHz (CLOCK_MONOTONIC ns).
  full.completion_timestamp_mask = UINT64_MAX;
  full.hca_core_clock = rnic::Rnic::kHcaCoreClockKhz;
  // No TSO, RSS, tag matching, packet pacing or device memory: zero.
  copy_sized(attr, attr_size, &full, sizeof full);
  return 0;
}

}  // namespace uroce::shim

using namespace uroce;
using namespace uroce::shim;

// ---- device list ---------------------------------------------------------------------

UROCE_EXPORT ibv_device** ibv_get_device_list(int* num_devices) noexcept {
  std::lock_guard lock(process().mu);
  adopt_fork_locked();
  start_devices_locked();
  const auto& list = devices();
  auto** out = static_cast<ibv_device**>(std::calloc(list.size() + 1, sizeof(ibv_device*)));
  if (out == nullptr) return fail(ENOMEM, static_cast<ibv_device**>(nullptr));
  for (size_t i = 0; i < list.size(); ++i) out[i] = &list[i]->dev;
  if (num_devices != nullptr) *num_devices = static_cast<int>(list.size());
  return out;
}

UROCE_EXPORT void ibv_free_device_list(ibv_device** list) noexcept { std::free(list); }

UROCE_EXPORT const char* ibv_get_device_name(ibv_device* device) noexcept {
  return device == nullptr ? nullptr : device->name;
}

UROCE_EXPORT int ibv_get_device_index(ibv_device* device) noexcept {
  if (device == nullptr) return -1;
  const auto& list = devices();
  for (size_t i = 0; i < list.size(); ++i) {
    if (&list[i]->dev == device) return static_cast<int>(i);
  }
  return -1;
}

UROCE_EXPORT __be64 ibv_get_device_guid(ibv_device* device) noexcept {
  if (device == nullptr) return 0;
  return to_dev(device)->rnic().device_attr().node_guid;  // network order, as ibv_device_attr
}

// ---- open / close --------------------------------------------------------------------

UROCE_EXPORT ibv_context* ibv_open_device(ibv_device* device) noexcept {
  if (device == nullptr) return fail(EINVAL, static_cast<ibv_context*>(nullptr));
  return open_context(to_dev(device), -1);
}

ibv_context* shim::open_context(IbvDevice* dev, int cmd_fd) noexcept {
  ibv_device* device = &dev->dev;
  auto* c = new (std::nothrow) Context{};
  if (c == nullptr) return fail(ENOMEM, static_cast<ibv_context*>(nullptr));
  c->dev = dev;
  c->objects = new_context_objects();
  if (c->objects == nullptr) {
    delete c;
    return fail(ENOMEM, static_cast<ibv_context*>(nullptr));
  }
  verbs_context& v = c->vctx;
  // sz: the bytes from the first field we define to the end (verbs_get_ctx_op
  // treats an op as present when sz >= sizeof - offsetof(op)).
  v.sz = sizeof(verbs_context);
  v.query_port = query_port_op;
  v.query_device_ex = query_device_ex_op;
  v.create_cq_ex = create_cq_ex_op;
  v.create_qp_ex = create_qp_ex_op;
  v.advise_mr = advise_mr_op;
  v.query_rt_values = query_rt_values_op;
  v.alloc_parent_domain = alloc_parent_domain_op;
  v.alloc_td = alloc_td_op;
  v.dealloc_td = dealloc_td_op;
  v.create_srq_ex = create_srq_ex_op;
  v.open_xrcd = open_xrcd_op;
  v.close_xrcd = close_xrcd_op;
  v.get_srq_num = get_srq_num_op;
  v.open_qp = open_qp_op;
  // Everything else stays NULL: the inline wrappers then answer EOPNOTSUPP
  // (or fall back to the plain verb), as for a provider without the op.
  ibv_context& ctx = v.context;
  ctx.device = device;
  // No kernel command channel, but programs dup, poll or pass the fd
  // (pyverbs dups it for ibv_import_device): a memfd of the context's own,
  // closed with it, by which ibv_import_device knows the context again
  // (import.cpp).  An imported context owns the fd it was given.
  ctx.cmd_fd = cmd_fd >= 0 ? cmd_fd : ::memfd_create("uroce-context", MFD_CLOEXEC);
  if (ctx.cmd_fd < 0) {
    const int e = errno;
    close_context_objects(&ctx);
    delete c;
    return fail(e, static_cast<ibv_context*>(nullptr));
  }
  c->async = new (std::nothrow) transport::EventQueue<rnic::AsyncEvent>();
  if (c->async == nullptr || !c->async->valid()) {
    delete c->async;
    ::close(ctx.cmd_fd);
    close_context_objects(&ctx);
    delete c;
    return fail(ENOMEM, static_cast<ibv_context*>(nullptr));
  }
  ctx.async_fd = c->async->fd();
  ctx.num_comp_vectors = kNumCompVectors;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  // The legacy ops table: the slots compiled-in inline code calls, and the
  // two _compat slots upstream's set_lib_ops fills for very old binaries.
  ctx.ops.poll_cq = poll_cq_op;
  ctx.ops.req_notify_cq = req_notify_cq_op;
  ctx.ops.post_send = post_send_op;
  ctx.ops.alloc_mw = alloc_mw_op;
  ctx.ops.dealloc_mw = dealloc_mw_op;
  ctx.ops.bind_mw = bind_mw_op;
  ctx.ops.post_recv = post_recv_op;
  ctx.ops.post_srq_recv = post_srq_recv_op;
  ctx.ops._compat_query_port = ibv_query_port;
  ctx.ops._compat_query_device = ibv_query_device;
  remember_context(c);
  return &ctx;
}

UROCE_EXPORT int ibv_close_device(ibv_context* context) noexcept {
  if (context == nullptr) return EINVAL;
  Context* c = to_ctx(context);
  // What the program left on the context goes with it, as the kernel frees
  // a uverbs file's objects when it closes.
  forget_context(c);
  close_context_objects(context);
  pthread_mutex_destroy(&context->mutex);
  if (context->cmd_fd >= 0) ::close(context->cmd_fd);
  delete c->async;
  delete c;
  return 0;
}

// ---- queries ---------------------------------------------------------------------------

UROCE_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) noexcept {
  if (context == nullptr || attr == nullptr) return EINVAL;
  *attr = ctx_dev(context)->rnic().device_attr();
  return 0;
}

// The exported ibv_query_port takes the 48-byte compat structure (it ends
// before port_cap_flags2); the header's inline goes through query_port_op
// with its own size instead.
UROCE_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) noexcept {
  if (context == nullptr || port_attr == nullptr) return EINVAL;
  return query_port_op(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                       offsetof(ibv_port_attr, port_cap_flags2));
}

UROCE_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) noexcept {
  if (context == nullptr || gid == nullptr || !valid_port(port_num) || index < 0 ||
      static_cast<uint32_t>(index) >= rnic::kMaxGid) {
    return -1;
  }
  // An empty slot inside the table reads as the zero GID, as upstream.
  if (ctx_dev(context)->rnic().query_gid(port_num, index, gid) != 0) std::memset(gid, 0, sizeof *gid);
  return 0;
}

UROCE_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                   ibv_gid_entry* entry, uint32_t flags, size_t entry_size) noexcept {
  if (context == nullptr || entry == nullptr || flags != 0 || !valid_port(port_num) ||
      entry_size < offsetof(ibv_gid_entry, gid_type) + sizeof(uint32_t)) {
    return EINVAL;
  }
  if (gid_index >= rnic::kMaxGid) return EINVAL;
  rnic::Rnic& r = ctx_dev(context)->rnic();
  ibv_gid_entry e{};
  int type = IBV_GID_TYPE_ROCE_V2;
  if (r.query_gid(static_cast<uint8_t>(port_num), static_cast<int>(gid_index), &e.gid) != 0 ||
      r.query_gid_type(static_cast<uint8_t>(port_num), static_cast<int>(gid_index), &type) != 0) {
    return ENODATA;  // an empty slot
  }
  e.gid_index = gid_index;
  e.port_num = port_num;
  e.gid_type = static_cast<uint32_t>(type);
  e.ndev_ifindex = 0;  // no kernel netdev owns it
  copy_sized(entry, entry_size, &e, sizeof e);
  return 0;
}

UROCE_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                          uint32_t flags, size_t entry_size) noexcept {
  if (context == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry) - sizeof(uint32_t)) return -EINVAL;
  rnic::Rnic& r = ctx_dev(context)->rnic();
  const size_t n = r.gid_count();
  if (max_entries < n) return -EINVAL;
  ssize_t out = 0;
  for (uint32_t i = 0; i < rnic::kMaxGid; ++i) {
    ibv_gid_entry e{};
    if (_ibv_query_gid_ex(context, rnic::kPortNum, i, &e, 0, sizeof e) != 0) continue;
    if (static_cast<size_t>(out) == max_entries) break;
    copy_sized(reinterpret_cast<uint8_t*>(entries) + static_cast<size_t>(out) * entry_size, entry_size, &e, sizeof e);
    ++out;
  }
  return out;
}

// rdma-core's private ABI (driver.h): the sysfs GID type of a slot.  Bound
// explicitly (.symver below) as ibv_query_gid_type@@IBVERBS_PRIVATE_34 and
// under the private nodes of later rdma-core releases, whose ibv_devinfo
// imports it from there.
UROCE_EXPORT int uroce_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) noexcept {
  if (context == nullptr || type == nullptr || !valid_port(port_num) || index >= rnic::kMaxGid) {
    errno = EINVAL;
    return -1;
  }
  int t = 0;
  if (ctx_dev(context)->rnic().query_gid_type(port_num, static_cast<int>(index), &t) != 0) {
    *type = kGidTypeSysfsIbRoceV1;  // an empty slot: what upstream answers when sysfs has no type
    return 0;
  }
  *type = t == IBV_GID_TYPE_ROCE_V2 ? kGidTypeSysfsRoceV2 : kGidTypeSysfsIbRoceV1;
  return 0;
}

extern "C" int uroce_query_gid_type_57(ibv_context*, uint8_t, unsigned int, int*) noexcept
    __attribute__((alias("uroce_query_gid_type"), visibility("default")));
extern "C" int uroce_query_gid_type_59(ibv_context*, uint8_t, unsigned int, int*) noexcept
    __attribute__((alias("uroce_query_gid_type"), visibility("default")));
extern "C" int uroce_query_gid_type_64(ibv_context*, uint8_t, unsigned int, int*) noexcept
    __attribute__((alias("uroce_query_gid_type"), visibility("default")));
__asm__(".symver uroce_query_gid_type, ibv_query_gid_type@@IBVERBS_PRIVATE_34");
__asm__(".symver uroce_query_gid_type_57, ibv_query_gid_type@IBVERBS_PRIVATE_57");
__asm__(".symver uroce_query_gid_type_59, ibv_query_gid_type@IBVERBS_PRIVATE_59");
__asm__(".symver uroce_query_gid_type_64, ibv_query_gid_type@IBVERBS_PRIVATE_64");

UROCE_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) noexcept {
  if (context == nullptr || pkey == nullptr || !valid_port(port_num) || index < 0) return -1;
  uint16_t v = 0;
  if (ctx_dev(context)->rnic().query_pkey(port_num, index, &v) != 0) return -1;
  *pkey = htobe16(v);
  return 0;
}

UROCE_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) noexcept {
  if (context == nullptr || !valid_port(port_num)) return fail(EINVAL, -1);
  for (int i = 0; i < rnic::kMaxPkeys; ++i) {
    __be16 v = 0;
    if (ibv_query_pkey(context, port_num, i, &v) == 0 && v == pkey) return i;
  }
  return fail(ENOENT, -1);
}

// ---- async events ------------------------------------------------------------------------

UROCE_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) noexcept {
  if (context == nullptr || event == nullptr) return fail(EINVAL, -1);
  IbvDevice* dev = ctx_dev(context);
  rnic::AsyncEvent ev;
  auto* q = to_ctx(context)->async;
  const int rc = wait_event(dev, context->async_fd, [&] { return q->take(&ev); });
  if (rc != 0) return fail(rc, -1);
  std::memset(event, 0, sizeof *event);
  event->event_type = ev.type;
  // The element by the context taken when the event was raised: the RNIC
  // object may be gone by now (rnic::AsyncEvent).
  if (ev.qp != nullptr) {
    event->element.qp = abi(static_cast<Qp*>(ev.context));
  } else if (ev.cq != nullptr) {
    event->element.cq = abi(static_cast<Cq*>(ev.context));
  } else if (ev.srq != nullptr) {
    event->element.srq = &static_cast<Srq*>(ev.context)->base;
  } else {
    event->element.port_num = ev.port;
  }
  return 0;
}

// The upstream counts ibv_destroy_* would wait on (events acknowledged).
UROCE_EXPORT void ibv_ack_async_event(ibv_async_event* event) noexcept {
  if (event == nullptr) return;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      ibv_cq* cq = event->element.cq;
      pthread_mutex_lock(&cq->mutex);
      ++cq->async_events_completed;
      pthread_cond_signal(&cq->cond);
      pthread_mutex_unlock(&cq->mutex);
      return;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      ibv_qp* qp = event->element.qp;
      pthread_mutex_lock(&qp->mutex);
      ++qp->events_completed;
      pthread_cond_signal(&qp->cond);
      pthread_mutex_unlock(&qp->mutex);
      return;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      ibv_srq* srq = event->element.srq;
      pthread_mutex_lock(&srq->mutex);
      ++srq->events_completed;
      pthread_cond_signal(&srq->cond);
      pthread_mutex_unlock(&srq->mutex);
      return;
    }
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_WQ_FATAL:
      return;
  }
}

// ---- uroce's private entry points (UROCE_PRIVATE_1), for librdmacm.so.1 ----------------

// The RNIC behind a context this library opened.
UROCE_EXPORT rnic::Rnic* uroce_shim_rnic(ibv_context* context) noexcept {
  return context == nullptr ? nullptr : &ctx_dev(context)->rnic();
}

// How many objects of each kind the device behind `context` holds, in
// `out` (PDs, MRs, completion channels, CQs, SRQs, QPs, AHs; `n` of them):
// 0, or EINVAL.  For tests and tools: what ibv_close_device left.
UROCE_EXPORT int uroce_shim_object_counts(ibv_context* context, size_t* out, size_t n) noexcept {
  if (context == nullptr || out == nullptr) return EINVAL;
  const rnic::Rnic::Usage u = ctx_dev(context)->rnic().usage();
  const size_t all[] = {u.pds, u.mrs, u.channels, u.cqs, u.srqs, u.qps, u.ahs};
  for (size_t i = 0; i < n && i < std::size(all); ++i) out[i] = all[i];
  return 0;
}

// Opens the device called `name` (starting the devices on first use).
UROCE_EXPORT ibv_context* uroce_shim_open_device(const char* name) noexcept {
  {
    std::lock_guard lock(process().mu);
    start_devices_locked();
  }
  for (IbvDevice* d : devices()) {
    if (name == nullptr || std::strcmp(d->dev.name, name) == 0) return ibv_open_device(&d->dev);
  }
  return fail(ENODEV, static_cast<ibv_context*>(nullptr));
}
