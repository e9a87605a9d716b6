// lib/wire on the data path: ICRC throughput against a plain CRC-32 of the
// same bytes (the ratio the engine's per-packet cost depends on), other
// CRC-32 engines for context, and parse/build cost per packet.
//
// Frames are RoCEv2 RC SEND_ONLY over IPv4 of exactly 64, 1024 and 4096
// bytes.  (Every RoCEv2 frame without a trailer is 2 mod 4 bytes long, so
// a 2-byte Ethernet trailer makes up the size; it is outside the ICRC.)
// Throughput is frame bytes per second for every CRC, so the numbers of
// one size compare directly.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <rte_net_crc.h>
#include <zlib.h>

// DPDK 22.11's rte_vect.h declares its functions without C linkage for C++.
extern "C" {
#include <rte_vect.h>
}

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "lib/wire/build.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/pkt.hpp"

namespace {

using namespace uroce;
using namespace uroce::wire;

constexpr size_t kTrailer = 2;

struct Fixture {
  std::vector<uint8_t> payload;
  std::vector<uint8_t> trailer = std::vector<uint8_t>(kTrailer, 0);
  PktDesc d;
  std::vector<uint8_t> frame;
  PktInfo info;

  explicit Fixture(size_t frame_size) {
    d.eth_dst = {0x02, 0, 0, 0, 0, 0x02};
    d.eth_src = {0x02, 0, 0, 0, 0, 0x01};
    d.src = PktDesc::ipv4_mapped(0x0A000001);
    d.dst = PktDesc::ipv4_mapped(0x0A000002);
    d.sport = 0xC123;
    d.opcode = op::RC_SEND_ONLY;
    d.dest_qp = Qpn(0x11);
    d.psn = Psn(0x123456);
    d.ack_req = true;
    d.pkey = kDefaultPkey;
    const size_t fixed = frame_len(d, 0) + kTrailer;  // headers + ICRC + trailer
    payload.resize(frame_size - fixed);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
    d.payload = payload;
    d.eth_trailer = trailer;
    frame.resize(frame_len(d, payload.size()));
    if (build(frame, d) != frame_size) std::abort();
    info = parse(frame);
    if (info.cls != FrameClass::RoceV2 || !verify_icrc(frame.data(), info)) std::abort();
  }
};

const Fixture& fixture(int64_t size) {
  static const Fixture f64(64), f1k(1024), f4k(4096);
  switch (size) {
    case 64: return f64;
    case 1024: return f1k;
    default: return f4k;
  }
}

void sizes(benchmark::internal::Benchmark* b) { b->Arg(64)->Arg(1024)->Arg(4096); }

void finish_bytes(benchmark::State& state, size_t bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// ---- CRC ------------------------------------------------------------------

void BM_Icrc(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(compute_icrc(f.frame.data(), f.info));
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_Icrc)->Apply(sizes);

// The same engine (ISA-L crc32_gzip_refl) over the whole frame, unmasked.
void BM_Crc32Isal(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(uroce::wire::crc32(0, f.frame.data(), f.frame.size()));
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_Crc32Isal)->Apply(sizes);

// Like for like: the same engine over exactly the bytes the ICRC covers
// (IP header to ICRC, from the 8-byte prefix state), in place and unmasked:
// the floor for any ICRC built on this engine.  ISA-L's AVX-512 CRC is much
// faster on lengths that are a multiple of 64 (a 1024-byte buffer takes
// well under half the time of a 1022-byte one), and the exact frame sizes
// above are the plain CRC's best case while the covered length never is.
void BM_Crc32IsalCovered(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  const uint8_t* ip = f.frame.data() + f.info.l3_off;
  const size_t covered = f.info.icrc_off - f.info.l3_off;
  const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  const uint32_t seed = uroce::wire::crc32(0, ones, sizeof ones);
  for (auto _ : state) {
    benchmark::DoNotOptimize(uroce::wire::crc32(seed, ip, covered));
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_Crc32IsalCovered)->Apply(sizes);

void BM_Crc32Zlib(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(::crc32(0, f.frame.data(), static_cast<uInt>(f.frame.size())));
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_Crc32Zlib)->Apply(sizes);

// DPDK's rte_net_crc_calc(RTE_NET_CRC32_ETH).  Without rte_eal_init()
// rte_vect_get_max_simd_bitwidth() is 0, and rte_net_crc_set_alg() then
// falls back to the scalar table whatever it is asked for; raising the
// bitwidth first (works without the EAL) gives the SSE4.2/PCLMUL path.
void dpdk_select(bool simd) {
  if (simd) rte_vect_set_max_simd_bitwidth(RTE_VECT_SIMD_128);
  rte_net_crc_set_alg(simd ? RTE_NET_CRC_SSE42 : RTE_NET_CRC_SCALAR);
}

void BM_Crc32DpdkSse42(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  dpdk_select(true);
  for (auto _ : state) {
    benchmark::DoNotOptimize(rte_net_crc_calc(f.frame.data(), static_cast<uint32_t>(f.frame.size()), RTE_NET_CRC32_ETH));
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_Crc32DpdkSse42)->Apply(sizes);

void BM_Crc32DpdkScalar(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  dpdk_select(false);
  for (auto _ : state) {
    benchmark::DoNotOptimize(rte_net_crc_calc(f.frame.data(), static_cast<uint32_t>(f.frame.size()), RTE_NET_CRC32_ETH));
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_Crc32DpdkScalar)->Apply(sizes);

// ---- parse and build, per packet -------------------------------------------

void BM_Parse(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  for (auto _ : state) {
    PktInfo pi = parse(f.frame);
    benchmark::DoNotOptimize(pi);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_Parse)->Apply(sizes);

// The receive path's checks: parse, then the ICRC.
void BM_ParseVerify(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  for (auto _ : state) {
    PktInfo pi = parse(f.frame);
    bool ok = verify_icrc(f.frame.data(), pi);
    benchmark::DoNotOptimize(ok);
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_ParseVerify)->Apply(sizes);

// The same with VZEROUPPER after the ICRC.  ISA-L 2.30's AVX-512 CRC
// (crc32_gzip_refl_by16_10) returns with the upper ZMM state dirty, and the
// legacy-SSE code that follows (everything built with -march=corei7) pays
// for it until something clears the state; the difference between this and
// BM_ParseVerify is that cost.
__attribute__((target("avx"))) void zero_upper() { _mm256_zeroupper(); }

void BM_ParseVerifyZeroUpper(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx")) {
    state.SkipWithError("no AVX");
    return;
  }
  const Fixture& f = fixture(state.range(0));
  for (auto _ : state) {
    PktInfo pi = parse(f.frame);
    bool ok = verify_icrc(f.frame.data(), pi);
    zero_upper();
    benchmark::DoNotOptimize(ok);
  }
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_ParseVerifyZeroUpper)->Apply(sizes);

// Headers, payload copy, pad, ICRC into a buffer.
void BM_Build(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  std::vector<uint8_t> out(f.frame.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(build(out, f.d));
    benchmark::ClobberMemory();
  }
  if (out != f.frame) state.SkipWithError("build() output differs from the fixture");
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_Build)->Apply(sizes);

// The transmit path with the payload already in place (mbuf headroom):
// write_headers() in front of it, finish() for pad and ICRC behind it.
void BM_WriteHeadersFinish(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  std::vector<uint8_t> out(f.frame.size());
  std::memcpy(out.data() + header_len(f.d), f.payload.data(), f.payload.size());
  for (auto _ : state) {
    write_headers(out.data(), f.d, f.payload.size());
    benchmark::DoNotOptimize(finish(out.data(), f.d, f.payload.size()));
    benchmark::ClobberMemory();
  }
  if (out != f.frame) state.SkipWithError("write_headers()+finish() output differs from the fixture");
  finish_bytes(state, f.frame.size());
}
BENCHMARK(BM_WriteHeadersFinish)->Apply(sizes);

// Before running: every CRC engine agrees on the bytes, and which DPDK
// handler rte_net_crc_set_alg(RTE_NET_CRC_SSE42) selects without the EAL.
bool check_engines() {
  const Fixture& f = fixture(4096);
  const uint32_t want = uroce::wire::crc32(0, f.frame.data(), f.frame.size());
  bool ok = want == ::crc32(0, f.frame.data(), static_cast<uInt>(f.frame.size()));
  auto rate = [&]() {
    const auto t0 = std::chrono::steady_clock::now();
    uint32_t acc = 0;
    constexpr int kRounds = 2000;
    for (int i = 0; i < kRounds; ++i) {
      acc ^= rte_net_crc_calc(f.frame.data(), static_cast<uint32_t>(f.frame.size()), RTE_NET_CRC32_ETH);
    }
    benchmark::DoNotOptimize(acc);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return kRounds * static_cast<double>(f.frame.size()) / s / 1e9;
  };
  const uint16_t bitwidth_before = rte_vect_get_max_simd_bitwidth();
  rte_net_crc_set_alg(RTE_NET_CRC_SSE42);  // as an application would, no EAL
  ok = ok && rte_net_crc_calc(f.frame.data(), static_cast<uint32_t>(f.frame.size()), RTE_NET_CRC32_ETH) == want;
  const double as_asked = rate();
  dpdk_select(true);
  ok = ok && rte_net_crc_calc(f.frame.data(), static_cast<uint32_t>(f.frame.size()), RTE_NET_CRC32_ETH) == want;
  const double with_bitwidth = rate();
  dpdk_select(false);
  const double scalar = rate();
  std::printf("CRC engines agree on a 4 KiB frame: %s\n", ok ? "yes" : "NO");
  std::printf("DPDK without rte_eal_init: max SIMD bitwidth %u; rte_net_crc_set_alg(SSE42) runs at %.2f GB/s, "
              "scalar %.2f GB/s, SSE42 after rte_vect_set_max_simd_bitwidth(128) %.2f GB/s\n",
              bitwidth_before, as_asked, scalar, with_bitwidth);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!check_engines()) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
