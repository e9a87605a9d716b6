// Devices: a Config to running engines, over the sim wire (two sim
// devices in one process share it), with the `uroce node` sessions as the
// traffic: ARP through the engines, RoCEv2 round trips, ICMP echo answered
// by the peer engine, faults, inline progress, captures, telemetry.
#include <gtest/gtest.h>
#include <rte_lcore.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "drivers/sim/sim_wire.hpp"
#include "tools/uroce/node_session.hpp"
#include "tools/uroce/telemetry_client.hpp"
#include "transport/device.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::transport {
namespace {

using tools::EchoSession;
using tools::IcmpReplyTap;
using tools::PingConfig;
using tools::PingSession;

constexpr auto kWait = std::chrono::seconds(5);
constexpr uint64_t kTimeoutNs = 200'000'000;

config::IpPrefix prefix(std::string_view text) { return *config::parse_ip_prefix(text); }

IpAddr ip(std::string_view text) { return IpAddr::v6(config::parse_ip_address(text)->bytes); }

config::DeviceConfig sim_device(std::string name, std::vector<std::string_view> addrs) {
  config::DeviceConfig d;
  d.name = std::move(name);
  d.kind = config::DeviceKind::kSim;
  for (auto a : addrs) d.addresses.push_back(prefix(a));
  return d;
}

config::Config two_sims(config::Progress progress = config::Progress::kThread) {
  config::Config cfg;
  cfg.progress = progress;
  cfg.devices = {sim_device("simA", {"10.0.0.1/24", "fd00::1/64"}), sim_device("simB", {"10.0.0.2/24", "fd00::2/64"})};
  return cfg;
}

#define ASSERT_OPEN_ALL(devs)                                  \
  do {                                                         \
    const drivers::Status opened = (devs).open_all();          \
    ASSERT_TRUE(opened) << opened.error().code << ": " << opened.error().message; \
  } while (0)

// Until `done` or kWait; `step` drives inline engines.
bool wait_for(const std::function<bool()>& done, const std::function<void()>& step = {}) {
  const auto end = std::chrono::steady_clock::now() + kWait;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    if (step) {
      step();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  return true;
}

PingConfig ping_config(std::string_view target, uint32_t count) {
  PingConfig c;
  c.target = ip(target);
  c.count = count;
  c.timeout_ns = kTimeoutNs;
  c.icmp_id = 0x1234;
  return c;
}

void attach(Engine& e, RoceSink& sink) {
  e.run_sync([&] { e.set_roce_sink(&sink); });
}

void detach(Device& d) {
  d.stop();
  d.engine().set_resolve_hook(nullptr);
  d.engine().set_roce_sink(nullptr);
}

// Stops the engines before the sessions they call go away, however the
// test ends (declare it after the sessions).
struct StopEngines {
  std::vector<Device*> devices;
  ~StopEngines() {
    for (Device* d : devices) detach(*d);
  }
};

// An echo session on B and a ping session from A to it, started; the
// engines stop before the sessions go, however the test ends.
struct EchoPing {
  EchoSession echo;
  PingSession ping;
  StopEngines stop;
  EchoPing(Device& a, Device& b, const PingConfig& cfg) : echo(b.engine(), 0), ping(a.engine(), cfg), stop{{&a, &b}} {
    attach(b.engine(), echo);
    attach(a.engine(), ping);
    a.engine().run_sync([&] { ping.start(); });
  }
};

// Takes a session out of a running engine (declare it after the session).
struct Unhook {
  Engine& engine;
  PingSession& session;
  IcmpReplyTap* tap;
  ~Unhook() {
    engine.run_sync([&] {
      session.stop();
      if (tap != nullptr) tap->attach(nullptr);
      engine.set_resolve_hook(nullptr);
    });
  }
};

TEST(Devices, ListsWithoutStarting) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims()));
  auto names = devs.names();
  ASSERT_TRUE(names);
  EXPECT_EQ(*names, (std::vector<std::string>{"simA", "simB"}));
  EXPECT_EQ(devs.find("simA"), nullptr);
  auto none = devs.open("nosuch");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ENODEV);
}

