// Engine: the state of one worker rank — its communicator, its loaded pipeline, the current job
// and its cancel flag. The gRPC service is a thin edge over it.
//
// Threads: Init, Run and Forward are serialised by an internal job mutex (one at a time; Init
// waits for a running job to end). Cancel and Status may be called from any thread at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "pipeline/pipeline.h"
#include "worker/comm/communicator.h"
#include "worker/worker_options.h"

namespace ditserve::worker {

class Engine {
 public:
  explicit Engine(WorkerOptions options);
  ~Engine();

  // Rank 0: creates the group's rendezvous (NCCL unique id, or the Gloo store address).
  absl::StatusOr<v1::Rendezvous> MakeRendezvous(uint32_t world_size);

  // Joins the group described by the request and loads this rank's shard. Replaces any previous
  // group and model. `emit` receives progress ("group", "load", then "ready" with the model).
  absl::Status Init(const v1::InitRequest& request,
                    const std::function<void(const v1::InitEvent&)>& emit);

  // Runs one job in lock step with the other ranks. `client_cancelled` is polled at step
  // boundaries in addition to Cancel().
  absl::StatusOr<v1::RunResult> Run(const v1::RunRequest& request,
                                    const std::function<void(const v1::StepProgress&)>& on_step,
                                    const std::function<bool()>& client_cancelled);

  absl::StatusOr<v1::ForwardResponse> Forward(const v1::ForwardRequest& request);

  void Cancel(const std::string& job_id);
  v1::WorkerStatus Status() const;

 private:
  bool CancelRequested(const std::string& job_id) const;

  const WorkerOptions options_;
  std::mutex job_mu_;  // serialises Init / Run / Forward
  std::unique_ptr<comm::Communicator> comm_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  std::atomic<bool> ready_{false};
  std::atomic<uint32_t> rank_{0};
  double load_seconds_ = 0;
  uint64_t weight_bytes_ = 0;

  mutable std::mutex cancel_mu_;
  std::deque<std::string> cancelled_jobs_;  // recent ids, bounded

  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> step_micros_{0};
  mutable std::mutex status_mu_;  // guards comm_ pointer reads from Status()
};

}  // namespace ditserve::worker
