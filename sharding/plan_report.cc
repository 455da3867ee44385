#include "sharding/plan_report.h"

#include "common/status_macros.h"
#include "sharding/plan_resolver.h"
#include "sharding/slicing.h"

namespace ditserve::sharding {

bool IsFloatingDType(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<nlohmann::ordered_json> DescribeShardPlan(
    const ComponentCheckpoint& ckpt, const TpPlan* plan, int tp_degree,
    std::optional<DType> float_dtype, const std::function<bool(const std::string&)>& select) {
  ASSIGN_OR_RETURN(ResolvedPlan resolved, ResolveTpPlan(plan, ckpt, tp_degree));
  const int n = resolved.tp_degree;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  std::vector<uint64_t> rank_bytes(n, 0);
  uint64_t sharded = 0, replicated = 0, full = 0;
  for (const PlannedTensor& t : resolved.tensors) {
    if (select && !select(t.name)) continue;
    const DType out_dtype = float_dtype && IsFloatingDType(t.dtype) ? *float_dtype : t.dtype;
    const uint64_t esize = DTypeSize(out_dtype);
    nlohmann::ordered_json shapes = nlohmann::ordered_json::array();
    nlohmann::ordered_json bytes = nlohmann::ordered_json::array();
    for (int r = 0; r < n; ++r) {
      RankSlice slice = SliceForRank(t, r, n);
      const uint64_t b = slice.numel() * esize;
      shapes.push_back(slice.local_shape);
      bytes.push_back(b);
      rank_bytes[r] += b;
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    full += numel * esize;
    (t.split_dim >= 0 ? sharded : replicated) += numel * esize;
    nlohmann::ordered_json entry = {
        {"name", t.name},
        {"dtype", std::string(DTypeName(t.dtype))},
        {"style", std::string(TpStyleName(t.split_dim >= 0 || t.module.empty()
                                              ? t.style
                                              : TpStyle::kReplicated))},
        {"module", t.module},
        {"module_style", std::string(TpStyleName(t.style))},
        {"split_dim", t.split_dim},
        {"global_shape", t.shape},
        {"rank_shapes", shapes},
        {"bytes_per_rank", bytes},
    };
    if (t.split_dim >= 0 && t.blocks.size() > 1) entry["blocks"] = t.blocks;
    tensors.push_back(std::move(entry));
  }
  nlohmann::ordered_json out = {
      {"model_dir", ckpt.dir()},
      {"class_name", ckpt.class_name()},
      {"tp_degree", n},
      {"valid", true},
      {"dtype", float_dtype ? std::string(DTypeName(*float_dtype)) : std::string("stored")},
      {"planned_modules", resolved.modules.size()},
      {"tensors", tensors},
      {"total_bytes", full},
      {"sharded_bytes", sharded},
      {"replicated_bytes", replicated},
      {"total_bytes_per_rank", rank_bytes},
  };
  if (plan != nullptr) out["plan"] = TpPlanToJson(*plan);
  return out;
}

}  // namespace ditserve::sharding
