#include "comm/agree.h"

#include <functional>

#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::comm {

namespace {

// `value` as a one-element int32 tensor on `device`, through `collective`, read back on the host
// (item() synchronises with the device stream on CUDA, which is what a decision needs).
absl::StatusOr<int32_t> OneElementCollective(
    const char* what, int32_t value, torch::Device device,
    const std::function<absl::Status(torch::Tensor&)>& collective) {
  torch::Tensor t;
  RETURN_IF_ERROR(GuardTorchStatus(what, [&] {
    t = torch::full({1}, value, torch::TensorOptions().dtype(torch::kInt32).device(device));
  }));
  RETURN_IF_ERROR(collective(t));
  return GuardTorch(what, [&] { return t.item<int32_t>(); });
}

}  // namespace

absl::StatusOr<int32_t> AgreeOnMax(Communicator& comm, int32_t local_value, torch::Device device) {
  if (comm.world_size() == 1) return local_value;  // nothing to agree on, nothing to wait for
  return OneElementCollective("AgreeOnMax", local_value, device,
                              [&](torch::Tensor& t) { return comm.AllReduceMax(t); });
}

absl::StatusOr<bool> AgreeOnFlag(Communicator& comm, bool local_flag, torch::Device device) {
  ASSIGN_OR_RETURN(int32_t max, AgreeOnMax(comm, local_flag ? 1 : 0, device));
  return max != 0;
}

absl::StatusOr<bool> FlagOfRank(Communicator& comm, bool flag, int root, torch::Device device) {
  if (comm.world_size() == 1 && root == 0) return flag;
  ASSIGN_OR_RETURN(int32_t value,
                   OneElementCollective("FlagOfRank", flag ? 1 : 0, device,
                                        [&](torch::Tensor& t) { return comm.Broadcast(t, root); }));
  return value != 0;
}

}  // namespace ditserve::comm
