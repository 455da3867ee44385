#include "models/common/step_graphs.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/agree.h"
#include "common/torch_guard.h"
#include "models/common/fused_kernels.h"
#include "spdlog/spdlog.h"

#ifdef DITSERVE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace ditserve::models {

bool CudaGraphsAllowed() {
#ifdef DITSERVE_WITH_CUDA
  static const bool allowed = EnvironmentSwitchOn("DITSERVE_CUDA_GRAPHS");
  return allowed;
#else
  return false;
#endif
}

#ifdef DITSERVE_WITH_CUDA
namespace {

class CudaCapturedGraph final : public CapturedGraph {
 public:
  explicit CudaCapturedGraph(std::unique_ptr<at::cuda::CUDAGraph> graph) : graph_(std::move(graph)) {}
  void Replay() override { graph_->replay(); }

 private:
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

class CudaGraphBackend final : public GraphBackend {
 public:
  explicit CudaGraphBackend(const torch::Device& device) : device_(device) {}

  std::unique_ptr<CapturedGraph> Capture(const std::vector<torch::Tensor>& inputs, const Body& body,
                                         torch::Tensor* output) override {
    const c10::cuda::CUDAGuard device_guard(device_);
    const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream(device_.index());
    if (!side_) side_ = at::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
    // Graphs are captured on a stream of their own (never the default stream), which starts after
    // everything queued on the caller's stream (the staged inputs).
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(main);
    inputs_ready.block(*side_);
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    {
      const c10::cuda::CUDAStreamGuard on_side(*side_);
      if (!warmed_up_) {
        // The first capture: the body once op by op on the capture stream, so the libraries'
        // per-stream state (cuBLAS / cuBLASLt workspaces) exists before capturing; then its blocks
        // go back to the device (the graphs' own pool holds the activations from now on).
        body(inputs);
        warmed_up_ = true;
        side_->synchronize();
        c10::cuda::CUDACachingAllocator::emptyCache();
      }
      if (!pool_started_) {
        pool_ = at::cuda::graph_pool_handle();
        pool_started_ = true;
      }
      // Thread-local: the other threads of the process (RPC, metrics) may call CUDA meanwhile.
      graph->capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
      try {
        *output = body(inputs);
        graph->capture_end();
      } catch (...) {
        AbandonCapture(*graph);
        throw;
      }
    }
    // The caller's stream continues after the capture stream's work (the warm-up).
    at::cuda::CUDAEvent captured;
    captured.record(*side_);
    captured.block(main);
    return std::make_unique<CudaCapturedGraph>(std::move(graph));
  }

 private:
  // After the body threw mid-capture: end the (invalidated) capture so the stream leaves capture
  // mode, hand the allocator's capture routing and pool reference back, and clear the error the
  // failed call left for the next CUDA call to find.
  void AbandonCapture(at::cuda::CUDAGraph& graph) {
    try {
      graph.capture_end();
    } catch (const std::exception&) {
      // Expected: the capture was invalidated. capture_end stopped before the allocator's part.
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(device_.index(), pool_);
        c10::cuda::CUDACachingAllocator::releasePool(device_.index(), pool_);
      } catch (const std::exception&) {
      }
    }
    (void)cudaGetLastError();
  }

  torch::Device device_;
  std::optional<at::cuda::CUDAStream> side_;
  bool warmed_up_ = false;
  bool pool_started_ = false;
  decltype(at::cuda::graph_pool_handle()) pool_{0, 0};
};

}  // namespace

std::unique_ptr<GraphBackend> MakeCudaGraphBackend(const torch::Device& device) {
  return std::make_unique<CudaGraphBackend>(device);
}
#else
std::unique_ptr<GraphBackend> MakeCudaGraphBackend(const torch::Device&) { return nullptr; }
#endif

struct StepGraphs::Entry {
  std::string key;  // shapes, host key and weight/LoRA fingerprint
  std::vector<torch::Tensor> inputs;  // the staged copies the graph reads
  std::vector<torch::Tensor> keep_alive;
  torch::Tensor output;  // written by every replay
  std::unique_ptr<CapturedGraph> graph;
  comm::CommStats collectives;  // what one replay all-reduces
};

