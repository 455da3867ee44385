#include "comm/projection_communicator.h"

#include "comm/stats_recorder.h"

namespace ditserve::comm {
namespace {

class ProjectionCommunicator final : public Communicator {
 public:
  ProjectionCommunicator(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  bool CapturableCollectives() const override { return true; }  // nothing reaches the device

  absl::Status AllReduceSum(torch::Tensor& tensor) override {
    stats_.RecordAllReduce(static_cast<uint64_t>(tensor.numel()) * tensor.element_size(),
                           std::chrono::steady_clock::duration::zero());
    return absl::OkStatus();
  }
  absl::Status AllReduceMax(torch::Tensor&) override { return absl::OkStatus(); }
  absl::Status Broadcast(torch::Tensor&, int) override { return absl::OkStatus(); }
  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override {
    output.copy_(input.unsqueeze(0).expand({world_size_, input.numel()}).reshape(output.sizes()));
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  CommStats Stats() const override { return stats_.Snapshot(); }
  void RecordReplayedAllReduces(uint64_t count, uint64_t bytes) override {
    stats_.RecordReplayed(count, bytes);
  }

 private:
  const int rank_;
  const int world_size_;
  StatsRecorder stats_;
};

}  // namespace

std::unique_ptr<Communicator> MakeProjectionCommunicator(int rank, int world_size) {
  return std::make_unique<ProjectionCommunicator>(rank, world_size);
}

}  // namespace ditserve::comm
