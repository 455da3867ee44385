#include "metrics/http_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "metrics/exposition.h"
#include "metrics/httplib_listener.h"

namespace ditserve::metrics {

MetricsHttpServer::MetricsHttpServer(std::vector<const prometheus::Collectable*> sources,
                                     BeforeScrapeHook before_scrape)
    : sources_(std::move(sources)), before_scrape_(std::move(before_scrape)) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpServerOptions& options, std::vector<const prometheus::Collectable*> sources,
    BeforeScrapeHook before_scrape) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics port out of range: ", options.port));
  }
  for (const prometheus::Collectable* source : sources) {
    if (source == nullptr) return absl::InvalidArgumentError("null metrics source");
  }
  std::unique_ptr<MetricsHttpServer> self(
      new MetricsHttpServer(std::move(sources), std::move(before_scrape)));
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

std::string MetricsHttpServer::Render() {
  if (before_scrape_) {
    std::lock_guard<std::mutex> lock(before_scrape_mu_);
    before_scrape_();
  }
  return RenderTextExposition(sources_);
}

void MetricsHttpServer::Stop() {
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

}  // namespace ditserve::metrics

