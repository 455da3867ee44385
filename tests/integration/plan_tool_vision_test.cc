// `ditserve-tool plan` on a Qwen-Image-Edit root as a real process: "vision_tower" reports the
// Qwen2.5-VL vision tower's bytes on rank 0 alone (where the edit pipelines hold it), the text
// encoder's sharded report leaves the tower out, and a plain Qwen-Image root reports no tower.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "sharding/torch_tensor.h"
#include "tests/support/fixtures.h"
#include "tests/support/qwen_edit_tiny_folder.h"

namespace ditserve {
namespace {

nlohmann::json RunPlan(const std::string& model) {
  const std::string cmd = "'" + testing::BinaryDir() + "/tools/ditserve-tool' plan --model '" +
                          model + "' --tp 2 --dtype bf16 2>/dev/null";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {};
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  return nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
}

TEST(PlanToolVision, TheEditPipelinesTowerIsOnRankZero) {
  const std::string dir =
      ::testing::TempDir() + "ditserve-plan-vision-" + std::to_string(::getpid());
  ASSERT_TRUE(testing::WriteQwenEditTinyFolder(dir, 11).ok());
  const nlohmann::json report = RunPlan(dir);
  ASSERT_TRUE(report.is_object());
  ASSERT_TRUE(report.contains("vision_tower")) << report.dump();
  // The tower's tensors, counted in bfloat16, from the checkpoint itself.
  auto tensors = sharding::ReadAllTensors(dir + "/text_encoder/model.safetensors");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  uint64_t bytes = 0, count = 0;
  for (const auto& [name, t] : *tensors) {
    if (name.rfind("visual.", 0) != 0) continue;
    bytes += static_cast<uint64_t>(t.numel()) * 2;
    ++count;
  }
  ASSERT_GT(count, 0u);
  const nlohmann::json& tower = report["vision_tower"];
  EXPECT_EQ(tower["tensors"].get<uint64_t>(), count);
  EXPECT_EQ(tower["total_bytes"].get<uint64_t>(), bytes);
  EXPECT_EQ(tower["total_bytes_per_rank"], nlohmann::json::array({bytes, 0}));
  for (const nlohmann::json& t : report["text_encoder"]["tensors"]) {
    EXPECT_EQ(t["name"].get<std::string>().find("visual."), std::string::npos) << t["name"];
  }
  EXPECT_FALSE(RunPlan(testing::FixturesDir() + "/qwenimage-tiny").contains("vision_tower"));
}

}  // namespace
}  // namespace ditserve
