// Runs a client binary or script as a child process (common/subprocess.h) and captures what it
// prints, for the client tests. The child inherits the environment plus `extra_env` and reads
// stdin from /dev/null; it is killed when it outlives `timeout_seconds`.
//
// Threads: may be called from any one thread, also in a process that runs a gRPC server.
#pragma once

#include <string>
#include <vector>

namespace ditserve::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal or the timeout, or not started (see err)
  bool timed_out = false;
  std::string out;  // stdout
  std::string err;  // stderr
};

ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::vector<std::string>& extra_env = {},
                         int timeout_seconds = 60);

// True when `program` is found on PATH (or is an executable path).
bool ProgramExists(const std::string& program);

}  // namespace ditserve::testing
