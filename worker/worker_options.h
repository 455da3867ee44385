// WorkerOptions: every setting of ditserve-worker, bound to flags and validated in one place.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/flags.h"
#include "common/logging.h"

namespace ditserve::worker {

struct WorkerOptions {
  std::string listen = "127.0.0.1:0";  // the internal API; loopback unless told otherwise
  std::string port_file;               // when set, the bound port is written here
  int64_t rank = 0;                    // informational; the frontend's Init decides the rank
  int64_t device_index = -1;           // CUDA device; -1 = rank modulo device count
  std::string store_host = "127.0.0.1";  // Gloo: address rank 0's store listens on / advertises
  LogOptions log;
};

void BindWorkerFlags(FlagParser& parser, WorkerOptions& options);
absl::Status ValidateWorkerOptions(const WorkerOptions& options);

}  // namespace ditserve::worker
