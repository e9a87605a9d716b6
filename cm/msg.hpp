// IB CM messages (IBA 12.6) as field tables (STYLE 5).
//
// Each message is one X-macro table of (name, byte offset, bit offset,
// width in bits) in the spec's Byte[Bit] notation: the offset counts from
// the first byte after the 24-byte common MAD header, the bit offset from
// the most significant bit of that byte.  Fields wider than 64 bits (GIDs,
// ARI, private data) are byte ranges (name, byte offset, length).  From one
// table the macros below generate:
//   - a view over the 232-byte body with a getter and a setter per field
//     (big-endian, read-modify-write, reserved bits kept);
//   - a plain struct holding every field, with decode() and encode(); encode
//     zeroes the body first, so reserved bits go out as zero;
//   - a constexpr list of the fields (name, offset, width) that tests and
//     dumps walk.
// The tables were checked against the IBTA release 1.4 chapter 12 tables as
// transcribed in Linux include/rdma/ibta_vol1_c12.h and against Wireshark's
// dissection of real captures; table numbers are the 1.4 ones.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

#include "lib/wire/bytes.hpp"
#include "lib/wire/mad.hpp"

namespace uroce::cm {

using wire::kMadSize;
inline constexpr size_t kMadHdrSize = wire::MadHdr::kSize;
inline constexpr size_t kCmBodySize = kMadSize - kMadHdrSize;  // 232
static_assert(kCmBodySize == 232);

// One scalar field: Byte[Bit] and width (1..64 bits).
struct Field {
  uint16_t byte;
  uint8_t bit;    // 0 = most significant bit of `byte`
  uint8_t width;  // bits

