// A diffusers pipeline root: model_index.json maps component name -> [library, class] (the diffusers checkpoint layout: pipeline_utils.py, modeling_utils.py).
// Torch-free. Thread-safety: plain values.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve::sharding {

struct PipelineComponent {
  std::string name;        // "transformer", "vae", "text_encoder_2", ...
  std::string library;     // "diffusers", "transformers"
  std::string class_name;  // "FluxTransformer2DModel", ...
};

struct PipelineIndex {
  std::string root;
  std::string class_name;  // "_class_name", e.g. "FluxPipeline"
  // Present components in file order; [null, null] entries (absent optional components) are left out.
  std::vector<PipelineComponent> components;

  const PipelineComponent* Find(absl::string_view name) const;
  // "<root>/<name>", or NOT_FOUND when the index does not list the component.
  absl::StatusOr<std::string> ComponentDir(absl::string_view name) const;
};

// True when "<dir>/model_index.json" exists.
bool IsPipelineRoot(const std::string& dir);

// Parses "<root>/model_index.json"; every error names the file and, where there is one, the entry.
absl::StatusOr<PipelineIndex> ReadPipelineIndex(const std::string& root);

// `path` itself when it is a component folder; "<path>/<component>" when it is a pipeline root.
absl::StatusOr<std::string> ResolveComponentDir(const std::string& path,
                                                absl::string_view component);

}  // namespace ditserve::sharding
