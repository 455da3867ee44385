// Speed-motivated rewrites of reference building blocks must compute the same numbers: fused
// q/k/v GEMMs (and the weight re-pointing that keeps memory flat), the complex-product RoPE, the
// single-pass modulation, the GEMM + GELU helper, the gated residual fused with the next adaptive
// LayerNorm.
#include <gtest/gtest.h>

#include "models/common/ada_layer_norm.h"
#include "models/common/attention.h"
#include "models/common/feed_forward.h"
#include "models/common/fused_linear.h"
#include "models/common/gated_residual.h"
#include "models/common/linear.h"
#include "models/common/norm_modulate.h"
#include "models/common/rope.h"
#include "models/common/swiglu_feed_forward.h"

namespace ditserve::models {
namespace {

double RelErr(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm() / b.to(torch::kFloat64).norm())
      .item<double>();
}

std::shared_ptr<LinearLayer> RandomLinear(int64_t out, int64_t in, bool bias) {
  return std::make_shared<Linear>(torch::randn({out, in}),
                                  bias ? torch::randn({out}) : torch::Tensor());
}

TEST(FusedLinear, EqualsTheSeparateProjectionsAndSharesTheirStorage) {
  torch::manual_seed(3);
  std::vector<std::shared_ptr<LinearLayer>> parts = {
      RandomLinear(8, 16, true), RandomLinear(4, 16, true), RandomLinear(12, 16, true)};
  const auto x = torch::randn({2, 5, 16});
  std::vector<torch::Tensor> expected;
  for (const auto& p : parts) expected.push_back(p->Forward(x));
  // A handle to part 0's weight held elsewhere (like the state dict's entry) sees the rebind.
  const torch::Tensor elsewhere = parts[0]->weight();
  auto fused = FusedLinear::Fuse(parts, "attn.to_q");
  ASSERT_TRUE(fused.ok()) << fused.status();
  const auto outs = fused->Forward(x);
  ASSERT_EQ(outs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(outs[i].sizes(), expected[i].sizes());
    EXPECT_LT(RelErr(outs[i], expected[i]), 1e-6) << i;
    // The parts still work, reading their slice of the fused buffer.
    EXPECT_LT(RelErr(parts[i]->Forward(x), expected[i]), 1e-6) << i;
  }
  EXPECT_TRUE(elsewhere.is_same(parts[0]->weight()));
  EXPECT_TRUE(parts[0]->weight().storage().is_alias_of(parts[2]->weight().storage()));
  EXPECT_TRUE(elsewhere.storage().is_alias_of(parts[1]->weight().storage()));
}

TEST(FusedLinear, RefusesMismatchedParts) {
  torch::manual_seed(4);
  auto mixed_bias = FusedLinear::Fuse({RandomLinear(8, 16, true), RandomLinear(8, 16, false)}, "m");
  EXPECT_EQ(mixed_bias.status().code(), absl::StatusCode::kInvalidArgument);
  auto widths = FusedLinear::Fuse({RandomLinear(8, 16, true), RandomLinear(8, 12, true)}, "w");
  EXPECT_EQ(widths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(widths.status().message().find("input features"), std::string::npos);
  EXPECT_FALSE(FusedLinear::Fuse({}, "none").ok());
}

TEST(Rope, ComplexProductEqualsTheReferenceOpSequence) {
  torch::manual_seed(5);
  auto ids =
      torch::stack({torch::zeros({12}), torch::arange(12).floor_divide(4).to(torch::kFloat32),
                    torch::arange(12).remainder(4).to(torch::kFloat32)},
                   1);
  const RopeTables tables = FluxRopeTables(ids, {4, 6, 6}, 10000.0);
  ASSERT_TRUE(tables.freqs.defined());
  const RopeTables reference_only{tables.cos, tables.sin, {}};
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    auto x = torch::randn({2, 12, 3, 16}).to(dtype);
    auto fast = ApplyRotaryEmbInterleaved(x, tables);
    auto ref = ApplyRotaryEmbInterleaved(x, reference_only);
    EXPECT_EQ(fast.scalar_type(), dtype);
    EXPECT_LT(RelErr(fast, ref), dtype == torch::kFloat32 ? 1e-6 : 8e-3);
    // A strided input (a view of a wider GEMM output) rotates the same.
    auto wide = torch::randn({2, 12, 3 * 16 * 2}).to(dtype);
    auto view = wide.narrow(-1, 48, 48).reshape({2, 12, 3, 16});
    EXPECT_LT(RelErr(ApplyRotaryEmbInterleaved(view, tables),
                     ApplyRotaryEmbInterleaved(view.contiguous(), reference_only)),
              dtype == torch::kFloat32 ? 1e-6 : 8e-3);
  }
}

// FLUX.2's single blocks write the attention into the first columns of their [attention | mlp]
// buffer: the same values as the attention's own output, bit for bit, in float32 and bfloat16,
// from heads-first views of tokens-first tensors (JointHeadsFirst's layout) or contiguous ones.
TEST(AttentionInto, EqualsTheAttentionsOutput) {
  torch::manual_seed(3);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const bool tokens_first : {false, true}) {
      const auto opts = torch::TensorOptions().dtype(dtype);
      auto make = [&] {
        return tokens_first ? torch::randn({2, 11, 3, 8}, opts).permute({0, 2, 1, 3})
                            : torch::randn({2, 3, 11, 8}, opts);
      };
      auto q = make(), k = make(), v = make();
      torch::Tensor joined = torch::full({2, 11, 3 * 8 + 20}, 7.0, opts);
      DotProductAttentionHeadsFirstInto(q, k, v, joined);
      EXPECT_TRUE(torch::equal(joined.narrow(2, 0, 24), DotProductAttentionHeadsFirst(q, k, v)))
          << dtype << (tokens_first ? " tokens first" : "");
      EXPECT_TRUE(torch::equal(joined.narrow(2, 24, 20), torch::full({2, 11, 20}, 7.0, opts)))
          << "the tail's columns are the caller's";
    }
  }
}

