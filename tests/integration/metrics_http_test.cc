// MetricsHttpServer over real loopback HTTP: Content-Type, body structure, `promtool check metrics`,
// /healthz, 404s, port conflicts, concurrent scrapes, Stop.
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

#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "metrics/builder.h"
#include "metrics/ditserve_metrics.h"
#include "metrics/http_server.h"
#include "metrics/process_metrics.h"
#include "metrics/registry.h"
#include "metrics/text_serializer.h"
#include "tests/support/exposition_parser.h"

namespace ditserve::metrics {
namespace {

constexpr char kPromtool[] = "/usr/bin/promtool";

struct Fixture {
  Registry frontend;
  Registry extra;
  std::unique_ptr<DitserveMetrics> metrics;
};

std::unique_ptr<Fixture> MakeFixture() {
  auto f = std::make_unique<Fixture>();
  f->metrics = std::make_unique<DitserveMetrics>(f->frontend,
                                                 BuildInfo{"0.1.0", "flux1", 2, "bfloat16"});
  EXPECT_TRUE(RegisterProcessMetrics(f->frontend).ok());
  f->metrics->RequestFinished(RpcMethod::kGenerate, absl::StatusCode::kOk, 3.2);
  f->metrics->ObserveDenoiseStep(0.11);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    WorkerFigures w;
    w.ready = true;
    w.allreduce_bytes = 1e9;
    f->metrics->ReportWorker(rank, w);
  }
  auto g = BuildGauge().Name("demo_escape_info").Help("Escapes: \\ and \"q\"\nnext line.").Register(f->extra);
  EXPECT_TRUE(g.ok());
  (*(*g)->Add({{"value", "a\"b\\c\nd"}}))->Set(1);
  return f;
}

MetricFamilySnapshot CallbackFamily() {
  MetricFamilySnapshot f;
  f.name = "demo_callback_total";
  f.help = "From a collect callback.";
  f.type = MetricType::kCounter;
  f.metrics.emplace_back().value = 5;
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
  auto server = MetricsHttpServer::Start({"127.0.0.1", 0, 2}, {&f->frontend, &f->extra},
                                         [] { return std::vector<MetricFamilySnapshot>{CallbackFamily()}; });
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
  EXPECT_EQ(parsed->types.at("demo_callback_total"), "counter");
  EXPECT_NE(parsed->Find("demo_escape_info", {{"value", "a\"b\\c\nd"}}), nullptr);
  EXPECT_NE(parsed->Find("ditserve_worker_ready", {{"rank", "1"}}), nullptr);

  // Compressed transfer (Prometheus asks for gzip) carries the same body.
  httplib::Headers gzip = {{"Accept-Encoding", "gzip"}};
  auto zipped = client.Get("/metrics", gzip);
  ASSERT_TRUE(zipped);
  EXPECT_TRUE(ParseTextExposition(zipped->body).ok());

  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  std::string output;
  EXPECT_EQ(Promtool(res->body, output), 0) << output << "\n" << res->body;
}

TEST(MetricsHttp, PromtoolCatchesALintProblemSoTheGateIsReal) {
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  Registry r;
  auto bad = BuildCounter().Name("demo_requests").Help("counter without _total").Register(r);
  ASSERT_TRUE(bad.ok());
  ASSERT_TRUE((*bad)->Add({}).ok());
  std::string output;
  EXPECT_NE(Promtool(SerializeText(r.Collect()), output), 0);
  EXPECT_NE(output.find("_total"), std::string::npos) << output;
}

TEST(MetricsHttp, HealthzNotFoundAndPortConflict) {
  Registry r;
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
  auto server = MetricsHttpServer::Start({"127.0.0.1", 0, 2}, {&f->frontend});
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
