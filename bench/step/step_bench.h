// The step benchmarks' harness (ditserve-*-bench, bench/step/): the flags they share, a state dict
// of random weights for given shapes (whole, or one rank's shard for the --tp N projection), the
// median wall time of a forward, RunStepBench (the flow every transformer benchmark shares: the
// model-dtype reference for --weights fp8, load, describe, time, report) and the main() around it.
// Header-only; benchmarks only, never serving code. A TU compiled with DITSERVE_BENCH_PROFILER (the
// CUDA build's ditserve-*-profile targets) also honours --profile.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <execinfo.h>
#include <ucontext.h>
#include <unistd.h>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>

#include <torch/cuda.h>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/local_communicator.h"
#include "comm/projection_communicator.h"
#include "common/flags.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/common/fp8_linear.h"
#include "models/transformer.h"
#include "sharding/loader.h"
#include "sharding/plan_resolver.h"
#include "sharding/slicing.h"
#include "sharding/state_dict.h"
#include "sharding/tp_plan.h"
#ifdef DITSERVE_BENCH_PROFILER
#include "bench/step/kernel_profiler.h"
#endif

namespace ditserve::bench {

using ::ditserve::DeviceKind;
using ::ditserve::ModelDtype;
using ::ditserve::ParseDeviceKind;
using ::ditserve::ParseModelDtype;
using models::CheckFp8Supported;
using models::DiffusionTransformer;
using models::ParseWeightFormat;
using models::StepGraphStats;
using models::TransformerLoadOptions;
using models::WeightFormat;

// One random weight: N(0, 0.02²), or ones for a 1-D "*norm*" tensor (an RMSNorm scale).
inline torch::Tensor RandomWeight(const std::string& name, const std::vector<int64_t>& shape,
                                  const torch::TensorOptions& opts) {
  const bool norm_scale = shape.size() == 1 && name.find("norm") != std::string::npos;
  return norm_scale ? torch::ones(shape, opts) : torch::randn(shape, opts) * 0.02;
}

// Every tensor N(0, 0.02²) except 1-D "*norm*" tensors (RMSNorm scales), which are ones.
// Replicated (rank 0 of 1); `params` gets the element count.
inline sharding::ShardedStateDict RandomStateDict(
    const std::map<std::string, std::vector<int64_t>>& shapes, const torch::TensorOptions& opts,
    uint64_t seed, int64_t* params) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  std::map<std::string, torch::Tensor> tensors;
  *params = 0;
  for (const auto& [name, shape] : shapes) {
    tensors[name] = RandomWeight(name, shape, opts);
    *params += tensors[name].numel();
  }
  return sharding::ShardedStateDict(0, 1, std::move(tensors), {});
}

struct StepTimes {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  size_t runs = 0;
};

