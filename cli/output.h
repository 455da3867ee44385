// Turns a GenerateResponse into the output file and the one-line JSON summary printed on stdout.
//
//   png      the PNG bytes as received
//   raw      safetensors with tensor `image`, F32 [H, W, 3], values in [0, 1]
//   latents  safetensors with tensor `latents` (shape and dtype as the server sent them)
//
// Both safetensors files carry __metadata__ {request_id, seed, num_inference_steps, height, width}.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ditserve/v1/ditserve.pb.h"

namespace ditserve::cli {

// The bytes of the output file. FAILED_PRECONDITION when the server answered in another format than
// `requested`; DATA_LOSS when the payload's size does not match its declared shape.
absl::StatusOr<std::string> EncodeOutput(const ditserve::v1::GenerateResponse& response,
                                         ditserve::v1::OutputFormat requested);

// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so a
// failed or interrupted run never leaves a truncated image behind. "-" writes to stdout.
absl::Status WriteOutputFile(const std::string& path, absl::string_view bytes);

// {"output":..., "format":"png", "bytes":N, "request_id":..., "seed":"S", "num_inference_steps":N,
//  "height":H, "width":W, "timings":{queue, encode, denoise, decode and total seconds, and the
//  transformer passes: "full_steps", "cached_steps"}} on one line. The seed is a string because it
// is a uint64 (protobuf's JSON mapping), so scripts in any language read it exactly.
std::string ResultSummaryJson(const ditserve::v1::GenerateResponse& response,
                              const std::string& output, size_t bytes);

}  // namespace ditserve::cli