TEST(Devices, OpenIsLazyAndIdempotent) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims()));
  auto a = devs.open();  // the first device
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ((*a)->name(), "simA");
  auto again = devs.open("simA");
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *a);
  EXPECT_EQ(devs.find("simA"), *a);
  EXPECT_FALSE(devs.configure(two_sims()));  // too late once a device is open
  const DeviceInfo& info = (*a)->info();
  EXPECT_EQ(info.driver, "sim");
  EXPECT_TRUE(info.answer_host);  // no kernel: the engine answers ARP/ND/ICMP
  EXPECT_FALSE(info.udp4791_claimed);
  EXPECT_EQ(info.local.ips.size(), 2u);
  EXPECT_EQ(info.mtu, drivers::sim::kDefaultSimMtu);
  EXPECT_EQ(info.progress, ProgressKind::Thread);
  // The engine thread runs as a registered (non-EAL) lcore, until it stops.
  // A doorbell, waited for without driving the loop: run_sync may run its
  // function on the calling thread (it assists the engine thread).
  struct Probe {
    std::atomic<unsigned> lcore{LCORE_ID_ANY};
    std::atomic<bool> done{false};
  } probe;
  const Engine::Doorbell d{[](Engine&, void* ctx) {
                                        auto* p = static_cast<Probe*>(ctx);
                                        p->lcore.store(rte_lcore_id());
                                        p->done.store(true);
                                      },
                                      &probe};
  ASSERT_TRUE((*a)->engine().ring(d));
  for (int i = 0; i < 5000 && !probe.done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(probe.done.load()) << "the engine thread never ran the doorbell";
  const unsigned lcore = probe.lcore.load();
  ASSERT_NE(lcore, LCORE_ID_ANY);
  EXPECT_EQ(rte_eal_lcore_role(lcore), ROLE_NON_EAL);
  devs.close("simA");
  EXPECT_EQ(devs.find("simA"), nullptr);
  EXPECT_NE(rte_eal_lcore_role(lcore), ROLE_NON_EAL);  // released
}

// The device is port, engine and RNIC in one object: the verbs act on
// device.rnic(), which receives the engine's RoCE frames, and close()
// tears all three down in reverse with the program's objects still on
// the RNIC.
TEST(Devices, TheDeviceCarriesItsRnicAndClosesInReverse) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims()));
  auto a = devs.open("simA");
  ASSERT_TRUE(a) << a.error().message;
  rnic::Rnic& r = (*a)->rnic();
  EXPECT_EQ(r.name(), "simA");
  EXPECT_EQ(r.gid_count(), (*a)->info().local.ips.size());
  int err = 0;
  rnic::Pd* pd = r.alloc_pd(&err);
  ASSERT_NE(pd, nullptr) << err;
  rnic::Cq* cq = r.create_cq(16, nullptr, nullptr, 0, &err);
  ASSERT_NE(cq, nullptr) << err;
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = reinterpret_cast<ibv_cq*>(cq);
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  rnic::Qp* qp = r.create_qp(pd, init, &err);
  ASSERT_NE(qp, nullptr) << err;
  EXPECT_EQ(qp->state(), IBV_QPS_RESET);
  devs.close("simA");
  EXPECT_EQ(devs.find("simA"), nullptr);
}

