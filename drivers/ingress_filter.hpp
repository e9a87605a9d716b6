// The kernel's share of a shared netdev's RoCE frames, taken away: a tcx
// ingress program on the netdev that drops UDP 4791 frames addressed to
// the device's own addresses.
//
// A port that shares its interface with the kernel (af_packet) gets every
// frame from the kernel's packet taps; the kernel then also runs each one
// through IP input, a route lookup and the UDP 4791 socket uroce holds
// (Udp4791Claim), which nobody reads — all of it, on a veth, inside the
// sending process's sendto.  tc ingress runs after the packet taps and
// before IP (net/core/dev.c: taps, then sch_handle_ingress, then the
// protocol handlers, packet sockets bound to one protocol among them), so
// a drop there leaves the port (bound to ETH_P_ALL) its copy and spares
// the kernel the rest.  Measured (ib_send_bw 64 B between two namespaces,
// alternating with the tree before): 0.19-0.21 -> 0.25-0.27 M messages/s;
// see DESIGN.md "Configuration" ("The kernel's share of a shared netdev").
//
// The program is attached through a BPF link (BPF_LINK_CREATE, tcx, Linux
// 6.6 and later): the link lives as long as its file descriptor, so the
// filter goes with the process, however it ends — a killed program never
// leaves the host's stack deaf to RoCE.  Older kernels, or a process
// without CAP_BPF and CAP_NET_ADMIN, keep today's path (the claim socket);
// attach() says why.
//
// What it drops, and nothing else: an untagged IPv4 frame without options
// or fragmentation, or an IPv6 frame whose next header is UDP, with UDP
// destination port 4791 and an IP destination among the device's
// addresses.  Everything else goes on to the next program and the stack
// (TCX_NEXT), and so does every frame once the link is closed.
//
// Control path only (system calls).
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <span>
#include <vector>

#include "drivers/result.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::drivers {

// The program for these addresses (IPv4 as ::ffff:a.b.c.d), as eBPF
// instructions for a BPF_PROG_TYPE_SCHED_CLS program.  Pure.
std::vector<bpf_insn> roce_ingress_program(std::span<const wire::Ipv6Addr> addrs);

// Loads instructions as a SCHED_CLS program; its fd, or the verifier's
// complaint.
Result<int> load_sched_cls(std::span<const bpf_insn> insns);

// Runs a loaded SCHED_CLS program once on `frame` (BPF_PROG_TEST_RUN): its
// return value.  For tests.
Result<int> test_run_sched_cls(int prog_fd, std::span<const uint8_t> frame);

// tcx return values (include/uapi/linux/bpf.h, Linux 6.6).
inline constexpr int kTcxNext = -1;
inline constexpr int kTcxDrop = 2;

class RoceIngressFilter {
 public:
  RoceIngressFilter() = default;
  ~RoceIngressFilter();
  RoceIngressFilter(const RoceIngressFilter&) = delete;
  RoceIngressFilter& operator=(const RoceIngressFilter&) = delete;
  RoceIngressFilter(RoceIngressFilter&& o) noexcept;
  RoceIngressFilter& operator=(RoceIngressFilter&& o) noexcept;

  // Attaches the program for `addrs` to the ingress of `ifindex` in the
  // calling thread's network namespace (replacing this object's earlier
  // one).  An error says why not; the stack then keeps the frames.
  Status attach(int ifindex, std::span<const wire::Ipv6Addr> addrs);
  bool attached() const noexcept { return link_fd_ >= 0; }
  // Detaches (closes the link); frames reach the stack again.
  void detach() noexcept;

 private:
  int link_fd_ = -1;
};

}  // namespace uroce::drivers
