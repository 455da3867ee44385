#include "comm/nccl_torch_communicator.h"

#include <c10/cuda/CUDAStream.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "comm/stats_recorder.h"

namespace ditserve::comm {
namespace {

absl::StatusOr<NcclDataType> ToNcclType(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return NcclDataType::kFloat32;
    case torch::kFloat16: return NcclDataType::kFloat16;
    case torch::kBFloat16: return NcclDataType::kBFloat16;
    case torch::kFloat64: return NcclDataType::kFloat64;
    case torch::kInt32: return NcclDataType::kInt32;
    case torch::kInt64: return NcclDataType::kInt64;
    case torch::kUInt8: return NcclDataType::kUInt8;
    case torch::kInt8: return NcclDataType::kInt8;
    case torch::kBool: return NcclDataType::kUInt8;  // max of 0/1 bytes is logical or
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL: unsupported dtype ", c10::toString(t)));
  }
}

class NcclTorchCommunicator final : public Communicator {
 public:
  explicit NcclTorchCommunicator(std::unique_ptr<NcclComm> core)
      : core_(std::move(core)), device_(torch::kCUDA, static_cast<int8_t>(core_->device())) {}

  int rank() const override { return core_->rank(); }
  int world_size() const override { return core_->world_size(); }
  bool CapturableCollectives() const override { return true; }

  absl::Status AllReduceSum(torch::Tensor& tensor) override {
    ScopedAllReduceTimer timer(stats_, tensor.defined() ? tensor.nbytes() : 0);
    return InPlace("AllReduceSum", tensor, [&](torch::Tensor& t, NcclDataType type,
                                               cudaStream_t s) {
      return core_->AllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, NcclReduceOp::kSum, s);
    });
  }

  absl::Status AllReduceMax(torch::Tensor& tensor) override {
    return InPlace("AllReduceMax", tensor, [&](torch::Tensor& t, NcclDataType type,
                                               cudaStream_t s) {
      return core_->AllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, NcclReduceOp::kMax, s);
    });
  }

  absl::Status Broadcast(torch::Tensor& tensor, int root) override {
    return InPlace("Broadcast", tensor, [&](torch::Tensor& t, NcclDataType type,
                                            cudaStream_t s) {
      return core_->Broadcast(t.data_ptr(), t.data_ptr(), t.numel(), type, root, s);
    });
  }

  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override {
    RETURN_IF_ERROR(core_->status());
    if (!input.defined() || !output.defined() || input.scalar_type() != output.scalar_type() ||
        output.numel() != input.numel() * world_size() || !output.is_contiguous() ||
        input.device() != output.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllGather: needs a contiguous output of the input's dtype and device with ",
          world_size(), " x the input's elements"));
    }
    ASSIGN_OR_RETURN(NcclDataType type, ToNcclType(input.scalar_type()));
    const bool on_host = input.device().is_cpu();
    if (!on_host) RETURN_IF_ERROR(CheckDevice("AllGather", input));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    torch::Tensor in, out;
    RETURN_IF_ERROR(GuardTorchStatus("AllGather", [&] {
      in = input.to(device_).contiguous();
      out = on_host ? torch::empty(output.sizes(), output.options().device(device_)) : output;
    }));
    RETURN_IF_ERROR(core_->AllGather(in.data_ptr(), out.data_ptr(), in.numel(), type, stream));
    if (!on_host) return absl::OkStatus();
    RETURN_IF_ERROR(core_->Wait(stream));
    return GuardTorchStatus("AllGather", [&] { output.copy_(out); });
  }

  absl::Status Barrier() override {
    return core_->Barrier(c10::cuda::getCurrentCUDAStream(device_.index()).stream());
  }

  CommStats Stats() const override { return stats_.Snapshot(); }
  void RecordReplayedAllReduces(uint64_t count, uint64_t bytes) override {
    stats_.RecordReplayed(count, bytes);
  }

 private:
  absl::Status CheckDevice(const char* what, const torch::Tensor& t) const {
    if (!t.is_cuda() || t.device().index() != device_.index()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": tensor on ", t.device().str(),
                                                     ", this rank's device is ", device_.str()));
    }
    return absl::OkStatus();
  }

  // Runs `op` on a contiguous device tensor holding `tensor`'s data and puts the result back:
  // directly for contiguous CUDA tensors, through a copy otherwise (CPU ones wait for the result).
  template <typename Op>
  absl::Status InPlace(const char* what, torch::Tensor& tensor, Op&& op) {
    RETURN_IF_ERROR(core_->status());
    if (!tensor.defined()) return absl::InvalidArgumentError(absl::StrCat(what, ": undefined"));
    ASSIGN_OR_RETURN(NcclDataType type, ToNcclType(tensor.scalar_type()));
    const bool on_host = tensor.device().is_cpu();
    if (!on_host) RETURN_IF_ERROR(CheckDevice(what, tensor));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    const bool direct = !on_host && tensor.is_contiguous();
    torch::Tensor work = tensor;
    if (!direct) {
      RETURN_IF_ERROR(GuardTorchStatus(what, [&] {
        work = tensor.to(device_).contiguous();
      }));
    }
    RETURN_IF_ERROR(op(work, type, stream));
    if (direct) return absl::OkStatus();
    if (on_host) RETURN_IF_ERROR(core_->Wait(stream));  // bounded: never a blind D2H sync
    return GuardTorchStatus(what, [&] { tensor.copy_(work); });
  }

  std::unique_ptr<NcclComm> core_;
  const torch::Device device_;
  StatsRecorder stats_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> core, NcclComm::Create(options));
  return std::unique_ptr<Communicator>(std::make_unique<NcclTorchCommunicator>(std::move(core)));
}

}  // namespace ditserve::comm
