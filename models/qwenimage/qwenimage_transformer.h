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
#include "models/common/ada_layer_norm.h"
#include "models/common/diffusers_rms_norm.h"
#include "models/common/linear_layer.h"
#include "models/common/timestep_embedding.h"
#include "models/qwenimage/qwenimage_block.h"
#include "models/qwenimage/qwenimage_config.h"
#include "models/common/step_graphs.h"
#include "models/transformer.h"
#include "sharding/state_dict.h"
#include "comm/communicator.h"

namespace ditserve::models::qwenimage {

struct QwenImageForwardArgs {
  torch::Tensor hidden_states;               // (B, N, in_channels)
  torch::Tensor encoder_hidden_states;       // (B, T, joint_attention_dim)
  torch::Tensor encoder_hidden_states_mask;  // optional (B, T)
  torch::Tensor timestep;                    // (B,) σ
  torch::Tensor img_shapes;                  // optional, see above
};

class QwenImageTransformer2DModel : public DiffusionTransformer {
 public:
  static absl::StatusOr<std::unique_ptr<QwenImageTransformer2DModel>> Load(
      const QwenImageTransformerConfig& config, const sharding::ShardedStateDict& sd,
      comm::Communicator* comm, const TransformerLoadOptions& options = {});

  absl::StatusOr<torch::Tensor> Forward(const QwenImageForwardArgs& args);

  std::string class_name() const override { return "QwenImageTransformer2DModel"; }
  std::vector<std::string> RequiredArguments() const override;
  std::vector<std::string> OptionalArguments() const override;
  torch::ScalarType dtype() const override { return dtype_; }
  torch::Device device() const override { return device_; }
  StepGraphStats graph_stats() const override { return graphs_->stats(); }
  const LinearRegistry& linear_layers() const override { return linears_; }
  absl::StatusOr<torch::Tensor> Forward(const std::map<std::string, torch::Tensor>& args) override;

  const QwenImageTransformerConfig& config() const { return config_; }
  int64_t local_heads() const { return local_heads_; }

 private:
  explicit QwenImageTransformer2DModel(QwenImageTransformerConfig config)
      : config_(std::move(config)) {}
  absl::Status CheckArgs(const QwenImageForwardArgs& args) const;
  torch::Tensor ForwardImpl(const QwenImageForwardArgs& args, const QwenRopeFreqs& rope) const;

  // The RoPE tables of the last (image shapes, text length): a request's steps all ask for the same
  // ones, and building them (on the CPU, as diffusers does, then copied) costs ~3 ms on an H200.
  struct RopeCacheEntry {
    std::vector<ImageShape> shapes;
    int64_t text_len = -1;
    QwenRopeFreqs freqs;
  };
  std::optional<RopeCacheEntry> rope_cache_;

  QwenImageTransformerConfig config_;
  LinearRegistry linears_;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Device device_ = torch::kCPU;
  int64_t local_heads_ = 0;
  std::shared_ptr<LinearLayer> img_in_, txt_in_, proj_out_;
  std::optional<DiffusersRmsNorm> txt_norm_;
  std::optional<TimestepEmbedding> timestep_embedder_;
  std::vector<QwenImageBlock> blocks_;
  std::optional<AdaLayerNormContinuous> norm_out_;
  std::unique_ptr<StepGraphs> graphs_;
};


}  // namespace ditserve::models::qwenimage
