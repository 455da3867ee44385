#include "worker/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "pipeline/warmup_job.h"
#include "worker/comm_factory.h"
#include "worker/device_memory.h"
#include "worker/job_codec.h"

namespace ditserve::worker {
namespace {

constexpr size_t kRememberedCancels = 64;

absl::StatusOr<torch::ScalarType> ParseDtype(const std::string& dtype) {
  if (dtype == "float32" || dtype.empty()) return torch::kFloat32;
  if (dtype == "bfloat16") return torch::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat("dtype must be float32 or bfloat16, got '", dtype, "'"));
}

absl::StatusOr<pipeline::TextEncoderPlacement> ParsePlacement(const std::string& placement) {
  if (placement.empty() || placement == "auto") return pipeline::TextEncoderPlacement::kAuto;
  if (placement == "sharded") return pipeline::TextEncoderPlacement::kSharded;
  if (placement == "rank0") return pipeline::TextEncoderPlacement::kRank0;
  return absl::InvalidArgumentError(absl::StrCat(
      "text_encoder_placement must be auto, sharded or rank0, got '", placement, "'"));
}

// Codes after which this rank's group is still usable: the ranks agreed on them at a step
// boundary or before the loop (pipeline.h), so nobody is left inside a collective.
bool GroupSurvives(absl::StatusCode code) {
  return code == absl::StatusCode::kCancelled || code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kResourceExhausted;
}

}  // namespace

Engine::Engine(WorkerOptions options, EngineDeps deps)
    : options_(std::move(options)), deps_(std::move(deps)) {}

Engine::~Engine() {
  // Release the model and the group on the thread that owns the device.
  engine_.Call([this] {
    pipeline_.reset();
    std::lock_guard<std::mutex> lock(status_mu_);
    comm_.reset();
  });
}

absl::StatusOr<v1::Rendezvous> Engine::MakeRendezvous(uint32_t world_size) {
  return CreateRendezvous(world_size, options_.store_host);
}

absl::Status Engine::Init(const v1::InitRequest& request,
                          const std::function<void(const v1::InitEvent&)>& emit) {
  return engine_.Call([&] {
    return GuardTorchStatus("worker init", [&] { return InitOnEngineThread(request, emit); });
  });
}

absl::Status Engine::InitOnEngineThread(const v1::InitRequest& request,
                                        const std::function<void(const v1::InitEvent&)>& emit) {
  ready_.store(false);
  pipeline_.reset();
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    comm_.reset();
    card_.reset();
  }
  const uint32_t rank = request.rank();
  const uint32_t world = request.rendezvous().world_size();
  if (world == 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside world size ", world));
  }
  rank_.store(rank);
  ASSIGN_OR_RETURN(torch::ScalarType dtype, ParseDtype(request.dtype()));
  ASSIGN_OR_RETURN(pipeline::TextEncoderPlacement placement,
                   ParsePlacement(request.text_encoder_placement()));
  ASSIGN_OR_RETURN(binding_, deps_.bind_device(request.device(), rank, options_.device_index));
  RETURN_IF_ERROR(binding_->Bind());
  const torch::Device device = binding_->device();
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    device_ = device;
  }
  spdlog::info("rank {}/{}: joining group {} on {}", rank, world, request.rendezvous().group_id(),
               device.str());

  v1::InitEvent ev;
  ev.set_phase("group");
  emit(ev);
  CommOptions comm_options;
  comm_options.rank = static_cast<int>(rank);
  comm_options.device = device;
  comm_options.timeout_ms = request.collective_timeout_ms() ? request.collective_timeout_ms() : 300000;
  ASSIGN_OR_RETURN(const HostPort listen, ParseHostPort(options_.listen, "--listen"));
  comm_options.listen_host = listen.host;
  if (comm_options.listen_host.empty() || comm_options.listen_host == "0.0.0.0" ||
      comm_options.listen_host == "::") {
    comm_options.listen_host = options_.store_host;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> comm,
                   CreateCommunicator(request.rendezvous(), comm_options));

  const auto t0 = std::chrono::steady_clock::now();
  pipeline::PipelineOptions popts;
  popts.model_dir = request.model_dir();
  popts.device = device;
  popts.dtype = dtype;
  popts.text_encoder_placement = placement;
  popts.shard_modulation = !request.replicate_modulation();
  for (const v1::LoraAdapter& l : request.loras()) popts.loras.push_back({l.name(), l.path()});
  popts.lora_merge_max_bytes = request.lora_merge_max_bytes();
  if (!request.lora_mode().empty()) {
    ASSIGN_OR_RETURN(popts.lora_mode, lora::ParseLoraMode(request.lora_mode()));
  }
  if (!request.weights().empty()) {
    ASSIGN_OR_RETURN(popts.weights, models::ParseWeightFormat(request.weights()));
    if (popts.weights == models::WeightFormat::kFp8) {
      RETURN_IF_ERROR(models::CheckFp8Supported(device, dtype));
    }
  }
  if (request.has_cuda_graphs()) {
    if (request.cuda_graphs() > kMaxCudaGraphs) {
      return absl::InvalidArgumentError(absl::StrCat("cuda_graphs must be in 0..", kMaxCudaGraphs,
                                                     ", got ", request.cuda_graphs()));
    }
    popts.cuda_graphs = static_cast<int>(request.cuda_graphs());
  }
  if (request.staging_buffer_bytes()) popts.staging_buffer_bytes = request.staging_buffer_bytes();
  auto last_emit = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  popts.on_load_progress = [&](uint64_t loaded, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_emit < std::chrono::milliseconds(200) && loaded < total) return;
    last_emit = now;
    v1::InitEvent progress;
    progress.set_phase("load");
    progress.set_bytes_loaded(loaded);
    progress.set_bytes_total(total);
    emit(progress);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> pipe, deps_.load_pipeline(popts, comm.get()));
  // Every rank has loaded before anyone reports ready: a rank that failed to load makes the
  // others fail here (collective timeout) rather than at the first job.
  RETURN_IF_ERROR(comm->Barrier());
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t weight_bytes = pipe->weight_bytes();
  if (request.warmup()) {
    v1::InitEvent warming;
    warming.set_phase("warmup");
    emit(warming);
    const auto w0 = std::chrono::steady_clock::now();
    const pipeline::GenerationJob job =
        pipeline::WarmupJob(pipe->Card(), request.warmup_height(), request.warmup_width());
    absl::StatusOr<pipeline::GenerationResult> warm =
        pipe->Run(job, [](const pipeline::StepEvent&) {}, [] { return false; });
    if (!warm.ok()) {
      return absl::Status(warm.status().code(),
                          absl::StrCat("warm-up job (", job.height, "x", job.width, ", ",
                                       job.num_inference_steps, " steps) failed: ",
                                       warm.status().message()));
    }
    spdlog::info("rank {}: warm-up {}x{} in {:.2f} s", rank, job.height, job.width,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  RecordGraphStats(*pipe);
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    comm_ = std::move(comm);
    load_seconds_ = load_seconds;
    weight_bytes_ = weight_bytes;
    card_ = pipe->Card();
  }
  pipeline_ = std::move(pipe);
  ready_.store(true);
  spdlog::info("rank {}: ready in {:.2f} s, {} weight bytes (weights: {})", rank, load_seconds,
               weight_bytes, models::WeightFormatName(popts.weights));

  v1::InitEvent done;
  done.set_phase("ready");
  *done.mutable_model() = DescribeModel(pipeline_->Card(), world, weight_bytes);
  emit(done);
  return absl::OkStatus();
}

