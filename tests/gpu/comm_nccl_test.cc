// The NCCL core on real GPUs: skipped (GTEST_SKIP) where no CUDA device is present.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/nccl_communicator.h"

namespace ditserve::comm {
namespace {

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver/device" error
    return 0;
  }
  return n;
}

#define SKIP_WITHOUT_GPUS(n)                                                    \
  do {                                                                          \
    if (DeviceCount() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s)"; \
  } while (0)

// Device buffer of floats, RAII.
struct DeviceFloats {
  explicit DeviceFloats(size_t n) : n(n) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess); }
  ~DeviceFloats() { cudaFree(p); }
  void Set(const std::vector<float>& v) {
    ASSERT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> Get() const {
    std::vector<float> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  void* p = nullptr;
  size_t n;
};

std::vector<float> Values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank + 1) * 0.25f + static_cast<float>(i);
  return v;
}

TEST(CommNccl, SingleRankCollectives) {
  SKIP_WITHOUT_GPUS(1);
  auto id = NcclGetUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(id->size(), kNcclUniqueIdBytes);
  auto comm = NcclComm::Create({/*rank=*/0, /*world_size=*/1, *id, /*device=*/0, 20000});
  ASSERT_TRUE(comm.ok()) << comm.status();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    DeviceFloats buf(1000);
    const auto v = Values(0, 1000);
    buf.Set(v);
    ASSERT_TRUE((*comm)->AllReduce(buf.p, buf.p, 1000, NcclDataType::kFloat32, NcclReduceOp::kSum,
                                   stream).ok());
    ASSERT_TRUE((*comm)->AllReduce(buf.p, buf.p, 1000, NcclDataType::kFloat32, NcclReduceOp::kMax,
                                   stream).ok());
    ASSERT_TRUE((*comm)->Broadcast(buf.p, buf.p, 1000, NcclDataType::kFloat32, 0, stream).ok());
    ASSERT_TRUE((*comm)->Wait(stream).ok());
    EXPECT_EQ(buf.Get(), v);
    DeviceFloats out(1000);
    ASSERT_TRUE((*comm)->AllGather(buf.p, out.p, 1000, NcclDataType::kFloat32, stream).ok());
    ASSERT_TRUE((*comm)->Barrier(stream).ok());
    EXPECT_EQ(out.Get(), v);
    EXPECT_EQ((*comm)->Broadcast(buf.p, buf.p, 1, NcclDataType::kFloat32, 1, stream).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE((*comm)->Wait(stream).ok());  // unusable after an error
  }
  comm->reset();
  cudaStreamDestroy(stream);
}

TEST(CommNccl, MissingPeerTimesOutAtInit) {
  SKIP_WITHOUT_GPUS(1);
  auto id = NcclGetUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const auto start = std::chrono::steady_clock::now();
  auto comm = NcclComm::Create({0, 2, *id, 0, 3000});  // rank 1 never comes
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable) << comm.status();
  EXPECT_LT(s, 30.0);
}

TEST(CommNccl, RejectsBadOptions) {
  EXPECT_EQ(NcclComm::Create({0, 1, "short", 0, 1000}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NcclComm::Create({2, 2, std::string(kNcclUniqueIdBytes, '\0'), 0, 1000}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// One thread per GPU, each its own rank (NCCL allows several ranks per process).
TEST(CommNccl, AllGpusSumAndGather) {
  SKIP_WITHOUT_GPUS(2);
  const int n = DeviceCount();
  auto id = NcclGetUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  constexpr size_t kCount = 1 << 20;
  std::vector<std::vector<float>> sums(n), gathered(n);
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = NcclComm::Create({r, n, *id, r, 60000});
      if (!comm.ok()) {
        statuses[r] = comm.status();
        return;
      }
      cudaStream_t stream;
      cudaStreamCreate(&stream);
      {
        DeviceFloats buf(kCount), out(kCount * n);
        buf.Set(Values(r, kCount));
        absl::Status s = (*comm)->AllReduce(buf.p, buf.p, kCount, NcclDataType::kFloat32,
                                            NcclReduceOp::kSum, stream);
        if (s.ok()) s = (*comm)->Wait(stream);
        sums[r] = buf.Get();
        buf.Set(Values(r, kCount));
        if (s.ok()) s = (*comm)->AllGather(buf.p, out.p, kCount, NcclDataType::kFloat32, stream);
        if (s.ok()) s = (*comm)->Barrier(stream);
        statuses[r] = s;
        gathered[r] = out.Get();
      }
      cudaStreamDestroy(stream);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> want_sum(kCount, 0.0);
  for (int s = 0; s < n; ++s) {
    const auto v = Values(s, kCount);
    for (size_t i = 0; i < kCount; ++i) want_sum[i] += v[i];
  }
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    EXPECT_EQ(sums[r], sums[0]) << "rank " << r << " differs from rank 0";
    double worst = 0;
    for (size_t i = 0; i < kCount; ++i) {
      worst = std::max(worst, std::abs(sums[r][i] - want_sum[i]) / std::max(1.0, want_sum[i]));
    }
    EXPECT_LT(worst, 1e-6) << "rank " << r;
    for (int s = 0; s < n; ++s) {
      const auto want = Values(s, kCount);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), gathered[r].begin() + s * kCount))
          << "rank " << r << " piece " << s;
    }
  }
}

}  // namespace
}  // namespace ditserve::comm
