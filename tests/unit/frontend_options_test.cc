// ditserve-frontend's options (server/frontend_options.h): the LoRA flags (--lora NAME=PATH,
// --lora-dir, --max-loras-per-request, --max-lora-scale), bound with common/flags.h, resolved and
// validated at start, and passed to every worker in InitRequest.loras; the input image limits and
// --max-request-bytes; --default-cache-threshold.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/remove_tree.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/frontend_options.h"
#include "server/frontend_server.h"
#include "server/image_generation_service.h"

namespace ditserve::server {
namespace {

namespace fs = std::filesystem;

class FrontendOptionsLora : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ditserve-options-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    (void)ditserve::RemoveTree(dir_);
  }

  // Creates an (empty) file under the temp dir and returns its absolute path.
  std::string Touch(const std::string& relative) {
    const fs::path p = dir_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p).put('x');
    return p.string();
  }

  // Parses `args` as the frontend's command line (after --model) and validates it.
  absl::Status ParseAndValidate(std::vector<std::string> args) {
    options_ = FrontendOptions();
    FlagParser parser("ditserve-frontend", "test");
    BindFrontendFlags(parser, options_);
    args.insert(args.begin(), {"ditserve-frontend", "--model", "/models/tiny"});
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    if (absl::Status s = parser.Parse(static_cast<int>(argv.size()), argv.data()); !s.ok()) {
      return s;
    }
    return ValidateFrontendOptions(options_);
  }

  // The error of `args`, which must be INVALID_ARGUMENT containing `needle`.
  void ExpectError(std::vector<std::string> args, const std::string& needle) {
    const absl::Status s = ParseAndValidate(args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), needle)) << s << "\n  expected: " << needle;
  }

  fs::path dir_;
  FrontendOptions options_;
};

TEST_F(FrontendOptionsLora, DefaultsAndHelp) {
  ASSERT_TRUE(ParseAndValidate({}).ok());
  EXPECT_TRUE(options_.lora_adapters.empty());
  EXPECT_EQ(options_.limits.max_loras_per_request, 4u);
  EXPECT_DOUBLE_EQ(options_.limits.max_lora_scale, 4.0);
  EXPECT_EQ(MakeWorkerGroupOptions(options_, "w").init_template.loras_size(), 0);

  FrontendOptions o;
  FlagParser parser("ditserve-frontend", "test");
  BindFrontendFlags(parser, o);
  const std::string help = parser.Help();
  for (const char* flag : {"--lora VALUE", "--lora-dir VALUE", "--max-loras-per-request VALUE",
                           "--max-lora-scale VALUE"}) {
    EXPECT_TRUE(absl::StrContains(help, flag)) << flag;
  }
  EXPECT_TRUE(absl::StrContains(help, "(repeatable)"));
}

TEST_F(FrontendOptionsLora, RepeatedLoraFlagsReachEveryWorkerInOrder) {
  const std::string style = Touch("style.safetensors");
  const std::string peft = Touch("peft/adapter_model.safetensors");
  ASSERT_TRUE(ParseAndValidate({"--lora", "style=" + style, "--lora=my_peft-2.0=" + dir_.string() +
                                                                "/peft"})
                  .ok());
  const std::vector<LoraAdapterOption> expected = {{"style", style},
                                                   {"my_peft-2.0", (dir_ / "peft").string()}};
  EXPECT_EQ(options_.lora_adapters, expected);

  const WorkerGroupOptions group = MakeWorkerGroupOptions(options_, "w");
  ASSERT_EQ(group.init_template.loras_size(), 2);
  EXPECT_EQ(group.init_template.loras(0).name(), "style");
  EXPECT_EQ(group.init_template.loras(0).path(), style);
  EXPECT_EQ(group.init_template.loras(1).name(), "my_peft-2.0");
  EXPECT_EQ(group.init_template.loras(1).path(), (dir_ / "peft").string());
}

