// The Qwen2-VL image processor's settings of a Qwen-Image-Edit folder (its `processor/`
// component, a transformers Qwen2VLProcessor): what imaging/qwen2vl_image_processor.h needs.
//
// Read from "<processor_dir>/preprocessor_config.json" (the Hub checkpoints' file), or, when that
// is absent, from the "image_processor" object of "<processor_dir>/processor_config.json"
// (transformers 5's single-file save). Keys, each optional (the class defaults otherwise,
// Qwen2VlImageConfig): size {"shortest_edge", "longest_edge"}, then min_pixels / max_pixels, which
// override the size's bounds when present (Qwen2VLImageProcessor.__init__'s backward
// compatibility); patch_size, temporal_patch_size, merge_size, rescale_factor, image_mean,
// image_std (3 numbers each). do_resize / do_rescale / do_normalize / do_convert_rgb false are
// refused (UNIMPLEMENTED: the pipeline's processor always resizes, rescales, normalises and
// converts). image_processor_type, when present, must name Qwen2VLImageProcessor (or its Fast /
// Pil variants, which compute the same patches).
//
// Errors: NOT_FOUND when neither file exists; INVALID_ARGUMENT naming the file and the field
// (wrong type, a bound < 1, min above max, a mean / std not of 3 finite numbers, a zero std).
// Thread-safe (reads the file).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "imaging/qwen2vl_image_processor.h"

namespace ditserve::pipeline {

absl::StatusOr<imaging::Qwen2VlImageConfig> LoadQwen2VlImageConfig(
    const std::string& processor_dir);

// The same from the JSON object already read (`file` names it in messages).
absl::StatusOr<imaging::Qwen2VlImageConfig> ParseQwen2VlImageConfig(const nlohmann::json& j,
                                                                    const std::string& file);

}  // namespace ditserve::pipeline
