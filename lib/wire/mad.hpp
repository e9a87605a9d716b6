// The common MAD header (IBA 13.4.2, table 145).  CM message bodies are
// field tables in cm/.
#pragma once

#include <cstdint>

#include "lib/wire/bytes.hpp"

namespace uroce::wire {

inline constexpr size_t kMadSize = 256;          // IBA 13.4.1: every MAD is 256 bytes
inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;    // Communication Management
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMadMethodSend = 0x03;

// CM attribute IDs (IBA 12.6, table 98).
enum class CmAttr : uint16_t {
  ClassPortInfo = 0x0001,
  Req = 0x0010,
  Mra = 0x0011,
  Rej = 0x0012,
  Rep = 0x0013,
  Rtu = 0x0014,
  Dreq = 0x0015,
  Drep = 0x0016,
  SidrReq = 0x0017,
  SidrRep = 0x0018,
  Lap = 0x0019,
  Apr = 0x001A,
};

constexpr const char* cm_attr_name(uint16_t id) noexcept {
  switch (static_cast<CmAttr>(id)) {
    case CmAttr::ClassPortInfo: return "ClassPortInfo";
    case CmAttr::Req: return "REQ";
    case CmAttr::Mra: return "MRA";
    case CmAttr::Rej: return "REJ";
    case CmAttr::Rep: return "REP";
    case CmAttr::Rtu: return "RTU";
    case CmAttr::Dreq: return "DREQ";
    case CmAttr::Drep: return "DREP";
    case CmAttr::SidrReq: return "SIDR_REQ";
    case CmAttr::SidrRep: return "SIDR_REP";
    case CmAttr::Lap: return "LAP";
    case CmAttr::Apr: return "APR";
  }
  return nullptr;
}

template <class Byte>
class MadHdrT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 24;
  using ByteView<Byte>::ByteView;

  uint8_t base_version() const noexcept { return this->p_[0]; }
  uint8_t mgmt_class() const noexcept { return this->p_[1]; }
  uint8_t class_version() const noexcept { return this->p_[2]; }
  uint8_t method() const noexcept { return this->p_[3]; }  // R bit (7) and method (6:0)
  uint16_t status() const noexcept { return load_be<uint16_t>(this->p_ + 4); }
  uint16_t class_specific() const noexcept { return load_be<uint16_t>(this->p_ + 6); }
  uint64_t tid() const noexcept { return load_be<uint64_t>(this->p_ + 8); }
  uint16_t attr_id() const noexcept { return load_be<uint16_t>(this->p_ + 16); }
  uint16_t resv() const noexcept { return load_be<uint16_t>(this->p_ + 18); }
  uint32_t attr_mod() const noexcept { return load_be<uint32_t>(this->p_ + 20); }

  void set_base_version(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[0] = v; }
  void set_mgmt_class(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[1] = v; }
  void set_class_version(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[2] = v; }
  void set_method(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[3] = v; }
  void set_status(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 4, v); }
  void set_class_specific(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 6, v); }
  void set_tid(uint64_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 8, v); }
  void set_attr_id(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 16, v); }
  void set_resv(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 18, v); }
  void set_attr_mod(uint32_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 20, v); }
};

using MadHdr = MadHdrT<uint8_t>;
using MadHdrC = MadHdrT<const uint8_t>;
static_assert(MadHdr::kSize == 24);

}  // namespace uroce::wire
