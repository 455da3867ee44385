// The in-process communicators: results, determinism, call-order checks, timeouts, stats.
#include <atomic>
#include <cmath>
#include <cstring>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "comm/agree.h"
#include "comm/projection_communicator.h"
#include "comm/local_communicator.h"

namespace ditserve::comm {
namespace {

// Distinct, rank-dependent data with non-trivial float rounding.
torch::Tensor RankData(int rank, std::vector<int64_t> shape, torch::Dtype dtype = torch::kFloat32) {
  // A private generator: the ranks call this concurrently from their threads.
  at::Generator gen = compat::SeededCpuGenerator(1000 + rank);
  return (torch::randn(shape, gen, torch::kFloat64) * std::pow(10.0, rank)).to(dtype);
}

bool BitEqual(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

class CommLocalGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(CommLocalGroupTest, AllReduceSumIsRankOrderedAndBitIdentical) {
  const int n = GetParam();
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    // Expected: ((x0 + x1) + x2) + ... in the tensor's dtype, computed independently here.
    torch::Tensor expected = RankData(0, {3, 5, 7}, dtype);
    for (int r = 1; r < n; ++r) expected = expected + RankData(r, {3, 5, 7}, dtype);
    std::vector<torch::Tensor> results(n);
    ASSERT_TRUE(RunLocalGroup(n, [&](Communicator& c) -> absl::Status {
                  EXPECT_EQ(c.world_size(), n);
                  torch::Tensor t = RankData(c.rank(), {3, 5, 7}, dtype);
                  RETURN_IF_ERROR(c.AllReduceSum(t));
                  results[c.rank()] = t;
                  return absl::OkStatus();
                }).ok());
    for (int r = 0; r < n; ++r) EXPECT_TRUE(BitEqual(results[r], expected)) << "rank " << r;
  }
}

TEST_P(CommLocalGroupTest, AllReduceMax) {
  const int n = GetParam();
  torch::Tensor expected = RankData(0, {64});
  for (int r = 1; r < n; ++r) expected = torch::maximum(expected, RankData(r, {64}));
  std::vector<torch::Tensor> results(n);
  ASSERT_TRUE(RunLocalGroup(n, [&](Communicator& c) -> absl::Status {
                torch::Tensor t = RankData(c.rank(), {64});
                RETURN_IF_ERROR(c.AllReduceMax(t));
                results[c.rank()] = t;
                return absl::OkStatus();
              }).ok());
  for (int r = 0; r < n; ++r) EXPECT_TRUE(BitEqual(results[r], expected)) << "rank " << r;
}

TEST_P(CommLocalGroupTest, BroadcastFromEveryRoot) {
  const int n = GetParam();
  for (int root = 0; root < n; ++root) {
    std::vector<torch::Tensor> results(n);
    ASSERT_TRUE(RunLocalGroup(n, [&](Communicator& c) -> absl::Status {
                  torch::Tensor t = RankData(c.rank(), {4, 9});
                  RETURN_IF_ERROR(c.Broadcast(t, root));
                  results[c.rank()] = t;
                  return absl::OkStatus();
                }).ok());
    for (int r = 0; r < n; ++r) EXPECT_TRUE(BitEqual(results[r], RankData(root, {4, 9})));
  }
}

TEST_P(CommLocalGroupTest, AllGatherConcatenatesInRankOrder) {
  const int n = GetParam();
  std::vector<torch::Tensor> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(RankData(r, {2, 3, 5}));
  const torch::Tensor expected = torch::cat(inputs, 0);
  std::vector<torch::Tensor> results(n);
  ASSERT_TRUE(RunLocalGroup(n, [&](Communicator& c) -> absl::Status {
                torch::Tensor out = torch::full({2 * n, 3, 5}, -1.0f);
                RETURN_IF_ERROR(c.AllGather(RankData(c.rank(), {2, 3, 5}), out));
                results[c.rank()] = out;
                return absl::OkStatus();
              }).ok());
  for (int r = 0; r < n; ++r) EXPECT_TRUE(BitEqual(results[r], expected)) << "rank " << r;
}

TEST_P(CommLocalGroupTest, BarrierHoldsEveryoneUntilAllArrive) {
  const int n = GetParam();
  std::atomic<int> before{0};
  std::atomic<int> violations{0};
  ASSERT_TRUE(RunLocalGroup(n, [&](Communicator& c) -> absl::Status {
                for (int round = 1; round <= 5; ++round) {
                  // Stagger arrivals so a broken barrier would let an early rank through.
                  std::this_thread::sleep_for(std::chrono::milliseconds(3 * c.rank()));
                  before.fetch_add(1);
                  RETURN_IF_ERROR(c.Barrier());
                  if (before.load() < round * n) violations.fetch_add(1);
                  RETURN_IF_ERROR(c.Barrier());
                }
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(before.load(), 5 * n);
}

TEST_P(CommLocalGroupTest, AgreeOnFlag) {
  const int n = GetParam();
  for (int raiser = -1; raiser < n; ++raiser) {
    std::vector<int> agreed(n, -1);
    ASSERT_TRUE(RunLocalGroup(n, [&](Communicator& c) -> absl::Status {
                  ASSIGN_OR_RETURN(bool stop, AgreeOnFlag(c, c.rank() == raiser));
                  agreed[c.rank()] = stop ? 1 : 0;
                  return absl::OkStatus();
                }).ok());
    for (int r = 0; r < n; ++r) EXPECT_EQ(agreed[r], raiser >= 0 ? 1 : 0) << "raiser " << raiser;
  }
}

TEST_P(CommLocalGroupTest, StatsCountAllReduceSumOnly) {
  const int n = GetParam();
  std::vector<CommStats> stats(n);
  ASSERT_TRUE(RunLocalGroup(n, [&](Communicator& c) -> absl::Status {
                torch::Tensor t = torch::ones({10, 10});  // 400 bytes
                for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(c.AllReduceSum(t));
                RETURN_IF_ERROR(c.AllReduceMax(t));
                RETURN_IF_ERROR(c.Barrier());
                stats[c.rank()] = c.Stats();
                return absl::OkStatus();
              }).ok());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(stats[r].allreduce_count, 3u);
    EXPECT_EQ(stats[r].allreduce_bytes, 1200u);
    EXPECT_GT(stats[r].allreduce_seconds, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(CommWorldSizes, CommLocalGroupTest, ::testing::Values(1, 2, 4));

TEST(CommSingleRank, CollectivesAreIdentity) {
  auto c = MakeSingleRankCommunicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->world_size(), 1);
  torch::Tensor t = RankData(3, {5});
  const torch::Tensor orig = t.clone();
  ASSERT_TRUE(c->AllReduceSum(t).ok());
  ASSERT_TRUE(c->AllReduceMax(t).ok());
  ASSERT_TRUE(c->Broadcast(t, 0).ok());
  ASSERT_TRUE(c->Barrier().ok());
  EXPECT_TRUE(BitEqual(t, orig));
  torch::Tensor out = torch::zeros({5});
  ASSERT_TRUE(c->AllGather(t, out).ok());
  EXPECT_TRUE(BitEqual(out, orig));
  EXPECT_EQ(c->Stats().allreduce_count, 1u);
  EXPECT_EQ(c->Stats().allreduce_bytes, 20u);
  auto flag = AgreeOnFlag(*c, true);
  ASSERT_TRUE(flag.ok());
  EXPECT_TRUE(*flag);
}

TEST(CommSingleRank, RejectsBadArguments) {
  auto c = MakeSingleRankCommunicator();
  torch::Tensor t = torch::ones({4});
  EXPECT_EQ(c->Broadcast(t, 1).code(), absl::StatusCode::kInvalidArgument);
  auto c2 = MakeSingleRankCommunicator();
  torch::Tensor out = torch::zeros({3});
  EXPECT_EQ(c2->AllGather(t, out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CommLocalGroupFailures, SkippedCollectiveTimesOutWithUnavailable) {
  std::vector<absl::Status> statuses(2);
  std::vector<double> seconds(2);
  absl::Status group = RunLocalGroup(
      2,
      [&](Communicator& c) -> absl::Status {
        const auto start = std::chrono::steady_clock::now();
        torch::Tensor t = torch::ones({8});
        if (c.rank() == 0) {
          statuses[0] = c.AllReduceSum(t);
          // The group is now unusable for good.
          EXPECT_EQ(c.Barrier().code(), absl::StatusCode::kUnavailable);
        } else {
          // Stays alive but never joins: only the timeout can free rank 0.
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          statuses[1] = c.AllReduceSum(t);
        }
        seconds[c.rank()] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return statuses[c.rank()];
      },
      /*timeout_ms=*/200);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kUnavailable) << statuses[0];
  EXPECT_NE(statuses[0].message().find("timed out"), absl::string_view::npos) << statuses[0];
  EXPECT_GE(seconds[0], 0.19);
  EXPECT_LT(seconds[0], 1.2);
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kUnavailable);  // joins a broken group
  EXPECT_EQ(group.code(), absl::StatusCode::kUnavailable);
}

TEST(CommLocalGroupFailures, RankThatLeavesFailsOthersAtOnce) {
  std::vector<absl::Status> statuses(4);
  const auto start = std::chrono::steady_clock::now();
  absl::Status group = RunLocalGroup(
      4,
      [&](Communicator& c) -> absl::Status {
        if (c.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          return absl::InvalidArgumentError("rank 2 failed on its own");
        }
        torch::Tensor t = torch::ones({8});
        statuses[c.rank()] = c.AllReduceSum(t);
        return statuses[c.rank()];
      },
      /*timeout_ms=*/60000);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed, 10.0);  // far below the 60 s timeout
  for (int r : {0, 1, 3}) EXPECT_EQ(statuses[r].code(), absl::StatusCode::kUnavailable) << r;
  // The root cause comes back, not the consequences.
  EXPECT_EQ(group.code(), absl::StatusCode::kInvalidArgument) << group;
}

TEST(CommLocalGroupFailures, MismatchedCollectivesFailOnEveryRank) {
  std::vector<absl::Status> statuses(2);
  absl::Status group = RunLocalGroup(2, [&](Communicator& c) -> absl::Status {
    torch::Tensor t = torch::ones({8});
    statuses[c.rank()] = c.rank() == 0 ? c.AllReduceSum(t) : c.Broadcast(t, 0);
    return absl::OkStatus();
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kInternal);
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(group.ok());

  statuses.assign(2, absl::OkStatus());
  RunLocalGroup(2, [&](Communicator& c) -> absl::Status {
    torch::Tensor t = torch::ones({c.rank() == 0 ? 8 : 9});
    statuses[c.rank()] = c.AllReduceSum(t);
    return absl::OkStatus();
  }).IgnoreError();
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInvalidArgument);
}

TEST(CommLocalGroupFailures, ExceptionBecomesInternal) {
  absl::Status group = RunLocalGroup(2, [&](Communicator& c) -> absl::Status {
    if (c.rank() == 1) throw std::runtime_error("boom");
    return c.Barrier();
  });
  EXPECT_EQ(group.code(), absl::StatusCode::kInternal);
  EXPECT_NE(group.message().find("boom"), absl::string_view::npos);
  EXPECT_EQ(RunLocalGroup(0, [](Communicator&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kInvalidArgument);
}

// Stats are readable from another thread while collectives run (TSan-friendly atomics).
TEST(CommLocalGroupStats, ReadableFromAnotherThread) {
  std::atomic<bool> done{false};
  std::atomic<uint64_t> last_seen{0};
  absl::Status group = RunLocalGroup(2, [&](Communicator& c) -> absl::Status {
    std::thread reader;
    if (c.rank() == 0) {
      reader = std::thread([&] {
        while (!done.load()) last_seen.store(c.Stats().allreduce_count);
      });
    }
    torch::Tensor t = torch::ones({16});
    absl::Status status;
    for (int i = 0; i < 200 && status.ok(); ++i) status = c.AllReduceSum(t);
    if (c.rank() == 0) {
      done.store(true);
      reader.join();
      last_seen.store(c.Stats().allreduce_count);
    }
    return status;
  });
  ASSERT_TRUE(group.ok());
  EXPECT_EQ(last_seen.load(), 200u);
}

}  // namespace
}  // namespace ditserve::comm

namespace ditserve::comm {
namespace {

// The step benchmarks' --tp projection: rank `r` of a group that does not exist. Collectives return
// at once and leave the local value; AllReduceSum calls and their bytes are counted.
TEST(ProjectionCommunicator, CountsAllReducesAndLeavesTheLocalValues) {
  auto comm = MakeProjectionCommunicator(0, 4);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 4);
  torch::Tensor a = torch::arange(6, torch::kFloat32);
  torch::Tensor b = torch::ones({2, 3}, torch::kBFloat16);
  const torch::Tensor a0 = a.clone();
  ASSERT_TRUE(comm->AllReduceSum(a).ok());
  ASSERT_TRUE(comm->AllReduceSum(b).ok());
  ASSERT_TRUE(comm->AllReduceMax(a).ok());
  ASSERT_TRUE(comm->Broadcast(a, 1).ok());
  ASSERT_TRUE(comm->Barrier().ok());
  EXPECT_TRUE(torch::equal(a, a0));
  const CommStats stats = comm->Stats();
  EXPECT_EQ(stats.allreduce_count, 2u);
  EXPECT_EQ(stats.allreduce_bytes, 6u * 4 + 6u * 2);
  torch::Tensor gathered = torch::empty({4, 6});
  ASSERT_TRUE(comm->AllGather(a, gathered).ok());
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(torch::equal(gathered[r], a0));
}

}  // namespace
}  // namespace ditserve::comm
