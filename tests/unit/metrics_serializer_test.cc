// The text serializer's rules that promtool and Prometheus 2.42 do not check (see
// metrics/text_serializer.h): exact output, escaping, value formatting, histogram structure,
// de-duplication, trailing newline.
#include <clocale>
#include <cmath>
#include <cstdlib>
#include <locale>
#include <sstream>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "metrics/builder.h"
#include "metrics/registry.h"
#include "metrics/text_serializer.h"
#include "tests/support/exposition_parser.h"

namespace ditserve::metrics {
namespace {

TEST(MetricsSerializer, CounterWithEscapedLabelAndHelp) {
  Registry r;
  auto family = BuildCounter()
                    .Name("demo_events_total")
                    .Help("Events with \\ backslash,\nnewline and \"quotes\".")
                    .Register(r);
  ASSERT_TRUE(family.ok()) << family.status();
  auto c = (*family)->Add({{"path", "C:\\dir\n\"x\""}, {"kind", "a"}});
  ASSERT_TRUE(c.ok());
  (*c)->Increment(3);
  EXPECT_EQ(SerializeText(r.Collect()),
            "# HELP demo_events_total Events with \\\\ backslash,\\nnewline and \"quotes\".\n"
            "# TYPE demo_events_total counter\n"
            "demo_events_total{kind=\"a\",path=\"C:\\\\dir\\n\\\"x\\\"\"} 3\n");
}

TEST(MetricsSerializer, EscapingRoundTripsThroughTheParser) {
  Registry r;
  const std::string nasty = "a\\b\"c\nd\\\\n\"\"end\\";
  auto g = BuildGauge().Name("demo_info").Help("multi\nline \\ help \"q\"").Register(r);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->Add({{"v", nasty}}).ok());
  auto parsed = ParseTextExposition(SerializeText(r.Collect()));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->samples.size(), 1u);
  EXPECT_EQ(parsed->samples[0].labels.at("v"), nasty);
  EXPECT_EQ(parsed->help.at("demo_info"), "multi\nline \\ help \"q\"");
  EXPECT_EQ(EscapeLabelValue(nasty), "a\\\\b\\\"c\\nd\\\\\\\\n\\\"\\\"end\\\\");
  EXPECT_EQ(EscapeHelp("q\"\\\n"), "q\"\\\\\\n");  // quotes are not escaped in HELP
}

TEST(MetricsSerializer, HistogramExactOutput) {
  Registry r;
  auto family = BuildHistogram()
                    .Name("demo_latency_seconds")
                    .Help("Latency.")
                    .Labels({{"model", "m"}})
                    .Buckets({0.5, 1, 2.5})
                    .Register(r);
  ASSERT_TRUE(family.ok()) << family.status();
  auto h = (*family)->Add({{"method", "Generate"}});
  ASSERT_TRUE(h.ok());
  for (double v : {0.5, 0.75, 3.0, 100.0}) (*h)->Observe(v);  // 0.5 lands in le="0.5"
  EXPECT_EQ(SerializeText(r.Collect()),
            "# HELP demo_latency_seconds Latency.\n"
            "# TYPE demo_latency_seconds histogram\n"
            "demo_latency_seconds_bucket{method=\"Generate\",model=\"m\",le=\"0.5\"} 1\n"
            "demo_latency_seconds_bucket{method=\"Generate\",model=\"m\",le=\"1\"} 2\n"
            "demo_latency_seconds_bucket{method=\"Generate\",model=\"m\",le=\"2.5\"} 2\n"
            "demo_latency_seconds_bucket{method=\"Generate\",model=\"m\",le=\"+Inf\"} 4\n"
            "demo_latency_seconds_sum{method=\"Generate\",model=\"m\"} 104.25\n"
            "demo_latency_seconds_count{method=\"Generate\",model=\"m\"} 4\n");
}

TEST(MetricsSerializer, HistogramWithoutBucketsStillHasInf) {
  Registry r;
  auto family = BuildHistogram().Name("demo_x_seconds").Help("x").Buckets({}).Register(r);
  ASSERT_TRUE(family.ok());
  auto h = (*family)->Add({});
  ASSERT_TRUE(h.ok());
  (*h)->Observe(2);
  EXPECT_EQ(SerializeText(r.Collect()),
            "# HELP demo_x_seconds x\n# TYPE demo_x_seconds histogram\n"
            "demo_x_seconds_bucket{le=\"+Inf\"} 1\ndemo_x_seconds_sum 2\ndemo_x_seconds_count 1\n");
}

