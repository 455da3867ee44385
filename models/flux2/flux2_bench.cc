// ditserve-flux2-bench: median wall time of one FLUX.2 transformer forward (one denoising step)
// with RANDOM weights (no checkpoint needed), for a given config, token counts, device and dtype.
// Defaults are the full FLUX.2-dev sizes (8 double / 48 single blocks, 48 heads × 128, joint
// 15360, mlp_ratio 3, RoPE axes 32×4 θ 2000, guidance embedder) at 1024² (4096 image tokens) with
// 512 text tokens, bf16 (≈64 GB of weights).
//
//   ditserve-flux2-bench --device cuda --runs 10 --warmup 3
//   ditserve-flux2-bench --layers 2 --single-layers 2 --heads 4 --head-dim 16 --joint-dim 32
//       --in-channels 16 --axes 4,4,4,4 --timestep-channels 32 --image-tokens 64 --text-tokens 12
//
// Timing: each step is bracketed by device synchronisation (CUDA) and measured on the host clock.
#include <cmath>
#include <cstdio>
#include <string>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "models/common/bench_support.h"
#include "models/flux2/flux2_state_dict_shapes.h"
#include "models/flux2/flux2_transformer.h"
#include "worker/comm/local_communicator.h"

namespace ditserve::models::flux2 {
namespace {

struct BenchOptions {
  int64_t layers = 8, single_layers = 48, heads = 48, head_dim = 128;
  int64_t joint_dim = 15360, in_channels = 128, timestep_channels = 256;
  double mlp_ratio = 3.0, rope_theta = 2000;
  std::string axes = "32,32,32,32";
  bool no_guidance = false;
  int64_t image_tokens = 4096, text_tokens = 512, batch = 1;
  std::string device = "cpu", dtype = "bfloat16";
  int64_t warmup = 2, runs = 5;
  uint64_t seed = 0;
};

absl::Status Run(const BenchOptions& o) {
  Flux2TransformerConfig c;
  c.num_layers = o.layers;
  c.num_single_layers = o.single_layers;
  c.num_attention_heads = o.heads;
  c.attention_head_dim = o.head_dim;
  c.joint_attention_dim = o.joint_dim;
  c.in_channels = c.out_channels = o.in_channels;
  c.timestep_guidance_channels = o.timestep_channels;
  c.mlp_ratio = o.mlp_ratio;
  c.rope_theta = o.rope_theta;
  c.guidance_embeds = !o.no_guidance;
  c.axes_dims_rope.clear();
  for (absl::string_view a : absl::StrSplit(o.axes, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(a, &v)) return absl::InvalidArgumentError("--axes: comma-separated ints");
    c.axes_dims_rope.push_back(v);
  }
  // Re-validate through the same parser the checkpoints go through.
  ASSIGN_OR_RETURN(c, ParseFlux2TransformerConfig(Flux2ConfigToJson(c)));

  if (o.dtype != "float32" && o.dtype != "bfloat16") {
    return absl::InvalidArgumentError("--dtype must be float32 or bfloat16");
  }
  const torch::ScalarType dtype = o.dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
  const bool cuda = o.device == "cuda";
  if (cuda && !torch::cuda::is_available()) return absl::FailedPreconditionError("no CUDA device");
  if (!cuda && o.device != "cpu") return absl::InvalidArgumentError("--device must be cpu or cuda");
  if (o.image_tokens < 1 || o.text_tokens < 1 || o.batch < 1) {
    return absl::InvalidArgumentError("--image-tokens, --text-tokens and --batch must be >= 1");
  }
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  int64_t params = 0;
  auto sd = RandomStateDict(Flux2StateDictShapes(c), opts, o.seed, &params);
  auto comm = comm::MakeSingleRankCommunicator();
  ASSIGN_OR_RETURN(auto model, Flux2Transformer2DModel::Load(c, sd, comm.get()));

  Flux2ForwardArgs a;
  const int64_t b = o.batch, n = o.image_tokens, t = o.text_tokens;
  const int64_t axes = static_cast<int64_t>(c.axes_dims_rope.size());
  a.hidden_states = torch::randn({b, n, c.in_channels}, opts);
  a.encoder_hidden_states = torch::randn({b, t, c.joint_attention_dim}, opts);
  a.timestep = torch::full({b}, 1.0, opts);
  a.guidance = torch::full({b}, 4.0, opts);
  // As the FLUX.2 pipeline: image ids (t=0, y, x, l=0) on a square-ish grid, text ids (0, 0, 0, k).
  int64_t cols = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (cols > 1 && n % cols != 0) --cols;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  auto idx = torch::arange(n, i64);
  a.img_ids = torch::zeros({n, axes}, i64);
  if (axes > 2) {
    a.img_ids.select(1, 1).copy_(torch::div(idx, cols, "floor"));
    a.img_ids.select(1, 2).copy_(torch::remainder(idx, cols));
  }
  a.txt_ids = torch::zeros({t, axes}, i64);
  a.txt_ids.select(1, axes - 1).copy_(torch::arange(t, i64));
  a.img_ids = a.img_ids.to(device);
  a.txt_ids = a.txt_ids.to(device);

  std::printf("FLUX.2 transformer: %lld double + %lld single blocks, %lld heads x %lld, mlp %lld, "
              "%lld params (%.2f B), %s %s, batch %lld, %lld image + %lld text tokens\n",
              static_cast<long long>(c.num_layers), static_cast<long long>(c.num_single_layers),
              static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.attention_head_dim), static_cast<long long>(c.mlp_hidden_dim()),
              static_cast<long long>(params), params / 1e9, o.device.c_str(), o.dtype.c_str(),
              static_cast<long long>(b), static_cast<long long>(n), static_cast<long long>(t));
  ASSIGN_OR_RETURN(auto times, TimeSteps([&] { return model->Forward(a); }, device, o.warmup, o.runs));
  std::printf("median %.3f ms/step  (min %.3f, max %.3f, %zu runs after %lld warmup)\n",
              times.median_ms, times.min_ms, times.max_ms, times.runs,
              static_cast<long long>(o.warmup));
  return absl::OkStatus();
}

}  // namespace
}  // namespace ditserve::models::flux2

