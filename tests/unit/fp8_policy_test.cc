// What `--weights fp8` covers and refuses, without a GPU (models/common/fp8_linear.h): the flag's
// values, the block linears it quantizes in the three families' checkpoints (and the ones it
// leaves alone), the GEMM's shape rule, and the refusal on this build/device.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "models/common/fp8_linear.h"

namespace ditserve::models {
namespace {

TEST(Fp8Policy, FlagValues) {
  EXPECT_EQ(*ParseWeightFormat("dtype"), WeightFormat::kModelDtype);
  EXPECT_EQ(*ParseWeightFormat("fp8"), WeightFormat::kFp8);
  auto bad = ParseWeightFormat("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--weights must be 'dtype' or 'fp8', got 'int8'");
  EXPECT_STREQ(WeightFormatName(WeightFormat::kFp8), "fp8");
}

TEST(Fp8Policy, BlockTokenGemmsOnly) {
  // FLUX.1
  for (const char* p : {"transformer_blocks.0.attn.to_q", "transformer_blocks.18.attn.add_v_proj",
                        "transformer_blocks.3.attn.to_out.0", "transformer_blocks.3.attn.to_add_out",
                        "transformer_blocks.0.ff.net.0.proj", "transformer_blocks.0.ff_context.net.2",
                        "single_transformer_blocks.37.proj_mlp", "single_transformer_blocks.0.proj_out",
                        "single_transformer_blocks.5.attn.to_k",
                        // FLUX.2
                        "single_transformer_blocks.0.attn.to_qkv_mlp_proj",
                        "single_transformer_blocks.0.attn.to_out",
                        // Qwen-Image
                        "transformer_blocks.59.img_mlp.net.2", "transformer_blocks.1.txt_mlp.net.0.proj",
                        "transformer_blocks.0.attn.add_q_proj"}) {
    EXPECT_TRUE(IsFp8BlockLinear(p)) << p;
  }
  for (const char* p : {"transformer_blocks.0.norm1.linear", "transformer_blocks.0.norm1_context.linear",
                        "single_transformer_blocks.0.norm.linear", "transformer_blocks.0.img_mod.1",
                        "transformer_blocks.0.txt_mod.1", "x_embedder", "context_embedder",
                        "proj_out", "norm_out.linear", "time_text_embed.timestep_embedder.linear_1",
                        "double_stream_modulation_img.linear", "img_in", "txt_in"}) {
    EXPECT_FALSE(IsFp8BlockLinear(p)) << p;
  }
}

TEST(Fp8Policy, ShapesTheGemmTakes) {
  EXPECT_TRUE(Fp8Shape(torch::zeros({3072, 3072})));
  EXPECT_TRUE(Fp8Shape(torch::zeros({16, 32})));
  EXPECT_FALSE(Fp8Shape(torch::zeros({24, 32})));
  EXPECT_FALSE(Fp8Shape(torch::zeros({32, 40})));
  EXPECT_FALSE(Fp8Shape(torch::zeros({32})));
}

TEST(Fp8Policy, RefusedWithoutACudaDevice) {
  const absl::Status s = CheckFp8Supported(torch::kCPU, torch::kBFloat16);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--weights fp8"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace ditserve::models
