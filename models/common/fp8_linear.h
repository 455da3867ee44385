// FP8 weights for the transformer blocks' linear layers (`--weights fp8`): each rank quantizes its
// own slice at load, right after reading it, to float8 e4m3 with one float32 scale per output
// channel (row of W): scale[n] = amax(|W[n]|) / 448, W8[n] = e4m3(W[n] / scale[n]). The bf16
// slice is freed. A forward quantizes the activations per row (token) the same way (dynamic
// scales: models/cuda/fp8_quantize.h on the CUDA build, the same arithmetic in ATen ops otherwise)
// and runs one rowwise-scaled FP8 GEMM (PyTorch's _scaled_mm: out = (x8·W8ᵀ)·sx·sw + b, fp32
// accumulation, bf16 out). Everything else (norms, attention, modulation, embedders, the final
// projection) stays in the model dtype.
//
// Sharding composes with it: a colwise shard holds whole rows, so its scales are the unsharded
// model's; a rowwise shard's scales come from its own columns (each rank quantizes what it holds,
// as a shard-on-load server must; the reference refuses to combine the two).
//
// Which layers: FP8 covers the GEMMs that carry the tokens (attention projections, MLPs, the single
// blocks' fused projections) — IsFp8BlockLinear — and only where K and N are multiples of 16 (the
// FP8 GEMM's rule); the AdaLN modulation projections (one row per sample), the embedders and the
// output layer keep the model dtype.
//
// Available on CUDA devices of compute capability 8.9 or newer with LibTorch 2.4+ (DITSERVE_HAS_FP8);
// CheckFp8Supported refuses everything else with the reason.
// Thread-safety: pure functions; the weights are immutable after load.
#pragma once

#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_flags.h"

namespace ditserve::models {

// The storage of a model's block linears and the --weights values (common/model_flags.h).
using ::ditserve::ParseWeightFormat;
using ::ditserve::WeightFormat;
using ::ditserve::WeightFormatName;

// OK when FP8 weights can run on `device` with compute dtype `dtype` (bfloat16 only); otherwise
// FAILED_PRECONDITION (no CUDA build / LibTorch too old / GPU below compute capability 8.9) or
// INVALID_ARGUMENT (another dtype), each naming what is missing.
absl::Status CheckFp8Supported(const torch::Device& device, torch::ScalarType dtype);

// Whether the linear at `path` (a module path of a transformer checkpoint) is a token GEMM of a
// block that FP8 covers: inside "transformer_blocks." / "single_transformer_blocks.", not an AdaLN
// modulation (".norm…", "…_mod.").
bool IsFp8BlockLinear(const std::string& path);

// W (N, K) quantized per output channel: q (N, K) float8_e4m3fn, scale (N) float32.
struct Fp8Weight {
  torch::Tensor q;
  torch::Tensor scale;
};
// Throws (c10::Error) where FP8 is not compiled in. K and N must be multiples of 16 (the caller
// checks Fp8Shape first).
Fp8Weight QuantizeWeightFp8(const torch::Tensor& w);
bool Fp8Shape(const torch::Tensor& w);
bool Fp8Shape(int64_t rows, int64_t cols);  // the same rule on a (rows, cols) shape

// x (..., K) in bf16 → (..., N) bf16: x·Wᵀ + bias through the FP8 GEMM, activations quantized
// per row. `bias` may be undefined.
torch::Tensor Fp8Linear(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& scale,
                        const torch::Tensor& bias);

// x·Wᵀ + bias with W as a layer stores it: in the model dtype (`fp8_scale` undefined: torch::linear)
// or FP8 with its per-output-channel scales (Fp8Linear). The one place that chooses.
torch::Tensor StoredWeightLinear(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& fp8_scale, const torch::Tensor& bias);

// The activation quantization alone (for tests): x (M, K) → q (M, K) e4m3, scale (M, 1) float32;
// `use_kernel` false runs the ATen reference sequence.
std::pair<torch::Tensor, torch::Tensor> QuantizeRowsFp8(const torch::Tensor& x, bool use_kernel);

}  // namespace ditserve::models
