// MetricsHttpServer over real loopback HTTP (prometheus-cpp collectables, its TextSerializer):
// Content-Type, body structure, `promtool check metrics`, the before-scrape hook, /healthz, 404s,
// port conflicts, concurrent scrapes, Stop.
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "metrics/ditserve_metrics.h"
#include "metrics/exposition.h"
#include "metrics/http_server.h"
#include "metrics/process_metrics.h"
#include "tests/support/exposition_parser.h"

namespace ditserve::metrics {
namespace {

constexpr char kPromtool[] = "/usr/bin/promtool";

struct Fixture {
  std::unique_ptr<DitserveMetrics> metrics;
  ProcessMetrics process;
  prometheus::Registry extra;
};

std::unique_ptr<Fixture> MakeFixture() {
  auto f = std::make_unique<Fixture>();
  f->metrics = std::make_unique<DitserveMetrics>(BuildInfo{"0.1.0", "flux1", 2, "bfloat16"});
  f->metrics->RequestFinished(RpcMethod::kGenerate, absl::StatusCode::kOk, 3.2);
  f->metrics->ObserveDenoiseStep(0.11);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    WorkerFigures w;
    w.ready = true;
    w.allreduce_bytes = 1e9;
    f->metrics->ReportWorker(rank, w);
  }
  prometheus::BuildGauge()
      .Name("demo_escape_info")
      .Help("Escapes: \\ and \"q\"\nnext line.")
      .Register(f->extra)
      .Add({{"value", "a\"b\\c\nd"}})
      .Set(1);
  return f;
}

// Runs `promtool check metrics` on `body`; returns its exit code and output.
int Promtool(const std::string& body, std::string& output) {
  char path[] = "/tmp/metrics_http_test_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return -1;
  (void)!write(fd, body.data(), body.size());
  close(fd);
  SpawnOptions o({kPromtool, "check", "metrics"});
  o.stdin_from = path;
  o.stdout_to = Redirect::Pipe();
  o.stderr_to = Redirect::ToStdout();
  auto promtool = Subprocess::Spawn(o);
  if (!promtool.ok()) {
    output = promtool.status().ToString();
    unlink(path);
    return -1;
  }
  char buf[512];
  ssize_t n;
  while ((n = read(promtool->stdout_fd(), buf, sizeof(buf))) > 0) output.append(buf, n);
  const int code = promtool->Wait().exit_code();
  unlink(path);
  return code;
}

TEST(MetricsHttp, ServesMetricsWithTheRightContentTypeAndAValidBody) {
  auto f = MakeFixture();
  // The hook runs before every collection: a scrape counter it bumps is already bumped in the body.
  prometheus::Counter& scrapes = prometheus::BuildCounter()
                                     .Name("demo_scrapes_total")
                                     .Help("Scrapes seen by the before-scrape hook.")
                                     .Register(f->extra)
                                     .Add({});
  auto server = MetricsHttpServer::Start({"127.0.0.1", 0, 2},
                                         {f->metrics.get(), &f->process, &f->extra},
                                         [&scrapes] { scrapes.Increment(); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  auto parsed = ParseTextExposition(res->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << res->body;
  EXPECT_EQ(parsed->types.at("ditserve_request_duration_seconds"), "histogram");
  EXPECT_EQ(parsed->types.at("process_cpu_seconds_total"), "counter");
  ASSERT_NE(parsed->Find("demo_scrapes_total", {}), nullptr);
  EXPECT_EQ(parsed->Find("demo_scrapes_total", {})->value, 1) << "hook ran before the collection";
  EXPECT_EQ(parsed->help.at("demo_escape_info"), "Escapes: \\ and \"q\"\nnext line.");
  EXPECT_NE(parsed->Find("ditserve_requests_total", {{"method", "Generate"}, {"code", "UNAVAILABLE"}}),
            nullptr)
      << "pre-initialised zero series are served";
  EXPECT_NE(parsed->Find("demo_escape_info", {{"value", "a\"b\\c\nd"}}), nullptr);
  EXPECT_NE(parsed->Find("ditserve_worker_ready", {{"rank", "1"}}), nullptr);

  // Compressed transfer (Prometheus asks for gzip) carries the same body.
  httplib::Headers gzip = {{"Accept-Encoding", "gzip"}};
  auto zipped = client.Get("/metrics", gzip);
  ASSERT_TRUE(zipped);
  auto zipped_parsed = ParseTextExposition(zipped->body);
  ASSERT_TRUE(zipped_parsed.ok()) << zipped_parsed.status();
  ASSERT_NE(zipped_parsed->Find("demo_scrapes_total", {}), nullptr);
  EXPECT_EQ(zipped_parsed->Find("demo_scrapes_total", {})->value, 2);

  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  std::string output;
  EXPECT_EQ(Promtool(res->body, output), 0) << output << "\n" << res->body;
}

TEST(MetricsHttp, PromtoolCatchesALintProblemSoTheGateIsReal) {
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  prometheus::Registry r;
  prometheus::BuildCounter().Name("demo_requests").Help("counter without _total").Register(r).Add({});
  std::string output;
  EXPECT_NE(Promtool(RenderTextExposition({&r}), output), 0);
  EXPECT_NE(output.find("_total"), std::string::npos) << output;
}

TEST(MetricsHttp, HealthzNotFoundAndPortConflict) {
  prometheus::Registry r;
  auto server = MetricsHttpServer::Start({"127.0.0.1", 0, 1}, {&r});
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_read_timeout(5);
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  auto missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto empty = client.Get("/metrics");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->body, "");

  auto conflict = MetricsHttpServer::Start({"127.0.0.1", (*server)->port(), 1}, {&r});
  ASSERT_FALSE(conflict.ok());
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(conflict.status().message().find(std::to_string((*server)->port())), absl::string_view::npos);
  EXPECT_FALSE(MetricsHttpServer::Start({"127.0.0.1", 70000, 1}, {&r}).ok());
  EXPECT_FALSE(MetricsHttpServer::Start({"127.0.0.1", 0, 1}, {nullptr}).ok());
}

TEST(MetricsHttp, ConcurrentScrapesWhileUpdatingAndStop) {
  auto f = MakeFixture();
  auto server = MetricsHttpServer::Start({"127.0.0.1", 0, 2}, {f->metrics.get(), &f->process});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    double t = 0;
    while (!stop.load()) {
      f->metrics->RequestFinished(RpcMethod::kGenerateStream, absl::StatusCode::kOk, t += 0.01);
      f->metrics->queue_depth().Set(t);
    }
  });
  std::atomic<int> good{0}, bad{0};
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 3; ++i) {
    scrapers.emplace_back([&] {
      httplib::Client client("127.0.0.1", port);
      client.set_read_timeout(10);
      for (int j = 0; j < 15; ++j) {
        auto res = client.Get("/metrics");
        if (res && res->status == 200 && ParseTextExposition(res->body).ok()) {
          good.fetch_add(1);
        } else {
          bad.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : scrapers) t.join();
  stop.store(true);
  writer.join();
  EXPECT_EQ(good.load(), 45);
  EXPECT_EQ(bad.load(), 0);

  // A scraper that keeps its connection open (as Prometheus does) must not hold Stop up.
  httplib::Client keep_alive("127.0.0.1", port);
  keep_alive.set_keep_alive(true);
  ASSERT_TRUE(keep_alive.Get("/healthz"));
  const auto stop_start = std::chrono::steady_clock::now();
  (*server)->Stop();
  const double stop_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stop_start).count();
  EXPECT_LT(stop_seconds, 2.0);
  std::printf("Stop with an idle keep-alive connection took %.3f s\n", stop_seconds);
  (*server)->Stop();  // idempotent
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  EXPECT_FALSE(client.Get("/healthz")) << "still serving after Stop";
}

}  // namespace
}  // namespace ditserve::metrics
