// Error propagation helpers for absl::Status / absl::StatusOr. Inside ditserve every fallible
// function returns one of these; exceptions never cross a module boundary (LibTorch exceptions are
// caught at the model edge and turned into a Status with GuardTorch in torch_compat.h).
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DITSERVE_CONCAT_INNER_(a, b) a##b
#define DITSERVE_CONCAT_(a, b) DITSERVE_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status _ditserve_status = (expr);        \
    if (!_ditserve_status.ok()) return _ditserve_status; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an absl::StatusOr, or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(DITSERVE_CONCAT_(_ditserve_statusor_, __LINE__), lhs, expr)