  constexpr size_t nbytes() const noexcept { return (size_t{bit} + width + 7) / 8; }
  constexpr size_t end() const noexcept { return byte + nbytes(); }
};

// A byte range: GIDs, ARI, private data.
struct Blob {
  uint16_t byte;
  uint16_t len;
  constexpr size_t end() const noexcept { return size_t{byte} + len; }
};

// The narrowest unsigned type that holds `Bits`.
template <unsigned Bits>
using UintFor = std::conditional_t<
    (Bits <= 8), uint8_t,
    std::conditional_t<(Bits <= 16), uint16_t, std::conditional_t<(Bits <= 32), uint32_t, uint64_t>>>;

constexpr uint64_t field_mask(unsigned width) noexcept {
  return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
}

// The one generic getter/setter every accessor goes through.
inline uint64_t get_field(const uint8_t* body, Field f) noexcept {
  const size_t n = f.nbytes();
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | body[f.byte + i];
  const unsigned shift = static_cast<unsigned>(n * 8 - f.bit - f.width);
  return (v >> shift) & field_mask(f.width);
}

inline void set_field(uint8_t* body, Field f, uint64_t value) noexcept {
  const size_t n = f.nbytes();
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | body[f.byte + i];
  const unsigned shift = static_cast<unsigned>(n * 8 - f.bit - f.width);
  const uint64_t mask = field_mask(f.width) << shift;
  v = (v & ~mask) | ((value << shift) & mask);
  for (size_t i = n; i-- > 0;) {
    body[f.byte + i] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}

// An entry of a message's field list (for tests, dumps, tshark checks).
struct FieldInfo {
  std::string_view name;
  uint16_t byte;
  uint8_t bit;
  uint16_t width;  // bits; byte ranges have width len*8 and bit 0
  bool blob;
};

// ---- the tables ---------------------------------------------------------
// F(name, byte, bit, width)   B(name, byte, len)

// IBA 12.6.5, table 106: REQ (ConnectRequest), attribute 0x0010.
#define UROCE_CM_REQ(F, B)                          \
  F(local_comm_id, 0, 0, 32)                        \
  F(service_id, 8, 0, 64)                           \
  F(local_ca_guid, 16, 0, 64)                       \
  F(local_qkey, 28, 0, 32)                          \
  F(local_qpn, 32, 0, 24)                           \
  F(responder_resources, 35, 0, 8)                  \
  F(local_eecn, 36, 0, 24)                          \
  F(initiator_depth, 39, 0, 8)                      \
  F(remote_eecn, 40, 0, 24)                         \
  F(remote_cm_response_timeout, 43, 0, 5)           \
  F(transport_service_type, 43, 5, 2)               \
  F(end_to_end_flow_control, 43, 7, 1)              \
  F(starting_psn, 44, 0, 24)                        \
  F(local_cm_response_timeout, 47, 0, 5)            \
  F(retry_count, 47, 5, 3)                          \
  F(partition_key, 48, 0, 16)                       \
  F(path_mtu, 50, 0, 4)                             \
  F(rdc_exists, 50, 4, 1)                           \
  F(rnr_retry_count, 50, 5, 3)                      \
  F(max_cm_retries, 51, 0, 4)                       \
  F(srq, 51, 4, 1)                                  \
  F(extended_transport_type, 51, 5, 3)              \
  F(primary_local_lid, 52, 0, 16)                   \
  F(primary_remote_lid, 54, 0, 16)                  \
  B(primary_local_gid, 56, 16)                      \
  B(primary_remote_gid, 72, 16)                     \
  F(primary_flow_label, 88, 0, 20)                  \
  F(primary_packet_rate, 91, 2, 6)                  \
  F(primary_traffic_class, 92, 0, 8)                \
  F(primary_hop_limit, 93, 0, 8)                    \
  F(primary_sl, 94, 0, 4)                           \
  F(primary_subnet_local, 94, 4, 1)                 \
  F(primary_local_ack_timeout, 95, 0, 5)            \
  F(alternate_local_lid, 96, 0, 16)                 \
  F(alternate_remote_lid, 98, 0, 16)                \
  B(alternate_local_gid, 100, 16)                   \
  B(alternate_remote_gid, 116, 16)                  \
  F(alternate_flow_label, 132, 0, 20)               \
  F(alternate_packet_rate, 135, 2, 6)               \
  F(alternate_traffic_class, 136, 0, 8)             \
  F(alternate_hop_limit, 137, 0, 8)                 \
  F(alternate_sl, 138, 0, 4)                        \
  F(alternate_subnet_local, 138, 4, 1)              \
  F(alternate_local_ack_timeout, 139, 0, 5)         \
  F(sap_supported, 139, 5, 1)                       \
  B(private_data, 140, 92)

// IBA 12.6.6, table 107: MRA (MsgRcptAck), attribute 0x0011.
#define UROCE_CM_MRA(F, B)                          \
  F(local_comm_id, 0, 0, 32)                        \
  F(remote_comm_id, 4, 0, 32)                       \
  F(message_mraed, 8, 0, 2)                         \
  F(service_timeout, 9, 0, 5)                       \
  B(private_data, 10, 222)

// IBA 12.6.7, table 108: REJ (ConnectReject), attribute 0x0012.
#define UROCE_CM_REJ(F, B)                          \
  F(local_comm_id, 0, 0, 32)                        \
  F(remote_comm_id, 4, 0, 32)                       \
  F(message_rejected, 8, 0, 2)                      \
  F(reject_info_length, 9, 0, 7)                    \
  F(reason, 10, 0, 16)                              \
  B(ari, 12, 72)                                    \
  B(private_data, 84, 148)

// IBA 12.6.8, table 110: REP (ConnectReply), attribute 0x0013.
#define UROCE_CM_REP(F, B)                          \
  F(local_comm_id, 0, 0, 32)                        \
  F(remote_comm_id, 4, 0, 32)                       \
  F(local_qkey, 8, 0, 32)                           \
  F(local_qpn, 12, 0, 24)                           \
  F(local_eecn, 16, 0, 24)                          \
  F(starting_psn, 20, 0, 24)                        \
  F(responder_resources, 24, 0, 8)                  \
  F(initiator_depth, 25, 0, 8)                      \
  F(target_ack_delay, 26, 0, 5)                     \
  F(failover_accepted, 26, 5, 2)                    \
  F(end_to_end_flow_control, 26, 7, 1)              \
  F(rnr_retry_count, 27, 0, 3)                      \
  F(srq, 27, 3, 1)                                  \
  F(local_ca_guid, 28, 0, 64)                       \
  B(private_data, 36, 196)

// IBA 12.6.9, table 111: RTU (ReadyToUse), attribute 0x0014.
#define UROCE_CM_RTU(F, B)                          \
  F(local_comm_id, 0, 0, 32)                        \
  F(remote_comm_id, 4, 0, 32)                       \
  B(private_data, 8, 224)

// IBA 12.6.10, table 112: DREQ (DisconnectRequest), attribute 0x0015.
#define UROCE_CM_DREQ(F, B)                         \
  F(local_comm_id, 0, 0, 32)                        \
  F(remote_comm_id, 4, 0, 32)                       \
  F(remote_qpn_eecn, 8, 0, 24)                      \
  B(private_data, 12, 220)

// IBA 12.6.11, table 113: DREP (DisconnectReply), attribute 0x0016.
#define UROCE_CM_DREP(F, B)                         \
  F(local_comm_id, 0, 0, 32)                        \
  F(remote_comm_id, 4, 0, 32)                       \
  B(private_data, 8, 224)

// IBA 12.11.1, table 119: SIDR_REQ (ServiceIDResReq), attribute 0x0017.
#define UROCE_CM_SIDR_REQ(F, B)                     \
  F(request_id, 0, 0, 32)                           \
  F(partition_key, 4, 0, 16)                        \
  F(service_id, 8, 0, 64)                           \
  B(private_data, 16, 216)

// IBA 12.11.2, table 120: SIDR_REP (ServiceIDResReqResp), attribute 0x0018.
#define UROCE_CM_SIDR_REP(F, B)                     \
  F(request_id, 0, 0, 32)                           \
  F(status, 4, 0, 8)                                \
  F(additional_info_length, 5, 0, 8)                \
  F(qpn, 8, 0, 24)                                  \
  F(service_id, 12, 0, 64)                          \
  F(qkey, 20, 0, 32)                                \
  B(additional_info, 24, 72)                        \
  B(private_data, 96, 136)

// ---- generation -----------------------------------------------------------
#define UROCE_CM_GET_SET(name, byte_, bit_, width_)                                              \
  UintFor<width_> name() const noexcept {                                                        \
    return static_cast<UintFor<width_>>(get_field(this->p_, Field{byte_, bit_, width_}));        \
  }                                                                                              \
  void set_##name(UintFor<width_> v) noexcept requires wire::ByteView<Byte>::kWritable {         \
    set_field(this->p_, Field{byte_, bit_, width_}, v);                                          \
  }
#define UROCE_CM_BLOB_GET(name, byte_, len_)                                                     \
  std::span<Byte, len_> name() const noexcept { return std::span<Byte, len_>(this->p_ + byte_, len_); }
#define UROCE_CM_STRUCT_F(name, byte_, bit_, width_) UintFor<width_> name{};
#define UROCE_CM_STRUCT_B(name, byte_, len_) std::array<uint8_t, len_> name{};
#define UROCE_CM_DECODE_F(name, byte_, bit_, width_) m.name = v.name();
#define UROCE_CM_DECODE_B(name, byte_, len_) std::memcpy(m.name.data(), v.name().data(), len_);
#define UROCE_CM_ENCODE_F(name, byte_, bit_, width_) v.set_##name(m.name);
#define UROCE_CM_ENCODE_B(name, byte_, len_) std::memcpy(v.name().data(), m.name.data(), len_);
#define UROCE_CM_INFO_F(name, byte_, bit_, width_) FieldInfo{#name, byte_, bit_, width_, false},
#define UROCE_CM_INFO_B(name, byte_, len_) FieldInfo{#name, byte_, 0, (len_) * 8, true},
#define UROCE_CM_CHECK_F(name, byte_, bit_, width_) \
  static_assert(Field{byte_, bit_, width_}.end() <= kCmBodySize && (bit_) < 8 && (width_) >= 1 && (width_) <= 64);
#define UROCE_CM_CHECK_B(name, byte_, len_) static_assert(Blob{byte_, len_}.end() <= kCmBodySize);

// Name: the message; LIST: its table; ATTR: its attribute ID; TABLE: the
// IBA table number.
#define UROCE_CM_MESSAGE(Name, LIST, ATTR, TABLE)                                     \
  template <class Byte>                                                               \
  class Name##ViewT : public wire::ByteView<Byte> {                                   \
   public:                                                                            \
    static constexpr size_t kSize = kCmBodySize;                                      \
    static constexpr wire::CmAttr kAttr = ATTR;                                       \
    static constexpr unsigned kIbaTable = TABLE;                                      \
    using wire::ByteView<Byte>::ByteView;                                             \
    LIST(UROCE_CM_GET_SET, UROCE_CM_BLOB_GET)                                         \
  };                                                                                  \
  using Name##View = Name##ViewT<uint8_t>;                                            \
  using Name##ViewC = Name##ViewT<const uint8_t>;                                     \
  struct Name##Msg {                                                                  \
    static constexpr wire::CmAttr kAttr = ATTR;                                       \
    static constexpr unsigned kIbaTable = TABLE;                                      \
    LIST(UROCE_CM_STRUCT_F, UROCE_CM_STRUCT_B)                                        \
    friend bool operator==(const Name##Msg&, const Name##Msg&) = default;             \
  };                                                                                  \
  inline Name##Msg decode(Name##ViewC v) noexcept {                                   \
    Name##Msg m;                                                                      \
    LIST(UROCE_CM_DECODE_F, UROCE_CM_DECODE_B)                                        \
    return m;                                                                         \
  }                                                                                   \
  /* Writes the whole body: reserved bits and bytes become zero. */                   \
  inline void encode(const Name##Msg& m, Name##View v) noexcept {                     \
    std::memset(v.data(), 0, kCmBodySize);                                            \
    LIST(UROCE_CM_ENCODE_F, UROCE_CM_ENCODE_B)                                        \
  }                                                                                   \
  inline constexpr FieldInfo k##Name##Fields[] = {LIST(UROCE_CM_INFO_F, UROCE_CM_INFO_B)}; \
  LIST(UROCE_CM_CHECK_F, UROCE_CM_CHECK_B)

