#include "comm/local_communicator.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/torch_compat.h"
#include "comm/stats_recorder.h"

namespace ditserve::comm {
namespace {

enum class Op { kSum, kMax, kBroadcast, kAllGather, kBarrier };

const char* OpName(Op op) {
  switch (op) {
    case Op::kSum: return "AllReduceSum";
    case Op::kMax: return "AllReduceMax";
    case Op::kBroadcast: return "Broadcast";
    case Op::kAllGather: return "AllGather";
    case Op::kBarrier: return "Barrier";
  }
  return "?";
}

// What one rank brought to the current collective. The pointers stay valid while that rank is
// blocked inside Collective(), which is exactly as long as the slot is read.
struct Slot {
  Op op = Op::kBarrier;
  torch::Tensor* inout = nullptr;        // AllReduce*/Broadcast tensor, AllGather output
  const torch::Tensor* input = nullptr;  // AllGather input
  int root = 0;
};

// The shared state of one in-process group. Ranks rendezvous on a generation counter: the last
// rank to arrive checks that everyone called the same collective, computes the result for all
// ranks (writing into their tensors while they wait) and bumps the generation. Sums run in rank
// order on one thread, so every rank gets bit-identical output.
class LocalGroup {
 public:
  LocalGroup(int world_size, int timeout_ms)
      : world_size_(world_size), timeout_ms_(timeout_ms), slots_(world_size),
        arrived_(world_size, false), left_(world_size, false) {}

  int world_size() const { return world_size_; }

  absl::Status Collective(int rank, const Slot& slot) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    for (int r = 0; r < world_size_; ++r) {
      if (left_[r]) {
        return Break(absl::UnavailableError(
            absl::StrCat(OpName(slot.op), ": rank ", r, " has left the group")));
      }
    }
    slots_[rank] = slot;
    arrived_[rank] = true;
    ++num_arrived_;
    if (num_arrived_ == world_size_) {
      absl::Status status = Complete();
      for (int r = 0; r < world_size_; ++r) arrived_[r] = false;
      num_arrived_ = 0;
      if (!status.ok()) return Break(status);
      ++generation_;
      cv_.notify_all();
      return absl::OkStatus();
    }

    const uint64_t my_generation = generation_;
    auto done = [&] { return generation_ != my_generation || !broken_.ok(); };
    if (timeout_ms_ > 0) {
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
      if (!cv_.wait_until(lock, deadline, done)) {
        std::vector<int> missing;
        for (int r = 0; r < world_size_; ++r) {
          if (!arrived_[r]) missing.push_back(r);
        }
        return Break(absl::UnavailableError(absl::StrCat(
            OpName(slot.op), ": timed out after ", timeout_ms_, " ms waiting for rank(s) ",
            absl::StrJoin(missing, ","))));
      }
    } else {
      cv_.wait(lock, done);
    }
    // A completed generation wins over a later break: our result is already in place.
    if (generation_ != my_generation) return absl::OkStatus();
    return broken_;
  }

  // Called once a rank's function has returned: it will never join another collective, so a
  // collective that is waiting for it (now or later) fails at once instead of at the timeout.
  void Leave(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    left_[rank] = true;
    if (num_arrived_ > 0 && broken_.ok()) {
      Break(absl::UnavailableError(
          absl::StrCat("rank ", rank, " left the group while others wait in a collective")))
          .IgnoreError();
    }
  }

 private:
  // Marks the group unusable; every waiting and later call returns `status`. Caller holds mu_.
  absl::Status Break(absl::Status status) {
    if (broken_.ok()) broken_ = std::move(status);
    cv_.notify_all();
    return broken_;
  }

  // Runs the collective for everyone; caller holds mu_ and every slot is filled.
  absl::Status Complete() {
    RETURN_IF_ERROR(CheckSameCall());
    const Op op = slots_[0].op;
    return GuardTorchStatus(OpName(op), [&] {
      switch (op) {
        case Op::kBarrier:
          break;
        case Op::kSum:
        case Op::kMax: {
          if (world_size_ == 1) break;
          torch::Tensor acc = slots_[0].inout->clone();
          for (int r = 1; r < world_size_; ++r) {
            if (op == Op::kSum) {
              acc.add_(*slots_[r].inout);
            } else {
              acc = torch::maximum(acc, *slots_[r].inout);
            }
          }
          for (int r = 0; r < world_size_; ++r) slots_[r].inout->copy_(acc);
          break;
        }
        case Op::kBroadcast: {
          const torch::Tensor& src = *slots_[slots_[0].root].inout;
          for (int r = 0; r < world_size_; ++r) {
            if (r != slots_[0].root) slots_[r].inout->copy_(src);
          }
          break;
        }
        case Op::kAllGather: {
          const int64_t n = slots_[0].input->numel();
          for (int r = 0; r < world_size_; ++r) {
            torch::Tensor flat = slots_[r].inout->view({-1});
            for (int s = 0; s < world_size_; ++s) {
              flat.narrow(0, s * n, n).copy_(slots_[s].input->reshape({-1}));
            }
          }
          break;
        }
      }
    });
  }

