#include "metrics/httplib_listener.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"

namespace ditserve::metrics {

void ConfigureHttplibServer(httplib::Server& svr, int threads) {
  threads = std::max(1, threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  svr.set_keep_alive_max_count(1);
}

absl::StatusOr<int> BindAndListen(httplib::Server& svr, const std::string& host, int port,
                                  std::thread* listener, absl::string_view what) {
  if (port == 0) {
    port = svr.bind_to_any_port(host);
    if (port < 0) {
      return absl::UnavailableError(absl::StrCat(what, ": cannot bind ", host, " on any port"));
    }
  } else if (!svr.bind_to_port(host, port)) {
    const std::string shown = host.find(':') == std::string::npos ? host : absl::StrCat("[", host, "]");
    return absl::UnavailableError(
        absl::StrCat(what, ": cannot bind ", shown, ":", port, " (in use or not permitted)"));
  }
  auto exited = std::make_shared<std::atomic<bool>>(false);
  *listener = std::thread([&svr, exited] {
    svr.listen_after_bind();
    exited->store(true);
  });
  while (!svr.is_running()) {
    if (exited->load()) {
      listener->join();
      return absl::InternalError(absl::StrCat(what, ": the accept loop exited immediately"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return port;
}

}  // namespace ditserve::metrics
