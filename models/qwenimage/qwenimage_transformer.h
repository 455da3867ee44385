// QwenImageTransformer2DModel (diffusers transformer_qwenimage.py), built per rank from
// a ShardedStateDict and a Communicator: every linear layer takes the style the state dict's plan
// gives it (models/tp), local heads = q rows / head_dim. Works in any floating dtype the state
// dict holds (float32, bfloat16) on the device its tensors are on.
//
// Forward arguments (names as diffusers'): hidden_states (B, N, in_channels) packed latents,
// encoder_hidden_states (B, T, joint_attention_dim), timestep (B,) σ in [0, 1] (no ×1000 in the
// model: the sinusoid scales by 1000 in float32), and optionally
//   encoder_hidden_states_mask (B, T): nonzero = real token; keys of masked text tokens are
//     excluded from attention (mask [text mask, ones(N)]); absent = no mask;
//   img_shapes: diffusers' `img_shapes` list as a tensor (3,), (B, 3) or (B, K, 3) of
//     (frames, h', w') in packed-grid units; absent = one square image, h' = w' = sqrt(N) (see
//     models/qwenimage/qwenimage_rope.h).
// Output: (B, N, patch_size² · out_channels).
//
// Forward under tensor parallelism is a collective (models/transformer.h): 4 all-reduces per block.
// Thread-safety: one Forward at a time. Ownership: borrows the communicator (must outlive the
// model); shares the state dict's tensors.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "models/common/ada_layer_norm.h"
#include "models/common/diffusers_rms_norm.h"
#include "models/common/linear_layer.h"
#include "models/common/timestep_embedding.h"
#include "models/qwenimage/qwenimage_block.h"
#include "models/qwenimage/qwenimage_config.h"
#include "models/transformer_base.h"
#include "sharding/state_dict.h"

namespace ditserve::models::qwenimage {

struct QwenImageForwardArgs {
  torch::Tensor hidden_states;               // (B, N, in_channels)
  torch::Tensor encoder_hidden_states;       // (B, T, joint_attention_dim)
  torch::Tensor encoder_hidden_states_mask;  // optional (B, T)
  torch::Tensor timestep;                    // (B,) σ
  torch::Tensor img_shapes;                  // optional, see above
};

class QwenImageTransformer2DModel
    : public DiffusionTransformerBase<QwenImageTransformer2DModel, QwenImageTransformerConfig,
                                      QwenImageForwardArgs> {
 private:
  friend DiffusionTransformerBase;  // Load constructs it
  explicit QwenImageTransformer2DModel(QwenImageTransformerConfig config);
  absl::Status LoadLayers(const ModuleLoader& loader, comm::Communicator* comm) override;
  absl::Status CheckArgs(const QwenImageForwardArgs& args) const override;
  // img_shapes and the text length, read on the host: the RoPE tables (rope_cache_), which the body
  // reads and a graph keeps alive.
  absl::StatusOr<HostInputs> ReadHostInputs(const QwenImageForwardArgs& args) override;

  // A pass's state between the stages (models/transformer_base.h). The stages read rope_cache_'s
  // tables (ReadHostInputs made them for these arguments).
  struct Pass {
    torch::Tensor h, context, temb;
    torch::Tensor mask;  // (B, 1, 1, T + N) keys, or undefined
    // zero_cond_t: temb has 2B rows (the step's, then timestep 0's) and the image tokens from
    // cond_from on (the input images') take the second's modulation; -1 otherwise.
    int64_t cond_from = -1;
  };
  Pass Prologue(const QwenImageForwardArgs& args) const;
  void HeadBlock(Pass& pass) const;
  void RemainingBlocks(Pass& pass) const;
  torch::Tensor Epilogue(const Pass& pass) const;
  void RunBlocks(size_t begin, size_t end, Pass& pass) const;

  // The RoPE tables of the last (image shapes, text length): a request's steps all ask for the same
  // ones, and building them (on the CPU, as diffusers does, then copied) costs ~3 ms on an H200.
  struct RopeCacheEntry {
    std::vector<ImageShape> shapes;
    int64_t text_len = -1;
    QwenRopeFreqs freqs;
  };
  std::optional<RopeCacheEntry> rope_cache_;

  std::shared_ptr<LinearLayer> img_in_, txt_in_, proj_out_;
  std::optional<DiffusersRmsNorm> txt_norm_;
  std::optional<TimestepEmbedding> timestep_embedder_;
  std::vector<QwenImageBlock> blocks_;
  std::optional<AdaLayerNormContinuous> norm_out_;
};

}  // namespace ditserve::models::qwenimage