TEST_F(FrontendOptionsLora, RelativePathsBecomeAbsolute) {
  Touch("rel/a.safetensors");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  const absl::Status s = ParseAndValidate({"--lora", "a=rel/a.safetensors", "--lora-dir", "rel"});
  fs::current_path(cwd);
  // The same file by --lora and by --lora-dir: one name twice.
  EXPECT_TRUE(absl::StrContains(s.message(), "LoRA adapter name 'a' is given twice: by --lora "
                                             "a=rel/a.safetensors and by --lora-dir"))
      << s;

  fs::current_path(dir_);
  const absl::Status ok = ParseAndValidate({"--lora", "b=rel/a.safetensors"});
  fs::current_path(cwd);
  ASSERT_TRUE(ok.ok()) << ok;
  ASSERT_EQ(options_.lora_adapters.size(), 1u);
  EXPECT_EQ(options_.lora_adapters[0].path, (dir_ / "rel/a.safetensors").string());
}

TEST_F(FrontendOptionsLora, LoraDirFindsFilesAndAdapterFoldersByName) {
  Touch("loras/zeta.safetensors");
  Touch("loras/alpha.v2.safetensors");
  Touch("loras/diffusers_style/pytorch_lora_weights.safetensors");
  Touch("loras/diffusers_style/README.md");
  Touch("loras/peft/adapter_model.safetensors");
  Touch("loras/peft/adapter_config.json");
  Touch("loras/single/whatever.safetensors");
  Touch("loras/two/a.safetensors");  // two files and neither standard name: not an adapter
  Touch("loras/two/b.safetensors");
  Touch("loras/empty/notes.txt");  // no .safetensors: not an adapter
  Touch("loras/readme.txt");
  Touch("loras/weights.bin");
  const std::string own = Touch("own.safetensors");
  ASSERT_TRUE(ParseAndValidate({"--lora", "own=" + own, "--lora-dir", (dir_ / "loras").string()})
                  .ok());
  const fs::path d = dir_ / "loras";
  const std::vector<LoraAdapterOption> expected = {
      {"own", own},  // --lora first, then the folder's entries by name
      {"alpha.v2", (d / "alpha.v2.safetensors").string()},
      {"diffusers_style", (d / "diffusers_style").string()},
      {"peft", (d / "peft").string()},
      {"single", (d / "single").string()},
      {"zeta", (d / "zeta.safetensors").string()},
  };
  EXPECT_EQ(options_.lora_adapters, expected);

  // An empty folder is fine: no adapters.
  fs::create_directories(dir_ / "none");
  ASSERT_TRUE(ParseAndValidate({"--lora-dir", (dir_ / "none").string()}).ok());
  EXPECT_TRUE(options_.lora_adapters.empty());
}

TEST_F(FrontendOptionsLora, RefusesBadLoraFlagsNamingThem) {
  const std::string file = Touch("a.safetensors");
  ExpectError({"--lora", file}, "--lora must be NAME=PATH, got '" + file + "'");
  ExpectError({"--lora", "=" + file}, "the name '' must be 1..64 characters of A-Z a-z 0-9 . _ -");
  ExpectError({"--lora", "a b=" + file}, "--lora a b=" + file + ": the name 'a b' must be");
  ExpectError({"--lora", "x:y=" + file}, "the name 'x:y' must be");
  ExpectError({"--lora", std::string(65, 'n') + "=" + file}, "must be 1..64 characters");
  EXPECT_TRUE(ParseAndValidate({"--lora", std::string(64, 'n') + "=" + file}).ok());
  ExpectError({"--lora", "a="}, "--lora a=: the path is empty");
  ExpectError({"--lora", "a=" + (dir_ / "missing.safetensors").string()},
              "'" + (dir_ / "missing.safetensors").string() + "' does not exist");
  Touch("two/a.safetensors");
  Touch("two/b.safetensors");
  ExpectError({"--lora", "t=" + (dir_ / "two").string()},
              "holds no adapter: it holds several .safetensors files and no "
              "pytorch_lora_weights.safetensors or adapter_model.safetensors");
  fs::create_directories(dir_ / "hollow");
  ExpectError({"--lora", "h=" + (dir_ / "hollow").string()}, "it holds no .safetensors files");
  ExpectError({"--lora", "a=" + file, "--lora", "a=" + file},
              "LoRA adapter name 'a' is given twice: by --lora a=" + file + " and by --lora a=");
}

