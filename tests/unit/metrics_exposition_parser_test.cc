// The exposition checker must reject each structural violation that promtool lets through, and
// accept valid input (kValid: a counter, a histogram, escaped HELP and label values, as in the
// exposition a real Prometheus server scraped from us).
#include <string>

#include "gtest/gtest.h"
#include "tests/support/exposition_parser.h"

namespace ditserve::metrics {
namespace {

constexpr char kValid[] =
    "# HELP dit_requests_total Total generation requests by final gRPC status.\n"
    "# TYPE dit_requests_total counter\n"
    "dit_requests_total{method=\"Generate\",code=\"OK\"} 3\n"
    "dit_requests_total{method=\"Generate\",code=\"RESOURCE_EXHAUSTED\"} 0\n"
    "# HELP dit_request_duration_seconds End-to-end request latency.\n"
    "# TYPE dit_request_duration_seconds histogram\n"
    "dit_request_duration_seconds_bucket{method=\"Generate\",le=\"0.5\"} 0\n"
    "dit_request_duration_seconds_bucket{method=\"Generate\",le=\"1\"} 1\n"
    "dit_request_duration_seconds_bucket{method=\"Generate\",le=\"+Inf\"} 3\n"
    "dit_request_duration_seconds_sum{method=\"Generate\"} 7.5\n"
    "dit_request_duration_seconds_count{method=\"Generate\"} 3\n"
    "# HELP dit_build_info Build information \"quoted\" with back\\\\slash.\n"
    "# TYPE dit_build_info gauge\n"
    "dit_build_info{version=\"0.1.0\",commit=\"abc\\\"x\\\\y\\nz\"} 1\n";

TEST(MetricsExpositionParser, AcceptsValidInputAndUnescapes) {
  auto parsed = ParseTextExposition(kValid);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->samples.size(), 8u);
  EXPECT_EQ(parsed->types.at("dit_request_duration_seconds"), "histogram");
  EXPECT_EQ(parsed->help.at("dit_build_info"), "Build information \"quoted\" with back\\slash.");
  const ParsedSample* info =
      parsed->Find("dit_build_info", {{"version", "0.1.0"}, {"commit", "abc\"x\\y\nz"}});
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->value, 1);
  EXPECT_TRUE(ParseTextExposition("").ok());
  // _count and _sum before the buckets (prometheus-cpp's order; the format fixes none).
  auto count_first = ParseTextExposition(
      "# TYPE h histogram\nh_count 2\nh_sum 1.5\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n");
  ASSERT_TRUE(count_first.ok()) << count_first.status();
  EXPECT_EQ(count_first->Find("h_bucket", {{"le", "+Inf"}})->value, 2);
  EXPECT_TRUE(ParseTextExposition("# a comment\n\nx 1 1700000000000\ny{a=\"b\",} NaN\n").ok());
}

struct BadCase {
  const char* what;
  std::string text;
  const char* expected_message;
};

TEST(MetricsExpositionParser, RejectsWhatPromtoolMisses) {
  const std::string h = "# TYPE h histogram\n";
  const std::vector<BadCase> cases = {
      {"no trailing newline", "x 1", "newline"},
      {"missing +Inf", h + "h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "+Inf"},
      {"+Inf != count", h + "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "_count"},
      {"unsorted le", h + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
       "increasing"},
      {"repeated le", h + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"1.0\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
       "increasing"},
      {"not cumulative", h + "h_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
       "cumulative"},
      {"no _sum", h + "h_bucket{le=\"+Inf\"} 1\nh_count 1\n", "_sum"},
      {"_count first, != +Inf", h + "h_count 3\nh_sum 1\nh_bucket{le=\"+Inf\"} 2\n", "_count"},
      {"_count first, no +Inf", h + "h_count 1\nh_sum 1\nh_bucket{le=\"1\"} 1\n", "+Inf"},
      {"bucket without le", h + "h_bucket 1\n", "le"},
      {"duplicate series", "x{a=\"1\"} 1\nx{a=\"1\"} 2\n", "duplicate"},
      {"duplicate series, label order", "x{a=\"1\",b=\"2\"} 1\nx{b=\"2\",a=\"1\"} 2\n", "duplicate"},
      {"split family", "x 1\ny 1\nx{a=\"1\"} 1\n", "contiguous"},
      {"split via TYPE", "x 1\ny 1\n# TYPE x gauge\n", "contiguous"},
      {"TYPE after samples", "x 1\n# TYPE x gauge\n", "TYPE after"},
      {"second TYPE", "# TYPE x gauge\n# TYPE x gauge\nx 1\n", "second TYPE"},
      {"second HELP", "# HELP x a\n# HELP x b\nx 1\n", "second HELP"},
      {"bad TYPE", "# TYPE x gauges\nx 1\n", "unknown metric type"},
      {"bad escape in label", "x{a=\"\\t\"} 1\n", "escape"},
      {"bad escape in HELP", "# HELP x a\\tb\nx 1\n", "escape"},
      {"unterminated label", "x{a=\"b} 1\n", "unterminated"},
      {"raw newline in label", "x{a=\"b\n\"} 1\n", "unterminated"},
      {"repeated label name", "x{a=\"1\",a=\"2\"} 1\n", "repeated label"},
      {"bad value", "x 1,5\n", "value"},
      {"bad label name", "x{1a=\"1\"} 1\n", "label name"},
      {"histogram sample without suffix", h + "h 1\n", "suffix"},
  };
  for (const BadCase& c : cases) {
    auto parsed = ParseTextExposition(c.text);
    ASSERT_FALSE(parsed.ok()) << c.what;
    EXPECT_NE(parsed.status().message().find(c.expected_message), absl::string_view::npos)
        << c.what << ": " << parsed.status().message();
  }
}

}  // namespace
}  // namespace ditserve::metrics
