// The ditserve metric set: every ditserve_* family the frontend exports on its single /metrics
// endpoint (the process_* ones are process_metrics.h's). Names follow the Prometheus conventions
// (prefix "ditserve_", base units, counters end in _total); METRICS.md is the same list as a table
// for the README.
//
// Frontend figures (measured in the frontend process):
//   ditserve_requests_total{method,code}            counter   generation calls finished (gRPC
//       Generate / GenerateStream, HTTP ImagesGenerations / ImagesEdits), by final status code name
//       (OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...; the gRPC name also for HTTP calls); every
//       method x code pair starts at 0 so rate() and alerts work before the first event.
//   ditserve_request_duration_seconds{method}        histogram end-to-end latency, RPC arrival ->
//       final status, every outcome included.
//   ditserve_queue_wait_seconds                      histogram admission -> dispatch to the
//   workers. ditserve_time_to_first_step_seconds              histogram admission -> first
//   denoising step done
//       (queue wait + text encoding + first step: what a streaming client waits for first
//       progress).
//   ditserve_denoise_step_duration_seconds           histogram one denoising step, from rank 0's
//       progress events.
//   ditserve_requests_in_flight                      gauge     requests executing on the workers.
//   ditserve_queue_depth                             gauge     admitted, not yet dispatched.
//   ditserve_queue_capacity                          gauge     configured bound of the queue.
//   ditserve_images_generated_total                  counter   images returned to clients.
//   ditserve_queue_dropped_total{reason}             counter   requests removed from the queue
//       without running: deadline_expired, cancelled, shutdown.
//   ditserve_worker_group_permanent_failures_total   counter   group formations that failed with a
//       permanent load error (server/worker_group.h; reason in GetModelInfo's not_serving_reason).
//   ditserve_lora_requests_total{adapter}            counter   requests dispatched to the workers
//       with that LoRA adapter applied (one series per adapter loaded at start, from 0).
//   ditserve_build_info{version,model,tp_degree,dtype} gauge   always 1 (the _info pattern).
// Worker figures (one series per rank, label rank="0".."N-1"; workers send them over gRPC as
// WorkerStatus, the frontend copies them in with ReportWorker):
//   ditserve_worker_ready{rank}                      gauge     1 if the rank reported ready.
//   ditserve_worker_last_report_timestamp_seconds{rank} gauge  when the frontend last got a report;
//       time() - this = staleness (a hung worker stops advancing it).
//   ditserve_worker_device_memory_allocated_bytes{rank} gauge  bytes held by live tensors.
//   ditserve_worker_device_memory_peak_allocated_bytes{rank} gauge  the highest allocated_bytes
//   since
//       the worker started (what a request at the largest size served so far needed).
//   ditserve_worker_device_memory_reserved_bytes{rank}  gauge  bytes held by the caching allocator.
//   ditserve_worker_device_memory_total_bytes{rank}     gauge  device capacity (0 on CPU builds).
//   ditserve_worker_weight_bytes{rank}               gauge     bytes of this rank's weight shard.
//   ditserve_worker_load_duration_seconds{rank}      gauge     duration of the last model load.
//   ditserve_worker_resident_memory_bytes{rank}      gauge     the worker process's RSS.
//   ditserve_worker_allreduce_operations_total{rank} counter   all-reduce calls.
//   ditserve_worker_allreduce_bytes_total{rank}      counter   all-reduce payload bytes.
//   ditserve_worker_allreduce_seconds_total{rank}    counter   time spent in all-reduce.
//   ditserve_worker_denoise_steps_total{rank}        counter   denoising steps executed.
//   ditserve_worker_denoise_step_seconds_total{rank} counter   time spent in those steps
//       (mean step time = rate(..._step_seconds_total) / rate(..._steps_total); stragglers show
//       here).
//   ditserve_worker_cached_steps_total{rank}         counter   transformer passes answered from the
//       step cache (GenerateRequest.cache_threshold; a true-CFG step is two passes).
//   ditserve_worker_cuda_graph_replays_total{rank}   counter   transformer forwards replayed from a
//       CUDA graph (models/common/step_graphs.h; against ..._denoise_steps_total: how many ran so).
//   ditserve_worker_cuda_graph_captures_total{rank}  counter   CUDA graphs captured (one per
//   request
//       shape in use; a steady rise means shapes churn past --cuda-graphs).
// The worker figures live in a WorkerSeries (worker_series.h): the *_total ones are cumulative
// values kept by each worker, exported as counters set to the reported total (prometheus-cpp's
// Counter only increments); promtool requires counters for *_total names, and a worker restart
// shows up as a counter reset, which rate() handles.
//
// Built on prometheus-cpp: the frontend families are prometheus::Counter / Gauge / Histogram on a
// prometheus::Registry this object owns; Collect() returns them followed by the worker families.
// Thread-safety: every method may be called from any thread. Hot-path methods touch only children
// resolved at construction (prometheus-cpp's atomics, or a histogram's short mutex); ReportWorker
// takes one small mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "metrics/worker_series.h"

