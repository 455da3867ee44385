// LoadPipeline: picks the pipeline for a model folder from its model_index.json.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pipeline/flux1_pipeline.h"
#include "pipeline/pipeline.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {

absl::StatusOr<std::unique_ptr<Pipeline>> LoadPipeline(const PipelineOptions& options,
                                                       comm::Communicator* comm) {
  if (!sharding::IsPipelineRoot(options.model_dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.model_dir, ": not a diffusers pipeline folder (no model_index.json)"));
  }
  ASSIGN_OR_RETURN(sharding::PipelineIndex index, sharding::ReadPipelineIndex(options.model_dir));
  if (index.class_name == "FluxPipeline") {
    ASSIGN_OR_RETURN(auto p, Flux1Pipeline::Load(index, options, comm));
    return std::unique_ptr<Pipeline>(std::move(p));
  }
  return absl::UnimplementedError(absl::StrCat(options.model_dir, ": pipeline class '",
                                               index.class_name,
                                               "' is not supported (supported: FluxPipeline)"));
}

}  // namespace ditserve::pipeline
