// A congested switch port for the incast benchmark (bench/incast/run): a
// tc egress classifier (clsact, cls_bpf direct-action) on the port in front
// of the tbf that shapes it to RATE_MBPS.  It keeps a virtual queue drained
// at that same rate (the bytes that arrived less those the link could have
// sent since) and marks ECN-capable IP frames CE by the queue's length q:
//   - step marking (DCTCP's switches): every frame while q > MARK_BYTES;
//   - RED marking (DCQCN's: Kmin, Kmax, Pmax) when MARK_MAX_BYTES is given
//     and larger: none below MARK_BYTES, with probability
//     MARK_PMAX_PCT% * (q - Kmin) / (Kmax - Kmin) between, every frame
//     above MARK_MAX_BYTES.
// Not-ECT frames pass unmarked; what overflows the tbf's own limit is
// dropped there.  This kernel has no RED qdisc; this is the part of it the
// benchmark needs.
//
//   clang -g -O2 -target bpf -DRATE_MBPS=200 -DMARK_BYTES=30000 -c mark.bpf.c -o mark.o
//   clang ... -DMARK_BYTES=10000 -DMARK_MAX_BYTES=100000 -DMARK_PMAX_PCT=10 ...
//   tc qdisc add dev IF root tbf rate 200mbit burst 16k limit 256k
//   tc qdisc add dev IF clsact
//   tc filter add dev IF egress bpf direct-action obj mark.o sec tc
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_helpers.h>

#ifndef RATE_MBPS
#error "RATE_MBPS (the shaped rate, Mbit/s) must be defined"
#endif
#ifndef MARK_BYTES
#error "MARK_BYTES (the marking threshold of the virtual queue) must be defined"
#endif

#ifndef MARK_MAX_BYTES
#define MARK_MAX_BYTES MARK_BYTES
#endif
#ifndef MARK_PMAX_PCT
#define MARK_PMAX_PCT 100
#endif
#if MARK_MAX_BYTES < MARK_BYTES
#error "MARK_MAX_BYTES (RED's Kmax) must not be below MARK_BYTES (Kmin)"
#endif

struct vq {
  struct bpf_spin_lock lock;
  __u64 bytes;    // in the virtual queue
  __u64 last_ns;  // when it was last drained
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct vq);
} queue SEC(".maps");

SEC("tc")
int mark_congested(struct __sk_buff* skb) {
  const __u32 key = 0;
  struct vq* q = bpf_map_lookup_elem(&queue, &key);
  if (!q) return TC_ACT_OK;
  const __u64 now = bpf_ktime_get_ns();
  __u64 len;
  bpf_spin_lock(&q->lock);
  const __u64 drained = q->last_ns ? (now - q->last_ns) * RATE_MBPS / 8000 : 0;  // bytes: Mbit/s = 1/8000 B/ns
  q->bytes = q->bytes > drained ? q->bytes - drained : 0;
  q->last_ns = now;
  q->bytes += skb->len;
  len = q->bytes;
  bpf_spin_unlock(&q->lock);
  if (len <= MARK_BYTES) return TC_ACT_OK;
  if (len > MARK_MAX_BYTES) {
    bpf_skb_ecn_set_ce(skb);
    return TC_ACT_OK;
  }
  // Between Kmin and Kmax (RED only): in 1/2^16ths, against a random draw.
  const __u64 p = (__u64)MARK_PMAX_PCT * 65536 / 100 * (len - MARK_BYTES) / (MARK_MAX_BYTES - MARK_BYTES + 1);
  if ((bpf_get_prandom_u32() & 0xFFFF) < p) bpf_skb_ecn_set_ce(skb);
  return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
