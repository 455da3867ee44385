#include "models/text/causal_lm_encoder.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/common/model_checks.h"
#include "models/text/causal_lm_inputs.h"
#include "models/text/input_ids.h"
#include "models/text/llm_rope.h"
#include "models/tp/parallel_module_loader.h"
#include "sharding/tp_plan.h"

namespace ditserve::text {

absl::StatusOr<std::unique_ptr<CausalLmTextEncoder>> CausalLmTextEncoder::Load(
    const CausalLmConfig& config, const sharding::ShardedStateDict& sd, comm::Communicator* comm,
    LlmAttentionImplementation implementation) {
  if (comm == nullptr || comm->world_size() != sd.world_size() || comm->rank() != sd.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.class_name, ": the communicator does not match the state dict's rank ", sd.rank(),
        " of ", sd.world_size()));
  }
  std::unique_ptr<CausalLmTextEncoder> m(new CausalLmTextEncoder(config));
  ASSIGN_OR_RETURN(m->prefix_, sharding::DetectTextModelPrefix(config.class_name, [&](const std::string& n) {
                     return sd.Contains(n);
                   }));
  models::tp::ParallelModuleLoader loader(sd, comm);
  ASSIGN_OR_RETURN(m->embed_tokens_, sd.GetWithShape(m->prefix_ + "embed_tokens.weight",
                                                     {config.vocab_size, config.hidden_size}));
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    ASSIGN_OR_RETURN(auto layer,
                     CausalLmDecoderLayer::Load(loader, absl::StrCat(m->prefix_, "layers.", i),
                                                config, sd.world_size(), implementation));
    m->layers_.push_back(std::move(layer));
  }
  if (sd.Contains(absl::StrCat(m->prefix_, "layers.", config.num_hidden_layers,
                               ".input_layernorm.weight"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint has more decoder layers than num_hidden_layers (", config.num_hidden_layers,
        ")"));
  }
  ASSIGN_OR_RETURN(m->norm_, models::DiffusersRmsNorm::Load(loader, m->prefix_ + "norm",
                                                           config.rms_norm_eps));
  if (m->norm_->dim() != config.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(m->prefix_, "norm.weight has ", m->norm_->dim(),
                                                   " entries, hidden_size is ", config.hidden_size));
  }
  return m;
}

int64_t CausalLmTextEncoder::local_heads() const {
  return layers_.empty() ? 0 : layers_.front().attention().local_heads();
}

int64_t CausalLmTextEncoder::local_kv_heads() const {
  return layers_.empty() ? 0 : layers_.front().attention().local_kv_heads();
}

absl::Status CausalLmTextEncoder::CheckInputs(const torch::Tensor& input_ids,
                                              const torch::Tensor& attention_mask,
                                              const std::vector<int64_t>& indices,
                                              std::vector<int64_t>* normalized) const {
  RETURN_IF_ERROR(ValidateInputIds(input_ids, config_.vocab_size, /*max_len=*/0,
                                   config_.class_name.c_str()));
  if (attention_mask.defined()) {
    if (attention_mask.sizes() != input_ids.sizes() ||
        !(attention_mask.scalar_type() == torch::kBool ||
          c10::isIntegralType(attention_mask.scalar_type(), /*includeBool=*/false))) {
      return absl::InvalidArgumentError(absl::StrCat(
          config_.class_name, ": attention_mask has shape ", models::ShapeString(attention_mask),
          ", expected an integer (B, T) = ", models::ShapeString(input_ids), " like input_ids"));
    }
    const auto m = attention_mask.to(torch::kCPU, torch::kLong);
    if (!m.eq(0).logical_or(m.eq(1)).all().item<bool>()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_.class_name, ": attention_mask must hold only 0 and 1"));
    }
  }
  const int64_t n = num_hidden_states();
  normalized->clear();
  for (int64_t k : indices) {
    const int64_t i = k < 0 ? k + n : k;
    if (i < 0 || i >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          config_.class_name, ": hidden state index ", k, " is out of range: the model has ", n,
          " hidden states (embeddings + ", config_.num_hidden_layers, " layers), valid indices ",
          -n, " .. ", n - 1));
    }
    normalized->push_back(i);
  }
  return absl::OkStatus();
}

