// fork() after the devices started (suite daemon), as rdma-core's pyverbs
// rdma_cm tests do it: the parent opens the device, then forks a passive
// and an active child that connect to each other through rdma_cm on the
// same device and exchange a message each way.  Through uroced each child
// is a client of its own; the parent's device stays its own and still
// works after they are done.  With in-process devices (UROCE_DEVICE) a
// child has no device, and says so (--in-process checks exactly that).
// Built against rdma-core's headers and run through the drop-ins.
//
//   fork_pair IPV4_ADDRESS PORT      the pair through the daemon
//   fork_pair --in-process           a child finds no device
//
// Exit 0: as described; 1: something else happened; 3: not within 20 s.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr size_t kMsg = 64;

int die(const char* who, const char* what) {
  std::fprintf(stderr, "fork_pair %s: %s: %s\n", who, what, std::strerror(errno));
  return 1;
}

ibv_qp_init_attr qp_attr() {
  ibv_qp_init_attr a{};
  a.cap.max_send_wr = a.cap.max_recv_wr = 2;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = 1;
  return a;
}

rdma_addrinfo* addrinfo(const char* ip, const char* port, bool passive) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  if (passive) hints.ai_flags = RAI_PASSIVE;
  rdma_addrinfo* res = nullptr;
  return rdma_getaddrinfo(ip, port, &hints, &res) == 0 ? res : nullptr;
}

// The passive child: listens, says so on `ready`, takes one connection,
// receives "ping", answers "pong".
int passive(const char* ip, const char* port, int ready) {
  rdma_addrinfo* res = addrinfo(ip, port, true);
  if (res == nullptr) return die("passive", "rdma_getaddrinfo");
  rdma_cm_id* listen_id = nullptr;
  ibv_qp_init_attr a = qp_attr();
  if (rdma_create_ep(&listen_id, res, nullptr, &a) != 0) return die("passive", "rdma_create_ep");
  if (rdma_listen(listen_id, 1) != 0) return die("passive", "rdma_listen");
  if (::write(ready, "r", 1) != 1) return die("passive", "write");
  rdma_cm_id* id = nullptr;
  if (rdma_get_request(listen_id, &id) != 0) return die("passive", "rdma_get_request");
  char buf[kMsg] = {};
  ibv_mr* mr = rdma_reg_msgs(id, buf, sizeof buf);
  if (mr == nullptr) return die("passive", "rdma_reg_msgs");
  if (rdma_post_recv(id, nullptr, buf, sizeof buf, mr) != 0) return die("passive", "rdma_post_recv");
  if (rdma_accept(id, nullptr) != 0) return die("passive", "rdma_accept");
  ibv_wc wc{};
  if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) return die("passive", "receive");
  if (std::strcmp(buf, "ping") != 0) {
    std::fprintf(stderr, "fork_pair passive: received '%.8s', not ping\n", buf);
    return 1;
  }
  std::strcpy(buf, "pong");
  if (rdma_post_send(id, nullptr, buf, sizeof buf, mr, 0) != 0) return die("passive", "rdma_post_send");
  if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) return die("passive", "send");
  rdma_disconnect(id);
  rdma_dereg_mr(mr);
  rdma_destroy_ep(id);
  rdma_destroy_ep(listen_id);
  rdma_freeaddrinfo(res);
  return 0;
}

