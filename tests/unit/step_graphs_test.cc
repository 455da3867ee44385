// StepGraphs' policy (eager first, capture second, replay after), input staging, keys, the
// weight/LoRA fingerprint, the graph limit, capture failures and the all-reduce accounting, with a
// fake backend whose "graph" freezes what a CUDA graph bakes in at capture: the weight values at
// the addresses it read. The CUDA backend itself runs in the gpu tests (cuda_pipeline_test etc.).
#include "models/common/step_graphs.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "comm/local_communicator.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "models/common/linear.h"

namespace ditserve::models {
namespace {

// Counts all-reduces like the real communicators (AllReduceSum and replayed ones) without moving data.
class CountingCommunicator : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  absl::Status AllReduceSum(torch::Tensor& t) override {
    stats_.allreduce_count += 1;
    stats_.allreduce_bytes += t.nbytes();
    return absl::OkStatus();
  }
  absl::Status AllReduceMax(torch::Tensor&) override { return absl::OkStatus(); }
  absl::Status Broadcast(torch::Tensor&, int) override { return absl::OkStatus(); }
  absl::Status AllGather(const torch::Tensor&, torch::Tensor&) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  comm::CommStats Stats() const override { return stats_; }
  void RecordReplayedAllReduces(uint64_t count, uint64_t bytes) override {
    stats_.allreduce_count += count;
    stats_.allreduce_bytes += bytes;
  }

 private:
  comm::CommStats stats_;
};

// The model under test: y = x · Wᵀ (+ LoRA terms), one all-reduce of y (a no-op here).
struct TinyModel {
  std::shared_ptr<Linear> layer = std::make_shared<Linear>(torch::randn({3, 4}), torch::Tensor());
  LinearRegistry registry;
  CountingCommunicator comm;
  comm::Communicator* group = &comm;  // where the body's all-reduce goes
  int body_calls = 0;

  TinyModel() { registry.Add("proj", layer.get()); }

  torch::Tensor Body(const std::vector<torch::Tensor>& in) {
    ++body_calls;
    torch::Tensor y = layer->Forward(in[0]);
    if (in[1].defined()) y = y + in[1];
    torch::Tensor r = y.clone();
    ThrowIfError(group->AllReduceSum(r));
    return y;
  }
};

// A graph that replays with the weight and LoRA values the body saw at capture, reading the staged
// inputs' memory at replay: what a CUDA graph does.
class FakeGraph : public CapturedGraph {
 public:
  FakeGraph(std::vector<torch::Tensor> inputs, torch::Tensor weight, std::vector<LoraTerm> lora,
            torch::Tensor output)
      : inputs_(std::move(inputs)), weight_(std::move(weight)), lora_(std::move(lora)),
        output_(std::move(output)) {}
  void Replay() override {
    torch::Tensor y = torch::matmul(inputs_[0], weight_.t());
    for (const LoraTerm& t : lora_) y = y + torch::matmul(torch::matmul(inputs_[0], t.a.t()), t.b.t());
    if (inputs_[1].defined()) y = y + inputs_[1];
    output_.copy_(y);
  }

 private:
  std::vector<torch::Tensor> inputs_;
  torch::Tensor weight_;
  std::vector<LoraTerm> lora_;
  torch::Tensor output_;
};

class FakeBackend : public GraphBackend {
 public:
  FakeBackend(const Linear* layer, bool* fail, const std::string* message)
      : layer_(layer), fail_(fail), message_(message) {}
  std::unique_ptr<CapturedGraph> Capture(const std::vector<torch::Tensor>& inputs, const Body& body,
                                         torch::Tensor* output) override {
    // Like the CUDA backend: the first capture runs the body op by op first (a warm-up whose
    // collectives really run).
    if (!warmed_up_) {
      body(inputs);
      warmed_up_ = true;
    }
    torch::Tensor out = body(inputs);  // the capture pass (the fake computes; a graph would not)
    if (*fail_) throw std::runtime_error(*message_);
    *output = torch::full_like(out, std::nanf(""));  // nothing has run yet
    std::vector<LoraTerm> lora;
    for (const LoraTerm& t : layer_->lora_terms()) lora.push_back({t.a.clone(), t.b.clone()});
    return std::make_unique<FakeGraph>(inputs, layer_->weight().clone(), std::move(lora), *output);
  }

