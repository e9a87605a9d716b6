#include "cm/device_cm.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include "transport/telemetry.hpp"

namespace uroce::cm {

drivers::Result<std::unique_ptr<DeviceCm>> DeviceCm::open(rnic::Rnic& rnic, CmConfig cfg) {
  std::unique_ptr<DeviceCm> self(new DeviceCm(rnic));
  if (const int rc = self->gsi_.open(); rc != 0) {
    return drivers::Error{rc, rnic.name() + ": QP 1 did not open: " + std::strerror(rc)};
  }
  cfg.ca_guid = rnic.node_guid();
  DeviceCm* me = self.get();
  me->poll_timer_.cb = &DeviceCm::on_poll_timer;
  me->poll_timer_.owner = me;
  transport::Engine& e = rnic.engine();
  e.run_sync([&] {
    me->cm_ = std::make_unique<Cm>(me->gsi_, e.timers(), [&e] { return e.now(); }, cfg, [me](const CmEvent& ev) {
      if (me->consumer_) me->consumer_(ev);
    });
    me->gsi_.on_completion(&DeviceCm::on_gsi_completion, me);
    e.timers().arm(me->poll_timer_, e.now());  // receives that came before the hook
  });
  // The CM's counters (and its GSI port's), readable by `uroce stats`.
  transport::telemetry_register_set(rnic.name(), "cm", me, [me](const transport::CounterVisitor& f) {
    me->cm_->counters().for_each([&](std::string_view n, std::string_view, uint64_t v) { f(n, v); });
    f("pending_requests", me->cm_->pending_requests());
    f("timewait", me->cm_->timewait_count());
  });
  transport::telemetry_register_set(rnic.name(), "gsi", me, [me](const transport::CounterVisitor& f) {
    me->gsi_.counters().for_each([&](std::string_view n, std::string_view, uint64_t v) { f(n, v); });
    f("address_handles", me->gsi_.ah_count());
  });
  return drivers::Result<std::unique_ptr<DeviceCm>>(std::move(self));
}

DeviceCm::~DeviceCm() {
  transport::telemetry_unregister_set(rnic_.name(), "cm", this);
  transport::telemetry_unregister_set(rnic_.name(), "gsi", this);
  transport::Engine& e = engine();
  e.run_sync([&] {
    gsi_.on_completion(nullptr, nullptr);
    e.timers().cancel(poll_timer_);
    consumer_ = nullptr;
    cm_.reset();
  });
  gsi_.close();
}

int DeviceCm::set_consumer(CmEventHandler handler) {
  UROCE_ASSERT_ENGINE(engine());
  if (handler && consumer_) return EBUSY;
  consumer_ = std::move(handler);
  return 0;
}

// [engine] Armed by on_gsi_completion: takes every completion on QP 1.
void DeviceCm::on_poll_timer(Timer& t, uint64_t) {
  DeviceCm& self = t.owner_as<DeviceCm>();
  UROCE_ASSERT_ENGINE(self.engine());
  self.gsi_.poll([&](const MadAddr& from, std::span<const uint8_t> mad) { self.cm_->on_mad(from, mad); });
}

// [engine] A completion on QP 1: poll it on the next turn of the loop.
void DeviceCm::on_gsi_completion(void* self) noexcept {
  UROCE_ASSERT_ENGINE(static_cast<DeviceCm*>(self)->engine());
  auto& me = *static_cast<DeviceCm*>(self);
  transport::Engine& e = me.engine();
  if (!me.poll_timer_.armed()) e.timers().arm(me.poll_timer_, e.now());
}

}  // namespace uroce::cm
