// Wakeup: a condition variable with its own mutex, for one thread that waits on a condition made
// of several unrelated parts (rank calls finished, a request cancelled, the group became ready)
// whose owners only need to call Notify() after changing them. No timed polling: the waiter
// re-evaluates its condition exactly when notified, or at the deadline it passes.
//
// Thread-safe. Notify() may be called from any thread at any time, including before the wait
// starts (the condition is evaluated first, so no change is lost as long as it is made before
// Notify() is called).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace ditserve::server {

class Wakeup {
 public:
  void Notify() {
    // Taking the lock orders this notification after a waiter's evaluation of its condition.
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }

  // Waits until `done()` is true or `until` passes; returns done()'s last value. `done` is called
  // under the internal lock: it must not call Notify().
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(std::chrono::time_point<Clock, Duration> until, Pred done) {
    std::unique_lock<std::mutex> lock(mu_);
    if (until == std::chrono::time_point<Clock, Duration>::max()) {
      cv_.wait(lock, done);
      return true;
    }
    return cv_.wait_until(lock, until, done);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace ditserve::server
