#include "models/common/norm_modulate.h"

#include "models/common/ada_layer_norm.h"
#include "models/common/fused_kernels.h"
#include "models/common/layer_norm.h"

#ifdef DITSERVE_WITH_CUDA_KERNELS
#include "models/cuda/norm_modulate.h"
#endif

namespace ditserve::models {

torch::Tensor NormModulateReference(const torch::Tensor& x, const torch::Tensor& scale,
                                    const torch::Tensor& shift, double eps) {
  return Modulate(LayerNormNoAffine(x, eps), scale, shift);
}

bool NormModulateFused(const torch::Tensor& x, const torch::Tensor& scale,
                       const torch::Tensor& shift) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  cuda::ElementType type;
  int64_t width = 0;
  if (!VectorRowsFit(x, &type, &width) || x.size(2) > cuda::NormModulateMaxDim(type)) return false;
  return PerSampleVectorFits(scale, x, width) && PerSampleVectorFits(shift, x, width);
#else
  (void)x;
  (void)scale;
  (void)shift;
  return false;
#endif
}

torch::Tensor NormModulate(const torch::Tensor& x, const torch::Tensor& scale,
                           const torch::Tensor& shift, double eps) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  if (NormModulateFused(x, scale, shift)) {
    torch::Tensor out =
        torch::empty_like(x, x.options().memory_format(torch::MemoryFormat::Contiguous));
    cuda::NormModulateArgs a;
    KernelElementType(x.scalar_type(), &a.type);
    a.x = x.data_ptr();
    a.batch = x.size(0);
    a.tokens = x.size(1);
    a.dim = x.size(2);
    a.scale = scale.data_ptr();
    a.scale_stride_b = scale.stride(0);
    a.shift = shift.data_ptr();
    a.shift_stride_b = shift.stride(0);
    a.eps = static_cast<float>(eps);
    a.out = out.data_ptr();
    LaunchOnDevice(x.device(), "norm_modulate",
                   [&](void* stream) { return cuda::LaunchNormModulate(a, stream); });
    return out;
  }
#endif
  return NormModulateReference(x, scale, shift, eps);
}

}  // namespace ditserve::models
