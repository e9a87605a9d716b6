// What rnic.cpp and mr.cpp (the RNIC's object verbs) share and nothing
// else sees: the owner lists' helpers and the errno out-parameter.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

namespace uroce::rnic {
class Mw;
}

namespace uroce::rnic::detail {

// [engine] The window no longer covers anything; accesses under its
// current binding end (its epoch moves on).  mr.cpp.
void unbind(Mw& mw) noexcept;

// Out of the owner's list; the caller decides where it is destroyed (a
// queue's ring memory is freed outside the engine's loop, ring_memory.hpp).
template <class T>
std::unique_ptr<T> take_owned(std::vector<std::unique_ptr<T>>& v, T* p) {
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it->get() == p) {
      std::unique_ptr<T> out = std::move(*it);
      v.erase(it);
      return out;
    }
  }
  return nullptr;
}

template <class T>
void erase_owned(std::vector<std::unique_ptr<T>>& v, T* p) {
  take_owned(v, p);
}

template <class T>
bool owns(const std::vector<std::unique_ptr<T>>& v, const T* p) {
  return std::any_of(v.begin(), v.end(), [p](const auto& u) { return u.get() == p; });
}

inline void set_err(int* err, int v) {
  if (err != nullptr) *err = v;
}

}  // namespace uroce::rnic::detail
