// WorkerGroup: the frontend's view of the tensor-parallel worker group.
//
// It owns the ranks (server/worker_rank.h: the connections and, in --spawn-workers mode, the worker
// processes), forms the group (GetRendezvous on rank 0, then Init on every rank concurrently),
// re-forms it after any failure (new rendezvous, respawned processes, reload), and fans each job
// out to every rank in lock step. Each rank's long calls (Init, Run) run on that rank's one
// long-lived thread (WorkerRank::Post), so a job starts no thread.
//
// Failure handling in Run() (server/group_job.h runs the job's calls): the first rank that fails
// (its stream ends with an error the frontend did not ask for, e.g. a dead process or a collective
// that timed out on a peer) breaks the group: the other ranks' calls are abandoned at once (a hung
// rank is never waited for), the job fails UNAVAILABLE, readiness turns false and the control
// thread re-forms the group. The codes for which common/group_survival.h's GroupSurvives holds
// (INVALID_ARGUMENT, RESOURCE_EXHAUSTED: agreed by every rank before the denoising loop) leave the
// group intact. A cancel (should_cancel) sends Cancel to every rank; they stop at the same step
// boundary and the job ends CANCELLED with the group intact, unless they do not stop within the
// collective timeout + 5 s (then the group is broken).
//
// Failed formations: a rank's Init that fails with a code for which IsPermanentInitError holds
// (the workers refuse the model folder or a setting: retrying soon cannot help) is logged once at
// ERROR and retried after WorkerGroupOptions::permanent_retry_backoff, doubling up to
// permanent_retry_max, with one INFO line per retry (ERROR again when the error changes or after
// RetryNow()). Any other failure (a rank unreachable, a crashed or missing worker, a timeout, no
// memory at load) is retried after retry_backoff, doubling up to 10 s, as transient. RetryNow()
// (SIGHUP) cuts a wait short, for an operator who fixed the folder. formation_failure() says why
// the group is not formed.
//
// Threads: a private control thread forms and supervises the group; it sleeps until the group
// breaks (Run, a spawned process's exit, a missed heartbeat), RetryNow() or Shutdown(). A private
// heartbeat thread pings the ranks of a ready group (WorkerGroupOptions::heartbeat_*). Run() is
// called by one dispatcher thread at a time. Every other public method may be called from any
// thread.
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
#include "server/group_job.h"
#include "server/worker_rank.h"

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
  // failed formation that was not permanent (doubling up to 10 s).
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds retry_backoff{500};
  // The first retry delay after a formation that failed permanently (IsPermanentInitError),
  // doubling up to permanent_retry_max.
  std::chrono::milliseconds permanent_retry_backoff{10000};
  std::chrono::milliseconds permanent_retry_max{300000};
  // Hang detection while the group is ready: every heartbeat_interval each rank gets a GetStatus
  // call (answered by the worker's RPC threads, also during a job); one not answered within
  // heartbeat_timeout breaks the group as a failed rank would (a job in progress ends UNAVAILABLE,
  // re-forming kills spawned processes, the stuck one with SIGKILL). 0: no heartbeat.
  std::chrono::milliseconds heartbeat_interval{5000};
  std::chrono::milliseconds heartbeat_timeout{15000};
};

// Whether a rank's Init that failed with `code` failed for good, until someone changes the model
// folder or the settings: INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND, UNIMPLEMENTED (a bad
// or missing model file, a refused setting). Every other code (UNAVAILABLE, DEADLINE_EXCEEDED,
// RESOURCE_EXHAUSTED at load, INTERNAL, a rank that went away) may pass on a retry.
bool IsPermanentInitError(absl::StatusCode code);

// Why the group is not formed: the last formation's error.
struct FormationFailure {
  absl::Status status;     // the first permanent rank error, else the first error
  bool permanent = false;  // IsPermanentInitError(status.code()) from a rank's Init
  uint64_t attempts = 0;   // consecutive failed formations, this one included
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
  // cancelled (RunControl) and the ranks stopped at a step boundary; the ranks' own code when
  // they refused the job and the group survives it (INVALID_ARGUMENT, RESOURCE_EXHAUSTED).
  absl::StatusOr<worker::v1::RunResult> Run(const worker::v1::RunRequest& request,
                                            const RunControl& control);

