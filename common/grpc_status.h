// The one place where absl::Status becomes grpc::Status and back. RPC handlers call these at the
// edge; nothing else includes grpcpp for status conversion.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace ditserve {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ditserve
