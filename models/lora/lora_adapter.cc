#include "models/lora/lora_adapter.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_json.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/lora/lora_files.h"
#include "sharding/safetensors.h"
#include "sharding/torch_tensor.h"

namespace ditserve::lora {
namespace {

namespace fs = std::filesystem;

// The rows `ranges` (in a target's own row space) through `segments` (the target's rows in the
// stored tensor, concatenated): the stored rows, in order.
std::vector<std::pair<int64_t, int64_t>> MapThrough(
    const std::vector<RowRange>& segments, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& [begin, end] : ranges) {
    int64_t seg_start = 0;  // target-space index of the segment's first row
    for (const RowRange& s : segments) {
      const int64_t len = s.end - s.begin;
      const int64_t lo = std::max(begin, seg_start), hi = std::min(end, seg_start + len);
      if (lo < hi) out.emplace_back(s.begin + (lo - seg_start), s.begin + (hi - seg_start));
      seg_start += len;
    }
  }
  return out;
}

sharding::RankSlice SliceAlong(int dim, std::vector<std::pair<int64_t, int64_t>> ranges,
                               const std::vector<int64_t>& shape) {
  sharding::RankSlice s;
  s.dim = dim;
  s.local_shape = shape;
  int64_t n = 0;
  for (const auto& [b, e] : ranges) n += e - b;
  s.local_shape[dim] = n;
  s.ranges = std::move(ranges);
  return s;
}

// The adapter config beside a PEFT file, or in the safetensors metadata (diffusers).
absl::StatusOr<std::optional<nlohmann::json>> AdapterConfig(const sharding::SafetensorsFile& file) {
  const fs::path beside = fs::path(file.path()).parent_path() / "adapter_config.json";
  std::error_code ec;
  if (fs::is_regular_file(beside, ec)) {
    ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonObjectFile(beside.string()));
    return std::optional<nlohmann::json>(std::move(j));
  }
  auto it = file.metadata().find("lora_adapter_metadata");
  if (it == file.metadata().end()) return std::optional<nlohmann::json>();
  auto j = ParseJsonObject(it->second);
  if (!j.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.path(), ": metadata 'lora_adapter_metadata': ", j.status().message()));
  }
  return std::optional<nlohmann::json>(*std::move(j));
}

}  // namespace

LayerGeometry GeometryOf(const models::LinearLayer& layer, int rank, int world) {
  const sharding::TpStyle style = layer.style();
  // The weight's sliced dim: 0 (rows) for colwise styles, 1 (columns) for rowwise ones.
  const int dim = sharding::IsColwise(style) ? 0 : sharding::IsRowwise(style) ? 1 : -1;
  const int64_t out = layer.weight().size(0), in = layer.weight().size(1);
  LayerGeometry g;
  g.out_features = dim == 0 ? out * world : out;
  g.in_features = dim == 1 ? in * world : in;
  g.local_rows = {{0, out}};
  g.local_cols = {{0, in}};
  if (dim < 0) return g;
  // This rank's ranges of the global rows / columns, by the loader's own slice arithmetic.
  sharding::PlannedTensor global;
  global.shape = {g.out_features, g.in_features};
  global.split_dim = dim;
  std::vector<int64_t> local = layer.local_blocks();
  if (local.empty()) local = {dim == 0 ? out : in};
  for (int64_t b : local) global.blocks.push_back(b * world);
  (dim == 0 ? g.local_rows : g.local_cols) = sharding::SliceForRank(global, rank, world).ranges;
  return g;
}

