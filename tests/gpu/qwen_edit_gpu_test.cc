// Qwen-Image-Edit and Qwen-Image image to image on the GPU (issue 34; skipped where torch sees no
// CUDA device): the calls of tests/fixtures/qwen-edit (make_qwen_edit_fixtures.py with the real
// diffusers + transformers; tests/fixtures/QWEN_EDIT.md): edit_one and edit_two
// (QwenImageEditPlusPipeline), edit_v1 (QwenImageEditPipeline) and img2img
// (QwenImageImg2ImgPipeline), from the saved input files prepared as the frontend prepares them
// (tests/support/qwen_edit_calls.h, the same jobs as qwen_edit_parity_test), through the whole
// pipeline on CUDA:
//
//   - float32 at tp 1 and tp 2 (two in-process ranks on the one GPU) against diffusers' float32
//     CPU image (`<call>.image`), within the parity limit for an image (1e-3);
//   - bfloat16 at tp 1 against diffusers' own bfloat16 CUDA run (`<call>.bf16.image` of
//     qwen_edit_reference_bf16.safetensors, make_qwen_edit_fixtures.py --bf16-device cuda: a bf16
//     pipeline draws its noise in bf16, so it is held against diffusers' bf16 run), within the
//     README's bf16 limit (2e-2);
//   - CUDA graphs on (the default, models/common/step_graphs.h): every case runs its job twice on
//     the same loaded pipelines, so the second job's transformer calls replay the graphs the first
//     one captured; both jobs must give the same image, and at tp 1 (the in-process group's
//     collectives cannot be captured at tp 2, where the transformer runs op by op) the second job
//     must run no transformer call op by op and capture nothing new;
//   - FP8 weights (--weights fp8, models/common/fp8_linear.h) on edit_one at tp 1 in bfloat16,
//     also twice (graphs over the FP8 GEMMs), against diffusers' bfloat16 image within the bound
//     the FLUX.1 FP8 pipeline test holds an image to (5e-2, cuda_pipeline_test), its error printed
//     beside our bfloat16 run's.
//
// An edit call whose diffusers run did not give its text model the 3-D M-RoPE positions (the
// fixture's position_ids_kind; ours always uses them) is run and checked for replays, but its
// image is not compared with diffusers' (skipped, as in qwen_edit_parity_test).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include <torch/torch.h>

#include "comm/local_communicator.h"
#include "common/status_macros.h"
#include "models/common/fp8_linear.h"
#include "models/common/step_graphs.h"
#include "models/vae/autoencoder_kl_qwenimage_config.h"
#include "pipeline/pipeline.h"
#include "tests/support/fixtures.h"
#include "tests/support/gpu_case.h"
#include "tests/support/qwen_edit_calls.h"

