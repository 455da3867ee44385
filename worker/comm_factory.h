// Chooses and creates the communicator of a rank: NCCL for CUDA devices (CUDA variant), Gloo over
// TCP for CPU devices, and a single-rank communicator for a group of one.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "worker/engine_types.h"

namespace ditserve::worker {

struct CommOptions {
  int rank = 0;
  torch::Device device = torch::kCPU;
  int timeout_ms = 300000;
  std::string listen_host = "127.0.0.1";  // Gloo: the address peers reach this rank at
};

// Rank 0 only, before Init: a fresh NCCL unique id (CUDA variant) and a free port for the Gloo
// store on `store_host`.
absl::StatusOr<GroupRendezvous> CreateRendezvous(uint32_t world_size, const std::string& store_host);

// Every rank, concurrently: joins the group. Blocks until all ranks joined or the timeout.
absl::StatusOr<std::unique_ptr<comm::Communicator>> CreateCommunicator(
    const GroupRendezvous& rendezvous, const CommOptions& options);

}  // namespace ditserve::worker