  // The call-order contract, checked: a mismatch is a bug in the caller, reported to every rank.
  absl::Status CheckSameCall() const {
    const Slot& first = slots_[0];
    for (int r = 0; r < world_size_; ++r) {
      const Slot& s = slots_[r];
      if (s.op != first.op) {
        return absl::InternalError(absl::StrCat("collective mismatch: rank 0 called ",
                                                OpName(first.op), ", rank ", r, " called ",
                                                OpName(s.op)));
      }
      if (s.op == Op::kBarrier) continue;
      const torch::Tensor& t = *s.inout;
      const torch::Tensor& t0 = *first.inout;
      if (!t.defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat(OpName(s.op), ": rank ", r, " passed an undefined tensor"));
      }
      if (s.op == Op::kAllGather) {
        const torch::Tensor& in = *s.input;
        if (!in.defined() || in.scalar_type() != t.scalar_type() ||
            t.numel() != in.numel() * world_size_ || !t.is_contiguous()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "AllGather: rank ", r, " needs a contiguous output of the input's dtype with ",
              world_size_, " x the input's elements"));
        }
        if (in.sizes() != first.input->sizes() || in.scalar_type() != first.input->scalar_type()) {
          return absl::InvalidArgumentError(
              absl::StrCat("AllGather: rank ", r, "'s input differs in shape or dtype from rank 0's"));
        }
        continue;
      }
      if (t.sizes() != t0.sizes() || t.scalar_type() != t0.scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            OpName(s.op), ": rank ", r, "'s tensor differs in shape or dtype from rank 0's"));
      }
      if (s.op == Op::kBroadcast && (s.root != first.root || s.root < 0 ||
                                     s.root >= world_size_)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Broadcast: ranks disagree on the root or it is out of range (rank ", r, " gave ",
            s.root, ")"));
      }
    }
    return absl::OkStatus();
  }

  const int world_size_;
  const int timeout_ms_;

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int num_arrived_ = 0;
  std::vector<Slot> slots_;
  std::vector<bool> arrived_;
  std::vector<bool> left_;
  absl::Status broken_;  // OK while the group is usable
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  bool CapturableCollectives() const override { return group_->world_size() == 1; }

  absl::Status AllReduceSum(torch::Tensor& tensor) override {
    ScopedAllReduceTimer timer(stats_, tensor.defined() ? tensor.nbytes() : 0);
    return group_->Collective(rank_, Slot{Op::kSum, &tensor, nullptr, 0});
  }
  absl::Status AllReduceMax(torch::Tensor& tensor) override {
    return group_->Collective(rank_, Slot{Op::kMax, &tensor, nullptr, 0});
  }
  absl::Status Broadcast(torch::Tensor& tensor, int root) override {
    return group_->Collective(rank_, Slot{Op::kBroadcast, &tensor, nullptr, root});
  }
  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output) override {
    return group_->Collective(rank_, Slot{Op::kAllGather, &output, &input, 0});
  }
  absl::Status Barrier() override { return group_->Collective(rank_, Slot{}); }

  CommStats Stats() const override { return stats_.Snapshot(); }
  void RecordReplayedAllReduces(uint64_t count, uint64_t bytes) override {
    stats_.RecordReplayed(count, bytes);
  }

 private:
  std::shared_ptr<LocalGroup> group_;
  const int rank_;
  StatsRecorder stats_;
};

}  // namespace

std::unique_ptr<Communicator> MakeSingleRankCommunicator() {
  // A group of one never waits, so it needs no timeout.
  return std::make_unique<LocalCommunicator>(std::make_shared<LocalGroup>(1, 0), 0);
}

absl::Status RunLocalGroup(int world_size, const std::function<absl::Status(Communicator&)>& fn,
                           int timeout_ms) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world_size must be >= 1, got ", world_size));
  }
  auto group = std::make_shared<LocalGroup>(world_size, timeout_ms);
  std::mutex result_mu;
  absl::Status first_error;  // in time order: the root cause, not the ranks it broke
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      LocalCommunicator comm(group, rank);
      absl::Status status;
      try {
        status = fn(comm);
      } catch (const std::exception& e) {
        status = absl::InternalError(absl::StrCat("rank ", rank, " threw: ", e.what()));
      } catch (...) {
        status = absl::InternalError(absl::StrCat("rank ", rank, " threw"));
      }
      {
        std::lock_guard<std::mutex> lock(result_mu);
        if (!status.ok() && first_error.ok()) first_error = status;
      }
      group->Leave(rank);
    });
  }
  for (auto& t : threads) t.join();
  return first_error;
}

}  // namespace ditserve::comm
