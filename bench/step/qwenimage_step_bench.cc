// ditserve-qwenimage-bench: median wall time of one Qwen-Image transformer forward (one denoising
// step) with RANDOM weights (no checkpoint needed), for a given config, token counts, device and
// dtype. Defaults are the full Qwen-Image sizes (60 blocks, 24 heads × 128, joint 3584, 64 → 64
// channels, RoPE axes 16,56,56) at 1024² (a 64 × 64 packed grid = 4096 image tokens) with 512 text
// tokens, bf16 (≈41 GB of weights).
//
//   ditserve-qwenimage-bench --device cuda --runs 10 --warmup 3
//   ditserve-qwenimage-bench --layers 2 --heads 4 --head-dim 16 --joint-dim 32 --in-channels 16
//       --out-channels 4 --axes 4,6,6 --image-tokens 64 --text-tokens 10 --masked-text-tokens 2
//
// Image tokens are laid out as one image on the most square rows × cols grid (img_shapes
// (1, rows, cols)). Timing: each step is bracketed by device synchronisation (CUDA) and measured
// on the host clock.
//
// --reference-images N times a step of Qwen-Image-Edit-2509 (diffusers' QwenImageEditPlusPipeline,
// pipeline/qwenimage_pipeline.cc) with N input images whose VAE side is --reference-size
// (WIDTHxHEIGHT pixels, default 1024x1024, the pipeline's VAE_IMAGE_SIZE for a square image: one
// token per 16x16 pixels, 4096 each): the images' packed latents appended after the output's
// tokens (`torch.cat([latents, image_latents], dim=1)`), img_shapes [(1, rows, cols), then
// (1, r, c) per image], and the velocity narrowed back to the output's tokens
// (`noise_pred[:, : latents.size(1)]`). The prompt's length is --text-tokens (the pipeline's
// prompt holds each image's vision tokens: scripts/gpu-bench.sh stage 18 passes its length).
//
//   ditserve-qwenimage-bench --device cuda --runs 5 --warmup 2 --reference-images 2
//       --text-tokens 418
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/step/step_bench.h"
#include "comm/local_communicator.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "models/qwenimage/qwenimage_state_dict_shapes.h"
#include "models/qwenimage/qwenimage_transformer.h"

