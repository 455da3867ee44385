#include "tests/support/cli_generate.h"

#include <gtest/gtest.h>

#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"

namespace ditserve::testing {

ProcessResult RunCliGenerate(const ServerProcess& server, const std::vector<std::string>& flags,
                             const std::string& out, int timeout_seconds) {
  std::vector<std::string> args = {BinaryDir() + "/cli/ditserve-cli",
                                   "generate",
                                   "--server",
                                   server.address(),
                                   "--format",
                                   "raw",
                                   "--quiet",
                                   "-o",
                                   out};
  args.insert(args.end(), flags.begin(), flags.end());
  return RunProcess(args, {}, timeout_seconds);
}

torch::Tensor CliGenerateImage(const ServerProcess& server, const std::vector<std::string>& flags,
                               const std::string& out) {
  ProcessResult r = RunCliGenerate(server, flags, out);
  EXPECT_EQ(r.exit_code, 0) << r.err << " log: " << server.log_path();
  if (r.exit_code != 0) return {};
  auto tensors = sharding::ReadAllTensors(out);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  if (!tensors.ok() || tensors->count("image") == 0) return {};
  return tensors->at("image");
}

}  // namespace ditserve::testing
