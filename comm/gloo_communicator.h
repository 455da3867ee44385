// The CPU variant's communicator: LibTorch's c10d ProcessGroupGloo over TCP, one process per rank.
//
// Rendezvous: rank 0 hosts a c10d TCPStore on store_host:store_port (choose the port with
// PickFreePort in free_port.h and hand it to every rank together with a fresh group_id); all
// ranks call CreateGlooCommunicator with the same store address, world_size and group_id. Keys
// are prefixed with group_id, so a re-formed group never reads a previous group's keys.
//
// Contract (in addition to communicator.h):
// * CreateGlooCommunicator blocks until all world_size ranks have joined, or fails with
//   UNAVAILABLE after rendezvous_timeout_ms (then timeout_ms for connecting the transport).
// * Tensors must be CPU tensors (float32, float64, bfloat16, float16, int32, int64, uint8, int8).
//   Non-contiguous tensors are handled through a contiguous copy.
// * Every collective is bounded by timeout_ms: a peer that dies breaks the connections and the
//   call fails with UNAVAILABLE (at once for its neighbours, within timeout_ms for the rest); a
//   peer that hangs makes the call fail after timeout_ms. A local misuse (bad root, shape) fails
//   with INVALID_ARGUMENT. After any failure this communicator returns that error from every
//   call; re-form the group with a new group_id.
// * On failure the Gloo context is torn down at once, closing its sockets, so the other ranks
//   stop waiting too instead of running into their own timeouts.
// * The process ignores SIGPIPE from the first CreateGlooCommunicator on (a dead peer's socket
//   must give an error, not kill the process); gRPC does the same.
// * One thread at a time (the job thread); Stats() from any thread. Destruction does not block
//   beyond timeout_ms.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace ditserve::comm {

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // The TCPStore that rank 0 hosts and every rank (rank 0 included) connects to.
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  // Key prefix of this incarnation of the group (e.g. "job-group-7"); must be non-empty.
  std::string group_id;
  // The address this rank's Gloo transport listens on for its peers' connections.
  std::string listen_host = "127.0.0.1";
  // Bounds every collective (and the Gloo connection set-up once all ranks are present).
  int timeout_ms = 60000;
  // Bounds the wait for all ranks to show up at the store (ranks may start far apart, e.g. while
  // loading weights); <= 0 means timeout_ms.
  int rendezvous_timeout_ms = 0;
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options);

}  // namespace ditserve::comm
