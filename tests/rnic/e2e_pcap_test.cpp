// The wire check: a capture of one mixed run (RC, UC and UD; every
// opcode family; multi-packet messages; IPv4 and IPv6) passes
// `uroce pcap-check` (ICRC and byte-exact re-serialisation), and tshark
// decodes every RoCEv2 frame without a malformed-packet report, with UDP
// checksum 0, a source port in 0xC000-0xFFFF (as rxe's captures in
// ../shared/vectors), and IPv4 DF set with TTL 64 (DESIGN.md "Wire rules").
//
//   test-rnic-e2e-pcap --uroce=PATH   (meson passes the uroce tool)
// Exits 77 (skip) when tshark is absent.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

// stdout of `cmd`, and its exit status.
std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    *status = -1;
    return out;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), n);
  const int st = pclose(f);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::vector<std::vector<std::string>> rows(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cols;
    std::istringstream ls(line);
    std::string c;
    while (std::getline(ls, c, '\t')) cols.push_back(c);
    out.push_back(cols);
  }
  return out;
}

// One run of traffic of every kind, captured at node A.
void traffic(const std::string& pcap) {
  HarnessOptions ho;
  ho.pcap_a = pcap;
  Harness h(ho);
  for (bool ipv6 : {false, true}) {
    ConnOpts o;
    o.mtu = IBV_MTU_1024;
    o.ipv6 = ipv6;
    Pair rc = h.pair(IBV_QPT_RC, o);
    Pair uc = h.pair(IBV_QPT_UC, o);
    ASSERT_TRUE(rc.qa && uc.qa);
    Buffer a = h.buffer(h.a(), 1 << 16, kRemoteAll);
    Buffer b = h.buffer(h.b(), 1 << 16, kRemoteAll);
    fill_pattern(a.bytes(0, a.len), 1);
    uint64_t id = 1;
    for (size_t len : {size_t{0}, size_t{1}, size_t{1024}, size_t{3000}}) {
      ibv_sge r = b.sge(0, 8192);
      ASSERT_EQ(post_recv(rc.qb, id, {&r, 1}), 0);
      ASSERT_EQ(post_recv(rc.qb, id + 1, {&r, 1}), 0);
      ASSERT_EQ(post_recv(rc.qb, id + 2, {&r, 1}), 0);
      ibv_sge s = a.sge(0, len);
      const uint32_t n_sge = len ? 1 : 0;
      ibv_send_wr w[6] = {
          send_wr(IBV_WR_SEND, id, {&s, n_sge}),
          send_wr(IBV_WR_SEND_WITH_IMM, id + 1, {&s, n_sge}),
          rdma_wr(IBV_WR_RDMA_WRITE, id + 2, {&s, n_sge}, b.addr(), b.rkey()),
          rdma_wr(IBV_WR_RDMA_WRITE_WITH_IMM, id + 3, {&s, n_sge}, b.addr(), b.rkey()),
          rdma_wr(IBV_WR_RDMA_READ, id + 4, {&s, n_sge}, b.addr(), b.rkey()),
          send_wr(IBV_WR_SEND, id + 5, {&s, n_sge}, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED),
      };
      w[1].imm_data = htonl(0x01020304);
      w[3].imm_data = htonl(0x05060708);
      // 3 receives for SEND, SEND_IMM, WRITE_IMM; the last SEND takes another.
      ASSERT_EQ(post_recv(rc.qb, id + 3, {&r, 1}), 0);
      for (auto& x : w) ASSERT_EQ(post_send(rc.qa, x), 0);
      EXPECT_EQ(h.wait_wcs(rc.scq_a, 6).size(), 6u);
      EXPECT_EQ(h.wait_wcs(rc.rcq_b, 4).size(), 4u);
      // UC: SEND, SEND_IMM, WRITE, WRITE_IMM.
      ASSERT_EQ(post_recv(uc.qb, id, {&r, 1}), 0);
      ASSERT_EQ(post_recv(uc.qb, id + 1, {&r, 1}), 0);
      ASSERT_EQ(post_recv(uc.qb, id + 2, {&r, 1}), 0);
      for (int i = 0; i < 4; ++i) ASSERT_EQ(post_send(uc.qa, w[i]), 0);
      EXPECT_EQ(h.wait_wcs(uc.scq_a, 4).size(), 4u);
      EXPECT_EQ(h.wait_wcs(uc.rcq_b, 3).size(), 3u);
      id += 10;
    }
    // Atomics.
    ibv_sge s8 = a.sge(0, 8);
    ibv_send_wr cs = atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 90, &s8, b.addr(64), b.rkey(), 0, 1);
    ibv_send_wr fa = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 91, &s8, b.addr(64), b.rkey(), 5, 0);
    ASSERT_EQ(post_send(rc.qa, cs), 0);
    ASSERT_EQ(post_send(rc.qa, fa), 0);
    EXPECT_EQ(h.wait_wcs(rc.scq_a, 2).size(), 2u);
    // Traffic from B's side as well (A's responder, ACKs from A).
    ibv_sge sb = b.sge(0, 5000);
    ibv_send_wr wb = rdma_wr(IBV_WR_RDMA_WRITE, 92, {&sb, 1}, a.addr(), a.rkey());
    ASSERT_EQ(post_send(rc.qb, wb), 0);
    EXPECT_EQ(h.wait_wcs(rc.scq_b, 1).size(), 1u);
    wb = rdma_wr(IBV_WR_RDMA_READ, 93, {&sb, 1}, a.addr(), a.rkey());
    ASSERT_EQ(post_send(rc.qb, wb), 0);
    EXPECT_EQ(h.wait_wcs(rc.scq_b, 1).size(), 1u);

    // UD, both ways.
    Cq* ucq_a = h.cq(h.a());
    Cq* ucq_b = h.cq(h.b());
    Qp* ua = h.qp(h.a(), IBV_QPT_UD, ucq_a, ucq_a);
    Qp* ub = h.qp(h.b(), IBV_QPT_UD, ucq_b, ucq_b);
    ASSERT_EQ(h.ud_ready(ua), 0);
    ASSERT_EQ(h.ud_ready(ub), 0);
    Ah* ah = h.ah(h.a(), h.b(), ipv6);
    ibv_sge r = b.sge(0, 2048);
    ASSERT_EQ(post_recv(ub, 1, {&r, 1}), 0);
    ibv_sge s = a.sge(0, 1000);
    ibv_send_wr uw = send_wr(IBV_WR_SEND_WITH_IMM, 1, {&s, 1});
    uw.imm_data = htonl(42);
    uw.wr.ud.ah = &ah->ibv;
    uw.wr.ud.remote_qpn = ub->qpn().value();
    uw.wr.ud.remote_qkey = kUdQkey;
    ASSERT_EQ(post_send(ua, uw), 0);
    ASSERT_EQ(post_recv(ub, 2, {&r, 1}), 0);
    uw.opcode = IBV_WR_SEND;
    uw.wr_id = 2;
    ASSERT_EQ(post_send(ua, uw), 0);
    EXPECT_EQ(h.wait_wcs(ucq_a, 2).size(), 2u);
    EXPECT_EQ(h.wait_wcs(ucq_b, 2).size(), 2u);
    if (::testing::Test::HasFailure()) {
      std::printf("%s", h.counters().c_str());
      return;
    }
  }
}