// A client of a device (what the IB CM is): made by every factory for the
// devices open when it is added and for each one opened later, after the
// RNIC (it can make RNIC objects), destroyed before the RNIC, the last
// attached first; a failing factory fails the open with its error.
struct Recorder : DeviceClient {
  Recorder(std::vector<std::string>& log, Device& dev, std::string tag) : log_(log), dev_(dev), tag_(std::move(tag)) {
    int err = 0;
    pd_ = dev.rnic().alloc_pd(&err);  // the RNIC is up
    log_.push_back("make " + tag_ + " on " + dev.name());
  }
  ~Recorder() override {
    EXPECT_EQ(dev_.rnic().dealloc_pd(pd_), 0) << "the RNIC is still there";
    log_.push_back("drop " + tag_ + " on " + dev_.name());
  }
  std::vector<std::string>& log_;
  Device& dev_;
  std::string tag_;
  rnic::Pd* pd_ = nullptr;
};

TEST(Devices, ClientsComeAfterTheRnicAndGoBeforeIt) {
  std::vector<std::string> log;
  {
    Devices devs;
    ASSERT_TRUE(devs.configure(two_sims()));
    auto a = devs.open("simA");
    ASSERT_TRUE(a) << a.error().message;
    auto factory = [&log](std::string tag) {
      return [&log, tag](Device& d) -> drivers::Result<std::unique_ptr<DeviceClient>> {
        return std::unique_ptr<DeviceClient>(std::make_unique<Recorder>(log, d, tag));
      };
    };
    ASSERT_TRUE(devs.add_client(factory("first")));
    ASSERT_TRUE(devs.add_client(factory("second")));
    EXPECT_EQ(log, (std::vector<std::string>{"make first on simA", "make second on simA"}));
    EXPECT_NE((*a)->client<Recorder>(), nullptr);
    auto b = devs.open("simB");  // opened later: both factories, in order
    ASSERT_TRUE(b) << b.error().message;
    EXPECT_EQ(log.size(), 4u);
    EXPECT_EQ(log[2], "make first on simB");
    EXPECT_EQ(log[3], "make second on simB");
    devs.close("simA");
    ASSERT_EQ(log.size(), 6u);
    EXPECT_EQ(log[4], "drop second on simA");
    EXPECT_EQ(log[5], "drop first on simA");
    log.clear();
  }  // the registry's shutdown closes simB in full
  EXPECT_EQ(log, (std::vector<std::string>{"drop second on simB", "drop first on simB"}));

  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims()));
  ASSERT_TRUE(devs.add_client([](Device&) -> drivers::Result<std::unique_ptr<DeviceClient>> {
    return drivers::Error{EBUSY, "QP 1 is taken"};
  }));
  auto a = devs.open("simA");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, EBUSY);
  EXPECT_NE(a.error().message.find("QP 1 is taken"), std::string::npos) << a.error().message;
  EXPECT_EQ(devs.find("simA"), nullptr);
}

TEST(Devices, RoceRoundTripsBetweenTwoDevices) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims()));
  ASSERT_OPEN_ALL(devs);
  Device* a = devs.find("simA");
  Device* b = devs.find("simB");
  ASSERT_TRUE(a && b);
  EchoPing s(*a, *b, ping_config("10.0.0.2", 50));
  PingSession& ping = s.ping;
  ASSERT_TRUE(wait_for([&] { return ping.done(); }));
  detach(*a);
  detach(*b);
  const auto& r = ping.results();
  EXPECT_EQ(r.failure, "");
  EXPECT_TRUE(r.resolved);
  EXPECT_EQ(r.peer_mac, b->info().mac);
  EXPECT_EQ(r.sent, 50u);
  EXPECT_EQ(r.received, 50u);
  EXPECT_EQ(r.lost, 0u);
  EXPECT_EQ(r.rtt_ns.size(), 50u);
  EXPECT_EQ(s.echo.echoed(), 50u);
  EXPECT_EQ(b->engine().counters().get(EngineCtr::tx_arp_reply), 1u);
  EXPECT_EQ(a->engine().counters().get(EngineCtr::rx_roce), 50u);
  EXPECT_EQ(a->engine().counters().get(EngineCtr::drop_icrc), 0u);
}