StepGraphs::StepGraphs(std::string what, const LinearRegistry* layers, comm::Communicator* comm,
                       std::unique_ptr<GraphBackend> backend, int max_graphs)
    : what_(std::move(what)),
      layers_(layers),
      comm_(comm),
      backend_(std::move(backend)),
      max_graphs_(max_graphs) {}

StepGraphs::~StepGraphs() = default;

void StepGraphs::Clear() {
  entries_.clear();
  seen_once_.clear();
  uncapturable_.clear();
}

std::string StepGraphs::Key(const std::vector<torch::Tensor>& inputs, const torch::Device& device,
                            const std::string& host_key) const {
  std::string key = absl::StrCat(device.str(), "|", host_key);
  for (const torch::Tensor& t : inputs) {
    if (!t.defined()) {
      absl::StrAppend(&key, "|-");
      continue;
    }
    absl::StrAppend(&key, "|", static_cast<int>(t.scalar_type()), ":");
    for (int64_t i = 0; i < t.dim(); ++i) absl::StrAppend(&key, i ? "x" : "", t.size(i));
  }
  return key;
}

uint64_t StepGraphs::Fingerprint() const {
  // FNV-1a over what a capture bakes in besides its inputs: the addresses of the weights and of
  // the LoRA factors, and the factors' shapes (a term of another rank may sit at the same address).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  auto mix_tensor = [&mix](const torch::Tensor& t) {
    mix(t.defined() ? reinterpret_cast<uintptr_t>(t.data_ptr()) : 0);
    if (!t.defined()) return;
    for (int64_t d = 0; d < t.dim(); ++d) mix(static_cast<uint64_t>(t.size(d)));
  };
  if (layers_ == nullptr) return h;
  for (const auto& [path, layer] : layers_->layers()) {
    mix_tensor(layer->weight());
    for (const LoraTerm& t : layer->lora_terms()) {
      mix_tensor(t.a);
      mix_tensor(t.b);
    }
    mix(0);  // separates the layers' term lists
  }
  return h;
}

namespace {

bool Contains(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

void PushBounded(std::vector<std::string>* keys, const std::string& key, size_t bound) {
  keys->push_back(key);
  if (keys->size() > bound) keys->erase(keys->begin());
}

}  // namespace

int StepGraphs::Agree(int local) {
  if (comm_ == nullptr || comm_->world_size() <= 1) return local;
  absl::StatusOr<int32_t> agreed = comm::AgreeOnMax(*comm_, local);
  ThrowIfError(agreed.status());
  return *agreed;
}

torch::Tensor StepGraphs::Run(const std::vector<torch::Tensor>& inputs, const torch::Device& device,
                              const std::string& host_key,
                              const std::vector<torch::Tensor>& keep_alive, const Body& body) {
  if (backend_ == nullptr || max_graphs_ <= 0) {  // the same on every rank: no agreement
    ++stats_.eager;
    return body(inputs);
  }
  // The fingerprint is part of the key: a job with LoRA adapters gets graphs of its own and the
  // base model's stay (they are replayed again when the adapters are gone and the weights are back
  // at their addresses).
  const std::string key = absl::StrCat(Key(inputs, device, host_key), "|state ", Fingerprint());
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&key](const Entry& e) { return e.key == key; });
  const bool seen = Contains(seen_once_, key);
  // This rank's wish, then the group's action: the largest wish (NCCL needs a captured collective
  // captured, and a graph holding one launched, on every rank; the fingerprints are addresses and
  // may differ between ranks).
  const bool capturable = !disabled_ && !Contains(uncapturable_, key);
  int local = kEager;
  if (capturable) local = it != entries_.end() ? kReplay : seen ? kCapture : kEager;
  const int action = Agree(local);
  if (action == kReplay) {
    entries_.splice(entries_.begin(), entries_, it);
    Entry& e = entries_.front();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].defined()) e.inputs[i].copy_(inputs[i]);
    }
    e.graph->Replay();
    ++stats_.replays;
    if (comm_ != nullptr && e.collectives.allreduce_count > 0) {
      comm_->RecordReplayedAllReduces(e.collectives.allreduce_count, e.collectives.allreduce_bytes);
    }
    return e.output.clone();
  }
  if (action == kCapture) {
    if (it != entries_.end()) entries_.erase(it);  // another rank needs a new capture: all recapture
    seen_once_.erase(std::remove(seen_once_.begin(), seen_once_.end(), key), seen_once_.end());
    return Capture(key, inputs, device, keep_alive, body);
  }
  // Op by op; the first time is the warm-up of a capture at the next sight.
  if (capturable && local == kEager) {
    PushBounded(&seen_once_, key, static_cast<size_t>(4 * max_graphs_));
  }
  ++stats_.eager;
  return body(inputs);
}