// The active child: waits for the listener, connects, sends "ping",
// receives "pong".
int active(const char* ip, const char* port, int ready) {
  char r = 0;
  if (::read(ready, &r, 1) != 1) return die("active", "the passive child never listened");
  rdma_addrinfo* res = addrinfo(ip, port, false);
  if (res == nullptr) return die("active", "rdma_getaddrinfo");
  rdma_cm_id* id = nullptr;
  ibv_qp_init_attr a = qp_attr();
  if (rdma_create_ep(&id, res, nullptr, &a) != 0) return die("active", "rdma_create_ep");
  char buf[kMsg] = {};
  ibv_mr* mr = rdma_reg_msgs(id, buf, sizeof buf);
  if (mr == nullptr) return die("active", "rdma_reg_msgs");
  if (rdma_post_recv(id, nullptr, buf, sizeof buf, mr) != 0) return die("active", "rdma_post_recv");
  if (rdma_connect(id, nullptr) != 0) return die("active", "rdma_connect");
  char out[kMsg] = "ping";
  ibv_mr* omr = rdma_reg_msgs(id, out, sizeof out);
  if (omr == nullptr) return die("active", "rdma_reg_msgs");
  ibv_wc wc{};
  if (rdma_post_send(id, nullptr, out, sizeof out, omr, 0) != 0) return die("active", "rdma_post_send");
  if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) return die("active", "send");
  if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) return die("active", "receive");
  if (std::strcmp(buf, "pong") != 0) {
    std::fprintf(stderr, "fork_pair active: received '%.8s', not pong\n", buf);
    return 1;
  }
  rdma_disconnect(id);
  rdma_dereg_mr(mr);
  rdma_dereg_mr(omr);
  rdma_destroy_ep(id);
  rdma_freeaddrinfo(res);
  return 0;
}

// The parent's device before the fork: opened, a PD.
struct Held {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
};

bool open_first(Held* h) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n < 1) return false;
  h->ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (h->ctx == nullptr) return false;
  h->pd = ibv_alloc_pd(h->ctx);
  return h->pd != nullptr;
}

// The parent's device still answers after its children are done.
bool still_works(const Held& h) {
  ibv_port_attr pa{};
  if (ibv_query_port(h.ctx, 1, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) return false;
  ibv_cq* cq = ibv_create_cq(h.ctx, 4, nullptr, nullptr, 0);
  if (cq == nullptr) return false;
  ibv_qp_init_attr a = qp_attr();
  a.send_cq = a.recv_cq = cq;
  ibv_qp* qp = ibv_create_qp(h.pd, &a);
  if (qp == nullptr) return false;
  return ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(h.pd) == 0 &&
         ibv_close_device(h.ctx) == 0;
}

int wait_child(pid_t pid, const char* who) {
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) return die(who, "waitpid");
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
  std::fprintf(stderr, "fork_pair: the %s child ended with %s %d\n", who, WIFEXITED(st) ? "status" : "signal",
               WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool in_process = argc == 2 && std::strcmp(argv[1], "--in-process") == 0;
  if (!in_process && argc != 3) {
    std::fprintf(stderr, "usage: %s IPV4_ADDRESS PORT | --in-process\n", argv[0]);
    return 1;
  }
  ::alarm(20);  // SIGALRM's default action ends a hung run (children too: they inherit it)
  Held held;
  if (!open_first(&held)) return die("parent", "no device to open before the fork");
  if (in_process) {
    const pid_t pid = ::fork();
    if (pid < 0) return die("parent", "fork");
    if (pid == 0) {
      int n = -1;
      ibv_device** list = ibv_get_device_list(&n);
      if (list != nullptr) ibv_free_device_list(list);
      if (n != 0) {
        std::fprintf(stderr, "fork_pair child: %d devices of an in-process parent, expected none\n", n);
        _exit(1);
      }
      std::exit(0);  // the exit handlers must leave the parent's devices alone
    }
    if (wait_child(pid, "in-process") != 0) return 1;
  } else {
    int pipefd[2];
    if (::pipe(pipefd) != 0) return die("parent", "pipe");
    const pid_t p = ::fork();
    if (p < 0) return die("parent", "fork");
    if (p == 0) std::exit(passive(argv[1], argv[2], pipefd[1]));
    const pid_t a = ::fork();
    if (a < 0) return die("parent", "fork");
    if (a == 0) std::exit(active(argv[1], argv[2], pipefd[0]));
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    const int rp = wait_child(p, "passive");
    const int ra = wait_child(a, "active");
    if (rp != 0 || ra != 0) return 1;
  }
  if (!still_works(held)) return die("parent", "the parent's device after its children");
  std::printf("fork_pair: ok\n");
  return 0;
}
