// WorkerGroup: the frontend's view of the tensor-parallel worker group.
//
// It owns the connections to the ranks (and, in --spawn-workers mode, the worker processes),
// forms the group (GetRendezvous on rank 0, then Init on every rank concurrently), re-forms it
// after any failure (new rendezvous, respawned processes, reload), and fans each job out to every
// rank in lock step.
//
// Failure handling in Run(): the first rank that fails (its stream ends with an error the
// frontend did not ask for, e.g. a dead process or a collective that timed out on a peer) breaks
// the group: the other ranks' calls are abandoned at once (a hung rank is never waited for), the
// job fails UNAVAILABLE, readiness turns false and the control thread re-forms the group.
// INVALID_ARGUMENT from the ranks leaves the group intact. A cancel (should_cancel) sends Cancel
// to every rank; they stop at the same step boundary and the job ends CANCELLED with the group
// intact, unless they do not stop within the collective timeout + 5 s (then the group is broken).
//
// Threads: a private control thread forms and supervises the group; it sleeps until the group
// breaks (Run, a spawned process's exit, a missed heartbeat) or Shutdown(). A private heartbeat
// thread pings the ranks of a ready group (WorkerGroupOptions::heartbeat_*). Run() is called by one dispatcher thread
// at a time. ready(), model(), CollectStatus() and the listener calls may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.grpc.pb.h"
#include "server/deadline.h"
#include "server/wakeup.h"
#include "server/worker_process.h"

namespace ditserve::server {

struct WorkerGroupOptions {
  std::vector<std::string> remote_addresses;  // non-empty: connect to these, in rank order
  uint32_t spawn_count = 1;                   // otherwise: spawn this many local workers
  std::string worker_binary;
  std::string worker_host = "127.0.0.1";
  std::vector<std::string> worker_extra_args;
  worker::v1::InitRequest init_template;  // model_dir, device, dtype, staging, timeout, loras
  std::chrono::milliseconds init_timeout{1800000};
  std::chrono::milliseconds collective_timeout{300000};
  // How long forming waits for a rank's channel to connect, and the first retry delay after a
  // failed formation (doubling up to 10 s).
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds retry_backoff{500};
  // Hang detection while the group is ready: every heartbeat_interval each rank gets a GetStatus
  // call (answered by the worker's RPC threads, also during a job); one not answered within
  // heartbeat_timeout breaks the group as a failed rank would (a job in progress ends UNAVAILABLE,
  // re-forming kills spawned processes, the stuck one with SIGKILL). 0: no heartbeat.
  std::chrono::milliseconds heartbeat_interval{5000};
  std::chrono::milliseconds heartbeat_timeout{15000};
};

// How the dispatcher drives one job through Run(). Every member may be empty.
struct RunControl {
  // Rank 0's step events, on the thread reading rank 0's stream.
  std::function<void(const worker::v1::StepProgress&)> on_progress;
  // Evaluated (under `wakeup`'s lock: no blocking, no Notify) when `wakeup` is notified and at
  // `cancel_at`; once true the job is cancelled on every rank. Whoever makes it true must call
  // wakeup->Notify().
  std::function<bool()> should_cancel;
  Wakeup* wakeup = nullptr;  // null: Run uses its own, and only `cancel_at` can cancel
  // The job is cancelled at this time even if nobody notifies (e.g. every request's deadline).
  Clock::time_point cancel_at = Clock::time_point::max();
};

class WorkerGroup {
 public:
  explicit WorkerGroup(WorkerGroupOptions options);
  ~WorkerGroup();

  // Starts the control thread, which forms the group in the background.
  void Start();
  // Stops supervising, abandons a running job (its Run returns UNAVAILABLE), shuts spawned
  // workers down. Idempotent.
  void Shutdown();

  bool ready() const { return ready_.load(); }
  uint32_t world_size() const;
  std::optional<worker::v1::ModelDescription> model() const;
  // `listener` is called whenever readiness changes, from the thread that changed it (the
  // control thread, or the dispatcher thread when a job breaks the group), never concurrently
  // with itself. Returns an id for RemoveReadinessListener, which waits for a call in progress.
  int AddReadinessListener(std::function<void(bool ready)> listener);
  void RemoveReadinessListener(int id);

  // Runs one job on every rank. UNAVAILABLE when the group is not ready, shuts down, or breaks
  // during the job (the group is then re-formed in the background); CANCELLED when the job was
  // cancelled (RunControl) and the ranks stopped at a step boundary; INVALID_ARGUMENT when the
  // ranks rejected the job.
  absl::StatusOr<worker::v1::RunResult> Run(const worker::v1::RunRequest& request,
                                            const RunControl& control);

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
    std::atomic<bool> hung{false};  // missed a heartbeat: re-forming kills it without a grace
  };
  struct Job;  // the rank calls of the running job (worker_group.cc)

  void ControlLoop();
  void HeartbeatLoop();
  // One round of GetStatus calls to `ranks`, concurrently; the index of the first rank that did
  // not answer (and why), or -1.
  int PingRanks(const std::vector<std::shared_ptr<Rank>>& ranks, std::string* why);
  // A rank of the current group is hung: fails the running job through it, else breaks the group.
  void OnHung(const std::shared_ptr<Rank>& rank, int index, const std::string& why);
  absl::Status Form();
  absl::Status ConnectRanks();
  void OnProcessExit(const Rank* rank, int index);
  void MarkBroken(const std::string& why);
  void SetReady(bool ready);

  const WorkerGroupOptions options_;
  std::thread control_;
  std::thread heartbeat_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool broken_ = true;  // needs (re-)forming
  std::vector<std::shared_ptr<Rank>> ranks_;
  std::optional<worker::v1::ModelDescription> model_;
  std::shared_ptr<Job> job_;  // the running job, for Shutdown()
  std::vector<grpc::ClientContext*> forming_;  // the Init calls in progress, for Shutdown()
  std::vector<grpc::ClientContext*> pinging_;  // the heartbeat calls in progress, for Shutdown()
  std::atomic<bool> ready_{false};
  std::atomic<uint64_t> formations_{0};
  uint64_t group_counter_ = 0;

  std::mutex listeners_mu_;  // held while listeners run
  std::map<int, std::function<void(bool)>> listeners_;
  int next_listener_ = 0;
};

}  // namespace ditserve::server