// Runs `step` warmup + runs times, each bracketed by device synchronisation, and returns the
// timed runs' statistics. `step` returns its output; the first one must be finite.
inline absl::StatusOr<StepTimes> TimeSteps(
    const std::function<absl::StatusOr<torch::Tensor>()>& step, const torch::Device& device,
    int64_t warmup, int64_t runs) {
  if (runs < 1) return absl::InvalidArgumentError("--runs must be >= 1");
  std::vector<double> ms;
  for (int64_t i = 0; i < warmup + runs; ++i) {
    compat::SynchronizeDevice(device);
    const auto start = std::chrono::steady_clock::now();
    auto out = step();
    if (!out.ok()) return out.status();
    compat::SynchronizeDevice(device);
    const double elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i == 0 && !torch::isfinite(out->to(torch::kFloat32)).all().item<bool>()) {
      return absl::InternalError("non-finite output");
    }
    if (i >= warmup) ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  StepTimes t;
  t.runs = ms.size();
  t.median_ms =
      ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

// The flags every step benchmark has (the model's own shape flags come on top).
struct CommonBenchOptions {
  int64_t image_tokens = 4096, text_tokens = 512, batch = 1;
  std::string device = "cpu", dtype = "bfloat16";
  int64_t warmup = 2, runs = 5;
  uint64_t seed = 0;
  std::string profile;  // per-kernel table path (ditserve-*-profile builds only)
  // > 1: run rank 0's shard of a group of `tp` (the projection: see MakeBenchModelInputs).
  int64_t tp = 1;
  bool replicate_modulation = false;  // with tp > 1: the reference's plan
  std::string weights = "dtype";      // dtype | fp8 (models/common/fp8_linear.h)
  bool step_cache = false;            // also time First Block Cache's passes (TimeStepCache)
};

inline void AddCommonBenchFlags(FlagParser* p, CommonBenchOptions* o) {
  p->AddInt("image-tokens", &o->image_tokens, "image tokens (4096 = 1024x1024)");
  p->AddInt("text-tokens", &o->text_tokens, "text tokens");
  p->AddInt("batch", &o->batch, "batch size");
  p->AddString("device", &o->device, "cpu | cuda");
  p->AddString("dtype", &o->dtype, "bfloat16 | float32");
  p->AddInt("warmup", &o->warmup, "untimed runs first");
  p->AddInt("runs", &o->runs, "timed runs");
  p->AddUint("seed", &o->seed, "weight seed");
  p->AddInt(
      "tp", &o->tp,
      "projection: run rank 0's shard of a tp group of N, all-reduces counted, not performed");
  p->AddBool("replicate-modulation", &o->replicate_modulation,
             "with --tp: the reference's plan (AdaLN modulation replicated)");
  p->AddString("weights", &o->weights,
               "dtype | fp8: the blocks' token GEMMs with FP8 weights (cuda, bfloat16)");
  p->AddBool("step-cache", &o->step_cache,
             "also time First Block Cache's cached pass (first block + output layers) and a full "
             "pass through the cache's path (head and rest)");
  p->AddString(
      "profile", &o->profile,
      "after timing, profile one step and write a per-kernel table here (CUDA profile build)");
}

// The shape flags every transformer benchmark has (its own come on top); defaults are the model's
// released sizes. `layers_help` says what a layer is for the model.
struct TransformerShapeOptions {
  int64_t layers = 0, heads = 0, head_dim = 0, joint_dim = 0, in_channels = 0;
  std::string axes;  // axes_dims_rope, "16,56,56"
};

inline void AddTransformerShapeFlags(FlagParser* p, TransformerShapeOptions* o,
                                     const char* layers_help) {
  p->AddInt("layers", &o->layers, layers_help);
  p->AddInt("heads", &o->heads, "attention heads");
  p->AddInt("head-dim", &o->head_dim, "attention head dim");
  p->AddInt("joint-dim", &o->joint_dim, "joint_attention_dim (the text encoder's width)");
  p->AddInt("in-channels", &o->in_channels, "latent channels per token (packed)");
  p->AddString("axes", &o->axes, "axes_dims_rope, comma-separated (sum = head dim)");
}

// The editing benchmarks' input images: --reference-images N of --reference-size "WIDTHxHEIGHT"
// pixels (FLUX.2's references, Qwen-Image-Edit-2509's images), whose tokens every step appends to
// the latents' as the pipelines do (DiffusionPipeline::Forward).
struct ReferenceImageOptions {
  int64_t count = 0;
  std::string size = "1024x1024";  // WIDTHxHEIGHT, pixels
};

// `images_doc` says what the images are and the family's limit, `size_doc` what the size is of.
inline void AddReferenceImageFlags(FlagParser* p, ReferenceImageOptions* o,
                                   const std::string& images_doc, const std::string& size_doc) {
  p->AddInt("reference-images", &o->count, images_doc);
  p->AddString("reference-size", &o->size,
               size_doc + ", WIDTHxHEIGHT pixels (one token per 16x16)");
}

// The input images' tokens, validated: `count` images of a rows x cols token grid each, random
// latents (batch, total, channels) in `tokens` (undefined when count is 0).
struct ReferenceTokens {
  int64_t count = 0, rows = 0, cols = 0;
  int64_t per_image = 0, total = 0;
  torch::Tensor tokens;
  std::string size;    // as --reference-size gave it
  std::string detail;  // how the family places them, for the description (the family sets it)
};

// INVALID_ARGUMENT unless o.count is in 0..max_images (`limit` says whose limit, for the message)
// and both sides of o.size are positive multiples of `pixels_per_token` (FLUX.2, Qwen-Image: 16,
// the VAE's 8x and the 2x2 packing).
inline absl::StatusOr<ReferenceTokens> MakeReferenceTokens(
    const ReferenceImageOptions& o, int64_t max_images, const std::string& limit,
    int64_t pixels_per_token, int64_t batch, int64_t channels, const torch::TensorOptions& opts) {
  if (o.count < 0 || o.count > max_images) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reference-images must be in 0..", max_images, " (", limit, ")"));
  }
  std::vector<std::string> parts = absl::StrSplit(o.size, 'x');
  int64_t w = 0, h = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &w) || !absl::SimpleAtoi(parts[1], &h) ||
      w < pixels_per_token || h < pixels_per_token || w % pixels_per_token != 0 ||
      h % pixels_per_token != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reference-size must be WIDTHxHEIGHT, each a positive multiple of ",
                     pixels_per_token, " pixels (one token per ", pixels_per_token, "x",
                     pixels_per_token, "); got '", o.size, "'"));
  }
  ReferenceTokens r;
  r.count = o.count;
  r.rows = h / pixels_per_token;
  r.cols = w / pixels_per_token;
  r.per_image = r.rows * r.cols;
  r.total = r.count * r.per_image;
  r.size = o.size;
  if (r.count > 0) r.tokens = torch::randn({batch, r.total, channels}, opts);
  return r;
}

