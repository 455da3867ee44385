// FluxFamilyTransformer<Model, Config, Args, DoubleBlock, SingleBlock>: what FLUX.1's and FLUX.2's
// transformers share on top of DiffusionTransformerBase (models/transformer_base.h): the layers
// both have (the embedders, the double and single blocks, norm_out, proj_out) and the stages that
// only walk them: HeadBlock and RemainingBlocks in the family's block order
// (models/common/flux_block_stack.h), Epilogue (norm_out on the image stream, then proj_out).
//
// The family (CRTP `Model`) keeps its Prologue, its Pass (h, context, temb and whatever its blocks
// read) and how one block is called with it:
//   std::pair<torch::Tensor, torch::Tensor> RunDouble(const DoubleBlock&, h, context, const Pass&)
//   torch::Tensor RunSingle(const SingleBlock&, x, const Pass&)        (x = [context, h])
// and makes this class a friend (the stages call those through the Model).
//
// Contracts are DiffusionTransformerBase's. Thread-safety: immutable after Load.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "models/common/ada_layer_norm.h"
#include "models/common/flux_block_stack.h"
#include "models/common/flux_embedders.h"
#include "models/common/linear_layer.h"
#include "models/transformer_base.h"

namespace ditserve::models {

template <typename Model, typename Config, typename Args, typename DoubleBlock,
          typename SingleBlock>
class FluxFamilyTransformer : public DiffusionTransformerBase<Model, Config, Args> {
 protected:
  using DiffusionTransformerBase<Model, Config, Args>::DiffusionTransformerBase;

  template <typename Pass>
  void HeadBlock(Pass& pass) const {
    RunBlocks(0, 1, pass);
  }
  template <typename Pass>
  void RemainingBlocks(Pass& pass) const {
    RunBlocks(1, double_blocks_.size() + single_blocks_.size(), pass);
  }
  template <typename Pass>
  torch::Tensor Epilogue(const Pass& pass) const {
    return proj_out_->Forward(norm_out_->Forward(pass.h, pass.temb));
  }

  FluxEmbedders embedders_;
  std::vector<DoubleBlock> double_blocks_;
  std::vector<SingleBlock> single_blocks_;
  std::optional<AdaLayerNormContinuous> norm_out_;
  std::shared_ptr<LinearLayer> proj_out_;

 private:
  template <typename Pass>
  void RunBlocks(size_t begin, size_t end, Pass& pass) const {
    const Model& model = static_cast<const Model&>(*this);
    RunFluxBlocks(
        begin, end, double_blocks_.size(), pass.h, pass.context,
        [&](size_t i, const torch::Tensor& h, const torch::Tensor& context) {
          return model.RunDouble(double_blocks_[i], h, context, pass);
        },
        [&](size_t j, const torch::Tensor& x) {
          return model.RunSingle(single_blocks_[j], x, pass);
        });
  }
};

}  // namespace ditserve::models