TEST(MetricsSerializer, RandomHistogramsAreCumulativeIncreasingAndInfEqualsCount) {
  Registry r;
  const std::vector<double> bounds = {0.01, 0.1, 0.25, 1, 5, 60, 600};
  auto family = BuildHistogram().Name("demo_r_seconds").Help("r").Buckets(bounds).Register(r);
  ASSERT_TRUE(family.ok());
  std::mt19937 rng(7);
  std::lognormal_distribution<double> dist(0.0, 3.0);
  for (int series = 0; series < 5; ++series) {
    auto h = (*family)->Add({{"s", std::to_string(series)}});
    ASSERT_TRUE(h.ok());
    for (int i = 0; i < 1000 * (series + 1); ++i) (*h)->Observe(dist(rng));
  }
  const std::string text = SerializeText(r.Collect());
  auto parsed = ParseTextExposition(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  // Checked here again without the parser's histogram logic.
  for (int series = 0; series < 5; ++series) {
    const std::string s = std::to_string(series);
    double previous = -1, previous_le = -INFINITY;
    for (const ParsedSample& sample : parsed->samples) {
      if (sample.name != "demo_r_seconds_bucket" || sample.labels.at("s") != s) continue;
      const double le = std::strtod(sample.labels.at("le").c_str(), nullptr);
      EXPECT_GT(le, previous_le);
      EXPECT_GE(sample.value, previous);
      previous_le = le;
      previous = sample.value;
    }
    EXPECT_TRUE(std::isinf(previous_le));
    const ParsedSample* count = parsed->Find("demo_r_seconds_count", {{"s", s}});
    ASSERT_NE(count, nullptr);
    EXPECT_EQ(count->value, previous);
    EXPECT_EQ(count->value, 1000.0 * (series + 1));
  }
}

TEST(MetricsSerializer, ValueFormatting) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-0.0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(-42), "-42");
  EXPECT_EQ(FormatValue(12e9), "12000000000");
  EXPECT_EQ(FormatValue(80.0 * 1024 * 1024 * 1024), "85899345920");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(1e-5), "1e-05");
  EXPECT_EQ(FormatValue(1.5e300), "1.5e+300");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  // Every finite double survives the round trip.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> exp(-300, 300);
  for (int i = 0; i < 20000; ++i) {
    const double v = std::ldexp(mant(rng), exp(rng) / 3) * std::pow(10.0, exp(rng) / 10);
    const std::string s = FormatValue(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
  }
}

TEST(MetricsSerializer, SpecialValuesInSamplesParse) {
  Registry r;
  auto g = BuildGauge().Name("demo_g").Help("g").Register(r);
  ASSERT_TRUE(g.ok());
  (*(*g)->Add({{"v", "nan"}}))->Set(NAN);
  (*(*g)->Add({{"v", "pinf"}}))->Set(INFINITY);
  (*(*g)->Add({{"v", "ninf"}}))->Set(-INFINITY);
  const std::string text = SerializeText(r.Collect());
  EXPECT_NE(text.find("demo_g{v=\"nan\"} NaN\n"), std::string::npos) << text;
  EXPECT_NE(text.find("demo_g{v=\"pinf\"} +Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("demo_g{v=\"ninf\"} -Inf\n"), std::string::npos) << text;
  EXPECT_TRUE(ParseTextExposition(text).ok());
}

// A decimal comma in the global C++ locale (what broke iostream-based serializers).
struct CommaDecimal : std::numpunct<char> {
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

TEST(MetricsSerializer, IgnoresTheGlobalCppLocale) {
  const std::locale previous = std::locale::global(std::locale(std::locale::classic(), new CommaDecimal));
  std::ostringstream probe;  // proves the locale is really in effect
  probe << 1234.5;
  const std::string formatted = FormatValue(1234.5) + " " + FormatValue(1e6);
  std::locale::global(previous);
  EXPECT_EQ(probe.str(), "1.234,5");
  EXPECT_EQ(formatted, "1234.5 1000000");
}

TEST(MetricsSerializer, IgnoresTheProcessCLocale) {
  const char* chosen = nullptr;
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "ru_RU.UTF-8"}) {
    if (std::setlocale(LC_ALL, name) != nullptr) {
      chosen = name;
      break;
    }
  }
  if (chosen == nullptr) GTEST_SKIP() << "no C locale with a decimal comma is installed";
  const std::string formatted = FormatValue(2.5);
  std::setlocale(LC_ALL, "C");
  EXPECT_EQ(formatted, "2.5") << "under " << chosen;
}

TEST(MetricsSerializer, TrailingNewlineAndEmptyOutput) {
  Registry r;
  EXPECT_EQ(SerializeText(r.Collect()), "");
  auto g = BuildGauge().Name("demo_a").Help("a").Register(r);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(SerializeText(r.Collect()), "") << "a family without series is omitted";
  ASSERT_TRUE((*g)->Add({}).ok());
  const std::string text = SerializeText(r.Collect());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text, "# HELP demo_a a\n# TYPE demo_a gauge\ndemo_a 0\n");
}

