// Test support: `ditserve-cli generate` against a running frontend (server_process.h), for the
// end-to-end tests of image outputs.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "tests/support/cli_subprocess.h"
#include "tests/support/server_process.h"

namespace ditserve::testing {

// `ditserve-cli generate --server <server> --format raw --quiet -o <out> <flags>` (flags last, so
// they may repeat --format etc.); the process's outcome. Times out after `timeout_seconds`.
ProcessResult RunCliGenerate(const ServerProcess& server, const std::vector<std::string>& flags,
                             const std::string& out, int timeout_seconds = 300);

// The same call, which must succeed: the image (H, W, 3) float32 it wrote to `out`; undefined,
// with a gtest failure naming the frontend's log, when the CLI failed or the file has no image.
torch::Tensor CliGenerateImage(const ServerProcess& server, const std::vector<std::string>& flags,
                               const std::string& out);

}  // namespace ditserve::testing
