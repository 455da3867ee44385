// Debian's real Prometheus scraping the real frontend (2 spawned CPU workers, tiny FLUX.1): after
// one generate call, Prometheus's HTTP API must show the target up, the request latency histogram
// with that request, and the memory gauges of the frontend and of every worker rank.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ditserve/v1/ditserve.grpc.pb.h"
#include "tests/support/fixtures.h"
#include "tests/support/prometheus_process.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Value(const nlohmann::json& sample) { return std::stod(sample["value"][1].get<std::string>()); }

TEST(PrometheusE2E, ScrapesTheRunningFrontendAndItsWorkers) {
  if (!PrometheusAvailable()) GTEST_SKIP() << "prometheus (or coreutils timeout) not installed";
  auto server = ServerProcess::Start({"--model", FixturesDir() + "/flux1-tiny", "--spawn-workers", "2"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->WaitUntilServing(std::chrono::seconds(180))) << (*server)->log_path();

  v1::GenerateRequest request;
  request.set_prompt("a lighthouse");
  request.set_height(64);
  request.set_width(64);
  request.set_num_inference_steps(2);
  request.set_seed(3);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::GenerateResponse response;
  auto stub = v1::ImageGeneration::NewStub((*server)->Channel());
  grpc::Status s = stub->Generate(&ctx, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();

  const int api_port = FreeLoopbackPort();
  ASSERT_GT(api_port, 0);
  PrometheusProcess prometheus;
  ASSERT_TRUE(prometheus.Start({"127.0.0.1:" + std::to_string((*server)->metrics_port())}, api_port));
  httplib::Client client("127.0.0.1", api_port);
  client.set_connection_timeout(1);
  client.set_read_timeout(5);

  // Everything below must become visible within one or two scrapes (1 s interval).
  const auto deadline = Clock::now() + std::chrono::seconds(50);
  nlohmann::json up, latency, frontend_rss, worker_rss, weights;
  while (Clock::now() < deadline) {
    ASSERT_FALSE(prometheus.Exited()) << "prometheus exited:\n" << prometheus.Log();
    up = PrometheusQuery(client, "up{job=\"ditserve\"}");
    latency = PrometheusQuery(client, "ditserve_request_duration_seconds_count{method=\"Generate\"}");
    frontend_rss = PrometheusQuery(client, "process_resident_memory_bytes{job=\"ditserve\"}");
    worker_rss = PrometheusQuery(client, "ditserve_worker_resident_memory_bytes");
    weights = PrometheusQuery(client, "ditserve_worker_weight_bytes");
    if (up.size() == 1 && Value(up[0]) == 1 && latency.size() == 1 && frontend_rss.size() == 1 &&
        worker_rss.size() == 2 && weights.size() == 2) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_EQ(up.size(), 1u) << prometheus.Log();
  EXPECT_EQ(Value(up[0]), 1);
  ASSERT_EQ(latency.size(), 1u) << "no latency histogram in Prometheus";
  EXPECT_EQ(Value(latency[0]), 1);  // exactly our request
  ASSERT_EQ(frontend_rss.size(), 1u);
  EXPECT_GT(Value(frontend_rss[0]), 1 << 20);
  ASSERT_EQ(worker_rss.size(), 2u) << "want one resident-memory series per worker rank";
  ASSERT_EQ(weights.size(), 2u);
  for (const auto& series : {worker_rss, weights}) {
    std::set<std::string> ranks;
    for (const auto& sample : series) {
      ranks.insert(sample["metric"]["rank"].get<std::string>());
      EXPECT_GT(Value(sample), 0) << sample.dump();
    }
    EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"}));
  }
  // The histogram's buckets hold the request: its latency quantile is finite and positive.
  auto p50 = PrometheusQuery(client,
                             "histogram_quantile(0.5, sum by (le) "
                             "(ditserve_request_duration_seconds_bucket{method=\"Generate\"}))");
  ASSERT_EQ(p50.size(), 1u);
  EXPECT_GT(Value(p50[0]), 0);
  EXPECT_EQ((*server)->Stop(), 0);
}

}  // namespace
}  // namespace ditserve::testing
