// Cost of one /metrics scrape body (collect + serialise) for the real ditserve metric set with four
// worker ranks and the process metrics (~220 series, histograms populated), without HTTP.
// Usage: metrics_bench [iterations]   (prints microseconds per scrape and the body size)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "metrics/ditserve_metrics.h"
#include "metrics/process_metrics.h"
#include "metrics/registry.h"
#include "metrics/text_serializer.h"

namespace m = ditserve::metrics;

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  m::Registry registry;
  m::DitserveMetrics dm(registry, {"0.1.0", "flux1", 4, "bfloat16"});
  const bool with_process = !(argc > 2 && std::string(argv[2]) == "--no-process");
  if (with_process) {
    if (auto s = m::RegisterProcessMetrics(registry); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  for (int i = 0; i < 1000; ++i) {
    dm.RequestFinished(m::RpcMethod::kGenerate, absl::StatusCode::kOk, 0.5 + i * 0.01);
    dm.ObserveQueueWait(i * 0.003);
    dm.ObserveTimeToFirstStep(0.2 + i * 0.002);
    dm.ObserveDenoiseStep(0.05 + (i % 50) * 0.01);
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
  for (const m::MetricFamilySnapshot& f : registry.Collect()) {
    for (const m::MetricSnapshot& s : f.metrics) {
      series += f.type == m::MetricType::kHistogram ? s.histogram.upper_bounds.size() + 3 : 1;
    }
  }
  std::string body;
  size_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    body = m::SerializeText(registry.Collect());
    bytes += body.size();
  }
  const double total_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::printf("series=%zu body_bytes=%zu iterations=%d process_metrics=%s us_per_scrape=%.1f\n",
              series, body.size(), iterations, with_process ? "yes" : "no",
              total_us / iterations);
  return bytes > 0 ? 0 : 1;
}
