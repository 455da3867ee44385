#include "tools/tiny_model/tiny_model.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tools/tiny_model/clip_bpe_vocab.h"
#include "tools/tiny_model/clip_text_weights.h"
#include "tools/tiny_model/config_fields.h"
#include "tools/tiny_model/corpus.h"
#include "tools/tiny_model/file_util.h"
#include "tools/tiny_model/flux_transformer_weights.h"
#include "tools/tiny_model/t5_spiece.h"
#include "tools/tiny_model/t5_weights.h"
#include "tools/tiny_model/vae_weights.h"
#include "tools/tiny_model/weights_writer.h"

namespace ditserve::tiny_model {
namespace {

namespace fs = std::filesystem;

// CLIP's vocabulary before any merge: 256 byte symbols, the same with "</w>", and 2 specials.
constexpr int64_t kClipBaseVocab = 2 * 256 + 2;

absl::Status MakeDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": cannot create: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

// The pipeline only works when the components agree on the widths they exchange.
absl::Status CheckTinyModelConsistency(const TinyModelConfigs& c) {
  ASSIGN_OR_RETURN(const int64_t joint,
                   PositiveInt(c.transformer, "FluxTransformer2DModel", "joint_attention_dim", 4096));
  ASSIGN_OR_RETURN(const int64_t pooled, PositiveInt(c.transformer, "FluxTransformer2DModel",
                                                     "pooled_projection_dim", 768));
  ASSIGN_OR_RETURN(const int64_t in_channels,
                   PositiveInt(c.transformer, "FluxTransformer2DModel", "in_channels", 64));
  ASSIGN_OR_RETURN(const int64_t patch,
                   PositiveInt(c.transformer, "FluxTransformer2DModel", "patch_size", 1));
  ASSIGN_OR_RETURN(const int64_t d_model, PositiveInt(c.text_encoder_2, "T5EncoderModel", "d_model"));
  ASSIGN_OR_RETURN(const int64_t hidden, PositiveInt(c.text_encoder, "CLIPTextModel", "hidden_size"));
  ASSIGN_OR_RETURN(const int64_t latent, PositiveInt(c.vae, "AutoencoderKL", "latent_channels", 4));
  if (joint != d_model) {
    return absl::InvalidArgumentError(absl::StrCat("transformer joint_attention_dim ", joint,
                                                   " != text_encoder_2 d_model ", d_model));
  }
  if (pooled != hidden) {
    return absl::InvalidArgumentError(absl::StrCat("transformer pooled_projection_dim ", pooled,
                                                   " != text_encoder hidden_size ", hidden));
  }
  if (in_channels != 4 * latent * patch * patch) {
    return absl::InvalidArgumentError(
        absl::StrCat("transformer in_channels ", in_channels, " != 4 x vae latent_channels ",
                     latent, " x patch_size² (the pipeline packs 2x2 latent patches)"));
  }
  if (c.t5_extra_ids < 0) {
    return absl::InvalidArgumentError(absl::StrCat("t5_extra_ids must be >= 0"));
  }
  return absl::OkStatus();
}

namespace {

std::string DTypeConfigName(sharding::DType dtype) {
  return dtype == sharding::DType::kBF16 ? "bfloat16" : "float32";
}

// Component seeds differ so that equal tensor names in two components get different values.
uint64_t ComponentSeed(uint64_t seed, uint64_t component) {
  return seed * 0x9E3779B97F4A7C15ULL + component;
}

void Add(const WeightsWritten& w, TinyModelSummary* summary) {
  summary->tensors += w.tensors;
  summary->bytes += w.bytes;
}

// Removes a folder on destruction unless released.
class ScopedDir {
 public:
  explicit ScopedDir(std::string path) : path_(std::move(path)) {}
  ~ScopedDir() {
    if (!path_.empty()) RemoveTree(path_).IgnoreError();
  }
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

// Writes the whole pipeline into `dir` (created if missing; expected empty). Not atomic.
// INVALID_ARGUMENT for inconsistent configs (e.g. transformer joint_attention_dim != T5 d_model,
// pooled_projection_dim != CLIP hidden_size, in_channels != 4 * VAE latent_channels * patch²);
// INTERNAL on I/O or trainer failures.
absl::StatusOr<TinyModelSummary> WriteTinyModel(const std::string& dir,
                                                const TinyModelOptions& options) {
  if (options.dtype != sharding::DType::kF32 && options.dtype != sharding::DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype must be float32 or bfloat16, not ",
                                                   sharding::DTypeName(options.dtype)));
  }
  TinyModelConfigs configs = options.configs;
  RETURN_IF_ERROR(CheckTinyModelConsistency(configs));
  for (const char* component : {"scheduler", "text_encoder", "text_encoder_2", "tokenizer",
                                "tokenizer_2", "transformer", "vae"}) {
    RETURN_IF_ERROR(MakeDir(JoinPath(dir, component)));
  }
  TinyModelSummary summary;
  const std::string& corpus = EmbeddedCorpus();

  // Tokenizers first: their sizes become the text encoders' vocab_size.
  ASSIGN_OR_RETURN(const int64_t clip_requested,
                   PositiveInt(configs.text_encoder, "CLIPTextModel", "vocab_size"));
  if (clip_requested < kClipBaseVocab) {
    return absl::InvalidArgumentError(absl::StrCat("CLIPTextModel vocab_size must be >= ",
                                                   kClipBaseVocab, ", got ", clip_requested));
  }
  ASSIGN_OR_RETURN(const ClipBpeFiles clip,
                   TrainClipBpe(corpus, static_cast<int>(clip_requested - kClipBaseVocab)));
  RETURN_IF_ERROR(
      WriteClipTokenizer(JoinPath(dir, "tokenizer"), clip, configs.clip_model_max_length));
  configs.text_encoder["vocab_size"] = static_cast<int64_t>(clip.vocab.size());

