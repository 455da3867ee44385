#include "metrics/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "metrics/httplib_listener.h"
#include "metrics/text_serializer.h"

namespace ditserve::metrics {

MetricsHttpServer::MetricsHttpServer(std::vector<Collectable*> sources, CollectCallback callback)
    : sources_(std::move(sources)), callback_(std::move(callback)) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpServerOptions& options, std::vector<Collectable*> sources,
    CollectCallback callback) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port out of range: ", options.port));
  }
  for (Collectable* source : sources) {
    if (source == nullptr) return absl::InvalidArgumentError("null metrics source");
  }
  std::unique_ptr<MetricsHttpServer> self(
      new MetricsHttpServer(std::move(sources), std::move(callback)));
  self->host_ = options.host;
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("metrics TLS needs both a certificate and a key");
  }
  if (options.tls_cert_file.empty()) {
    self->server_ = std::make_unique<httplib::Server>();
  } else {
    auto ssl = std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(),
                                                    options.tls_key_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("metrics TLS: cannot use certificate '",
                                                     options.tls_cert_file, "' with key '",
                                                     options.tls_key_file, "'"));
    }
    self->server_ = std::move(ssl);
  }
  httplib::Server& svr = *self->server_;
  const int threads = std::max(1, options.worker_threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

  // httplib's default sets SO_REUSEPORT, which lets a second process bind the same port and
  // silently take half of the scrapes. Keep only SO_REUSEADDR (fast restart over TIME_WAIT).
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  // An idle keep-alive connection (Prometheus keeps one per target) holds a worker thread, and
  // httplib's stop() waits for it up to the keep-alive timeout (5 s by default), which would delay
  // the frontend's shutdown. Scrapes are seconds apart, so one request per connection costs nothing.
  svr.set_keep_alive_max_count(1);

  MetricsHttpServer* raw = self.get();
  svr.Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    res.set_content(raw->Render(), kTextContentType);
  });
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });

  if (options.port == 0) {
    const int port = svr.bind_to_any_port(options.host);
    if (port < 0) {
      return absl::UnavailableError(
          absl::StrCat("metrics server: cannot bind ", options.host, " on any port"));
    }
    self->port_ = port;
  } else {
    if (!svr.bind_to_port(options.host, options.port)) {
      return absl::UnavailableError(absl::StrCat("metrics server: cannot bind ", options.host, ":",
                                                 options.port, " (in use or not permitted)"));
    }
    self->port_ = options.port;
  }
  if (absl::Status s = RunHttplibAcceptLoop(svr, &self->listener_, "metrics server"); !s.ok()) {
    return s;
  }
  return self;
}

std::string MetricsHttpServer::Render() const {
  std::vector<MetricFamilySnapshot> families;
  for (Collectable* source : sources_) {
    std::vector<MetricFamilySnapshot> part = source->Collect();
    families.insert(families.end(), std::make_move_iterator(part.begin()),
                    std::make_move_iterator(part.end()));
  }
  if (callback_) {
    std::vector<MetricFamilySnapshot> part = callback_();
    families.insert(families.end(), std::make_move_iterator(part.begin()),
                    std::make_move_iterator(part.end()));
  }
  return SerializeText(families);
}

void MetricsHttpServer::Stop() {
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

}  // namespace ditserve::metrics