absl::Status CausalLmTextEncoder::CheckMultimodal(const torch::Tensor& input_ids,
                                                  const LlmMultimodalInputs& multimodal) const {
  if (!config_.uses_mrope() || config_.image_token_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_.class_name, ": image embeddings are only supported for Qwen2.5-VL's M-RoPE model"));
  }
  const auto& embeds = multimodal.image_embeds;
  if (!embeds.defined() || embeds.dim() != 2 || embeds.size(1) != config_.hidden_size ||
      !embeds.is_floating_point()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_.class_name, ": image_embeds has shape ",
                     embeds.defined() ? models::ShapeString(embeds) : std::string("none"),
                     ", expected a floating (N, hidden_size = ", config_.hidden_size, ") tensor"));
  }
  const int64_t tokens = input_ids.eq(config_.image_token_id).sum().item<int64_t>();
  if (tokens != embeds.size(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_.class_name, ": input_ids hold ", tokens, " image tokens (id ",
                     config_.image_token_id, ") but image_embeds has ", embeds.size(0), " rows"));
  }
  const auto& pos = multimodal.position_ids;
  if (!pos.defined() || pos.dim() != 3 || pos.size(0) != 3 || pos.size(1) != input_ids.size(0) ||
      pos.size(2) != input_ids.size(1) ||
      !c10::isIntegralType(pos.scalar_type(), /*includeBool=*/false)) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_.class_name, ": position_ids has shape ",
        pos.defined() ? models::ShapeString(pos) : std::string("none"),
        ", expected an integer (3, B, T) tensor with (B, T) = ", models::ShapeString(input_ids)));
  }
  return absl::OkStatus();
}

std::vector<torch::Tensor> CausalLmTextEncoder::ForwardImpl(
    const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
    const std::vector<int64_t>& indices, const LlmMultimodalInputs* multimodal) const {
  torch::NoGradGuard no_grad;
  const auto dev = device();
  const auto ids = input_ids.to(dev, torch::kLong);
  const int64_t b = ids.size(0), t = ids.size(1);
  const int64_t last = config_.num_hidden_layers;
  const int64_t deepest = indices.empty() ? 0 : *std::max_element(indices.begin(), indices.end());

  std::map<int64_t, torch::Tensor> wanted;
  for (int64_t k : indices) wanted[k] = torch::Tensor();

  auto x = torch::embedding(embed_tokens_, ids);
  if (multimodal != nullptr && multimodal->image_embeds.size(0) > 0) {
    // inputs_embeds.masked_scatter(special_image_mask, image_embeds.to(device, dtype))
    const auto image_mask = ids.eq(config_.image_token_id).unsqueeze(-1).expand_as(x);
    x = x.masked_scatter(image_mask, multimodal->image_embeds.to(dev, dtype()));
  }
  if (wanted.count(0)) wanted[0] = x;
  if (deepest > 0) {
    const torch::Tensor mask2d = attention_mask.defined() ? attention_mask.to(dev) : torch::Tensor();
    const auto positions = multimodal != nullptr ? multimodal->position_ids.to(dev, torch::kLong)
                                                 : CausalLmPositionIds(config_, mask2d, b, t, dev);
    const LlmRope rope =
        LlmRopeTables(positions, config_.head_dim, config_.rope_theta, config_.mrope_section, dtype());
    const LlmAttendMask mask =
        PrepareAttendMask(CausalLmAttendMask(mask2d, b, t, config_.sliding_window, dev));
    for (int64_t i = 1; i <= deepest; ++i) {
      x = layers_[static_cast<size_t>(i - 1)].Forward(x, rope, mask);
      if (i == last) {
        wanted[i] = norm_->Forward(x);
      } else if (wanted.count(i)) {
        wanted[i] = x;
      }
    }
  }
  std::vector<torch::Tensor> out;
  out.reserve(indices.size());
  for (int64_t k : indices) out.push_back(wanted.at(k));
  return out;
}

absl::StatusOr<std::vector<torch::Tensor>> CausalLmTextEncoder::Forward(
    const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
    const std::vector<int64_t>& hidden_state_indices) {
  std::vector<int64_t> indices;
  RETURN_IF_ERROR(CheckInputs(input_ids, attention_mask, hidden_state_indices, &indices));
  const std::string what = absl::StrCat(config_.class_name, " text encoder forward");
  return GuardTorch(what.c_str(),
                    [&] { return ForwardImpl(input_ids, attention_mask, indices, nullptr); });
}

absl::StatusOr<std::vector<torch::Tensor>> CausalLmTextEncoder::Forward(
    const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
    const std::vector<int64_t>& hidden_state_indices, const LlmMultimodalInputs& multimodal) {
  std::vector<int64_t> indices;
  RETURN_IF_ERROR(CheckInputs(input_ids, attention_mask, hidden_state_indices, &indices));
  const std::string what = absl::StrCat(config_.class_name, " text encoder forward");
  return GuardTorch(what.c_str(), [&]() -> absl::StatusOr<std::vector<torch::Tensor>> {
    RETURN_IF_ERROR(CheckMultimodal(input_ids, multimodal));
    return ForwardImpl(input_ids, attention_mask, indices, &multimodal);
  });
}

}  // namespace ditserve::text
