// Reads precomputed prompt embeddings from a safetensors file into the request message. The file
// holds `prompt_embeds` (required), and optionally `pooled_prompt_embeds` and `text_mask`; any other
// tensor name is an error (it is most likely a misspelling). Tensors stored as F16, BF16, F64 or an
// integer/bool type are converted to float32, because requests accept FLOAT32 only. Shapes are sent
// as stored; the server checks them against the model (GetModelInfo.inputs).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::cli {

absl::StatusOr<ditserve::v1::PromptEmbeddings> LoadPromptEmbeddings(const std::string& path);

}  // namespace ditserve::cli
