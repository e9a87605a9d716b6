// What a program sees when uroced goes away under it (issue 15, suite
// daemon): a client of the daemon that holds a device, a QP with a
// receive posted, and an rdma_cm id bound to the device's address, then
// waits.  The test script stops the daemon once this prints "ready".
// The program must see, without hanging:
//   - IBV_EVENT_DEVICE_FATAL from ibv_get_async_event;
//   - RDMA_CM_EVENT_DEVICE_REMOVAL from rdma_get_cm_event;
//   - its posted receive completed with IBV_WC_WR_FLUSH_ERR.
// Built against rdma-core's headers and run through the drop-ins.
//
//   fatal_watch IPV4_ADDRESS
//
// Exit 0: all three seen; 1: something else happened; 3: not within 15 s.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

std::atomic<bool> fatal_seen{false};

void on_alarm(int) {
  static const char msg[] = "fatal_watch: no DEVICE_FATAL / DEVICE_REMOVAL / flush within 15 s\n";
  [[maybe_unused]] ssize_t w = ::write(2, msg, sizeof msg - 1);
  _exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s IPV4_ADDRESS\n", argv[0]);
    return 2;
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    std::fprintf(stderr, "fatal_watch: no device\n");
    return 1;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_pd* pd = ctx != nullptr ? ibv_alloc_pd(ctx) : nullptr;
  ibv_cq* cq = pd != nullptr ? ibv_create_cq(ctx, 4, nullptr, nullptr, 0) : nullptr;
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = init.cap.max_recv_wr = 2;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  ibv_qp* qp = cq != nullptr ? ibv_create_qp(pd, &init) : nullptr;
  static char buf[64];
  ibv_mr* mr = qp != nullptr ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : nullptr;
  if (mr == nullptr) {
    std::fprintf(stderr, "fatal_watch: verbs set-up failed: %s\n", std::strerror(errno));
    return 1;
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    std::fprintf(stderr, "fatal_watch: modify to INIT failed\n");
    return 1;
  }
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), sizeof buf, mr->lkey};
  ibv_recv_wr rwr{};
  rwr.wr_id = 42;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(qp, &rwr, &bad) != 0) {
    std::fprintf(stderr, "fatal_watch: post_recv failed\n");
    return 1;
  }

  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  if (ch == nullptr || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0 ||
      inet_pton(AF_INET, argv[1], &sin.sin_addr) != 1 || rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&sin)) != 0) {
    std::fprintf(stderr, "fatal_watch: rdma_cm set-up failed: %s\n", std::strerror(errno));
    return 1;
  }

  signal(SIGALRM, on_alarm);
  std::thread async([ctx] {
    ibv_async_event ev{};
    while (ibv_get_async_event(ctx, &ev) == 0) {
      std::printf("async event: %s\n", ibv_event_type_str(ev.event_type));
      std::fflush(stdout);
      const bool fatal = ev.event_type == IBV_EVENT_DEVICE_FATAL;
      ibv_ack_async_event(&ev);
      if (fatal) {
        fatal_seen = true;
        return;
      }
    }
  });
  std::printf("ready\n");
  std::fflush(stdout);
  alarm(15);  // from when the test may stop the daemon

  bool removal = false;
  rdma_cm_event* cev = nullptr;
  while (!removal && rdma_get_cm_event(ch, &cev) == 0) {
    std::printf("cm event: %s\n", rdma_event_str(cev->event));
    std::fflush(stdout);
    removal = cev->event == RDMA_CM_EVENT_DEVICE_REMOVAL;
    rdma_ack_cm_event(cev);
  }
  bool flushed = false;
  while (!flushed) {
    ibv_wc wc{};
    const int got = ibv_poll_cq(cq, 1, &wc);
    if (got < 0) break;
    if (got == 1) {
      std::printf("completion: wr_id %llu status %s\n", static_cast<unsigned long long>(wc.wr_id),
                  ibv_wc_status_str(wc.status));
      flushed = wc.wr_id == 42 && wc.status == IBV_WC_WR_FLUSH_ERR;
      if (!flushed) break;
    } else {
      usleep(1000);
    }
  }
  async.join();
  const bool ok = removal && flushed && fatal_seen;
  std::printf("fatal_watch: %s\n", ok ? "DEVICE_FATAL, DEVICE_REMOVAL and the flush seen" : "something was missing");
  return ok ? 0 : 1;
}
