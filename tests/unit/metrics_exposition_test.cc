// metrics/exposition.h: the /metrics body from prometheus-cpp collectables, through prometheus-cpp's
// TextSerializer plus our HELP escaping (1.0.1 writes HELP raw). Checked with the strict exposition
// parser, for the rules promtool and Prometheus 2.42 do not enforce.
#include <clocale>
#include <cmath>
#include <locale>
#include <sstream>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "gtest/gtest.h"
#include "metrics/exposition.h"
#include "tests/support/exposition_parser.h"

namespace ditserve::metrics {
namespace {

// A hand-made collectable: one gauge family.
class FixedFamily final : public prometheus::Collectable {
 public:
  FixedFamily(std::string name, std::string help, double value)
      : name_(std::move(name)), help_(std::move(help)), value_(value) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily f;
    f.name = name_;
    f.help = help_;
    f.type = prometheus::MetricType::Gauge;
    f.metric.emplace_back().gauge.value = value_;
    return {f};
  }

 private:
  std::string name_, help_;
  double value_;
};

TEST(MetricsExposition, EscapesHelpAndLabelValuesSoTheyRoundTrip) {
  prometheus::Registry r;
  const std::string nasty = "a\\b\"c\nd\\\\n\"\"end\\";
  const std::string help = "multi\nline \\ help \"q\"";
  prometheus::BuildGauge().Name("demo_info").Help(help).Register(r).Add({{"v", nasty}}).Set(1);
  const std::string text = RenderTextExposition({&r});
  EXPECT_NE(text.find("# HELP demo_info multi\\nline \\\\ help \"q\"\n"), std::string::npos)
      << "HELP escapes '\\' and newline only:\n" << text;
  auto parsed = ParseTextExposition(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  ASSERT_EQ(parsed->samples.size(), 1u);
  EXPECT_EQ(parsed->samples[0].labels.at("v"), nasty);
  EXPECT_EQ(parsed->help.at("demo_info"), help);
}

TEST(MetricsExposition, SourcesInOrderAndEmptyFamiliesOmitted) {
  prometheus::Registry r;
  EXPECT_EQ(RenderTextExposition({}), "");
  EXPECT_EQ(RenderTextExposition({&r}), "");
  prometheus::BuildGauge().Name("demo_unused").Help("no series").Register(r);
  EXPECT_EQ(RenderTextExposition({&r}), "") << "a family without series is omitted";
  prometheus::BuildCounter().Name("demo_events_total").Help("Events.").Register(r).Add({}).Increment(3);
  FixedFamily extra("demo_extra", "Extra.", 2.5);
  const std::string text = RenderTextExposition({&extra, &r});
  EXPECT_EQ(text,
            "# HELP demo_extra Extra.\n"
            "# TYPE demo_extra gauge\n"
            "demo_extra 2.5\n"
            "# HELP demo_events_total Events.\n"
            "# TYPE demo_events_total counter\n"
            "demo_events_total 3\n");
  EXPECT_EQ(CollectAll({&extra, &r}).size(), 2u);
}

TEST(MetricsExposition, SeriesAreSortedByLabelSet) {
  prometheus::Registry r;
  auto& family = prometheus::BuildCounter().Name("demo_total").Help("h").Register(r);
  for (const char* reason : {"shutdown", "cancelled", "deadline_expired", "a", "zz", "m"}) {
    family.Add({{"reason", reason}});
  }
  family.Add({{"reason", "b"}}).Increment(2);
  const std::string text = RenderTextExposition({&r});
  EXPECT_EQ(text,
            "# HELP demo_total h\n"
            "# TYPE demo_total counter\n"
            "demo_total{reason=\"a\"} 0\n"
            "demo_total{reason=\"b\"} 2\n"
            "demo_total{reason=\"cancelled\"} 0\n"
            "demo_total{reason=\"deadline_expired\"} 0\n"
            "demo_total{reason=\"m\"} 0\n"
            "demo_total{reason=\"shutdown\"} 0\n"
            "demo_total{reason=\"zz\"} 0\n");
}

TEST(MetricsExposition, HistogramsAreWholeAndCumulative) {
  prometheus::Registry r;
  auto& family = prometheus::BuildHistogram().Name("demo_latency_seconds").Help("Latency.").Register(r);
  auto& h = family.Add({{"method", "Generate"}}, prometheus::Histogram::BucketBoundaries{0.025, 1, 2.5});
  family.Add({{"method", "GenerateStream"}}, prometheus::Histogram::BucketBoundaries{0.025, 1, 2.5});
  for (double v : {0.01, 0.025, 0.5, 2.0, 7.0}) h.Observe(v);
  const std::string text = RenderTextExposition({&r});
  auto parsed = ParseTextExposition(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  const Labels g = {{"method", "Generate"}};
  auto bucket = [&](const char* le) {
    const ParsedSample* s = parsed->Find("demo_latency_seconds_bucket", {{"method", "Generate"}, {"le", le}});
    EXPECT_NE(s, nullptr) << le << "\n" << text;
    return s ? s->value : -1;
  };
  EXPECT_EQ(bucket("0.025"), 2);  // le is inclusive
  EXPECT_EQ(bucket("1"), 3);
  EXPECT_EQ(bucket("2.5"), 4);
  EXPECT_EQ(bucket("+Inf"), 5);
  EXPECT_EQ(parsed->Find("demo_latency_seconds_count", g)->value, 5);
  EXPECT_NEAR(parsed->Find("demo_latency_seconds_sum", g)->value, 9.535, 1e-12);
  const Labels s = {{"method", "GenerateStream"}};
  ASSERT_NE(parsed->Find("demo_latency_seconds_count", s), nullptr) << "an empty series is written";
  EXPECT_EQ(parsed->Find("demo_latency_seconds_count", s)->value, 0);
}

TEST(MetricsExposition, ValuesAreWrittenSoPrometheusReadsThemBack) {
  prometheus::Registry r;
  auto& g = prometheus::BuildGauge().Name("demo_g").Help("g").Register(r);
  const std::vector<std::pair<std::string, double>> values = {
      {"zero", 0}, {"int", -42}, {"big", 12e9}, {"gib80", 80.0 * (1ull << 30)}, {"tenth", 0.1},
      {"small", 1e-5}, {"huge", 1.5e300}, {"pinf", INFINITY}, {"ninf", -INFINITY}};
  for (const auto& [name, v] : values) g.Add({{"v", name}}).Set(v);
  g.Add({{"v", "nan"}}).Set(NAN);
  const std::string text = RenderTextExposition({&r});
  EXPECT_NE(text.find("demo_g{v=\"big\"} 12000000000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("demo_g{v=\"gib80\"} 85899345920\n"), std::string::npos) << text;
  auto parsed = ParseTextExposition(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  for (const auto& [name, v] : values) {
    const ParsedSample* s = parsed->Find("demo_g", {{"v", name}});
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->value, v) << name;
  }
  EXPECT_TRUE(std::isnan(parsed->Find("demo_g", {{"v", "nan"}})->value));
}

// A decimal comma in the global C++ locale (what breaks iostream-based serializers that do not
// imbue the classic locale).
struct CommaDecimal : std::numpunct<char> {
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

TEST(MetricsExposition, IgnoresTheGlobalCppAndCLocales) {
  FixedFamily f("demo_x", "x", 1234.5);
  const std::locale previous =
      std::locale::global(std::locale(std::locale::classic(), new CommaDecimal));
  std::ostringstream probe;  // proves the locale is really in effect
  probe << 1234.5;
  const std::string text = RenderTextExposition({&f});
  std::locale::global(previous);
  EXPECT_EQ(probe.str(), "1.234,5");
  EXPECT_NE(text.find("demo_x 1234.5\n"), std::string::npos) << text;

  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"}) {
    if (std::setlocale(LC_ALL, name) == nullptr) continue;
    const std::string c_text = RenderTextExposition({&f});
    std::setlocale(LC_ALL, "C");
    EXPECT_NE(c_text.find("demo_x 1234.5\n"), std::string::npos) << "under " << name << ":\n" << c_text;
    break;
  }
}

}  // namespace
}  // namespace ditserve::metrics
