// Runs a client binary or script as a child process and captures what it prints, for the client
// tests. The child inherits the environment plus `extra_env`; it is killed (by its pid) when it
// outlives `timeout_seconds`.
//
// Threads: may be called from any one thread; fork is followed straight by exec, so it is safe in
// a process that also runs a gRPC server.
#pragma once

#include <string>
#include <vector>

namespace ditserve::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal or the timeout
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
