#include "worker/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/group_survival.h"
#include "common/host_port.h"
#include "common/model_flags.h"
#include "common/status_macros.h"
#include "common/torch_guard.h"
#include "pipeline/warmup_job.h"
#include "worker/device_memory.h"

namespace ditserve::worker {
namespace {

constexpr size_t kRememberedCancels = 64;

torch::ScalarType TorchDtype(ModelDtype dtype) {
  return dtype == ModelDtype::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
}

// The pipeline options of `config` on `device` (every value already parsed; FP8 checked against
// the bound device). `on_load_progress` is left to the caller.
absl::StatusOr<pipeline::PipelineOptions> PipelineOptionsFor(const InitConfig& config,
                                                             torch::Device device) {
  pipeline::PipelineOptions popts;
  popts.model_dir = config.model_dir;
  popts.device = device;
  popts.dtype = TorchDtype(config.dtype);
  popts.text_encoder_placement = config.text_encoder_placement;
  popts.shard_modulation = !config.replicate_modulation;
  popts.loras = config.loras;
  popts.lora_merge_max_bytes = config.lora_merge_max_bytes;
  popts.lora_mode = config.lora_mode;
  popts.weights = config.weights;
  if (popts.weights == WeightFormat::kFp8) {
    RETURN_IF_ERROR(models::CheckFp8Supported(device, popts.dtype));
  }
  if (config.cuda_graphs) popts.cuda_graphs = static_cast<int>(*config.cuda_graphs);
  if (config.staging_buffer_bytes) popts.staging_buffer_bytes = config.staging_buffer_bytes;
  return popts;
}

// The warm-up job (pipeline/warmup_job.h) on a freshly loaded pipeline; its error names the job.
absl::Status RunWarmup(pipeline::Pipeline& pipe, const InitConfig& config) {
  const auto w0 = std::chrono::steady_clock::now();
  const pipeline::GenerationJob job =
      pipeline::WarmupJob(pipe.Card(), config.warmup_height, config.warmup_width);
  absl::StatusOr<pipeline::GenerationResult> warm =
      pipe.Run(job, [](const pipeline::StepEvent&) {}, [] { return false; });
  if (!warm.ok()) {
    return absl::Status(warm.status().code(),
                        absl::StrCat("warm-up job (", job.height, "x", job.width, ", ",
                                     job.num_inference_steps, " steps) failed: ",
                                     warm.status().message()));
  }
  spdlog::info("rank {}: warm-up {}x{} in {:.2f} s", config.rank, job.height, job.width,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  return absl::OkStatus();
}

template <typename T>
void Push(ProgressQueue<T>* queue, T event) {
  if (queue != nullptr) queue->Push(std::move(event));
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

absl::StatusOr<GroupRendezvous> Engine::MakeRendezvous(uint32_t world_size) {
  return CreateRendezvous(world_size, options_.store_host);
}

std::future<absl::StatusOr<InitReport>> Engine::Init(InitConfig config,
                                                     ProgressQueue<InitProgress>* progress) {
  return engine_.Submit([this, config = std::move(config), progress]() {
    absl::StatusOr<InitReport> report =
        GuardTorch("worker init", [&] { return InitOnEngineThread(config, progress); });
    if (progress != nullptr) progress->Close();
    return report;
  });
}

absl::StatusOr<InitReport> Engine::InitOnEngineThread(const InitConfig& config,
                                                      ProgressQueue<InitProgress>* progress) {
  ready_.store(false);
  pipeline_.reset();
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    comm_.reset();
    card_.reset();
  }
  const uint32_t rank = config.rank;
  const uint32_t world = config.rendezvous.world_size;
  if (world == 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside world size ", world));
  }
  rank_.store(rank);
  ASSIGN_OR_RETURN(binding_, deps_.bind_device(config.device, rank, options_.device_index));
  RETURN_IF_ERROR(binding_->Bind());
  const torch::Device device = binding_->device();
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    device_ = device;
  }
  spdlog::info("rank {}/{}: joining group {} on {}", rank, world, config.rendezvous.group_id,
               device.str());

  Push(progress, InitProgress{InitPhase::kGroup});
  CommOptions comm_options;
  comm_options.rank = static_cast<int>(rank);
  comm_options.device = device;
  comm_options.timeout_ms = config.collective_timeout_ms ? config.collective_timeout_ms : 300000;
  ASSIGN_OR_RETURN(const HostPort listen, ParseHostPort(options_.listen, "--listen"));
  comm_options.listen_host = listen.host;
  if (comm_options.listen_host.empty() || comm_options.listen_host == "0.0.0.0" ||
      comm_options.listen_host == "::") {
    comm_options.listen_host = options_.store_host;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> comm,
                   deps_.create_communicator(config.rendezvous, comm_options));

  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(pipeline::PipelineOptions popts, PipelineOptionsFor(config, device));
  auto last_push = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  popts.on_load_progress = [&](uint64_t loaded, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_push < std::chrono::milliseconds(200) && loaded < total) return;
    last_push = now;
    Push(progress, InitProgress{InitPhase::kLoad, loaded, total});
  };
  ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> pipe, deps_.load_pipeline(popts, comm.get()));
  // Every rank has loaded before anyone reports ready: a rank that failed to load makes the
  // others fail here (collective timeout) rather than at the first job.
  RETURN_IF_ERROR(comm->Barrier());
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t weight_bytes = pipe->weight_bytes();
  if (config.warmup) {
    Push(progress, InitProgress{InitPhase::kWarmup});
    RETURN_IF_ERROR(RunWarmup(*pipe, config));
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
               weight_bytes, WeightFormatName(popts.weights));
  return InitReport{pipeline_->Card(), world, weight_bytes};
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

std::future<absl::StatusOr<pipeline::GenerationResult>> Engine::Run(
    RunJob job, ProgressQueue<pipeline::StepEvent>* progress,
    std::function<bool()> client_cancelled) {
  return engine_.Submit([this, job = std::move(job), progress,
                         client_cancelled = std::move(client_cancelled)]() {
    absl::StatusOr<pipeline::GenerationResult> result =
        GuardTorch("job", [&] { return RunOnEngineThread(job, progress, client_cancelled); });
    if (!GroupSurvives(result.status().code())) {
      // A failed collective or device error leaves the group unusable until re-formed.
      ready_.store(false);
    }
    if (progress != nullptr) progress->Close();
    return result;
  });
}

absl::StatusOr<pipeline::GenerationResult> Engine::RunOnEngineThread(
    const RunJob& job, ProgressQueue<pipeline::StepEvent>* progress,
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
  // Only rank 0's progress is read (server/worker_group.cc); the others send their result alone.
  ProgressQueue<pipeline::StepEvent>* const streamed = rank_.load() == 0 ? progress : nullptr;
  auto step = [&](const pipeline::StepEvent& e) {
    steps_.fetch_add(1);
    step_micros_.fetch_add(static_cast<uint64_t>(e.seconds * 1e6));
    Push(streamed, e);
  };
  absl::StatusOr<pipeline::GenerationResult> result = pipeline_->Run(job.job, step, cancel);
  RecordGraphStats(*pipeline_);
  if (result.ok()) cached_steps_.fetch_add(result->cached_steps);
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

EngineStatus Engine::Status() const {
  EngineStatus s;
  s.rank = rank_.load();
  s.ready = ready_.load();
  s.resident_bytes = ResidentBytes();
  s.steps = steps_.load();
  s.step_seconds_sum = static_cast<double>(step_micros_.load()) / 1e6;
  s.cuda_graph_replays = graph_replays_.load();
  s.cuda_graph_captures = graph_captures_.load();
  s.cached_steps = cached_steps_.load();
  std::lock_guard<std::mutex> lock(status_mu_);
  s.memory = QueryDeviceMemory(device_);
  s.weight_bytes = s.ready ? weight_bytes_ : 0;
  s.load_seconds = load_seconds_;
  if (comm_) s.comm = comm_->Stats();
  return s;
}

}  // namespace ditserve::worker