UROCE_CM_MESSAGE(Req, UROCE_CM_REQ, wire::CmAttr::Req, 106)
UROCE_CM_MESSAGE(Mra, UROCE_CM_MRA, wire::CmAttr::Mra, 107)
UROCE_CM_MESSAGE(Rej, UROCE_CM_REJ, wire::CmAttr::Rej, 108)
UROCE_CM_MESSAGE(Rep, UROCE_CM_REP, wire::CmAttr::Rep, 110)
UROCE_CM_MESSAGE(Rtu, UROCE_CM_RTU, wire::CmAttr::Rtu, 111)
UROCE_CM_MESSAGE(Dreq, UROCE_CM_DREQ, wire::CmAttr::Dreq, 112)
UROCE_CM_MESSAGE(Drep, UROCE_CM_DREP, wire::CmAttr::Drep, 113)
UROCE_CM_MESSAGE(SidrReq, UROCE_CM_SIDR_REQ, wire::CmAttr::SidrReq, 119)
UROCE_CM_MESSAGE(SidrRep, UROCE_CM_SIDR_REP, wire::CmAttr::SidrRep, 120)

// Every message's private data ends the 232-byte body (the sizes Linux's
// ib_cm.h names IB_CM_*_PRIVATE_DATA_SIZE).
static_assert(sizeof(ReqMsg{}.private_data) == 92 && 140 + 92 == kCmBodySize);
static_assert(sizeof(MraMsg{}.private_data) == 222 && 10 + 222 == kCmBodySize);
static_assert(sizeof(RejMsg{}.private_data) == 148 && 84 + 148 == kCmBodySize);
static_assert(sizeof(RejMsg{}.ari) == 72);
static_assert(sizeof(RepMsg{}.private_data) == 196 && 36 + 196 == kCmBodySize);
static_assert(sizeof(RtuMsg{}.private_data) == 224 && 8 + 224 == kCmBodySize);
static_assert(sizeof(DreqMsg{}.private_data) == 220 && 12 + 220 == kCmBodySize);
static_assert(sizeof(DrepMsg{}.private_data) == 224 && 8 + 224 == kCmBodySize);
static_assert(sizeof(SidrReqMsg{}.private_data) == 216 && 16 + 216 == kCmBodySize);
static_assert(sizeof(SidrRepMsg{}.private_data) == 136 && 96 + 136 == kCmBodySize);

