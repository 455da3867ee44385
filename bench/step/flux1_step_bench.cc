// ditserve-flux1-bench: median wall time of one FLUX.1 transformer forward (one denoising step)
// with RANDOM weights (no checkpoint needed), for a given config, token counts, device and dtype.
// Defaults are the full FLUX.1-dev sizes (19 double / 38 single blocks, 24 heads × 128, joint
// 4096, pooled 768, guidance embedder) at 1024² (4096 image tokens) with 512 text tokens, bf16.
//
//   ditserve-flux1-bench --device cuda --runs 10 --warmup 3
//   ditserve-flux1-bench --device cuda --runs 10 --warmup 3 --lora-rank 64   (LoRA:
//   lora_step_bench.h) ditserve-flux1-bench --layers 2 --single-layers 2 --heads 4 --head-dim 16
//   --joint-dim 32
//       --pooled-dim 32 --in-channels 16 --axes 4,6,6 --image-tokens 64 --text-tokens 32
//
// Timing: each step is bracketed by device synchronisation (CUDA) and measured on the host clock.
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/step/lora_step_bench.h"
#include "bench/step/step_bench.h"
#include "comm/local_communicator.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "models/flux1/flux1_state_dict_shapes.h"
#include "models/flux1/flux1_transformer.h"

namespace ditserve::models::flux1 {
namespace {

using namespace ::ditserve::bench;  // NOLINT: the harness, in this benchmark binary only

struct BenchOptions {
  TransformerShapeOptions shape{19, 24, 128, 4096, 64, "16,56,56"};
  int64_t single_layers = 38, pooled_dim = 768;
  bool no_guidance = false;
  int64_t lora_rank = 0;
  CommonBenchOptions common;
};

void AddFlags(FlagParser* p, BenchOptions* o) {
  p->AddInt("single-layers", &o->single_layers, "single-stream blocks");
  p->AddInt("pooled-dim", &o->pooled_dim, "pooled_projection_dim (CLIP width)");
  p->AddBool("no-guidance", &o->no_guidance, "no guidance embedder (schnell)");
  p->AddInt("lora-rank", &o->lora_rank,
            "> 0: time the step with and without a random LoRA of this rank on every block linear, "
            "and switching adapters");
}

absl::Status Run(const BenchOptions& o);

const StepBenchProgram<BenchOptions> kProgram{"ditserve-flux1-bench", "FLUX.1",
                                              "double-stream blocks", &AddFlags, &Run};

absl::Status Run(const BenchOptions& o) {
  FluxTransformerConfig c;
  RETURN_IF_ERROR(ApplyTransformerShape(o.shape, &c));
  c.out_channels = c.in_channels;
  c.num_single_layers = o.single_layers;
  c.pooled_projection_dim = o.pooled_dim;
  c.guidance_embeds = !o.no_guidance;
  // Re-validate through the same parser the checkpoints go through.
  nlohmann::json j = {{"num_layers", c.num_layers},
                      {"num_single_layers", c.num_single_layers},
                      {"num_attention_heads", c.num_attention_heads},
                      {"attention_head_dim", c.attention_head_dim},
                      {"joint_attention_dim", c.joint_attention_dim},
                      {"pooled_projection_dim", c.pooled_projection_dim},
                      {"in_channels", c.in_channels},
                      {"guidance_embeds", c.guidance_embeds},
                      {"axes_dims_rope", c.axes_dims_rope}};
  ASSIGN_OR_RETURN(c, ParseFluxTransformerConfig(j));

  ASSIGN_OR_RETURN(const BenchTarget target, ResolveBenchTarget(o.common));
  const torch::Device device = target.device;
  torch::NoGradGuard no_grad;
  const auto opts = target.options();
  int64_t params = 0;
  ASSIGN_OR_RETURN(BenchModelInputs in,
                   MakeBenchModelInputs(FluxStateDictShapes(c), "FluxTransformer2DModel", j, opts,
                                        o.common, &params));

  FluxForwardArgs a;
  const int64_t b = o.common.batch, n = o.common.image_tokens, t = o.common.text_tokens;
  a.hidden_states = torch::randn({b, n, c.in_channels}, opts);
  a.encoder_hidden_states = torch::randn({b, t, c.joint_attention_dim}, opts);
  a.pooled_projections = torch::randn({b, c.pooled_projection_dim}, opts);
  a.timestep = torch::full({b}, 1.0, opts);
  a.guidance = torch::full({b}, 3.5, opts);
  // Image ids on a square-ish grid [0, y, x]; text ids all zero (as the FLUX.1 pipeline).
  const int64_t cols = SquarestGridColumns(n);
  auto idx = torch::arange(n, torch::TensorOptions().dtype(torch::kFloat32));
  a.img_ids =
      torch::stack({torch::zeros_like(idx), torch::floor(idx / cols), torch::fmod(idx, cols)}, 1)
          .to(device, target.dtype);
  a.txt_ids = torch::zeros({t, 3}, opts);

  using Step = std::function<absl::StatusOr<torch::Tensor>()>;
  std::function<absl::Status(const FluxTransformer2DModel&, const Step&)> lora;
  if (o.lora_rank > 0) {
    lora = [&](const FluxTransformer2DModel& model, const Step& step) {
      return BenchLora(model, o.lora_rank, step, target, o.common, *in.comm);
    };
  }
  return RunStepBench<FluxTransformer2DModel>(
      c, in, target, a, o.common, nullptr,
      [&] {
        std::printf(
            "FLUX.1 transformer: %lld double + %lld single blocks, %lld heads x %lld, %.3f B "
            "params, "
            "%s %s, batch %lld, %lld image + %lld text tokens\n",
            static_cast<long long>(c.num_layers), static_cast<long long>(c.num_single_layers),
            static_cast<long long>(c.num_attention_heads),
            static_cast<long long>(c.attention_head_dim), params / 1e9, o.common.device.c_str(),
            o.common.dtype.c_str(), static_cast<long long>(b), static_cast<long long>(n),
            static_cast<long long>(t));
      },
      lora);
}

}  // namespace
}  // namespace ditserve::models::flux1

int main(int argc, char** argv) {
  return ditserve::bench::StepBenchMain(argc, argv, ditserve::models::flux1::kProgram);
}
