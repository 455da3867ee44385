// The accept loop of a cpp-httplib server on its own thread, shared by the /metrics endpoint
// (metrics/http_server.h) and the HTTP API (server/http_api.h).
//
// cpp-httplib 0.11's stop() does nothing until the accept loop has marked itself running, so a
// Stop() right after a Start() could leave the listener thread behind: this returns only once the
// loop runs (or has already exited, then INTERNAL naming `what`, with the thread joined).
// Call from the owner's thread with `svr` bound (bind_to_port / bind_to_any_port); `*listener` must
// not be joinable. The owner stops it with svr.stop() and joins `*listener`.
#pragma once

#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace httplib {
class Server;
}

namespace ditserve::metrics {

absl::Status RunHttplibAcceptLoop(httplib::Server& svr, std::thread* listener,
                                  absl::string_view what);

}  // namespace ditserve::metrics