namespace ditserve::models::qwenimage {
namespace {

using namespace ::ditserve::bench;  // NOLINT: the harness, in this benchmark binary only

struct BenchOptions {
  TransformerShapeOptions shape{60, 24, 128, 3584, 64, "16,56,56"};
  int64_t out_channels = 16, patch_size = 2;
  int64_t masked_text_tokens = 0;
  ReferenceImageOptions references;
  CommonBenchOptions common;
};

void AddFlags(FlagParser* p, BenchOptions* o) {
  p->AddInt("out-channels", &o->out_channels, "out_channels (proj_out gives patch^2 x this)");
  p->AddInt("patch-size", &o->patch_size, "patch_size");
  p->AddInt("masked-text-tokens", &o->masked_text_tokens,
            "trailing text tokens masked out (0: no mask)");
  AddReferenceImageFlags(
      p, &o->references,
      "Qwen-Image-Edit-2509: N input images' tokens appended to the image tokens each step, as "
      "QwenImageEditPlusPipeline (0..3)",
      "each input image's VAE size");
}

absl::Status Run(const BenchOptions& o);

const StepBenchProgram<BenchOptions> kProgram{"ditserve-qwenimage-bench", "Qwen-Image",
                                              "transformer blocks", &AddFlags, &Run};

// Qwen-Image has one token per 16x16 pixels: the VAE's 8x downsampling, then 2x2 packed latents
// (the pipeline's vae_scale_factor * 2).
constexpr int64_t kPixelsPerToken = 16;
// As many input images as the served edit pipeline takes (QwenImagePipeline::kMaxEditImages).
constexpr int64_t kMaxReferenceImages = 3;

absl::Status Run(const BenchOptions& o) {
  QwenImageTransformerConfig c;
  RETURN_IF_ERROR(ApplyTransformerShape(o.shape, &c));
  c.out_channels = o.out_channels;
  c.patch_size = o.patch_size;
  // Re-validate through the same parser the checkpoints go through.
  ASSIGN_OR_RETURN(c, ParseQwenImageTransformerConfig(QwenImageConfigToJson(c)));

  ASSIGN_OR_RETURN(const BenchTarget target, ResolveBenchTarget(o.common));
  if (o.masked_text_tokens < 0 || o.masked_text_tokens >= o.common.text_tokens) {
    return absl::InvalidArgumentError("--masked-text-tokens must be in [0, --text-tokens)");
  }
  torch::NoGradGuard no_grad;
  const auto opts = target.options();
  int64_t params = 0;
  ASSIGN_OR_RETURN(BenchModelInputs in,
                   MakeBenchModelInputs(QwenImageStateDictShapes(c), "QwenImageTransformer2DModel",
                                        QwenImageConfigToJson(c), opts, o.common, &params));

  QwenImageForwardArgs a;
  const int64_t b = o.common.batch, n = o.common.image_tokens, t = o.common.text_tokens;
  a.hidden_states = torch::randn({b, n, c.in_channels}, opts);
  a.encoder_hidden_states = torch::randn({b, t, c.joint_attention_dim}, opts);
  a.timestep = torch::full({b}, 1.0, opts);
  const int64_t cols = SquarestGridColumns(n);
  a.img_shapes = torch::tensor({int64_t{1}, n / cols, cols}, torch::kInt64);
  if (o.masked_text_tokens > 0) {
    a.encoder_hidden_states_mask = torch::ones({b, t}, opts);
    a.encoder_hidden_states_mask.narrow(1, t - o.masked_text_tokens, o.masked_text_tokens).zero_();
  }

  // Qwen-Image-Edit-Plus: N images' tokens after the output's, img_shapes (B, 1 + N, 3); every step
  // appends them to the latents and narrows the velocity back, as DiffusionPipeline::Forward does.
  ASSIGN_OR_RETURN(
      ReferenceTokens refs,
      MakeReferenceTokens(o.references, kMaxReferenceImages, "the edit pipeline's limit",
                          kPixelsPerToken, b, c.in_channels, opts));
  refs.detail = "img_shapes 1 + " + std::to_string(refs.count) + " entries";
  if (refs.count > 0) {
    std::vector<int64_t> shapes = {1, n / cols, cols};
    for (int64_t i = 0; i < refs.count; ++i) shapes.insert(shapes.end(), {1, refs.rows, refs.cols});
    const int64_t k = 1 + refs.count;
    a.img_shapes =
        torch::tensor(shapes, torch::kInt64).view({1, k, 3}).expand({b, k, 3}).contiguous();
  }

  return RunStepBench<QwenImageTransformer2DModel>(c, in, target, a, o.common, &refs, [&] {
    std::printf(
        "Qwen-Image transformer: %lld blocks, %lld heads x %lld, %lld params (%.2f B), %s "
        "%s, batch %lld, %lld image (%lld x %lld) + %lld text tokens (%lld masked)\n",
        static_cast<long long>(c.num_layers), static_cast<long long>(c.num_attention_heads),
        static_cast<long long>(c.attention_head_dim), static_cast<long long>(params), params / 1e9,
        o.common.device.c_str(), o.common.dtype.c_str(), static_cast<long long>(b),
        static_cast<long long>(n), static_cast<long long>(n / cols), static_cast<long long>(cols),
        static_cast<long long>(t), static_cast<long long>(o.masked_text_tokens));
  });
}

}  // namespace
}  // namespace ditserve::models::qwenimage

int main(int argc, char** argv) {
  return ditserve::bench::StepBenchMain(argc, argv, ditserve::models::qwenimage::kProgram);
}
