// Registry: owns metric families and produces their snapshots at scrape time (prometheus-cpp's
// Registry, with absl::Status errors instead of exceptions).
//
// Ownership: families live as long as the Registry; the Registry must outlive every pointer
// handed out and every server collecting it.
// Thread-safety: every method may be called from any thread at any time.
// Collect hooks: functions run at the start of each Collect, before any family is read, so a
// caller can refresh gauges right before serialisation (e.g. the frontend copying the workers'
// latest figures, process metrics reading /proc). Hooks of one Registry never run concurrently
// with each other (one scrape at a time runs them). A hook may Set/Add/Register on this Registry
// but must not call its Collect (deadlock) and must not block for long (it delays the scrape).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "metrics/family.h"
#include "metrics/snapshot.h"

namespace ditserve::metrics {

class Registry final : public Collectable {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Creates a family of T. Fails with InvalidArgument on an invalid name, empty help, invalid
  // constant labels or bucket bounds, and with AlreadyExists if the name (or, for histograms, one
  // of the name_bucket/_sum/_count sample names) collides with a family already registered.
  template <typename T>
  absl::StatusOr<Family<T>*> Register(FamilySpec spec) {
    spec.type = T::kType;
    std::lock_guard<std::mutex> lock(mu_);
    absl::Status status = CheckAndReserveLocked(spec);
    if (!status.ok()) return status;
    auto family = std::make_unique<Family<T>>(std::move(spec));
    Family<T>* raw = family.get();
    families_.push_back(std::move(family));
    return raw;
  }

  void AddCollectHook(std::function<void()> hook);

  // Runs the hooks, then snapshots every family in registration order.
  std::vector<MetricFamilySnapshot> Collect() override;

 private:
  absl::Status CheckAndReserveLocked(const FamilySpec& spec);

  std::mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_;  // guarded by mu_
  std::set<std::string> sample_names_;                 // every name a family emits; guarded by mu_
  std::vector<std::function<void()>> hooks_;           // guarded by mu_
  std::mutex hooks_run_mu_;                            // serialises hook runs across scrapes
};

}  // namespace ditserve::metrics