  ASSIGN_OR_RETURN(const int64_t t5_requested,
                   PositiveInt(configs.text_encoder_2, "T5EncoderModel", "vocab_size"));
  ASSIGN_OR_RETURN(const int64_t pieces,
                   TrainT5SentencePiece(corpus, t5_requested - configs.t5_extra_ids,
                                        options.spm_trainer, JoinPath(dir, "tokenizer_2")));
  RETURN_IF_ERROR(
      WriteFile(JoinPath(dir, "tokenizer_2/tokenizer_config.json"),
                T5TokenizerConfigJson(configs.t5_extra_ids, configs.t5_model_max_length)));
  configs.text_encoder_2["vocab_size"] = pieces + configs.t5_extra_ids;
  summary.clip_vocab_size = configs.text_encoder["vocab_size"].get<int64_t>();
  summary.t5_vocab_size = configs.text_encoder_2["vocab_size"].get<int64_t>();

  const std::string dtype_name = DTypeConfigName(options.dtype);
  configs.text_encoder["dtype"] = dtype_name;
  configs.text_encoder_2["dtype"] = dtype_name;

  RETURN_IF_ERROR(
      WriteFile(JoinPath(dir, "model_index.json"), ConfigJsonText(configs.model_index)));
  RETURN_IF_ERROR(WriteFile(JoinPath(dir, "scheduler/scheduler_config.json"),
                            ConfigJsonText(configs.scheduler)));

  struct Component {
    const char* folder;
    const nlohmann::json* config;
    absl::StatusOr<std::vector<TensorSpec>> (*tensors)(const nlohmann::json&);
    const char* weights_base;
    int shards;
  };
  const Component components[] = {
      {"text_encoder", &configs.text_encoder, &ClipTextTensors, "model", 1},
      {"text_encoder_2", &configs.text_encoder_2, &T5EncoderTensors, "model", 1},
      {"transformer", &configs.transformer, &FluxTransformerTensors, "diffusion_pytorch_model",
       options.transformer_shards},
      {"vae", &configs.vae, &AutoencoderKlTensors, "diffusion_pytorch_model", 1},
  };
  uint64_t index = 0;
  for (const Component& c : components) {
    const std::string folder = JoinPath(dir, c.folder);
    RETURN_IF_ERROR(WriteFile(JoinPath(folder, "config.json"), ConfigJsonText(*c.config)));
    ASSIGN_OR_RETURN(std::vector<TensorSpec> specs, c.tensors(*c.config));
    ASSIGN_OR_RETURN(const WeightsWritten written,
                     WriteComponentWeights(folder, c.weights_base, std::move(specs),
                                           ComponentSeed(options.seed, ++index), options.dtype,
                                           c.shards, options.threads));
    Add(written, &summary);
  }
  return summary;
}

}  // namespace

absl::StatusOr<TinyModelSummary> GenerateTinyModel(const std::string& dir_arg,
                                                   const TinyModelOptions& options) {
  if (dir_arg.empty()) return absl::InvalidArgumentError("the model folder must not be empty");
  fs::path target = fs::path(dir_arg).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();  // "a/b/" -> "a/b"
  if (target.empty() || target.filename() == "." || target.filename() == "..") {
    return absl::InvalidArgumentError(absl::StrCat("not a usable model folder: ", dir_arg));
  }
  const std::string dir = target.string();
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");

  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(target, ec));
  const bool empty_dir = exists && fs::is_directory(target, ec) && fs::is_empty(target, ec);
  if (exists && !empty_dir && !options.force) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, " already exists (pass --force to replace it)"));
  }
  RETURN_IF_ERROR(MakeDir(parent.string()));

  std::string tmp_template =
      (parent / absl::StrCat(".", target.filename().string(), ".tmp-XXXXXX")).string();
  if (::mkdtemp(tmp_template.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat(parent.string(), ": cannot create a temporary folder: ", std::strerror(errno)));
  }
  const std::string tmp = tmp_template;
  ScopedDir tmp_guard(tmp);
  // mkdtemp makes it 0700; a model is shared read-only data (e.g. generated as root in an image
  // and served by another user).
  ::chmod(tmp.c_str(), 0755);

  ASSIGN_OR_RETURN(TinyModelSummary summary, WriteTinyModel(tmp, options));

  if (exists && !empty_dir) {
    // --force: move the old model aside, put the new one in place, then delete the old one.
    const std::string old = tmp + ".old";
    fs::rename(target, old, ec);
    if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot move aside: ", ec.message()));
    fs::rename(tmp, target, ec);
    if (ec) {
      std::error_code restore;
      fs::rename(old, target, restore);
      return absl::InternalError(absl::StrCat(dir, ": cannot install: ", ec.message()));
    }
    tmp_guard.Release();
    RemoveTree(old).IgnoreError();  // the new model is in place; a leftover is only untidy
    return summary;
  }
  // rename(2) replaces an empty folder and fails on a non-empty one: a generator racing us that
  // finished first wins, and we report the folder as existing.
  fs::rename(tmp, target, ec);
  if (ec) {
    if (ec == std::errc::directory_not_empty || ec == std::errc::file_exists) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, " already exists (pass --force to replace it)"));
    }
    return absl::InternalError(absl::StrCat(dir, ": cannot install: ", ec.message()));
  }
  tmp_guard.Release();
  return summary;
}

}  // namespace ditserve::tiny_model
