// ditserve-flux2-bench: median wall time of one FLUX.2 transformer forward (one denoising step)
// with RANDOM weights (no checkpoint needed), for a given config, token counts, device and dtype.
// Defaults are the full FLUX.2-dev sizes (8 double / 48 single blocks, 48 heads × 128, joint
// 15360, mlp_ratio 3, RoPE axes 32×4 θ 2000, guidance embedder) at 1024² (4096 image tokens) with
// 512 text tokens, bf16 (≈64 GB of weights).
//
// --reference-images N times a step of FLUX.2 editing as Flux2Pipeline runs it with N reference
// images of --reference-size (WIDTHxHEIGHT pixels, default 1024x1024: 4096 tokens each, one per
// 16x16 pixels): the reference tokens appended to the generated image's tokens (4096 + N * 4096
// at released size), reference i's ids (10 + 10 i, y, x, 0) after the image's (0, y, x, 0), and
// the velocity narrowed back to the generated tokens (pipeline/diffusion_pipeline.cc Forward,
// pipeline/flux2_pipeline.cc ConditionOnImages).
//
//   ditserve-flux2-bench --device cuda --runs 10 --warmup 3
//   ditserve-flux2-bench --device cuda --runs 5 --warmup 2 --reference-images 3
//   ditserve-flux2-bench --layers 2 --single-layers 2 --heads 4 --head-dim 16 --joint-dim 32
//       --in-channels 16 --axes 4,4,4,4 --timestep-channels 32 --image-tokens 64 --text-tokens 12
//
// Timing: each step is bracketed by device synchronisation (CUDA) and measured on the host clock.
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
#include "models/flux2/flux2_state_dict_shapes.h"
#include "models/flux2/flux2_transformer.h"

