// WorkerGroup: the frontend's view of the tensor-parallel worker group.
//
// It owns the connections to the ranks (and, in --spawn-workers mode, the worker processes),
// forms the group (GetRendezvous on rank 0, then Init on every rank concurrently), re-forms it
// after any failure (new rendezvous, respawned processes, reload), and fans each job out to every
// rank in lock step.
//
// Threads: a private control thread forms and supervises the group. Run() is called by one
// dispatcher thread at a time. ready(), model() and CollectStatus() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.grpc.pb.h"
#include "server/worker_process.h"

namespace ditserve::server {

struct WorkerGroupOptions {
  std::vector<std::string> remote_addresses;  // non-empty: connect to these, in rank order
  uint32_t spawn_count = 1;                   // otherwise: spawn this many local workers
  std::string worker_binary;
  std::string worker_host = "127.0.0.1";
  std::vector<std::string> worker_extra_args;
  worker::v1::InitRequest init_template;  // model_dir, device, dtype, staging, timeout
  std::chrono::milliseconds init_timeout{1800000};
  std::chrono::milliseconds collective_timeout{300000};
};

class WorkerGroup {
 public:
  explicit WorkerGroup(WorkerGroupOptions options);
  ~WorkerGroup();

  // Starts the control thread, which forms the group in the background.
  void Start();
  // Stops supervising, shuts spawned workers down. Idempotent.
  void Shutdown();

  bool ready() const { return ready_.load(); }
  uint32_t world_size() const;
  std::optional<worker::v1::ModelDescription> model() const;
  // Called (from the control thread) whenever readiness changes.
  void SetReadinessListener(std::function<void(bool ready)> listener);

  // Runs one job on every rank. UNAVAILABLE when the group is not ready or breaks during the job
  // (the group is then re-formed in the background); CANCELLED when should_cancel() turned true
  // and the ranks stopped at a step boundary. `on_progress` receives rank 0's step events.
  absl::StatusOr<worker::v1::RunResult> Run(
      const worker::v1::RunRequest& request,
      const std::function<void(const worker::v1::StepProgress&)>& on_progress,
      const std::function<bool()>& should_cancel);

  // Each ready rank's status (memory, counters); ranks that do not answer in time are left out.
  std::vector<worker::v1::WorkerStatus> CollectStatus(std::chrono::milliseconds timeout) const;

  // Total number of times the group has been (re-)formed successfully.
  uint64_t formations() const { return formations_.load(); }

 private:
  struct Rank {
    std::string address;
    std::unique_ptr<WorkerProcess> process;  // spawned mode only
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<worker::v1::Worker::Stub> stub;
  };

  void ControlLoop();
  absl::Status Form();
  absl::Status ConnectRanks();
  void MarkBroken(const std::string& why);
  void SetReady(bool ready);

  const WorkerGroupOptions options_;
  std::thread control_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool broken_ = true;  // needs (re-)forming
  std::vector<std::shared_ptr<Rank>> ranks_;
  std::optional<worker::v1::ModelDescription> model_;
  std::function<void(bool)> listener_;
  std::atomic<bool> ready_{false};
  std::atomic<uint64_t> formations_{0};
  uint64_t group_counter_ = 0;
};

}  // namespace ditserve::server
