// LoadPipeline: picks the pipeline for a model folder from its model_index.json.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include <filesystem>

#include "pipeline/embeddings_pipeline.h"
#include "pipeline/flux1_pipeline.h"
#include "pipeline/pipeline.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

std::string ModelNameFromDir(const std::string& model_dir) {
  std::filesystem::path dir = std::filesystem::path(model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  return dir.filename().string();
}

absl::StatusOr<std::unique_ptr<Pipeline>> LoadPipeline(const PipelineOptions& options,
                                                       comm::Communicator* comm) {
  const std::string name = ModelNameFromDir(options.model_dir);
  if (!sharding::IsPipelineRoot(options.model_dir)) {
    // A transformer folder alone: served from precomputed embeddings.
    auto p = EmbeddingsPipeline::Load(name, options.model_dir, "", options, comm);
    if (!p.ok()) return p.status();
    return std::unique_ptr<Pipeline>(std::move(*p));
  }
  ASSIGN_OR_RETURN(sharding::PipelineIndex index, sharding::ReadPipelineIndex(options.model_dir));
  if (index.class_name == "FluxPipeline") {
    ASSIGN_OR_RETURN(auto p, Flux1Pipeline::Load(index, options, comm));
    return std::unique_ptr<Pipeline>(std::move(p));
  }
  if (index.class_name == "Flux2Pipeline" || index.class_name == "QwenImagePipeline") {
    ASSIGN_OR_RETURN(std::string transformer_dir, index.ComponentDir("transformer"));
    auto scheduler_dir = index.ComponentDir("scheduler");
    ASSIGN_OR_RETURN(auto p, EmbeddingsPipeline::Load(name, transformer_dir,
                                                      scheduler_dir.ok() ? *scheduler_dir : "",
                                                      options, comm));
    return std::unique_ptr<Pipeline>(std::move(p));
  }
  return absl::UnimplementedError(absl::StrCat(
      options.model_dir, ": pipeline class '", index.class_name,
      "' is not supported (supported: FluxPipeline, Flux2Pipeline, QwenImagePipeline)"));
}

}  // namespace ditserve::pipeline