// tshark guesses an application protocol inside RDMA payloads (RPC over
// RDMA, SMB Direct, iSER ...); ours are test bytes (and empty SENDs, which
// the RPC-over-RDMA guess throws on), so those guesses are turned off: the
// check is about the RoCE headers.
const char* const kPayloadGuesses =
    " --disable-protocol rpcordma --disable-protocol smb_direct --disable-protocol nvme-rdma"
    " --disable-protocol iser --disable-protocol lnet --disable-protocol smc --disable-protocol infiniband_sdp"
    " --disable-protocol infiniband.eoib --disable-protocol fcoib --disable-protocol drbd";

// The whole program skips (77) where tshark is not installed.
void skip_without_tshark() {
  int st = 0;
  run("command -v tshark >/dev/null 2>&1", &st);
  if (st != 0) {
    std::printf("SKIP: tshark is not installed\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
}

TEST(Pcap, CaptureIsCleanForUroceAndTshark) {
  skip_without_tshark();
  int st = 0;
  const std::string& uroce = uroce_tool_path();
  ASSERT_FALSE(uroce.empty()) << "pass --uroce=PATH (meson does)";
  const fs::path dir = fs::temp_directory_path() / ("uroce-e2e-pcap-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string pcap = (dir / "e2e.pcap").string();
  traffic(pcap);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(fs::exists(pcap));

  // uroce pcap-check: ICRC and re-serialisation of every RoCE packet.
  const std::string check = run(uroce + " pcap-check '" + pcap + "' 2>&1", &st);
  EXPECT_EQ(st, 0) << check;
  std::printf("%s", check.c_str());

  // tshark: nothing malformed.
  const std::string bad = run("tshark -r '" + pcap + "'" + kPayloadGuesses + " -Y _ws.malformed 2>/dev/null", &st);
  EXPECT_EQ(st, 0);
  EXPECT_TRUE(bad.empty()) << "tshark reports malformed frames:\n" << bad;

  // Every RoCEv2 frame: decoded as InfiniBand, UDP checksum 0, source port
  // in 0xC000-0xFFFF, IPv4 DF and TTL 64.
  const std::string fields =
      run("tshark -r '" + pcap + "'" + kPayloadGuesses +
              " -Y 'udp.dstport == 4791' -T fields -e frame.number -e udp.srcport -e udp.checksum"
              " -e infiniband.bth.opcode -e ip.flags.df -e ip.ttl -e ipv6.hlim 2>/dev/null",
          &st);
  ASSERT_EQ(st, 0);
  const auto table = rows(fields);
  std::set<int> opcodes;
  std::map<std::string, int> by_port;
  for (const auto& r : table) {
    ASSERT_GE(r.size(), 4u) << "frame without an InfiniBand decode";
    const std::string& frame = r[0];
    const long sport = std::strtol(r[1].c_str(), nullptr, 10);
    EXPECT_GE(sport, 0xC000) << "frame " << frame;
    EXPECT_LE(sport, 0xFFFF) << "frame " << frame;
    EXPECT_EQ(r[2], "0x0000") << "frame " << frame << ": UDP checksum";
    ASSERT_FALSE(r[3].empty()) << "frame " << frame << ": tshark did not decode the BTH";
    opcodes.insert(std::stoi(r[3]));
    ++by_port[r[1]];
    if (r.size() > 5 && !r[5].empty()) {
      EXPECT_EQ(r[4], "1") << "frame " << frame << ": IPv4 DF";
      EXPECT_EQ(r[5], "64") << "frame " << frame << ": IPv4 TTL";
    }
  }
  // RC: SEND first/middle/last/only(+imm), WRITE ..., READ request and
  // responses, ACK, atomics and their ACK; UC and UD sends.
  const std::set<int> want = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                              0x20, 0x24, 0x26, 0x2a, 0x2b, 0x64, 0x65};
  for (int op : want) EXPECT_TRUE(opcodes.count(op)) << "no frame with opcode " << op;
  std::printf("%zu RoCEv2 frames, %zu opcodes, %zu UDP source ports\n", table.size(), opcodes.size(),
              by_port.size());
  // Every request and data response of traffic() is there.  Per address
  // family, at a 1024-byte MTU: RC, for each length 0/1/1024/3000 (1, 1, 1,
  // 3 packets), five messages with data and a READ request (34 packets);
  // UC four messages per length (24); two atomics; B's 5000-byte WRITE (5)
  // and READ request (1); two UD SENDs: 68 requests.  READ responses
  // 1+1+1+3 and 5, and two atomic ACKs: 13.  81 per family.  Plain ACKs
  // are fewer than the requests that asked for them: a QP's ACK that has
  // not left yet takes the next one's place (responder coalesce_ack).
  size_t acks = 0;
  for (const auto& r : table) acks += std::stoi(r[3]) == 0x11 ? 1 : 0;
  EXPECT_GE(table.size() - acks, 2u * 81u) << "requests and data responses";
  EXPECT_GE(acks, 2u);
  std::error_code ec;
  if (!HasFailure()) fs::remove_all(dir, ec);
}

// CNPs on the wire (DESIGN.md "Congestion control"): WRITEs both ways over
// links that mark ECN-capable frames CE at random; A's capture holds the
// CNPs it sent and received.  uroce pcap-check passes them against IBA
// A17.9.3, and tshark, decoding them on its own, finds opcode 0x81 toward
// the sending QP with PSN 0, DSCP 48 and Not-ECT, and data frames ECT(0)
// or CE.
TEST(Pcap, CnpsAndEcnCheckOut) {
  skip_without_tshark();
  int st = 0;
  const std::string& uroce = uroce_tool_path();
  ASSERT_FALSE(uroce.empty()) << "pass --uroce=PATH (meson does)";
  const fs::path dir = fs::temp_directory_path() / ("uroce-e2e-pcap-cnp-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string pcap = (dir / "cnp.pcap").string();
  uint32_t qpn_a = 0, qpn_b = 0;
  {
    HarnessOptions ho;
    ho.pcap_a = pcap;
    drivers::FaultSpec marks;
    marks.ce = 0.3;
    marks.seed = 5;
    ho.faults = marks;
    Harness h(ho);
    Pair rc = h.pair(IBV_QPT_RC);
    ASSERT_NE(rc.qa, nullptr);
    qpn_a = rc.qa->qpn().value();
    qpn_b = rc.qb->qpn().value();
    Buffer a = h.buffer(h.a(), 1 << 16, kRemoteAll);
    Buffer b = h.buffer(h.b(), 1 << 16, kRemoteAll);
    for (int i = 0; i < 8; ++i) {
      ibv_sge sa = a.sge(0, 1 << 14), sb = b.sge(0, 1 << 14);
      ibv_send_wr wa = rdma_wr(IBV_WR_RDMA_WRITE, i, {&sa, 1}, b.addr(), b.rkey());
      ibv_send_wr wb = rdma_wr(IBV_WR_RDMA_WRITE, i, {&sb, 1}, a.addr(), a.rkey());
      ASSERT_EQ(post_send(rc.qa, wa), 0);
      ASSERT_EQ(post_send(rc.qb, wb), 0);
      EXPECT_EQ(h.wait_wc(rc.scq_a).status, IBV_WC_SUCCESS);
      EXPECT_EQ(h.wait_wc(rc.scq_b).status, IBV_WC_SUCCESS);
    }
    EXPECT_GT(h.a().rnic->counters().get(RnicCtr::np_cnp_sent), 0u);
    EXPECT_GT(h.b().rnic->counters().get(RnicCtr::np_cnp_sent), 0u);
  }
  const std::string check = run(uroce + " pcap-check '" + pcap + "' 2>&1", &st);
  EXPECT_EQ(st, 0) << check;
  EXPECT_NE(check.find(", 0 breaking A17.9.3"), std::string::npos) << check;
  std::printf("%s", check.c_str());

  const std::string fields = run("tshark -r '" + pcap + "'" + kPayloadGuesses +
                                     " -Y 'udp.dstport == 4791' -T fields -e infiniband.bth.opcode"
                                     " -e infiniband.bth.destqp -e infiniband.bth.psn -e ip.dsfield.dscp"
                                     " -e ip.dsfield.ecn -e ip.src 2>/dev/null",
                                 &st);
  ASSERT_EQ(st, 0);
  int cnps_to_a = 0, cnps_to_b = 0, data_ect = 0, data_ce = 0;
  for (const auto& r : rows(fields)) {
    ASSERT_GE(r.size(), 6u);
    const int opcode = std::stoi(r[0]);
    const int ecn = std::stoi(r[4]);
    if (opcode == 0x81) {
      const uint32_t dqp = static_cast<uint32_t>(std::stoul(r[1], nullptr, 0));
      EXPECT_EQ(r[2], "0") << "CNP PSN";
      EXPECT_EQ(r[3], "48") << "CNP DSCP";
      EXPECT_EQ(ecn, 0) << "a CNP is not ECN-capable";
      // From A (10.0.0.1 is kIpA) to B's QP, or from B to A's.
      if (dqp == qpn_a) ++cnps_to_a;
      if (dqp == qpn_b) ++cnps_to_b;
      EXPECT_TRUE(dqp == qpn_a || dqp == qpn_b) << "CNP toward QP " << dqp;
    } else if (opcode == 0x0A || opcode == 0x06 || opcode == 0x07 || opcode == 0x08) {  // WRITE only/first/middle/last
      data_ect += ecn == 2;
      data_ce += ecn == 3;
      EXPECT_TRUE(ecn == 2 || ecn == 3) << "data frame ECN " << ecn;
    } else if (opcode == 0x11) {
      EXPECT_EQ(ecn, 0) << "ACKs are not ECN-capable";
    }
  }
  EXPECT_GT(cnps_to_a, 0);
  EXPECT_GT(cnps_to_b, 0);
  EXPECT_GT(data_ect, 0);
  EXPECT_GT(data_ce, 0);
  std::printf("CNPs to A's QP %d, to B's %d; WRITE frames ECT(0) %d, CE %d\n", cnps_to_a, cnps_to_b, data_ect, data_ce);
  std::error_code ec;
  if (!HasFailure()) fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace uroce::rnic::testing
