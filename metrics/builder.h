// Fluent builders shaped like prometheus-cpp's:
//
//   ASSIGN_OR_RETURN(Family<Counter>* requests,
//                    BuildCounter().Name("ditserve_requests_total").Help("...").Register(registry));
//   ASSIGN_OR_RETURN(Counter* ok, requests->Add({{"code", "OK"}}));
//   ok->Increment();
//
// Histograms also need Buckets({...}) (upper bounds without +Inf). Errors (invalid names, empty
// help, duplicates) come back from Register as absl::Status; nothing throws.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "metrics/family.h"
#include "metrics/registry.h"

namespace ditserve::metrics {

template <typename T>
class Builder {
 public:
  Builder& Name(std::string name) {
    spec_.name = std::move(name);
    return *this;
  }
  Builder& Help(std::string help) {
    spec_.help = std::move(help);
    return *this;
  }
  // Constant labels, added to every child of the family.
  Builder& Labels(metrics::Labels constant_labels) {
    spec_.constant_labels = std::move(constant_labels);
    return *this;
  }
  // Histogram bucket upper bounds, finite and strictly increasing; +Inf is added automatically.
  Builder& Buckets(std::vector<double> upper_bounds) {
    static_assert(std::is_same_v<T, Histogram>, "Buckets() applies to histograms only");
    spec_.buckets = std::move(upper_bounds);
    return *this;
  }
  absl::StatusOr<Family<T>*> Register(Registry& registry) const {
    return registry.Register<T>(spec_);
  }

 private:
  FamilySpec spec_;
};

inline Builder<Counter> BuildCounter() { return {}; }
inline Builder<Gauge> BuildGauge() { return {}; }
inline Builder<Histogram> BuildHistogram() { return {}; }

}  // namespace ditserve::metrics
