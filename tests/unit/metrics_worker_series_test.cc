// WorkerSeries, the custom prometheus::Collectable for the per-rank worker figures: nothing before
// the first report, one series per rank under the right family and type, cumulative totals exported
// as reported (a restart is a counter reset), and consistent collections under concurrent reports.
#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "metrics/exposition.h"
#include "metrics/worker_series.h"
#include "tests/support/metrics_scrape.h"

namespace ditserve::metrics {
namespace {

TEST(MetricsWorkerSeries, NoFamiliesBeforeTheFirstReport) {
  WorkerSeries w;
  EXPECT_TRUE(w.Collect().empty());
  EXPECT_EQ(RenderTextExposition({&w}), "");
}

TEST(MetricsWorkerSeries, EveryFigureLandsUnderItsRankWithItsType) {
  WorkerSeries w;
  WorkerFigures f;
  f.ready = true;
  f.device_memory_allocated_bytes = 1e9;
  f.device_memory_peak_allocated_bytes = 3e9;
  f.device_memory_reserved_bytes = 2e9;
  f.device_memory_total_bytes = 80.0 * (1ull << 30);
  f.weight_bytes = 12345678901;
  f.load_seconds = 42.5;
  f.resident_memory_bytes = 3e9;
  f.allreduce_count = 100;
  f.allreduce_bytes = 1e6;
  f.allreduce_seconds = 0.25;
  f.denoise_steps = 28;
  f.denoise_step_seconds = 14;
  f.cached_steps = 11;
  f.cuda_graph_replays = 26;
  f.cuda_graph_captures = 1;
  w.Report(1, f, 1.7e9);
  w.Report(0, WorkerFigures{}, 1.8e9);

  const std::vector<prometheus::MetricFamily> families = w.Collect();
  ASSERT_EQ(families.size(), 17u);
  std::set<std::string> names;
  for (const prometheus::MetricFamily& family : families) {
    names.insert(family.name);
    EXPECT_TRUE(absl::StartsWith(family.name, "ditserve_worker_")) << family.name;
    EXPECT_FALSE(family.help.empty()) << family.name;
    EXPECT_EQ(family.type == prometheus::MetricType::Counter, absl::EndsWith(family.name, "_total"))
        << family.name;
    ASSERT_EQ(family.metric.size(), 2u) << family.name;
    EXPECT_EQ(family.metric[0].label.size(), 1u);
    EXPECT_EQ(family.metric[0].label[0].name, "rank");
    EXPECT_EQ(family.metric[0].label[0].value, "0") << "series in rank order";
    EXPECT_EQ(family.metric[1].label[0].value, "1");
  }
  EXPECT_EQ(names.size(), 17u) << "no family twice";

  const ParsedExposition p = Scrape(w);
  const Labels r0 = {{"rank", "0"}}, r1 = {{"rank", "1"}};
  EXPECT_EQ(Value(p, "ditserve_worker_ready", r1), 1);
  EXPECT_EQ(Value(p, "ditserve_worker_ready", r0), 0);
  EXPECT_EQ(Value(p, "ditserve_worker_last_report_timestamp_seconds", r1), 1.7e9);
  EXPECT_EQ(Value(p, "ditserve_worker_last_report_timestamp_seconds", r0), 1.8e9);
  EXPECT_EQ(Value(p, "ditserve_worker_device_memory_allocated_bytes", r1), 1e9);
  EXPECT_EQ(Value(p, "ditserve_worker_device_memory_peak_allocated_bytes", r1), 3e9);
  EXPECT_EQ(Value(p, "ditserve_worker_device_memory_reserved_bytes", r1), 2e9);
  EXPECT_EQ(Value(p, "ditserve_worker_device_memory_total_bytes", r1), 80.0 * (1ull << 30));
  EXPECT_EQ(Value(p, "ditserve_worker_weight_bytes", r1), 12345678901);
  EXPECT_EQ(Value(p, "ditserve_worker_load_duration_seconds", r1), 42.5);
  EXPECT_EQ(Value(p, "ditserve_worker_resident_memory_bytes", r1), 3e9);
  EXPECT_EQ(Value(p, "ditserve_worker_allreduce_operations_total", r1), 100);
  EXPECT_EQ(Value(p, "ditserve_worker_allreduce_bytes_total", r1), 1e6);
  EXPECT_EQ(Value(p, "ditserve_worker_allreduce_seconds_total", r1), 0.25);
  EXPECT_EQ(Value(p, "ditserve_worker_denoise_steps_total", r1), 28);
  EXPECT_EQ(Value(p, "ditserve_worker_denoise_step_seconds_total", r1), 14);
  EXPECT_EQ(Value(p, "ditserve_worker_cached_steps_total", r1), 11);
  EXPECT_EQ(Value(p, "ditserve_worker_cached_steps_total", r0), 0);
  EXPECT_EQ(p.types.at("ditserve_worker_cached_steps_total"), "counter");
  EXPECT_EQ(Value(p, "ditserve_worker_cuda_graph_replays_total", r1), 26);
  EXPECT_EQ(Value(p, "ditserve_worker_cuda_graph_captures_total", r1), 1);
  EXPECT_EQ(Value(p, "ditserve_worker_denoise_steps_total", r0), 0) << "a reported rank starts at 0";
  EXPECT_EQ(p.types.at("ditserve_worker_allreduce_bytes_total"), "counter");
  EXPECT_EQ(p.types.at("ditserve_worker_weight_bytes"), "gauge");
}

TEST(MetricsWorkerSeries, TotalsAreTheReportedCumulativeValues) {
  WorkerSeries w;
  WorkerFigures f;
  f.denoise_steps = 50;
  w.Report(0, f, 1);
  f.denoise_steps = 80;
  w.Report(0, f, 2);
  EXPECT_EQ(Value(Scrape(w), "ditserve_worker_denoise_steps_total", {{"rank", "0"}}), 80)
      << "set to the total, not added";
  f.denoise_steps = 3;  // the worker restarted: a counter reset, as rate() expects
  w.Report(0, f, 3);
  EXPECT_EQ(Value(Scrape(w), "ditserve_worker_denoise_steps_total", {{"rank", "0"}}), 3);
}

TEST(MetricsWorkerSeries, CollectionsStayWholeWhileRanksReport) {
  WorkerSeries w;
  std::atomic<bool> stop{false};
  std::vector<std::thread> reporters;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    reporters.emplace_back([&, rank] {
      WorkerFigures f;
      while (!stop.load()) {
        // Within one report, steps and step seconds move together.
        f.denoise_steps += 1;
        f.denoise_step_seconds = f.denoise_steps * 2;
        w.Report(rank, f, f.denoise_steps);
      }
    });
  }
  for (int i = 0; i < 200; ++i) {
    for (const prometheus::MetricFamily& family : w.Collect()) {
      EXPECT_LE(family.metric.size(), 4u);
    }
    auto parsed = ParseTextExposition(RenderTextExposition({&w}));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    for (uint32_t rank = 0; rank < 4; ++rank) {
      const Labels labels = {{"rank", std::to_string(rank)}};
      const ParsedSample* steps = parsed->Find("ditserve_worker_denoise_steps_total", labels);
      if (steps == nullptr) continue;  // not reported yet
      const ParsedSample* seconds = parsed->Find("ditserve_worker_denoise_step_seconds_total", labels);
      ASSERT_NE(seconds, nullptr);
      EXPECT_EQ(seconds->value, 2 * steps->value) << "figures of one report, never mixed";
    }
  }
  stop.store(true);
  for (auto& t : reporters) t.join();
}

}  // namespace
}  // namespace ditserve::metrics
