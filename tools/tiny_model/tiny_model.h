// Generates the project's embedded default model: a tiny random-weight FLUX.1 pipeline in the exact
// diffusers on-disk format, tokenizers included, so that the server runs with no
// download. Real FLUX.1-dev / -schnell folders from the Hub have the same layout, file names,
// config keys, tensor names and dtypes; only the sizes differ (configs.h).
//
//   DIR/model_index.json
//   DIR/scheduler/scheduler_config.json
//   DIR/text_encoder/{config.json, model.safetensors}                   CLIPTextModel
//   DIR/text_encoder_2/{config.json, model.safetensors}                 T5EncoderModel
//   DIR/tokenizer/{vocab.json, merges.txt, tokenizer_config.json}       CLIP BPE (clip_bpe_vocab.h)
//   DIR/tokenizer_2/{spiece.model, tokenizer_config.json}               T5 unigram (t5_spiece.h)
//   DIR/transformer/{config.json, diffusion_pytorch_model.safetensors}  (or shards + index)
//   DIR/vae/{config.json, diffusion_pytorch_model.safetensors}          encoder + decoder
//
// Every tensor name and shape is derived from the component's config (the *_weights.h
// generators); values are seeded per tensor (random_init.h), so the same options give the same
// bytes. GenerateTinyModel is atomic: everything is written into a hidden temporary folder next to
// DIR, which is renamed to DIR only when complete; a crash leaves at most that hidden folder.
//
// Thread-safety: concurrent calls must target different folders (two racing on one DIR: one wins,
// the other fails with FAILED_PRECONDITION). Forks a child process for the T5 trainer.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sharding/safetensors.h"
#include "tools/tiny_model/configs.h"

namespace ditserve::tiny_model {

struct TinyModelOptions {
  uint64_t seed = 0;
  sharding::DType dtype = sharding::DType::kF32;  // kF32 or kBF16
  bool force = false;           // replace an existing non-empty DIR
  int transformer_shards = 1;   // > 1: sharded files + index, as the Hub's FLUX.1 transformer
  int threads = 0;              // weight generation threads (0: one per core)
  std::string spm_trainer;      // ditserve-spm-train; "" = FindSpmTrainer()
  // Component configs. The text encoders' vocab_size is the tokenizer size to train (CLIP:
  // 512 byte symbols + merges + 2 specials; T5: pieces + t5_extra_ids) and is rewritten to the size
  // actually trained.
  TinyModelConfigs configs = DefaultTinyModelConfigs();
};

struct TinyModelSummary {
  int64_t tensors = 0;
  uint64_t bytes = 0;            // tensor data bytes over all components
  int64_t clip_vocab_size = 0;   // as written to text_encoder/config.json
  int64_t t5_vocab_size = 0;     // as written to text_encoder_2/config.json
};

// INVALID_ARGUMENT when the components disagree on the widths they exchange (e.g. transformer
// joint_attention_dim != T5 d_model, pooled_projection_dim != CLIP hidden_size, in_channels !=
// 4 * VAE latent_channels * patch²).
absl::Status CheckTinyModelConsistency(const TinyModelConfigs& configs);

// Atomically creates `dir` (and missing parents) holding the pipeline. FAILED_PRECONDITION if `dir`
// exists and is not an empty folder, unless options.force; INVALID_ARGUMENT for inconsistent
// configs (CheckTinyModelConsistency); INTERNAL on I/O or trainer failures.
absl::StatusOr<TinyModelSummary> GenerateTinyModel(const std::string& dir,
                                                   const TinyModelOptions& options);

}  // namespace ditserve::tiny_model
