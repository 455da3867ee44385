#include "metrics/ditserve_metrics.h"

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

#include "metrics/builder.h"

namespace ditserve::metrics {
namespace {

// gRPC status code names, indexed by code (absl::StatusCode uses the same numbering).
constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
    "UNAUTHENTICATED"};
static_assert(sizeof(kCodeNames) / sizeof(kCodeNames[0]) == 17);

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kGenerate:
      return "Generate";
    case RpcMethod::kGenerateStream:
      return "GenerateStream";
    case RpcMethod::kImagesGenerations:
      return "ImagesGenerations";
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

// The set's names, help texts, label names and buckets are fixed and valid, so registering them or
// adding a child fails only on a programming error (a second set on one Registry): say which, stop.
template <typename T>
T Must(absl::StatusOr<T> result) {
  if (!result.ok()) {
    std::fprintf(stderr, "ditserve metrics: %s\n", result.status().ToString().c_str());
    std::abort();
  }
  return *std::move(result);
}

struct Def {
  const char* name;
  const char* help;
};

// The worker families, indexed like DitserveMetrics' WorkerGauge / WorkerCounter.
constexpr Def kWorkerGauges[] = {
    {"ditserve_worker_ready", "1 if the worker rank reported ready, else 0."},
    {"ditserve_worker_last_report_timestamp_seconds",
     "Unix time of the frontend's last status report from the worker rank."},
    {"ditserve_worker_device_memory_allocated_bytes",
     "Device memory held by live tensors on the worker rank."},
    {"ditserve_worker_device_memory_peak_allocated_bytes",
     "Highest device memory held by live tensors on the worker rank since it started."},
    {"ditserve_worker_device_memory_reserved_bytes",
     "Device memory reserved by the caching allocator on the worker rank."},
    {"ditserve_worker_device_memory_total_bytes",
     "Total memory of the worker rank's device (0 on CPU)."},
    {"ditserve_worker_weight_bytes", "Bytes of the worker rank's weight shard."},
    {"ditserve_worker_load_duration_seconds", "Duration of the worker rank's last model load."},
    {"ditserve_worker_resident_memory_bytes", "Resident memory of the worker rank's process."},
};
constexpr Def kWorkerCounters[] = {
    {"ditserve_worker_allreduce_operations_total",
     "All-reduce operations run by the worker rank since it started."},
    {"ditserve_worker_allreduce_bytes_total",
     "All-reduce payload bytes of the worker rank since it started."},
    {"ditserve_worker_allreduce_seconds_total",
     "Time the worker rank spent in all-reduce since it started."},
    {"ditserve_worker_denoise_steps_total",
     "Denoising steps executed by the worker rank since it started."},
    {"ditserve_worker_denoise_step_seconds_total",
     "Time the worker rank spent in denoising steps since it started."},
    {"ditserve_worker_cuda_graph_replays_total",
     "Transformer forwards the worker rank replayed from a CUDA graph since it started."},
    {"ditserve_worker_cuda_graph_captures_total",
     "CUDA graphs of the transformer step the worker rank captured since it started."},
};

}  // namespace

const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> kBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,   2,
                                               3,    5,     7.5,  10,  15,   20,  30,  45,
                                               60,   90,    120,  180, 300,  600};
  return kBuckets;
}

const std::vector<double>& StepLatencyBuckets() {
  static const std::vector<double> kBuckets = {0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15,
                                               0.2,  0.3,  0.5,  0.75, 1,     1.5, 2,
                                               3,    5,    7.5,  10,   20,    30,  60};
  return kBuckets;
}