TEST(Devices, Ipv6AndIcmpEchoAnsweredByThePeerEngine) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims()));
  IcmpReplyTap* tap = nullptr;
  OpenOptions opts;
  opts.wrap_port = [&](drivers::Port& inner) {
    auto t = std::make_unique<IcmpReplyTap>(inner);
    tap = t.get();
    return std::unique_ptr<drivers::Port>(std::move(t));
  };
  auto a = devs.open("simA", opts);
  auto b = devs.open("simB");
  ASSERT_TRUE(a && b);
  ASSERT_NE(tap, nullptr);
  EXPECT_EQ(&(*a)->port(), tap);
  for (std::string_view target : {"10.0.0.2", "fd00::2"}) {
    SCOPED_TRACE(target);
    PingConfig cfg = ping_config(target, 20);
    cfg.icmp = true;
    PingSession ping((*a)->engine(), cfg);
    Unhook unhook{(*a)->engine(), ping, tap};
    (*a)->engine().run_sync([&] {
      tap->attach(&ping);
      ping.start();
    });
    ASSERT_TRUE(wait_for([&] { return ping.done(); }));
    EXPECT_EQ(ping.results().failure, "");
    EXPECT_EQ(ping.results().received, 20u);
  }
  EXPECT_EQ((*b)->engine().counters().get(EngineCtr::tx_icmp_reply), 20u);
  EXPECT_EQ((*b)->engine().counters().get(EngineCtr::tx_icmp6_reply), 20u);
  EXPECT_GE((*b)->engine().counters().get(EngineCtr::tx_nd_advert), 1u);
}

TEST(Devices, InlineProgressIsDrivenByTheCaller) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims(config::Progress::kInline)));
  ASSERT_OPEN_ALL(devs);
  Device* a = devs.find("simA");
  Device* b = devs.find("simB");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->info().progress, ProgressKind::Inline);
  EchoPing s(*a, *b, ping_config("10.0.0.2", 30));
  PingSession& ping = s.ping;
  // The caller runs the loop: its calls find the loop free, except the
  // rare one that meets the backstop (it polls only after 100 us without).
  unsigned calls = 0, ran = 0;
  ASSERT_TRUE(wait_for([&] { return ping.done(); }, [&] {
    calls += 2;
    ran += a->progress() ? 1 : 0;
    ran += b->progress() ? 1 : 0;
  }));
  EXPECT_GE(ran * 10, calls * 9) << ran << " of " << calls << " calls ran the loop";
  EXPECT_EQ(ping.results().received, 30u);
  detach(*a);
  detach(*b);
}

// Inline progress with nobody calling in (a program spinning on memory):
// the backstop runs the loop, so the exchange still completes.
TEST(Devices, InlineBackstopRunsTheLoopWhenNobodyCalls) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims(config::Progress::kInline)));
  ASSERT_OPEN_ALL(devs);
  Device* a = devs.find("simA");
  Device* b = devs.find("simB");
  ASSERT_TRUE(a && b);
  EchoPing s(*a, *b, ping_config("10.0.0.2", 10));
  PingSession& ping = s.ping;
  ASSERT_TRUE(wait_for([&] { return ping.done(); }));  // no step: this thread never polls
  EXPECT_EQ(ping.results().received, 10u);
  detach(*a);
  detach(*b);
}