 private:
  const Linear* layer_;
  bool* fail_;
  const std::string* message_;
  bool warmed_up_ = false;
};

struct Fixture {
  TinyModel model;
  bool fail = false;
  std::string fail_message = "operation not permitted when stream is capturing";
  StepGraphs graphs{"tiny", &model.registry, &model.comm,
                    std::make_unique<FakeBackend>(model.layer.get(), &fail, &fail_message), 2};

  torch::Tensor Run(const torch::Tensor& x, const torch::Tensor& bias = {}, const std::string& host = "") {
    return graphs.Run({x, bias}, torch::kCPU, host, {},
                      [this](const std::vector<torch::Tensor>& in) { return model.Body(in); });
  }
  torch::Tensor Expected(const torch::Tensor& x, const torch::Tensor& bias = {}) {
    torch::Tensor y = model.layer->Forward(x);
    return bias.defined() ? y + bias : y;
  }
};

TEST(StepGraphs, EagerThenCaptureThenReplayWithEachCallsInputs) {
  Fixture f;
  for (int i = 0; i < 5; ++i) {
    torch::Tensor x = torch::randn({2, 4});  // new values every step, same shape
    torch::Tensor y = f.Run(x);
    EXPECT_TRUE(torch::allclose(y, f.Expected(x))) << "call " << i;
  }
  EXPECT_EQ(f.graphs.stats().eager, 1u);
  EXPECT_EQ(f.graphs.stats().captures, 1u);
  EXPECT_EQ(f.graphs.stats().replays, 4u);  // the capturing call's included
  EXPECT_EQ(f.graphs.graphs(), 1u);
  // Every forward's all-reduce counted once: eager, the capture's warm-up (run op by op), the
  // capture (recorded, run by its replay), and each later replay — a replay counts one forward's
  // all-reduces, not the warm-up's too.
  EXPECT_EQ(f.model.body_calls, 3);
  EXPECT_EQ(f.model.comm.Stats().allreduce_count, 6u);
  EXPECT_EQ(f.model.comm.Stats().allreduce_bytes, 6u * 2 * 3 * sizeof(float));
}

TEST(StepGraphs, ReturnedTensorsAreNotOverwrittenByTheNextReplay) {
  Fixture f;
  f.Run(torch::randn({2, 4}));
  torch::Tensor x1 = torch::randn({2, 4}), x2 = torch::randn({2, 4});
  torch::Tensor y1 = f.Run(x1);
  torch::Tensor y2 = f.Run(x2);
  EXPECT_TRUE(torch::allclose(y1, f.Expected(x1)));
  EXPECT_TRUE(torch::allclose(y2, f.Expected(x2)));
}

TEST(StepGraphs, ShapesUndefinedInputsAndHostKeysAreSeparateGraphs) {
  Fixture f;
  torch::Tensor b = torch::randn({3});
  for (int i = 0; i < 3; ++i) {
    torch::Tensor x = torch::randn({2, 4});
    EXPECT_TRUE(torch::allclose(f.Run(x), f.Expected(x)));
    EXPECT_TRUE(torch::allclose(f.Run(x, b), f.Expected(x, b)));
  }
  EXPECT_EQ(f.graphs.stats().captures, 2u);
  // A host key the forward reads on the host (e.g. an image grid) splits them too.
  for (int i = 0; i < 2; ++i) f.Run(torch::randn({2, 4}), {}, "grid 2x2");
  EXPECT_EQ(f.graphs.stats().captures, 3u);
  EXPECT_EQ(f.graphs.graphs(), 2u);  // the limit: least recently used dropped
}

TEST(StepGraphs, LeastRecentlyUsedGraphGoesFirst) {
  Fixture f;
  auto twice = [&](int64_t rows) {
    f.Run(torch::randn({rows, 4}));
    f.Run(torch::randn({rows, 4}));
  };
  twice(1);
  twice(2);
  f.Run(torch::randn({1, 4}));  // rows 1 used last
  twice(3);                     // evicts rows 2
  const uint64_t captures = f.graphs.stats().captures;
  f.Run(torch::randn({1, 4}));
  EXPECT_EQ(f.graphs.stats().captures, captures);  // still kept: a replay
  const uint64_t eager = f.graphs.stats().eager;
  f.Run(torch::randn({2, 4}));
  EXPECT_EQ(f.graphs.stats().eager, eager + 1);  // dropped: seen anew
}

TEST(StepGraphs, NewWeightStorageOrLoraTermsGetTheirOwnGraphs) {
  Fixture f;
  torch::Tensor x = torch::randn({2, 4});
  auto right = [&] { EXPECT_TRUE(torch::allclose(f.Run(x), f.model.layer->Forward(x), 1e-5, 1e-5)); };
  right();
  right();
  ASSERT_EQ(f.graphs.stats().captures, 1u);

  // What a LoRA merge does: the weight's storage points at new bytes. A new state: eager once, then
  // captured.
  torch::Tensor merged = f.model.layer->weight() + 1.0;
  at::DataPtr original = f.model.layer->weight().storage().unsafeGetStorageImpl()->set_data_ptr(
      merged.storage().unsafeGetStorageImpl()->set_data_ptr(at::DataPtr()));
  right();
  right();
  EXPECT_EQ(f.graphs.stats().captures, 2u);
  // The merge undone: the base model's graph is still there and replays.
  f.model.layer->weight().storage().unsafeGetStorageImpl()->set_data_ptr(std::move(original));
  const uint64_t replays = f.graphs.stats().replays;
  right();
  EXPECT_EQ(f.graphs.stats().captures, 2u);
  EXPECT_EQ(f.graphs.stats().replays, replays + 1);

  // Runtime LoRA terms: a graph without them would lack their kernels; another set, other factors.
  f.model.layer->SetLoraTerms({LoraTerm{torch::randn({2, 4}), torch::randn({3, 2})}});
  right();
  right();
  f.model.layer->SetLoraTerms({LoraTerm{torch::randn({2, 4}), torch::randn({3, 2})}});
  right();
  right();
  right();
  EXPECT_EQ(f.graphs.stats().captures, 4u);
  EXPECT_EQ(f.graphs.graphs(), 2u);  // the limit

  // Terms of another rank at the same addresses (the allocator hands freed blocks out again):
  // other kernels, so another graph.
  torch::Tensor a_buffer = torch::randn({3 * 4}), b_buffer = torch::randn({3 * 3});
  f.model.layer->SetLoraTerms({LoraTerm{a_buffer.narrow(0, 0, 8).view({2, 4}),
                                        b_buffer.narrow(0, 0, 6).view({3, 2})}});
  right();
  right();
  f.model.layer->SetLoraTerms({LoraTerm{a_buffer.view({3, 4}), b_buffer.view({3, 3})}});
  right();
  right();
  EXPECT_EQ(f.graphs.stats().captures, 6u);
}

TEST(StepGraphs, FailedCaptureFallsBackToEagerForGood) {
  Fixture f;
  f.fail = true;
  torch::Tensor x = torch::randn({2, 4});
  f.Run(x);
  EXPECT_TRUE(torch::allclose(f.Run(x), f.Expected(x)));  // the capture threw; answered eagerly
  EXPECT_EQ(f.graphs.stats().failed_captures, 1u);
  EXPECT_FALSE(f.graphs.enabled());
  f.fail = false;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(f.Run(x), f.Expected(x)));
  EXPECT_EQ(f.graphs.stats().captures, 0u);
  EXPECT_EQ(f.graphs.graphs(), 0u);
}

