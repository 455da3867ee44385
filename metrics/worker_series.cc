#include "metrics/worker_series.h"

#include <iterator>
#include <string>

namespace ditserve::metrics {
namespace {

// One exported figure: its family and where its value comes from.
struct Figure {
  const char* name;
  const char* help;
  prometheus::MetricType type;
  double (*value)(const WorkerFigures& f, double report_time_seconds);
};

constexpr prometheus::MetricType kGauge = prometheus::MetricType::Gauge;
constexpr prometheus::MetricType kCounter = prometheus::MetricType::Counter;

// The families in export order (worker_series.h); names and help texts are part of the interface
// (METRICS.md, dashboards).
constexpr Figure kFigures[] = {
    {"ditserve_worker_ready", "1 if the worker rank reported ready, else 0.", kGauge,
     [](const WorkerFigures& f, double) { return f.ready ? 1.0 : 0.0; }},
    {"ditserve_worker_last_report_timestamp_seconds",
     "Unix time of the frontend's last status report from the worker rank.", kGauge,
     [](const WorkerFigures&, double t) { return t; }},
    {"ditserve_worker_device_memory_allocated_bytes",
     "Device memory held by live tensors on the worker rank.", kGauge,
     [](const WorkerFigures& f, double) { return f.device_memory_allocated_bytes; }},
    {"ditserve_worker_device_memory_peak_allocated_bytes",
     "Highest device memory held by live tensors on the worker rank since it started.", kGauge,
     [](const WorkerFigures& f, double) { return f.device_memory_peak_allocated_bytes; }},
    {"ditserve_worker_device_memory_reserved_bytes",
     "Device memory reserved by the caching allocator on the worker rank.", kGauge,
     [](const WorkerFigures& f, double) { return f.device_memory_reserved_bytes; }},
    {"ditserve_worker_device_memory_total_bytes",
     "Total memory of the worker rank's device (0 on CPU).", kGauge,
     [](const WorkerFigures& f, double) { return f.device_memory_total_bytes; }},
    {"ditserve_worker_weight_bytes", "Bytes of the worker rank's weight shard.", kGauge,
     [](const WorkerFigures& f, double) { return f.weight_bytes; }},
    {"ditserve_worker_load_duration_seconds", "Duration of the worker rank's last model load.",
     kGauge, [](const WorkerFigures& f, double) { return f.load_seconds; }},
    {"ditserve_worker_resident_memory_bytes", "Resident memory of the worker rank's process.",
     kGauge, [](const WorkerFigures& f, double) { return f.resident_memory_bytes; }},
    {"ditserve_worker_allreduce_operations_total",
     "All-reduce operations run by the worker rank since it started.", kCounter,
     [](const WorkerFigures& f, double) { return f.allreduce_count; }},
    {"ditserve_worker_allreduce_bytes_total",
     "All-reduce payload bytes of the worker rank since it started.", kCounter,
     [](const WorkerFigures& f, double) { return f.allreduce_bytes; }},
    {"ditserve_worker_allreduce_seconds_total",
     "Time the worker rank spent in all-reduce since it started.", kCounter,
     [](const WorkerFigures& f, double) { return f.allreduce_seconds; }},
    {"ditserve_worker_denoise_steps_total",
     "Denoising steps executed by the worker rank since it started.", kCounter,
     [](const WorkerFigures& f, double) { return f.denoise_steps; }},
    {"ditserve_worker_denoise_step_seconds_total",
     "Time the worker rank spent in denoising steps since it started.", kCounter,
     [](const WorkerFigures& f, double) { return f.denoise_step_seconds; }},
    {"ditserve_worker_cached_steps_total",
     "Transformer passes the worker rank answered from the step cache (First Block Cache: the "
     "first block only) since it started.",
     kCounter, [](const WorkerFigures& f, double) { return f.cached_steps; }},
    {"ditserve_worker_cuda_graph_replays_total",
     "Transformer forwards the worker rank replayed from a CUDA graph since it started.", kCounter,
     [](const WorkerFigures& f, double) { return f.cuda_graph_replays; }},
    {"ditserve_worker_cuda_graph_captures_total",
     "CUDA graphs of the transformer step the worker rank captured since it started.", kCounter,
     [](const WorkerFigures& f, double) { return f.cuda_graph_captures; }},
};

}  // namespace

void WorkerSeries::Report(uint32_t rank, const WorkerFigures& figures,
                          double report_time_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ranks_[rank] = Entry{figures, report_time_seconds};
}

std::vector<prometheus::MetricFamily> WorkerSeries::Collect() const {
  std::map<uint32_t, Entry> ranks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ranks = ranks_;
  }
  std::vector<prometheus::MetricFamily> out;
  if (ranks.empty()) return out;
  out.reserve(std::size(kFigures));
  for (const Figure& figure : kFigures) {
    prometheus::MetricFamily& family = out.emplace_back();
    family.name = figure.name;
    family.help = figure.help;
    family.type = figure.type;
    family.metric.reserve(ranks.size());
    for (const auto& [rank, entry] : ranks) {
      prometheus::ClientMetric& m = family.metric.emplace_back();
      m.label.push_back({"rank", std::to_string(rank)});
      const double value = figure.value(entry.figures, entry.report_time_seconds);
      if (figure.type == kCounter) {
        m.counter.value = value;
      } else {
        m.gauge.value = value;
      }
    }
  }
  return out;
}

}  // namespace ditserve::metrics
