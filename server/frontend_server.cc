#include "server/frontend_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace ditserve::server {
namespace {

constexpr char kServiceName[] = "ditserve.v1.ImageGeneration";
// After the drain time: how long the cancelled job may take to stop at a step boundary before
// its calls are abandoned.
constexpr auto kCancelGrace = std::chrono::seconds(5);

}  // namespace

WorkerGroupOptions MakeWorkerGroupOptions(const FrontendOptions& options,
                                          const std::string& worker_binary) {
  WorkerGroupOptions g;
  g.remote_addresses = options.WorkerAddresses();
  g.spawn_count = static_cast<uint32_t>(options.spawn_workers);
  g.worker_binary = options.worker_binary.empty() ? worker_binary : options.worker_binary;
  g.worker_host = options.worker_host;
  g.worker_extra_args = {"--log-level", options.log.level, "--log-format", options.log.format};
  g.init_template.set_model_dir(options.model_dir);
  g.init_template.set_device(options.device);
  g.init_template.set_dtype(options.dtype);
  g.init_template.set_weights(options.weights);
  g.init_template.set_cuda_graphs(static_cast<uint32_t>(options.cuda_graphs));
  g.init_template.set_text_encoder_placement(options.text_encoder_placement);
  g.init_template.set_replicate_modulation(options.replicate_modulation);
  g.init_template.set_warmup(options.WarmupEnabled());
  g.init_template.set_warmup_height(static_cast<uint32_t>(options.default_height));
  g.init_template.set_warmup_width(static_cast<uint32_t>(options.default_width));
  g.init_template.set_staging_buffer_bytes(options.staging_buffer_mib << 20);
  g.init_template.set_collective_timeout_ms(static_cast<uint32_t>(options.collective_timeout_ms));
  g.init_template.set_lora_mode(options.lora_mode);
  g.init_template.set_lora_merge_max_bytes(options.lora_merge_max_mib << 20);
  for (const LoraAdapterOption& lora : options.lora_adapters) {
    worker::v1::LoraAdapter* adapter = g.init_template.add_loras();
    adapter->set_name(lora.name);
    adapter->set_path(lora.path);
  }
  g.init_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.init_timeout_seconds * 1000));
  g.collective_timeout = std::chrono::milliseconds(options.collective_timeout_ms);
  g.heartbeat_interval = std::chrono::milliseconds(options.heartbeat_interval_ms);
  g.heartbeat_timeout = std::chrono::milliseconds(options.heartbeat_timeout_ms);
  return g;
}

absl::StatusOr<std::unique_ptr<FrontendServer>> FrontendServer::Start(
    const FrontendOptions& options, WorkerGroupOptions group_options) {
  std::unique_ptr<FrontendServer> f(new FrontendServer());
  f->options_ = options;
  auto security = ApiSecurity::Load(options.security);
  if (!security.ok()) {
    f->drained_ = true;  // nothing runs yet
    return security.status();
  }
  f->security_ = *std::move(security);
  f->group_ = std::make_unique<WorkerGroup>(std::move(group_options));
  f->queue_ = std::make_unique<AdmissionQueue>(f->options_.max_queue);
  f->metrics_ = std::make_unique<FrontendMetrics>(&f->options_, f->queue_.get(), f->group_.get());
  f->queue_->SetDropObserver(f->metrics_->dispatch_observer().on_dropped);
  f->dispatcher_ = std::make_unique<Dispatcher>(f->queue_.get(), f->group_.get(),
                                                f->options_.max_batch,
                                                f->metrics_->dispatch_observer());
  f->service_ = std::make_unique<ImageGenerationService>(
      &f->options_, f->queue_.get(), f->group_.get(), f->metrics_->request_observer(),
      f->security_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(f->options_.listen, f->security_->GrpcCredentials(), &f->port_);
  builder.RegisterService(f->service_.get());
  // Precomputed embeddings can be a few MiB, input images up to --max-input-image-bytes each:
  // --max-request-bytes (0: 64 MiB + 10 images of the image limit, AutoMaxRequestBytes).
  builder.SetMaxReceiveMessageSize(static_cast<int>(f->options_.MaxRequestBytes()));
  builder.SetMaxSendMessageSize(256 << 20);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  f->server_ = builder.BuildAndStart();
  if (!f->server_ || f->port_ == 0) {
    f->drained_ = true;  // nothing runs yet
    return absl::UnavailableError(absl::StrCat("cannot listen on ", f->options_.listen));
  }
  f->SetHealth(false);
  FrontendServer* self = f.get();
  f->health_listener_ = f->group_->AddReadinessListener([self](bool ready) { self->SetHealth(ready); });
  if (absl::Status s = f->metrics_->Start(
          f->options_.metrics_listen, f->options_.metrics_tls ? f->security_->cert_file() : "",
          f->options_.metrics_tls ? f->security_->key_file() : ""); !s.ok()) {
    f->Drain(std::chrono::seconds(0));
    return s;
  }
  if (!f->options_.http_listen.empty()) {
    auto http = HttpApi::Start(MakeHttpApiOptions(f->options_), f->service_.get(), f->security_);
    if (!http.ok()) {
      f->Drain(std::chrono::seconds(0));
      return http.status();
    }
    f->http_ = *std::move(http);
  }
  f->group_->Start();
  f->dispatcher_->Start();
  return f;
}

FrontendServer::~FrontendServer() { Drain(std::chrono::seconds(0)); }

void FrontendServer::SetHealth(bool serving) {
  std::lock_guard<std::mutex> lock(health_mu_);
  if (draining_ || !server_) return;
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus(serving);
  health->SetServingStatus(kServiceName, serving);
}

void FrontendServer::Drain(std::chrono::duration<double> drain_time) {
  if (drained_) return;
  drained_ = true;
  service_->StartDraining();  // first: NOT_SERVING then implies refusal
  SetHealth(false);
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    draining_ = true;
  }
  // Queued requests end at once (their clients can retry on another replica); the running job
  // may finish within the drain time.
  queue_->Close(absl::UnavailableError("server is shutting down"));
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(drain_time);
  if (!service_->WaitUntilIdle(until)) {
    spdlog::warn("drain time over with {} request(s) in flight: cancelling them",
                 service_->in_flight());
  }
  dispatcher_->CancelRunning(
      absl::UnavailableError("server is shutting down; the job was cancelled"));
  if (!dispatcher_->WaitUntilStopped(Clock::now() + kCancelGrace)) {
    spdlog::warn("the cancelled job did not stop within {} s; abandoning it",
                 std::chrono::duration<double>(kCancelGrace).count());
  }
  group_->Shutdown();  // abandons a job still running, stops spawned workers
  dispatcher_->Join();
  group_->RemoveReadinessListener(health_listener_);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (http_) http_->Stop();  // every generation has ended: only quick answers are left to send
  metrics_->Stop();
  server_->Wait();
}

}  // namespace ditserve::server
