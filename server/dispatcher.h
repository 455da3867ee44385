// Dispatcher: the single thread that takes batches from the admission queue and runs them on the
// worker group, one job at a time (the whole group works on one job), relaying progress and
// results to the waiting requests.
//
// It never polls: while a batch waits for the group to become ready or runs, the dispatcher
// sleeps on one Wakeup that the group's readiness listener and the batch's cancel listeners
// (PendingRequest::SetCancelListener) notify, plus a timer at the batch's last deadline. A job
// is cancelled on the ranks once every request of its batch is cancelled or expired.
//
// Threads: Start() / Join() / CancelRunning() from the owner's thread; the loop on its own thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/admission_queue.h"
#include "server/wakeup.h"
#include "server/worker_group.h"

namespace ditserve::server {

// Hooks for metrics; every member may be empty. Called from the dispatcher thread.
struct DispatchObserver {
  std::function<void(const PendingRequest&, double queue_seconds)> on_start;
  std::function<void(double step_seconds, uint32_t step)> on_step;  // once per job step
  std::function<void(const PendingRequest&, const absl::Status&)> on_dropped;
};

class Dispatcher {
 public:
  // `queue` and `group` must outlive the dispatcher.
  Dispatcher(AdmissionQueue* queue, WorkerGroup* group, size_t max_batch,
             DispatchObserver observer = {});
  ~Dispatcher();

  void Start();
  // Returns once the queue is closed and the current job (if any) has ended.
  void Join();
  // Waits until the loop has ended (the queue is closed and the last job is over) or `until`;
  // returns whether it has. True when never started.
  bool WaitUntilStopped(Clock::time_point until);
  // True while a batch is out of the queue (waiting for the group or running).
  bool busy() const { return busy_.load(); }
  // Cancels every request of the current batch with `why` (the drain's UNAVAILABLE); the job then
  // stops on the ranks at the next step boundary. No-op when idle.
  void CancelRunning(const absl::Status& why);

 private:
  void Loop();
  void RunBatch(const std::vector<std::shared_ptr<PendingRequest>>& batch);

  AdmissionQueue* const queue_;
  WorkerGroup* const group_;
  const size_t max_batch_;
  const DispatchObserver observer_;
  std::thread thread_;
  std::atomic<bool> busy_{false};
  uint64_t job_counter_ = 0;
  Wakeup wakeup_;
  int readiness_listener_ = -1;
  std::mutex batch_mu_;
  std::condition_variable stopped_cv_;
  bool running_ = false;  // under batch_mu_: the loop thread runs
  std::vector<std::shared_ptr<PendingRequest>> batch_;  // the current batch, for CancelRunning
};

}  // namespace ditserve::server
