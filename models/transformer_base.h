// DiffusionTransformerBase<Model, Config, Args>: what FLUX.1, FLUX.2 and Qwen-Image share around
// their networks.
//
// A family `Model` derives from it (CRTP) with its typed config (which has num_attention_heads) and
// its argument struct `Args` (one torch::Tensor member per diffusers forward argument) and keeps
// only what is its own: the argument table (names ↔ members, which are required), LoadLayers,
// CheckArgs and the four stages of a pass (below). The base owns the members every family has (the
// config, the linear registry, the weights' dtype and device, the local head count, the StepGraphs,
// the communicator) with their accessors, the argument names (from the table), Load, and both
// forwards:
//   * Load: the tp degree must divide the heads; the model, then its layers through a
//     tp::ParallelModuleLoader of the state dict's plan (LoadLayers), then its StepGraphs.
//   * Forward(map) (DiffusionTransformer's): CheckArgumentNames, then each table name's tensor (or
//     an undefined one) into its member, then Forward(Args). Floating inputs are moved to the
//     model's device and dtype by the Prologue, not here.
//   * Forward(Args): CheckArgs; ReadHostInputs (what the body reads on the host: StepGraphs' host
//     key and keep-alive tensors; none by default); then, under GuardTorch("<what> transformer
//     forward"), StepGraphs::Run over the table's device inputs in table order, whose body puts the
//     staged inputs back into a copy of the arguments and runs the pass. The body is the pass and
//     nothing else that runs on the device: that is what a CUDA graph captures.
//   * The pass, in the family's four stages (non-virtual, called through the CRTP `Model`, each
//     with its own `Model::Pass` state: the streams `h` (image) and `context` (text) and whatever
//     else the blocks read): Prologue(args) (embeddings, conditioning, RoPE), HeadBlock(pass) (the
//     first transformer block), RemainingBlocks(pass) (every other block), Epilogue(pass) (the
//     output layers on `h`).
//   * Forward(Args, FirstBlockCache*) with a cache: the same stages, and between the head and the
//     rest the cache's collective decision (models/common/first_block_cache.h): either the
//     remaining blocks run and the cache keeps both residuals, or `h` becomes the head's output +
//     the cached residual and the remaining blocks are skipped. The head, the rest and the cached
//     tail are three StepGraphs bodies (CachedPass), each its own CUDA graph per shape.
//
// Contracts are DiffusionTransformer's (models/transformer.h): Forward is a collective under tensor
// parallelism, never throws, one at a time per instance. The stages may throw (Forward catches);
// they must follow StepGraphs' rules for a body (models/common/step_graphs.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/common/linear_layer.h"
#include "models/common/linear_registry.h"
#include "models/common/model_checks.h"
#include "models/common/module_loader.h"
#include "models/common/step_graphs.h"
#include "models/tp/parallel_module_loader.h"
#include "models/transformer.h"
#include "sharding/state_dict.h"

namespace ditserve::models {

// One named forward argument: its diffusers name, the member of `Args` it fills, whether Forward
// requires it (else it is accepted and may be absent), and whether the body reads it on the device
// (a StepGraphs input: staged, part of a graph's key) or only on the host (passed to the Prologue
// as given; ReadHostInputs must then put what it reads into the host key).
template <typename Args>
struct ForwardArgument {
  const char* name;
  torch::Tensor Args::*member;
  bool required = true;
  bool device_input = true;
};

// What a forward's body reads on the host besides its device inputs: StepGraphs::Run's host key,
// and tensors it reads that are neither inputs nor weights (held as long as a graph that read
// them).
struct HostInputs {
  std::string key;
  std::vector<torch::Tensor> keep_alive;
};

template <typename Model, typename Config, typename Args>
class DiffusionTransformerBase : public DiffusionTransformer {
 public:
  // This rank's model from its shard `sd` (the plan's styles) and the TP group `comm` (both must
  // outlive the model; the model shares the state dict's tensors). INVALID_ARGUMENT when the
  // weights do not fit `config`.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const Config& config,
                                                     const sharding::ShardedStateDict& sd,
                                                     comm::Communicator* comm,
                                                     const TransformerLoadOptions& options = {}) {
    RETURN_IF_ERROR(CheckTpDegree(config.num_attention_heads, sd.world_size()));
    std::unique_ptr<Model> m(new Model(config));
    DiffusionTransformerBase& base = *m;
    base.comm_ = comm;
    tp::ParallelModuleLoader loader(sd, comm, &base.linears_, options.weights);
    RETURN_IF_ERROR(base.LoadLayers(loader, comm));
    base.MakeGraphs(comm, options.cuda_graphs);
    return m;
  }

  std::string class_name() const final { return class_name_; }
  // The table's names, in table order.
  std::vector<std::string> RequiredArguments() const final { return ArgumentNames(true); }
  std::vector<std::string> OptionalArguments() const final { return ArgumentNames(false); }
  torch::ScalarType dtype() const final { return dtype_; }
  torch::Device device() const final { return device_; }
  const LinearRegistry& linear_layers() const final { return linears_; }
  StepGraphStats graph_stats() const final { return graphs_->stats(); }
  const Config& config() const { return config_; }
  // Attention heads this rank computes (all of them at tp = 1).
  int64_t local_heads() const { return local_heads_; }

