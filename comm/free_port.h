// Choosing a TCP port for a rendezvous (the Gloo group's TCPStore, hosted by rank 0).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ditserve::comm {

// Binds a TCP socket to port 0 on `host` (an IPv4/IPv6 literal or a resolvable name), reads the
// port the kernel chose and closes the socket. The port is free now, not reserved: another
// process may take it before the store binds it, so callers re-form the group on a bind failure.
// Thread-safe.
absl::StatusOr<int> PickFreePort(const std::string& host = "127.0.0.1");

}  // namespace ditserve::comm
