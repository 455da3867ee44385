#include "worker/comm/agree.h"

#include "common/status_macros.h"
#include "common/torch_compat.h"

namespace ditserve::comm {

absl::StatusOr<bool> AgreeOnFlag(Communicator& comm, bool local_flag, torch::Device device) {
  torch::Tensor flag;
  RETURN_IF_ERROR(compat::GuardTorchStatus("AgreeOnFlag", [&] {
    flag = torch::full({1}, local_flag ? 1 : 0,
                       torch::TensorOptions().dtype(torch::kInt32).device(device));
  }));
  RETURN_IF_ERROR(comm.AllReduceMax(flag));
  // item() synchronises with the device stream on CUDA, which is what a decision needs.
  return compat::GuardTorch("AgreeOnFlag", [&] { return flag.item<int32_t>() != 0; });
}

}  // namespace ditserve::comm
