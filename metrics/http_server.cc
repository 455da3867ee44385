#include "metrics/http_server.h"

#include <httplib.h>


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
  ConfigureHttplibServer(svr, options.worker_threads);

  MetricsHttpServer* raw = self.get();
  svr.Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    res.set_content(raw->Render(), kTextContentType);
  });
  svr.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain; charset=utf-8");
  });

  absl::StatusOr<int> port =
      BindAndListen(svr, options.host, options.port, &self->listener_, "metrics server");
  if (!port.ok()) return port.status();
  self->port_ = *port;
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

