// What the two cpp-httplib servers of the frontend (the /metrics endpoint, metrics/http_server.h,
// and the HTTP API, server/http_api.h) share: their connection settings, binding, and the accept
// loop on its own thread.
//
// Call from the owner's thread, in this order: ConfigureHttplibServer, the routes, then
// BindAndListen. The owner stops the server with svr.stop() and joins `*listener`.
#pragma once

#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace httplib {
class Server;
}

namespace ditserve::metrics {

// A pool of `threads` handler threads (at least 1); SO_REUSEADDR only (httplib's default also sets
// SO_REUSEPORT, which would let a second process bind the same port and silently take half the
// requests); one request per connection (an idle keep-alive connection would hold a handler thread
// and delay stop() by the keep-alive timeout; the clients here make a request seconds apart).
void ConfigureHttplibServer(httplib::Server& svr, int threads);

// Binds `host`:`port` (port 0: any free port) and starts the accept loop on `*listener` (which must
// not be joinable); returns the bound port once the loop runs: cpp-httplib 0.11's stop() does
// nothing until the loop has marked itself running, so a stop() right after could otherwise leave
// the thread behind. UNAVAILABLE "<what>: cannot bind ..." when the address is taken or not
// permitted; INTERNAL naming `what` when the loop exits at once (the thread is joined then).
absl::StatusOr<int> BindAndListen(httplib::Server& svr, const std::string& host, int port,
                                  std::thread* listener, absl::string_view what);

}  // namespace ditserve::metrics
