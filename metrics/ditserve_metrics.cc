#include "metrics/ditserve_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
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

constexpr RpcMethod kMethods[] = {RpcMethod::kGenerate, RpcMethod::kGenerateStream};
constexpr QueueDropReason kDropReasons[] = {QueueDropReason::kDeadlineExpired,
                                            QueueDropReason::kCancelled,
                                            QueueDropReason::kShutdown};

template <typename T>
absl::Status Reg(absl::StatusOr<Family<T>*> result, Family<T>*& out) {
  if (!result.ok()) return result.status();
  out = *result;
  return absl::OkStatus();
}

template <typename T>
absl::Status Child(Family<T>* family, const Labels& labels, T*& out) {
  absl::StatusOr<T*> child = family->Add(labels);
  if (!child.ok()) return child.status();
  out = *child;
  return absl::OkStatus();
}

#define DITSERVE_TRY(expr)              \
  do {                                  \
    absl::Status _s = (expr);           \
    if (!_s.ok()) return _s;            \
  } while (0)

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

const char* RpcMethodName(RpcMethod method) {
  return method == RpcMethod::kGenerate ? "Generate" : "GenerateStream";
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

absl::StatusOr<std::unique_ptr<DitserveMetrics>> DitserveMetrics::Create(Registry& registry,
                                                                         const BuildInfo& build) {
  std::unique_ptr<DitserveMetrics> m(new DitserveMetrics());
  DitserveFamilies& f = m->f_;

  // --- frontend ---
  DITSERVE_TRY(Reg(BuildCounter()
                       .Name("ditserve_requests_total")
                       .Help("Generation RPCs finished, by method and final gRPC status code.")
                       .Register(registry),
                   f.requests_total));
  DITSERVE_TRY(Reg(BuildHistogram()
                       .Name("ditserve_request_duration_seconds")
                       .Help("End-to-end generation RPC latency (arrival to final status), every "
                             "outcome included.")
                       .Buckets(RequestLatencyBuckets())
                       .Register(registry),
                   f.request_duration_seconds));
  DITSERVE_TRY(Reg(BuildHistogram()
                       .Name("ditserve_queue_wait_seconds")
                       .Help("Time from admission to dispatch to the workers.")
                       .Buckets(RequestLatencyBuckets())
                       .Register(registry),
                   f.queue_wait_seconds));
  DITSERVE_TRY(Reg(BuildHistogram()
                       .Name("ditserve_time_to_first_step_seconds")
                       .Help("Time from admission to the end of the first denoising step.")
                       .Buckets(RequestLatencyBuckets())
                       .Register(registry),
                   f.time_to_first_step_seconds));
  DITSERVE_TRY(Reg(BuildHistogram()
                       .Name("ditserve_denoise_step_duration_seconds")
                       .Help("Duration of one denoising step, as reported by rank 0.")
                       .Buckets(StepLatencyBuckets())
                       .Register(registry),
                   f.denoise_step_duration_seconds));
  DITSERVE_TRY(Reg(BuildGauge()
                       .Name("ditserve_requests_in_flight")
                       .Help("Requests currently executing on the workers.")
                       .Register(registry),
                   f.requests_in_flight));
  DITSERVE_TRY(Reg(BuildGauge()
                       .Name("ditserve_queue_depth")
                       .Help("Requests admitted but not yet dispatched to the workers.")
                       .Register(registry),
                   f.queue_depth));
  DITSERVE_TRY(Reg(BuildGauge()
                       .Name("ditserve_queue_capacity")
                       .Help("Configured maximum number of queued requests.")
                       .Register(registry),
                   f.queue_capacity));
  DITSERVE_TRY(Reg(BuildCounter()
                       .Name("ditserve_images_generated_total")
                       .Help("Images returned to clients.")
                       .Register(registry),
                   f.images_generated_total));
  DITSERVE_TRY(Reg(BuildCounter()
                       .Name("ditserve_queue_dropped_total")
                       .Help("Requests removed from the queue without running, by reason.")
                       .Register(registry),
                   f.queue_dropped_total));
  DITSERVE_TRY(Reg(BuildGauge()
                       .Name("ditserve_build_info")
                       .Help("Build and model information; the value is always 1.")
                       .Register(registry),
                   f.build_info));

  // --- workers ---
  struct GaugeDef {
    const char* name;
    const char* help;
    Family<Gauge>** out;
  };
  for (const GaugeDef& d : {
           GaugeDef{"ditserve_worker_ready", "1 if the worker rank reported ready, else 0.",
                    &f.worker_ready},
           GaugeDef{"ditserve_worker_last_report_timestamp_seconds",
                    "Unix time of the frontend's last status report from the worker rank.",
                    &f.worker_last_report_timestamp_seconds},
           GaugeDef{"ditserve_worker_device_memory_allocated_bytes",
                    "Device memory held by live tensors on the worker rank.",
                    &f.worker_device_memory_allocated_bytes},
           GaugeDef{"ditserve_worker_device_memory_peak_allocated_bytes",
                    "Highest device memory held by live tensors on the worker rank since it started.",
                    &f.worker_device_memory_peak_allocated_bytes},
           GaugeDef{"ditserve_worker_device_memory_reserved_bytes",
                    "Device memory reserved by the caching allocator on the worker rank.",
                    &f.worker_device_memory_reserved_bytes},
           GaugeDef{"ditserve_worker_device_memory_total_bytes",
                    "Total memory of the worker rank's device (0 on CPU).",
                    &f.worker_device_memory_total_bytes},
           GaugeDef{"ditserve_worker_weight_bytes", "Bytes of the worker rank's weight shard.",
                    &f.worker_weight_bytes},
           GaugeDef{"ditserve_worker_load_duration_seconds",
                    "Duration of the worker rank's last model load.",
                    &f.worker_load_duration_seconds},
           GaugeDef{"ditserve_worker_resident_memory_bytes",
                    "Resident memory of the worker rank's process.",
                    &f.worker_resident_memory_bytes},
       }) {
    DITSERVE_TRY(Reg(BuildGauge().Name(d.name).Help(d.help).Register(registry), *d.out));
  }
  struct CounterDef {
    const char* name;
    const char* help;
    Family<Counter>** out;
  };
  for (const CounterDef& d : {
           CounterDef{"ditserve_worker_allreduce_operations_total",
                      "All-reduce operations run by the worker rank since it started.",
                      &f.worker_allreduce_operations_total},
           CounterDef{"ditserve_worker_allreduce_bytes_total",
                      "All-reduce payload bytes of the worker rank since it started.",
                      &f.worker_allreduce_bytes_total},
           CounterDef{"ditserve_worker_allreduce_seconds_total",
                      "Time the worker rank spent in all-reduce since it started.",
                      &f.worker_allreduce_seconds_total},
           CounterDef{"ditserve_worker_denoise_steps_total",
                      "Denoising steps executed by the worker rank since it started.",
                      &f.worker_denoise_steps_total},
           CounterDef{"ditserve_worker_denoise_step_seconds_total",
                      "Time the worker rank spent in denoising steps since it started.",
                      &f.worker_denoise_step_seconds_total},
       }) {
    DITSERVE_TRY(Reg(BuildCounter().Name(d.name).Help(d.help).Register(registry), *d.out));
  }

  // --- children known up front ---
  for (RpcMethod method : kMethods) {
    const int mi = static_cast<int>(method);
    for (int code = 0; code < kNumCodes; ++code) {
      DITSERVE_TRY(Child(f.requests_total,
                         {{"method", RpcMethodName(method)}, {"code", kCodeNames[code]}},
                         m->requests_[mi][code]));
    }
    DITSERVE_TRY(Child(f.request_duration_seconds, {{"method", RpcMethodName(method)}},
                       m->request_duration_[mi]));
  }
  for (QueueDropReason reason : kDropReasons) {
    DITSERVE_TRY(Child(f.queue_dropped_total, {{"reason", QueueDropReasonName(reason)}},
                       m->queue_dropped_[static_cast<int>(reason)]));
  }
  DITSERVE_TRY(Child(f.queue_wait_seconds, {}, m->queue_wait_));
  DITSERVE_TRY(Child(f.time_to_first_step_seconds, {}, m->time_to_first_step_));
  DITSERVE_TRY(Child(f.denoise_step_duration_seconds, {}, m->denoise_step_));
  DITSERVE_TRY(Child(f.requests_in_flight, {}, m->in_flight_));
  DITSERVE_TRY(Child(f.queue_depth, {}, m->queue_depth_));
  DITSERVE_TRY(Child(f.queue_capacity, {}, m->queue_capacity_));
  DITSERVE_TRY(Child(f.images_generated_total, {}, m->images_generated_));
  Gauge* info = nullptr;
  DITSERVE_TRY(Child(f.build_info,
                     {{"version", build.version},
                      {"model", build.model},
                      {"tp_degree", std::to_string(build.tp_degree)},
                      {"dtype", build.dtype}},
                     info));
  info->Set(1);
  return m;
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

absl::StatusOr<DitserveMetrics::RankChildren> DitserveMetrics::ResolveRankLocked(uint32_t rank) {
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) return it->second;
  const Labels labels = {{"rank", std::to_string(rank)}};
  RankChildren c{};
  DITSERVE_TRY(Child(f_.worker_ready, labels, c.ready));
  DITSERVE_TRY(Child(f_.worker_last_report_timestamp_seconds, labels, c.last_report));
  DITSERVE_TRY(Child(f_.worker_device_memory_allocated_bytes, labels, c.allocated));
  DITSERVE_TRY(Child(f_.worker_device_memory_peak_allocated_bytes, labels, c.peak_allocated));
  DITSERVE_TRY(Child(f_.worker_device_memory_reserved_bytes, labels, c.reserved));
  DITSERVE_TRY(Child(f_.worker_device_memory_total_bytes, labels, c.total));
  DITSERVE_TRY(Child(f_.worker_weight_bytes, labels, c.weight));
  DITSERVE_TRY(Child(f_.worker_load_duration_seconds, labels, c.load));
  DITSERVE_TRY(Child(f_.worker_resident_memory_bytes, labels, c.rss));
  DITSERVE_TRY(Child(f_.worker_allreduce_operations_total, labels, c.allreduce_ops));
  DITSERVE_TRY(Child(f_.worker_allreduce_bytes_total, labels, c.allreduce_bytes));
  DITSERVE_TRY(Child(f_.worker_allreduce_seconds_total, labels, c.allreduce_seconds));
  DITSERVE_TRY(Child(f_.worker_denoise_steps_total, labels, c.steps));
  DITSERVE_TRY(Child(f_.worker_denoise_step_seconds_total, labels, c.step_seconds));
  ranks_.emplace(rank, c);
  return c;
}

absl::Status DitserveMetrics::ReportWorker(uint32_t rank, const WorkerFigures& w) {
  std::lock_guard<std::mutex> lock(ranks_mu_);
  absl::StatusOr<RankChildren> resolved = ResolveRankLocked(rank);
  if (!resolved.ok()) return resolved.status();
  const RankChildren& c = *resolved;
  c.ready->Set(w.ready ? 1 : 0);
  c.allocated->Set(w.device_memory_allocated_bytes);
  c.peak_allocated->Set(w.device_memory_peak_allocated_bytes);
  c.reserved->Set(w.device_memory_reserved_bytes);
  c.total->Set(w.device_memory_total_bytes);
  c.weight->Set(w.weight_bytes);
  c.load->Set(w.load_seconds);
  c.rss->Set(w.resident_memory_bytes);
  c.allreduce_ops->SetCumulative(w.allreduce_count);
  c.allreduce_bytes->SetCumulative(w.allreduce_bytes);
  c.allreduce_seconds->SetCumulative(w.allreduce_seconds);
  c.steps->SetCumulative(w.denoise_steps);
  c.step_seconds->SetCumulative(w.denoise_step_seconds);
  c.last_report->SetToCurrentTime();
  return absl::OkStatus();
}

bool DitserveMetrics::ForgetWorker(uint32_t rank) {
  std::lock_guard<std::mutex> lock(ranks_mu_);
  if (ranks_.erase(rank) == 0) return false;
  const Labels labels = {{"rank", std::to_string(rank)}};
  for (Family<Gauge>* g :
       {f_.worker_ready, f_.worker_last_report_timestamp_seconds,
        f_.worker_device_memory_allocated_bytes, f_.worker_device_memory_peak_allocated_bytes,
        f_.worker_device_memory_reserved_bytes,
        f_.worker_device_memory_total_bytes, f_.worker_weight_bytes,
        f_.worker_load_duration_seconds, f_.worker_resident_memory_bytes}) {
    g->Remove(labels);
  }
  for (Family<Counter>* c :
       {f_.worker_allreduce_operations_total, f_.worker_allreduce_bytes_total,
        f_.worker_allreduce_seconds_total, f_.worker_denoise_steps_total,
        f_.worker_denoise_step_seconds_total}) {
    c->Remove(labels);
  }
  return true;
}

}  // namespace ditserve::metrics