namespace ditserve::testing {
namespace {

const torch::Device kCuda(torch::kCUDA, 0);

// The FP8 image bound of cuda_pipeline_test's CudaFp8Pipeline (against diffusers' bf16 image).
constexpr double kFp8ImageLimit = 5e-2;

bool IsImg2ImgCall(const nlohmann::json& call) {
  return call.value("pipeline", std::string()) == "QwenImageImg2ImgPipeline";
}

// Whether diffusers' image of the call is comparable with ours: img2img always; an edit call when
// diffusers' text model ran with the 3-D M-RoPE positions, as ours always does.
bool Comparable(const std::string& name, const nlohmann::json& call) {
  return IsImg2ImgCall(call) ||
         QwenEditResult(name).value("position_ids_kind", std::string()) == "mrope3d";
}

// The model card's size_multiple for the call's folder: its VAE's spatial factor times 2.
absl::StatusOr<int> SizeMultiple(const nlohmann::json& call) {
  ASSIGN_OR_RETURN(
      vae::AutoencoderKLQwenImageConfig config,
      vae::LoadAutoencoderKLQwenImageConfig(QwenEditCallFolder(call) + "/vae/config.json"));
  return static_cast<int>(config.scale_factor() * 2);
}

// The call's job as the frontend builds it (images prepared for a card of `multiple`).
absl::StatusOr<pipeline::GenerationJob> CallJob(const nlohmann::json& call, int multiple) {
  if (IsImg2ImgCall(call)) return QwenImg2ImgCallJob(call, multiple);
  ASSIGN_OR_RETURN(QwenEditImages images, PrepareQwenEditCallImages(call, multiple));
  return QwenEditCallJob(call, images, multiple);
}

// One pipeline group (in-process ranks, each loading the pipeline once) running the same job
// twice: rank 0's images and its transformer's graph statistics after each job.
struct TwiceRun {
  pipeline::ModelCard card;
  torch::Tensor first, second;  // (H, W, 3) float32 on the CPU
  models::StepGraphStats after_first, after_second;
};

absl::StatusOr<TwiceRun> RunTwice(int world, const pipeline::PipelineOptions& options,
                                  const pipeline::GenerationJob& job, pipeline::ImageUse use,
                                  int multiple) {
  std::mutex mu;
  TwiceRun out;
  absl::Status s = comm::RunLocalGroup(world, [&](comm::Communicator& c) -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> p, pipeline::LoadPipeline(options, &c));
    const pipeline::ImageInputCard& in = p->Card().image_inputs;
    if (in.use != use || in.size_multiple != multiple) {
      return absl::FailedPreconditionError(
          "the model card does not take the call's images as diffusers' pipeline does (use or "
          "size_multiple differ)");
    }
    torch::Tensor images[2];
    models::StepGraphStats stats[2];
    for (int k = 0; k < 2; ++k) {
      absl::StatusOr<pipeline::GenerationResult> r = p->Run(
          job, [](const pipeline::StepEvent&) {}, [] { return false; });
      if (!r.ok()) return r.status();
      stats[k] = p->transformer_graph_stats();
      // No early return between the jobs: the other ranks' second job would wait for this one.
      if (c.rank() == 0 && r->images.size() == 1) {
        images[k] = r->images[0].to(torch::kCPU, torch::kFloat32);
      }
    }
    if (c.rank() != 0) return absl::OkStatus();
    if (!images[0].defined() || !images[1].defined()) {
      return absl::InternalError("rank 0 returned no image");
    }
    std::lock_guard<std::mutex> lock(mu);
    out.card = p->Card();
    out.first = images[0];
    out.second = images[1];
    out.after_first = stats[0];
    out.after_second = stats[1];
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

// The call run twice on CUDA (see the file comment), with the checks every case shares: the two
// jobs' images agree, and at tp 1 with graphs allowed the second job only replayed. Undefined
// (with a test failure) when the call could not run.
TwiceRun RunCallTwice(const std::string& name, int world, torch::ScalarType dtype,
                      models::WeightFormat weights) {
  const nlohmann::json& call = QwenEditCall(name);
  EXPECT_TRUE(call.is_object()) << name;
  if (!call.is_object()) return {};
  auto multiple = SizeMultiple(call);
  EXPECT_TRUE(multiple.ok()) << multiple.status();
  if (!multiple.ok()) return {};
  auto job = CallJob(call, *multiple);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return {};
  pipeline::PipelineOptions options;
  options.model_dir = QwenEditCallFolder(call);
  options.device = kCuda;
  options.dtype = dtype;
  options.weights = weights;  // cuda_graphs: the default
  auto run = RunTwice(
      world, options, *job,
      IsImg2ImgCall(call) ? pipeline::ImageUse::kImageToImage : pipeline::ImageUse::kQwenEdit,
      *multiple);
  EXPECT_TRUE(run.ok()) << name << ": " << run.status();
  if (!run.ok()) return {};
  EXPECT_TRUE(run->first.defined() && run->second.defined());
  if (!run->first.defined() || !run->second.defined()) return {};

  const bool fp8 = weights == models::WeightFormat::kFp8;
  const char* what = fp8 ? "fp8 weights" : DtypeName(dtype);
  // Graph replays against the first job's eager and capturing calls: float32 as the CPU's tp 1 /
  // tp 2 agreement; bfloat16 (a forward within 1e-3 of op by op, CudaStepGraphsTest) over the
  // steps and the VAE, well inside the bf16 parity limit.
  const double same_limit = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
  EXPECT_EQ(run->second.sizes(), run->first.sizes());
  if (run->second.sizes() == run->first.sizes()) {
    const double again = RelativeError(run->second, run->first);
    EXPECT_LT(again, same_limit) << "the second job (graph replays) drew another image";
    std::printf(
        "qwen %s on cuda, tp=%d %s: second job %s the first (relative error %.3g, limit "
        "%.0e)\n",
        name.c_str(), world, what,
        torch::equal(run->second, run->first) ? "equals" : "differs from", again, same_limit);
  }

  const models::StepGraphStats& a = run->after_first;
  const models::StepGraphStats& b = run->after_second;
  const uint64_t eager = b.eager - a.eager, captures = b.captures - a.captures,
                 replays = b.replays - a.replays;
  std::printf(
      "qwen %s on cuda, tp=%d %s: transformer calls, first job: %llu op by op, %llu "
      "captures, %llu replays; second job: %llu op by op, %llu captures, %llu replays "
      "(%llu failed captures)\n",
      name.c_str(), world, what, static_cast<unsigned long long>(a.eager),
      static_cast<unsigned long long>(a.captures), static_cast<unsigned long long>(a.replays),
      static_cast<unsigned long long>(eager), static_cast<unsigned long long>(captures),
      static_cast<unsigned long long>(replays), static_cast<unsigned long long>(b.failed_captures));
  if (world == 1 && models::CudaGraphsAllowed()) {
    EXPECT_EQ(b.failed_captures, 0u);
    EXPECT_GT(a.captures, 0u) << "the first job captured no graph";
    EXPECT_EQ(eager, 0u) << "the second job ran transformer calls op by op";
    EXPECT_EQ(captures, 0u) << "the second job captured again";
    EXPECT_GT(replays, 0u) << "the second job replayed nothing";
    const nlohmann::json& result = QwenEditResult(name);
    if (result.contains("transformer_calls")) {
      EXPECT_EQ(replays, result["transformer_calls"].get<uint64_t>())
          << "the second job's transformer calls (all replays) against diffusers' calls";
    }
  } else if (world == 1) {
    std::printf("qwen %s: CUDA graphs off (DITSERVE_CUDA_GRAPHS=0): replays not checked\n",
                name.c_str());
  }
  return *std::move(run);
}

using Param = std::tuple<std::string, GpuCase>;

class QwenEditGpuTest : public ::testing::TestWithParam<Param> {};

TEST_P(QwenEditGpuTest, ImageMatchesDiffusersAndReplays) {
  DITSERVE_SKIP_WITHOUT_CUDA();
  const auto& [name, c] = GetParam();
  const bool f32 = c.dtype == torch::kFloat32;
  TwiceRun run = RunCallTwice(name, c.world, c.dtype, models::WeightFormat::kModelDtype);
  ASSERT_TRUE(run.first.defined());

  const nlohmann::json& call = QwenEditCall(name);
  if (!Comparable(name, call)) {
    GTEST_SKIP() << name << ": diffusers' text model did not run with the 3-D M-RoPE positions "
                 << "(position_ids_kind "
                 << QwenEditResult(name).value("position_ids_kind", std::string("?"))
                 << "), which ours always uses: its image is not comparable";
  }
  const torch::Tensor expected = QwenEditRef(f32 ? name + ".image" : name + ".bf16.image");
  ASSERT_TRUE(expected.defined()) << name;
  ASSERT_EQ(run.first.sizes(), expected.sizes()) << name;
  const double err = RelativeError(run.first, expected.to(torch::kFloat32));
  RecordProperty("relative_error", std::to_string(err));
  std::printf("qwen %s on cuda, tp=%d %s: relative error %.3g against diffusers %s (limit %.0e)\n",
              name.c_str(), c.world, DtypeName(c.dtype), err,
              f32 ? "float32 (CPU)" : "bfloat16 (CUDA)", c.limit);
  if (!f32 && HasQwenEditRef(name + ".image")) {  // for scale: the bf16 runs from float32's image
    const torch::Tensor f32_ref = QwenEditRef(name + ".image").to(torch::kFloat32);
    if (f32_ref.sizes() == run.first.sizes()) {
      std::printf(
          "qwen %s on cuda, tp=%d bfloat16: %.3g from diffusers float32 (diffusers' bf16 "
          "run: %.3g)\n",
          name.c_str(), c.world, RelativeError(run.first, f32_ref),
          RelativeError(expected.to(torch::kFloat32), f32_ref));
    }
  }
  EXPECT_LT(err, c.limit) << name << " tp=" << c.world << " " << DtypeName(c.dtype);
}

INSTANTIATE_TEST_SUITE_P(Calls, QwenEditGpuTest,
                         ::testing::Combine(::testing::Values("edit_one", "edit_two", "edit_v1",
                                                              "edit_2511", "img2img"),
                                            FixtureParityCases()),
                         CallCaseName);

// FP8 weights on edit_one (tp 1, bfloat16, graphs on, twice): near diffusers' bfloat16 image, and
// not our bfloat16 image (the FP8 path ran).
TEST(QwenEditGpuFp8, EditOneStaysNearDiffusersBfloat16) {
  DITSERVE_SKIP_WITHOUT_CUDA();
  const absl::Status supported = models::CheckFp8Supported(kCuda, torch::kBFloat16);
  if (!supported.ok()) GTEST_SKIP() << "FP8 weights unsupported here: " << supported;
  const std::string name = "edit_one";
  TwiceRun fp8 = RunCallTwice(name, 1, torch::kBFloat16, models::WeightFormat::kFp8);
  ASSERT_TRUE(fp8.first.defined());
  TwiceRun bf16 = RunCallTwice(name, 1, torch::kBFloat16, models::WeightFormat::kModelDtype);
  ASSERT_TRUE(bf16.first.defined());
  ASSERT_EQ(fp8.first.sizes(), bf16.first.sizes());
  EXPECT_FALSE(torch::equal(fp8.first, bf16.first)) << "the FP8 path did not run";
  const double from_ours = RelativeError(fp8.first, bf16.first);

  const bool comparable = Comparable(name, QwenEditCall(name));
  const torch::Tensor reference = QwenEditRef(name + ".bf16.image");
  ASSERT_TRUE(reference.defined());
  ASSERT_EQ(fp8.first.sizes(), reference.sizes());
  const torch::Tensor expected = reference.to(torch::kFloat32);
  const double err = RelativeError(fp8.first, expected);
  const double bf16_err = RelativeError(bf16.first, expected);
  RecordProperty("relative_error", std::to_string(err));
  std::printf(
      "qwen %s on cuda, tp=1 fp8 weights: relative error %.3g against diffusers bfloat16 "
      "(CUDA) (our bfloat16: %.3g; limit %.0e), %.3g from our bfloat16 image\n",
      name.c_str(), err, bf16_err, kFp8ImageLimit, from_ours);
  if (comparable) {
    EXPECT_LT(err, kFp8ImageLimit) << "fp8 image against diffusers' bfloat16 image";
  } else {
    std::printf(
        "qwen %s: diffusers' text model ran without the 3-D M-RoPE positions: the fp8 "
        "image held against our bfloat16 image instead\n",
        name.c_str());
    EXPECT_LT(from_ours, kFp8ImageLimit) << "fp8 image against our bfloat16 image";
  }
}

}  // namespace
}  // namespace ditserve::testing