// ---- enumerations with the spec's numbers ----------------------------------

// REQ Transport Service Type (table 106): 0 RC, 1 UC, 2 RD; 3 with the
// Extended Transport Type 1 is XRC (annex A14, as Linux's ib_cm sends and
// reads it).
enum class CmTransport : uint8_t { RC = 0, UC = 1, RD = 2, Xrc = 3 };
inline constexpr uint8_t kExtTransportXrc = 1;

// MRA "Message MRAed" and REJ "Message REJected" (tables 107, 108).
enum class CmMsgRef : uint8_t { Req = 0, Rep = 1, Other = 2 };

// REJ reason codes (IBA 12.6.7.2, table 109).
#define UROCE_CM_REJ_REASONS(X)                                   \
  X(NoQp, 1, "no QP available")                                   \
  X(NoEec, 2, "no EEC available")                                 \
  X(NoResources, 3, "no resources available")                     \
  X(Timeout, 4, "timeout")                                        \
  X(Unsupported, 5, "unsupported request")                        \
  X(InvalidCommId, 6, "invalid communication ID")                 \
  X(InvalidCommInstance, 7, "invalid communication instance")     \
  X(InvalidServiceId, 8, "invalid service ID")                    \
  X(InvalidTransportType, 9, "invalid transport service type")    \
  X(StaleConn, 10, "stale connection")                            \
  X(RdcNotExist, 11, "RDC does not exist")                        \
  X(InvalidGid, 12, "primary remote port GID rejected")           \
  X(InvalidLid, 13, "primary remote port LID rejected")           \
  X(InvalidSl, 14, "invalid primary SL")                          \
  X(InvalidTrafficClass, 15, "invalid primary traffic class")     \
  X(InvalidHopLimit, 16, "invalid primary hop limit")             \
  X(InvalidPacketRate, 17, "invalid primary packet rate")         \
  X(InvalidAltGid, 18, "alternate remote port GID rejected")      \
  X(InvalidAltLid, 19, "alternate remote port LID rejected")      \
  X(InvalidAltSl, 20, "invalid alternate SL")                     \
  X(InvalidAltTrafficClass, 21, "invalid alternate traffic class") \
  X(InvalidAltHopLimit, 22, "invalid alternate hop limit")        \
  X(InvalidAltPacketRate, 23, "invalid alternate packet rate")    \
  X(PortCmRedirect, 24, "port and CM redirection")                \
  X(PortRedirect, 25, "port redirection")                         \
  X(InvalidMtu, 26, "invalid path MTU")                           \
  X(InsufficientRespResources, 27, "insufficient responder resources") \
  X(ConsumerReject, 28, "consumer reject")                        \
  X(InvalidRnrRetry, 29, "invalid RNR NAK retry count")           \
  X(DuplicateLocalCommId, 30, "duplicate local communication ID") \
  X(InvalidClassVersion, 31, "unsupported class version")         \
  X(InvalidFlowLabel, 32, "invalid primary flow label")           \
  X(InvalidAltFlowLabel, 33, "invalid alternate flow label")      \
  X(VendorOptionNotSupported, 35, "vendor option not supported")

