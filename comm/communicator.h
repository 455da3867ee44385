// Collective communication among the ranks of one tensor-parallel group.
//
// Contract (all implementations):
// * Every rank of the group calls the same collectives in the same order with tensors of the same
//   shape and dtype; a rank that skips one leaves the others waiting until the collective timeout,
//   after which the communicator is aborted and every later call fails.
// * Tensors are on this rank's device; operations are in place. On CUDA they are enqueued on the
//   current CUDA stream of the calling thread (the worker's compute stream) and the call returns
//   once enqueued; on CPU the call returns when the result is in place.
// * One thread at a time per communicator (the worker's job thread). Stats() may be read from any
//   thread.
// * Errors come back as absl::Status (UNAVAILABLE for a broken group or timeout, INTERNAL
//   otherwise). After an error the communicator is unusable; the group must be re-formed.
#pragma once

#include <atomic>
#include <cstdint>

#include <torch/torch.h>

#include "absl/status/status.h"

namespace ditserve::comm {

struct CommStats {
  uint64_t allreduce_count = 0;
  uint64_t allreduce_bytes = 0;
  double allreduce_seconds = 0;  // host-side time spent in AllReduceSum calls
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  virtual absl::Status AllReduceSum(torch::Tensor& tensor) = 0;
  // Element-wise max; used for the collective cancel/error flag at each step boundary.
  virtual absl::Status AllReduceMax(torch::Tensor& tensor) = 0;
  virtual absl::Status Broadcast(torch::Tensor& tensor, int root) = 0;
  // `output` has world_size x the elements of `input` and receives the ranks' inputs in rank
  // order along dim 0.
  virtual absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) = 0;
  virtual absl::Status Barrier() = 0;

  virtual CommStats Stats() const = 0;
  // Whether a CUDA graph may capture this communicator's collectives (models/common/step_graphs.h):
  // each is only enqueued on the calling thread's current CUDA stream (NCCL), or there is nothing
  // to enqueue (a group of one, the projection's counting). False for host-side rendezvous (Gloo,
  // the in-process group): a capture would record one rank's part of the exchange.
  virtual bool CapturableCollectives() const { return false; }
  // All-reduces that ran inside a replayed CUDA graph (models/common/step_graphs.h): the graph
  // issued them without calling AllReduceSum, so it reports them here for Stats() (no host time).
  virtual void RecordReplayedAllReduces(uint64_t count, uint64_t bytes) {
    (void)count;
    (void)bytes;
  }
};

}  // namespace ditserve::comm
