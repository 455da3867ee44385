// StepObserver: a Pipeline that forwards to a loaded one and calls `on_step` on the thread that
// runs each step, before the caller's own step callback (the engine tests check which thread runs a
// step and whether the rank's device is current there). Header-only test support.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "pipeline/pipeline.h"

namespace ditserve::testing {

class StepObserver final : public pipeline::Pipeline {
 public:
  StepObserver(std::unique_ptr<pipeline::Pipeline> inner, std::function<void()> on_step)
      : inner_(std::move(inner)), on_step_(std::move(on_step)) {}
  const pipeline::ModelCard& Card() const override { return inner_->Card(); }
  absl::StatusOr<pipeline::GenerationResult> Run(const pipeline::GenerationJob& job,
                                                 const pipeline::StepCallback& on_step,
                                                 const pipeline::CancelPredicate& cancel) override {
    return inner_->Run(
        job,
        [&](const pipeline::StepEvent& e) {
          on_step_();
          on_step(e);
        },
        cancel);
  }
  uint64_t weight_bytes() const override { return inner_->weight_bytes(); }
  models::StepGraphStats transformer_graph_stats() const override {
    return inner_->transformer_graph_stats();
  }

 private:
  std::unique_ptr<pipeline::Pipeline> inner_;
  std::function<void()> on_step_;
};

}  // namespace ditserve::testing
