// FrontendMetrics: wires the ditserve metric set (metrics/ditserve_metrics.h) to the frontend's
// parts and serves /metrics. Worker figures are pulled from the ranks (GetStatus) at scrape time
// and re-exported with a rank label, so one scrape config collects everything.
//
// Threads: the observers it hands out are called from RPC and dispatcher threads; the refresh
// before each scrape runs on the HTTP server's threads. Everything it touches is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "metrics/ditserve_metrics.h"
#include "metrics/http_server.h"
#include "metrics/process_metrics.h"
#include "server/admission_queue.h"
#include "server/dispatcher.h"
#include "server/frontend_options.h"
#include "server/image_generation_service.h"
#include "server/worker_group.h"

namespace ditserve::server {

class FrontendMetrics {
 public:
  FrontendMetrics(const FrontendOptions* options, AdmissionQueue* queue, WorkerGroup* group);
  ~FrontendMetrics();

  // Serves /metrics on HOST:PORT (empty: no endpoint, metrics are still recorded).
  // `tls_cert_file`/`tls_key_file` both set: HTTPS.
  absl::Status Start(const std::string& listen, const std::string& tls_cert_file = "",
                     const std::string& tls_key_file = "");
  void Stop();
  int port() const { return server_ ? server_->port() : 0; }

  RequestObserver request_observer();
  DispatchObserver dispatch_observer();

 private:
  void RefreshOnScrape();

  const FrontendOptions* const options_;
  AdmissionQueue* const queue_;
  WorkerGroup* const group_;
  std::unique_ptr<metrics::DitserveMetrics> metrics_;
  metrics::ProcessMetrics process_;
  std::unique_ptr<metrics::MetricsHttpServer> server_;
};

}  // namespace ditserve::server
