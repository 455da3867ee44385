// The typed vocabulary of the worker engine (engine.h): what Init takes (InitConfig, with the group's
// GroupRendezvous), what it reports while it runs (InitProgress) and when it is done (InitReport),
// and what Status answers (EngineStatus). No wire format here: worker/job_codec.h is the one place
// these meet ditserve.worker.v1 messages. Plain values; copy them freely between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/model_flags.h"
#include "models/lora/lora_adapter.h"
#include "pipeline/job.h"
#include "worker/device_memory.h"

namespace ditserve::worker {

// Where the ranks of one group meet (worker.v1.Rendezvous): created by rank 0 (MakeRendezvous) and
// handed to every rank's Init by the frontend.
struct GroupRendezvous {
  uint32_t world_size = 0;
  std::string nccl_unique_id;  // CUDA variant: ncclGetUniqueId's 128 bytes
  std::string store_host;      // CPU variant: the TCP store rank 0 hosts for Gloo
  uint32_t store_port = 0;
  std::string group_id;        // changes every time the group is re-formed
};

// One rank's Init, every value parsed (worker/job_codec.h: InitConfigFromRequest).
struct InitConfig {
  uint32_t rank = 0;
  GroupRendezvous rendezvous;
  std::string model_dir;
  DeviceKind device = DeviceKind::kCpu;
  ModelDtype dtype = ModelDtype::kFloat32;
  uint64_t staging_buffer_bytes = 0;   // 0: the pipeline's default
  uint32_t collective_timeout_ms = 0;  // 0: 300000
  TextEncoderPlacement text_encoder_placement = TextEncoderPlacement::kAuto;
  bool replicate_modulation = false;
  // One warm-up job after loading, before ready, at this size (0: the model's default size).
  bool warmup = false;
  uint32_t warmup_height = 0;
  uint32_t warmup_width = 0;
  std::vector<lora::LoraAdapterSpec> loras;
  LoraMode lora_mode = LoraMode::kMerge;
  uint64_t lora_merge_max_bytes = 0;
  WeightFormat weights = WeightFormat::kModelDtype;
  std::optional<uint32_t> cuda_graphs;  // 0..kMaxCudaGraphs; unset: the pipeline's default
};

// What Init reports while it runs, in this order: kGroup (joining the group), kLoad (bytes of the
// rank's shard loaded, at most every 200 ms and at the end), kWarmup (the warm-up job, if any).
enum class InitPhase { kGroup, kLoad, kWarmup };
struct InitProgress {
  InitPhase phase = InitPhase::kGroup;
  uint64_t bytes_loaded = 0;  // kLoad
  uint64_t bytes_total = 0;   // kLoad
};

// A successful Init: the rank is ready with this model (the "ready" event's ModelDescription).
struct InitReport {
  pipeline::ModelCard card;
  uint32_t world_size = 0;
  uint64_t weight_bytes = 0;
};

// The rank's state, answered from any thread, also while a job runs (worker.v1.WorkerStatus).
struct EngineStatus {
  uint32_t rank = 0;
  bool ready = false;
  DeviceMemoryInfo memory;
  uint64_t weight_bytes = 0;  // 0 unless ready
  uint64_t resident_bytes = 0;
  double load_seconds = 0;
  comm::CommStats comm;  // zeros without a group
  uint64_t steps = 0;    // denoising steps run since the worker started
  double step_seconds_sum = 0;
  // Transformer forwards answered by a CUDA graph replay, and graphs captured, since the start.
  uint64_t cuda_graph_replays = 0;
  uint64_t cuda_graph_captures = 0;
  // Transformer passes answered from the step cache (GenerationResult::cached_steps of the jobs
  // that succeeded), since the start.
  uint64_t cached_steps = 0;
};

}  // namespace ditserve::worker