TEST(Devices, FaultsWrapThePort) {
  config::Config cfg = two_sims();
  cfg.devices[0].faults = "drop=0.3,dir=tx,seed=11";
  Devices devs;
  ASSERT_TRUE(devs.configure(cfg));
  ASSERT_OPEN_ALL(devs);
  Device* a = devs.find("simA");
  Device* b = devs.find("simB");
  ASSERT_NE(a->fault_port(), nullptr);
  EXPECT_EQ(&a->port(), a->fault_port());
  ASSERT_TRUE(a->info().faults);
  EXPECT_DOUBLE_EQ(a->info().faults->drop, 0.3);
  EXPECT_EQ(b->fault_port(), nullptr);
  PingConfig pc = ping_config("10.0.0.2", 60);
  pc.timeout_ns = 20'000'000;
  EchoPing s(*a, *b, pc);
  PingSession& ping = s.ping;
  ASSERT_TRUE(wait_for([&] { return ping.done(); }));
  detach(*a);
  detach(*b);
  const auto& r = ping.results();
  EXPECT_EQ(r.sent, 60u);
  EXPECT_GT(r.lost, 0u);
  EXPECT_EQ(r.received + r.lost, r.sent);
  EXPECT_GT(a->fault_port()->counters(drivers::FaultDir::kTx)[drivers::FaultCounter::kDropped], 0u);
}

TEST(Devices, BadFaultSpecFailsTheOpen) {
  config::Config cfg = two_sims();
  cfg.devices[0].faults = "drop=2";
  Devices devs;
  ASSERT_TRUE(devs.configure(cfg));
  auto a = devs.open("simA");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("device simA: faults:"), std::string::npos) << a.error().message;
}

TEST(Devices, GlobalCaptureGetsOneFilePerDevice) {
  const auto dir = std::filesystem::temp_directory_path() / ("uroce-devices-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  config::Config cfg = two_sims();
  cfg.pcap = (dir / "cap.pcap").string();
  {
    Devices devs;
    ASSERT_TRUE(devs.configure(cfg));
    ASSERT_OPEN_ALL(devs);
    EXPECT_EQ(devs.find("simA")->info().pcap, (dir / "cap-simA.pcap").string());
    EXPECT_EQ(devs.find("simB")->info().pcap, (dir / "cap-simB.pcap").string());
    devs.shutdown();
  }
  // Each holds at least its gratuitous ARPs.
  EXPECT_GT(std::filesystem::file_size(dir / "cap-simA.pcap"), 24u);
  EXPECT_GT(std::filesystem::file_size(dir / "cap-simB.pcap"), 24u);
  std::filesystem::remove_all(dir);
}

TEST(Devices, CountersThroughTelemetry) {
  Devices devs;
  ASSERT_TRUE(devs.configure(two_sims()));
  ASSERT_OPEN_ALL(devs);
  const drivers::dpdk::EalInfo* eal = devs.eal();
  ASSERT_NE(eal, nullptr);
  if (eal->telemetry_socket.empty()) GTEST_SKIP() << "the EAL runs without telemetry";
  auto client = tools::TelemetryClient::connect(eal->telemetry_socket);
  ASSERT_TRUE(client) << client.error();
  auto list = client->query("/uroce/devices");
  ASSERT_TRUE(list) << list.error();
  EXPECT_EQ(list->size(), 2u);
  auto stats = client->query("/uroce/stats,simB");
  ASSERT_TRUE(stats) << stats.error();
  ASSERT_TRUE(stats->contains("tx_arp_request"));
  EXPECT_EQ((*stats)["tx_arp_request"], devs.find("simB")->engine().counters().get(EngineCtr::tx_arp_request));
  EXPECT_FALSE(client->query("/uroce/stats,nosuch"));
  // Every counter set by name; here the engine's (the RNIC and the CM add
  // theirs when they come up: tests/security/netns_attack_test.sh).
  auto sets = client->query("/uroce/counters,simB");
  ASSERT_TRUE(sets) << sets.error();
  ASSERT_TRUE(sets->contains("engine"));
  EXPECT_EQ((*sets)["engine"]["tx_arp_request"],
            devs.find("simB")->engine().counters().get(EngineCtr::tx_arp_request));
  EXPECT_FALSE(client->query("/uroce/counters,nosuch"));
  devs.shutdown();
  auto after = client->query("/uroce/devices");
  ASSERT_TRUE(after) << after.error();
  EXPECT_TRUE(after->empty());  // unregistered on close
}

}  // namespace
}  // namespace uroce::transport