torch::Tensor StepGraphs::Capture(const std::string& key, const std::vector<torch::Tensor>& inputs,
                                  const torch::Device& device,
                                  const std::vector<torch::Tensor>& keep_alive, const Body& body) {
  Entry e;
  e.key = key;
  e.keep_alive = keep_alive;
  for (const torch::Tensor& t : inputs) {
    if (!t.defined()) {
      e.inputs.emplace_back();
      continue;
    }
    torch::Tensor staged = torch::empty(t.sizes(), t.options().device(device));
    staged.copy_(t);
    e.inputs.push_back(std::move(staged));
  }
  // What one replay all-reduces: the collectives of the backend's last body call, the captured
  // one (a backend may run the body op by op first, a warm-up whose collectives really ran and
  // are counted as such).
  comm::CommStats before, after;
  const Body counted = [this, &body, &before, &after](const std::vector<torch::Tensor>& in) {
    if (comm_ != nullptr) before = comm_->Stats();
    torch::Tensor out = body(in);
    if (comm_ != nullptr) after = comm_->Stats();
    return out;
  };
  std::string failure;
  try {
    e.graph = backend_->Capture(e.inputs, counted, &e.output);
  } catch (const std::exception& ex) {
    failure = std::string(ex.what()).substr(0, 400);
    if (failure.empty()) failure = "unknown error";
  }
  // Every rank replays, or none: a capture that failed anywhere is dropped everywhere.
  if (Agree(failure.empty() ? 0 : 1) != 0) {
    ++stats_.failed_captures;
    if (failure.empty()) {
      spdlog::warn("{}: another rank could not capture a CUDA graph for {}; op by op", what_, key);
      PushBounded(&uncapturable_, key, 16);
    } else if (failure.find("out of memory") != std::string::npos) {
      // This shape's graph does not fit next to what is held: this key stays op by op; the other
      // shapes keep their graphs.
      PushBounded(&uncapturable_, key, 16);
      spdlog::warn("{}: no room to capture a CUDA graph for {}; op by op: {}", what_, key, failure);
    } else {
      // A body that cannot be captured once will not be captured later: op by op from now on.
      disabled_ = true;
      Clear();
      spdlog::warn("{}: CUDA graph capture failed, running op by op from now on: {}", what_, failure);
    }
    ++stats_.eager;
    return body(inputs);
  }
  // The capture called the collectives once (recorded, not run); the replay below runs them.
  e.collectives.allreduce_count = after.allreduce_count - before.allreduce_count;
  e.collectives.allreduce_bytes = after.allreduce_bytes - before.allreduce_bytes;
  ++stats_.captures;
  spdlog::info("{}: captured a CUDA graph for {} ({} kept)", what_, key,
               std::min<size_t>(entries_.size() + 1, static_cast<size_t>(max_graphs_)));
  entries_.push_front(std::move(e));
  while (entries_.size() > static_cast<size_t>(max_graphs_)) entries_.pop_back();
  Entry& front = entries_.front();
  front.graph->Replay();
  ++stats_.replays;
  return front.output.clone();
}

std::unique_ptr<StepGraphs> MakeStepGraphs(const std::string& what, const LinearRegistry* layers,
                                           comm::Communicator* comm, const torch::Device& device,
                                           int max_graphs) {
  std::unique_ptr<GraphBackend> backend;
  // A communicator whose collectives are host-side rendezvous cannot be captured (the in-process
  // test group at tp > 1): op by op.
  const bool capturable = comm == nullptr || comm->CapturableCollectives();
  if (device.is_cuda() && CudaGraphsAllowed() && max_graphs > 0 && capturable) {
    backend = MakeCudaGraphBackend(device);
  }
  return std::make_unique<StepGraphs>(what, layers, comm, std::move(backend), max_graphs);
}

}  // namespace ditserve::models