TEST(StepGraphs, CaptureOutOfMemoryLeavesThatShapeOpByOpOnly) {
  Fixture f;
  f.fail_message = "CUDA out of memory. Tried to allocate 2.00 GiB";
  f.fail = true;
  torch::Tensor big = torch::randn({8, 4});
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(torch::allclose(f.Run(big), f.Expected(big)));
  EXPECT_EQ(f.graphs.stats().failed_captures, 1u);  // tried once, not at every other step
  EXPECT_TRUE(f.graphs.enabled());
  f.fail = false;
  torch::Tensor small = torch::randn({2, 4});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(f.Run(small), f.Expected(small)));
  EXPECT_EQ(f.graphs.stats().captures, 1u);  // other shapes still get theirs
  f.Run(big);
  EXPECT_EQ(f.graphs.stats().captures, 1u);  // and the one that did not fit stays op by op
}

// Two ranks whose states differ (rank 1's weight moves to another address, as a LoRA merge's copy
// may land elsewhere on each rank; rank 1's capture of one shape runs out of memory): they still
// take the same action at every call (the body's all-reduce is a real in-process collective, so a
// rank replaying while the other runs op by op would leave it waiting), and get the right answers.
TEST(StepGraphs, RanksAgreeOnReplayCaptureOrOpByOp) {
  StepGraphStats stats[2];
  const absl::Status s = comm::RunLocalGroup(2, [&](comm::Communicator& c) -> absl::Status {
    TinyModel model;
    model.group = &c;
    bool fail = false;
    std::string message = "CUDA out of memory";
    StepGraphs graphs("tiny", &model.registry, &c,
                      std::make_unique<FakeBackend>(model.layer.get(), &fail, &message), 4);
    torch::manual_seed(7);  // the same inputs on both ranks
    auto run = [&](const torch::Tensor& x) -> absl::Status {
      torch::Tensor y = graphs.Run({x, torch::Tensor()}, torch::kCPU, "", {},
                                   [&](const std::vector<torch::Tensor>& in) { return model.Body(in); });
      if (!torch::allclose(y, model.layer->Forward(x), 1e-5, 1e-5)) {
        return absl::InternalError(absl::StrCat("rank ", c.rank(), ": wrong answer"));
      }
      return absl::OkStatus();
    };
    torch::Tensor x = torch::randn({2, 4});
    for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(run(x));  // eager, capture, replay on both
    at::DataPtr original;
    torch::Tensor moved = model.layer->weight().clone();
    if (c.rank() == 1) {
      original = model.layer->weight().storage().unsafeGetStorageImpl()->set_data_ptr(
          moved.storage().unsafeGetStorageImpl()->set_data_ptr(at::DataPtr()));
    }
    // Rank 0 could replay, rank 1 has a new state: op by op on both, then a capture on both.
    for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(run(x));
    // A new shape whose capture fails on rank 1 only: dropped on both, op by op from then on.
    fail = c.rank() == 1;
    torch::Tensor big = torch::randn({8, 4});
    for (int i = 0; i < 4; ++i) RETURN_IF_ERROR(run(big));
    if (c.rank() == 1) {
      model.layer->weight().storage().unsafeGetStorageImpl()->set_data_ptr(std::move(original));
    }
    stats[c.rank()] = graphs.stats();
    return absl::OkStatus();
  }, /*timeout_ms=*/10000);
  ASSERT_TRUE(s.ok()) << s;
  for (const StepGraphStats& st : stats) {
    EXPECT_EQ(st.captures, 2u);
    EXPECT_EQ(st.replays, 4u);  // 2 + the second capture's replay + 1
    EXPECT_EQ(st.eager, 6u);    // first sight x2 (before and after the move), big: 1 + 3
    EXPECT_EQ(st.failed_captures, 1u);
  }
}

