#include "metrics/ditserve_metrics.h"

#include <chrono>
#include <iterator>
#include <string>

namespace ditserve::metrics {
namespace {

// gRPC status code names, indexed by code (absl::StatusCode uses the same numbering).
constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};
static_assert(sizeof(kCodeNames) / sizeof(kCodeNames[0]) == 17);

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kGenerate:
      return "Generate";
    case RpcMethod::kGenerateStream:
      return "GenerateStream";
    case RpcMethod::kImagesGenerations:
      return "ImagesGenerations";
    case RpcMethod::kImagesEdits:
      return "ImagesEdits";
  }
  return "unknown";
}

const char* QueueDropReasonName(QueueDropReason reason) {
  switch (reason) {
    case QueueDropReason::kDeadlineExpired:
      return "deadline_expired";
    case QueueDropReason::kCancelled:
      return "cancelled";
    case QueueDropReason::kShutdown:
      return "shutdown";
  }
  return "unknown";
}

}  // namespace

const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> kBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,  2,
                                               3,    5,     7.5,  10,  15,   20,  30, 45,
                                               60,   90,    120,  180, 300,  600};
  return kBuckets;
}

const std::vector<double>& StepLatencyBuckets() {
  static const std::vector<double> kBuckets = {0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15,
                                               0.2,  0.3,  0.5,  0.75, 1,     1.5, 2,
                                               3,    5,    7.5,  10,   20,    30,  60};
  return kBuckets;
}

DitserveMetrics::DitserveMetrics(const BuildInfo& build) {
  // The names, help texts, label names and buckets below are fixed and valid, so prometheus-cpp's
  // builders and Add (which throw std::invalid_argument on invalid ones) never throw here.
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(registry_);
  };
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(registry_);
  };
  auto histogram = [&](const char* name, const char* help) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry_);
  };

  // --- frontend ---
  prometheus::Family<prometheus::Counter>* requests =
      counter("ditserve_requests_total",
              "Generation calls finished, by method and final gRPC status code.");
  prometheus::Family<prometheus::Histogram>* request_duration =
      histogram("ditserve_request_duration_seconds",
                "End-to-end generation RPC latency (arrival to final status), every outcome "
                "included.");
  queue_wait_ =
      &histogram("ditserve_queue_wait_seconds", "Time from admission to dispatch to the workers.")
           ->Add({}, RequestLatencyBuckets());
  time_to_first_step_ = &histogram("ditserve_time_to_first_step_seconds",
                                   "Time from admission to the end of the first denoising step.")
                             ->Add({}, RequestLatencyBuckets());
  denoise_step_ = &histogram("ditserve_denoise_step_duration_seconds",
                             "Duration of one denoising step, as reported by rank 0.")
                       ->Add({}, StepLatencyBuckets());
  in_flight_ = &gauge("ditserve_requests_in_flight", "Requests currently executing on the workers.")
                    ->Add({});
  queue_depth_ =
      &gauge("ditserve_queue_depth", "Requests admitted but not yet dispatched to the workers.")
           ->Add({});
  queue_capacity_ =
      &gauge("ditserve_queue_capacity", "Configured maximum number of queued requests.")->Add({});
  images_generated_ =
      &counter("ditserve_images_generated_total", "Images returned to clients.")->Add({});
  prometheus::Family<prometheus::Counter>* dropped =
      counter("ditserve_queue_dropped_total",
              "Requests removed from the queue without running, by reason.");
  lora_requests_ =
      counter("ditserve_lora_requests_total",
              "Requests dispatched to the workers with a LoRA adapter applied, by adapter.");
  permanent_formation_failures_ =
      &counter("ditserve_worker_group_permanent_failures_total",
               "Formations of the worker group that failed with a permanent load error (a bad or "
               "missing model file): retried with backoff; the reason is in GetModelInfo.")
           ->Add({});
  prometheus::Family<prometheus::Gauge>* build_info =
      gauge("ditserve_build_info", "Build and model information; the value is always 1.");

  // --- labelled children known up front (at 0) ---
  for (RpcMethod method : {RpcMethod::kGenerate, RpcMethod::kGenerateStream,
                           RpcMethod::kImagesGenerations, RpcMethod::kImagesEdits}) {
    const int mi = static_cast<int>(method);
    for (int code = 0; code < kNumCodes; ++code) {
      requests_[mi][code] =
          &requests->Add({{"method", RpcMethodName(method)}, {"code", kCodeNames[code]}});
    }
    request_duration_[mi] =
        &request_duration->Add({{"method", RpcMethodName(method)}}, RequestLatencyBuckets());
  }
  for (QueueDropReason reason : {QueueDropReason::kDeadlineExpired, QueueDropReason::kCancelled,
                                 QueueDropReason::kShutdown}) {
    queue_dropped_[static_cast<int>(reason)] =
        &dropped->Add({{"reason", QueueDropReasonName(reason)}});
  }
  build_info
      ->Add({{"version", build.version},
             {"model", build.model},
             {"tp_degree", std::to_string(build.tp_degree)},
             {"dtype", build.dtype}})
      .Set(1);
}

void DitserveMetrics::ReportPermanentFormationFailures(uint64_t total) {
  std::lock_guard<std::mutex> lock(formation_mu_);
  if (total <= permanent_formation_failures_seen_) return;
  permanent_formation_failures_->Increment(
      static_cast<double>(total - permanent_formation_failures_seen_));
  permanent_formation_failures_seen_ = total;
}

void DitserveMetrics::RequestFinished(RpcMethod method, absl::StatusCode code, double seconds) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  const int mi = static_cast<int>(method);
  requests_[mi][c]->Increment();
  request_duration_[mi]->Observe(seconds);
}

void DitserveMetrics::QueueDropped(QueueDropReason reason) {
  queue_dropped_[static_cast<int>(reason)]->Increment();
}

void DitserveMetrics::DeclareLoraAdapter(const std::string& name) {
  std::lock_guard<std::mutex> lock(lora_mu_);
  if (lora_children_.count(name) != 0) return;
  lora_children_[name] = &lora_requests_->Add({{"adapter", name}});
}

void DitserveMetrics::LoraRequestStarted(const std::string& adapter) {
  std::lock_guard<std::mutex> lock(lora_mu_);
  auto it = lora_children_.find(adapter);
  if (it != lora_children_.end()) it->second->Increment();
}

void DitserveMetrics::ReportWorker(uint32_t rank, const WorkerFigures& figures) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  workers_.Report(rank, figures, now);
}

std::vector<prometheus::MetricFamily> DitserveMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> out = registry_.Collect();
  std::vector<prometheus::MetricFamily> workers = workers_.Collect();
  out.insert(out.end(), std::make_move_iterator(workers.begin()),
             std::make_move_iterator(workers.end()));
  return out;
}

}  // namespace ditserve::metrics
