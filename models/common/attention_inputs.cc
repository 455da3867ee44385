#include "models/common/attention_inputs.h"

#include <vector>

#include "models/common/fused_kernels.h"

#ifdef DITSERVE_WITH_CUDA_KERNELS
#include "models/cuda/qk_norm_rope.h"
#endif

namespace ditserve::models {
namespace {

// The stream's QK-norm through the module's own Forward (its exact rounding), or x itself.
torch::Tensor Normalised(const StreamPart& p) {
  if (p.norm != nullptr) return p.norm->Forward(p.x);
  if (p.diffusers_norm != nullptr) return p.diffusers_norm->Forward(p.x);
  return p.x;
}

// Rows [offset, offset + count) of the joint table (views).
RopeTables RopeRows(const RopeTables& rope, int64_t offset, int64_t count) {
  RopeTables rows;
  rows.cos = rope.cos.narrow(0, offset, count);
  rows.sin = rope.sin.narrow(0, offset, count);
  rows.freqs = rope.freqs.narrow(0, offset, count);
  return rows;
}

}  // namespace

torch::Tensor JointHeadsFirstReference(const StreamPart& txt, const StreamPart& img,
                                       const RopeTables* rope, RopeOrder order) {
  torch::Tensor joined;
  if (rope != nullptr && order == RopeOrder::kPerStream) {
    auto rotated = [&](const StreamPart& p, int64_t offset) {
      return ApplyRotaryEmbInterleaved(Normalised(p), RopeRows(*rope, offset, p.x.size(1)));
    };
    joined = txt.x.defined() ? torch::cat({rotated(txt, 0), rotated(img, txt.x.size(1))}, 1)
                             : rotated(img, 0);
  } else {
    joined = txt.x.defined() ? torch::cat({Normalised(txt), Normalised(img)}, 1) : Normalised(img);
    if (rope != nullptr) joined = ApplyRotaryEmbInterleaved(joined, *rope);
  }
  return joined.permute({0, 2, 1, 3});
}

#ifdef DITSERVE_WITH_CUDA_KERNELS
namespace {

// The weight of the stream's QK-norm; null without one.
const torch::Tensor* NormWeight(const StreamPart& p) {
  if (p.norm != nullptr) return &p.norm->weight();
  if (p.diffusers_norm != nullptr) return &p.diffusers_norm->weight();
  return nullptr;
}

// What the kernel's contract needs (qk_norm_rope.h); anything else takes the reference path.
bool KernelCanRun(const StreamPart& txt, const StreamPart& img, const RopeTables* rope) {
  const torch::Tensor& x = img.x;
  cuda::ElementType type;
  if (!x.is_cuda() || x.dim() != 4 || !KernelElementType(x.scalar_type(), &type)) return false;
  const int64_t hd = x.size(3);
  if (hd % 2 != 0 || hd > 256) return false;
  for (const StreamPart* p : {&txt, &img}) {
    if (!p->x.defined()) continue;
    if (p->x.device() != x.device() || p->x.scalar_type() != x.scalar_type() || p->x.dim() != 4 ||
        p->x.stride(3) != 1 || p->x.size(0) != x.size(0) || p->x.size(2) != x.size(2) ||
        p->x.size(3) != hd) {
      return false;
    }
    if (p->norm != nullptr && p->diffusers_norm != nullptr) return false;
    // A weight of another dtype than x (diffusers' RMSNorm with a float32 weight on bf16 q/k
    // promotes to float32) is not the kernel's rounding: the reference path.
    const torch::Tensor* w = NormWeight(*p);
    if (w != nullptr &&
        (!w->defined() || w->device() != x.device() || w->scalar_type() != x.scalar_type() ||
         w->numel() != hd || !w->is_contiguous())) {
      return false;
    }
  }
  if (rope != nullptr) {
    const int64_t tokens = (txt.x.defined() ? txt.x.size(1) : 0) + x.size(1);
    for (const torch::Tensor* t : {&rope->cos, &rope->sin}) {
      if (t->device() != x.device() || t->scalar_type() != torch::kFloat32 || !t->is_contiguous() ||
          t->dim() != 2 || t->size(0) != tokens || t->size(1) != hd) {
        return false;
      }
    }
  }
  return true;
}

// The kernel's arguments for one stream's part, written at token `offset` of `out`.
cuda::QkNormRopeArgs PartArgs(const StreamPart& p, const RopeTables* rope, int64_t offset,
                              torch::Tensor& out) {
  cuda::QkNormRopeArgs a;
  KernelElementType(p.x.scalar_type(), &a.type);
  a.x = p.x.data_ptr();
  a.x_stride_b = p.x.stride(0);
  a.x_stride_s = p.x.stride(1);
  a.x_stride_h = p.x.stride(2);
  a.batch = p.x.size(0);
  a.tokens = p.x.size(1);
  a.heads = p.x.size(2);
  a.head_dim = p.x.size(3);
  if (p.norm != nullptr) {
    a.norm_weight = p.norm->weight().data_ptr();
    a.norm_eps = static_cast<float>(p.norm->eps());
  } else if (p.diffusers_norm != nullptr) {
    a.norm_weight = p.diffusers_norm->weight().data_ptr();
    a.norm_eps = static_cast<float>(p.diffusers_norm->eps());
    a.round_before_weight = true;
  }
  if (rope != nullptr) {
    a.cos = rope->cos.data_ptr<float>();
    a.sin = rope->sin.data_ptr<float>();
  }
  a.out = out.data_ptr();
  a.out_tokens = out.size(1);
  a.token_offset = offset;
  return a;
}

// The tokens-first (B, S_txt + S_img, H, D) buffer of one joint tensor: SDPA's fused kernels then
// write their output in the same layout, so that (B, S, H·D) for the output projection is a view.
torch::Tensor JointBuffer(const StreamPart& txt, const StreamPart& img) {
  const int64_t s_txt = txt.x.defined() ? txt.x.size(1) : 0;
  return torch::empty({img.x.size(0), s_txt + img.x.size(1), img.x.size(2), img.x.size(3)},
                      img.x.options().memory_format(torch::MemoryFormat::Contiguous));
}

// Appends the arguments of txt's and img's parts of one joint tensor to `args`.
void AppendParts(const StreamPart& txt, const StreamPart& img, const RopeTables* rope,
                 torch::Tensor& out, std::vector<cuda::QkNormRopeArgs>* args) {
  const int64_t s_txt = txt.x.defined() ? txt.x.size(1) : 0;
  if (txt.x.defined()) args->push_back(PartArgs(txt, rope, 0, out));
  args->push_back(PartArgs(img, rope, s_txt, out));
}

void LaunchParts(const torch::Device& device, const std::vector<cuda::QkNormRopeArgs>& args) {
  LaunchOnDevice(device, "qk_norm_rope", [&](void* stream) {
    return cuda::LaunchQkNormRopeParts(args.data(), static_cast<int>(args.size()), stream);
  });
}

}  // namespace
#endif

bool JointHeadsFirstRunsKernel(const StreamPart& txt, const StreamPart& img,
                               const RopeTables* rope) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  return FusedKernelsEnabled() && KernelCanRun(txt, img, rope);
#else
  (void)txt, (void)img, (void)rope;
  return false;
#endif
}

