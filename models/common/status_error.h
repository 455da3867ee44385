// Carrying an absl::Status through LibTorch-style code that throws.
//
// Inside a model's forward, errors are exceptions (LibTorch throws anyway). A failed collective is
// thrown as StatusError so its code (UNAVAILABLE for a broken group) survives to the model entry
// point, where GuardModel turns every exception back into a Status.
#pragma once

#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/torch_compat.h"

namespace ditserve::models {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(absl::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Throws StatusError when `status` is not OK.
inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// compat::GuardTorch that keeps a StatusError's own code (prefixed with `what`).
template <typename Fn>
auto GuardModel(const char* what, Fn&& fn) -> absl::StatusOr<decltype(fn())> {
  try {
    return fn();
  } catch (const StatusError& e) {
    return absl::Status(e.status().code(), absl::StrCat(what, ": ", e.status().message()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace ditserve::models
