#include "models/lora/lora_library.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"

namespace ditserve::lora {

absl::StatusOr<std::unique_ptr<LoraLibrary>> LoraLibrary::Load(
    const std::vector<LoraAdapterSpec>& specs, const models::LinearRegistry& layers, int rank,
    int world_size, const sharding::LoadOptions& opts) {
  auto lib = std::make_unique<LoraLibrary>();
  for (const LoraAdapterSpec& spec : specs) {
    if (spec.name.empty()) return absl::InvalidArgumentError("a LoRA adapter needs a name");
    if (lib->adapters_.count(spec.name) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA adapter '", spec.name, "' is named twice"));
    }
    ASSIGN_OR_RETURN(LoraAdapter adapter,
                     LoraAdapter::Load(spec, layers, rank, world_size, opts));
    for (const auto& [module, slices] : adapter.modules()) {
      lib->layers_[module] = layers.Find(module);
    }
    lib->cards_.push_back({adapter.name(), LoraFormatName(adapter.format()), adapter.max_rank(),
                           static_cast<int64_t>(adapter.modules().size()), adapter.bytes()});
    lib->adapters_.emplace(spec.name, std::move(adapter));
  }
  return lib;
}

absl::StatusOr<LoraActivation> LoraLibrary::Activate(const std::vector<LoraChoice>& choices) {
  LoraActivation activation;
  if (choices.empty()) return activation;
  std::set<std::string> seen;
  for (const LoraChoice& c : choices) {
    if (adapters_.count(c.name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("loras: no adapter named '", c.name, "'"));
    }
    if (!seen.insert(c.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("loras: adapter '", c.name, "' chosen twice"));
    }
    if (!std::isfinite(c.scale) || std::fabs(c.scale) > kMaxLoraScale) {
      return absl::InvalidArgumentError(absl::StrCat("loras: scale of '", c.name, "' is ", c.scale,
                                                     "; it must be within ±", kMaxLoraScale));
    }
  }
  if (choices != cached_choices_) {
    cached_choices_.clear();
    cached_terms_.clear();
    std::map<std::string, models::LoraTerm> terms;
    RETURN_IF_ERROR(GuardTorchStatus("building LoRA terms", [&] {
      torch::NoGradGuard no_grad;
      std::map<std::string, std::vector<torch::Tensor>> as, bs;
      for (const LoraChoice& c : choices) {
        for (const auto& [module, s] : adapters_.at(c.name).modules()) {
          as[module].push_back(s.a);
          bs[module].push_back(s.b * (s.scale * static_cast<double>(c.scale)));
        }
      }
      for (auto& [module, a] : as) {
        auto& b = bs[module];
        terms[module] = a.size() == 1 ? models::LoraTerm{a[0], b[0]}
                                      : models::LoraTerm{torch::cat(a, 0), torch::cat(b, 1)};
      }
    }));
    cached_terms_ = std::move(terms);
    cached_choices_ = choices;
  }
  for (const auto& [module, term] : cached_terms_) {
    models::LinearLayer* layer = layers_.at(module);
    layer->SetLoraTerms({term});
    activation.layers_.push_back(layer);
  }
  return activation;
}

}  // namespace ditserve::lora