enum class RejReason : uint16_t {
#define X(name, num, text) name = num,
  UROCE_CM_REJ_REASONS(X)
#undef X
};

constexpr std::string_view rej_reason_text(uint16_t r) noexcept {
  switch (static_cast<RejReason>(r)) {
#define X(name, num, text) \
  case RejReason::name: return text;
    UROCE_CM_REJ_REASONS(X)
#undef X
  }
  return "unknown reason";
}

// SIDR_REP status (IBA 12.11.2, table 121).
enum class SidrStatus : uint8_t {
  Success = 0,
  Unsupported = 1,      // service ID not supported
  Reject = 2,           // rejected by the service provider
  NoQp = 3,
  Redirect = 4,
  UnsupportedVersion = 5,
};

// ---- a whole CM MAD -------------------------------------------------------

// The common MAD header a CM message carries (IBA 13.4.2; class 0x07
// version 2, method Send, status 0).
inline void write_cm_mad_hdr(uint8_t* mad, wire::CmAttr attr, uint64_t tid) noexcept {
  wire::MadHdr h(mad);
  h.set_base_version(wire::kMadBaseVersion);
  h.set_mgmt_class(wire::kMgmtClassCm);
  h.set_class_version(wire::kCmClassVersion);
  h.set_method(wire::kMadMethodSend);
  h.set_status(0);
  h.set_class_specific(0);
  h.set_tid(tid);
  h.set_attr_id(static_cast<uint16_t>(attr));
  h.set_resv(0);
  h.set_attr_mod(0);
}

