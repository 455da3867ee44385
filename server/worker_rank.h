// WorkerRank: one rank of the worker group as the frontend sees it: its address, its process
// (--spawn-workers mode), its channel and stub, and the one long-lived thread that makes the
// rank's long calls (Init while forming, Run during a job) on the group's behalf.
//
// Why a persistent thread per rank, fed through a queue, rather than a thread per call or gRPC's
// asynchronous API: the group used to start N threads per job (one per rank, each reading its
// rank's Run stream); now the N threads are started once per formation and reused for every
// job. The asynchronous APIs would remove the threads altogether, but rank 0's stream delivers
// the step events to RunControl::on_progress, which pushes events to the requests and takes the
// dispatcher's and the metrics' locks: on a thread of our own that callback may block without
// stalling gRPC's completion threads, and a call's code stays one sequential read loop (Read until
// the stream ends, then Finish) as the blocking API writes it.
//
// Threads: Post() from any thread; the posted calls run one at a time, in order, on the rank's
// thread. The destructor runs the calls already posted, then joins the thread: a caller that
// waits for its calls must hold a reference to the rank until they have ended (a running call is
// ended at once by ClientContext::TryCancel on its context). Never destroy a WorkerRank from its
// own thread (the posted calls must not own the rank). The other members are set before the rank
// is shared and read-only afterwards, except `hung`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "ditserve/worker/v1/worker.grpc.pb.h"
#include "server/worker_process.h"

namespace ditserve::server {

class WorkerRank {
 public:
  // `process` is null for a rank the frontend does not own (--workers). Opens the channel (the
  // connection is made lazily; see WaitForConnected) and starts the rank's thread.
  WorkerRank(std::string address, std::unique_ptr<WorkerProcess> process);
  ~WorkerRank();
  WorkerRank(const WorkerRank&) = delete;
  WorkerRank& operator=(const WorkerRank&) = delete;

  const std::string& address() const { return address_; }
  // Null in --workers mode.
  WorkerProcess* process() const { return process_.get(); }
  worker::v1::Worker::Stub& stub() const { return *stub_; }
  // Whether the channel connected before `deadline`.
  bool WaitForConnected(std::chrono::system_clock::time_point deadline) const;

  // Runs `call` on the rank's thread after the calls posted before it.
  void Post(std::function<void()> call);

  // Missed a heartbeat: re-forming kills its process without a grace period.
  std::atomic<bool> hung{false};

 private:
  void Serve();  // the rank's thread

  const std::string address_;
  const std::unique_ptr<WorkerProcess> process_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<worker::v1::Worker::Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> calls_;  // under mu_
  bool stopping_ = false;                    // under mu_
  std::thread thread_;
};

}  // namespace ditserve::server
