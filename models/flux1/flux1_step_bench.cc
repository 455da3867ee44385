// ditserve-flux1-bench: median wall time of one FLUX.1 transformer forward (one denoising step)
// with RANDOM weights (no checkpoint needed), for a given config, token counts, device and dtype.
// Defaults are the full FLUX.1-dev sizes (19 double / 38 single blocks, 24 heads × 128, joint
// 4096, pooled 768, guidance embedder) at 1024² (4096 image tokens) with 512 text tokens, bf16.
//
//   ditserve-flux1-bench --device cuda --runs 10 --warmup 3
//   ditserve-flux1-bench --layers 2 --single-layers 2 --heads 4 --head-dim 16 --joint-dim 32
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
#include "common/flags.h"
#include "common/status_macros.h"
#include "models/common/bench_support.h"
#include "models/flux1/flux1_transformer.h"
#ifdef DITSERVE_BENCH_PROFILER
#include "models/common/bench_profiler.h"
#endif
#include "worker/comm/local_communicator.h"

namespace ditserve::models::flux1 {
namespace {

struct BenchOptions {
  int64_t layers = 19, single_layers = 38, heads = 24, head_dim = 128;
  int64_t joint_dim = 4096, pooled_dim = 768, in_channels = 64;
  std::string axes = "16,56,56";
  bool no_guidance = false;
  int64_t image_tokens = 4096, text_tokens = 512, batch = 1;
  std::string device = "cpu", dtype = "bfloat16";
  int64_t warmup = 2, runs = 5;
  uint64_t seed = 0;
  std::string profile;  // kernel table path (ditserve-flux1-profile only)
};

// Every tensor of FluxTransformer2DModel (SPEC §2.1 state dict) with its shape.
std::map<std::string, std::vector<int64_t>> StateDictShapes(const FluxTransformerConfig& c) {
  const int64_t d = c.inner_dim(), hd = c.attention_head_dim, mlp = 4 * d;
  std::map<std::string, std::vector<int64_t>> s;
  auto linear = [&](const std::string& p, int64_t out, int64_t in) {
    s[p + ".weight"] = {out, in};
    s[p + ".bias"] = {out};
  };
  linear("x_embedder", d, c.in_channels);
  linear("context_embedder", d, c.joint_attention_dim);
  linear("time_text_embed.timestep_embedder.linear_1", d, 256);
  linear("time_text_embed.timestep_embedder.linear_2", d, d);
  if (c.guidance_embeds) {
    linear("time_text_embed.guidance_embedder.linear_1", d, 256);
    linear("time_text_embed.guidance_embedder.linear_2", d, d);
  }
  linear("time_text_embed.text_embedder.linear_1", d, c.pooled_projection_dim);
  linear("time_text_embed.text_embedder.linear_2", d, d);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string b = absl::StrCat("transformer_blocks.", i, ".");
    linear(b + "norm1.linear", 6 * d, d);
    linear(b + "norm1_context.linear", 6 * d, d);
    for (const char* m : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj",
                          "to_out.0", "to_add_out"}) {
      linear(b + "attn." + m, d, d);
    }
    for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"}) {
      s[b + "attn." + n + ".weight"] = {hd};
    }
    linear(b + "ff.net.0.proj", mlp, d);
    linear(b + "ff.net.2", d, mlp);
    linear(b + "ff_context.net.0.proj", mlp, d);
    linear(b + "ff_context.net.2", d, mlp);
  }
  for (int64_t i = 0; i < c.num_single_layers; ++i) {
    const std::string b = absl::StrCat("single_transformer_blocks.", i, ".");
    linear(b + "norm.linear", 3 * d, d);
    linear(b + "proj_mlp", mlp, d);
    linear(b + "proj_out", d, d + mlp);
    for (const char* m : {"to_q", "to_k", "to_v"}) linear(b + "attn." + m, d, d);
    for (const char* n : {"norm_q", "norm_k"}) s[b + "attn." + n + ".weight"] = {hd};
  }
  linear("norm_out.linear", 2 * d, d);
  linear("proj_out", c.out_channels, d);
  return s;
}

