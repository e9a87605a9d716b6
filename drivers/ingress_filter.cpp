#include "drivers/ingress_filter.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "lib/wire/eth.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/udp.hpp"

namespace uroce::drivers {

namespace {

// enum bpf_attach_type's BPF_TCX_INGRESS (Linux 6.6): Debian 12's
// linux-libc-dev (6.1) predates it.
constexpr uint32_t kBpfTcxIngress = 46;

// Where the program looks: offsets from the start of the Ethernet
// header, which tc ingress has pushed back.
constexpr int16_t kEthType = 12;
constexpr int16_t kIp4VerIhl = 14;     // version 4, 5 words: 0x45
constexpr int16_t kIp4FragOff = 20;    // flags and fragment offset
constexpr int16_t kIp4Proto = 23;
constexpr int16_t kIp4Dst = 30;
constexpr int16_t kIp4DstPort = 36;    // UDP destination port after a 20-byte header
constexpr int32_t kIp4Head = 38;       // the bytes an IPv4 frame's checks read
constexpr int16_t kIp6NextHeader = 20;
constexpr int16_t kIp6Dst = 38;
constexpr int16_t kIp6DstPort = 56;
constexpr int32_t kIp6Head = 58;
constexpr uint8_t kIp4NoOptions = 0x45;

// The frame's head is copied to the stack with one bpf_skb_load_bytes
// (frames from an af_packet TX ring are paged: every direct load would be
// a copy of its own).  Frame byte k lies at r10 + kHead + k: the stack
// reads are aligned there (the verifier requires it of the stack), the
// IPv4 destination at r10 - 36, the IPv6 one at r10 - 28.
constexpr int16_t kHead = -66;
static_assert((kHead + kIp4Dst) % 4 == 0 && (kHead + kIp6Dst) % 4 == 0 && (kHead + kEthType) % 2 == 0 &&
              (kHead + kIp4FragOff) % 2 == 0 && (kHead + kIp4DstPort) % 2 == 0 && (kHead + kIp6DstPort) % 2 == 0);
static_assert(kHead + kIp6Head <= 0);

// What a BPF load, which is in host byte order, puts in a register from
// these wire (big-endian) bytes.
constexpr int32_t loaded16(uint16_t wire) {
  return std::endian::native == std::endian::big ? wire : static_cast<uint16_t>((wire >> 8) | (wire << 8));
}
int32_t loaded32(const uint8_t* wire) {
  uint32_t v;
  std::memcpy(&v, wire, sizeof v);
  return static_cast<int32_t>(v);
}

// Registers: r0 a value, r1-r5 a helper's arguments (and clobbered by
// it), r6 the context, r7 the frame's length, r7-r9 then the first three
// words of an IPv6 destination, r10 the frame pointer.
constexpr uint8_t kR0 = 0, kR1 = 1, kR2 = 2, kR3 = 3, kR4 = 4, kR6 = 6, kR7 = 7, kR8 = 8, kR9 = 9, kR10 = 10;

enum class Label : uint8_t { kIpv6, kPass, kDrop, kCount };

// A tiny assembler: instructions, and jumps to labels patched at the end.
class Asm {
 public:
  void mov_reg(uint8_t dst, uint8_t src) { put(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0); }
  void mov_imm(uint8_t dst, int32_t imm) { put(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm); }
  void and_imm(uint8_t dst, int32_t imm) { put(BPF_ALU64 | BPF_AND | BPF_K, dst, 0, 0, imm); }
  void add_imm(uint8_t dst, int32_t imm) { put(BPF_ALU64 | BPF_ADD | BPF_K, dst, 0, 0, imm); }
  // dst = the copied frame's bytes at `off` (BPF_B, BPF_H, BPF_W), as a
  // little-endian load leaves them.
  void ld_frame(uint8_t size, uint8_t dst, int16_t off) {
    put(BPF_LDX | size | BPF_MEM, dst, kR10, static_cast<int16_t>(kHead + off), 0);
  }
  void call(int32_t helper) { put(BPF_JMP | BPF_CALL, 0, 0, 0, helper); }
  // dst = *(u32 *)(src + off): a field of struct __sk_buff.
  void ld_ctx(uint8_t dst, uint8_t src, size_t off) {
    put(BPF_LDX | BPF_W | BPF_MEM, dst, src, static_cast<int16_t>(off), 0);
  }
  // if (w`reg` `op` imm) goto `to` (32-bit compare).
  void jump_if(uint8_t op, uint8_t reg, int32_t imm, Label to) {
    fixups_.push_back({code_.size(), to});
    put(BPF_JMP32 | op | BPF_K, reg, 0, 0, imm);
  }
  // if (w`reg` `op` imm) skip the next `n` instructions.
  void skip_if(uint8_t op, uint8_t reg, int32_t imm, int16_t n) { put(BPF_JMP32 | op | BPF_K, reg, 0, n, imm); }
  void jump(Label to) {
    fixups_.push_back({code_.size(), to});
    put(BPF_JMP | BPF_JA, 0, 0, 0, 0);
  }
  void exit() { put(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }
  void bind(Label l) { at_[static_cast<size_t>(l)] = code_.size(); }

  std::vector<bpf_insn> finish() {
    for (const Fixup& f : fixups_) {
      const size_t target = at_[static_cast<size_t>(f.to)];
      code_[f.at].off = static_cast<int16_t>(static_cast<ptrdiff_t>(target) - static_cast<ptrdiff_t>(f.at) - 1);
    }
    return std::move(code_);
  }

 private:
  struct Fixup {
    size_t at;
    Label to;
  };
  void put(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
    bpf_insn i{};
    i.code = code;
    i.dst_reg = dst & 0xf;
    i.src_reg = src & 0xf;
    i.off = off;
    i.imm = imm;
    code_.push_back(i);
  }
  std::vector<bpf_insn> code_;
  std::vector<Fixup> fixups_;
  std::array<size_t, static_cast<size_t>(Label::kCount)> at_{};
};

long bpf(int cmd, bpf_attr* attr) { return ::syscall(__NR_bpf, cmd, attr, sizeof *attr); }

std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// Copies the frame's first `len` bytes to the stack; a failure passes it.
void load_head(Asm& a, int32_t len) {
  a.mov_reg(kR1, kR6);
  a.mov_imm(kR2, 0);
  a.mov_reg(kR3, kR10);
  a.add_imm(kR3, kHead);
  a.mov_imm(kR4, len);
  a.call(BPF_FUNC_skb_load_bytes);
  a.jump_if(BPF_JNE, kR0, 0, Label::kPass);
}

}  // namespace

std::vector<bpf_insn> roce_ingress_program(std::span<const wire::Ipv6Addr> addrs) {
  Asm a;
  a.mov_reg(kR6, kR1);
  // Only untagged frames: a tagged one belongs to a VLAN this program
  // does not know of (the stack has taken the tag into skb metadata).
  a.ld_ctx(kR0, kR6, offsetof(__sk_buff, vlan_present));
  a.jump_if(BPF_JNE, kR0, 0, Label::kPass);
  a.ld_ctx(kR7, kR6, offsetof(__sk_buff, len));
  a.jump_if(BPF_JLT, kR7, kIp4Head, Label::kPass);
  load_head(a, kIp4Head);
  a.ld_frame(BPF_H, kR0, kEthType);
  a.jump_if(BPF_JEQ, kR0, loaded16(wire::kEtherTypeIpv6), Label::kIpv6);
  a.jump_if(BPF_JNE, kR0, loaded16(wire::kEtherTypeIpv4), Label::kPass);

  // IPv4: no options (RoCEv2 sends none), UDP, not a fragment (RoCEv2
  // sets DF; a fragment's UDP header, if any, is not where we look).
  a.ld_frame(BPF_B, kR0, kIp4VerIhl);
  a.jump_if(BPF_JNE, kR0, kIp4NoOptions, Label::kPass);
  a.ld_frame(BPF_B, kR0, kIp4Proto);
  a.jump_if(BPF_JNE, kR0, wire::kIpProtoUdp, Label::kPass);
  a.ld_frame(BPF_H, kR0, kIp4FragOff);
  a.and_imm(kR0, loaded16(0x3fff));  // more fragments, and the offset
  a.jump_if(BPF_JNE, kR0, 0, Label::kPass);
  a.ld_frame(BPF_H, kR0, kIp4DstPort);
  a.jump_if(BPF_JNE, kR0, loaded16(wire::kRoceV2Port), Label::kPass);
  a.ld_frame(BPF_W, kR0, kIp4Dst);
  for (const wire::Ipv6Addr& ip : addrs) {
    if (wire::is_ipv4_mapped(ip)) a.jump_if(BPF_JEQ, kR0, loaded32(&ip[12]), Label::kDrop);
  }
  a.jump(Label::kPass);

  // IPv6: UDP right after the fixed header (RoCEv2 uses no extension
  // headers).
  a.bind(Label::kIpv6);
  a.jump_if(BPF_JLT, kR7, kIp6Head, Label::kPass);
  load_head(a, kIp6Head);
  a.ld_frame(BPF_B, kR0, kIp6NextHeader);
  a.jump_if(BPF_JNE, kR0, wire::kIpProtoUdp, Label::kPass);
  a.ld_frame(BPF_H, kR0, kIp6DstPort);
  a.jump_if(BPF_JNE, kR0, loaded16(wire::kRoceV2Port), Label::kPass);
  a.ld_frame(BPF_W, kR7, kIp6Dst);
  a.ld_frame(BPF_W, kR8, kIp6Dst + 4);
  a.ld_frame(BPF_W, kR9, kIp6Dst + 8);
  a.ld_frame(BPF_W, kR0, kIp6Dst + 12);
  for (const wire::Ipv6Addr& ip : addrs) {
    if (wire::is_ipv4_mapped(ip)) continue;
    a.skip_if(BPF_JNE, kR7, loaded32(&ip[0]), 3);
    a.skip_if(BPF_JNE, kR8, loaded32(&ip[4]), 2);
    a.skip_if(BPF_JNE, kR9, loaded32(&ip[8]), 1);
    a.jump_if(BPF_JEQ, kR0, loaded32(&ip[12]), Label::kDrop);
  }

  a.bind(Label::kPass);
  a.mov_imm(kR0, kTcxNext);
  a.exit();
  a.bind(Label::kDrop);
  a.mov_imm(kR0, kTcxDrop);
  a.exit();
  return a.finish();
}

Result<int> load_sched_cls(std::span<const bpf_insn> insns) {
  static constexpr char kLicense[] = "Dual MIT/GPL";
  static constexpr char kName[] = "uroce_ingress";
  static_assert(sizeof kName <= BPF_OBJ_NAME_LEN);
  auto attempt = [&](char* log, uint32_t log_size) {
    bpf_attr attr{};
    attr.prog_type = BPF_PROG_TYPE_SCHED_CLS;
    attr.insns = reinterpret_cast<uint64_t>(insns.data());
    attr.insn_cnt = static_cast<uint32_t>(insns.size());
    attr.license = reinterpret_cast<uint64_t>(kLicense);
    std::memcpy(attr.prog_name, kName, sizeof kName);
    if (log != nullptr) {
      attr.log_buf = reinterpret_cast<uint64_t>(log);
      attr.log_size = log_size;
      attr.log_level = 1;
    }
    return static_cast<int>(bpf(BPF_PROG_LOAD, &attr));
  };
  int fd = attempt(nullptr, 0);
  if (fd >= 0) return fd;
  const int err = errno;
  if (err != EACCES && err != EINVAL) return Error{err, errno_text("bpf(BPF_PROG_LOAD)", err)};
  // The verifier refused it: load again with its log, to say why.
  std::string log(1 << 16, '\0');
  fd = attempt(log.data(), static_cast<uint32_t>(log.size()));
  if (fd >= 0) return fd;  // (the first refusal was transient)
  log.resize(std::strlen(log.c_str()));
  return Error{err, errno_text("bpf(BPF_PROG_LOAD)", err) + (log.empty() ? "" : ": " + log)};
}

Result<int> test_run_sched_cls(int prog_fd, std::span<const uint8_t> frame) {
  bpf_attr attr{};
  attr.test.prog_fd = static_cast<uint32_t>(prog_fd);
  attr.test.data_in = reinterpret_cast<uint64_t>(frame.data());
  attr.test.data_size_in = static_cast<uint32_t>(frame.size());
  attr.test.repeat = 1;
  if (bpf(BPF_PROG_TEST_RUN, &attr) != 0) return Error{errno, errno_text("bpf(BPF_PROG_TEST_RUN)", errno)};
  return static_cast<int>(attr.test.retval);
}

RoceIngressFilter::~RoceIngressFilter() { detach(); }

RoceIngressFilter::RoceIngressFilter(RoceIngressFilter&& o) noexcept : link_fd_(o.link_fd_) { o.link_fd_ = -1; }

RoceIngressFilter& RoceIngressFilter::operator=(RoceIngressFilter&& o) noexcept {
  if (this != &o) {
    detach();
    link_fd_ = o.link_fd_;
    o.link_fd_ = -1;
  }
  return *this;
}

void RoceIngressFilter::detach() noexcept {
  if (link_fd_ >= 0) ::close(link_fd_);
  link_fd_ = -1;
}

Status RoceIngressFilter::attach(int ifindex, std::span<const wire::Ipv6Addr> addrs) {
  detach();
  if (addrs.empty()) return Error{EINVAL, "no addresses to filter"};
  const std::vector<bpf_insn> prog = roce_ingress_program(addrs);
  auto fd = load_sched_cls(prog);
  if (!fd) return fd.error();
  bpf_attr attr{};
  attr.link_create.prog_fd = static_cast<uint32_t>(*fd);
  attr.link_create.target_ifindex = static_cast<uint32_t>(ifindex);
  attr.link_create.attach_type = kBpfTcxIngress;
  const long link = bpf(BPF_LINK_CREATE, &attr);
  const int err = errno;
  ::close(*fd);  // the link holds the program
  if (link < 0) {
    return Error{err, errno_text("bpf(BPF_LINK_CREATE, tcx ingress)", err) +
                          (err == EINVAL ? " (tcx needs Linux 6.6 or later)" : "")};
  }
  link_fd_ = static_cast<int>(link);
  return {};
}

}  // namespace uroce::drivers
