// Engine: the state of one worker rank (its device, communicator, loaded pipeline, the current job
// and its cancel flags) and the one thread that owns the device. The gRPC service is a thin edge:
// it decodes each RPC into a typed job (worker/job_codec.h), hands it to the engine, and encodes
// the result.
//
// Threads: Init and Run are jobs for the engine thread (engine_thread.h): they run there one at a
// time, in arrival order, with the rank's device current (bound once at Init, checked before every
// job); the calling handler thread waits. Progress callbacks are invoked on the engine thread.
// Cancel, Status and MakeRendezvous may be called from any thread at any time, also while a job
// runs. No exception leaves the engine: torch errors come back as Status (out of memory:
// RESOURCE_EXHAUSTED, the worker stays serving; anything else INTERNAL with the message).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "pipeline/pipeline.h"
#include "worker/device_binding.h"
#include "worker/engine_thread.h"
#include "worker/worker_options.h"

namespace ditserve::worker {

// Seams for tests; the defaults are the real loader and device binding.
struct EngineDeps {
  std::function<absl::StatusOr<std::unique_ptr<pipeline::Pipeline>>(const pipeline::PipelineOptions&,
                                                                     comm::Communicator*)>
      load_pipeline = pipeline::LoadPipeline;
  DeviceBindingFactory bind_device = BindTorchDevice;
};

// One generation job as the engine runs it.
struct RunJob {
  std::string job_id;
  pipeline::GenerationJob job;
};

class Engine {
 public:
  explicit Engine(WorkerOptions options, EngineDeps deps = {});
  ~Engine();

  // Rank 0: creates the group's rendezvous (NCCL unique id, or the Gloo store address).
  absl::StatusOr<v1::Rendezvous> MakeRendezvous(uint32_t world_size);

  // Binds the device, joins the group described by the request and loads this rank's shard.
  // Replaces any previous group and model. `emit` receives progress ("group", "load", then "ready"
  // with the model).
  absl::Status Init(const v1::InitRequest& request,
                    const std::function<void(const v1::InitEvent&)>& emit);

  // Runs one job in lock step with the other ranks. `client_cancelled` is polled at step
  // boundaries in addition to Cancel().
  absl::StatusOr<pipeline::GenerationResult> Run(const RunJob& job,
                                                 const pipeline::StepCallback& on_step,
                                                 const std::function<bool()>& client_cancelled);

  void Cancel(const std::string& job_id);
  v1::WorkerStatus Status() const;
  // The loaded model's card (after a successful Init).
  std::optional<pipeline::ModelCard> Card() const;

 private:
  absl::Status InitOnEngineThread(const v1::InitRequest& request,
                                  const std::function<void(const v1::InitEvent&)>& emit);
  absl::StatusOr<pipeline::GenerationResult> RunOnEngineThread(
      const RunJob& job, const pipeline::StepCallback& on_step,
      const std::function<bool()>& client_cancelled);
  bool CancelRequested(const std::string& job_id) const;
  // Copies `pipe`'s transformer graph counters for Status() (engine thread).
  void RecordGraphStats(const pipeline::Pipeline& pipe);

  const WorkerOptions options_;
  const EngineDeps deps_;

  // Engine-thread state (touched only by jobs on engine_).
  std::unique_ptr<DeviceBinding> binding_;
  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;

  // Read by Status() from any thread.
  std::atomic<bool> ready_{false};
  std::atomic<uint32_t> rank_{0};
  mutable std::mutex status_mu_;  // guards the fields below and the comm_ pointer for Stats()
  double load_seconds_ = 0;
  uint64_t weight_bytes_ = 0;
  torch::Device device_ = torch::kCPU;
  std::optional<pipeline::ModelCard> card_;

  mutable std::mutex cancel_mu_;
  std::deque<std::string> cancelled_jobs_;  // recent ids, bounded

  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> step_micros_{0};
  // The pipeline's transformer graph counters, copied on the engine thread after every job.
  std::atomic<uint64_t> graph_replays_{0};
  std::atomic<uint64_t> graph_captures_{0};

  // Last member: destroyed first, so queued jobs finish while the state above still exists.
  EngineThread engine_;
};

}  // namespace ditserve::worker
