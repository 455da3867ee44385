// The ditserve-cli subcommands. Each parses argv[first..) with its own options struct, talks to the
// server and returns the process exit status (kExitOk, kExitFailure, kExitUsage in channel.h).
// Output contract (scripts depend on it): results on stdout, progress and errors on stderr, errors
// as one "error: CODE_NAME: message" line.
#pragma once

namespace ditserve::cli {

int RunGenerate(int argc, const char* const* argv, int first);
int RunInfo(int argc, const char* const* argv, int first);
int RunHealth(int argc, const char* const* argv, int first);

}  // namespace ditserve::cli