DitserveMetrics::DitserveMetrics(Registry& registry, const BuildInfo& build) {
  static_assert(std::size(kWorkerGauges) == kNumWorkerGauges);
  static_assert(std::size(kWorkerCounters) == kNumWorkerCounters);
  auto counter = [&](const char* name, const char* help) {
    return Must(BuildCounter().Name(name).Help(help).Register(registry));
  };
  auto gauge = [&](const char* name, const char* help) {
    return Must(BuildGauge().Name(name).Help(help).Register(registry));
  };
  auto histogram = [&](const char* name, const char* help, const std::vector<double>& buckets) {
    return Must(BuildHistogram().Name(name).Help(help).Buckets(buckets).Register(registry));
  };

  // --- frontend ---
  Family<Counter>* requests =
      counter("ditserve_requests_total",
              "Generation calls finished, by method and final gRPC status code.");
  Family<Histogram>* request_duration =
      histogram("ditserve_request_duration_seconds",
                "End-to-end generation RPC latency (arrival to final status), every outcome "
                "included.",
                RequestLatencyBuckets());
  queue_wait_ = Must(histogram("ditserve_queue_wait_seconds",
                               "Time from admission to dispatch to the workers.",
                               RequestLatencyBuckets())
                         ->Add({}));
  time_to_first_step_ =
      Must(histogram("ditserve_time_to_first_step_seconds",
                     "Time from admission to the end of the first denoising step.",
                     RequestLatencyBuckets())
               ->Add({}));
  denoise_step_ = Must(histogram("ditserve_denoise_step_duration_seconds",
                                 "Duration of one denoising step, as reported by rank 0.",
                                 StepLatencyBuckets())
                           ->Add({}));
  in_flight_ = Must(
      gauge("ditserve_requests_in_flight", "Requests currently executing on the workers.")->Add({}));
  queue_depth_ = Must(gauge("ditserve_queue_depth",
                            "Requests admitted but not yet dispatched to the workers.")
                          ->Add({}));
  queue_capacity_ = Must(
      gauge("ditserve_queue_capacity", "Configured maximum number of queued requests.")->Add({}));
  images_generated_ =
      Must(counter("ditserve_images_generated_total", "Images returned to clients.")->Add({}));
  Family<Counter>* dropped =
      counter("ditserve_queue_dropped_total",
              "Requests removed from the queue without running, by reason.");
  lora_requests_ = counter("ditserve_lora_requests_total",
                           "Requests dispatched to the workers with a LoRA adapter applied, by adapter.");
  Family<Gauge>* build_info =
      gauge("ditserve_build_info", "Build and model information; the value is always 1.");

  // --- workers (series created on each rank's first report) ---
  for (int i = 0; i < kNumWorkerGauges; ++i) {
    worker_gauges_[i] = gauge(kWorkerGauges[i].name, kWorkerGauges[i].help);
  }
  for (int i = 0; i < kNumWorkerCounters; ++i) {
    worker_counters_[i] = counter(kWorkerCounters[i].name, kWorkerCounters[i].help);
  }

  // --- labelled children known up front ---
  for (RpcMethod method :
       {RpcMethod::kGenerate, RpcMethod::kGenerateStream, RpcMethod::kImagesGenerations}) {
    const int mi = static_cast<int>(method);
    for (int code = 0; code < kNumCodes; ++code) {
      requests_[mi][code] =
          Must(requests->Add({{"method", RpcMethodName(method)}, {"code", kCodeNames[code]}}));
    }
    request_duration_[mi] = Must(request_duration->Add({{"method", RpcMethodName(method)}}));
  }
  for (QueueDropReason reason : {QueueDropReason::kDeadlineExpired, QueueDropReason::kCancelled,
                                 QueueDropReason::kShutdown}) {
    queue_dropped_[static_cast<int>(reason)] =
        Must(dropped->Add({{"reason", QueueDropReasonName(reason)}}));
  }
  Must(build_info->Add({{"version", build.version},
                        {"model", build.model},
                        {"tp_degree", std::to_string(build.tp_degree)},
                        {"dtype", build.dtype}}))
      ->Set(1);
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
  lora_children_[name] = Must(lora_requests_->Add({{"adapter", name}}));
}

void DitserveMetrics::LoraRequestStarted(const std::string& adapter) {
  std::lock_guard<std::mutex> lock(lora_mu_);
  auto it = lora_children_.find(adapter);
  if (it != lora_children_.end()) it->second->Increment();
}

const DitserveMetrics::RankChildren& DitserveMetrics::RankLocked(uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) return it->second;
  const Labels labels = {{"rank", std::to_string(rank)}};
  RankChildren c{};
  for (int i = 0; i < kNumWorkerGauges; ++i) c.gauges[i] = Must(worker_gauges_[i]->Add(labels));
  for (int i = 0; i < kNumWorkerCounters; ++i) {
    c.counters[i] = Must(worker_counters_[i]->Add(labels));
  }
  return ranks_.emplace(rank, c).first->second;
}

void DitserveMetrics::ReportWorker(uint32_t rank, const WorkerFigures& w) {
  std::lock_guard<std::mutex> lock(ranks_mu_);
  const RankChildren& c = RankLocked(rank);
  const auto& g = c.gauges;
  g[kReady]->Set(w.ready ? 1 : 0);
  g[kAllocated]->Set(w.device_memory_allocated_bytes);
  g[kPeakAllocated]->Set(w.device_memory_peak_allocated_bytes);
  g[kReserved]->Set(w.device_memory_reserved_bytes);
  g[kTotal]->Set(w.device_memory_total_bytes);
  g[kWeight]->Set(w.weight_bytes);
  g[kLoad]->Set(w.load_seconds);
  g[kRss]->Set(w.resident_memory_bytes);
  const auto& n = c.counters;
  n[kAllreduceOps]->SetCumulative(w.allreduce_count);
  n[kAllreduceBytes]->SetCumulative(w.allreduce_bytes);
  n[kAllreduceSeconds]->SetCumulative(w.allreduce_seconds);
  n[kSteps]->SetCumulative(w.denoise_steps);
  n[kStepSeconds]->SetCumulative(w.denoise_step_seconds);
  n[kGraphReplays]->SetCumulative(w.cuda_graph_replays);
  n[kGraphCaptures]->SetCumulative(w.cuda_graph_captures);
  g[kLastReport]->SetToCurrentTime();
}

}  // namespace ditserve::metrics
