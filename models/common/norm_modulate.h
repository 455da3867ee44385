// The adaptive LayerNorm of the DiT blocks: LN(x) * (1 + scale[:, None]) + shift[:, None], with LN
// torch.nn.LayerNorm(D, elementwise_affine=False, eps) over the last dim, x (B, S, D), scale and
// shift (B, D). Every block of FLUX.1, FLUX.2 and Qwen-Image runs it once or twice per stream.
//
// On a CUDA tensor of the CUDA build, one fused kernel (models/cuda/norm_modulate.h) reads x once
// and writes the result: no normalised intermediate tensor. Elsewhere, or with
// DITSERVE_FUSED_KERNELS=0 (models/common/fused_kernels.h), or outside the kernel's contract
// (non-contiguous x, a row wider than it holds in registers, misaligned chunks),
// NormModulateReference: torch.layer_norm then Modulate (ada_layer_norm.h). The two agree to one
// rounding of the output dtype (float32 statistics either way).
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <torch/torch.h>

namespace ditserve::models {

torch::Tensor NormModulate(const torch::Tensor& x, const torch::Tensor& scale,
                           const torch::Tensor& shift, double eps);

torch::Tensor NormModulateReference(const torch::Tensor& x, const torch::Tensor& scale,
                                    const torch::Tensor& shift, double eps);

// Whether NormModulate would run the fused kernel on these arguments (for tests and benchmarks).
bool NormModulateFused(const torch::Tensor& x, const torch::Tensor& scale,
                       const torch::Tensor& shift);

}  // namespace ditserve::models
