// The IB CM of one device: QP 1 (GsiPort) and the connection manager
// (Cm, cm.hpp) on it, run in the device's engine loop.  It is the device's,
// not a consumer's: a transport::DeviceClient (transport/device_client.hpp)
// that the device builds after its RNIC and destroys before it, as the
// kernel's ib_cm attaches to each ib_device.  The rdma_cm model (RdmaCm)
// is its consumer: it takes the CM's events (set_consumer) and makes and
// destroys CmIds on it.
//
//   auto cm = DeviceCm::open(dev.rnic(), cfg);     // QP 1 opened, CM running
//   dev.attach(std::move(*cm));
//   ... RdmaCm over dev.client<DeviceCm>() ...
//
// Threads: open() and the destructor are control path (run_sync).  The
// Cm, set_consumer() and everything the handler sees are the engine's
// ([engine]): a consumer reaches the Cm only in its engine's loop.  MADs
// are polled on the loop's turn after a completion on QP 1 (a push hook
// arms a timer: the CM sends and modifies QPs, which a push must not).
#pragma once

#include <memory>

#include "cm/cm.hpp"
#include "cm/gsi_port.hpp"
#include "drivers/result.hpp"
#include "transport/device_client.hpp"

namespace uroce::cm {

class DeviceCm final : public transport::DeviceClient {
 public:
  // QP 1 opened and the CM started on `rnic`'s engine; `cfg.ca_guid` is
  // set to the RNIC's node GUID.  Errors: open()'s (EBUSY: QP 1 exists).
  static drivers::Result<std::unique_ptr<DeviceCm>> open(rnic::Rnic& rnic, CmConfig cfg);
  ~DeviceCm() override;
  DeviceCm(const DeviceCm&) = delete;
  DeviceCm& operator=(const DeviceCm&) = delete;

  rnic::Rnic& rnic() const noexcept { return rnic_; }
  transport::Engine& engine() const noexcept { return rnic_.engine(); }
  Cm& cm() noexcept { return *cm_; }                  // [engine]
  const Cm& cm() const noexcept { return *cm_; }      // counters: any thread
  GsiPort& gsi() noexcept { return gsi_; }
  const GsiPort& gsi() const noexcept { return gsi_; }

  // [engine] Where the CM's events go: one consumer at a time; EBUSY when
  // another has it.  An empty handler releases it (events are dropped until
  // the next consumer).
  int set_consumer(CmEventHandler handler);

 private:
  explicit DeviceCm(rnic::Rnic& rnic) : rnic_(rnic), gsi_(rnic) {}
  static void on_poll_timer(Timer& t, uint64_t now_ns);
  static void on_gsi_completion(void* self) noexcept;

  rnic::Rnic& rnic_;
  GsiPort gsi_;
  std::unique_ptr<Cm> cm_;
  CmEventHandler consumer_;   // [engine]
  Timer poll_timer_;          // armed when QP 1 has a completion
};

}  // namespace uroce::cm