TEST(MetricsSerializer, SkipsRepeatedFamiliesSeriesAndNameClashes) {
  MetricFamilySnapshot gauge;
  gauge.name = "demo_g";
  gauge.help = "g";
  gauge.type = MetricType::kGauge;
  for (const char* v : {"b", "a", "b"}) {  // unsorted, with a duplicate label set
    MetricSnapshot& m = gauge.metrics.emplace_back();
    m.labels = {{"x", v}};
    m.value = 1;
  }
  MetricFamilySnapshot hist;
  hist.name = "demo_h";
  hist.help = "h";
  hist.type = MetricType::kHistogram;
  MetricSnapshot& hm = hist.metrics.emplace_back();
  hm.histogram.upper_bounds = {1};
  hm.histogram.cumulative_counts = {1, 2};
  hm.histogram.sum = 3;
  hm.histogram.count = 2;
  MetricFamilySnapshot clash;  // a gauge named like the histogram's _count series
  clash.name = "demo_h_count";
  clash.help = "c";
  clash.type = MetricType::kGauge;
  clash.metrics.emplace_back();
  MetricFamilySnapshot bad_name = clash;
  bad_name.name = "demo-bad";
  MetricFamilySnapshot bad_label = clash;
  bad_label.name = "demo_bad_label";
  bad_label.metrics[0].labels = {{"__reserved", "x"}};

  const std::string text = SerializeText({gauge, hist, gauge, clash, bad_name, bad_label});
  EXPECT_EQ(text,
            "# HELP demo_g g\n# TYPE demo_g gauge\ndemo_g{x=\"b\"} 1\ndemo_g{x=\"a\"} 1\n"
            "# HELP demo_h h\n# TYPE demo_h histogram\ndemo_h_bucket{le=\"1\"} 1\n"
            "demo_h_bucket{le=\"+Inf\"} 2\ndemo_h_sum 3\ndemo_h_count 2\n");
  EXPECT_TRUE(ParseTextExposition(text).ok());
}

TEST(MetricsSerializer, MalformedHistogramSnapshotsAreSkippedAndCountComesFromInf) {
  MetricFamilySnapshot hist;
  hist.name = "demo_h";
  hist.help = "h";
  hist.type = MetricType::kHistogram;
  auto add = [&](const char* id, std::vector<double> bounds, std::vector<uint64_t> counts,
                 uint64_t count) {
    MetricSnapshot& m = hist.metrics.emplace_back();
    m.labels = {{"id", id}};
    m.histogram.upper_bounds = std::move(bounds);
    m.histogram.cumulative_counts = std::move(counts);
    m.histogram.count = count;
  };
  add("a_ok", {1, 2}, {1, 2, 3}, 99);           // count disagrees: +Inf (3) wins
  add("b_unsorted", {2, 1}, {1, 2, 3}, 3);      // bounds not increasing
  add("c_decreasing", {1, 2}, {2, 1, 3}, 3);    // not cumulative
  add("d_short", {1, 2}, {1, 2}, 2);            // missing +Inf count
  add("e_inf_bound", {1, INFINITY}, {1, 2, 2}, 2);
  const std::string text = SerializeText({hist});
  EXPECT_EQ(text,
            "# HELP demo_h h\n# TYPE demo_h histogram\n"
            "demo_h_bucket{id=\"a_ok\",le=\"1\"} 1\ndemo_h_bucket{id=\"a_ok\",le=\"2\"} 2\n"
            "demo_h_bucket{id=\"a_ok\",le=\"+Inf\"} 3\ndemo_h_sum{id=\"a_ok\"} 0\n"
            "demo_h_count{id=\"a_ok\"} 3\n");
  EXPECT_TRUE(ParseTextExposition(text).ok());
}

TEST(MetricsSerializer, FamiliesAreContiguousAndUniqueAcrossManyFamilies) {
  Registry r;
  for (int f = 0; f < 20; ++f) {
    const std::string name = "demo_f" + std::to_string(f);
    if (f % 3 == 0) {
      auto fam = BuildHistogram().Name(name + "_seconds").Help("h").Buckets({1, 2}).Register(r);
      ASSERT_TRUE(fam.ok());
      for (int s = 0; s < 3; ++s) (*(*fam)->Add({{"s", std::to_string(s)}}))->Observe(s);
    } else if (f % 3 == 1) {
      auto fam = BuildCounter().Name(name + "_total").Help("c").Register(r);
      ASSERT_TRUE(fam.ok());
      for (int s = 0; s < 3; ++s) (*(*fam)->Add({{"s", std::to_string(s)}}))->Increment(s);
    } else {
      auto fam = BuildGauge().Name(name).Help("g").Register(r);
      ASSERT_TRUE(fam.ok());
      for (int s = 0; s < 3; ++s) (*(*fam)->Add({{"s", std::to_string(s)}}))->Set(-s);
    }
  }
  const std::string text = SerializeText(r.Collect());
  auto parsed = ParseTextExposition(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->types.size(), 20u);
  EXPECT_EQ(parsed->help.size(), 20u);
}

}  // namespace
}  // namespace ditserve::metrics