absl::Status Run(const BenchOptions& o) {
  FluxTransformerConfig c;
  c.num_layers = o.layers;
  c.num_single_layers = o.single_layers;
  c.num_attention_heads = o.heads;
  c.attention_head_dim = o.head_dim;
  c.joint_attention_dim = o.joint_dim;
  c.pooled_projection_dim = o.pooled_dim;
  c.in_channels = c.out_channels = o.in_channels;
  c.guidance_embeds = !o.no_guidance;
  c.axes_dims_rope.clear();
  for (absl::string_view a : absl::StrSplit(o.axes, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(a, &v)) return absl::InvalidArgumentError("--axes: comma-separated ints");
    c.axes_dims_rope.push_back(v);
  }
  // Re-validate through the same parser the checkpoints go through.
  nlohmann::json j = {{"num_layers", c.num_layers}, {"num_single_layers", c.num_single_layers},
                      {"num_attention_heads", c.num_attention_heads},
                      {"attention_head_dim", c.attention_head_dim},
                      {"joint_attention_dim", c.joint_attention_dim},
                      {"pooled_projection_dim", c.pooled_projection_dim},
                      {"in_channels", c.in_channels}, {"guidance_embeds", c.guidance_embeds},
                      {"axes_dims_rope", c.axes_dims_rope}};
  ASSIGN_OR_RETURN(c, ParseFluxTransformerConfig(j));

  torch::ScalarType dtype = o.dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
  if (o.dtype != "float32" && o.dtype != "bfloat16") {
    return absl::InvalidArgumentError("--dtype must be float32 or bfloat16");
  }
  const bool cuda = o.device == "cuda";
  if (cuda && !torch::cuda::is_available()) return absl::FailedPreconditionError("no CUDA device");
  if (!cuda && o.device != "cpu") return absl::InvalidArgumentError("--device must be cpu or cuda");
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  int64_t params = 0;
  sharding::ShardedStateDict sd = RandomStateDict(StateDictShapes(c), opts, o.seed, &params);
  auto comm = comm::MakeSingleRankCommunicator();
  ASSIGN_OR_RETURN(auto model, FluxTransformer2DModel::Load(c, sd, comm.get()));

  FluxForwardArgs a;
  const int64_t b = o.batch, n = o.image_tokens, t = o.text_tokens;
  a.hidden_states = torch::randn({b, n, c.in_channels}, opts);
  a.encoder_hidden_states = torch::randn({b, t, c.joint_attention_dim}, opts);
  a.pooled_projections = torch::randn({b, c.pooled_projection_dim}, opts);
  a.timestep = torch::full({b}, 1.0, opts);
  a.guidance = torch::full({b}, 3.5, opts);
  // Image ids on a square-ish grid [0, y, x]; text ids all zero (as the FLUX.1 pipeline).
  int64_t cols = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (cols > 1 && n % cols != 0) --cols;
  auto idx = torch::arange(n, torch::TensorOptions().dtype(torch::kFloat32));
  a.img_ids = torch::stack({torch::zeros_like(idx), torch::floor(idx / cols), torch::fmod(idx, cols)}, 1)
                  .to(device, dtype);
  a.txt_ids = torch::zeros({t, 3}, opts);

  std::printf("FLUX.1 transformer: %lld double + %lld single blocks, %lld heads x %lld, %.3f B params, "
              "%s %s, batch %lld, %lld image + %lld text tokens\n",
              static_cast<long long>(c.num_layers), static_cast<long long>(c.num_single_layers),
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.attention_head_dim),
              params / 1e9, o.device.c_str(), o.dtype.c_str(), static_cast<long long>(b),
              static_cast<long long>(n), static_cast<long long>(t));
  ASSIGN_OR_RETURN(StepTimes times,
                   TimeSteps([&] { return model->Forward(a); }, device, o.warmup, o.runs));
  std::printf("median %.3f ms/step  (min %.3f, max %.3f, %zu runs after %lld warmup)\n",
              times.median_ms, times.min_ms, times.max_ms, times.runs,
              static_cast<long long>(o.warmup));
  if (!o.profile.empty()) {
#ifdef DITSERVE_BENCH_PROFILER
    RETURN_IF_ERROR(ProfileKernels([&] { return model->Forward(a).status(); }, o.profile));
#else
    return absl::UnimplementedError("--profile needs the CUDA build's ditserve-flux1-profile");
#endif
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ditserve::models::flux1

int main(int argc, char** argv) {
  ditserve::models::flux1::BenchOptions o;
  ditserve::FlagParser p("ditserve-flux1-bench",
                         "Median ms per FLUX.1 transformer forward with random weights.");
  p.AddInt("layers", &o.layers, "double-stream blocks");
  p.AddInt("single-layers", &o.single_layers, "single-stream blocks");
  p.AddInt("heads", &o.heads, "attention heads");
  p.AddInt("head-dim", &o.head_dim, "attention head dim");
  p.AddInt("joint-dim", &o.joint_dim, "joint_attention_dim (T5 width)");
  p.AddInt("pooled-dim", &o.pooled_dim, "pooled_projection_dim (CLIP width)");
  p.AddInt("in-channels", &o.in_channels, "packed latent channels");
  p.AddString("axes", &o.axes, "axes_dims_rope, comma-separated (sum = head dim)");
  p.AddBool("no-guidance", &o.no_guidance, "no guidance embedder (schnell)");
  p.AddInt("image-tokens", &o.image_tokens, "image tokens (4096 = 1024x1024)");
  p.AddInt("text-tokens", &o.text_tokens, "text tokens");
  p.AddInt("batch", &o.batch, "batch size");
  p.AddString("device", &o.device, "cpu | cuda");
  p.AddString("dtype", &o.dtype, "bfloat16 | float32");
  p.AddInt("warmup", &o.warmup, "untimed runs first");
  p.AddInt("runs", &o.runs, "timed runs");
  p.AddUint("seed", &o.seed, "weight seed");
  p.AddString("profile", &o.profile,
              "after timing, profile one step and write a per-kernel table here (CUDA profile build)");
  if (auto s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n\n%s", std::string(s.message()).c_str(), p.Help().c_str());
    return 2;
  }
  if (p.HelpRequested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  auto status = ditserve::models::flux1::Run(o);
  if (!status.ok()) {
    std::fprintf(stderr, "ditserve-flux1-bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
