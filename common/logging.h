// Logging setup: one call per binary, before anything logs. Everything logs through spdlog's
// default logger afterwards (spdlog::info(...)); request-scoped lines carry "req=<id>".
#pragma once

#include <string>

#include "absl/status/status.h"

namespace ditserve {

struct LogOptions {
  std::string level = "info";   // trace, debug, info, warn, error, off
  std::string format = "text";  // text | json
  std::string name;             // process name shown in each line, e.g. "frontend", "worker-1"
};

// Validates the options and installs the default logger (stderr). Thread-safe after return.
absl::Status SetupLogging(const LogOptions& options);

}  // namespace ditserve