// A linear layer of the joined [a | b] input, fed the parts: one GEMM per block of the weight's
// columns, the same as Forward of the concatenation (float32: summation order only), with and
// without a bias; with LoRA terms set it joins and runs Forward (bit for bit).
TEST(ForwardJoined, EqualsForwardOfTheConcatenation) {
  torch::manual_seed(9);
  for (const bool with_bias : {true, false}) {
    Linear layer(torch::randn({6, 5 + 9}), with_bias ? torch::randn({6}) : torch::Tensor());
    auto a = torch::randn({2, 3, 5}), b = torch::randn({2, 3, 9});
    const torch::Tensor want = layer.Forward(torch::cat({a, b}, -1));
    const torch::Tensor got = layer.ForwardJoined({a, b});
    EXPECT_EQ(got.sizes(), want.sizes());
    EXPECT_LT(RelErr(got, want), 1e-6) << (with_bias ? "bias" : "no bias");
    EXPECT_TRUE(torch::equal(layer.ForwardJoined({torch::cat({a, b}, -1)}), want)) << "one part";
    // A view of a wider tensor (the attention's (B, S, H·hd) view) as a part.
    auto wide = torch::randn({2, 3, 7});
    EXPECT_LT(RelErr(layer.ForwardJoined({wide.narrow(2, 1, 5), b}),
                     layer.Forward(torch::cat({wide.narrow(2, 1, 5), b}, -1))),
              1e-6);
    layer.SetLoraTerms({{torch::randn({2, 14}), torch::randn({6, 2})}});
    EXPECT_TRUE(torch::equal(layer.ForwardJoined({a, b}), layer.Forward(torch::cat({a, b}, -1))));
    layer.ClearLoraTerms();
  }
}

