// The CUDA variant's Communicator: NcclComm (nccl_communicator.h) applied to LibTorch tensors.
// Built only with -DDITSERVE_CUDA=ON (needs LibTorch-CUDA).
//
// Contract (in addition to communicator.h and nccl_communicator.h):
// * CUDA tensors must be on this rank's device; collectives are enqueued on the calling thread's
//   current CUDA stream (c10::cuda::getCurrentCUDAStream) and return once enqueued.
// * CPU tensors are staged through the device and the call returns when the result is in place,
//   after a bounded wait on the stream (NcclComm::Wait). AgreeOnFlag uses a CPU flag, so the step
//   boundary is where a dead or stuck peer is detected, within timeout_ms.
// * Non-contiguous tensors go through a contiguous copy on the same stream.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/nccl_communicator.h"

namespace ditserve::comm {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options);

}  // namespace ditserve::comm
