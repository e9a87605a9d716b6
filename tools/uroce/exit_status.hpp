// Exit statuses shared by every `uroce` subcommand.
#pragma once

namespace uroce::tools {

enum ExitStatus : int {
  kExitOk = 0,      // everything checked and good
  kExitFailed = 1,  // the input was read but did not pass the checks
  kExitError = 2,   // usage error, or an input that cannot be read
};

}  // namespace uroce::tools
