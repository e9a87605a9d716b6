// Thread domains and parent domains (ibv_alloc_td(3),
// ibv_alloc_parent_domain(3)).  A parent domain is interchangeable with the
// PD it was made from: every verb that takes an ibv_pd takes it, through the
// same rnic::Pd.  What it adds: the application's allocator, which the QPs,
// CQs (IBV_CQ_INIT_ATTR_MASK_PD) and SRQs made with it get their ring memory
// from (rnic/ring_memory.hpp), and a thread domain, kept as the hint it is.
#include <cerrno>
#include <new>

#include "verbs-shim/shim.hpp"

namespace uroce::shim {

void hold_domain(ibv_pd* pd) noexcept {
  if (pd != nullptr && to_pd(pd)->parent) to_pd(pd)->users.fetch_add(1);
}

void release_domain(ibv_pd* pd) noexcept {
  if (pd != nullptr && to_pd(pd)->parent) to_pd(pd)->users.fetch_sub(1);
}

ibv_td* alloc_td_op(ibv_context* ctx, ibv_td_init_attr* attr) noexcept {
  if (ctx == nullptr || attr == nullptr || attr->comp_mask != 0) return fail(EINVAL, static_cast<ibv_td*>(nullptr));
  auto* td = new (std::nothrow) Td{};
  if (td == nullptr) return fail(ENOMEM, static_cast<ibv_td*>(nullptr));
  td->base.context = ctx;
  own(ctx, Owned::Td, &td->base);
  return &td->base;
}

int dealloc_td_op(ibv_td* ibtd) noexcept {
  if (ibtd == nullptr) return EINVAL;
  Td* td = to_td(ibtd);
  if (td->users.load() != 0) return EBUSY;  // a parent domain names it
  disown(ibtd->context, Owned::Td, ibtd);
  delete td;
  return 0;
}

ibv_pd* alloc_parent_domain_op(ibv_context* ctx, ibv_parent_domain_init_attr* attr) noexcept {
  constexpr uint32_t kKnown = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  // The PD is this context's and a plain one; the thread domain, if any,
  // this context's; an allocator comes with its free.
  if (ctx == nullptr || attr == nullptr || (attr->comp_mask & ~kKnown) != 0 || attr->pd == nullptr ||
      attr->pd->context != ctx || to_pd(attr->pd)->parent || (attr->td != nullptr && attr->td->context != ctx))
    return fail(EINVAL, static_cast<ibv_pd*>(nullptr));
  const bool allocators = (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) != 0;
  if (allocators && (attr->alloc == nullptr || attr->free == nullptr))
    return fail(EINVAL, static_cast<ibv_pd*>(nullptr));
  auto* pd = new (std::nothrow) Pd{};
  if (pd == nullptr) return fail(ENOMEM, static_cast<ibv_pd*>(nullptr));
  Pd* protection = to_pd(attr->pd);
  pd->impl = protection->impl;
  pd->parent = true;
  pd->base.context = ctx;
  pd->base.handle = protection->base.handle;
  pd->td = attr->td != nullptr ? to_td(attr->td) : nullptr;
  if (allocators) {
    pd->has_alloc = true;
    pd->alloc.alloc = attr->alloc;
    pd->alloc.free = attr->free;
    pd->alloc.pd = &pd->base;
    if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) != 0) pd->alloc.context = attr->pd_context;
  }
  // The PD cannot go while a parent domain stands for it (EBUSY), nor the
  // thread domain while one names it.
  pd->impl->users.fetch_add(1);
  if (pd->td != nullptr) pd->td->users.fetch_add(1);
  own(ctx, Owned::ParentDomain, &pd->base);
  return &pd->base;
}

int dealloc_parent_domain(Pd* pd) noexcept {
  // ibv_alloc_parent_domain(3): what was made with it goes first.
  if (pd->users.load() != 0) return EBUSY;
  pd->impl->users.fetch_sub(1);
  if (pd->td != nullptr) pd->td->users.fetch_sub(1);
  disown(pd->base.context, Owned::ParentDomain, &pd->base);
  delete pd;
  return 0;
}

}  // namespace uroce::shim
