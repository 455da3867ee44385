// Test support: an in-process fake of the ditserve.worker.v1.Worker service, one gRPC server per
// rank on loopback ports, for unit tests of the frontend (WorkerGroup in --workers mode, the
// dispatcher, the public service) without LibTorch or worker processes.
//
// The fake ranks keep the real protocol's shape (worker.proto's call order):
//   - GetRendezvous names a group; Init joins it: every rank must Init with the same group id
//     within the collective timeout (InitRequest.collective_timeout_ms), as the real group forms.
//   - Run executes `steps` steps in lock step: at each step boundary the ranks agree on a cancel
//     flag (set by a Cancel RPC for that job on any rank, or by the caller cancelling a rank's
//     stream), then "compute" (the per-step delay) and meet in one collective. A collective that
//     a peer never reaches fails with UNAVAILABLE after the collective timeout; one whose peer
//     died fails with UNAVAILABLE at once (like Gloo's connection reset). Rank 0 returns one
//     GenerateResponse per RunItem; the others return an empty result. Every rank's result counts
//     the job's transformer passes: with RunRequest.cache_threshold 0 every step is a full pass,
//     else the first step is full and the others are "cached" (a stand-in for First Block Cache).
//   - GetStatus reports readiness and the rank's executed-step and cached-pass counters; Cancel
//     and Shutdown are recorded.
// The fake model offers the step cache up to 1.0 (ModelDescription.step_cache).
// Scriptable per rank (FakeRankScript): step count, per-step delay, a failing Init, death at
// step N (the rank's server stops: its streams abort, connections are refused until Restart()),
// a hang at step N (the rank stops answering its stream until the caller cancels it). Recorded
// per rank: every job (id, request ids, batch size, shape, steps done, outcome, cancel seen),
// Cancel calls, Init calls.
//
// Threads: gRPC's server threads run the handlers; every public method is thread-safe. WaitFor()
// is woken by every recorded change, so tests never sleep-poll.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.grpc.pb.h"

namespace ditserve::testing {

struct FakeRankScript {
  uint32_t steps = 0;  // steps per job; 0 = the request's num_inference_steps
  std::chrono::milliseconds step_delay{10};
  absl::Status init_error;  // non-OK: Init fails with it (after the "group" event)
  // > 0: the next job that reaches this (1-based) step on this rank ends there: the rank dies
  // (die) or stops answering (hang). One-shot: cleared when it fires.
  uint32_t die_at_step = 0;
  uint32_t hang_at_step = 0;
};

// One Run call as a rank saw it.
struct FakeJobRecord {
  std::string job_id;
  std::vector<std::string> request_ids;
  size_t batch_size = 0;
  uint32_t height = 0;
  uint32_t width = 0;
  uint32_t steps = 0;       // the steps the job was to run
  uint32_t steps_done = 0;  // the last completed step: where the rank stopped
  double cache_threshold = 0;    // RunRequest.cache_threshold
  bool cancel_received = false;  // a Cancel RPC for this job reached this rank
  // "running", "ok", "cancelled" (stopped at a boundary), "died", "hung", or "failed: <why>".
  std::string outcome = "running";
};

class FakeWorkerCluster {
 public:
  explicit FakeWorkerCluster(int world_size);
  ~FakeWorkerCluster();  // stops every rank (ends hung calls)
  FakeWorkerCluster(const FakeWorkerCluster&) = delete;
  FakeWorkerCluster& operator=(const FakeWorkerCluster&) = delete;

  // Starts one server per rank on 127.0.0.1 (ports chosen by the OS).
  absl::Status Start();
  std::vector<std::string> addresses() const;
  int world_size() const { return world_size_; }

  void SetScript(int rank, const FakeRankScript& script);
  // While held, every Init waits (after its "group" event) until released: a re-forming group
  // stays not ready for as long as a test needs to look at it.
  void HoldInit(bool hold);
  // Serves a rank that died again, on its old port (a restarted worker: not initialised).
  absl::Status Restart(int rank);
  bool alive(int rank) const;