using MadBuf = std::array<uint8_t, kMadSize>;

// Helpers that name the view type of a message struct (for build_mad).
inline ReqView view_of(const ReqMsg&, uint8_t* p) { return ReqView(p); }
inline MraView view_of(const MraMsg&, uint8_t* p) { return MraView(p); }
inline RejView view_of(const RejMsg&, uint8_t* p) { return RejView(p); }
inline RepView view_of(const RepMsg&, uint8_t* p) { return RepView(p); }
inline RtuView view_of(const RtuMsg&, uint8_t* p) { return RtuView(p); }
inline DreqView view_of(const DreqMsg&, uint8_t* p) { return DreqView(p); }
inline DrepView view_of(const DrepMsg&, uint8_t* p) { return DrepView(p); }
inline SidrReqView view_of(const SidrReqMsg&, uint8_t* p) { return SidrReqView(p); }
inline SidrRepView view_of(const SidrRepMsg&, uint8_t* p) { return SidrRepView(p); }

// Build one complete 256-byte CM MAD from a message struct.
template <class M>
MadBuf build_mad(const M& m, uint64_t tid) noexcept {
  MadBuf mad{};
  write_cm_mad_hdr(mad.data(), M::kAttr, tid);
  encode(m, decltype(view_of(m, mad.data()))(mad.data() + kMadHdrSize));
  return mad;
}

// Whether `mad` is a well-formed CM MAD header this CM understands
// (IBA 13.4.2: base version 1, class 0x07, class version 2).
enum class MadCheck : uint8_t { Ok, Short, BadBaseVersion, NotCm, BadClassVersion, BadMethod };

inline MadCheck check_cm_mad(std::span<const uint8_t> mad) noexcept {
  if (mad.size() < kMadSize) return MadCheck::Short;
  wire::MadHdrC h(mad.data());
  if (h.base_version() != wire::kMadBaseVersion) return MadCheck::BadBaseVersion;
  if (h.mgmt_class() != wire::kMgmtClassCm) return MadCheck::NotCm;
  if (h.class_version() != wire::kCmClassVersion) return MadCheck::BadClassVersion;
  if (h.method() != wire::kMadMethodSend) return MadCheck::BadMethod;
  return MadCheck::Ok;
}

// CM timeouts are 4.096 us * 2^t (IBA 12.6.5: Remote/Local CM Response
// Timeout, and the same encoding as the local ACK timeout, 9.7.6.1.3).
constexpr uint64_t cm_timeout_ns(unsigned t) noexcept {
  if (t > 31) t = 31;
  return (uint64_t{4096} << t);  // 4096 ns = 4.096 us
}

}  // namespace uroce::cm
