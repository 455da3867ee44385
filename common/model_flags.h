// Values of the model-loading options that three binaries check: the frontend at start (its flags),
// the worker again on InitRequest (any client may send one), and the `ditserve-tool` subcommands
// (their own --dtype / --weights). One definition of each value set and its spelling, so that they
// accept and refuse the same values with the same message: each Parse* function returns
// INVALID_ARGUMENT "<field> must be A, B or C, got 'x'", naming the flag or request field the caller
// passes as `field` ("--dtype", "dtype", ...), and each *Name function gives the spelling back.
// The torch-side types (torch::ScalarType, the pipeline's and the LoRA library's enums) are mapped
// from these where they are used (worker/engine.cc). Torch-free.
// Thread-safety: pure functions and constants.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ditserve {

// The serving dtype of a model (--dtype, InitRequest.dtype): "float32" | "bfloat16".
enum class ModelDtype { kFloat32, kBFloat16 };
absl::StatusOr<ModelDtype> ParseModelDtype(absl::string_view value, absl::string_view field);
const char* ModelDtypeName(ModelDtype dtype);

// The kind of device a rank computes on (--device, InitRequest.device): "cpu" | "cuda".
enum class DeviceKind { kCpu, kCuda };
absl::StatusOr<DeviceKind> ParseDeviceKind(absl::string_view value, absl::string_view field);
const char* DeviceKindName(DeviceKind kind);

// Where an LLM text encoder runs (--text-encoder-placement, InitRequest.text_encoder_placement);
// the pipeline uses this type too (pipeline::TextEncoderPlacement).
enum class TextEncoderPlacement {
  kAuto,     // "auto": sharded when the encoder's weights exceed the pipeline's threshold, else rank0
  kSharded,  // "sharded": every rank holds a tensor-parallel shard and runs it (no broadcast)
  kRank0,    // "rank0": rank 0 holds a full replica and broadcasts the embeddings
};
absl::StatusOr<TextEncoderPlacement> ParseTextEncoderPlacement(absl::string_view value,
                                                               absl::string_view field);
const char* TextEncoderPlacementName(TextEncoderPlacement placement);

// How a job's LoRA adapters are applied (--lora-mode, InitRequest.lora_mode): "merge" (a merged
// copy of the adapted weights per job) | "runtime" (low-rank terms beside each GEMM); the LoRA
// library uses this type too (lora::LoraMode, models/lora/lora_library.h).
enum class LoraMode { kMerge, kRuntime };
absl::StatusOr<LoraMode> ParseLoraMode(absl::string_view value, absl::string_view field);
const char* LoraModeName(LoraMode mode);

// The storage of a model's block linears (--weights): the model dtype, or FP8 e4m3 with
// per-output-channel scales (models/common/fp8_linear.h).
enum class WeightFormat { kModelDtype, kFp8 };

// "dtype" | "fp8"; INVALID_ARGUMENT naming the flag and both values otherwise.
absl::StatusOr<WeightFormat> ParseWeightFormat(const std::string& name);
const char* WeightFormatName(WeightFormat f);

// --cuda-graphs N: CUDA graphs kept per worker, 0 (off) to this (models/common/step_graphs.h).
inline constexpr uint32_t kMaxCudaGraphs = 64;

}  // namespace ditserve