torch::Tensor JointHeadsFirst(const StreamPart& txt, const StreamPart& img, const RopeTables* rope,
                              RopeOrder order) {
#ifdef DITSERVE_WITH_CUDA_KERNELS
  if (JointHeadsFirstRunsKernel(txt, img, rope)) {
    torch::Tensor out = JointBuffer(txt, img);
    std::vector<cuda::QkNormRopeArgs> args;
    AppendParts(txt, img, rope, out, &args);
    LaunchParts(img.x.device(), args);
    return out.permute({0, 2, 1, 3});
  }
#endif
  return JointHeadsFirstReference(txt, img, rope, order);
}

JointQkv JointQkvHeadsFirst(const QkvParts& txt, const QkvParts& img, const RopeTables& rope,
                            RopeOrder order) {
  const StreamPart txt_v{txt.v.x}, img_v{img.v.x};  // v: no norm whatever the parts say
#ifdef DITSERVE_WITH_CUDA_KERNELS
  const bool same_kind =
      img.k.x.defined() && img.v.x.defined() && img.k.x.scalar_type() == img.q.x.scalar_type() &&
      img.v.x.scalar_type() == img.q.x.scalar_type() && txt.k.x.defined() == txt.q.x.defined() &&
      txt.v.x.defined() == txt.q.x.defined();
  if (same_kind && JointHeadsFirstRunsKernel(txt.q, img.q, &rope) &&
      JointHeadsFirstRunsKernel(txt.k, img.k, &rope) &&
      JointHeadsFirstRunsKernel(txt_v, img_v, nullptr)) {
    JointQkv out{JointBuffer(txt.q, img.q), JointBuffer(txt.k, img.k), JointBuffer(txt_v, img_v)};
    std::vector<cuda::QkNormRopeArgs> args;
    AppendParts(txt.q, img.q, &rope, out.q, &args);
    AppendParts(txt.k, img.k, &rope, out.k, &args);
    AppendParts(txt_v, img_v, nullptr, out.v, &args);
    LaunchParts(img.q.x.device(), args);
    return {out.q.permute({0, 2, 1, 3}), out.k.permute({0, 2, 1, 3}), out.v.permute({0, 2, 1, 3})};
  }
#endif
  return {JointHeadsFirst(txt.q, img.q, &rope, order), JointHeadsFirst(txt.k, img.k, &rope, order),
          JointHeadsFirst(txt_v, img_v, nullptr, order)};
}

}  // namespace ditserve::models
