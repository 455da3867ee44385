#include "metrics/text_serializer.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <set>
#include <unordered_set>

#include "metrics/metric_names.h"

namespace ditserve::metrics {
namespace {

void AppendValue(double value, std::string& out) {
  if (std::isnan(value)) {
    out += "NaN";
    return;
  }
  if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  std::to_chars_result r;
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(value));
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), value);  // shortest round-trip form
  }
  out.append(buf, r.ptr);
}

void AppendEscaped(absl::string_view text, bool escape_quote, std::string& out) {
  for (char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        if (escape_quote) {
          out += "\\\"";
        } else {
          out += c;
        }
        break;
      default:
        out += c;
    }
  }
}

// Writes `{a="x",b="y"}` (nothing for an empty set), with an optional trailing le label.
void AppendLabels(const Labels& labels, const char* le, std::string& out) {
  if (labels.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    AppendEscaped(value, /*escape_quote=*/true, out);
    out += '"';
  }
  if (le != nullptr) {
    if (!first) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
}

void AppendSample(const std::string& name, const char* suffix, const Labels& labels,
                  const char* le, double value, std::string& out) {
  out += name;
  out += suffix;
  AppendLabels(labels, le, out);
  out += ' ';
  AppendValue(value, out);
  out += '\n';
}

bool HistogramWellFormed(const HistogramSnapshot& h) {
  if (h.cumulative_counts.size() != h.upper_bounds.size() + 1) return false;
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    if (!std::isfinite(h.upper_bounds[i])) return false;
    if (i > 0 && !(h.upper_bounds[i] > h.upper_bounds[i - 1])) return false;
  }
  for (size_t i = 1; i < h.cumulative_counts.size(); ++i) {
    if (h.cumulative_counts[i] < h.cumulative_counts[i - 1]) return false;
  }
  return true;
}

void AppendHistogram(const std::string& name, const MetricSnapshot& m, std::string& out) {
  const HistogramSnapshot& h = m.histogram;
  std::string le;
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    le.clear();
    AppendValue(h.upper_bounds[i], le);
    AppendSample(name, "_bucket", m.labels, le.c_str(),
                 static_cast<double>(h.cumulative_counts[i]), out);
  }
  // _count is written from the +Inf bucket, never from h.count, so the two always agree.
  const double total = static_cast<double>(h.cumulative_counts.back());
  AppendSample(name, "_bucket", m.labels, "+Inf", total, out);
  AppendSample(name, "_sum", m.labels, nullptr, h.sum, out);
  AppendSample(name, "_count", m.labels, nullptr, total, out);
}

}  // namespace

std::string FormatValue(double value) {
  std::string out;
  AppendValue(value, out);
  return out;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  AppendEscaped(value, /*escape_quote=*/true, out);
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  AppendEscaped(help, /*escape_quote=*/false, out);
  return out;
}

namespace {

// Appends one family (see the guarantees in text_serializer.h; family-name validity and clashes with other
// families are SerializeText's job, not checked here).
void AppendFamilyText(const MetricFamilySnapshot& family, std::string& out) {
  // Families from a Registry arrive sorted by label set, hence duplicate-free; only unsorted input
  // (a hand-written collect callback) pays for the set.
  bool strictly_sorted = true;
  for (size_t i = 1; i < family.metrics.size() && strictly_sorted; ++i) {
    strictly_sorted = family.metrics[i - 1].labels < family.metrics[i].labels;
  }
  std::set<Labels> seen;
  std::vector<const MetricSnapshot*> series;
  series.reserve(family.metrics.size());
  for (const MetricSnapshot& m : family.metrics) {
    if (!strictly_sorted && !seen.insert(m.labels).second) continue;
    if (!ValidateLabels(m.labels, family.type).ok()) continue;
    if (family.type == MetricType::kHistogram && !HistogramWellFormed(m.histogram)) continue;
    series.push_back(&m);
  }
  if (series.empty()) return;  // no series (yet): omit the family entirely, as the Go client does

  out += "# HELP ";
  out += family.name;
  out += ' ';
  AppendEscaped(family.help, /*escape_quote=*/false, out);
  out += "\n# TYPE ";
  out += family.name;
  out += ' ';
  out += MetricTypeName(family.type);
  out += '\n';
  for (const MetricSnapshot* m : series) {
    if (family.type == MetricType::kHistogram) {
      AppendHistogram(family.name, *m, out);
    } else {
      AppendSample(family.name, "", m->labels, nullptr, m->value, out);
    }
  }
}

}  // namespace

std::string SerializeText(const std::vector<MetricFamilySnapshot>& families) {
  std::string out;
  // Every sample name written so far: a histogram "x" owns x_bucket/x_sum/x_count too, so a later
  // gauge "x_count" (or a second "x") would produce duplicate or ambiguous series.
  std::unordered_set<std::string> written;
  for (const MetricFamilySnapshot& family : families) {
    if (!ValidateMetricName(family.name).ok()) continue;
    std::vector<std::string> names = {family.name};
    if (family.type == MetricType::kHistogram) {
      names.push_back(family.name + "_bucket");
      names.push_back(family.name + "_sum");
      names.push_back(family.name + "_count");
    }
    bool clash = false;
    for (const std::string& n : names) clash = clash || written.count(n) > 0;
    if (clash) continue;
    written.insert(names.begin(), names.end());
    AppendFamilyText(family, out);
  }
  return out;
}

}  // namespace ditserve::metrics
