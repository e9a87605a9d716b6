// uroce-startup: how long a program waits for its device, from its first
// verbs call to a device it can use (issue 13: "usable within 100 ms of the
// first call").  A plain verbs program, run through the drop-in
// (scripts/uroce-run, or LD_LIBRARY_PATH): the device is whatever the
// configuration names.
//
//   uroce-startup [--json]
//
// Times from the first call (CLOCK_MONOTONIC, ms):
//   list     ibv_get_device_list returned (the EAL, the port, the engine)
//   open     ibv_open_device returned
//   usable   a PD and a CQ made, ibv_query_port answered
//   active   the port ACTIVE (a link that is up: at once on a veth)
// Exit 0 when the port became active within 10 s, 1 otherwise.
#include <infiniband/verbs.h>
#include <time.h>

#include <cstdio>
#include <cstring>

namespace {

double ms_since(const timespec& t0) {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec - t0.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec - t0.tv_nsec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  timespec t0{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const double list_ms = ms_since(t0);
  if (list == nullptr || n == 0) {
    std::fprintf(stderr, "uroce-startup: no device (%s)\n", std::strerror(errno));
    return 1;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  const double open_ms = ms_since(t0);
  if (ctx == nullptr) {
    std::fprintf(stderr, "uroce-startup: ibv_open_device: %s\n", std::strerror(errno));
    return 1;
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_port_attr pa{};
  const int qrc = ibv_query_port(ctx, 1, &pa);
  const double usable_ms = ms_since(t0);
  if (pd == nullptr || cq == nullptr || qrc != 0) {
    std::fprintf(stderr, "uroce-startup: the device is not usable (pd %p, cq %p, query_port %d)\n",
                 static_cast<void*>(pd), static_cast<void*>(cq), qrc);
    return 1;
  }
  double active_ms = usable_ms;
  while (pa.state != IBV_PORT_ACTIVE && active_ms < 10'000) {
    const timespec nap{0, 100'000};
    nanosleep(&nap, nullptr);
    if (ibv_query_port(ctx, 1, &pa) != 0) break;
    active_ms = ms_since(t0);
  }
  const bool active = pa.state == IBV_PORT_ACTIVE;
  if (json) {
    std::printf("{\"device\": \"%s\", \"list_ms\": %.2f, \"open_ms\": %.2f, \"usable_ms\": %.2f, \"active_ms\": %.2f}\n",
                ibv_get_device_name(list[0]), list_ms, open_ms, usable_ms, active ? active_ms : -1.0);
  } else {
    std::printf("%s: list %.1f ms, open %.1f ms, usable %.1f ms, port active %.1f ms\n",
                ibv_get_device_name(list[0]), list_ms, open_ms, usable_ms, active ? active_ms : -1.0);
  }
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return active ? 0 : 1;
}
