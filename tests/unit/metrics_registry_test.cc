// Registry, families and metric types: name validation at registration, label rules, bucket
// rules, collect hooks, and exact totals under concurrent updates.
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "metrics/builder.h"
#include "metrics/registry.h"
#include "metrics/text_serializer.h"

namespace ditserve::metrics {
namespace {

const MetricFamilySnapshot* FindFamily(const std::vector<MetricFamilySnapshot>& families,
                                       const std::string& name) {
  for (const auto& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(MetricsRegistry, RejectsInvalidMetricNamesWithAClearError) {
  Registry r;
  for (const char* bad : {"", "1abc", "a-b", "a b", "a.b", "a:b", "caf\xc3\xa9", "a{"}) {
    auto f = BuildGauge().Name(bad).Help("h").Register(r);
    ASSERT_FALSE(f.ok()) << "accepted \"" << bad << "\"";
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find("metric name"), absl::string_view::npos)
        << f.status().message();
  }
  auto colon = BuildGauge().Name("a:b").Help("h").Register(r);
  EXPECT_NE(colon.status().message().find("recording rules"), absl::string_view::npos);
  for (const char* good : {"_a", "a1_b", "A", "ditserve_requests_total"}) {
    EXPECT_TRUE(BuildGauge().Name(good).Help("h").Register(r).ok()) << good;
  }
}

TEST(MetricsRegistry, RequiresHelp) {
  Registry r;
  auto f = BuildCounter().Name("x_total").Register(r);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("help"), absl::string_view::npos);
}

TEST(MetricsRegistry, RejectsInvalidLabelNames) {
  Registry r;
  auto c = BuildCounter().Name("x_total").Help("h").Register(r);
  ASSERT_TRUE(c.ok());
  for (const char* bad : {"", "1a", "a-b", "__name", "a:b", "a b"}) {
    auto child = (*c)->Add({{bad, "v"}});
    ASSERT_FALSE(child.ok()) << "accepted label \"" << bad << "\"";
    EXPECT_EQ(child.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(child.status().message().find("x_total"), absl::string_view::npos);
  }
  EXPECT_TRUE((*c)->Add({{"le", "v"}}).ok()) << "le is only reserved in histograms";
  auto h = BuildHistogram().Name("h_seconds").Help("h").Buckets({1}).Register(r);
  ASSERT_TRUE(h.ok());
  auto le = (*h)->Add({{"le", "1"}});
  ASSERT_FALSE(le.ok());
  EXPECT_NE(le.status().message().find("reserved"), absl::string_view::npos);
  // Constant labels go through the same rules at registration.
  EXPECT_FALSE(BuildGauge().Name("g").Help("h").Labels({{"__x", "v"}}).Register(r).ok());
  EXPECT_FALSE(
      BuildHistogram().Name("h2_seconds").Help("h").Labels({{"le", "v"}}).Buckets({}).Register(r).ok());
  // Label values may be anything.
  EXPECT_TRUE((*c)->Add({{"le", "\n\"\\ \xe2\x9c\x93"}}).ok());
}

TEST(MetricsRegistry, FamilyKeepsOneLabelNameSetAndNoConstantLabelClash) {
  Registry r;
  auto c = BuildCounter().Name("x_total").Help("h").Labels({{"model", "m"}}).Register(r);
  ASSERT_TRUE(c.ok());
  auto a = (*c)->Add({{"code", "OK"}});
  ASSERT_TRUE(a.ok());
  auto again = (*c)->Add({{"code", "OK"}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*a, *again) << "same label set, same child";
  EXPECT_FALSE((*c)->Add({{"other", "x"}}).ok());
  EXPECT_FALSE((*c)->Add({}).ok());
  EXPECT_FALSE((*c)->Add({{"code", "OK"}, {"extra", "1"}}).ok());
  auto clash = (*c)->Add({{"model", "n"}});
  ASSERT_FALSE(clash.ok());
  EXPECT_NE(clash.status().message().find("constant"), absl::string_view::npos);
  EXPECT_EQ((*c)->size(), 1u);
  auto snap = r.Collect();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].metrics.size(), 1u);
  EXPECT_EQ(snap[0].metrics[0].labels, (Labels{{"code", "OK"}, {"model", "m"}}));
}

TEST(MetricsRegistry, RejectsDuplicateAndClashingNames) {
  Registry r;
  ASSERT_TRUE(BuildCounter().Name("a_total").Help("h").Register(r).ok());
  auto dup = BuildGauge().Name("a_total").Help("h").Register(r);
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(BuildHistogram().Name("h_seconds").Help("h").Buckets({1}).Register(r).ok());
  for (const char* n : {"h_seconds_count", "h_seconds_sum", "h_seconds_bucket", "h_seconds"}) {
    auto f = BuildGauge().Name(n).Help("h").Register(r);
    EXPECT_EQ(f.status().code(), absl::StatusCode::kAlreadyExists) << n;
  }
  ASSERT_TRUE(BuildGauge().Name("y_sum").Help("h").Register(r).ok());
  EXPECT_EQ(BuildHistogram().Name("y").Help("h").Buckets({}).Register(r).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(MetricsRegistry, ValidatesBucketBounds) {
  Registry r;
  const std::vector<std::vector<double>> bad = {
      {2, 1}, {1, 1}, {1, NAN}, {1, INFINITY}, {-INFINITY, 1}};
  int i = 0;
  for (const auto& b : bad) {
    auto f = BuildHistogram().Name("h" + std::to_string(i++)).Help("h").Buckets(b).Register(r);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("bucket"), absl::string_view::npos) << f.status();
  }
  EXPECT_TRUE(BuildHistogram().Name("ok").Help("h").Buckets({-1, 0, 1e-9, 1}).Register(r).ok());
}

TEST(MetricsTypes, CounterGaugeHistogramSemantics) {
  Counter c;
  c.Increment();
  c.Increment(2.5);
  c.Increment(-10);  // ignored
  c.Increment(NAN);  // ignored
  EXPECT_EQ(c.Value(), 3.5);
  c.SetCumulative(100);
  EXPECT_EQ(c.Value(), 100);
  c.SetCumulative(NAN);
  EXPECT_EQ(c.Value(), 100);

  Gauge g;
  g.Set(5);
  g.Increment(2);
  g.Decrement(10);
  EXPECT_EQ(g.Value(), -3);
  g.SetToCurrentTime();
  EXPECT_GT(g.Value(), 1.6e9);

  Histogram h({1, 2});
  for (double v : {-5.0, 1.0, 1.0000001, 2.0, 3.0, std::nan("")}) h.Observe(v);
  MetricSnapshot s;
  h.Snapshot(s);
  EXPECT_EQ(s.histogram.cumulative_counts, (std::vector<uint64_t>{2, 4, 6}));
  EXPECT_EQ(s.histogram.count, 6u);
  EXPECT_TRUE(std::isnan(s.histogram.sum));
}

TEST(MetricsRegistry, RemoveDropsTheSeries) {
  Registry r;
  auto g = BuildGauge().Name("g").Help("h").Register(r);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->Add({{"rank", "0"}}).ok());
  ASSERT_TRUE((*g)->Add({{"rank", "1"}}).ok());
  EXPECT_TRUE((*g)->Remove({{"rank", "0"}}));
  EXPECT_FALSE((*g)->Remove({{"rank", "0"}}));
  auto snap = r.Collect();
  ASSERT_EQ(snap[0].metrics.size(), 1u);
  EXPECT_EQ(snap[0].metrics[0].labels.at("rank"), "1");
}

TEST(MetricsRegistry, CollectHooksRunBeforeEachSnapshotAndMayRegister) {
  Registry r;
  auto g = BuildGauge().Name("scrapes").Help("h").Register(r);
  ASSERT_TRUE(g.ok());
  Gauge* scrapes = *(*g)->Add({});
  int runs = 0;
  r.AddCollectHook([&] { scrapes->Set(++runs); });
  bool registered = false;
  r.AddCollectHook([&] {
    if (registered) return;
    registered = true;
    auto late = BuildGauge().Name("late").Help("h").Register(r);
    ASSERT_TRUE(late.ok());
    (*(*late)->Add({}))->Set(7);
  });
  for (int i = 1; i <= 3; ++i) {
    auto snap = r.Collect();
    const MetricFamilySnapshot* f = FindFamily(snap, "scrapes");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->metrics[0].value, i);
    const MetricFamilySnapshot* late = FindFamily(snap, "late");
    ASSERT_NE(late, nullptr) << "family registered by a hook appears in the same scrape";
    EXPECT_EQ(late->metrics[0].value, 7);
  }
}

TEST(MetricsRegistry, ConcurrentUpdatesGiveExactTotals) {
  Registry r;
  auto cf = BuildCounter().Name("c_total").Help("h").Register(r);
  auto gf = BuildGauge().Name("g").Help("h").Register(r);
  auto hf = BuildHistogram().Name("h_seconds").Help("h").Buckets({0.5, 1.5, 2.5}).Register(r);
  ASSERT_TRUE(cf.ok() && gf.ok() && hf.ok());
  constexpr int kThreads = 4;
  constexpr int kIterations = 50000;
  std::atomic<bool> stop{false};
  std::atomic<int> bad_snapshots{0};
  // A scraper runs throughout: every histogram snapshot must be internally consistent.
  std::thread scraper([&] {
    while (!stop.load()) {
      for (const auto& f : r.Collect()) {
        for (const auto& m : f.metrics) {
          if (f.type != MetricType::kHistogram) continue;
          const auto& h = m.histogram;
          bool ok = h.count == h.cumulative_counts.back();
          for (size_t i = 1; i < h.cumulative_counts.size(); ++i) {
            ok = ok && h.cumulative_counts[i] >= h.cumulative_counts[i - 1];
          }
          // Observations are 1.0 (bucket le=1.5) and 2.0 (le=2.5): the sum must match the
          // bucket counts exactly when both were taken under the same lock.
          const double ones = static_cast<double>(h.cumulative_counts[1]);
          const double twos = static_cast<double>(h.cumulative_counts[2] - h.cumulative_counts[1]);
          ok = ok && h.sum == ones + 2 * twos;
          if (!ok) bad_snapshots.fetch_add(1);
        }
      }
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Every thread also resolves the shared children itself (concurrent Add).
      Counter* c = *(*cf)->Add({{"k", "shared"}});
      Counter* own = *(*cf)->Add({{"k", "t" + std::to_string(t)}});
      Gauge* g = *(*gf)->Add({});
      Histogram* h = *(*hf)->Add({});
      for (int i = 0; i < kIterations; ++i) {
        c->Increment();
        own->Increment(0.5);
        g->Increment(2);
        g->Decrement(1);
        h->Observe(i % 2 ? 2.0 : 1.0);
      }
    });
  }
  for (auto& t : threads) t.join();
  stop.store(true);
  scraper.join();
  EXPECT_EQ(bad_snapshots.load(), 0);

  EXPECT_EQ((*(*cf)->Add({{"k", "shared"}}))->Value(), double(kThreads) * kIterations);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ((*(*cf)->Add({{"k", "t" + std::to_string(t)}}))->Value(), kIterations * 0.5);
  }
  EXPECT_EQ((*(*gf)->Add({}))->Value(), double(kThreads) * kIterations);
  MetricSnapshot s;
  (*(*hf)->Add({}))->Snapshot(s);
  EXPECT_EQ(s.histogram.count, uint64_t(kThreads) * kIterations);
  EXPECT_EQ(s.histogram.cumulative_counts,
            (std::vector<uint64_t>{0, uint64_t(kThreads) * kIterations / 2,
                                   uint64_t(kThreads) * kIterations,
                                   uint64_t(kThreads) * kIterations}));
  EXPECT_EQ(s.histogram.sum, 1.5 * kThreads * kIterations);
}

}  // namespace
}  // namespace ditserve::metrics
