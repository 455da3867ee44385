// ditserve-cli generate --image / --strength as a real process: a missing or unreadable --image
// file, and a non-finite --strength, fail clearly with the usage exit code before any call to the
// server (the --server address has no listener: reaching it would fail differently).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/support/cli_subprocess.h"

namespace ditserve::testing {
namespace {

constexpr int kExitUsage = 2;  // cli/commands.h

ProcessResult Cli(std::vector<std::string> args) {
  std::vector<std::string> argv = {std::string(DITSERVE_BINARY_DIR) + "/cli/ditserve-cli",
                                   "generate",
                                   "--server",
                                   "127.0.0.1:1",
                                   "--timeout",
                                   "5",
                                   "--prompt",
                                   "a cat",
                                   "-o",
                                   ::testing::TempDir() + "/out.png"};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, {}, 30);
}

TEST(CliImageE2e, MissingImageFileFailsBeforeAnyCall) {
  const std::string missing = ::testing::TempDir() + "/no-such-image.png";
  const ProcessResult r = Cli({"--image", missing});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "--image " + missing + ": no such file")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "UNAVAILABLE")) << r.err;  // no call was made
}

TEST(CliImageE2e, AFolderIsNotAnImage) {
  const ProcessResult r = Cli({"--image", ::testing::TempDir()});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "not a regular file")) << r.err;
}

TEST(CliImageE2e, StrengthMustBeANumber) {
  const ProcessResult r = Cli({"--strength", "nan"});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "--strength")) << r.err;
}

}  // namespace
}  // namespace ditserve::testing
