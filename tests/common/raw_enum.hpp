// An enum field of a libibverbs structure holding a value that is none of
// its enumerators, as an application written in C (or against newer
// headers) may leave there.  Such a value cannot be made with static_cast
// (out of the enum's range that is undefined, and UBSan reports its load):
// the bytes are written instead, which is what the application did.
#pragma once

#include <cstring>
#include <type_traits>

namespace uroce::testing {

template <class E>
void set_raw(E& field, std::underlying_type_t<E> value) noexcept {
  static_assert(std::is_enum_v<E>);
  std::memcpy(&field, &value, sizeof field);
}

}  // namespace uroce::testing