// The editing line of a benchmark's description (nothing without images).
inline void PrintReferenceTokens(const ReferenceTokens& r, int64_t image_tokens) {
  if (r.count == 0) return;
  std::printf(
      "editing: + %lld input images of %s (%lld tokens each, %s): %lld + %lld = %lld image "
      "tokens a forward, velocity narrowed to %lld\n",
      static_cast<long long>(r.count), r.size.c_str(), static_cast<long long>(r.per_image),
      r.detail.c_str(), static_cast<long long>(image_tokens), static_cast<long long>(r.total),
      static_cast<long long>(image_tokens + r.total), static_cast<long long>(image_tokens));
}

// What the common flags resolve to, validated.
struct BenchTarget {
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kBFloat16;
  TransformerLoadOptions load;  // --weights
  torch::TensorOptions options() const {
    return torch::TensorOptions().dtype(dtype).device(device);
  }
};

inline absl::StatusOr<BenchTarget> ResolveBenchTarget(const CommonBenchOptions& o) {
  ASSIGN_OR_RETURN(const ModelDtype dtype, ParseModelDtype(o.dtype, "--dtype"));
  ASSIGN_OR_RETURN(const DeviceKind device, ParseDeviceKind(o.device, "--device"));
  if (device == DeviceKind::kCuda && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError("no CUDA device");
  }
  if (o.image_tokens < 1 || o.text_tokens < 1 || o.batch < 1) {
    return absl::InvalidArgumentError("--image-tokens, --text-tokens and --batch must be >= 1");
  }
  if (o.tp < 1 || o.tp > 64) return absl::InvalidArgumentError("--tp must be in 1..64");
  BenchTarget t;
  t.device =
      device == DeviceKind::kCuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  t.dtype = dtype == ModelDtype::kFloat32 ? torch::kFloat32 : torch::kBFloat16;
  ASSIGN_OR_RETURN(t.load.weights, ParseWeightFormat(o.weights));
  if (t.load.weights == WeightFormat::kFp8) RETURN_IF_ERROR(CheckFp8Supported(t.device, t.dtype));
  return t;
}

// What a step benchmark's model is built from: its weights and its communicator.
struct BenchModelInputs {
  sharding::ShardedStateDict weights;
  std::unique_ptr<comm::Communicator> comm;
};

