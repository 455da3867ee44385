// FrontendServer: all of ditserve-frontend but flag parsing and signals: the worker group, the
// admission queue, the dispatcher, the public gRPC service (with grpc.health.v1 and reflection)
// and /metrics, wired together. main.cc builds one from the flags and calls Drain() on SIGTERM;
// tests build one on a loopback port against fake workers.
//
// Drain (the graceful shutdown): health turns NOT_SERVING, new requests and the requests still
// queued get UNAVAILABLE at once (their clients can retry elsewhere); the running job may finish
// within the drain time; then it is cancelled on the ranks (its requests end UNAVAILABLE at once, the ranks stop at the next step boundary, abandoned after a
// short grace), the workers are shut down and the gRPC server and the HTTP API stop. The HTTP API
// refuses new generations (503) and answers /health 503 from the start of the drain, like gRPC.
//
// Threads: Start(), Drain() and the destructor from one owner thread; the accessors from any.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "server/admission_queue.h"
#include "server/dispatcher.h"
#include "server/frontend_metrics.h"
#include "server/frontend_options.h"
#include "server/http_api.h"
#include "server/image_generation_service.h"
#include "server/worker_group.h"

namespace ditserve::server {

// The worker group settings the flags imply (`worker_binary` when options.worker_binary is empty;
// the LoRA adapters from options.lora_adapters, which ValidateFrontendOptions fills).
WorkerGroupOptions MakeWorkerGroupOptions(const FrontendOptions& options,
                                          const std::string& worker_binary);

class FrontendServer {
 public:
  // Binds options.listen (port 0: any), options.metrics_listen and options.http_listen (empty:
  // none; the HTTP API starts after the gRPC server), then starts forming the group and
  // dispatching. `options` must have passed ValidateFrontendOptions.
  static absl::StatusOr<std::unique_ptr<FrontendServer>> Start(const FrontendOptions& options,
                                                               WorkerGroupOptions group_options);
  // Drains with no drain time if Drain() was not called.
  ~FrontendServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_->port(); }
  // The HTTP API's port; 0 when --http-listen is empty.
  int http_port() const { return http_ ? http_->port() : 0; }
  WorkerGroup& group() { return *group_; }
  AdmissionQueue& queue() { return *queue_; }
  Dispatcher& dispatcher() { return *dispatcher_; }
  ImageGenerationService& service() { return *service_; }
  // TLS and token settings loaded at Start (shared with every public API).
  const std::shared_ptr<const ApiSecurity>& security() const { return security_; }

  // The graceful shutdown above; returns once the server has stopped. Idempotent.
  void Drain(std::chrono::duration<double> drain_time);

 private:
  FrontendServer() = default;
  void SetHealth(bool serving);

  FrontendOptions options_;
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<AdmissionQueue> queue_;
  std::unique_ptr<FrontendMetrics> metrics_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::shared_ptr<const ApiSecurity> security_;
  std::unique_ptr<ImageGenerationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpApi> http_;
  int port_ = 0;
  int health_listener_ = -1;
  std::mutex health_mu_;
  bool draining_ = false;  // under health_mu_: health stays NOT_SERVING from then on
  bool drained_ = false;
};

}  // namespace ditserve::server
