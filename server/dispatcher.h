// Dispatcher: the single thread that takes batches from the admission queue and runs them on the
// worker group, one job at a time (the whole group works on one job), relaying progress and
// results to the waiting requests.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "server/admission_queue.h"
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
  Dispatcher(AdmissionQueue* queue, WorkerGroup* group, size_t max_batch,
             DispatchObserver observer = {});
  ~Dispatcher();

  void Start();
  // Returns once the queue is closed and the current job (if any) has ended.
  void Join();
  // True while a job runs.
  bool busy() const { return busy_.load(); }

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
};

}  // namespace ditserve::server