// --tp 1: every tensor of `shapes` random (RandomStateDict) and a group of one. --tp N > 1: rank
// 0's shard of random weights under the model's built-in plan for `class_name` / `config` (with the
// AdaLN modulation sharded as served, unless --replicate-modulation), validated by the same
// resolver as a checkpoint, and a projection communicator (comm/projection_communicator.h): the
// model runs the real per-rank shapes and counts the all-reduces instead of doing them. `params`
// gets the element count this rank holds.
inline absl::StatusOr<BenchModelInputs> MakeBenchModelInputs(
    const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& class_name,
    const nlohmann::json& config, const torch::TensorOptions& opts, const CommonBenchOptions& o,
    int64_t* params) {
  BenchModelInputs in;
  if (o.tp == 1) {
    in.weights = RandomStateDict(shapes, opts, o.seed, params);
    in.comm = comm::MakeSingleRankCommunicator();
    return in;
  }
  const int tp = static_cast<int>(o.tp);
  ASSIGN_OR_RETURN(sharding::TpPlan plan, sharding::BuiltinTpPlan(class_name, config));
  if (!o.replicate_modulation) sharding::AddModulationSharding(&plan);
  std::vector<sharding::TensorMeta> metas;
  for (const auto& [name, shape] : shapes) metas.push_back({name, sharding::DType::kF32, shape});
  ASSIGN_OR_RETURN(sharding::ResolvedPlan resolved,
                   sharding::ResolveTpPlan(&plan, metas, tp, &config));
  torch::NoGradGuard no_grad;
  torch::manual_seed(o.seed);
  std::map<std::string, torch::Tensor> tensors;
  *params = 0;
  for (const sharding::PlannedTensor& t : resolved.tensors) {
    tensors[t.name] = RandomWeight(t.name, sharding::SliceForRank(t, 0, tp).local_shape, opts);
    *params += tensors[t.name].numel();
  }
  in.weights = sharding::ShardedStateDict(0, tp, std::move(tensors),
                                          sharding::ModuleShardingsOf(resolved, tp));
  in.comm = comm::MakeProjectionCommunicator(0, tp);
  return in;
}

// "16,56,56" → {16, 56, 56}.
inline absl::StatusOr<std::vector<int64_t>> ParseAxesFlag(const std::string& text) {
  std::vector<int64_t> axes;
  for (absl::string_view a : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(a, &v) || v <= 0) {
      return absl::InvalidArgumentError("--axes: comma-separated positive ints");
    }
    axes.push_back(v);
  }
  return axes;
}

// Sets the fields every transformer config names alike (num_layers, num_attention_heads,
// attention_head_dim, joint_attention_dim, in_channels, axes_dims_rope) from the shape flags.
template <typename Config>
absl::Status ApplyTransformerShape(const TransformerShapeOptions& o, Config* c) {
  c->num_layers = o.layers;
  c->num_attention_heads = o.heads;
  c->attention_head_dim = o.head_dim;
  c->joint_attention_dim = o.joint_dim;
  c->in_channels = o.in_channels;
  ASSIGN_OR_RETURN(c->axes_dims_rope, ParseAxesFlag(o.axes));
  return absl::OkStatus();
}

// The column count of the most square rows × cols grid holding n tokens (rows = n / cols).
inline int64_t SquarestGridColumns(int64_t n) {
  int64_t cols = static_cast<int64_t>(std::sqrt(static_cast<double>(n)));
  while (cols > 1 && n % cols != 0) --cols;
  return std::max<int64_t>(cols, 1);
}

// Times `step` (warm-up + runs), prints the median line and whether `model`'s steps were CUDA
// graph replays, then profiles one more step if asked. With a projection communicator (--tp N > 1)
// it also prints the all-reduces and bytes per step.
inline absl::StatusOr<StepTimes> TimeAndReport(
    const DiffusionTransformer& model, const std::function<absl::StatusOr<torch::Tensor>()>& step,
    const BenchTarget& target, const CommonBenchOptions& o,
    const comm::Communicator* comm = nullptr) {
  ASSIGN_OR_RETURN(StepTimes times, TimeSteps(step, target.device, o.warmup, o.runs));
  std::printf("median %.3f ms/step  (min %.3f, max %.3f, %zu runs after %lld warmup)\n",
              times.median_ms, times.min_ms, times.max_ms, times.runs,
              static_cast<long long>(o.warmup));
  const StepGraphStats g = model.graph_stats();
  std::printf(
      "cuda graphs: %s (%llu captured, %llu replays, %llu op by op, %llu failed captures)\n",
      g.captures > 0 ? "on" : "off", static_cast<unsigned long long>(g.captures),
      static_cast<unsigned long long>(g.replays), static_cast<unsigned long long>(g.eager),
      static_cast<unsigned long long>(g.failed_captures));
  if (comm != nullptr && comm->world_size() > 1) {
    const comm::CommStats stats = comm->Stats();
    const double steps = static_cast<double>(o.warmup + o.runs);
    std::printf(
        "tp %d projection (rank 0's shard; modulation %s): %.0f all-reduces, %.3f MB per "
        "step (counted, not performed)\n",
        comm->world_size(), o.replicate_modulation ? "replicated" : "sharded",
        static_cast<double>(stats.allreduce_count) / steps,
        static_cast<double>(stats.allreduce_bytes) / steps / 1e6);
  }
  if (o.profile.empty()) return times;
#ifdef DITSERVE_BENCH_PROFILER
  RETURN_IF_ERROR(ProfileKernels([&] { return step().status(); }, o.profile));
  return times;
#else
  return absl::UnimplementedError("--profile needs a CUDA build's ditserve-*-profile binary");
#endif
}