TEST_F(FrontendOptionsLora, RefusesBadLoraDirs) {
  ExpectError({"--lora-dir", (dir_ / "missing").string()},
              "--lora-dir '" + (dir_ / "missing").string() + "' is not a folder");
  const std::string file = Touch("file.safetensors");
  ExpectError({"--lora-dir", file}, "is not a folder");
  Touch("bad/has space.safetensors");
  ExpectError({"--lora-dir", (dir_ / "bad").string()},
              "would be the adapter 'has space', but a name must be 1..64 characters");
  // A file and a folder of the same name.
  Touch("dup/x.safetensors");
  Touch("dup/x/pytorch_lora_weights.safetensors");
  ExpectError({"--lora-dir", (dir_ / "dup").string()}, "LoRA adapter name 'x' is given twice");
  // --lora and --lora-dir.
  Touch("other/y.safetensors");
  ExpectError({"--lora", "y=" + file, "--lora-dir", (dir_ / "other").string()},
              "LoRA adapter name 'y' is given twice: by --lora y=");
}

TEST_F(FrontendOptionsLora, LimitsAreChecked) {
  ASSERT_TRUE(ParseAndValidate({"--max-loras-per-request", "1", "--max-lora-scale", "8"}).ok());
  EXPECT_EQ(options_.limits.max_loras_per_request, 1u);
  EXPECT_DOUBLE_EQ(options_.limits.max_lora_scale, 8.0);
  ExpectError({"--max-loras-per-request", "0"}, "--max-loras-per-request must be in 1..64, got 0");
  ExpectError({"--max-loras-per-request", "65"}, "--max-loras-per-request must be in 1..64");
  ExpectError({"--max-lora-scale", "0"},
              "--max-lora-scale must be above 0 and at most 8 (the workers' bound), got 0");
  ExpectError({"--max-lora-scale", "-1"}, "--max-lora-scale must be above 0");
  ExpectError({"--max-lora-scale", "8.5"}, "--max-lora-scale must be above 0 and at most 8");
  ExpectError({"--max-lora-scale", "nan"}, "--max-lora-scale must be above 0");
  ExpectError({"--max-lora-scale", "x"}, "--max-lora-scale: 'x' is not a number");
}

TEST_F(FrontendOptionsLora, LoraModeIsMergeOrRuntimeAndReachesTheWorkers) {
  ASSERT_TRUE(ParseAndValidate({}).ok());
  EXPECT_EQ(options_.lora_mode, "merge");
  ASSERT_TRUE(ParseAndValidate({"--lora-mode", "runtime"}).ok());
  EXPECT_EQ(MakeWorkerGroupOptions(options_, "ditserve-worker").init_template.lora_mode(), "runtime");
  ASSERT_TRUE(ParseAndValidate({"--lora-merge-max-mib", "512"}).ok());
  EXPECT_EQ(MakeWorkerGroupOptions(options_, "w").init_template.lora_merge_max_bytes(), 512ull << 20);
  ExpectError({"--lora-mode", "fast"}, "--lora-mode must be merge or runtime, got 'fast'");
}

// --weights: dtype by default; fp8 only with --device cuda --dtype bfloat16, and it reaches the
// workers' Init (which checks the GPU itself).
TEST_F(FrontendOptionsLora, WeightsFlagIsCheckedAndReachesTheWorkers) {
  ASSERT_TRUE(ParseAndValidate({}).ok());
  EXPECT_EQ(options_.weights, "dtype");
  ASSERT_TRUE(ParseAndValidate({"--device", "cuda", "--dtype", "bfloat16", "--weights", "fp8"}).ok());
  EXPECT_EQ(MakeWorkerGroupOptions(options_, "w").init_template.weights(), "fp8");
  ExpectError({"--weights", "int4"}, "--weights must be 'dtype' or 'fp8', got 'int4'");
  ExpectError({"--weights", "fp8"},
              "--weights fp8 needs --device cuda and --dtype bfloat16 (got --device cpu --dtype "
              "float32)");
  ExpectError({"--device", "cuda", "--weights", "fp8"}, "--weights fp8 needs --device cuda and --dtype bfloat16");
}