  // Each ready rank's status (memory, counters); ranks that do not answer in time are left out.
  std::vector<worker::v1::WorkerStatus> CollectStatus(std::chrono::milliseconds timeout) const;

  // Forms the group at once if it is not formed: cuts the wait before the next attempt short
  // (an attempt in progress is followed by the next one at once if it fails) and restarts the
  // permanent backoff. No effect on a formed group. (SIGHUP, for an operator who fixed the model.)
  void RetryNow();
  // Why the group is not formed, while the last formation attempt failed; nullopt once it forms
  // (and before the first attempt ends).
  std::optional<FormationFailure> formation_failure() const;

  // Total number of times the group has been (re-)formed successfully.
  uint64_t formations() const { return formations_.load(); }
  // Total number of failed formations classified permanent (IsPermanentInitError).
  uint64_t permanent_failures() const { return permanent_failures_.load(); }

 private:
  using Ranks = std::vector<std::shared_ptr<WorkerRank>>;
  struct RetryState;  // the control thread's retry delays (worker_group.cc)

  void ControlLoop();
  // Waits until the group needs forming; false on Shutdown().
  bool WaitUntilBroken();
  // Records a failed formation, logs it, and returns how long to wait before the next attempt.
  std::chrono::milliseconds OnFormationFailed(const absl::Status& status, bool permanent,
                                              RetryState& retry);
  // Waits `delay`; true when RetryNow() cut it short.
  bool WaitToRetry(std::chrono::milliseconds delay);
  void HeartbeatLoop();
  // One round of GetStatus calls to `ranks`, concurrently; the index of the first rank that did
  // not answer (and why), or -1.
  int PingRanks(const Ranks& ranks, std::string* why);
  // A rank of the current group is hung: fails the running job through it, else breaks the group.
  void OnHung(const std::shared_ptr<WorkerRank>& rank, int index, const std::string& why);
  // One formation attempt; *permanent tells a failure that retrying soon cannot mend.
  absl::Status Form(bool* permanent);
  absl::StatusOr<worker::v1::Rendezvous> GetRendezvous(const Ranks& ranks, uint64_t generation);
  // Init on every rank concurrently (each on its rank's thread); every rank's model description.
  absl::Status InitRanks(const Ranks& ranks, const worker::v1::Rendezvous& rendezvous,
                         std::vector<worker::v1::ModelDescription>* models, bool* permanent);
  absl::Status InitRank(WorkerRank& rank, uint32_t index, const worker::v1::Rendezvous& rendezvous,
                        worker::v1::ModelDescription* model);
  absl::Status ConnectRanks();
  absl::StatusOr<Ranks> SpawnRanks();
  void OnProcessExit(uint64_t generation, int index);
  void MarkBroken(const std::string& why);
  void SetReady(bool ready);

  const WorkerGroupOptions options_;
  std::thread control_;
  std::thread heartbeat_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool broken_ = true;  // needs (re-)forming
  bool retry_now_ = false;  // RetryNow() while broken_: the next attempt without waiting
  std::optional<FormationFailure> failure_;  // the last attempt's failure, until one succeeds
  Ranks ranks_;
  uint64_t rank_generation_ = 0;  // bumped with each set of spawned processes
  std::optional<worker::v1::ModelDescription> model_;
  std::shared_ptr<GroupJob> job_;  // the running job, for Shutdown() and OnHung()
  std::vector<grpc::ClientContext*> forming_;  // the Init calls in progress, for Shutdown()
  std::vector<grpc::ClientContext*> pinging_;  // the heartbeat calls in progress, for Shutdown()
  std::atomic<bool> ready_{false};
  std::atomic<uint64_t> formations_{0};
  std::atomic<uint64_t> permanent_failures_{0};
  uint64_t group_counter_ = 0;

  std::mutex listeners_mu_;  // held while listeners run
  std::map<int, std::function<void(bool)>> listeners_;
  int next_listener_ = 0;
};

}  // namespace ditserve::server