// --weights fp8: the output of one step of the same random weights in the model dtype, computed
// before the FP8 model is built (building it quantizes and releases those tensors); the benchmark
// prints the FP8 step's relative error against it next to the speed (ReportAgainstModelDtype).
// For scale, also how far the model-dtype step itself moves when its input latents get relative
// noise of one bf16 rounding (2^-8): random weights at these depths can amplify any perturbation,
// and this says how much. `output` undefined without --weights fp8.
struct ModelDtypeReference {
  torch::Tensor output;    // float32
  double sensitivity = 0;  // relative change of the output under 2^-8 relative input noise
};

inline double RelativeDifference(const torch::Tensor& y, const torch::Tensor& reference) {
  return ((y.to(torch::kFloat32) - reference.to(torch::kFloat32)).norm() /
          reference.to(torch::kFloat32).norm().clamp_min(1e-30))
      .item<double>();
}

// A benchmark's step around the transformer's forward, when it is more than model->Forward(args)
// (FLUX.2 editing: the reference tokens appended to the latents, the velocity narrowed back).
template <typename Model, typename Args>
using BenchForward = std::function<absl::StatusOr<torch::Tensor>(Model&, const Args&)>;

// The editing step: `references`' tokens (ReferenceTokens::tokens, which must outlive the returned
// function) appended to the latents, the velocity narrowed back to the latents' tokens; an empty
// function (the plain step) without references.
template <typename Model, typename Args>
BenchForward<Model, Args> AppendReferences(const ReferenceTokens& references) {
  if (references.count == 0) return {};
  const torch::Tensor* tokens = &references.tokens;
  return [tokens](Model& model, const Args& x) -> absl::StatusOr<torch::Tensor> {
    Args joined = x;
    joined.hidden_states = torch::cat({x.hidden_states, *tokens}, 1);
    ASSIGN_OR_RETURN(torch::Tensor velocity, model.Forward(joined));
    return velocity.narrow(1, 0, x.hidden_states.size(1));
  };
}

template <typename Model, typename Config, typename Args>
absl::StatusOr<ModelDtypeReference> ModelDtypeStep(const Config& config, const BenchModelInputs& in,
                                                   const BenchTarget& target, const Args& args,
                                                   const BenchForward<Model, Args>& forward = {}) {
  ModelDtypeReference ref;
  if (target.load.weights != WeightFormat::kFp8) return ref;
  ASSIGN_OR_RETURN(auto model, Model::Load(config, in.weights, in.comm.get()));
  auto run = [&](const Args& x) { return forward ? forward(*model, x) : model->Forward(x); };
  ASSIGN_OR_RETURN(torch::Tensor y, run(args));
  ref.output = y.to(torch::kFloat32);
  Args perturbed = args;
  torch::Tensor noise = torch::randn(
      args.hidden_states.sizes(),
      torch::TensorOptions().dtype(torch::kFloat32).device(args.hidden_states.device()));
  perturbed.hidden_states = (args.hidden_states.to(torch::kFloat32) * (1.0 + noise / 256.0))
                                .to(args.hidden_states.scalar_type());
  ASSIGN_OR_RETURN(torch::Tensor yp, run(perturbed));
  ref.sensitivity = RelativeDifference(yp, ref.output);
  return ref;
}

