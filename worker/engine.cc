#include "worker/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/comm_factory.h"
#include "worker/device_memory.h"
#include "pipeline/tensor_proto.h"

namespace ditserve::worker {
namespace {

constexpr size_t kRememberedCancels = 64;

absl::StatusOr<torch::ScalarType> ParseDtype(const std::string& dtype) {
  if (dtype == "float32" || dtype.empty()) return torch::kFloat32;
  if (dtype == "bfloat16") return torch::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat("dtype must be float32 or bfloat16, got '", dtype, "'"));
}

}  // namespace

Engine::Engine(WorkerOptions options) : options_(std::move(options)) {}

Engine::~Engine() {
  std::lock_guard<std::mutex> lock(job_mu_);
  pipeline_.reset();
  std::lock_guard<std::mutex> status_lock(status_mu_);
  comm_.reset();
}

absl::StatusOr<v1::Rendezvous> Engine::MakeRendezvous(uint32_t world_size) {
  return CreateRendezvous(world_size, options_.store_host);
}

absl::Status Engine::Init(const v1::InitRequest& request,
                          const std::function<void(const v1::InitEvent&)>& emit) {
  std::lock_guard<std::mutex> lock(job_mu_);
  ready_.store(false);
  pipeline_.reset();
  {
    std::lock_guard<std::mutex> status_lock(status_mu_);
    comm_.reset();
  }
  const uint32_t rank = request.rank();
  const uint32_t world = request.rendezvous().world_size();
  if (world == 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is outside world size ", world));
  }
  rank_.store(rank);
  ASSIGN_OR_RETURN(torch::ScalarType dtype, ParseDtype(request.dtype()));
  ASSIGN_OR_RETURN(torch::Device device,
                   SelectDevice(request.device(), rank, options_.device_index));
  spdlog::info("rank {}/{}: joining group {} on {}", rank, world, request.rendezvous().group_id(),
               device.str());

  v1::InitEvent ev;
  ev.set_phase("group");
  emit(ev);
  CommOptions comm_options;
  comm_options.rank = static_cast<int>(rank);
  comm_options.device = device;
  comm_options.timeout_ms = request.collective_timeout_ms() ? request.collective_timeout_ms() : 300000;
  comm_options.listen_host = options_.listen.substr(0, options_.listen.rfind(':'));
  if (comm_options.listen_host.empty() || comm_options.listen_host == "0.0.0.0" ||
      comm_options.listen_host == "[::]") {
    comm_options.listen_host = options_.store_host;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> comm,
                   CreateCommunicator(request.rendezvous(), comm_options));

  const auto t0 = std::chrono::steady_clock::now();
  pipeline::PipelineOptions popts;
  popts.model_dir = request.model_dir();
  popts.device = device;
  popts.dtype = dtype;
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
  ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> pipe,
                   pipeline::LoadPipeline(popts, comm.get()));
  // Every rank has loaded before anyone reports ready: a rank that failed to load makes the
  // others fail here (collective timeout) rather than at the first job.
  RETURN_IF_ERROR(comm->Barrier());
  load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  weight_bytes_ = pipe->weight_bytes();
  {
    std::lock_guard<std::mutex> status_lock(status_mu_);
    comm_ = std::move(comm);
  }
  pipeline_ = std::move(pipe);
  ready_.store(true);
  spdlog::info("rank {}: ready in {:.2f} s, {} weight bytes", rank, load_seconds_, weight_bytes_);

  v1::InitEvent done;
  done.set_phase("ready");
  *done.mutable_model() = pipeline_->Describe();
  done.mutable_model()->set_tp_degree(world);
  done.mutable_model()->set_weight_bytes(weight_bytes_);
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

absl::StatusOr<v1::RunResult> Engine::Run(
    const v1::RunRequest& request, const std::function<void(const v1::StepProgress&)>& on_step,
    const std::function<bool()>& client_cancelled) {
  std::lock_guard<std::mutex> lock(job_mu_);
  if (!ready_.load() || !pipeline_) {
    return absl::FailedPreconditionError("worker has not been initialised (call Init first)");
  }
  const std::string job_id = request.job_id();
  auto cancel = [&] { return CancelRequested(job_id) || (client_cancelled && client_cancelled()); };
  auto step = [&](const pipeline::StepEvent& e) {
    steps_.fetch_add(1);
    step_micros_.fetch_add(static_cast<uint64_t>(e.seconds * 1e6));
    v1::StepProgress p;
    p.set_step(e.step);
    p.set_total_steps(e.total);
    p.set_step_seconds(e.seconds);
    on_step(p);
  };
  auto result = pipeline_->Run(request, step, cancel);
  if (!result.ok() && result.status().code() != absl::StatusCode::kCancelled &&
      result.status().code() != absl::StatusCode::kInvalidArgument) {
    // A failed collective or device error leaves the group unusable until re-formed.
    ready_.store(false);
  }
  return result;
}

absl::StatusOr<v1::ForwardResponse> Engine::Forward(const v1::ForwardRequest& request) {
  std::lock_guard<std::mutex> lock(job_mu_);
  if (!ready_.load() || !pipeline_) {
    return absl::FailedPreconditionError("worker has not been initialised (call Init first)");
  }
  std::map<std::string, torch::Tensor> inputs;
  for (const auto& [name, proto] : request.inputs()) {
    ASSIGN_OR_RETURN(torch::Tensor t, pipeline::TensorFromProto(proto, absl::StrCat("inputs[", name, "]")));
    inputs[name] = t;
  }
  ASSIGN_OR_RETURN(torch::Tensor out, pipeline_->Forward(inputs));
  v1::ForwardResponse resp;
  *resp.mutable_out() = pipeline::TensorToProto(out);
  return resp;
}

v1::WorkerStatus Engine::Status() const {
  v1::WorkerStatus s;
  s.set_rank(rank_.load());
  s.set_ready(ready_.load());
  DeviceMemoryInfo mem = QueryDeviceMemory();
  s.mutable_memory()->set_allocated_bytes(mem.allocated);
  s.mutable_memory()->set_reserved_bytes(mem.reserved);
  s.mutable_memory()->set_peak_allocated_bytes(mem.peak_allocated);
  s.mutable_memory()->set_total_bytes(mem.total);
  s.set_resident_bytes(ResidentBytes());
  s.set_steps(steps_.load());
  s.set_step_seconds_sum(static_cast<double>(step_micros_.load()) / 1e6);
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    s.set_weight_bytes(ready_.load() ? weight_bytes_ : 0);
    s.set_load_seconds(load_seconds_);
    if (comm_) {
      comm::CommStats cs = comm_->Stats();
      s.set_allreduce_count(cs.allreduce_count);
      s.set_allreduce_bytes(cs.allreduce_bytes);
      s.set_allreduce_seconds(cs.allreduce_seconds);
    }
  }
  return s;
}

}  // namespace ditserve::worker
