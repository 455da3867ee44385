#include "metrics/httplib_listener.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"

namespace ditserve::metrics {

absl::Status RunHttplibAcceptLoop(httplib::Server& svr, std::thread* listener,
                                  absl::string_view what) {
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
  return absl::OkStatus();
}

}  // namespace ditserve::metrics