  // Observations (copies).
  std::vector<FakeJobRecord> jobs(int rank) const;
  std::vector<std::string> cancels(int rank) const;  // job ids of the Cancel calls, in order
  int init_calls(int rank) const;                    // Init calls received
  int ready_inits(int rank) const;                   // Init calls that reached "ready"
  uint64_t steps_executed(int rank) const;           // GetStatus's `steps`
  uint64_t cached_steps(int rank) const;             // GetStatus's `cached_steps`
  std::vector<worker::v1::InitRequest> init_requests(int rank) const;

  // Waits until `done()` is true (evaluated without the cluster's lock, so it may call the
  // observers) or `timeout`; re-evaluated after every change the cluster records.
  bool WaitFor(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  class Service;
  struct Rank {
    int port = 0;
    std::unique_ptr<Service> service;
    std::unique_ptr<grpc::Server> server;
    std::thread killer;  // stops the server of a rank that died (not from its own handler)
    bool alive = false;
    bool ready = false;
    uint64_t incarnation = 0;  // bumped when the rank dies
    std::string group_id;      // the group the rank joined by its last Init
    std::set<std::string> left_groups;  // groups it was in and left (failure, abandon, death)
    bool init_failed = false;  // its last Init failed (its peers stop waiting for it)
    uint32_t collective_timeout_ms = 300000;
    FakeRankScript script;
    std::vector<FakeJobRecord> jobs;
    std::vector<std::string> cancels;
    std::vector<worker::v1::InitRequest> inits;
    int ready_inits = 0;
    uint64_t steps = 0;
    uint64_t cached_steps = 0;
  };
  // One collective: who arrived, and the OR of their flags.
  struct Meeting {
    std::vector<bool> arrived;
    size_t count = 0;
    bool flag = false;
  };

  absl::Status StartRank(int rank, int port);  // requires !rank alive
  void Changed();                               // requires mu_: wakes every waiter
  static void Leave(Rank& rank);                // requires mu_: leaves its group
  // The rank dies: refuses its peers at once, then stops its server from another thread.
  void Die(int rank);  // requires mu_
  // Meets the other ranks of `rank`'s group at `key`; returns the OR of every rank's `flag`.
  // UNAVAILABLE when a peer is gone or the collective timeout passes; CANCELLED when `abort()`
  // (checked every 5 ms: the caller's stream) turns true first.
  absl::StatusOr<bool> Meet(std::unique_lock<std::mutex>& lock, int rank, const std::string& key,
                            bool flag, const std::function<bool()>& abort);
  // Waits (interruptibly) for `d`, or until `abort()` / the cluster stops; false if interrupted.
  bool Sleep(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds d,
             const std::function<bool()>& abort);

  grpc::Status GetRendezvous(int rank, const worker::v1::GetRendezvousRequest& req,
                             worker::v1::Rendezvous* resp);
  grpc::Status Init(int rank, grpc::ServerContext* ctx, const worker::v1::InitRequest& req,
                    grpc::ServerWriter<worker::v1::InitEvent>* writer);
  grpc::Status Run(int rank, grpc::ServerContext* ctx, const worker::v1::RunRequest& req,
                   grpc::ServerWriter<worker::v1::RunEvent>* writer);
  grpc::Status Cancel(int rank, const worker::v1::CancelRequest& req);
  grpc::Status GetStatus(int rank, worker::v1::WorkerStatus* resp);

  const int world_size_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  uint64_t changes_ = 0;  // bumped by Changed(); WaitFor waits for it to move
  bool stopping_ = false;
  bool hold_init_ = false;
  uint64_t rendezvous_ = 0;
  std::vector<Rank> ranks_;
  std::map<std::string, Meeting> meetings_;
};

}  // namespace ditserve::testing
