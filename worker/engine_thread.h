// EngineThread: the one thread on which a worker runs its jobs (group formation, loading, each
// generation), in submission order, one at a time, as llama.cpp's server loop does. The RPC handler
// threads hand it a job (Submit) and, while it runs, stream its progress to their clients
// (progress_queue.h) before they take its result; Cancel and Status are answered by the handlers
// themselves, without going through this thread, so they answer while a job runs.
//
// Ownership: owns its thread; the destructor finishes the queued jobs and joins.
// Thread-safety: Submit and Call may be called from any number of threads concurrently.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>

namespace ditserve::worker {

class EngineThread {
 public:
  EngineThread();
  ~EngineThread();
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  // Queues `job` to run on the engine thread after the jobs submitted before it and returns at once;
  // the future holds its result. `job` is moved into the queue (what it references must outlive
  // the future's readiness) and must not throw (callers wrap torch code in GuardTorch).
  template <typename Fn>
  auto Submit(Fn&& job) -> std::future<std::invoke_result_t<std::decay_t<Fn>&>> {
    using R = std::invoke_result_t<std::decay_t<Fn>&>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<Fn>(job));
    std::future<R> done = task->get_future();
    Post([task] { (*task)(); });
    return done;
  }

  // Submit, then wait for the result.
  template <typename Fn>
  auto Call(Fn&& job) -> std::invoke_result_t<std::decay_t<Fn>&> {
    return Submit(std::forward<Fn>(job)).get();
  }

  // True when called from the engine thread.
  bool IsEngineThread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void Post(std::function<void()> job);
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ditserve::worker
