// End to end against Debian's real Prometheus server (2.42): it scrapes our MetricsHttpServer on
// loopback every second; we wait until `up` is 1, the histogram has samples, histogram_quantile
// works, an escaped label value round-trips, and a worker total from the custom collectable is a
// counter. Bounded to ~50 s; the Prometheus process and its
// temp dir are cleaned up even when an assertion fails.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "gtest/gtest.h"
#include "metrics/ditserve_metrics.h"
#include "metrics/http_server.h"
#include "tests/support/prometheus_process.h"

namespace ditserve::metrics {
namespace {

using Clock = std::chrono::steady_clock;
using testing::FreeLoopbackPort;
using testing::PrometheusProcess;

TEST(MetricsPrometheus, RealPrometheusScrapesAndQueriesOurEndpoint) {
  if (!testing::PrometheusAvailable()) {
    GTEST_SKIP() << "prometheus (or coreutils timeout) not installed";
  }
  DitserveMetrics metrics({"0.1.0", "flux1", 2, "bfloat16"});
  for (double s : {0.4, 0.8, 1.5, 2.5, 4.0, 8.0}) {
    metrics.RequestFinished(RpcMethod::kGenerate, absl::StatusCode::kOk, s);
  }
  WorkerFigures w;  // a worker's cumulative total, through the custom collectable
  w.ready = true;
  w.denoise_steps = 28;
  metrics.ReportWorker(0, w);
  prometheus::Registry extra;
  const std::string tricky = "a\"b\\c\nd";
  prometheus::BuildGauge()
      .Name("demo_escape_info")
      .Help("Escaping \\ check\nsecond line.")
      .Register(extra)
      .Add({{"value", tricky}})
      .Set(1);

  auto server = MetricsHttpServer::Start({"127.0.0.1", 0, 2}, {&metrics, &extra});
  ASSERT_TRUE(server.ok()) << server.status();
  const int api_port = FreeLoopbackPort();
  ASSERT_GT(api_port, 0);

  PrometheusProcess prometheus;
  ASSERT_TRUE(prometheus.Start({"127.0.0.1:" + std::to_string((*server)->port())}, api_port));
  httplib::Client client("127.0.0.1", api_port);
  client.set_connection_timeout(1);
  client.set_read_timeout(5);

  const auto deadline = Clock::now() + std::chrono::seconds(50);
  const auto started = Clock::now();
  bool up = false, histogram = false;
  while (Clock::now() < deadline && !(up && histogram)) {
    ASSERT_FALSE(prometheus.Exited()) << "prometheus exited:\n" << prometheus.Log();
    if (!up) {
      auto r = testing::PrometheusQuery(client, "up{job=\"ditserve\"}");
      up = r.size() == 1 && r[0]["value"][1] == "1";
    }
    if (up && !histogram) {
      auto r = testing::PrometheusQuery(client, "ditserve_request_duration_seconds_count{method=\"Generate\"}");
      histogram = r.size() == 1 && r[0]["value"][1] == "6";
    }
    if (!(up && histogram)) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(up) << "up{job=ditserve} never became 1 within 50 s\n" << prometheus.Log();
  ASSERT_TRUE(histogram) << "histogram samples never arrived\n" << prometheus.Log();
  std::printf("first successful scrape visible after %.1f s\n",
              std::chrono::duration<double>(Clock::now() - started).count());

  // The target is healthy with no scrape error.
  auto targets = client.Get("/api/v1/targets?state=active");
  ASSERT_TRUE(targets);
  auto tj = nlohmann::json::parse(targets->body);
  ASSERT_EQ(tj["data"]["activeTargets"].size(), 1u);
  EXPECT_EQ(tj["data"]["activeTargets"][0]["health"], "up");
  EXPECT_EQ(tj["data"]["activeTargets"][0]["lastError"], "");

  // Buckets are usable: median of {0.4,0.8,1.5,2.5,4,8} falls in (1, 3].
  auto q = testing::PrometheusQuery(client,
                 "histogram_quantile(0.5, sum by (le) "
                 "(ditserve_request_duration_seconds_bucket{method=\"Generate\"}))");
  ASSERT_EQ(q.size(), 1u);
  const double median = std::stod(q[0]["value"][1].get<std::string>());
  EXPECT_GT(median, 1);
  EXPECT_LE(median, 3);

  // Pre-initialised zero series and the escaped label value survive the trip.
  auto zero = testing::PrometheusQuery(client, "ditserve_requests_total{method=\"Generate\",code=\"RESOURCE_EXHAUSTED\"}");
  ASSERT_EQ(zero.size(), 1u);
  EXPECT_EQ(zero[0]["value"][1], "0");
  auto escaped = testing::PrometheusQuery(client, "demo_escape_info");
  ASSERT_EQ(escaped.size(), 1u);
  EXPECT_EQ(escaped[0]["metric"]["value"], tricky);
  auto worker = testing::PrometheusQuery(client, "ditserve_build_info");
  ASSERT_EQ(worker.size(), 1u);
  EXPECT_EQ(worker[0]["metric"]["tp_degree"], "2");

  auto steps = testing::PrometheusQuery(client, "ditserve_worker_denoise_steps_total{rank=\"0\"}");
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0]["value"][1], "28");

  // Metadata carries our TYPE and HELP.
  auto meta = client.Get("/api/v1/metadata?metric=ditserve_request_duration_seconds");
  ASSERT_TRUE(meta);
  auto mj = nlohmann::json::parse(meta->body);
  ASSERT_FALSE(mj["data"]["ditserve_request_duration_seconds"].empty()) << meta->body;
  EXPECT_EQ(mj["data"]["ditserve_request_duration_seconds"][0]["type"], "histogram");
  auto worker_meta = client.Get("/api/v1/metadata?metric=ditserve_worker_denoise_steps_total");
  ASSERT_TRUE(worker_meta);
  auto wj = nlohmann::json::parse(worker_meta->body);
  ASSERT_FALSE(wj["data"]["ditserve_worker_denoise_steps_total"].empty()) << worker_meta->body;
  EXPECT_EQ(wj["data"]["ditserve_worker_denoise_steps_total"][0]["type"], "counter");
}

}  // namespace
}  // namespace ditserve::metrics