inline absl::Status ReportAgainstModelDtype(
    const ModelDtypeReference& reference,
    const std::function<absl::StatusOr<torch::Tensor>()>& step) {
  if (!reference.output.defined()) return absl::OkStatus();
  ASSIGN_OR_RETURN(torch::Tensor y, step());
  std::printf(
      "fp8 weights: step output relative error %.4g against the same weights in the model "
      "dtype (for scale: 2^-8 relative noise on the input latents moves the model-dtype "
      "output by %.4g)\n",
      RelativeDifference(y, reference.output), reference.sensitivity);
  return absl::OkStatus();
}

// The flow every transformer step benchmark shares once it has its config `c`, its weights `in`
// and its forward arguments `a`: with --weights fp8 the same weights' step in the model dtype first
// (loading the FP8 model quantizes and releases them), then the model is loaded, `describe` prints
// what is being measured, and the step is checked against the model-dtype one and timed
// (TimeAndReport). `references`, when set, are input images' tokens the step appends to the
// latents (AppendReferences: the editing step of FLUX.2 and Qwen-Image-Edit), in the check and the
// timing, described after `describe`. `instead`, when set, replaces the check and the timing
// (FLUX.1's --lora-rank).
template <typename Model, typename Config, typename Args>
absl::Status RunStepBench(
    const Config& c, const BenchModelInputs& in, const BenchTarget& target, const Args& a,
    const CommonBenchOptions& o, const ReferenceTokens* references,
    const std::function<void()>& describe,
    const std::function<absl::Status(
        const Model&, const std::function<absl::StatusOr<torch::Tensor>()>&)>& instead = nullptr) {
  const BenchForward<Model, Args> forward = references != nullptr
                                                ? AppendReferences<Model, Args>(*references)
                                                : BenchForward<Model, Args>();
  ASSIGN_OR_RETURN(const ModelDtypeReference dtype_out,
                   (ModelDtypeStep<Model>(c, in, target, a, forward)));
  ASSIGN_OR_RETURN(auto model, Model::Load(c, in.weights, in.comm.get(), target.load));
  describe();
  if (references != nullptr) PrintReferenceTokens(*references, a.hidden_states.size(1));
  const std::function<absl::StatusOr<torch::Tensor>()> step = [&] {
    return forward ? forward(*model, a) : model->Forward(a);
  };
  if (instead) return instead(*model, step);
  RETURN_IF_ERROR(ReportAgainstModelDtype(dtype_out, step));
  ASSIGN_OR_RETURN(const StepTimes full, TimeAndReport(*model, step, target, o, in.comm.get()));
  if (!o.step_cache) return absl::OkStatus();
  if (forward) return absl::InvalidArgumentError("--step-cache times the plain step only");
  return TimeStepCache(*model, a, target, o, full.median_ms);
}

// --step-cache: First Block Cache's two kinds of pass on the step's inputs
// (models/common/first_block_cache.h), each timed as a step. A cached pass: the cache computed once
// on these inputs, so every later pass has the same head residual (relative change 0, at most any
// threshold) and skips the remaining blocks. A full pass through the cache's path: a threshold
// below 0 (every change is above it), so every pass runs all blocks, as the head's and the rest's
// graphs on CUDA, with the residuals kept. Printed with what a schedule of k cached passes in n
// would take.
template <typename Model, typename Args>
absl::Status TimeStepCache(Model& model, const Args& a, const BenchTarget& target,
                           const CommonBenchOptions& o, double full_step_ms) {
  models::FirstBlockCache cached(1.0), computing(-1.0);
  ASSIGN_OR_RETURN(StepTimes c, TimeSteps([&] { return model.Forward(a, &cached); }, target.device,
                                          o.warmup, o.runs));
  ASSIGN_OR_RETURN(StepTimes f, TimeSteps([&] { return model.Forward(a, &computing); },
                                          target.device, o.warmup, o.runs));
  if (cached.full_passes() != 1 || computing.cached_passes() != 0) {
    return absl::InternalError("the step cache's passes did not go as set up");
  }
  std::printf(
      "step cache: cached pass median %.3f ms (min %.3f), full pass through the cache's "
      "path %.3f ms (min %.3f), full step %.3f ms: caching half the steps takes %.1f%% "
      "of the uncached time\n",
      c.median_ms, c.min_ms, f.median_ms, f.min_ms, full_step_ms,
      100.0 * 0.5 * (c.median_ms + f.median_ms) / full_step_ms);
  return absl::OkStatus();
}

