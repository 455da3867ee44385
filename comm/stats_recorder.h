// Lock-free counters behind Communicator::Stats(): the job thread records, any thread reads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "comm/communicator.h"

namespace ditserve::comm {

class StatsRecorder {
 public:
  void RecordAllReduce(uint64_t bytes, std::chrono::steady_clock::duration elapsed) {
    count_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    nanos_.fetch_add(static_cast<uint64_t>(
                         std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
                     std::memory_order_relaxed);
  }

  void RecordReplayed(uint64_t count, uint64_t bytes) {
    count_.fetch_add(count, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }

  // Each field is read atomically; the three together are not one snapshot (fine for metrics).
  CommStats Snapshot() const {
    CommStats s;
    s.allreduce_count = count_.load(std::memory_order_relaxed);
    s.allreduce_bytes = bytes_.load(std::memory_order_relaxed);
    s.allreduce_seconds = static_cast<double>(nanos_.load(std::memory_order_relaxed)) * 1e-9;
    return s;
  }

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> nanos_{0};  // double has no atomic fetch_add in C++17
};

// Times one AllReduceSum call and records it on destruction (successful or not: the host time
// was spent either way).
class ScopedAllReduceTimer {
 public:
  ScopedAllReduceTimer(StatsRecorder& stats, uint64_t bytes)
      : stats_(stats), bytes_(bytes), start_(std::chrono::steady_clock::now()) {}
  ~ScopedAllReduceTimer() {
    stats_.RecordAllReduce(bytes_, std::chrono::steady_clock::now() - start_);
  }
  ScopedAllReduceTimer(const ScopedAllReduceTimer&) = delete;
  ScopedAllReduceTimer& operator=(const ScopedAllReduceTimer&) = delete;

 private:
  StatsRecorder& stats_;
  uint64_t bytes_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ditserve::comm
