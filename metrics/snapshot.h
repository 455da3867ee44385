// Plain-data view of metric families at one scrape: what a Collectable returns and what the text
// serializer writes. Produced fresh on every collection; owns copies of everything (no pointers into
// live metrics), so it may be moved across threads freely.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ditserve::metrics {

// Label name -> value. std::map keeps names sorted, which gives one canonical order per label set
// (needed for duplicate detection and stable output).
using Labels = std::map<std::string, std::string>;

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter" / "gauge" / "histogram", as written on the TYPE line.
const char* MetricTypeName(MetricType type);

struct HistogramSnapshot {
  std::vector<double> upper_bounds;         // finite, strictly increasing; +Inf is implicit
  std::vector<uint64_t> cumulative_counts;  // upper_bounds.size() + 1 entries; the last is +Inf
  double sum = 0;
  // The +Inf bucket. Kept equal to cumulative_counts.back() by construction (Histogram::Snapshot).
  uint64_t count = 0;
};

struct MetricSnapshot {
  Labels labels;  // constant labels of the family merged with the child's own labels
  double value = 0;             // counter and gauge
  HistogramSnapshot histogram;  // histogram only
};

struct MetricFamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<MetricSnapshot> metrics;
};

// Anything that can produce families at scrape time: Registry, or an adapter around a callback.
// Thread-safety: Collect may be called from several scrape threads at once; implementations must
// tolerate that.
class Collectable {
 public:
  virtual ~Collectable() = default;
  virtual std::vector<MetricFamilySnapshot> Collect() = 0;
};

}  // namespace ditserve::metrics
