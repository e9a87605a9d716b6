// Sharing objects between contexts (ibv_import_device(3), ibv_import_pd(3),
// ibv_import_mr(3)), as far as one process can: a context's command fd is a
// memfd of its own, so a dup of it (what programs pass, as pyverbs does)
// names that context's device; the new context owns the fd it is given.
// An imported PD or MR is another handle on the same RNIC object: verbs on
// it act on that object, and ibv_unimport_* (or ibv_dealloc_pd /
// ibv_dereg_mr on the imported handle, or closing its context) frees only
// the handle.  The object itself goes when its own context lets it go; an
// imported PD holds it (EBUSY) until then.  Across processes this needs the
// daemon (issue 15): there is no kernel object to share.
#include <sys/stat.h>

#include <cerrno>
#include <mutex>
#include <new>
#include <vector>

#include "verbs-shim/process.hpp"
#include "verbs-shim/shim.hpp"

namespace uroce::shim {
namespace {

std::vector<Context*>& contexts() { return process().contexts; }  // under process().contexts_mu

bool same_file(int a, int b) noexcept {
  struct stat sa{}, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

void remember_context(Context* c) noexcept {
  std::lock_guard lock(process().contexts_mu);
  try {
    contexts().push_back(c);
  } catch (...) {
    // Not findable by ibv_import_device; everything else works.
  }
}

void forget_context(Context* c) noexcept {
  std::lock_guard lock(process().contexts_mu);
  auto& v = contexts();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (*it == c) {
      v.erase(it);
      return;
    }
  }
}

// The engine's thread (Rnic::raise): a QP's, CQ's or SRQ's event to the
// context that made it (its shim object, alive while the RNIC's is); a
// port's or the device's to every context open on the device.  The
// contexts' list lock is a leaf: held for the pushes only.
void route_async_event(void* arg, const rnic::AsyncEvent& ev) noexcept {
  Context* owner = nullptr;
  if (ev.qp != nullptr) {
    owner = static_cast<Qp*>(ev.context)->ctx;
  } else if (ev.cq != nullptr) {
    owner = static_cast<Cq*>(ev.context)->ctx;
  } else if (ev.srq != nullptr) {
    owner = static_cast<Srq*>(ev.context)->ctx;
  }
  try {
    if (owner != nullptr) {
      owner->async->push(ev);
      return;
    }
    const auto* dev = static_cast<const IbvDevice*>(arg);
    std::lock_guard lock(process().contexts_mu);
    for (Context* c : contexts())
      if (c->dev == dev) c->async->push(ev);
  } catch (...) {
    // No memory for the event: it is lost, as a full kernel event queue loses it.
  }
}

void drop_async_events(Context* ctx, const void* obj) noexcept {
  if (ctx != nullptr && ctx->async != nullptr) ctx->async->remove_if([obj](const rnic::AsyncEvent& e) { return e.context == obj; });
}

}  // namespace uroce::shim

using namespace uroce;
using namespace uroce::shim;

// The fd must be (a dup of) an open context's command fd: EINVAL otherwise,
// as for an fd that is not a uverbs file.
UROCE_EXPORT ibv_context* ibv_import_device(int cmd_fd) noexcept {
  if (cmd_fd < 0) return fail(EINVAL, static_cast<ibv_context*>(nullptr));
  IbvDevice* dev = nullptr;
  {
    std::lock_guard lock(process().contexts_mu);
    for (Context* c : contexts()) {
      if (same_file(c->vctx.context.cmd_fd, cmd_fd)) {
        dev = c->dev;
        break;
      }
    }
  }
  if (dev == nullptr) return fail(EINVAL, static_cast<ibv_context*>(nullptr));
  return open_context(dev, cmd_fd);
}

UROCE_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) noexcept {
  if (context == nullptr) return fail(EINVAL, static_cast<ibv_pd*>(nullptr));
  auto* pd = new (std::nothrow) Pd{};
  if (pd == nullptr) return fail(ENOMEM, static_cast<ibv_pd*>(nullptr));
  pd->impl = rnic_of(context).import_pd(pd_handle);
  if (pd->impl == nullptr) {
    delete pd;
    return fail(EINVAL, static_cast<ibv_pd*>(nullptr));
  }
  pd->imported = true;
  pd->base.context = context;
  pd->base.handle = pd_handle;
  own(context, Owned::ImportedPd, &pd->base);
  return &pd->base;
}

UROCE_EXPORT void ibv_unimport_pd(ibv_pd* ibpd) noexcept {
  if (ibpd == nullptr || !to_pd(ibpd)->imported) return;
  Pd* pd = to_pd(ibpd);
  rnic_of(ibpd->context).release_pd(pd->impl);
  disown(ibpd->context, Owned::ImportedPd, ibpd);
  delete pd;
}

UROCE_EXPORT ibv_mr* ibv_import_mr(ibv_pd* ibpd, uint32_t mr_handle) noexcept {
  if (ibpd == nullptr) return fail(EINVAL, static_cast<ibv_mr*>(nullptr));
  rnic::Mr* impl = rnic_of(ibpd->context).find_mr(mr_handle, to_pd(ibpd)->impl);
  if (impl == nullptr) return fail(EINVAL, static_cast<ibv_mr*>(nullptr));  // none, or on another PD
  auto* mr = new (std::nothrow) Mr{};
  if (mr == nullptr) return fail(ENOMEM, static_cast<ibv_mr*>(nullptr));
  mr->impl = impl;
  mr->imported = true;
  mr->base.context = ibpd->context;
  mr->base.pd = ibpd;
  mr->base.addr = impl->addr;
  mr->base.length = impl->length;
  mr->base.handle = mr_handle;
  mr->base.lkey = impl->lkey.value();
  mr->base.rkey = impl->rkey.value();
  own(ibpd->context, Owned::ImportedMr, &mr->base);
  return &mr->base;
}

UROCE_EXPORT void ibv_unimport_mr(ibv_mr* ibmr) noexcept {
  if (ibmr == nullptr || !to_mr(ibmr)->imported) return;
  disown(ibmr->context, Owned::ImportedMr, ibmr);
  delete to_mr(ibmr);
}
