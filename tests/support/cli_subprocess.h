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

// RunProcess for one of the system's own programs (/usr/bin/curl, openssl): LD_LIBRARY_PATH cleared
// for the child, so that a test run with a library folder on that path (the GPU host's Debian
// bundle, build-cuda/ditserve-env.sh) does not hand the system's binaries another build of their
// libraries (the host's curl against the bundle's libcurl fails to start).
ProcessResult RunSystemProgram(const std::vector<std::string>& argv, int timeout_seconds = 60);

// True when `program` is found on PATH (or is an executable path).
bool ProgramExists(const std::string& program);

}  // namespace ditserve::testing
