// A lossy link for the loss benchmark (bench/lossy/run): a tc egress
// classifier (clsact, cls_bpf direct-action) that drops each frame with a
// fixed probability, DROP_PPM per million, independently of every other
// (bpf_get_prandom_u32), whatever its protocol.  This kernel has no netem;
// this is the part of it the benchmark needs.
//
//   clang -O2 -target bpf -DDROP_PPM=10000 -c drop.bpf.c -o drop.o
//   tc qdisc add dev IF clsact
//   tc filter add dev IF egress bpf direct-action obj drop.o sec tc
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_helpers.h>

#ifndef DROP_PPM
#error "DROP_PPM (frames dropped per million) must be defined"
#endif

#define PPM 1000000u

_Static_assert(DROP_PPM >= 0 && DROP_PPM <= PPM, "DROP_PPM is a share of a million");

SEC("tc")
int drop_frames(struct __sk_buff* skb) {
  (void)skb;
  return bpf_get_prandom_u32() % PPM < (unsigned)DROP_PPM ? TC_ACT_SHOT : TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
