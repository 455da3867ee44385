// The NCCL Communicator on LibTorch-CUDA tensors (CUDA variant only); skips without a GPU.
#include <cuda_runtime_api.h>

#include <thread>
#include <vector>

#include <c10/cuda/CUDAGuard.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/agree.h"
#include "comm/nccl_torch_communicator.h"

namespace ditserve::comm {
namespace {

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

torch::Tensor RankData(int rank, torch::Device device, torch::Dtype dtype) {
  return (torch::arange(4096, torch::kFloat64) * 0.001 * (rank + 1) + rank).to(dtype).to(device);
}

TEST(CommNcclTorch, SingleRank) {
  if (DeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  auto id = NcclGetUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto comm = CreateNcclCommunicator({0, 1, *id, 0, 20000});
  ASSERT_TRUE(comm.ok()) << comm.status();
  Communicator& c = **comm;
  const torch::Device dev(torch::kCUDA, 0);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor t = RankData(0, dev, dtype);
    const torch::Tensor want = t.clone();
    ASSERT_TRUE(c.AllReduceSum(t).ok());
    ASSERT_TRUE(c.AllReduceMax(t).ok());
    ASSERT_TRUE(c.Broadcast(t, 0).ok());
    EXPECT_TRUE(t.equal(want));
  }
  // Non-contiguous CUDA and CPU tensors go through copies.
  torch::Tensor nc = torch::arange(12, torch::kFloat32).reshape({3, 4}).to(dev).t();
  ASSERT_TRUE(c.AllReduceSum(nc).ok());
  EXPECT_TRUE(nc.cpu().equal(torch::arange(12, torch::kFloat32).reshape({3, 4}).t()));
  torch::Tensor host = torch::full({5}, 3.0f);
  ASSERT_TRUE(c.AllReduceSum(host).ok());
  EXPECT_TRUE(host.equal(torch::full({5}, 3.0f)));
  torch::Tensor out = torch::empty({4096}, torch::TensorOptions().device(dev));
  ASSERT_TRUE(c.AllGather(RankData(0, dev, torch::kFloat32), out).ok());
  EXPECT_TRUE(out.equal(RankData(0, dev, torch::kFloat32)));
  auto flag = AgreeOnFlag(c, true);
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_TRUE(*flag);
  ASSERT_TRUE(c.Barrier().ok());
  EXPECT_EQ(c.Stats().allreduce_count, 4u);
  torch::Tensor wrong = torch::ones({2}, torch::kComplexFloat).to(dev);
  EXPECT_EQ(c.AllReduceSum(wrong).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CommNcclTorch, AllGpus) {
  const int n = DeviceCount();
  if (n < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  auto id = NcclGetUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<torch::Tensor> sums(n);
  std::vector<int> flags(n, -1);
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(r));
      auto comm = CreateNcclCommunicator({r, n, *id, r, 60000});
      if (!comm.ok()) {
        statuses[r] = comm.status();
        return;
      }
      torch::Tensor t = RankData(r, torch::Device(torch::kCUDA, r), torch::kFloat32);
      absl::Status s = (*comm)->AllReduceSum(t);
      auto flag = s.ok() ? AgreeOnFlag(**comm, r == n - 1) : absl::StatusOr<bool>(s);
      statuses[r] = flag.status();
      if (flag.ok()) flags[r] = *flag ? 1 : 0;
      sums[r] = t.cpu();
    });
  }
  for (auto& t : threads) t.join();
  torch::Tensor want = torch::zeros({4096}, torch::kFloat64);
  for (int r = 0; r < n; ++r) want += RankData(r, torch::kCPU, torch::kFloat64);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(flags[r], 1);
    EXPECT_TRUE(sums[r].equal(sums[0]));
    EXPECT_LT((sums[r].to(torch::kFloat64) - want).abs().max().item<double>(), 1e-3);
  }
}

}  // namespace
}  // namespace ditserve::comm
