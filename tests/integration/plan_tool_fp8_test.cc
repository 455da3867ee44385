// `ditserve-tool plan --weights fp8` as a real process on the FLUX.1 tiny fixture: the block
// linears' weights count one byte an element plus a float32 scale a row on every rank (the rest
// as in the bf16 report), the totals add up, the AdaLN modulation and the embedders are left
// alone, and a bad value is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/fixtures.h"

namespace ditserve {
namespace {

// Runs the tool; stdout, and the exit status in `rc`.
std::string RunPlan(const std::string& extra, int* rc) {
  const std::string cmd = "'" + testing::BinaryDir() + "/tools/ditserve-tool' plan --model '" +
                          testing::FixturesDir() + "/flux1-tiny' --tp 2 --dtype bf16 " + extra +
                          " 2>/dev/null";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(PlanToolFp8, BlockLinearsCountOneByteAnElementPlusAScaleARow) {
  int rc = -1;
  const auto bf16 = nlohmann::json::parse(RunPlan("", &rc));
  ASSERT_EQ(rc, 0);
  const auto fp8 = nlohmann::json::parse(RunPlan("--weights fp8", &rc));
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(fp8["weights"], "fp8");
  ASSERT_EQ(bf16["tensors"].size(), fp8["tensors"].size());
  uint64_t want_rank[2] = {0, 0};
  int quantized = 0;
  for (size_t i = 0; i < bf16["tensors"].size(); ++i) {
    const auto& a = bf16["tensors"][i];
    const auto& b = fp8["tensors"][i];
    const std::string name = a["name"];
    ASSERT_EQ(name, b["name"]);
    // The tiny FLUX.1's block linears: attention projections, feed-forwards, single-block
    // projections; not the AdaLN modulation (".norm…linear").
    const bool block = (name.rfind("transformer_blocks.", 0) == 0 ||
                        name.rfind("single_transformer_blocks.", 0) == 0) &&
                       EndsWith(name, ".weight") && name.find(".norm") == std::string::npos;
    for (int r = 0; r < 2; ++r) {
      const auto& shape = a["rank_shapes"][r];
      uint64_t want = a["bytes_per_rank"][r];
      if (block) {
        const int64_t rows = shape[0], cols = shape[1];
        want = static_cast<uint64_t>(rows * cols + 4 * rows);
      }
      EXPECT_EQ(b["bytes_per_rank"][r].get<uint64_t>(), want) << name << " rank " << r;
      want_rank[r] += want;
    }
    quantized += block ? 1 : 0;
  }
  // 2 double blocks × 12 linears + 2 single blocks × 5.
  EXPECT_EQ(quantized, 34);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(fp8["total_bytes_per_rank"][r].get<uint64_t>(), want_rank[r]);
    EXPECT_LT(fp8["total_bytes_per_rank"][r].get<uint64_t>(),
              bf16["total_bytes_per_rank"][r].get<uint64_t>());
  }
  EXPECT_EQ(fp8["sharded_bytes"].get<uint64_t>() + fp8["replicated_bytes"].get<uint64_t>(),
            fp8["total_bytes"].get<uint64_t>());
}

TEST(PlanToolFp8, RefusesAnUnknownWeightFormat) {
  int rc = -1;
  const std::string out = RunPlan("--weights int4", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--weights must be 'dtype' or 'fp8', got 'int4'"), std::string::npos) << out;
}

}  // namespace
}  // namespace ditserve
