// The gated residual of every DiT block of FLUX.1, FLUX.2 and Qwen-Image: x + gate[:, None]·y for
// x and y (B, S, D) and gate (B, D) broadcast over the sequence (torch.addcmul(x,
// gate.unsqueeze(1), y)), alone or followed by the block's next adaptive LayerNorm of the result
// (NormModulate, models/common/norm_modulate.h).
//
// On CUDA tensors of the CUDA build, our kernels (models/cuda/gated_residual.h): GatedResidual one
// elementwise pass with addcmul's arithmetic, bit-identical to it; GatedResidualNormModulate one
// kernel that reads x and y once and writes both the residual and the normalised + modulated
// tensor, bit-identical to GatedResidual followed by NormModulate's fused kernel. Elsewhere, or
// with DITSERVE_FUSED_KERNELS=0 (models/common/fused_kernels.h), or outside the kernels' contract
// (non-contiguous x or y, a width not a multiple of 16 bytes, misaligned gate rows, mixed dtypes
// or shapes, for the fused pair also a row wider than NormModulate's kernel holds), the reference
// op sequence: GatedResidualReference (the addcmul), and for the pair exactly
// `r = GatedResidual(x, gate, y); {r, NormModulate(r, scale, shift, eps)}`.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <utility>

#include <torch/torch.h>

namespace ditserve::models {

torch::Tensor GatedResidual(const torch::Tensor& x, const torch::Tensor& gate,
                            const torch::Tensor& y);

torch::Tensor GatedResidualReference(const torch::Tensor& x, const torch::Tensor& gate,
                                     const torch::Tensor& y);

// Whether GatedResidual would run our kernel on these arguments (for tests and benchmarks).
bool GatedResidualFused(const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y);

// (residual, normed): residual = GatedResidual(x, gate, y), normed = NormModulate(residual, scale,
// shift, eps), scale and shift (B, D) like gate.
std::pair<torch::Tensor, torch::Tensor> GatedResidualNormModulate(
    const torch::Tensor& x, const torch::Tensor& gate, const torch::Tensor& y,
    const torch::Tensor& scale, const torch::Tensor& shift, double eps);

// Whether GatedResidualNormModulate would run the one fused kernel on these arguments.
bool GatedResidualNormModulateFused(const torch::Tensor& x, const torch::Tensor& gate,
                                    const torch::Tensor& y, const torch::Tensor& scale,
                                    const torch::Tensor& shift);

}  // namespace ditserve::models
