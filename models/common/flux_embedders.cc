#include "models/common/flux_embedders.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/common/model_checks.h"

namespace ditserve::models {
namespace {

absl::StatusOr<std::shared_ptr<LinearLayer>> FullWidth(const ModuleLoader& loader,
                                                       const std::string& path, int64_t in,
                                                       int64_t out) {
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> layer, loader.LoadLinear(path));
  RETURN_IF_ERROR(CheckLinearWidths(*layer, path, in, out));
  return layer;
}

absl::StatusOr<TimestepEmbedding> TimeEmbedder(const ModuleLoader& loader,
                                               const std::string& prefix, int64_t features) {
  ASSIGN_OR_RETURN(TimestepEmbedding e, TimestepEmbedding::Load(loader, prefix));
  if (e.in_features() != features) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, ".linear_1 takes ", e.in_features(),
                                                   " features; the model's time projection has ",
                                                   features));
  }
  return e;
}

}  // namespace

absl::StatusOr<FluxEmbedders> FluxEmbedders::Load(const ModuleLoader& loader,
                                                  const FluxEmbedderShape& shape) {
  FluxEmbedders e;
  ASSIGN_OR_RETURN(e.x_embedder,
                   FullWidth(loader, "x_embedder", shape.in_channels, shape.inner_dim));
  ASSIGN_OR_RETURN(e.context_embedder, FullWidth(loader, "context_embedder",
                                                 shape.joint_attention_dim, shape.inner_dim));
  ASSIGN_OR_RETURN(e.timestep, TimeEmbedder(loader, shape.time_prefix + ".timestep_embedder",
                                            shape.time_features));
  if (shape.guidance_embeds) {
    ASSIGN_OR_RETURN(e.guidance, TimeEmbedder(loader, shape.time_prefix + ".guidance_embedder",
                                              shape.time_features));
  }
  return e;
}

}  // namespace ditserve::models
