// LoadPipeline: picks the pipeline for a model folder from its model_index.json (or, for a
// transformer folder alone, from its config.json's class).
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "pipeline/component_loading.h"
#include "pipeline/flux1_pipeline.h"
#include "pipeline/flux2_pipeline.h"
#include "pipeline/pipeline.h"
#include "pipeline/qwenimage_pipeline.h"
#include "sharding/checkpoint.h"
#include "sharding/pipeline_index.h"

namespace ditserve::pipeline {
namespace {

template <typename P>
absl::StatusOr<std::unique_ptr<Pipeline>> Upcast(absl::StatusOr<std::unique_ptr<P>> p) {
  if (!p.ok()) return p.status();
  return std::unique_ptr<Pipeline>(std::move(*p));
}

}  // namespace

const char* DtypeName(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kFloat16 ? "float16" : "float32";
}

absl::StatusOr<std::unique_ptr<Pipeline>> LoadPipeline(const PipelineOptions& options,
                                                       comm::Communicator* comm) {
  if (!sharding::IsPipelineRoot(options.model_dir)) {
    // A transformer folder alone: served from precomputed embeddings, latents out.
    ASSIGN_OR_RETURN(nlohmann::json config, sharding::ReadComponentConfig(options.model_dir));
    ASSIGN_OR_RETURN(const std::string cls, ComponentClassName(options.model_dir, config));
    if (cls == "Flux2Transformer2DModel" || cls == "Flux2TransformerModel") {
      return Upcast(
          DiffusionPipeline::Create<Flux2Pipeline>(nullptr, options.model_dir, options, comm));
    }
    if (cls == "QwenImageTransformer2DModel") {
      return Upcast(
          DiffusionPipeline::Create<QwenImagePipeline>(nullptr, options.model_dir, options, comm));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        options.model_dir, ": transformer class '", cls,
        "' is not served from precomputed embeddings (FLUX.2 and Qwen-Image are; FLUX.1 needs its "
        "pipeline folder)"));
  }
  ASSIGN_OR_RETURN(sharding::PipelineIndex index, sharding::ReadPipelineIndex(options.model_dir));
  if (index.class_name == "FluxPipeline" || index.class_name == "FluxKontextPipeline") {
    return Upcast(DiffusionPipeline::Create<Flux1Pipeline>(&index, "", options, comm));
  }
  if (index.class_name == "Flux2Pipeline") {
    return Upcast(DiffusionPipeline::Create<Flux2Pipeline>(&index, "", options, comm));
  }
  if (index.class_name == "QwenImagePipeline" || index.class_name == "QwenImageEditPipeline" ||
      index.class_name == "QwenImageEditPlusPipeline") {
    return Upcast(DiffusionPipeline::Create<QwenImagePipeline>(&index, "", options, comm));
  }
  return absl::UnimplementedError(absl::StrCat(
      options.model_dir, ": pipeline class '", index.class_name,
      "' is not supported (supported: FluxPipeline, FluxKontextPipeline, Flux2Pipeline, "
      "QwenImagePipeline, QwenImageEditPipeline, QwenImageEditPlusPipeline)"));
}

}  // namespace ditserve::pipeline
