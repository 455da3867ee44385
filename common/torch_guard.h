// The one way LibTorch exceptions become absl::Status (the guard family).
//
// Inside model code errors are exceptions: LibTorch throws anyway, and a failed collective is
// thrown as StatusError so that its own code (UNAVAILABLE for a broken group) survives. Every entry
// point of a module that runs torch code (a model's Forward, a pipeline's Run, the worker engine's
// job edge) wraps its body in GuardTorch / GuardTorchStatus, so no exception crosses a module
// boundary. The mapping, in order:
//   StatusError                     -> its own status (message prefixed with `what`)
//   c10::OutOfMemoryError,
//   std::bad_alloc                  -> RESOURCE_EXHAUSTED (the request was too large for the device
//                                      or host right now; the process stays usable)
//   any other c10::Error /
//   std::exception                  -> INTERNAL with the exception's message
// Stateless; safe from any thread.
#pragma once

#include <exception>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <c10/util/Exception.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace ditserve {

// An absl::Status carried through code that throws.
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

namespace guard_internal {
// Converts the exception in flight (call only inside a catch block).
inline absl::Status CurrentException(const char* what) {
  try {
    throw;
  } catch (const StatusError& e) {
    return absl::Status(e.status().code(), absl::StrCat(what, ": ", e.status().message()));
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": out of device memory: ", e.what_without_backtrace()));
  } catch (const std::bad_alloc& e) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of host memory: ", e.what()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unknown exception"));
  }
}
}  // namespace guard_internal

namespace guard_internal {
// T for an absl::StatusOr<T>, else the type itself: GuardTorch never nests StatusOrs.
template <typename T>
struct Unwrapped {
  using type = T;
};
template <typename T>
struct Unwrapped<absl::StatusOr<T>> {
  using type = T;
};
}  // namespace guard_internal

// Runs `fn` and converts any exception into a Status. `fn` returns a value T or an
// absl::StatusOr<T>; either way the result is one absl::StatusOr<T> (a returned error passes
// through unchanged).
template <typename Fn>
auto GuardTorch(const char* what, Fn&& fn)
    -> absl::StatusOr<typename guard_internal::Unwrapped<std::decay_t<decltype(fn())>>::type> {
  try {
    return fn();
  } catch (...) {
    return guard_internal::CurrentException(what);
  }
}

// The same for a body that returns nothing or an absl::Status.
template <typename Fn>
absl::Status GuardTorchStatus(const char* what, Fn&& fn) {
  try {
    if constexpr (std::is_same_v<decltype(fn()), absl::Status>) {
      return fn();
    } else {
      fn();
      return absl::OkStatus();
    }
  } catch (...) {
    return guard_internal::CurrentException(what);
  }
}

}  // namespace ditserve
