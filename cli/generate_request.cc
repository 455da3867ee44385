#include "cli/generate_request.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/embeddings.h"
#include "common/status_macros.h"

namespace ditserve::cli {
namespace {

absl::StatusOr<uint32_t> ToUint32(const char* flag, uint64_t value) {
  if (value > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " is too large: ", value));
  }
  return static_cast<uint32_t>(value);
}

absl::StatusOr<float> ToFloat(const char* flag, double value) {
  if (!std::isfinite(value) || std::fabs(value) > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be a finite number"));
  }
  return static_cast<float>(value);
}

// An --image file's bytes.
absl::StatusOr<std::string> ReadImageFile(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return absl::InvalidArgumentError(absl::StrCat("--image ", path, ": no such file"));
  }
  if (!std::filesystem::is_regular_file(st)) {
    return absl::InvalidArgumentError(absl::StrCat("--image ", path, ": not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--image ", path, ": cannot open it: ", std::strerror(errno)));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("--image ", path, ": cannot read it"));
  }
  if (bytes.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--image ", path, ": the file is empty"));
  }
  return bytes.str();
}

}  // namespace

absl::StatusOr<ditserve::v1::OutputFormat> ParseOutputFormat(const std::string& name) {
  if (name == "png") return ditserve::v1::OUTPUT_FORMAT_PNG;
  if (name == "raw") return ditserve::v1::OUTPUT_FORMAT_RAW_F32;
  if (name == "latents") return ditserve::v1::OUTPUT_FORMAT_LATENTS;
  return absl::InvalidArgumentError(
      absl::StrCat("--format must be png, raw or latents, got '", name, "'"));
}

absl::StatusOr<ditserve::v1::LoraChoice> ParseLoraChoice(const std::string& value) {
  ditserve::v1::LoraChoice choice;
  const size_t colon = value.find(':');
  choice.set_name(value.substr(0, colon));
  if (choice.name().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora must be NAME or NAME:SCALE, got '", value, "'"));
  }
  if (colon != std::string::npos) {
    const std::string text = value.substr(colon + 1);
    double scale = 0;
    if (!absl::SimpleAtod(text, &scale) || !std::isfinite(scale) ||
        std::fabs(scale) > std::numeric_limits<float>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("--lora ", value, ": the scale '", text,
                                                     "' is not a finite number (NAME:SCALE, e.g. ",
                                                     choice.name(), ":0.8)"));
    }
    choice.set_scale(static_cast<float>(scale));
  }
  return choice;
}

std::string OutputFormatName(ditserve::v1::OutputFormat format) {
  switch (format) {
    case ditserve::v1::OUTPUT_FORMAT_RAW_F32:
      return "raw";
    case ditserve::v1::OUTPUT_FORMAT_LATENTS:
      return "latents";
    default:
      return "png";
  }
}

absl::StatusOr<ditserve::v1::GenerateRequest> BuildGenerateRequest(const GenerateOptions& o) {
  if (o.output.empty()) {
    return absl::InvalidArgumentError("-o/--output FILE is required ('-' for stdout)");
  }
  ditserve::v1::GenerateRequest r;
  r.set_prompt(o.prompt);
  r.set_prompt_2(o.prompt_2);
  r.set_negative_prompt(o.negative_prompt);
  r.set_negative_prompt_2(o.negative_prompt_2);
  ASSIGN_OR_RETURN(uint32_t steps, ToUint32("steps", o.steps));
  ASSIGN_OR_RETURN(uint32_t height, ToUint32("height", o.height));
  ASSIGN_OR_RETURN(uint32_t width, ToUint32("width", o.width));
  ASSIGN_OR_RETURN(uint32_t max_seq, ToUint32("max-sequence-length", o.max_sequence_length));
  r.set_num_inference_steps(steps);
  r.set_height(height);
  r.set_width(width);
  r.set_max_sequence_length(max_seq);
  if (o.seed_set) r.set_seed(o.seed);
  if (o.guidance_set) {
    ASSIGN_OR_RETURN(float guidance, ToFloat("guidance", o.guidance));
    r.set_guidance_scale(guidance);
  }
  ASSIGN_OR_RETURN(float true_cfg, ToFloat("true-cfg-scale", o.true_cfg_scale));
  r.set_true_cfg_scale(true_cfg);
  ASSIGN_OR_RETURN(ditserve::v1::OutputFormat format, ParseOutputFormat(o.format));
  r.set_output_format(format);
  r.set_request_id(o.request_id);
  for (const std::string& lora : o.loras) {
    ASSIGN_OR_RETURN(*r.add_loras(), ParseLoraChoice(lora));
  }
  if (!std::isfinite(o.strength)) {
    return absl::InvalidArgumentError("--strength must be a finite number");
  }
  r.set_strength(o.strength);
  if (o.cache_threshold_set) {  // its range is the model's (GetModelInfo's step_cache)
    if (!std::isfinite(o.cache_threshold)) {
      return absl::InvalidArgumentError("--cache-threshold must be a finite number");
    }
    r.set_cache_threshold(o.cache_threshold);
  }
  if (o.previews > 0 && o.unary) {
    return absl::InvalidArgumentError("--previews needs the streaming call (drop --unary)");
  }
  if (o.previews > 3) return absl::InvalidArgumentError("--previews must be at most 3");
  r.set_preview_images(static_cast<uint32_t>(o.previews));
  for (const std::string& path : o.images) {
    ASSIGN_OR_RETURN(*r.add_images(), ReadImageFile(path));
  }
  if (!o.embeddings.empty()) {
    ASSIGN_OR_RETURN(*r.mutable_prompt_embeddings(), LoadPromptEmbeddings(o.embeddings));
  }
  if (!o.negative_embeddings.empty()) {
    ASSIGN_OR_RETURN(*r.mutable_negative_prompt_embeddings(),
                     LoadPromptEmbeddings(o.negative_embeddings));
  }
  return r;
}

}  // namespace ditserve::cli
