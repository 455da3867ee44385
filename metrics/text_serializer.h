// Prometheus text exposition format 0.0.4: what /metrics returns.
//
// Guarantees of the output (tested in tests/unit/metrics_serializer_test.cc, because promtool and
// Prometheus 2.42 accept violations of most of them silently):
//   - every line ends in '\n' (so does the last one); nothing is written for zero families;
//   - each family is one contiguous group: "# HELP", "# TYPE", then its samples; a family without
//     any series is omitted entirely (as the Go client does);
//   - a sample name appears in one family only: a later family whose name (or, for a histogram,
//     name_bucket/_sum/_count) was already written is skipped (e.g. the same family offered by two
//     registries), and within a family a repeated label set is skipped;
//   - families with an invalid metric name and series with an invalid label name (possible only
//     from hand-written collect callbacks; Registry rejects them) are skipped;
//   - HELP escapes '\' and newline; label values escape '\', '"' and newline;
//   - histograms: name_bucket lines in increasing `le`, cumulative, ending in le="+Inf", whose value
//     is also written as name_count; malformed histogram snapshots (bounds not strictly increasing
//     or not finite, counts decreasing, wrong number of counts) are skipped, never half-written;
//   - values: "NaN", "+Inf", "-Inf"; integral values below 1e15 as plain integers ("3", not "3e+00");
//     everything else as the shortest string that parses back to the same double; the C locale is
//     never consulted (std::to_chars), so a process locale with a decimal comma cannot break it.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "metrics/snapshot.h"

namespace ditserve::metrics {

inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string FormatValue(double value);
std::string EscapeLabelValue(absl::string_view value);
std::string EscapeHelp(absl::string_view help);

std::string SerializeText(const std::vector<MetricFamilySnapshot>& families);

}  // namespace ditserve::metrics