// A tensor the body reads besides its inputs and weights (Qwen-Image's RoPE table cache) lives
// as long as the graph that read it, whatever the caller's cache does meanwhile.
TEST(StepGraphs, KeepAliveTensorsLiveAsLongAsTheirGraph) {
  Fixture f;
  torch::Tensor table = torch::randn({16});
  const auto run = [&] {
    f.graphs.Run({torch::randn({2, 4}), torch::Tensor()}, torch::kCPU, "", {table},
                 [&](const std::vector<torch::Tensor>& in) { return f.model.Body(in); });
  };
  run();
  EXPECT_EQ(table.use_count(), 1);  // op by op: nothing held
  run();
  EXPECT_GT(table.use_count(), 1);  // captured: the graph holds it
  f.graphs.Clear();
  EXPECT_EQ(table.use_count(), 1);
}

TEST(StepGraphs, OffRunsTheBodyEveryTime) {
  TinyModel model;
  StepGraphs off("tiny", &model.registry, &model.comm, nullptr, 4);
  EXPECT_FALSE(off.enabled());
  for (int i = 0; i < 3; ++i) {
    off.Run({torch::randn({2, 4}), torch::Tensor()}, torch::kCPU, "", {},
            [&](const std::vector<torch::Tensor>& in) { return model.Body(in); });
  }
  EXPECT_EQ(model.body_calls, 3);
  EXPECT_EQ(off.stats().eager, 3u);
  // The factory never gives a CPU model a backend.
  EXPECT_FALSE(MakeStepGraphs("tiny", &model.registry, &model.comm, torch::kCPU, 4)->enabled());
}

}  // namespace
}  // namespace ditserve::models
