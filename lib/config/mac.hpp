// MAC addresses in configuration text: "aa:bb:cc:dd:ee:ff".
#pragma once

#include <string>
#include <string_view>

#include "lib/util/result.hpp"
#include "lib/wire/eth.hpp"

namespace uroce::config {

// Six two-digit hex groups separated by ':' (either case).  A device's MAC
// must be unicast and not all zeros.  The error quotes `text`.
Result<wire::MacAddr, std::string> parse_mac(std::string_view text);

// Lower-case "aa:bb:cc:dd:ee:ff".
std::string format_mac(const wire::MacAddr& mac);

}  // namespace uroce::config
