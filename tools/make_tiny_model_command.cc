// `ditserve-tool make-tiny-model DIR [--seed N] [--dtype float32|bfloat16] [--force]
// [--transformer-shards N] [--vae-mid-attention]`: writes the project's embedded default model, a tiny random-weight
// FLUX.1 pipeline in diffusers format with its tokenizers (tools/tiny_model/tiny_model.h), into
// DIR atomically, and prints the number of tensors and bytes. Exit 0 on success, 1 when the model
// could not be written (DIR exists without --force included), 2 on bad arguments.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "tools/dtype_flag.h"
#include "tools/tiny_model/tiny_model.h"
#include "tools/tool_registry.h"

namespace ditserve::tools {
namespace {

struct MakeTinyModelOptions {
  int64_t seed = 0;
  std::string dtype = "float32";
  bool force = false;
  int64_t transformer_shards = 1;
  bool vae_mid_attention = false;
  std::string preset = "tiny";
  int64_t num_layers = 0, num_single_layers = 0;  // 0 = the preset's
  int64_t threads = 0;  // 0 = one per core
  std::string spm_trainer;
};

void AddMakeTinyModelFlags(FlagParser& p, MakeTinyModelOptions& o) {
  p.AddInt("seed", &o.seed, "seed of the random weights (same seed, same bytes)");
  p.AddString("dtype", &o.dtype, "weight dtype: float32 | bfloat16");
  p.AddBool("force", &o.force, "replace DIR if it already exists");
  p.AddInt("transformer-shards", &o.transformer_shards,
           "write the transformer as N shards plus an index, as the Hub's FLUX.1 checkpoints");
  p.AddBool("vae-mid-attention", &o.vae_mid_attention,
            "give the VAE its mid-block attention, as FLUX.1's (slow at the default image size)");
  p.AddString("preset", &o.preset,
              "tiny (the default model) | flux1-dev-size (FLUX.1-dev's transformer and VAE at full "
              "size, one-layer text encoders of the released widths; ~24 GB in bfloat16)");
  p.AddInt("num-layers", &o.num_layers,
           "transformer double-stream blocks instead of the preset's (0: keep; a smaller machine)");
  p.AddInt("num-single-layers", &o.num_single_layers,
           "transformer single-stream blocks instead of the preset's (0: keep)");
  p.AddInt("threads", &o.threads, "threads generating the weights (0: one per core)");
  p.AddString("spm-trainer", &o.spm_trainer,
              "path of ditserve-spm-train (default: $DITSERVE_SPM_TRAIN, next to this binary, "
              "then $PATH)");
}

// The generator's options from parsed flags, checked in this order: one DIR, --dtype, --preset,
// the layer counts, --threads, --seed, --transformer-shards.
absl::StatusOr<tiny_model::TinyModelOptions> TinyModelOptionsFromFlags(
    const FlagParser& p, const MakeTinyModelOptions& o) {
  if (p.Positional().size() != 1) {
    return absl::InvalidArgumentError("exactly one model folder DIR is required");
  }
  tiny_model::TinyModelOptions options;
  ASSIGN_OR_RETURN(options.dtype,
                   ParseDTypeFlag(o.dtype, {sharding::DType::kF32, sharding::DType::kBF16}));
  if (o.preset == "flux1-dev-size") {
    options.configs = tiny_model::Flux1DevSizeConfigs();
  } else if (o.preset != "tiny") {
    return absl::InvalidArgumentError(
        absl::StrCat("--preset must be tiny or flux1-dev-size, got '", o.preset, "'"));
  }
  if (o.num_layers < 0 || o.num_single_layers < 0) {
    return absl::InvalidArgumentError("--num-layers and --num-single-layers must be >= 0");
  }
  if (o.num_layers > 0) options.configs.transformer["num_layers"] = o.num_layers;
  if (o.num_single_layers > 0) {
    options.configs.transformer["num_single_layers"] = o.num_single_layers;
  }
  if (o.threads < 0 || o.threads > 1024) {
    return absl::InvalidArgumentError("--threads must be in [0, 1024]");
  }
  if (o.seed < 0) return absl::InvalidArgumentError("--seed must be >= 0");
  if (o.transformer_shards < 1 || o.transformer_shards > 99999) {
    return absl::InvalidArgumentError("--transformer-shards must be in [1, 99999]");
  }
  options.seed = static_cast<uint64_t>(o.seed);
  options.force = o.force;
  options.transformer_shards = static_cast<int>(o.transformer_shards);
  options.spm_trainer = o.spm_trainer;
  options.threads = static_cast<int>(o.threads);
  if (o.vae_mid_attention) options.configs.vae["mid_block_add_attention"] = true;
  return options;
}

// Prints `error` and the usage to stderr; returns the exit code of bad arguments.
int BadArguments(const absl::Status& error, const FlagParser& p) {
  std::fprintf(stderr, "%s\n\n%s", std::string(error.message()).c_str(), p.Help().c_str());
  return 2;
}

int MakeTinyModelMain(int argc, const char* const* argv) {
  MakeTinyModelOptions o;
  FlagParser p("ditserve-tool make-tiny-model DIR",
               "Writes a tiny random-weight FLUX.1 pipeline (diffusers format, tokenizers "
               "included) into DIR: the default model the server runs with no download.");
  AddMakeTinyModelFlags(p, o);
  absl::Status parsed = p.Parse(argc, argv);
  if (!parsed.ok()) return BadArguments(parsed, p);
  if (p.HelpRequested()) {
    std::fprintf(stdout, "%s", p.Help().c_str());
    return 0;
  }
  absl::StatusOr<tiny_model::TinyModelOptions> options = TinyModelOptionsFromFlags(p, o);
  if (!options.ok()) return BadArguments(options.status(), p);

  const std::string& dir = p.Positional()[0];
  auto summary = tiny_model::GenerateTinyModel(dir, *options);
  if (!summary.ok()) {
    std::fprintf(stderr, "ditserve-tool make-tiny-model: %s\n",
                 summary.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stdout,
               "wrote %s: FLUX.1 pipeline, %lld tensors, %llu bytes of %s weights "
               "(CLIP vocab %lld, T5 vocab %lld, seed %lld)\n",
               dir.c_str(), static_cast<long long>(summary->tensors),
               static_cast<unsigned long long>(summary->bytes), o.dtype.c_str(),
               static_cast<long long>(summary->clip_vocab_size),
               static_cast<long long>(summary->t5_vocab_size), static_cast<long long>(o.seed));
  return 0;
}

}  // namespace

DITSERVE_TOOL_COMMAND("make-tiny-model",
                      "write the tiny random-weight FLUX.1 pipeline (the embedded default model)",
                      MakeTinyModelMain);

}  // namespace ditserve::tools