// --cuda-graphs: 4 by default, 0 turns them off; always sent to the workers (an unset field means
// the worker's default), bounded.
TEST_F(FrontendOptionsLora, CudaGraphsFlagIsCheckedAndReachesTheWorkers) {
  ASSERT_TRUE(ParseAndValidate({}).ok());
  auto init = MakeWorkerGroupOptions(options_, "w").init_template;
  ASSERT_TRUE(init.has_cuda_graphs());
  EXPECT_EQ(init.cuda_graphs(), 4u);
  ASSERT_TRUE(ParseAndValidate({"--cuda-graphs", "0"}).ok());
  init = MakeWorkerGroupOptions(options_, "w").init_template;
  ASSERT_TRUE(init.has_cuda_graphs());
  EXPECT_EQ(init.cuda_graphs(), 0u);
  ExpectError({"--cuda-graphs", "65"}, "--cuda-graphs must be in 0..64, got 65");
}

// --default-cache-threshold: 0 (off) by default, 0..1, and it becomes the served model's
// step_cache.default_threshold (what a request without cache_threshold gets).
TEST_F(FrontendOptionsLora, DefaultCacheThresholdIsCheckedAndBecomesTheModelsDefault) {
  ASSERT_TRUE(ParseAndValidate({}).ok());
  EXPECT_EQ(options_.default_cache_threshold, 0.0);
  ASSERT_TRUE(ParseAndValidate({"--default-cache-threshold", "0.08"}).ok());
  EXPECT_EQ(options_.default_cache_threshold, 0.08);
  worker::v1::ModelDescription model;
  model.mutable_step_cache()->set_max_threshold(1.0);
  ApplyServerDefaults(options_, &model);
  EXPECT_EQ(model.step_cache().default_threshold(), 0.08);
  ASSERT_TRUE(ParseAndValidate({"--default-cache-threshold", "1"}).ok());
  for (const char* bad : {"-0.1", "1.01", "nan", "inf"}) {
    ExpectError({"--default-cache-threshold", bad},
                absl::StrCat("--default-cache-threshold must be in 0..1 (0: the step cache off), "
                             "got "));
  }
  ExpectError({"--default-cache-threshold", "1.5"}, "got 1.5");
  ExpectError({"--default-cache-threshold", "x"}, "--default-cache-threshold: 'x' is not a number");
}

TEST_F(FrontendOptionsLora, InputImageLimitsAndTheRequestSize) {
  ASSERT_TRUE(ParseAndValidate({}).ok());
  EXPECT_EQ(options_.limits.max_input_image_bytes, uint64_t{32} << 20);
  EXPECT_EQ(options_.limits.max_input_image_pixels, uint64_t{16777216});
  EXPECT_EQ(options_.limits.max_input_image_side, uint64_t{8192});
  // 0: 64 MiB + 10 images of the image limit.
  EXPECT_EQ(options_.MaxRequestBytes(), (uint64_t{64} << 20) + 10 * (uint64_t{32} << 20));
  ASSERT_TRUE(ParseAndValidate({"--max-input-image-bytes", "1048576", "--max-input-image-pixels",
                                "1000000", "--max-input-image-side", "2000"})
                  .ok());
  EXPECT_EQ(options_.MaxRequestBytes(), (uint64_t{64} << 20) + 10 * (uint64_t{1} << 20));
  ASSERT_TRUE(ParseAndValidate({"--max-request-bytes", "100000000"}).ok());
  EXPECT_EQ(options_.MaxRequestBytes(), uint64_t{100000000});

  ExpectError({"--max-input-image-bytes", "0"}, "--max-input-image-bytes must be in 1024..");
  ExpectError({"--max-input-image-bytes", "999999999999"}, "--max-input-image-bytes");
  ExpectError({"--max-input-image-pixels", "0"}, "--max-input-image-pixels must be in 1..");
  ExpectError({"--max-input-image-side", "70000"}, "--max-input-image-side must be in 1..65535");
  ExpectError({"--max-request-bytes", "1000"}, "--max-request-bytes must be 0 (automatic) or in");
  ExpectError({"--max-request-bytes", "4294967296"}, "--max-request-bytes");
}

}  // namespace
}  // namespace ditserve::server
