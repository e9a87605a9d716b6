// drivers::Result<T>: the value of a control-path call, or an Error that
// says what failed (DESIGN.md "errors by layer": the control path returns
// values).  The project's one Result type (lib/util/result.hpp) with an
// errno and a message as its error.
#pragma once

#include <string>

#include "lib/util/result.hpp"

namespace uroce::drivers {

struct Error {
  int code = 0;         // an errno value (EINVAL, ENOMEM, …) when one applies
  std::string message;  // names what failed and why: "drop: must be within [0, 1]"
};

// The project's Result (lib/util/result.hpp) with this Error.
template <class T>
using Result = uroce::Result<T, Error>;

using Status = Result<void>;

}  // namespace uroce::drivers