TEST(Modulate, EqualsScaleThenShift) {
  torch::manual_seed(6);
  auto normed = torch::randn({2, 7, 8}), scale = torch::randn({2, 8}), shift = torch::randn({2, 8});
  auto ref = normed * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1);
  EXPECT_LT(RelErr(Modulate(normed, scale, shift), ref), 1e-6);
}

// On the CPU the pair is exactly its reference sequence: addcmul, then NormModulate of the result
// (the CUDA kernels' parity: tests/gpu/gated_residual_test.cc).
TEST(GatedResidualNormModulate, EqualsGatedResidualThenNormModulate) {
  torch::manual_seed(8);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto x = torch::randn({2, 7, 16}).to(dtype), y = torch::randn({2, 7, 16}).to(dtype);
    auto m = torch::randn({2, 6 * 16}).to(dtype).chunk(6, 1);  // strided (B, D) chunks
    const torch::Tensor &gate = m[2], &shift = m[3], &scale = m[4];
    EXPECT_FALSE(GatedResidualFused(x, gate, y));
    EXPECT_FALSE(GatedResidualNormModulateFused(x, gate, y, scale, shift));
    const torch::Tensor r_ref = torch::addcmul(x, gate.unsqueeze(1), y);
    EXPECT_TRUE(torch::equal(GatedResidual(x, gate, y), r_ref));
    EXPECT_TRUE(torch::equal(GatedResidualReference(x, gate, y), r_ref));
    auto [residual, normed] = GatedResidualNormModulate(x, gate, y, scale, shift, 1e-6);
    EXPECT_TRUE(torch::equal(residual, r_ref));
    EXPECT_TRUE(torch::equal(normed, NormModulate(r_ref, scale, shift, 1e-6)));
    // A non-contiguous y (a view) gives the same numbers.
    const torch::Tensor y_t = y.transpose(1, 2).contiguous().transpose(1, 2);
    ASSERT_FALSE(y_t.is_contiguous());
    auto [residual_t, normed_t] = GatedResidualNormModulate(x, gate, y_t, scale, shift, 1e-6);
    EXPECT_TRUE(torch::equal(residual_t, r_ref));
    EXPECT_TRUE(torch::equal(normed_t, normed));
  }
}

TEST(LinearThenGeluTanh, EqualsGeluOfTheLinear) {
  torch::manual_seed(7);
  auto layer = RandomLinear(24, 16, true);
  auto x = torch::randn({3, 5, 16});
  EXPECT_LT(RelErr(LinearThenGeluTanh(*layer, x), torch::gelu(layer->Forward(x), "tanh")), 1e-6);
}

// The single blocks' buffer filled in parts: the attention into its head, the SwiGLU into its tail
// (a slice of the fused projection's output in): the same bytes as cat(attention, SwiGLU).
TEST(AttentionJoin, AttentionAndSwiGluWrittenIntoOneBufferEqualTheCat) {
  torch::manual_seed(3);
  auto q = torch::randn({2, 3, 5, 4}), k = torch::randn({2, 3, 5, 4}),
       v = torch::randn({2, 3, 5, 4});
  torch::Tensor z = torch::randn({2, 5, 6 + 2 * 7});
  torch::Tensor mlp_in = z.narrow(2, 6, 2 * 7);
  torch::Tensor joined = torch::empty({2, 5, 12 + 7});
  torch::Tensor tail = joined.narrow(2, 12, 7);
  SwiGluInto(mlp_in, tail);
  DotProductAttentionHeadsFirstInto(q, k, v, joined);
  auto halves = mlp_in.chunk(2, -1);
  torch::Tensor expected =
      torch::cat({DotProductAttentionHeadsFirst(q, k, v), torch::silu(halves[0]) * halves[1]}, -1);
  EXPECT_TRUE(torch::equal(joined, expected));
  EXPECT_TRUE(torch::equal(SwiGlu(mlp_in), torch::silu(halves[0]) * halves[1]));
}

}  // namespace
}  // namespace ditserve::models
