// The CUDA variant's collective core: an RAII NCCL communicator over raw device pointers and
// cudaStream_t, with no LibTorch dependency (nccl_torch_communicator.h adapts it to Communicator).
//
// Rendezvous: rank 0 calls NcclGetUniqueId() and the frontend hands the 128 bytes to every rank
// (rank 0 included), which each call NcclComm::Create with the same id and world size, each on
// its own device. A re-formed group needs a fresh id.
//
// Contract:
// * Create and every call are bounded by timeout_ms: the communicator runs in NCCL's non-blocking
//   mode (NCCL >= 2.14) and polls ncclCommGetAsyncError; on timeout or an asynchronous error it
//   calls ncclCommAbort (which also ends this rank's kernels still waiting for a dead peer) and
//   returns UNAVAILABLE. CUDA/NCCL usage errors give INTERNAL or INVALID_ARGUMENT. After any
//   error the communicator is aborted and every later call returns the first error.
// * AllReduce / Broadcast / AllGather enqueue on `stream` and return once enqueued; the result is
//   ready when the stream reaches that point. Wait(stream) blocks (bounded) until it has, and is
//   the call that detects a peer that never joined: use it wherever the host needs a result.
// * All ranks issue the same calls in the same order. One thread at a time; rank()/world_size()
//   are constant. Destruction finalises a healthy communicator (bounded) and aborts otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ditserve::comm {

inline constexpr size_t kNcclUniqueIdBytes = 128;

// A fresh ncclUniqueId as 128 raw bytes (rank 0 only; it also starts NCCL's bootstrap listener).
absl::StatusOr<std::string> NcclGetUniqueId();

enum class NcclDataType { kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8, kInt8 };
enum class NcclReduceOp { kSum, kMax };

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  std::string unique_id;  // kNcclUniqueIdBytes bytes from NcclGetUniqueId on rank 0
  int device = 0;         // CUDA device ordinal of this rank; made current by Create
  int timeout_ms = 60000;
};

class NcclComm {
 public:
  static absl::StatusOr<std::unique_ptr<NcclComm>> Create(const NcclOptions& options);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int device() const { return device_; }

  // `count` elements; send == recv is the in-place form.
  absl::Status AllReduce(const void* send, void* recv, size_t count, NcclDataType type,
                         NcclReduceOp op, cudaStream_t stream);
  absl::Status Broadcast(const void* send, void* recv, size_t count, NcclDataType type, int root,
                         cudaStream_t stream);
  // recv holds world_size * send_count elements, rank r's at offset r * send_count.
  absl::Status AllGather(const void* send, void* recv, size_t send_count, NcclDataType type,
                         cudaStream_t stream);
  // Blocks until everything enqueued on `stream` so far has run, or timeout_ms passes.
  absl::Status Wait(cudaStream_t stream);
  // A one-element all-reduce on an internal buffer, then Wait: every rank has arrived.
  absl::Status Barrier(cudaStream_t stream);

  // The first error, or OK while healthy.
  const absl::Status& status() const { return broken_; }

 private:
  struct Impl;
  explicit NcclComm(std::unique_ptr<Impl> impl, int rank, int world_size, int device,
                    int timeout_ms);

  absl::Status Usable() const { return broken_; }
  // Polls until the last NCCL call has left the in-progress state; aborts on error or timeout.
  absl::Status Settle(const char* what);
  absl::Status Fail(absl::Status status);

  std::unique_ptr<Impl> impl_;
  const int rank_;
  const int world_size_;
  const int device_;
  const int timeout_ms_;
  absl::Status broken_;
};

}  // namespace ditserve::comm