absl::StatusOr<LoraAdapter> LoraAdapter::Load(const LoraAdapterSpec& spec,
                                              const models::LinearRegistry& layers, int rank,
                                              int world_size, const sharding::LoadOptions& opts) {
  auto in_adapter = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("LoRA adapter '", spec.name, "': ", s.message()));
  };
  auto file_or = ResolveLoraFile(spec.path);
  if (!file_or.ok()) return in_adapter(file_or.status());
  auto opened = sharding::SafetensorsFile::Open(*file_or);
  if (!opened.ok()) return in_adapter(opened.status());
  const sharding::SafetensorsFile& file = **opened;

  std::vector<sharding::TensorMeta> metas;
  std::map<std::string, double> alphas;
  std::map<std::string, const sharding::TensorInfo*> infos;
  for (const sharding::TensorInfo& t : file.tensors()) {
    metas.push_back({t.name, t.dtype, t.shape});
    infos[t.name] = &t;
    if (IsAlphaKey(t.name)) {
      if (t.numel() != 1) {
        return in_adapter(absl::InvalidArgumentError(absl::StrCat(
            file.path(), ": LoRA key '", t.name, "': an alpha must be one number, got shape ",
            absl::StrJoin(t.shape, "x"))));
      }
      auto value = sharding::ReadWholeTensor(file, t);
      if (!value.ok()) return in_adapter(value.status());
      alphas[t.name] = value->to(torch::kFloat64).item<double>();
    }
  }
  auto config = AdapterConfig(file);
  if (!config.ok()) return in_adapter(config.status());
  auto layout = MapLoraLayout(metas, alphas, config->has_value() ? &**config : nullptr, file.path());
  if (!layout.ok()) return in_adapter(layout.status());

  // Check every target against the model before reading a byte.
  std::vector<LayerGeometry> geometry;  // one per target, in order
  for (const LoraTargetSource& t : layout->targets) {
    const models::LinearLayer* layer = layers.Find(t.module);
    if (layer == nullptr) {
      return in_adapter(absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": targets module '", t.module, "', which the model does not have (",
          t.a_key, ")")));
    }
    const LayerGeometry& g = geometry.emplace_back(GeometryOf(*layer, rank, world_size));
    if (g.in_features != t.in_features || g.out_features != t.out_features) {
      return in_adapter(absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": module '", t.module, "' is ", g.out_features, "x", g.in_features,
          " (out x in) but its LoRA factors give ", t.out_features, "x", t.in_features, " (", t.a_key,
          ", ", t.b_key, ")")));
    }
    for (const std::string* key : {&t.a_key, &t.b_key}) {
      auto type = sharding::TorchDType(infos.at(*key)->dtype);
      if (!type.ok() || !torch::isFloatingType(*type)) {
        return in_adapter(absl::InvalidArgumentError(absl::StrCat(
            file.path(), ": LoRA key '", *key, "': factors must be floating point, got ",
            sharding::DTypeName(infos.at(*key)->dtype))));
      }
    }
  }

  LoraAdapter adapter;
  adapter.name_ = spec.name;
  adapter.file_ = file.path();
  adapter.format_ = layout->format;
  adapter.max_rank_ = layout->max_rank;
  for (size_t i = 0; i < layout->targets.size(); ++i) {
    const LoraTargetSource& t = layout->targets[i];
    const LayerGeometry& g = geometry[i];
    const sharding::TensorInfo& a_info = *infos.at(t.a_key);
    const sharding::TensorInfo& b_info = *infos.at(t.b_key);
    auto a = sharding::ReadTensorSlice(file, a_info, SliceAlong(1, g.local_cols, a_info.shape), opts);
    if (!a.ok()) return in_adapter(a.status());
    auto b = sharding::ReadTensorSlice(
        file, b_info, SliceAlong(0, MapThrough(t.b_rows, g.local_rows), b_info.shape), opts);
    if (!b.ok()) return in_adapter(b.status());
    adapter.bytes_ += static_cast<uint64_t>(a->numel() * a->element_size() + b->numel() * b->element_size());
    adapter.modules_.emplace(t.module, LoraModuleSlices{*std::move(a), *std::move(b), t.scale});
  }
  return adapter;
}

}  // namespace ditserve::lora
