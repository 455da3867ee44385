#include "models/lora/lora_library.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"

namespace ditserve::lora {

void LoraActivation::Clear() {
  for (models::LinearLayer* l : layers_) l->ClearLoraTerms();
  layers_.clear();
  // Back to the untouched bytes; the merged copy is freed with the DataPtr set_data_ptr returns.
  for (Swap& s : swaps_) s.storage.unsafeGetStorageImpl()->set_data_ptr(std::move(s.original));
  swaps_.clear();
}

absl::StatusOr<std::unique_ptr<LoraLibrary>> LoraLibrary::Load(
    const std::vector<LoraAdapterSpec>& specs, const models::LinearRegistry& layers, int rank,
    int world_size, const sharding::LoadOptions& opts, LoraMode mode) {
  auto lib = std::make_unique<LoraLibrary>();
  lib->mode_ = mode;
  for (const LoraAdapterSpec& spec : specs) {
    if (spec.name.empty()) return absl::InvalidArgumentError("a LoRA adapter needs a name");
    if (lib->adapters_.count(spec.name) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("LoRA adapter '", spec.name, "' is named twice"));
    }
    ASSIGN_OR_RETURN(LoraAdapter adapter,
                     LoraAdapter::Load(spec, layers, rank, world_size, opts));
    for (const auto& [module, slices] : adapter.modules()) {
      lib->layers_[module] = layers.Find(module);
      // FP8 weights cannot take W + B·A in place: such a library adds runtime terms.
      if (lib->layers_[module]->is_fp8()) lib->mode_ = LoraMode::kRuntime;
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
  if (mode_ == LoraMode::kMerge) {
    const absl::Status merged = Merge(&activation);
    if (merged.ok()) return activation;
    if (merged.code() != absl::StatusCode::kResourceExhausted) return merged;
    // No room for the merged copy on this rank: the same numbers as runtime terms instead (ranks
    // may differ in this; the adapters add no collective either way).
    ++merge_fallbacks_;
  }
  for (const auto& [module, term] : cached_terms_) {
    models::LinearLayer* layer = layers_.at(module);
    layer->SetLoraTerms({term});
    activation.layers_.push_back(layer);
  }
  return activation;
}

absl::Status LoraLibrary::Merge(LoraActivation* activation) const {
  // The adapted modules by the weight buffer (storage) their weight views: one buffer may hold
  // several (a FusedLinear's stacked q/k/v), and the whole buffer is copied once.
  std::map<c10::StorageImpl*, std::vector<std::string>> by_buffer;
  for (const auto& [module, term] : cached_terms_) {
    by_buffer[layers_.at(module)->weight().storage().unsafeGetStorageImpl()].push_back(module);
  }
  if (merge_max_bytes_ > 0) {
    uint64_t bytes = 0;
    for (const auto& [impl, modules] : by_buffer) bytes += impl->nbytes();
    if (bytes > merge_max_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "merging LoRA adapters needs ", bytes, " bytes of copies, over the limit of ",
          merge_max_bytes_));
    }
  }
  std::vector<std::pair<c10::Storage, torch::Tensor>> merged;  // buffer, its merged copy
  RETURN_IF_ERROR(GuardTorchStatus("merging LoRA adapters", [&] {
    torch::NoGradGuard no_grad;
    for (const auto& [impl, modules] : by_buffer) {
      const torch::Tensor& w0 = layers_.at(modules.front())->weight();
      const int64_t numel = static_cast<int64_t>(w0.storage().nbytes()) / w0.element_size();
      torch::Tensor whole = torch::empty({0}, w0.options()).set_(w0.storage(), 0, {numel}, {1});
      torch::Tensor copy = whole.clone();
      for (const std::string& m : modules) {
        const torch::Tensor& w = layers_.at(m)->weight();
        const models::LoraTerm& t = cached_terms_.at(m);
        copy.as_strided(w.sizes(), w.strides(), w.storage_offset()).addmm_(t.b, t.a);
      }
      merged.emplace_back(w0.storage(), std::move(copy));
    }
  }));
  // Only pointer swaps from here: nothing can fail half way.
  for (auto& [storage, copy] : merged) {
    at::DataPtr bytes = copy.storage().unsafeGetStorageImpl()->set_data_ptr(at::DataPtr());
    at::DataPtr original = storage.unsafeGetStorageImpl()->set_data_ptr(std::move(bytes));
    activation->swaps_.push_back({storage, std::move(original)});
  }
  return absl::OkStatus();
}

}  // namespace ditserve::lora