  using DiffusionTransformer::Forward;

  absl::StatusOr<torch::Tensor> Forward(const Args& args, FirstBlockCache* cache = nullptr) {
    RETURN_IF_ERROR(CheckArgs(args));
    ASSIGN_OR_RETURN(const HostInputs host, ReadHostInputs(args));
    if (cache != nullptr) {
      return GuardTorch(forward_what_.c_str(), [&]() -> absl::StatusOr<torch::Tensor> {
        return CachedPass(args, host, *cache);
      });
    }
    return GuardTorch(forward_what_.c_str(), [&] {
      return graphs_->Run(DeviceInputs(args), device_, host.key, host.keep_alive,
                          [this, &args](const std::vector<torch::Tensor>& in) {
                            return FullPass(Staged(args, in));
                          });
    });
  }

  absl::StatusOr<torch::Tensor> Forward(const std::map<std::string, torch::Tensor>& args,
                                        FirstBlockCache* cache) final {
    RETURN_IF_ERROR(CheckArgumentNames(*this, args, what_.c_str()));
    Args typed;
    for (const ForwardArgument<Args>& a : arguments_) {
      typed.*a.member = ArgumentOrUndefined(args, a.name);
    }
    return Forward(typed, cache);
  }

 protected:
  // `class_name`: config.json's "_class_name"; `what`: the family in messages ("FLUX.1");
  // `arguments`: every member of Args, device inputs in the order the body's inputs are staged.
  DiffusionTransformerBase(Config config, std::string class_name, std::string what,
                           std::vector<ForwardArgument<Args>> arguments)
      : config_(std::move(config)),
        class_name_(std::move(class_name)),
        what_(std::move(what)),
        forward_what_(absl::StrCat(what_, " transformer forward")),
        arguments_(std::move(arguments)) {}

  // Builds every layer from `loader` (which registers the linear layers in linears_) and sets
  // dtype_, device_ and local_heads_; INVALID_ARGUMENT when the weights do not fit config_.
  // `loader` reads the state dict Load was given (loader.state_dict()).
  virtual absl::Status LoadLayers(const ModuleLoader& loader, comm::Communicator* comm) = 0;
  // INVALID_ARGUMENT naming what is wrong with `args` (shapes, missing required tensors).
  virtual absl::Status CheckArgs(const Args& args) const = 0;
  // What the body will read on the host for `args` (checked); may fill the family's caches.
  virtual absl::StatusOr<HostInputs> ReadHostInputs(const Args& /*args*/) { return HostInputs{}; }

