#include "comm/agree.h"

#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::comm {

absl::StatusOr<int32_t> AgreeOnMax(Communicator& comm, int32_t local_value, torch::Device device) {
  torch::Tensor value;
  RETURN_IF_ERROR(GuardTorchStatus("AgreeOnMax", [&] {
    value = torch::full({1}, local_value,
                        torch::TensorOptions().dtype(torch::kInt32).device(device));
  }));
  RETURN_IF_ERROR(comm.AllReduceMax(value));
  // item() synchronises with the device stream on CUDA, which is what a decision needs.
  return GuardTorch("AgreeOnMax", [&] { return value.item<int32_t>(); });
}

absl::StatusOr<bool> AgreeOnFlag(Communicator& comm, bool local_flag, torch::Device device) {
  ASSIGN_OR_RETURN(int32_t max, AgreeOnMax(comm, local_flag ? 1 : 0, device));
  return max != 0;
}

absl::StatusOr<bool> FlagOfRank(Communicator& comm, bool flag, int root, torch::Device device) {
  torch::Tensor value;
  RETURN_IF_ERROR(GuardTorchStatus("FlagOfRank", [&] {
    value = torch::full({1}, flag ? 1 : 0,
                        torch::TensorOptions().dtype(torch::kInt32).device(device));
  }));
  RETURN_IF_ERROR(comm.Broadcast(value, root));
  return GuardTorch("FlagOfRank", [&] { return value.item<int32_t>() != 0; });
}

}  // namespace ditserve::comm
