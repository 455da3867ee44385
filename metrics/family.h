// Family<T>: all children of one metric name (one per label set), like prometheus-cpp's Family.
// Created only by Registry::Register (usually through the builders in builder.h); owned by the
// Registry, so a Family pointer is valid for the Registry's lifetime.
//
// Thread-safety: Add/Remove/Collect may run concurrently from any thread (one mutex per family).
// Children are heap-allocated and never move: a T* from Add stays valid until Remove of the same
// label set (or the Registry's destruction). Hot paths should resolve their children once and keep
// the pointers; Add on an existing label set is a map lookup under the family mutex.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "metrics/counter.h"
#include "metrics/gauge.h"
#include "metrics/histogram.h"
#include "metrics/snapshot.h"

namespace ditserve::metrics {

// Everything fixed at registration.
struct FamilySpec {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  Labels constant_labels;       // added to every child (e.g. {"model", "flux1"})
  std::vector<double> buckets;  // histogram upper bounds (without +Inf); ignored otherwise
};

// Type-erased part, so the Registry can hold families of every type.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  // Number of children (label sets).
  size_t size() const;

  // Consistent copy of every child, sorted by label set.
  virtual MetricFamilySnapshot Collect() const = 0;

 protected:
  explicit FamilyBase(FamilySpec spec) : spec_(std::move(spec)) {}

  // Checks a label set for a new child: valid names, no overlap with the constant labels, and the
  // same label names as every other child of this family (the first Add fixes them). Requires mu_.
  absl::Status CheckNewChildLabelsLocked(const Labels& labels);
  // Constant labels merged with a child's labels.
  Labels MergedLabels(const Labels& labels) const;

  const FamilySpec spec_;
  mutable std::mutex mu_;
  size_t num_children_ = 0;  // guarded by mu_
  std::optional<std::vector<std::string>> label_names_;  // guarded by mu_
};

template <typename T>
class Family final : public FamilyBase {
  static_assert(std::is_same_v<T, Counter> || std::is_same_v<T, Gauge> ||
                    std::is_same_v<T, Histogram>,
                "Family<T>: T must be Counter, Gauge or Histogram");

 public:
  // Use Registry::Register instead (it validates `spec`).
  explicit Family(FamilySpec spec) : FamilyBase(std::move(spec)) {}

  // The child for `labels`, created on first use. Fails (InvalidArgument) on an invalid label
  // name, a reserved one ("__*", "le" for histograms), one that repeats a constant label, or a
  // label-name set different from this family's other children.
  absl::StatusOr<T*> Add(const Labels& labels) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(labels);
    if (it != children_.end()) return it->second.get();
    absl::Status status = CheckNewChildLabelsLocked(labels);
    if (!status.ok()) return status;
    T* child = children_.emplace(labels, MakeChild()).first->second.get();
    num_children_ = children_.size();
    return child;
  }

  // Drops the child for `labels` (its series disappears from the next scrape); pointers to it
  // become dangling. Returns false if there was none.
  bool Remove(const Labels& labels) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool erased = children_.erase(labels) > 0;
    num_children_ = children_.size();
    return erased;
  }

  MetricFamilySnapshot Collect() const override {
    MetricFamilySnapshot out;
    out.name = spec_.name;
    out.help = spec_.help;
    out.type = spec_.type;
    std::lock_guard<std::mutex> lock(mu_);
    out.metrics.reserve(children_.size());
    for (const auto& [labels, child] : children_) {
      MetricSnapshot& m = out.metrics.emplace_back();
      m.labels = MergedLabels(labels);
      child->Snapshot(m);
    }
    return out;
  }

 private:
  std::unique_ptr<T> MakeChild() const {
    if constexpr (std::is_same_v<T, Histogram>) {
      return std::make_unique<Histogram>(spec_.buckets);
    } else {
      return std::make_unique<T>();
    }
  }

  std::map<Labels, std::unique_ptr<T>> children_;  // guarded by mu_
};

}  // namespace ditserve::metrics
