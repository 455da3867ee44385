// HOST:PORT listen and connect addresses ("127.0.0.1:50051", "0.0.0.0:0", "[::1]:9464",
// "worker-0:7000"): the one parser of the frontend's, the workers' and the metrics endpoint's
// address flags. Pure functions; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve {

struct HostPort {
  std::string host;  // a name or an address; an IPv6 literal without its brackets ("::1")
  int port = 0;      // 0..65535 (0: any free port, for listen addresses)
};

// Splits `value` at the colon before the port. An IPv6 literal must be bracketed ("[::1]:80");
// the brackets are stripped. INVALID_ARGUMENT naming `flag` and `value` when the host is empty,
// an unbracketed host contains ':', or the port is not a decimal number in 0..65535.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view value, absl::string_view flag);

}  // namespace ditserve
