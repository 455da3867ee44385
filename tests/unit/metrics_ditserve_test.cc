// The ditserve metric set: conventions, pre-initialised series, and the frontend/worker helpers
// landing in the right series.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "metrics/ditserve_metrics.h"
#include "metrics/exposition.h"
#include "tests/support/metrics_scrape.h"

namespace ditserve::metrics {
namespace {

TEST(DitserveMetrics, NamesFollowPrometheusConventions) {
  DitserveMetrics m({"0.1.0", "flux1", 2, "bfloat16"});
  m.ReportWorker(0, {});  // so worker families have series
  const ParsedExposition p = Scrape(m);
  EXPECT_EQ(p.types.size(), 29u);  // 11 frontend families + 17 worker families + the group's
  for (const auto& [name, type] : p.types) {
    EXPECT_TRUE(absl::StartsWith(name, "ditserve_")) << name;
    EXPECT_EQ(absl::EndsWith(name, "_total"), type == "counter") << name << " " << type;
    if (type == "histogram") {
      EXPECT_TRUE(absl::EndsWith(name, "_seconds")) << name;
    }
    EXPECT_FALSE(p.help.at(name).empty()) << name;
    for (const char* bad_unit : {"_ms", "_milliseconds", "_us", "_mb", "_percent"}) {
      EXPECT_EQ(name.find(bad_unit), std::string::npos) << name;
    }
  }
  EXPECT_EQ(RequestLatencyBuckets().front(), 0.01);
  EXPECT_EQ(RequestLatencyBuckets().back(), 600);
  EXPECT_EQ(StepLatencyBuckets().front(), 0.01);
}

TEST(DitserveMetrics, PreInitialisesKnownSeriesAndBuildInfo) {
  DitserveMetrics m({"0.1.0", "flux1", 4, "bfloat16"});
  m.DeclareLoraAdapter("style");
  m.DeclareLoraAdapter("style");  // a second declaration adds nothing
  const ParsedExposition p = Scrape(m);
  for (const char* method : {"Generate", "GenerateStream", "ImagesGenerations", "ImagesEdits"}) {
    for (const char* code : {"OK", "CANCELLED", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                             "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "UNAUTHENTICATED"}) {
      EXPECT_EQ(Value(p, "ditserve_requests_total", {{"method", method}, {"code", code}}), 0);
    }
    EXPECT_EQ(Value(p, "ditserve_request_duration_seconds_count", {{"method", method}}), 0);
    EXPECT_EQ(
        Value(p, "ditserve_request_duration_seconds_bucket", {{"method", method}, {"le", "+Inf"}}),
        0);
  }
  int request_series = 0;
  for (const ParsedSample& s : p.samples) request_series += s.name == "ditserve_requests_total";
  EXPECT_EQ(request_series, 4 * 17) << "every method x code pair";
  for (const char* name :
       {"ditserve_queue_wait_seconds_count", "ditserve_time_to_first_step_seconds_count",
        "ditserve_denoise_step_duration_seconds_count", "ditserve_requests_in_flight",
        "ditserve_queue_depth", "ditserve_queue_capacity", "ditserve_images_generated_total"}) {
    EXPECT_EQ(Value(p, name, {}), 0) << name;
  }
  EXPECT_EQ(Value(p, "ditserve_lora_requests_total", {{"adapter", "style"}}), 0);
  for (const char* reason : {"deadline_expired", "cancelled", "shutdown"}) {
    EXPECT_EQ(Value(p, "ditserve_queue_dropped_total", {{"reason", reason}}), 0);
  }
  EXPECT_EQ(
      Value(p, "ditserve_build_info",
            {{"version", "0.1.0"}, {"model", "flux1"}, {"tp_degree", "4"}, {"dtype", "bfloat16"}}),
      1);
  EXPECT_EQ(p.types.count("ditserve_worker_ready"), 0u) << "no rank has reported yet";
  EXPECT_EQ(p.types.at("ditserve_request_duration_seconds"), "histogram");
  EXPECT_EQ(p.types.at("ditserve_requests_total"), "counter");
  EXPECT_EQ(p.types.at("ditserve_build_info"), "gauge");
}

TEST(DitserveMetrics, FrontendHelpersHitTheRightSeries) {
  DitserveMetrics m({"0.1.0", "flux1", 1, "float32"});
  m.DeclareLoraAdapter("style");
  m.RequestFinished(RpcMethod::kGenerate, absl::StatusCode::kOk, 4.0);
  m.RequestFinished(RpcMethod::kGenerate, absl::StatusCode::kOk, 6.0);
  m.RequestFinished(RpcMethod::kGenerateStream, absl::StatusCode::kResourceExhausted, 0.001);
  m.RequestFinished(RpcMethod::kGenerate, static_cast<absl::StatusCode>(99), 1);  // -> UNKNOWN
  m.ObserveQueueWait(0.2);
  m.ObserveTimeToFirstStep(1.5);
  m.ObserveDenoiseStep(0.04);
  m.ImagesGenerated(2);
  m.QueueDropped(QueueDropReason::kDeadlineExpired);
  m.requests_in_flight().Set(1);
  m.queue_depth().Set(3);
  m.queue_capacity().Set(16);
  m.LoraRequestStarted("style");
  m.LoraRequestStarted("style");
  m.LoraRequestStarted("undeclared");  // not counted, no new series
  const ParsedExposition p = Scrape(m);
  EXPECT_EQ(Value(p, "ditserve_requests_total", {{"method", "Generate"}, {"code", "OK"}}), 2);
  EXPECT_EQ(Value(p, "ditserve_requests_total",
                  {{"method", "GenerateStream"}, {"code", "RESOURCE_EXHAUSTED"}}),
            1);
  EXPECT_EQ(Value(p, "ditserve_requests_total", {{"method", "Generate"}, {"code", "UNKNOWN"}}), 1);
  EXPECT_EQ(Value(p, "ditserve_request_duration_seconds_sum", {{"method", "Generate"}}), 11);
  EXPECT_EQ(
      Value(p, "ditserve_request_duration_seconds_bucket", {{"method", "Generate"}, {"le", "5"}}),
      2);
  EXPECT_EQ(Value(p, "ditserve_request_duration_seconds_count", {{"method", "Generate"}}), 3);
  EXPECT_EQ(Value(p, "ditserve_request_duration_seconds_bucket",
                  {{"method", "GenerateStream"}, {"le", "0.01"}}),
            1);
  EXPECT_EQ(Value(p, "ditserve_queue_wait_seconds_bucket", {{"le", "0.25"}}), 1);
  EXPECT_EQ(Value(p, "ditserve_queue_wait_seconds_bucket", {{"le", "0.1"}}), 0);
  EXPECT_EQ(Value(p, "ditserve_time_to_first_step_seconds_count", {}), 1);
  EXPECT_EQ(Value(p, "ditserve_denoise_step_duration_seconds_bucket", {{"le", "0.05"}}), 1);
  EXPECT_EQ(Value(p, "ditserve_images_generated_total", {}), 2);
  EXPECT_EQ(Value(p, "ditserve_queue_dropped_total", {{"reason", "deadline_expired"}}), 1);
  EXPECT_EQ(Value(p, "ditserve_requests_in_flight", {}), 1);
  EXPECT_EQ(Value(p, "ditserve_queue_depth", {}), 3);
  EXPECT_EQ(Value(p, "ditserve_queue_capacity", {}), 16);
  EXPECT_EQ(Value(p, "ditserve_lora_requests_total", {{"adapter", "style"}}), 2);
  EXPECT_EQ(p.Find("ditserve_lora_requests_total", {{"adapter", "undeclared"}}), nullptr);
}

TEST(DitserveMetrics, PermanentFormationFailuresFollowTheGroupsTotal) {
  DitserveMetrics m({"0.1.0", "flux1", 1, "float32"});
  EXPECT_EQ(Value(Scrape(m), "ditserve_worker_group_permanent_failures_total", {}), 0);
  m.ReportPermanentFormationFailures(2);
  EXPECT_EQ(Value(Scrape(m), "ditserve_worker_group_permanent_failures_total", {}), 2);
  m.ReportPermanentFormationFailures(2);  // the same total again: no change
  m.ReportPermanentFormationFailures(1);  // a smaller total is ignored
  EXPECT_EQ(Value(Scrape(m), "ditserve_worker_group_permanent_failures_total", {}), 2);
  m.ReportPermanentFormationFailures(5);
  EXPECT_EQ(Value(Scrape(m), "ditserve_worker_group_permanent_failures_total", {}), 5);
}

TEST(DitserveMetrics, WorkerReportsLandUnderTheirRank) {
  DitserveMetrics m({"0.1.0", "flux1", 2, "float32"});
  // The frontend refreshes worker figures right before each scrape; the totals are cumulative.
  int refreshes = 0;
  auto refresh = [&] {
    ++refreshes;
    for (uint32_t rank = 0; rank < 2; ++rank) {
      WorkerFigures w;
      w.ready = rank == 0;
      w.device_memory_allocated_bytes = 1e9 * (rank + 1);
      w.device_memory_peak_allocated_bytes = 3e9 * (rank + 1);
      w.device_memory_reserved_bytes = 2e9;
      w.device_memory_total_bytes = 80.0 * (1ull << 30);
      w.weight_bytes = 12345678901;
      w.load_seconds = 42.5;
      w.resident_memory_bytes = 3e9;
      w.allreduce_count = 100 * refreshes;
      w.allreduce_bytes = 1e6 * refreshes;
      w.allreduce_seconds = 0.25 * refreshes;
      w.denoise_steps = 28 * refreshes;
      w.denoise_step_seconds = 14.0 * refreshes;
      w.cached_steps = 9 * refreshes;
      w.cuda_graph_replays = 26 * refreshes;
      w.cuda_graph_captures = 1 * refreshes;
      m.ReportWorker(rank, w);
    }
  };
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  refresh();
  Scrape(m);
  refresh();
  const ParsedExposition p = Scrape(m);  // second refresh: totals doubled
  const Labels r0 = {{"rank", "0"}}, r1 = {{"rank", "1"}};
  EXPECT_EQ(Value(p, "ditserve_worker_ready", r0), 1);
  EXPECT_EQ(Value(p, "ditserve_worker_ready", r1), 0);
  EXPECT_EQ(Value(p, "ditserve_worker_device_memory_allocated_bytes", r1), 2e9);
  EXPECT_EQ(Value(p, "ditserve_worker_device_memory_peak_allocated_bytes", r1), 6e9);
  EXPECT_EQ(Value(p, "ditserve_worker_device_memory_total_bytes", r0), 80.0 * (1ull << 30));
  EXPECT_EQ(Value(p, "ditserve_worker_weight_bytes", r0), 12345678901);
  EXPECT_EQ(Value(p, "ditserve_worker_load_duration_seconds", r0), 42.5);
  EXPECT_EQ(Value(p, "ditserve_worker_resident_memory_bytes", r1), 3e9);
  EXPECT_EQ(Value(p, "ditserve_worker_allreduce_operations_total", r0), 200);
  EXPECT_EQ(Value(p, "ditserve_worker_allreduce_bytes_total", r1), 2e6);
  EXPECT_EQ(Value(p, "ditserve_worker_allreduce_seconds_total", r0), 0.5);
  EXPECT_EQ(Value(p, "ditserve_worker_denoise_steps_total", r1), 56);
  EXPECT_EQ(Value(p, "ditserve_worker_denoise_step_seconds_total", r1), 28);
  EXPECT_EQ(Value(p, "ditserve_worker_cached_steps_total", r0), 18);
  EXPECT_EQ(p.types.at("ditserve_worker_cached_steps_total"), "counter");
  EXPECT_EQ(Value(p, "ditserve_worker_cuda_graph_replays_total", r0), 52);
  EXPECT_EQ(Value(p, "ditserve_worker_cuda_graph_captures_total", r1), 2);
  EXPECT_EQ(p.types.at("ditserve_worker_cuda_graph_replays_total"), "counter");
  EXPECT_GE(Value(p, "ditserve_worker_last_report_timestamp_seconds", r0), before);
  EXPECT_EQ(p.types.at("ditserve_worker_allreduce_bytes_total"), "counter");
}

TEST(DitserveMetrics, ConcurrentRecordingGivesExactTotals) {
  DitserveMetrics m({"0.1.0", "flux1", 1, "float32"});
  std::atomic<bool> stop{false};
  std::thread scraper([&] {
    while (!stop.load()) {
      auto parsed = ParseTextExposition(RenderTextExposition({&m}));
      ASSERT_TRUE(parsed.ok()) << parsed.status();
    }
  });
  constexpr int kThreads = 4, kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        m.RequestFinished(RpcMethod::kGenerate, absl::StatusCode::kOk, 0.5);
        m.ObserveDenoiseStep(0.04);
        m.requests_in_flight().Increment();
        m.requests_in_flight().Decrement();
        m.ReportWorker(static_cast<uint32_t>(t), WorkerFigures{});
      }
    });
  }
  for (auto& t : threads) t.join();
  stop.store(true);
  scraper.join();
  const ParsedExposition p = Scrape(m);
  EXPECT_EQ(Value(p, "ditserve_requests_total", {{"method", "Generate"}, {"code", "OK"}}),
            kThreads * kPerThread);
  EXPECT_EQ(Value(p, "ditserve_request_duration_seconds_sum", {{"method", "Generate"}}),
            0.5 * kThreads * kPerThread);
  EXPECT_EQ(Value(p, "ditserve_denoise_step_duration_seconds_count", {}), kThreads * kPerThread);
  EXPECT_EQ(Value(p, "ditserve_requests_in_flight", {}), 0);
  EXPECT_EQ(Value(p, "ditserve_worker_ready", {{"rank", "3"}}), 0);
}

}  // namespace
}  // namespace ditserve::metrics
