// Test support (ditserve_test_metrics): a strict reader of the text exposition format 0.0.4,
// written independently of the serializer (prometheus-cpp's TextSerializer, metrics/exposition.h)
// so tests can check any /metrics body for the structural rules that `promtool check metrics` and
// Prometheus 2.42 do NOT enforce:
//   - the body ends in '\n'; only "\\", "\"" and "\n" escapes in label values, "\\" and "\n" in HELP;
//   - at most one HELP and one TYPE per family, TYPE before the family's first sample;
//   - each family's lines are contiguous (a family never reappears after another one started);
//   - no duplicate series (same name and label set), no repeated label name inside one set;
//   - histograms: per label set, _bucket lines with strictly increasing `le`, non-decreasing
//     cumulative values, ending with le="+Inf"; a _sum and a _count equal to +Inf, before or after
//     the buckets (the format fixes no order; prometheus-cpp writes _count and _sum first).
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::metrics {

// Label name -> unescaped value (the same type as prometheus::Labels).
using Labels = std::map<std::string, std::string>;

struct ParsedSample {
  std::string name;  // full sample name, e.g. "x_bucket"
  Labels labels;     // unescaped values
  double value = 0;
};

struct ParsedExposition {
  std::vector<ParsedSample> samples;          // in order of appearance
  std::map<std::string, std::string> types;   // family -> "counter", "gauge", ...
  std::map<std::string, std::string> help;    // family -> unescaped HELP text

  // The sample with exactly this name and label set, or nullptr.
  const ParsedSample* Find(absl::string_view name, const Labels& labels) const;
};

// Parses `text` and checks every rule above. The error names the offending line (1-based).
absl::StatusOr<ParsedExposition> ParseTextExposition(absl::string_view text);

}  // namespace ditserve::metrics
