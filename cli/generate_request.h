// The options of `ditserve-cli generate` and their translation into a GenerateRequest. Scalars left
// at 0 / empty mean "model default" (the API's convention); --seed, --guidance and
// --cache-threshold are sent only when given on the command line, because those fields are
// `optional` in the API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/channel.h"
#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::cli {

struct GenerateOptions {
  ConnectionFlags connection;  // --timeout defaults to 600 s
  std::string prompt;
  std::string prompt_2;
  std::string negative_prompt;
  std::string negative_prompt_2;
  uint64_t steps = 0;
  uint64_t seed = 0;
  bool seed_set = false;  // from FlagParser::WasSet("seed")
  uint64_t height = 0;
  uint64_t width = 0;
  double guidance = 0;
  bool guidance_set = false;  // from FlagParser::WasSet("guidance")
  double true_cfg_scale = 0;
  uint64_t max_sequence_length = 0;
  std::string format = "png";       // png | raw | latents
  std::string embeddings;           // safetensors file, see embeddings.h
  std::string negative_embeddings;  // same layout, for true CFG
  std::string request_id;
  std::vector<std::string> loras;   // --lora NAME[:SCALE], repeatable; no SCALE: the API's 1.0
  std::vector<std::string> images;  // --image FILE, repeatable: GenerateRequest.images in order
  double strength = 0;              // --strength (image to image); 0: the model's default
  // --cache-threshold T: GenerateRequest.cache_threshold (the step cache; 0 = off); not given: the
  // server's default.
  double cache_threshold = 0;
  bool cache_threshold_set = false;  // from FlagParser::WasSet("cache-threshold")
  uint64_t previews = 0;  // --previews N: GenerateRequest.preview_images (the streaming call)
  // --preview-prefix P: preview k is written to P<k>.png; empty: the output file's name without
  // its extension + ".preview-" (none for -o -).
  std::string preview_prefix;
  std::string output;  // file to write, "-" = stdout
  bool quiet = false;
  bool unary = false;  // use Generate instead of GenerateStream (no progress)
};

// "png" -> OUTPUT_FORMAT_PNG, "raw" -> OUTPUT_FORMAT_RAW_F32, "latents" -> OUTPUT_FORMAT_LATENTS.
absl::StatusOr<ditserve::v1::OutputFormat> ParseOutputFormat(const std::string& name);
// Inverse of ParseOutputFormat; UNSPECIFIED is "png" (the API's default).
std::string OutputFormatName(ditserve::v1::OutputFormat format);

// "NAME" or "NAME:SCALE" (SCALE a finite number) -> a LoraChoice, scale set only when given.
// INVALID_ARGUMENT naming --lora otherwise. Which names exist and the scale range are the server's.
absl::StatusOr<ditserve::v1::LoraChoice> ParseLoraChoice(const std::string& value);

// Validates the options that can be checked locally (ranges of the uint32 fields, format, output,
// --lora syntax, --strength and --cache-threshold finite) and reads the embeddings files and the
// --image files (their bytes as they are: the server sniffs the format and decodes).
// INVALID_ARGUMENT naming the flag otherwise (a missing or unreadable --image file included),
// before any call to the server.
absl::StatusOr<ditserve::v1::GenerateRequest> BuildGenerateRequest(const GenerateOptions& options);

}  // namespace ditserve::cli
