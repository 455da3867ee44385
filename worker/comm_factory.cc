#include "worker/comm_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "comm/free_port.h"
#ifdef DITSERVE_WITH_GLOO
#include "comm/gloo_communicator.h"
#endif
#include "comm/local_communicator.h"
#ifdef DITSERVE_WITH_CUDA
#include "comm/nccl_torch_communicator.h"
#endif

namespace ditserve::worker {

absl::StatusOr<GroupRendezvous> CreateRendezvous(uint32_t world_size,
                                                 const std::string& store_host) {
  GroupRendezvous r;
  r.world_size = world_size;
  r.store_host = store_host;
  ASSIGN_OR_RETURN(int port, comm::PickFreePort(store_host));
  r.store_port = static_cast<uint32_t>(port);
#ifdef DITSERVE_WITH_CUDA
  ASSIGN_OR_RETURN(r.nccl_unique_id, comm::NcclGetUniqueId());
#endif
  return r;
}

absl::StatusOr<std::unique_ptr<comm::Communicator>> CreateCommunicator(
    const GroupRendezvous& rendezvous, const CommOptions& options) {
  const int world = static_cast<int>(rendezvous.world_size);
  if (world == 1) return comm::MakeSingleRankCommunicator();
  if (options.device.is_cuda()) {
#ifdef DITSERVE_WITH_CUDA
    if (rendezvous.nccl_unique_id.empty()) {
      return absl::InvalidArgumentError("rendezvous has no NCCL unique id");
    }
    comm::NcclOptions nccl;
    nccl.rank = options.rank;
    nccl.world_size = world;
    nccl.unique_id = rendezvous.nccl_unique_id;
    nccl.device = options.device.index();
    nccl.timeout_ms = options.timeout_ms;
    return comm::CreateNcclCommunicator(nccl);
#else
    return absl::FailedPreconditionError("CUDA device requested in the CPU build");
#endif
  }
#ifdef DITSERVE_WITH_GLOO
  comm::GlooOptions gloo;
  gloo.rank = options.rank;
  gloo.world_size = world;
  gloo.store_host = rendezvous.store_host;
  gloo.store_port = static_cast<int>(rendezvous.store_port);
  gloo.group_id = rendezvous.group_id.empty() ? "ditserve" : rendezvous.group_id;
  gloo.listen_host = options.listen_host;
  gloo.timeout_ms = options.timeout_ms;
  // Ranks reach the rendezvous at different times (e.g. one is still starting up): allow longer.
  gloo.rendezvous_timeout_ms = std::max(options.timeout_ms, 120000);
  return comm::CreateGlooCommunicator(gloo);
#else
  return absl::FailedPreconditionError(
      "CPU ranks need the Gloo communicator, which this build leaves out (configure with "
      "-DDITSERVE_GLOO=ON)");
#endif
}

}  // namespace ditserve::worker