bool Engine::CancelRequested(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(cancel_mu_);
  return std::find(cancelled_jobs_.begin(), cancelled_jobs_.end(), job_id) != cancelled_jobs_.end();
}

void Engine::Cancel(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(cancel_mu_);
  cancelled_jobs_.push_back(job_id);
  while (cancelled_jobs_.size() > kRememberedCancels) cancelled_jobs_.pop_front();
}

absl::StatusOr<pipeline::GenerationResult> Engine::Run(
    const RunJob& job, const pipeline::StepCallback& on_step,
    const std::function<bool()>& client_cancelled) {
  return engine_.Call([&]() -> absl::StatusOr<pipeline::GenerationResult> {
    auto result = GuardTorch("job", [&] { return RunOnEngineThread(job, on_step, client_cancelled); });
    absl::StatusOr<pipeline::GenerationResult> flat =
        result.ok() ? *std::move(result) : absl::StatusOr<pipeline::GenerationResult>(result.status());
    if (!flat.ok() && !GroupSurvives(flat.status().code())) {
      // A failed collective or device error leaves the group unusable until re-formed.
      ready_.store(false);
    }
    return flat;
  });
}

absl::StatusOr<pipeline::GenerationResult> Engine::RunOnEngineThread(
    const RunJob& job, const pipeline::StepCallback& on_step,
    const std::function<bool()>& client_cancelled) {
  if (!ready_.load() || !pipeline_) {
    return absl::FailedPreconditionError("worker has not been initialised (call Init first)");
  }
  if (!binding_->IsCurrent()) {
    return absl::InternalError(absl::StrCat("the rank's device ", binding_->device().str(),
                                            " is not current on the engine thread"));
  }
  auto cancel = [&] {
    return CancelRequested(job.job_id) || (client_cancelled && client_cancelled());
  };
  auto step = [&](const pipeline::StepEvent& e) {
    steps_.fetch_add(1);
    step_micros_.fetch_add(static_cast<uint64_t>(e.seconds * 1e6));
    if (on_step) on_step(e);
  };
  absl::StatusOr<pipeline::GenerationResult> result = pipeline_->Run(job.job, step, cancel);
  RecordGraphStats(*pipeline_);
  return result;
}

std::optional<pipeline::ModelCard> Engine::Card() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return card_;
}

void Engine::RecordGraphStats(const pipeline::Pipeline& pipe) {
  const models::StepGraphStats g = pipe.transformer_graph_stats();
  graph_replays_.store(g.replays);
  graph_captures_.store(g.captures);
}

v1::WorkerStatus Engine::Status() const {
  v1::WorkerStatus s;
  s.set_rank(rank_.load());
  s.set_ready(ready_.load());
  s.set_resident_bytes(ResidentBytes());
  s.set_steps(steps_.load());
  s.set_step_seconds_sum(static_cast<double>(step_micros_.load()) / 1e6);
  s.set_cuda_graph_replays(graph_replays_.load());
  s.set_cuda_graph_captures(graph_captures_.load());
  std::lock_guard<std::mutex> lock(status_mu_);
  DeviceMemoryInfo mem = QueryDeviceMemory(device_);
  s.mutable_memory()->set_allocated_bytes(mem.allocated);
  s.mutable_memory()->set_reserved_bytes(mem.reserved);
  s.mutable_memory()->set_peak_allocated_bytes(mem.peak_allocated);
  s.mutable_memory()->set_total_bytes(mem.total);
  s.set_weight_bytes(ready_.load() ? weight_bytes_ : 0);
  s.set_load_seconds(load_seconds_);
  if (comm_) {
    comm::CommStats cs = comm_->Stats();
    s.set_allreduce_count(cs.allreduce_count);
    s.set_allreduce_bytes(cs.allreduce_bytes);
    s.set_allreduce_seconds(cs.allreduce_seconds);
  }
  return s;
}

}  // namespace ditserve::worker
