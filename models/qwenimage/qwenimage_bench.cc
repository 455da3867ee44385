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
#include "models/qwenimage/qwenimage_state_dict_shapes.h"
#include "models/qwenimage/qwenimage_transformer.h"
#include "worker/comm/local_communicator.h"

namespace ditserve::models::qwenimage {
namespace {

struct BenchOptions {
  int64_t layers = 60, heads = 24, head_dim = 128;
  int64_t joint_dim = 3584, in_channels = 64, out_channels = 16, patch_size = 2;
  std::string axes = "16,56,56";
  int64_t image_tokens = 4096, text_tokens = 512, masked_text_tokens = 0, batch = 1;
  std::string device = "cpu", dtype = "bfloat16";
  int64_t warmup = 2, runs = 5;
  uint64_t seed = 0;
};

absl::Status Run(const BenchOptions& o) {
  QwenImageTransformerConfig c;
  c.num_layers = o.layers;
  c.num_attention_heads = o.heads;
  c.attention_head_dim = o.head_dim;
  c.joint_attention_dim = o.joint_dim;
  c.in_channels = o.in_channels;
  c.out_channels = o.out_channels;
  c.patch_size = o.patch_size;
  c.axes_dims_rope.clear();
  for (absl::string_view a : absl::StrSplit(o.axes, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(a, &v)) return absl::InvalidArgumentError("--axes: comma-separated ints");
    c.axes_dims_rope.push_back(v);
  }
  // Re-validate through the same parser the checkpoints go through.
  ASSIGN_OR_RETURN(c, ParseQwenImageTransformerConfig(QwenImageConfigToJson(c)));

  if (o.dtype != "float32" && o.dtype != "bfloat16") {
    return absl::InvalidArgumentError("--dtype must be float32 or bfloat16");
  }
  const torch::ScalarType dtype = o.dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
  const bool cuda = o.device == "cuda";
  if (cuda && !torch::cuda::is_available()) return absl::FailedPreconditionError("no CUDA device");
  if (!cuda && o.device != "cpu") return absl::InvalidArgumentError("--device must be cpu or cuda");
  if (o.image_tokens < 1 || o.text_tokens < 1 || o.batch < 1 || o.masked_text_tokens < 0 ||
      o.masked_text_tokens >= o.text_tokens) {
    return absl::InvalidArgumentError(
        "--image-tokens, --text-tokens, --batch must be >= 1 and 0 <= --masked-text-tokens < text tokens");
  }
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

  torch::NoGradGuard no_grad;
  auto opts = torch::TensorOptions().dtype(dtype).device(device);
  int64_t params = 0;
  auto sd = RandomStateDict(QwenImageStateDictShapes(c), opts, o.seed, &params);
  auto comm = comm::MakeSingleRankCommunicator();
  ASSIGN_OR_RETURN(auto model, QwenImageTransformer2DModel::Load(c, sd, comm.get()));

  QwenImageForwardArgs a;
  const int64_t b = o.batch, n = o.image_tokens, t = o.text_tokens;
  a.hidden_states = torch::randn({b, n, c.in_channels}, opts);
  a.encoder_hidden_states = torch::randn({b, t, c.joint_attention_dim}, opts);
  a.timestep = torch::full({b}, 1.0, opts);
  int64_t cols = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (cols > 1 && n % cols != 0) --cols;
  a.img_shapes = torch::tensor({int64_t{1}, n / cols, cols}, torch::kInt64);
  if (o.masked_text_tokens > 0) {
    a.encoder_hidden_states_mask = torch::ones({b, t}, opts);
    a.encoder_hidden_states_mask.narrow(1, t - o.masked_text_tokens, o.masked_text_tokens).zero_();
  }

  std::printf("Qwen-Image transformer: %lld blocks, %lld heads x %lld, %lld params (%.2f B), %s %s, "
              "batch %lld, %lld image (%lld x %lld) + %lld text tokens (%lld masked)\n",
              static_cast<long long>(c.num_layers), static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.attention_head_dim), static_cast<long long>(params),
              params / 1e9, o.device.c_str(), o.dtype.c_str(), static_cast<long long>(b),
              static_cast<long long>(n),
              static_cast<long long>(n / cols), static_cast<long long>(cols),
              static_cast<long long>(t), static_cast<long long>(o.masked_text_tokens));
  ASSIGN_OR_RETURN(auto times, TimeSteps([&] { return model->Forward(a); }, device, o.warmup, o.runs));
  std::printf("median %.3f ms/step  (min %.3f, max %.3f, %zu runs after %lld warmup)\n",
              times.median_ms, times.min_ms, times.max_ms, times.runs,
              static_cast<long long>(o.warmup));
  return absl::OkStatus();
}

}  // namespace
}  // namespace ditserve::models::qwenimage

int main(int argc, char** argv) {
  ditserve::models::qwenimage::BenchOptions o;
  ditserve::FlagParser p("ditserve-qwenimage-bench",
                         "Median ms per Qwen-Image transformer forward with random weights.");
  p.AddInt("layers", &o.layers, "transformer blocks");
  p.AddInt("heads", &o.heads, "attention heads");
  p.AddInt("head-dim", &o.head_dim, "attention head dim");
  p.AddInt("joint-dim", &o.joint_dim, "joint_attention_dim (text encoder width)");
  p.AddInt("in-channels", &o.in_channels, "packed latent channels per token");
  p.AddInt("out-channels", &o.out_channels, "out_channels (proj_out gives patch^2 x this)");
  p.AddInt("patch-size", &o.patch_size, "patch_size");
  p.AddString("axes", &o.axes, "axes_dims_rope, 3 comma-separated ints (sum = head dim)");
  p.AddInt("image-tokens", &o.image_tokens, "image tokens (4096 = 1024x1024)");
  p.AddInt("text-tokens", &o.text_tokens, "text tokens");
  p.AddInt("masked-text-tokens", &o.masked_text_tokens, "trailing text tokens masked out (0: no mask)");
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
  auto status = ditserve::models::qwenimage::Run(o);
  if (!status.ok()) {
    std::fprintf(stderr, "ditserve-qwenimage-bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
