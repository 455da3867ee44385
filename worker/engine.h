// Engine: the state of one worker rank (its device, communicator, loaded pipeline, the current job
// and its cancel flags) and the one thread that owns the device. It speaks typed values only
// (engine_types.h, pipeline/job.h); the gRPC service is a thin edge that decodes each RPC with
// worker/job_codec.h, submits it here, streams the job's progress and encodes the result.
//
// Threads: Init and Run submit a job to the engine thread (engine_thread.h) and return at once with
// its future; the jobs run there one at a time, in arrival order, with the rank's device current
// (bound once at Init, checked before every job). While a job runs the engine thread pushes its
// progress into the caller's ProgressQueue (progress_queue.h), never waiting on the caller, and
// closes the queue when the job ends, before the future is ready: the caller drains the queue on
// its own thread (writing to its client at the client's pace), then takes the result. Whatever the
// job references (the queue, the cancel predicate's state) must outlive the future's readiness.
// Cancel, Status and Card may be called from any thread at any time, also while a job runs.
// No exception leaves the engine: torch errors come back as Status (out of memory:
// RESOURCE_EXHAUSTED, the worker stays serving; anything else INTERNAL with the message).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "pipeline/pipeline.h"
#include "worker/comm_factory.h"
#include "worker/device_binding.h"
#include "worker/engine_thread.h"
#include "worker/engine_types.h"
#include "worker/progress_queue.h"
#include "worker/worker_options.h"

namespace ditserve::worker {

// Seams for tests; the defaults are the real loader, device binding and group formation.
struct EngineDeps {
  std::function<absl::StatusOr<std::unique_ptr<pipeline::Pipeline>>(const pipeline::PipelineOptions&,
                                                                     comm::Communicator*)>
      load_pipeline = pipeline::LoadPipeline;
  DeviceBindingFactory bind_device = BindTorchDevice;
  std::function<absl::StatusOr<std::unique_ptr<comm::Communicator>>(const GroupRendezvous&,
                                                                     const CommOptions&)>
      create_communicator = CreateCommunicator;
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
  absl::StatusOr<GroupRendezvous> MakeRendezvous(uint32_t world_size);

  // Binds the device, joins the group described by `config` and loads this rank's shard. Replaces
  // any previous group and model. Progress (group, load, warmup) goes into `progress` (may be null),
  // which is closed when Init ends; the future's report is the model the rank is ready with.
  std::future<absl::StatusOr<InitReport>> Init(InitConfig config,
                                               ProgressQueue<InitProgress>* progress);

  // Runs one job in lock step with the other ranks. On rank 0 each step's event goes into `progress`
  // (may be null): the frontend reads rank 0's progress only, the other ranks report just their
  // result. `progress` is closed when the job ends. `client_cancelled` (may be empty) is polled on
  // the engine thread at step boundaries in addition to Cancel().
  std::future<absl::StatusOr<pipeline::GenerationResult>> Run(
      RunJob job, ProgressQueue<pipeline::StepEvent>* progress,
      std::function<bool()> client_cancelled);

  void Cancel(const std::string& job_id);
  EngineStatus Status() const;
  // The loaded model's card (after a successful Init).
  std::optional<pipeline::ModelCard> Card() const;

 private:
  absl::StatusOr<InitReport> InitOnEngineThread(const InitConfig& config,
                                                ProgressQueue<InitProgress>* progress);
  absl::StatusOr<pipeline::GenerationResult> RunOnEngineThread(
      const RunJob& job, ProgressQueue<pipeline::StepEvent>* progress,
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
  std::atomic<uint64_t> cached_steps_{0};  // the successful jobs' GenerationResult::cached_steps
  // The pipeline's transformer graph counters, copied on the engine thread after every job.
  std::atomic<uint64_t> graph_replays_{0};
  std::atomic<uint64_t> graph_captures_{0};

  // Last member: destroyed first, so queued jobs finish while the state above still exists.
  EngineThread engine_;
};

}  // namespace ditserve::worker