int main(int argc, char** argv) {
  ditserve::models::flux2::BenchOptions o;
  ditserve::FlagParser p("ditserve-flux2-bench",
                         "Median ms per FLUX.2 transformer forward with random weights.");
  p.AddInt("layers", &o.layers, "double-stream blocks");
  p.AddInt("single-layers", &o.single_layers, "single-stream blocks");
  p.AddInt("heads", &o.heads, "attention heads");
  p.AddInt("head-dim", &o.head_dim, "attention head dim");
  p.AddInt("joint-dim", &o.joint_dim, "joint_attention_dim (text encoder width)");
  p.AddInt("in-channels", &o.in_channels, "latent channels per token");
  p.AddInt("timestep-channels", &o.timestep_channels, "timestep_guidance_channels");
  p.AddDouble("mlp-ratio", &o.mlp_ratio, "mlp_ratio (Mh = int(D * ratio))");
  p.AddDouble("rope-theta", &o.rope_theta, "rope_theta");
  p.AddString("axes", &o.axes, "axes_dims_rope, comma-separated (sum = head dim)");
  p.AddBool("no-guidance", &o.no_guidance, "no guidance embedder (Klein)");
  p.AddInt("image-tokens", &o.image_tokens, "image tokens (4096 = 1024x1024)");
  p.AddInt("text-tokens", &o.text_tokens, "text tokens");
  p.AddInt("batch", &o.batch, "batch size");
  p.AddString("device", &o.device, "cpu | cuda");
  p.AddString("dtype", &o.dtype, "bfloat16 | float32");
  p.AddInt("warmup", &o.warmup, "untimed runs first");
  p.AddInt("runs", &o.runs, "timed runs");
  p.AddUint("seed", &o.seed, "weight seed");
  if (auto s = p.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n\n%s", std::string(s.message()).c_str(), p.Help().c_str());
    return 2;
  }
  if (p.HelpRequested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  auto status = ditserve::models::flux2::Run(o);
  if (!status.ok()) {
    std::fprintf(stderr, "ditserve-flux2-bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
