#include "models/tp/parallel_module_loader.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "models/common/linear.h"
#include "models/tp/column_parallel_linear.h"
#include "models/tp/row_parallel_linear.h"

namespace ditserve::models::tp {

absl::StatusOr<std::unique_ptr<LinearLayer>> ParallelModuleLoader::LoadLinear(
    const std::string& path) const {
  ASSIGN_OR_RETURN(std::unique_ptr<LinearLayer> layer, Build(path));
  if (weights_ == WeightFormat::kFp8 && IsFp8BlockLinear(path)) {
    const std::string what = absl::StrCat("quantizing ", path, " to FP8");
    RETURN_IF_ERROR(GuardTorchStatus(what.c_str(), [&] { layer->QuantizeToFp8(); }));
  }
  if (registry_ != nullptr) registry_->Add(path, layer.get());
  return layer;
}

absl::StatusOr<std::unique_ptr<LinearLayer>> ParallelModuleLoader::Build(
    const std::string& path) const {
  const auto style = sd_.ShardingOf(path).style;
  if (sharding::IsColwise(style)) {
    ASSIGN_OR_RETURN(auto layer, ColumnParallelLinear::Load(sd_, path));
    return std::unique_ptr<LinearLayer>(std::move(layer));
  }
  if (sharding::IsRowwise(style)) {
    ASSIGN_OR_RETURN(auto layer, RowParallelLinear::Load(sd_, path, comm_));
    return std::unique_ptr<LinearLayer>(std::move(layer));
  }
  ASSIGN_OR_RETURN(auto layer, Linear::Load(sd_, path));
  return std::unique_ptr<LinearLayer>(std::move(layer));
}

}  // namespace ditserve::models::tp