// main() of a benchmark: parses the flags `add_flags` registered (plus --help), runs `run`, and
// maps the outcome to an exit status (2 on bad flags, 1 on failure).
// A benchmark that crashes prints where before dying: the faulting instruction and data addresses,
// the mapping (/proc/self/maps line) that holds the instruction ("none": code already unloaded),
// whether the benchmark had finished (then it is exit-time destruction), and the stack (addresses
// and symbols).
inline volatile sig_atomic_t g_bench_main_returned = 0;

inline void WriteHex(const char* label, uintptr_t v) {
  char buf[64];
  int n = 0;
  for (const char* p = label; *p != 0; ++p) buf[n++] = *p;
  buf[n++] = '0';
  buf[n++] = 'x';
  for (int shift = 60; shift >= 0; shift -= 4) buf[n++] = "0123456789abcdef"[(v >> shift) & 0xf];
  buf[n++] = '\n';
  (void)!write(STDERR_FILENO, buf, n);
}

inline void PrintBacktraceOnCrash(int sig, siginfo_t* info, void* context) {
  uintptr_t pc = 0;
#if defined(__x86_64__)
  pc = static_cast<uintptr_t>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  pc = static_cast<uintptr_t>(static_cast<ucontext_t*>(context)->uc_mcontext.pc);
#endif
  const char msg[] = "fatal signal\n";
  (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
  const char* when = g_bench_main_returned
                         ? "after the benchmark finished (exit-time destruction)\n"
                         : "while the benchmark ran\n";
  (void)!write(STDERR_FILENO, when, std::strlen(when));
  WriteHex("pc ", pc);
  WriteHex("fault address ", reinterpret_cast<uintptr_t>(info->si_addr));
  // The mapping holding pc (not async-signal-safe in theory; we are dying anyway).
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[512];
    bool found = false;
    while (std::fgets(line, sizeof(line), maps) != nullptr) {
      unsigned long lo = 0, hi = 0;
      if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && pc >= lo && pc < hi) {
        (void)!write(STDERR_FILENO, "pc in ", 6);
        (void)!write(STDERR_FILENO, line, std::strlen(line));
        found = true;
      }
    }
    std::fclose(maps);
    if (!found) {
      const char none[] = "pc in no mapping (code unloaded, or a corrupt return address)\n";
      (void)!write(STDERR_FILENO, none, sizeof(none) - 1);
    }
  }
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

inline int BenchMain(int argc, char** argv, FlagParser& parser,
                     const std::function<absl::Status()>& run) {
  struct sigaction action {};
  action.sa_sigaction = PrintBacktraceOnCrash;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
  if (auto s = parser.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "%s\n\n%s", std::string(s.message()).c_str(), parser.Help().c_str());
    return 2;
  }
  if (parser.HelpRequested()) {
    std::printf("%s", parser.Help().c_str());
    return 0;
  }
  const absl::Status s = run();
  g_bench_main_returned = 1;  // what follows is the exit-time destruction
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[0], s.ToString().c_str());
    return 1;
  }
  return 0;
}

// A transformer step benchmark's program: its name, the transformer's name for the help text
// ("FLUX.2"), what --layers counts, its own flags (`add_flags`, beside the shape's and the common
// ones) and its Run.
template <typename Options>
struct StepBenchProgram {
  const char* program;
  const char* model;
  const char* blocks_doc;
  void (*add_flags)(FlagParser* parser, Options* options);
  absl::Status (*run)(const Options& options);
};

// main() of a step benchmark: the flags parsed into one Options (its `shape` and `common` members
// get the shared flags), then BenchMain with the program's run.
template <typename Options>
int StepBenchMain(int argc, char** argv, const StepBenchProgram<Options>& program) {
  Options o;
  FlagParser p(program.program, std::string("Median ms per ") + program.model +
                                    " transformer forward with random weights.");
  AddTransformerShapeFlags(&p, &o.shape, program.blocks_doc);
  program.add_flags(&p, &o);
  AddCommonBenchFlags(&p, &o.common);
  return BenchMain(argc, argv, p, [&] { return program.run(o); });
}

}  // namespace ditserve::bench
