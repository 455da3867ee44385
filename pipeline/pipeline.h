// Pipeline: everything one rank runs for a generation job, behind one interface so the worker
// service does not know model families.
//
// Call order across ranks: every rank of the group calls Run (or Forward) with the same request,
// concurrently; ranks execute the same sequence of collectives. Cancellation is collective: at
// each step boundary each rank contributes its local cancel_requested() and all ranks agree (one
// all-reduce of a flag), so they stop at the same step and nobody is left inside a collective.
// Only rank 0 returns images; the other ranks return an empty RunResult.
//
// Threads: one job at a time per Pipeline (the worker serialises jobs).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "ditserve/worker/v1/worker.pb.h"
#include "worker/comm/communicator.h"

namespace ditserve::pipeline {

struct StepEvent {
  uint32_t step = 0;  // 1-based
  uint32_t total = 0;
  double seconds = 0;
};

struct PipelineOptions {
  std::string model_dir;  // pipeline root (model_index.json) or a transformer folder
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat32;
  uint64_t staging_buffer_bytes = 64ull << 20;
  // (bytes loaded, bytes total) while loading this rank's shard.
  std::function<void(uint64_t, uint64_t)> on_load_progress;
};

class Pipeline {
 public:
  virtual ~Pipeline() = default;

  // What the frontend reports as ModelInfo (rank 0's answer is authoritative).
  virtual worker::v1::ModelDescription Describe() const = 0;

  virtual absl::StatusOr<worker::v1::RunResult> Run(
      const worker::v1::RunRequest& request, const std::function<void(const StepEvent&)>& on_step,
      const std::function<bool()>& cancel_requested) = 0;

  // One transformer forward on named inputs (diffusers' argument names); every rank returns the
  // full output.
  virtual absl::StatusOr<torch::Tensor> Forward(
      const std::map<std::string, torch::Tensor>& inputs) = 0;

  // Bytes of weights this rank holds on its device.
  virtual uint64_t weight_bytes() const = 0;
};

// "…/FLUX.1-dev/" and "…/FLUX.1-dev" both name the model "FLUX.1-dev".
std::string ModelNameFromDir(const std::string& model_dir);

// Loads this rank's part of the model in `options.model_dir` (the family is read from
// model_index.json or config.json). `comm` must outlive the pipeline.
absl::StatusOr<std::unique_ptr<Pipeline>> LoadPipeline(const PipelineOptions& options,
                                                       comm::Communicator* comm);

}  // namespace ditserve::pipeline