  // For LoadLayers. "<what> transformer": the name in StepGraphs' and the modulation bank's logs.
  std::string model_name() const { return absl::StrCat(what_, " transformer"); }
  // INVALID_ARGUMENT unless `world_size` divides `heads`.
  static absl::Status CheckTpDegree(int64_t heads, int world_size) {
    if (heads % world_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tp degree ", world_size, " must divide the number of attention heads (", heads, ")"));
    }
    return absl::OkStatus();
  }
  // INVALID_ARGUMENT unless `comm` is the group of the state dict's rank and size.
  absl::Status CheckCommunicator(const comm::Communicator* comm, int rank, int world_size) const {
    if (comm == nullptr || comm->world_size() != world_size || comm->rank() != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat(what_, ": the communicator does not match the state dict's rank/size"));
    }
    return absl::OkStatus();
  }
  // A linear layer that maps `in` to `out` features on every rank (the plans keep embedders and
  // final projections replicated); INVALID_ARGUMENT naming `path` otherwise.
  static absl::StatusOr<std::shared_ptr<LinearLayer>> LoadFullWidthLinear(
      const ModuleLoader& loader, const std::string& path, int64_t in, int64_t out) {
    ASSIGN_OR_RETURN(std::shared_ptr<LinearLayer> layer, loader.LoadLinear(path));
    RETURN_IF_ERROR(CheckLinearWidths(*layer, path, in, out));
    return layer;
  }
  // The model's dtype and device: those of `first`'s weight (the first layer loaded).
  void TakeDtypeAndDevice(const LinearLayer& first) {
    dtype_ = first.weight().scalar_type();
    device_ = first.weight().device();
  }
  // local_heads_ = `local`; INVALID_ARGUMENT unless it is all `heads` or a 1/world_size share.
  absl::Status SetLocalHeads(int64_t local, int64_t heads, int world_size) {
    local_heads_ = local;
    if (local != heads && local * world_size != heads) {
      return absl::InvalidArgumentError(absl::StrCat("this rank holds ", local, " heads of ", heads,
                                                     " at tp degree ", world_size));
    }
    return absl::OkStatus();
  }

  const Config config_;
  LinearRegistry linears_;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Device device_ = torch::kCPU;
  int64_t local_heads_ = 0;
  std::unique_ptr<StepGraphs> graphs_;

 private:
  // The StepGraphs of the forward (the last step of Load: device_ and linears_ are final).
  void MakeGraphs(comm::Communicator* comm, int max_graphs) {
    graphs_ = MakeStepGraphs(model_name(), &linears_, comm, device_, max_graphs);
  }
  const Model& self() const { return static_cast<const Model&>(*this); }

  // Every block: the prediction for checked `args` (the forward body).
  torch::Tensor FullPass(const Args& args) const {
    torch::NoGradGuard no_grad;
    auto pass = self().Prologue(args);
    self().HeadBlock(pass);
    self().RemainingBlocks(pass);
    return self().Epilogue(pass);
  }

  // The table's device inputs of `args`, in table order (StepGraphs::Run's inputs).
  std::vector<torch::Tensor> DeviceInputs(const Args& args) const {
    std::vector<torch::Tensor> inputs;
    for (const ForwardArgument<Args>& a : arguments_) {
      if (a.device_input) inputs.push_back(args.*a.member);
    }
    return inputs;
  }
  // `args` with its device inputs replaced by the staged ones (`in`'s first ones, table order).
  Args Staged(const Args& args, const std::vector<torch::Tensor>& in) const {
    Args staged = args;
    size_t i = 0;
    for (const ForwardArgument<Args>& a : arguments_) {
      if (a.device_input) staged.*a.member = in[i++];
    }
    return staged;
  }

  // The pass with First Block Cache (see the file comment); a collective (the decision). Its
  // device work is three StepGraphs bodies, so each replays from a CUDA graph of its own (keys
  // the forward's host key + the part): "head" (Prologue + the first block; out: [head input,
  // head output, text stream] along the tokens), then after the decision either "rest" (Prologue
  // for the conditioning, the remaining blocks from the head's streams, Epilogue; out: [last
  // block's image stream | prediction] along the features) or "cached" (Prologue, Epilogue on
  // the head output + the cached residual). The Prologue runs in each body (its conditioning and
  // RoPE are cheap next to a block, and a body may read only its inputs and the weights); the
  // values are those of one op-by-op pass.
  absl::StatusOr<torch::Tensor> CachedPass(const Args& args, const HostInputs& host,
                                           FirstBlockCache& cache) const {
    const std::vector<torch::Tensor> inputs = DeviceInputs(args);
    const size_t k = inputs.size();  // the extra inputs of "rest" and "cached" follow the table's
    const torch::Tensor head =
        graphs_->Run(inputs, device_, host.key + " | first block cache: head", host.keep_alive,
                     [this, &args](const std::vector<torch::Tensor>& in) {
                       torch::NoGradGuard no_grad;
                       auto pass = self().Prologue(Staged(args, in));
                       const torch::Tensor input = pass.h;
                       self().HeadBlock(pass);
                       return torch::cat({input, pass.h, pass.context}, 1);
                     });
    const int64_t n = args.hidden_states.size(1), width = head.size(2);
    const torch::Tensor head_output = head.narrow(1, n, n);
    const torch::Tensor context = head.narrow(1, 2 * n, head.size(1) - 2 * n);
    const torch::Tensor head_residual = head_output - head.narrow(1, 0, n);
    ASSIGN_OR_RETURN(const bool compute, cache.Decide(head_residual, *comm_));
    std::vector<torch::Tensor> more = inputs;
    if (compute) {
      more.push_back(head_output);
      more.push_back(context);
      const torch::Tensor out =
          graphs_->Run(more, device_, host.key + " | first block cache: rest", host.keep_alive,
                       [this, &args, k](const std::vector<torch::Tensor>& in) {
                         torch::NoGradGuard no_grad;
                         auto pass = self().Prologue(Staged(args, in));
                         pass.h = in[k];
                         pass.context = in[k + 1];
                         self().RemainingBlocks(pass);
                         return torch::cat({pass.h, self().Epilogue(pass)}, 2);
                       });
      cache.Computed(head_residual, out.narrow(2, 0, width) - head_output);
      return out.narrow(2, width, out.size(2) - width);
    }
    more.push_back(head_output);
    more.push_back(cache.tail_residual());
    const torch::Tensor out = graphs_->Run(
        more, device_, host.key + " | first block cache: cached", host.keep_alive,
        [this, &args, k](const std::vector<torch::Tensor>& in) {
          torch::NoGradGuard no_grad;
          auto pass = self().Prologue(Staged(args, in));
          pass.h = in[k + 1] + in[k];  // the cached residual + the head output: diffusers' order
          return self().Epilogue(pass);
        });
    cache.Cached();
    return out;
  }

  std::vector<std::string> ArgumentNames(bool required) const {
    std::vector<std::string> names;
    for (const ForwardArgument<Args>& a : arguments_) {
      if (a.required == required) names.push_back(a.name);
    }
    return names;
  }

  const std::string class_name_;
  const std::string what_;
  const std::string forward_what_;
  const std::vector<ForwardArgument<Args>> arguments_;
  comm::Communicator* comm_ = nullptr;  // the TP group (Load's; outlives the model)
};

}  // namespace ditserve::models
