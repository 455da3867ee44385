// The two costs of the metrics, on prometheus-cpp, without HTTP:
//   - the hot path: one finished request as the frontend records it (a labelled counter increment
//     plus a histogram observation) and one denoising-step observation, nanoseconds per call;
//   - one /metrics scrape body (collect + serialise) for the real ditserve metric set with four
//     worker ranks and the process metrics (~220 series, histograms populated).
// Usage: metrics_bench [iterations] [--no-process]   (prints the figures and the body size)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "metrics/ditserve_metrics.h"
#include "metrics/exposition.h"
#include "metrics/process_metrics.h"

namespace m = ditserve::metrics;

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (iterations <= 0) {
    std::fprintf(stderr, "usage: metrics_bench [iterations > 0] [--no-process]\n");
    return 2;
  }
  const bool with_process = !(argc > 2 && std::string(argv[2]) == "--no-process");
  m::DitserveMetrics dm({"0.1.0", "flux1", 4, "bfloat16"});
  m::ProcessMetrics process;
  std::vector<const prometheus::Collectable*> sources = {&dm};
  if (with_process) sources.push_back(&process);

  // Hot path: what the frontend records per request and per step.
  const int hot_calls = iterations * 100;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < hot_calls; ++i) {
    dm.RequestFinished(m::RpcMethod::kGenerate, absl::StatusCode::kOk, 0.5 + (i % 1000) * 0.01);
  }
  const double request_ns = SecondsSince(start) * 1e9 / hot_calls;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < hot_calls; ++i) dm.ObserveDenoiseStep(0.05 + (i % 50) * 0.01);
  const double step_ns = SecondsSince(start) * 1e9 / hot_calls;

  for (int i = 0; i < 1000; ++i) {
    dm.ObserveQueueWait(i * 0.003);
    dm.ObserveTimeToFirstStep(0.2 + i * 0.002);
  }
  for (uint32_t rank = 0; rank < 4; ++rank) {
    m::WorkerFigures w;
    w.ready = true;
    w.device_memory_allocated_bytes = 12e9 + rank;
    w.allreduce_count = 1234;
    dm.ReportWorker(rank, w);
  }

  // Sample lines of the body: one per counter/gauge series, buckets + _sum + _count per histogram.
  size_t series = 0;
  for (const prometheus::MetricFamily& f : m::CollectAll(sources)) {
    for (const prometheus::ClientMetric& s : f.metric) {
      series += f.type == prometheus::MetricType::Histogram ? s.histogram.bucket.size() + 2 : 1;
    }
  }
  std::string body;
  size_t bytes = 0;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    body = m::RenderTextExposition(sources);
    bytes += body.size();
  }
  const double scrape_us = SecondsSince(start) * 1e6 / iterations;
  std::printf(
      "request_finished_ns=%.1f denoise_step_ns=%.1f series=%zu body_bytes=%zu iterations=%d "
      "process_metrics=%s us_per_scrape=%.1f\n",
      request_ns, step_ns, series, body.size(), iterations, with_process ? "yes" : "no", scrape_us);
  return bytes > 0 ? 0 : 1;
}
