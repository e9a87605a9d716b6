// What runs on a device above its RNIC (the IB CM, cm/device_cm.hpp),
// attached to a transport::Device (device.hpp) as a kernel module attaches
// an ib_client: built after the RNIC, destroyed before it, last attached
// first.  Apart from device.hpp so that a client needs nothing of the
// bring-up (DPDK ports, configuration) to be one.
//
// Threads: built and destroyed on the control path while the engine may
// be running; a client stops its own engine work (run_sync) in its
// destructor.
#pragma once

namespace uroce::transport {

class DeviceClient {
 public:
  virtual ~DeviceClient() = default;
};

}  // namespace uroce::transport