namespace ditserve::metrics {

// End-to-end, queue-wait and time-to-first-step buckets: 10 ms .. 10 min, dense between 1 s and
// 60 s where diffusion requests live.
const std::vector<double>& RequestLatencyBuckets();
// Per-step buckets: 10 ms (H200, small images) .. 60 s (CPU, large images).
const std::vector<double>& StepLatencyBuckets();

struct BuildInfo {
  std::string version;  // e.g. DITSERVE_VERSION
  std::string model;    // e.g. "flux1"
  int tp_degree = 1;
  std::string dtype;  // e.g. "bfloat16"
};

// Label method="Generate" / "GenerateStream" (the gRPC calls) / "ImagesGenerations" /
// "ImagesEdits" (the HTTP API's POST /v1/images/generations and /v1/images/edits).
enum class RpcMethod { kGenerate, kGenerateStream, kImagesGenerations, kImagesEdits };
// Label reason="deadline_expired" / "cancelled" / "shutdown".
enum class QueueDropReason { kDeadlineExpired, kCancelled, kShutdown };

class DitserveMetrics final : public prometheus::Collectable {
 public:
  // Registers every frontend family on its own registry and pre-creates the label combinations
  // known up front, at 0. The set is fixed and valid, so this cannot fail.
  explicit DitserveMetrics(const BuildInfo& build);
  DitserveMetrics(const DitserveMetrics&) = delete;
  DitserveMetrics& operator=(const DitserveMetrics&) = delete;

  // --- frontend ---
  // One generation RPC finished with `code` after `seconds` (end to end).
  void RequestFinished(RpcMethod method, absl::StatusCode code, double seconds);
  void ObserveQueueWait(double seconds) { queue_wait_->Observe(seconds); }
  void ObserveTimeToFirstStep(double seconds) { time_to_first_step_->Observe(seconds); }
  void ObserveDenoiseStep(double seconds) { denoise_step_->Observe(seconds); }
  void ImagesGenerated(double count) { images_generated_->Increment(count); }
  void QueueDropped(QueueDropReason reason);
  // Creates the adapter's series at 0 (the adapters loaded at start); later calls add none.
  void DeclareLoraAdapter(const std::string& name);
  // A request naming `adapter` was dispatched; an undeclared name is not counted.
  void LoraRequestStarted(const std::string& adapter);
  prometheus::Gauge& requests_in_flight() { return *in_flight_; }
  prometheus::Gauge& queue_depth() { return *queue_depth_; }
  prometheus::Gauge& queue_capacity() { return *queue_capacity_; }
  // The worker group's count of formations that failed with a permanent load error (a bad or
  // missing model file; server/worker_group.h), a running total: the counter advances by what it
  // grew since the last report (a smaller total is ignored).
  void ReportPermanentFormationFailures(uint64_t total);

  // --- workers ---
  // Copies one worker's report into the rank's series (creating them on the first report) and
  // stamps ditserve_worker_last_report_timestamp_seconds with the current time.
  void ReportWorker(uint32_t rank, const WorkerFigures& figures);

  // Every family with at least one series: the frontend's (in prometheus-cpp's order: counters,
  // gauges, histograms), then the workers' (worker_series.h). Serialise with exposition.h.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  static constexpr int kNumCodes = 17;   // absl::StatusCode / grpc::StatusCode 0..16
  static constexpr int kNumMethods = 4;  // RpcMethod

  prometheus::Registry registry_;  // the frontend families; declared first, destroyed last
  WorkerSeries workers_;
  prometheus::Counter* requests_[kNumMethods][kNumCodes] = {};
  prometheus::Histogram* request_duration_[kNumMethods] = {};
  prometheus::Histogram* queue_wait_ = nullptr;
  prometheus::Histogram* time_to_first_step_ = nullptr;
  prometheus::Histogram* denoise_step_ = nullptr;
  prometheus::Gauge* in_flight_ = nullptr;
  prometheus::Gauge* queue_depth_ = nullptr;
  prometheus::Gauge* queue_capacity_ = nullptr;
  prometheus::Counter* images_generated_ = nullptr;
  prometheus::Counter* queue_dropped_[3] = {};
  prometheus::Family<prometheus::Counter>* lora_requests_ = nullptr;
  prometheus::Counter* permanent_formation_failures_ = nullptr;
  std::mutex formation_mu_;
  uint64_t permanent_formation_failures_seen_ = 0;  // guarded by formation_mu_

  std::mutex lora_mu_;
  std::map<std::string, prometheus::Counter*> lora_children_;  // guarded by lora_mu_
};

}  // namespace ditserve::metrics
