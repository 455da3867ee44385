// StepGraphs: a transformer's forward replayed from a CUDA graph instead of launched op by op.
//
// A denoising job calls the transformer with the same shapes at every step, and its forward is
// ~1,500–3,500 kernel launches; their host-side dispatch shows wherever the GPU's share of a step
// is small (on an H200: 5 % of FLUX.1-dev's step at 512x512, 1.5 % at 1024x1024; more for a
// rank's share at tp 4).
// Each model keeps one StepGraphs; its Forward runs the body through Run(), which:
//   * the first time it sees a key runs the body eagerly (the warm-up: cuDNN/cuBLAS plans for the
//     shapes, the models' own caches);
//   * the second time captures the body into a CUDA graph (on a side stream, into one memory pool
//     shared by the model's graphs) and replays it for this call;
//   * afterwards copies the call's inputs into the graph's input buffers and replays it.
// The key is the inputs' shapes and dtypes (undefined inputs included), the model's host-side key
// (values the forward reads on the host, e.g. Qwen-Image's image grid) and a fingerprint of the
// state the graph baked in: the addresses of every linear layer's weight and LoRA factors (a LoRA
// merge re-points the weights' storage; runtime LoRA terms add kernels), so a job with another
// adapter set gets its own capture, the base model's graphs stay for the jobs without adapters,
// and a graph is never replayed over other weights. At most `max_graphs` graphs are kept (least
// recently used goes first).
//
// What the body may do: device work on the staged inputs (contiguous copies on the model's
// device) and on tensors that live as long as the graph: the weights, and whatever the caller
// passes as `keep_alive` (e.g. a RoPE table cache the forward reads). No host synchronisation
// (.item(), copies to the host, blocking host-to-device copies of pageable memory): if the
// capture fails for such a reason the model logs it once and runs eagerly from then on, and the
// call still returns the right answer (a capture that runs out of device memory only leaves that
// shape op by op). Collectives inside the body are captured (NCCL); the
// graph's all-reduces are reported to the communicator's Stats at every replay. Under tensor
// parallelism the ranks agree on each call's action (one small all-reduce): NCCL needs a captured
// collective captured on every rank and a graph holding one launched on every rank, while a rank's
// own state (its fingerprint: addresses; a failed capture) may differ. So every rank replays, or
// every rank captures, or every rank runs op by op; a capture that failed on one rank is dropped on
// all.
//
// Off: max_graphs 0, a non-CUDA device, a build without CUDA, a communicator whose collectives
// cannot be captured (Communicator::CapturableCollectives), or DITSERVE_CUDA_GRAPHS=0 in the
// environment (read once per process: the A/B switch of the benchmarks and the parity runs).
//
// Memory: the graphs' pool holds one forward's activations for the largest captured shape (the
// graphs share it), on top of the eager path's cached blocks. Threads: one Run at a time (the
// model's forward thread). Call order across ranks: Run is a collective when enabled at tp > 1
// (the agreement, then the body's or the graph's collectives): every rank calls it for the same
// step with the same shapes, as the forward. Ownership: borrows the registry and the communicator
// (both the model's).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "comm/communicator.h"
#include "models/common/linear_registry.h"

namespace ditserve::models {

// Graphs a model keeps by default (a size for each of a few request shapes; Qwen-Image's true CFG
// uses two per size: the prompt's and the negative prompt's text lengths).
inline constexpr int kDefaultCudaGraphs = 4;

// False where this process never captures: not the CUDA build, or DITSERVE_CUDA_GRAPHS=0.
bool CudaGraphsAllowed();

struct StepGraphStats {
  uint64_t eager = 0;     // calls run op by op (first sight of a key, graphs off, after a failure)
  uint64_t captures = 0;  // graphs captured
  uint64_t replays = 0;   // calls answered by a replay (the capturing call included)
  uint64_t failed_captures = 0;
};

// A captured forward: Replay re-runs its device work on the same memory, on the current stream.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  virtual void Replay() = 0;
};

// How graphs are made. The CUDA backend (at::cuda::CUDAGraph); tests use a fake.
class GraphBackend {
 public:
  using Body = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;
  virtual ~GraphBackend() = default;
  // Records the device work of body(inputs) into a graph and returns it with the body's output (a
  // tensor the graph writes at every replay, reading `inputs`' memory). Nothing has run when this
  // returns: replay for the result. `body` is not kept. Throws when the capture fails; the backend
  // is usable again afterwards.
  virtual std::unique_ptr<CapturedGraph> Capture(const std::vector<torch::Tensor>& inputs,
                                                 const Body& body, torch::Tensor* output) = 0;
};

// The CUDA backend for `device` (nullptr in a build without CUDA).
std::unique_ptr<GraphBackend> MakeCudaGraphBackend(const torch::Device& device);

class StepGraphs {
 public:
  using Body = GraphBackend::Body;

  // `what` names the model in log lines. `backend` null, or max_graphs <= 0: always eager.
  StepGraphs(std::string what, const LinearRegistry* layers, comm::Communicator* comm,
             std::unique_ptr<GraphBackend> backend, int max_graphs);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // The body's output for `inputs` (see the file comment). `host_key` is what the body reads on
  // the host besides the inputs' shapes; `keep_alive` tensors the body reads that are not inputs or
  // weights (held as long as a graph that read them). Throws what the body throws.
  torch::Tensor Run(const std::vector<torch::Tensor>& inputs, const torch::Device& device,
                    const std::string& host_key, const std::vector<torch::Tensor>& keep_alive,
                    const Body& body);

  bool enabled() const { return backend_ != nullptr && max_graphs_ > 0 && !disabled_; }
  size_t graphs() const { return entries_.size(); }
  const StepGraphStats& stats() const { return stats_; }
  // Drops every graph (their pool goes back to the allocator once the last one is gone).
  void Clear();

 private:
  struct Entry;
  // What a rank wishes for a call, in the order the group's agreement (the largest) resolves.
  enum Action { kReplay = 0, kCapture = 1, kEager = 2 };
  // The largest of every rank's `local` (an all-reduce at tp > 1; throws StatusError if the group
  // broke).
  int Agree(int local);
  std::string Key(const std::vector<torch::Tensor>& inputs, const torch::Device& device,
                  const std::string& host_key) const;
  uint64_t Fingerprint() const;
  torch::Tensor Capture(const std::string& key, const std::vector<torch::Tensor>& inputs,
                        const torch::Device& device,
                        const std::vector<torch::Tensor>& keep_alive, const Body& body);

  std::string what_;
  const LinearRegistry* layers_;
  comm::Communicator* comm_;
  std::unique_ptr<GraphBackend> backend_;
  int max_graphs_;
  bool disabled_ = false;  // after a failed capture
  std::list<Entry> entries_;  // most recently used first
  std::vector<std::string> seen_once_;  // keys run eagerly once, not captured yet (bounded)
  std::vector<std::string> uncapturable_;  // keys whose capture ran out of memory (bounded)
  StepGraphStats stats_;
};

// The StepGraphs a model builds at load: the CUDA backend when `device` is CUDA and graphs are
// allowed (CudaGraphsAllowed), `max_graphs` of them.
std::unique_ptr<StepGraphs> MakeStepGraphs(const std::string& what, const LinearRegistry* layers,
                                           comm::Communicator* comm, const torch::Device& device,
                                           int max_graphs);

}  // namespace ditserve::models
