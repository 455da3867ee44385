#include "models/common/swiglu_feed_forward.h"

#include <vector>

#include "models/common/fused_kernels.h"

#ifdef DITSERVE_WITH_CUDA_KERNELS
#include "models/cuda/swiglu.h"
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ditserve::models {

torch::Tensor SwiGluReference(const torch::Tensor& x) {
  auto halves = x.chunk(2, /*dim=*/-1);
  return torch::silu(halves[0]) * halves[1];
}

namespace {

// Launches models/cuda/swiglu.cu for x → out when the kernel's contract holds; false otherwise.
bool SwiGluFused(const torch::Tensor& x, torch::Tensor& out) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  cuda::ElementType type;
  // (x's last dim is even and out's shape its half: the callers check.)
  if (!FusedKernelsEnabled() || !x.is_cuda() || !KernelElementType(x.scalar_type(), &type) ||
      out.scalar_type() != x.scalar_type() ||
      out.device() != x.device() || x.stride(-1) != 1 || out.stride(-1) != 1) {
    return false;
  }
  const int64_t width = x.size(-1) / 2;
  // Rows: every dim but the last must flatten with one row stride (a column slice of a wider
  // contiguous tensor qualifies).
  auto row_stride = [](const torch::Tensor& t, int64_t* stride) {
    if (t.dim() == 1) {
      *stride = t.size(-1);
      return true;
    }
    *stride = t.stride(-2);
    int64_t expected = t.stride(-2);
    for (int64_t i = t.dim() - 2; i >= 0; --i) {
      if (t.size(i) != 1 && t.stride(i) != expected) return false;
      expected *= t.size(i);
    }
    return true;
  };
  cuda::SwiGluArgs a;
  a.type = type;
  if (!row_stride(x, &a.x_row_stride) || !row_stride(out, &a.out_row_stride)) return false;
  a.x = x.data_ptr();
  a.out = out.data_ptr();
  a.width = width;
  a.rows = width == 0 ? 0 : out.numel() / width;
  LaunchOnDevice(x.device(), "swiglu", [&](void* stream) { return cuda::LaunchSwiGlu(a, stream); });
  return true;
#else
  (void)x;
  (void)out;
  return false;
#endif
}

// x's shape with the last dim halved (checked even).
std::vector<int64_t> SwiGluOutputShape(const torch::Tensor& x) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  TORCH_CHECK(!shape.empty() && shape.back() % 2 == 0, "SwiGLU: the last dim must be even");
  shape.back() /= 2;
  return shape;
}

}  // namespace

void SwiGluInto(const torch::Tensor& x, torch::Tensor& out) {
  const std::vector<int64_t> shape = SwiGluOutputShape(x);
  TORCH_CHECK(out.sizes() == torch::IntArrayRef(shape), "SwiGLU: out must be ",
              torch::IntArrayRef(shape), ", got ", out.sizes());
  if (SwiGluFused(x, out)) return;
  out.copy_(SwiGluReference(x));
}

torch::Tensor SwiGlu(const torch::Tensor& x) {
  torch::Tensor out = torch::empty(SwiGluOutputShape(x), x.options());
  if (SwiGluFused(x, out)) return out;
  return SwiGluReference(x);
}

absl::StatusOr<SwiGluFeedForward> SwiGluFeedForward::Load(const ModuleLoader& loader,
                                                          const std::string& prefix) {
  const std::string in_path = JoinPath(prefix, "linear_in");
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> in, loader.LoadLinear(in_path));
  ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> out, loader.LoadLinear(JoinPath(prefix, "linear_out")));
  if (in->style() == sharding::TpStyle::kColwise) {
    return absl::FailedPreconditionError(
        absl::StrCat(in_path, " is planned colwise: its local rows would mix the gate and value ",
                     "halves; SwiGLU needs packed_colwise with blocks [1, 1]"));
  }
  const auto blocks = in->local_blocks();
  if (!blocks.empty() && (blocks.size() != 2 || blocks[0] != blocks[1])) {
    return absl::InvalidArgumentError(absl::StrCat(in_path, ": packed blocks [",
                                                   absl::StrJoin(blocks, ", "),
                                                   "] are not two equal (gate, value) halves"));
  }
  if (in->out_features() % 2 != 0 || out->in_features() * 2 != in->out_features()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ": linear_out takes ", out->in_features(), " features on this rank but linear_in gives ",
        in->out_features(), " (", sharding::TpStyleName(in->style()), " then ",
        sharding::TpStyleName(out->style()), "); expected twice as many"));
  }
  return SwiGluFeedForward(std::move(in), std::move(out));
}

torch::Tensor SwiGluFeedForward::Forward(const torch::Tensor& x) const {
  return linear_out_->Forward(SwiGlu(linear_in_->Forward(x)));
}

}  // namespace ditserve::models