namespace ditserve::models::flux2 {
namespace {

using namespace ::ditserve::bench;  // NOLINT: the harness, in this benchmark binary only

struct BenchOptions {
  TransformerShapeOptions shape{8, 48, 128, 15360, 128, "32,32,32,32"};
  int64_t single_layers = 48, timestep_channels = 256;
  double mlp_ratio = 3.0, rope_theta = 2000;
  bool no_guidance = false;
  ReferenceImageOptions references;
  CommonBenchOptions common;
};

void AddFlags(FlagParser* p, BenchOptions* o) {
  p->AddInt("single-layers", &o->single_layers, "single-stream blocks");
  p->AddInt("timestep-channels", &o->timestep_channels, "timestep_guidance_channels");
  p->AddDouble("mlp-ratio", &o->mlp_ratio, "mlp_ratio (Mh = int(D * ratio))");
  p->AddDouble("rope-theta", &o->rope_theta, "rope_theta");
  p->AddBool("no-guidance", &o->no_guidance, "no guidance embedder (Klein)");
  AddReferenceImageFlags(
      p, &o->references,
      "FLUX.2 editing: N reference images' tokens appended to the image tokens each step, as "
      "Flux2Pipeline (0..10)",
      "each reference image's size");
}

absl::Status Run(const BenchOptions& o);

const StepBenchProgram<BenchOptions> kProgram{"ditserve-flux2-bench", "FLUX.2",
                                              "double-stream blocks", &AddFlags, &Run};

// FLUX.2 has one token per 16x16 pixels: the VAE's 8x downsampling, then 2x2 patchified latents
// (the pipeline's vae_scale_factor * 2).
constexpr int64_t kPixelsPerToken = 16;

// (rows * cols, axes) int64 ids (t, y, x, 0), row-major, as pipeline/image_inputs.h's
// Flux2TokenIds (and our default image ids: int64, as diffusers' pipeline hands them over).
torch::Tensor TokenIds(int64_t t, int64_t rows, int64_t cols, int64_t axes) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  auto idx = torch::arange(rows * cols, i64);
  torch::Tensor ids = torch::zeros({rows * cols, axes}, i64);
  ids.select(1, 0).fill_(t);
  if (axes > 2) {
    ids.select(1, 1).copy_(torch::div(idx, cols, "floor"));
    ids.select(1, 2).copy_(torch::remainder(idx, cols));
  }
  return ids;
}

absl::Status Run(const BenchOptions& o) {
  Flux2TransformerConfig c;
  RETURN_IF_ERROR(ApplyTransformerShape(o.shape, &c));
  c.out_channels = c.in_channels;
  c.num_single_layers = o.single_layers;
  c.timestep_guidance_channels = o.timestep_channels;
  c.mlp_ratio = o.mlp_ratio;
  c.rope_theta = o.rope_theta;
  c.guidance_embeds = !o.no_guidance;
  // Re-validate through the same parser the checkpoints go through.
  ASSIGN_OR_RETURN(c, ParseFlux2TransformerConfig(Flux2ConfigToJson(c)));

  ASSIGN_OR_RETURN(const BenchTarget target, ResolveBenchTarget(o.common));
  const torch::Device device = target.device;
  torch::NoGradGuard no_grad;
  const auto opts = target.options();
  int64_t params = 0;
  ASSIGN_OR_RETURN(BenchModelInputs in,
                   MakeBenchModelInputs(Flux2StateDictShapes(c), "Flux2Transformer2DModel",
                                        Flux2ConfigToJson(c), opts, o.common, &params));

  Flux2ForwardArgs a;
  const int64_t b = o.common.batch, n = o.common.image_tokens, t = o.common.text_tokens;
  const int64_t axes = static_cast<int64_t>(c.axes_dims_rope.size());
  a.hidden_states = torch::randn({b, n, c.in_channels}, opts);
  a.encoder_hidden_states = torch::randn({b, t, c.joint_attention_dim}, opts);
  a.timestep = torch::full({b}, 1.0, opts);
  a.guidance = torch::full({b}, 4.0, opts);
  // As the FLUX.2 pipeline: image ids (t=0, y, x, l=0) on a square-ish grid, text ids (0, 0, 0, k).
  const int64_t cols = SquarestGridColumns(n);
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  auto idx = torch::arange(n, i64);
  a.img_ids = torch::zeros({n, axes}, i64);
  if (axes > 2) {
    a.img_ids.select(1, 1).copy_(torch::div(idx, cols, "floor"));
    a.img_ids.select(1, 2).copy_(torch::remainder(idx, cols));
  }
  a.txt_ids = torch::zeros({t, axes}, i64);
  a.txt_ids.select(1, axes - 1).copy_(torch::arange(t, i64));

  // FLUX.2 editing: N references' tokens after the generated ones, their ids (10 + 10 i, y, x, 0)
  // after the image's; every step appends them to the latents and narrows the velocity back, as
  // DiffusionPipeline::Forward does.
  ASSIGN_OR_RETURN(ReferenceTokens refs,
                   MakeReferenceTokens(o.references, 10, "FLUX.2 takes 10", kPixelsPerToken, b,
                                       c.in_channels, opts));
  refs.detail = "ids t = 10.." + std::to_string(10 * refs.count);
  if (refs.count > 0) {
    std::vector<torch::Tensor> ids = {a.img_ids};
    for (int64_t i = 0; i < refs.count; ++i) {
      ids.push_back(TokenIds(10 + 10 * i, refs.rows, refs.cols, axes));
    }
    a.img_ids = torch::cat(ids, 0);
  }
  a.img_ids = a.img_ids.to(device);
  a.txt_ids = a.txt_ids.to(device);

  return RunStepBench<Flux2Transformer2DModel>(c, in, target, a, o.common, &refs, [&] {
    std::printf(
        "FLUX.2 transformer: %lld double + %lld single blocks, %lld heads x %lld, mlp %lld, "
        "%lld params (%.2f B), %s %s, batch %lld, %lld image + %lld text tokens\n",
        static_cast<long long>(c.num_layers), static_cast<long long>(c.num_single_layers),
        static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.attention_head_dim),
        static_cast<long long>(c.mlp_hidden_dim()), static_cast<long long>(params), params / 1e9,
        o.common.device.c_str(), o.common.dtype.c_str(), static_cast<long long>(b),
        static_cast<long long>(n), static_cast<long long>(t));
  });
}

}  // namespace
}  // namespace ditserve::models::flux2

int main(int argc, char** argv) {
  return ditserve::bench::StepBenchMain(argc, argv, ditserve::models::flux2::kProgram);
}
