// EngineThread: the one thread on which a worker runs its jobs (group formation, loading, each
// generation), in submission order, one at a time, as llama.cpp's server loop does. The RPC handler
// threads hand it a job and wait; Cancel and Status are answered by the handlers themselves,
// without going through this thread, so they answer while a job runs.
//
// Ownership: owns its thread; the destructor finishes the queued jobs and joins.
// Thread-safety: Call may be called from any number of threads concurrently.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
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

  // Runs `job` on the engine thread after the jobs submitted before it and returns its result.
  // `job` must not throw (callers wrap torch code in GuardTorch).
  template <typename Fn>
  auto Call(Fn&& job) -> std::invoke_result_t<Fn&> {
    using R = std::invoke_result_t<Fn&>;
    std::packaged_task<R()> task(std::forward<Fn>(job));
    std::future<R> done = task.get_future();
    Post([&task] { task(); });
    return done.get();
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
