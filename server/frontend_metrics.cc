#include "server/frontend_metrics.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "common/host_port.h"
#include "common/model_name.h"
#include "common/status_macros.h"

namespace ditserve::server {
namespace {

metrics::RpcMethod MetricsMethod(ApiMethod method) {
  switch (method) {
    case ApiMethod::kGenerate:
      return metrics::RpcMethod::kGenerate;
    case ApiMethod::kGenerateStream:
      return metrics::RpcMethod::kGenerateStream;
    case ApiMethod::kImagesGenerations:
      return metrics::RpcMethod::kImagesGenerations;
    case ApiMethod::kImagesEdits:
      return metrics::RpcMethod::kImagesEdits;
  }
  return metrics::RpcMethod::kGenerate;
}

}  // namespace

FrontendMetrics::FrontendMetrics(const FrontendOptions* options, AdmissionQueue* queue,
                                 WorkerGroup* group)
    : options_(options), queue_(queue), group_(group) {
  metrics::BuildInfo build;
  build.version = DITSERVE_VERSION;
  build.model = ModelNameFromDir(options->model_dir);
  if (build.model.empty()) build.model = "remote";
  build.tp_degree = static_cast<int>(options->WorldSize());
  build.dtype = options->dtype;
  metrics_ = std::make_unique<metrics::DitserveMetrics>(build);
  metrics_->queue_capacity().Set(static_cast<double>(options->max_queue));
  for (const LoraAdapterOption& lora : options->lora_adapters)
    metrics_->DeclareLoraAdapter(lora.name);
}

FrontendMetrics::~FrontendMetrics() {
  Stop();
}

void FrontendMetrics::RefreshOnScrape() {
  metrics_->queue_depth().Set(static_cast<double>(queue_->size()));
  metrics_->ReportPermanentFormationFailures(group_->permanent_failures());
  for (const auto& st : group_->CollectStatus(std::chrono::milliseconds(500))) {
    metrics::WorkerFigures f;
    f.ready = st.ready();
    f.device_memory_allocated_bytes = static_cast<double>(st.memory().allocated_bytes());
    f.device_memory_reserved_bytes = static_cast<double>(st.memory().reserved_bytes());
    f.device_memory_peak_allocated_bytes = static_cast<double>(st.memory().peak_allocated_bytes());
    f.device_memory_total_bytes = static_cast<double>(st.memory().total_bytes());
    f.weight_bytes = static_cast<double>(st.weight_bytes());
    f.load_seconds = st.load_seconds();
    f.resident_memory_bytes = static_cast<double>(st.resident_bytes());
    f.allreduce_count = static_cast<double>(st.allreduce_count());
    f.allreduce_bytes = static_cast<double>(st.allreduce_bytes());
    f.allreduce_seconds = st.allreduce_seconds();
    f.denoise_steps = static_cast<double>(st.steps());
    f.denoise_step_seconds = st.step_seconds_sum();
    f.cached_steps = static_cast<double>(st.cached_steps());
    f.cuda_graph_replays = static_cast<double>(st.cuda_graph_replays());
    f.cuda_graph_captures = static_cast<double>(st.cuda_graph_captures());
    metrics_->ReportWorker(st.rank(), f);
  }
}

absl::Status FrontendMetrics::Start(const std::string& listen, const std::string& tls_cert_file,
                                    const std::string& tls_key_file) {
  if (listen.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const HostPort address, ParseHostPort(listen, "--metrics-listen"));
  metrics::MetricsHttpServerOptions opts;
  opts.host = address.host;
  opts.port = address.port;
  opts.tls_cert_file = tls_cert_file;
  opts.tls_key_file = tls_key_file;
  auto server = metrics::MetricsHttpServer::Start(opts, {metrics_.get(), &process_},
                                                  [this] { RefreshOnScrape(); });
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  spdlog::info("metrics on {}://{}:{}/metrics", tls_cert_file.empty() ? "http" : "https",
               server_->host(), server_->port());
  std::printf("METRICS %d\n", server_->port());
  std::fflush(stdout);
  return absl::OkStatus();
}

void FrontendMetrics::Stop() {
  if (server_) server_->Stop();
}

RequestObserver FrontendMetrics::request_observer() {
  RequestObserver o;
  o.on_admitted = [this] { metrics_->requests_in_flight().Increment(); };
  o.on_finished = [this](ApiMethod method, bool admitted, const absl::Status& s, double seconds,
                         int images) {
    if (admitted) metrics_->requests_in_flight().Decrement();
    metrics_->RequestFinished(MetricsMethod(method), s.code(), seconds);
    if (images > 0) metrics_->ImagesGenerated(images);
  };
  o.on_first_step = [this](double seconds) { metrics_->ObserveTimeToFirstStep(seconds); };
  return o;
}

DispatchObserver FrontendMetrics::dispatch_observer() {
  DispatchObserver o;
  o.on_start = [this](const PendingRequest& r, double queue_seconds) {
    metrics_->ObserveQueueWait(queue_seconds);
    for (const auto& lora : r.request().item.loras()) metrics_->LoraRequestStarted(lora.name());
  };
  o.on_step = [this](double step_seconds, uint32_t) { metrics_->ObserveDenoiseStep(step_seconds); };
  o.on_dropped = [this](const PendingRequest&, const absl::Status& why) {
    metrics_->QueueDropped(why.code() == absl::StatusCode::kDeadlineExceeded
                               ? metrics::QueueDropReason::kDeadlineExpired
                           : why.code() == absl::StatusCode::kUnavailable
                               ? metrics::QueueDropReason::kShutdown
                               : metrics::QueueDropReason::kCancelled);
  };
  return o;
}

}  // namespace ditserve::server
