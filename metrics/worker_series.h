// WorkerSeries: the per-rank worker figures as a prometheus::Collectable. Workers keep their own
// totals (all-reduce operations, steps, ...) and report them cumulatively over gRPC; a
// prometheus::Counter can only Increment, so these figures are not prometheus-cpp metrics but a
// table of the latest report per rank, turned into families at collect time. The *_total figures
// are exported as counters whose value is the reported total (promtool requires counters for
// *_total names; a worker restart shows up as a counter reset, which rate() handles).
//
// Families, in this order (label rank="0".."N-1"; names, types and help as in METRICS.md):
//   gauges   ditserve_worker_ready, _last_report_timestamp_seconds, _device_memory_allocated_bytes,
//            _device_memory_peak_allocated_bytes, _device_memory_reserved_bytes,
//            _device_memory_total_bytes, _weight_bytes, _load_duration_seconds,
//            _resident_memory_bytes;
//   counters ditserve_worker_allreduce_operations_total, _allreduce_bytes_total,
//            _allreduce_seconds_total, _denoise_steps_total, _denoise_step_seconds_total,
//            _cached_steps_total, _cuda_graph_replays_total, _cuda_graph_captures_total.
// Before the first report no family is collected (a family without series is omitted, as
// prometheus-cpp's own Family does); each rank's series appear with its first report.
//
// Thread-safety: Report and Collect may be called from any thread at any time (one small mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

namespace ditserve::metrics {

// One worker's report (ditserve.worker.v1.WorkerStatus without the proto dependency). The
// allreduce_*, denoise_*, cached_steps and cuda_graph_* fields are cumulative since the worker
// started.
struct WorkerFigures {
  bool ready = false;
  double device_memory_allocated_bytes = 0;
  double device_memory_peak_allocated_bytes = 0;
  double device_memory_reserved_bytes = 0;
  double device_memory_total_bytes = 0;
  double weight_bytes = 0;
  double load_seconds = 0;
  double resident_memory_bytes = 0;
  double allreduce_count = 0;
  double allreduce_bytes = 0;
  double allreduce_seconds = 0;
  double denoise_steps = 0;
  double denoise_step_seconds = 0;
  double cached_steps = 0;  // transformer passes answered from the step cache
  double cuda_graph_replays = 0;
  double cuda_graph_captures = 0;
};

class WorkerSeries final : public prometheus::Collectable {
 public:
  WorkerSeries() = default;
  WorkerSeries(const WorkerSeries&) = delete;
  WorkerSeries& operator=(const WorkerSeries&) = delete;

  // Replaces the rank's figures with `figures`, received at `report_time_seconds` (Unix seconds;
  // exported as ditserve_worker_last_report_timestamp_seconds).
  void Report(uint32_t rank, const WorkerFigures& figures, double report_time_seconds);

  // One family per figure (the order above), one series per reported rank in rank order; nothing
  // before the first report.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Entry {
    WorkerFigures figures;
    double report_time_seconds = 0;
  };
  mutable std::mutex mu_;
  std::map<uint32_t, Entry> ranks_;  // guarded by mu_
};

}  // namespace ditserve::metrics
